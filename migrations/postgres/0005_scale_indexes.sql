-- Indexes for a cluster with a long history (issue 17, checked by tests/api/query_plans.rs,
-- which fails on a sequential scan over a large table).
-- Job gauges (both the every-pass count of unfinished jobs and the hourly count of
-- all: an index-only scan) and `GET /v1/refine-jobs?status=`, newest first.
CREATE INDEX refine_jobs_by_status ON refine_jobs (status, id);
-- `GET /v1/refine-jobs?project_id=` (and project-limited tokens), newest first.
CREATE INDEX refine_jobs_by_project ON refine_jobs (project_id, id);
-- Retention sweep of finished runs.
CREATE INDEX refine_runs_finished ON refine_runs (finished_at) WHERE finished_at IS NOT NULL;
-- The reaper's look for runs due for a merge (few are unfinished at any time).
CREATE INDEX refine_runs_unmerged ON refine_runs (id) WHERE status IN ('running', 'cancelling');
-- Project and cycle status: counts per (wave, status) from the index alone.
DROP INDEX tasks_by_project_team;
CREATE INDEX tasks_by_project_team_status ON tasks (project_id, team_pk, parallel_group, status);
