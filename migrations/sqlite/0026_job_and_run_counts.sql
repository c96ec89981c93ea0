-- The dashboard's counts of jobs and runs by state (docs/architecture.md, "Live
-- pages") and the `refine_jobs` gauge were a count of every job or run, the
-- dashboard's also counting each success's L0 rows to tell `degraded` from
-- `succeeded`. Now a success says whether it is degraded (set when it ends), and
-- triggers keep the jobs and the runs by state as data, in the writing
-- transaction: a read sums a few rows, however many jobs and runs there are.
ALTER TABLE refine_jobs ADD COLUMN degraded INTEGER NOT NULL DEFAULT 0;
UPDATE refine_jobs SET degraded = 1 WHERE status = 'succeeded'
  AND EXISTS (SELECT 1 FROM refine_l0_runs l WHERE l.job_id = refine_jobs.id AND l.status <> 'valid');
CREATE INDEX refine_jobs_degraded ON refine_jobs (id) WHERE degraded;

-- `kind`: 'job' or 'run'. `scope`: '' counts every one (no project id is empty), a
-- project's id its own. `stripe` spreads counts over rows on Postgres, where
-- writers run in parallel; SQLite has one writer and uses stripe 0.
CREATE TABLE refine_counts (
    kind   TEXT NOT NULL,
    scope  TEXT NOT NULL,
    state  TEXT NOT NULL,
    stripe INTEGER NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (kind, scope, state, stripe)
);
INSERT INTO refine_counts (kind, scope, state, stripe, n)
SELECT 'job', '', CASE WHEN degraded THEN 'degraded' ELSE status END, 0, COUNT(*)
FROM refine_jobs GROUP BY 3;
INSERT INTO refine_counts (kind, scope, state, stripe, n)
SELECT 'job', project_id, CASE WHEN degraded THEN 'degraded' ELSE status END, 0, COUNT(*)
FROM refine_jobs WHERE project_id IS NOT NULL GROUP BY 2, 3;
INSERT INTO refine_counts (kind, scope, state, stripe, n)
SELECT 'run', '', status, 0, COUNT(*) FROM refine_runs GROUP BY 3;
INSERT INTO refine_counts (kind, scope, state, stripe, n)
SELECT 'run', project_id, status, 0, COUNT(*)
FROM refine_runs WHERE project_id IS NOT NULL GROUP BY 2, 3;

CREATE TRIGGER refine_jobs_counted_on_insert AFTER INSERT ON refine_jobs
BEGIN
    INSERT INTO refine_counts (kind, scope, state, stripe, n)
    SELECT 'job', s.scope, CASE WHEN NEW.degraded THEN 'degraded' ELSE NEW.status END, 0, 1
    FROM (SELECT '' AS scope UNION ALL SELECT NEW.project_id) AS s
    WHERE s.scope IS NOT NULL
    ON CONFLICT (kind, scope, state, stripe) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER refine_jobs_counted_on_update AFTER UPDATE OF status, degraded ON refine_jobs
WHEN (CASE WHEN OLD.degraded THEN 'degraded' ELSE OLD.status END)
  <> (CASE WHEN NEW.degraded THEN 'degraded' ELSE NEW.status END)
BEGIN
    UPDATE refine_counts SET n = n - 1
    WHERE kind = 'job' AND scope IN ('', OLD.project_id) AND stripe = 0
      AND state = CASE WHEN OLD.degraded THEN 'degraded' ELSE OLD.status END;
    INSERT INTO refine_counts (kind, scope, state, stripe, n)
    SELECT 'job', s.scope, CASE WHEN NEW.degraded THEN 'degraded' ELSE NEW.status END, 0, 1
    FROM (SELECT '' AS scope UNION ALL SELECT NEW.project_id) AS s
    WHERE s.scope IS NOT NULL
    ON CONFLICT (kind, scope, state, stripe) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER refine_jobs_counted_on_delete AFTER DELETE ON refine_jobs
BEGIN
    UPDATE refine_counts SET n = n - 1
    WHERE kind = 'job' AND scope IN ('', OLD.project_id) AND stripe = 0
      AND state = CASE WHEN OLD.degraded THEN 'degraded' ELSE OLD.status END;
END;

-- Runs are never degraded: their state is their status.
CREATE TRIGGER refine_runs_counted_on_insert AFTER INSERT ON refine_runs
BEGIN
    INSERT INTO refine_counts (kind, scope, state, stripe, n)
    SELECT 'run', s.scope, NEW.status, 0, 1
    FROM (SELECT '' AS scope UNION ALL SELECT NEW.project_id) AS s
    WHERE s.scope IS NOT NULL
    ON CONFLICT (kind, scope, state, stripe) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER refine_runs_counted_on_update AFTER UPDATE OF status ON refine_runs
WHEN OLD.status <> NEW.status
BEGIN
    UPDATE refine_counts SET n = n - 1
    WHERE kind = 'run' AND scope IN ('', OLD.project_id) AND stripe = 0 AND state = OLD.status;
    INSERT INTO refine_counts (kind, scope, state, stripe, n)
    SELECT 'run', s.scope, NEW.status, 0, 1
    FROM (SELECT '' AS scope UNION ALL SELECT NEW.project_id) AS s
    WHERE s.scope IS NOT NULL
    ON CONFLICT (kind, scope, state, stripe) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER refine_runs_counted_on_delete AFTER DELETE ON refine_runs
BEGIN
    UPDATE refine_counts SET n = n - 1
    WHERE kind = 'run' AND scope IN ('', OLD.project_id) AND stripe = 0 AND state = OLD.status;
END;
