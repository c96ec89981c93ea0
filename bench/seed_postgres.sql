-- A realistic history for a migrated, empty plangate database on Postgres, generated
-- inside the server (INSERT … SELECT generate_series: no rows cross the wire, which
-- beats COPY from a client). Used by bench/scale.sh (full size) and by the query-plan
-- test tests/api/query_plans.rs (small size). The size comes from settings set before this
-- file runs (psql `SET seed.lists = 10000;` or the test's SET statements):
--   seed.projects        projects                            (200)
--   seed.lists           task lists, spread over a year      (10000)
--   seed.tasks_per_list  tasks per list, 10 per wave         (100)
--   seed.jobs            finished refine jobs, last 29 days  (200000)
--   seed.tracks          tracks                              (2000)
--   seed.run_every       one run of 4 phase jobs per this many jobs (40)
-- Each list has 5 cycles' worth of team_pk per project; each task after the first wave
-- depends on 3 tasks of the previous wave (~2.7 edges per task); each job has 4 L0
-- rows and 11 events; 4 in every seed.run_every jobs belong to a run of 4 phases. Older lists are
-- done; the newest tenth are in progress. Every id is derived from its number (md5),
-- so callers can compute them: list i is md5('list:' || i)::uuid, task p of list i is
-- md5('task:' || i || ':' || p)::uuid, job j is time-ordered like the v7 ids the
-- server makes. Job ids and track ids are easiest read back with a query.

CREATE TEMP TABLE seed_size AS SELECT
    current_setting('seed.projects')::int AS projects,
    current_setting('seed.lists')::int AS lists,
    current_setting('seed.tasks_per_list')::int AS per_list,
    current_setting('seed.jobs')::int AS jobs,
    current_setting('seed.tracks')::int AS tracks,
    current_setting('seed.run_every')::int AS run_every,
    date_trunc('second', now()) AS t0;

INSERT INTO teams (id, project_id, team_pk, lead_role, created_at)
SELECT md5('team:' || p || ':' || c)::uuid, 'project-' || p, 'cycle-' || c, 'lead',
       s.t0 - interval '365 days'
FROM seed_size s, generate_series(0, s.projects - 1) p, generate_series(0, 4) c;

-- List i belongs to project i % projects, cycle (i / projects) % 5.
INSERT INTO task_lists (id, project_id, team_pk, created_by, created_at)
SELECT md5('list:' || i)::uuid, 'project-' || (i % s.projects),
       'cycle-' || ((i / s.projects) % 5), 'seed',
       s.t0 - interval '365 days' + (interval '365 days' * i / s.lists)
FROM seed_size s, generate_series(0, s.lists - 1) i;

-- Status: lists in the newest tenth are in progress (first wave done, second wave
-- running or failed, the rest pending); older ones are done.
INSERT INTO tasks (id, task_list_id, position, project_id, team_pk, task_id,
                   assigned_persona, parallel_group, description, reads, writes, reviews,
                   extra, status, abandon_category, upstream_task_id, notes, attempts,
                   started_at, finished_at, created_at, updated_at)
SELECT md5('task:' || i || ':' || p)::uuid, md5('list:' || i)::uuid, p,
       'project-' || (i % s.projects), 'cycle-' || ((i / s.projects) % 5),
       'T' || (p / 10 + 1) || '.' || (p % 10 + 1),
       (ARRAY['backend', 'frontend', 'qa', 'docs'])[p % 4 + 1],
       p / 10 + 1,
       'Implement part ' || p || ' of the feature: change the module, add tests, update the docs.',
       jsonb_build_array('src/mod' || (p % 10) || '.rs', 'docs/spec' || (p % 3) || '.md'),
       jsonb_build_array('src/part' || p || '.rs'),
       NULL, '{}'::jsonb, st.status, NULL, NULL, NULL,
       CASE WHEN st.status = 'pending' THEN 0 ELSE 1 END,
       CASE WHEN st.status = 'pending' THEN NULL ELSE c.at + interval '1 hour' END,
       CASE WHEN st.status IN ('done', 'failed') THEN c.at + interval '2 hours' END,
       c.at, c.at
FROM seed_size s, generate_series(0, s.lists - 1) i,
     generate_series(0, s.per_list - 1) p,
     LATERAL (SELECT s.t0 - interval '365 days' + (interval '365 days' * i / s.lists) AS at) c,
     LATERAL (SELECT CASE
         WHEN i < s.lists - s.lists / 10 THEN 'done'
         WHEN p / 10 = 0 THEN 'done'
         WHEN p / 10 = 1 THEN (ARRAY['running', 'done', 'running', 'failed'])[p % 4 + 1]
         ELSE 'pending' END AS status) st;

INSERT INTO task_dependencies (task_id, depends_on, position)
SELECT md5('task:' || i || ':' || p)::uuid,
       md5('task:' || i || ':' || ((p / 10 - 1) * 10 + (p + k) % 10))::uuid, k
FROM seed_size s, generate_series(0, s.lists - 1) i,
     generate_series(10, s.per_list - 1) p, generate_series(0, 2) k;

-- What is ready, as the writes keep it (migration 0015): unfinished dependencies
-- per task and each list's tasks by status in 16 rows.
UPDATE tasks SET unmet_deps = u.n
FROM (SELECT d.task_id, COUNT(*) AS n FROM task_dependencies d
      JOIN tasks p ON p.id = d.depends_on WHERE p.status <> 'done' GROUP BY d.task_id) u
WHERE tasks.id = u.task_id;
INSERT INTO task_list_counts (task_list_id, stripe, pending, running, done, failed, abandoned)
SELECT task_list_id, position % 16,
       SUM(CASE WHEN status = 'pending' THEN 1 ELSE 0 END),
       SUM(CASE WHEN status = 'running' THEN 1 ELSE 0 END),
       SUM(CASE WHEN status = 'done' THEN 1 ELSE 0 END),
       SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END),
       SUM(CASE WHEN status = 'abandoned' THEN 1 ELSE 0 END)
FROM tasks GROUP BY task_list_id, position % 16;
INSERT INTO task_wave_counts (task_list_id, parallel_group, stripe, unfinished)
SELECT task_list_id, parallel_group, position % 16,
       SUM(CASE WHEN status IN ('pending', 'running') THEN 1 ELSE 0 END)
FROM tasks GROUP BY task_list_id, parallel_group, position % 16;

-- Tracks: copies of one template document (the caller PUTs `seed-template` through
-- the API first, so the shape is whatever the server writes), each with its own id.
INSERT INTO tracks (track_id, metadata, revision, created_at, updated_at)
SELECT 'track-' || t, jsonb_set(tpl.metadata, '{track_id}', to_jsonb('track-' || t)),
       1 + t % 7, s.t0 - interval '200 days' + interval '1 hour' * t, s.t0 - interval '1 day'
FROM seed_size s, generate_series(0, s.tracks - 1) t,
     (SELECT metadata FROM tracks WHERE track_id = 'seed-template') tpl;

-- Runs: every run_every-th job number starts a run whose 4 phase jobs are j .. j+3.
INSERT INTO refine_runs (id, status, request, executor, project_id, team_pk,
                         idempotency_key, request_hash, result, merge_count, version,
                         created_at, finished_at, updated_at)
SELECT md5('run:' || j)::uuid, 'succeeded', '{"phases": 4}'::jsonb, 'builtin',
       'project-' || (j % s.projects), 'cycle-' || (j % 5), NULL, md5('req:' || j),
       '{"status": "succeeded", "phases": 4}'::jsonb, 1, 2,
       c.at, c.at + interval '40 seconds', c.at + interval '40 seconds'
FROM seed_size s, generate_series(0, s.jobs - 1, s.run_every) j,
     LATERAL (SELECT s.t0 - interval '29 days' + (interval '29 days' * j / s.jobs) AS at) c;

-- Job j: 90% succeeded, 7% failed, 3% cancelled; ids ordered by creation time.
INSERT INTO refine_jobs (id, kind, status, phase_id, run_id, project_id, team_pk, executor,
                         executor_kind, request, idempotency_key, request_hash, attempt,
                         max_attempts, run_after, worker_id, lease_token, lease_expires_at,
                         cancel_requested, l0_total, log, result, phase_refined_path,
                         error_code, error_message, version, created_at, started_at,
                         cancel_requested_at, finished_at, updated_at)
SELECT (lpad(to_hex((extract(epoch FROM c.at) * 1000)::bigint), 12, '0') || '7'
        || substr(md5('job:' || j), 1, 3) || '8' || substr(md5('job:' || j), 4, 15))::uuid,
       'refine', st.status, 'phase-' || (j % 4 + 1),
       CASE WHEN j % s.run_every < 4 THEN md5('run:' || (j - j % s.run_every))::uuid END,
       'project-' || (j % s.projects), 'cycle-' || (j % 5), 'builtin', 'builtin',
       '{"phase_id": "seeded"}'::jsonb, NULL, NULL, 1, 3, c.at, NULL, NULL, NULL,
       st.status = 'cancelled', 4,
       '["refine: 4 assignments in 1 batch", "batch 1: 4 valid"]'::jsonb,
       CASE WHEN st.status = 'succeeded' THEN '{"valid": 4, "invalid": 0}'::jsonb END,
       NULL,
       CASE WHEN st.status = 'failed' THEN 'internal' END,
       CASE WHEN st.status = 'failed' THEN 'seeded failure' END,
       11, c.at, c.at + interval '1 second',
       CASE WHEN st.status = 'cancelled' THEN c.at + interval '5 seconds' END,
       c.at + interval '10 seconds', c.at + interval '10 seconds'
FROM seed_size s, generate_series(0, s.jobs - 1) j,
     LATERAL (SELECT s.t0 - interval '29 days' + (interval '29 days' * j / s.jobs) AS at) c,
     LATERAL (SELECT CASE WHEN j % 100 < 90 THEN 'succeeded'
                          WHEN j % 100 < 97 THEN 'failed'
                          ELSE 'cancelled' END AS status) st;

INSERT INTO refine_l0_runs (job_id, assignment_id, position, batch, status, attempt, starts,
                            tries, project_id, team_pk, started_at, finished_at, exit_code,
                            error, output_excerpt, outcome)
SELECT j.id, 'WP-' || (a + 1), a, 1, 'valid', 1, 1, 1, j.project_id, j.team_pk,
       j.started_at, j.finished_at, 0, NULL, '{"assignment_id": "WP-' || (a + 1) || '"}',
       jsonb_build_object('assignment_id', 'WP-' || (a + 1), 'status', 'valid')
FROM refine_jobs j, generate_series(0, 3) a;

-- About 2% of the successes are degraded: their last L0 failed.
UPDATE refine_l0_runs l SET status = 'failed', outcome = NULL, exit_code = 3,
       error = 'seeded L0 failure'
FROM refine_jobs j
WHERE l.job_id = j.id AND j.status = 'succeeded' AND l.assignment_id = 'WP-4'
  AND get_byte(uuid_send(j.id), 15) < 5;

INSERT INTO refine_job_events (job_id, seq, event, data, created_at)
SELECT j.id, e, CASE WHEN e IN (1, 2, 11) THEN 'state' ELSE 'progress' END,
       CASE WHEN e = 1 THEN '{"status": "queued", "attempt": 0}'::jsonb
            WHEN e = 2 THEN '{"status": "running", "attempt": 1}'::jsonb
            WHEN e = 11 THEN jsonb_build_object('status', j.status, 'attempt', 1)
            ELSE jsonb_build_object('assignment_id', 'WP-' || ((e - 3) % 4 + 1),
                                    'status', CASE WHEN e < 7 THEN 'running' ELSE 'valid' END)
       END,
       j.created_at + interval '100 milliseconds' * e
FROM refine_jobs j, generate_series(1, 11) e;

DROP TABLE seed_size;
