-- The dashboard's counts of jobs and runs by state (docs/architecture.md, "Live
-- pages") and the `refine_jobs` gauge were a count of every job or run, the
-- dashboard's also counting each success's L0 rows to tell `degraded` from
-- `succeeded`. Now a success says whether it is degraded (set when it ends), and
-- triggers keep the jobs and the runs by state as data, in the writing
-- transaction: a read sums a few rows, however many jobs and runs there are.
ALTER TABLE refine_jobs ADD COLUMN degraded BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE refine_jobs SET degraded = TRUE WHERE status = 'succeeded'
  AND EXISTS (SELECT 1 FROM refine_l0_runs l WHERE l.job_id = refine_jobs.id AND l.status <> 'valid');
CREATE INDEX refine_jobs_degraded ON refine_jobs (id) WHERE degraded;

-- `kind`: 'job' or 'run'. `scope`: '' counts every one (no project id is empty), a
-- project's id its own. A count is the sum of its 16 `stripe` rows; one row alone
-- may be negative. A transaction writes only the stripe of its connection
-- (`pg_backend_pid() % 16`), behind that stripe's advisory lock: transactions on
-- other connections write other rows instead of queueing on one, and no two ever
-- wait on each other in a cycle (a job's end and its worker's next claim change
-- four rows in one transaction, in an order no sort can fix across two of them).
CREATE TABLE refine_counts (
    kind   TEXT NOT NULL,
    scope  TEXT NOT NULL,
    state  TEXT NOT NULL,
    stripe SMALLINT NOT NULL,
    n      BIGINT NOT NULL,
    PRIMARY KEY (kind, scope, state, stripe)
);
INSERT INTO refine_counts (kind, scope, state, stripe, n)
SELECT 'job', s.scope, CASE WHEN j.degraded THEN 'degraded' ELSE j.status END, 0, COUNT(*)
FROM refine_jobs j, LATERAL (VALUES (''), (j.project_id)) AS s (scope)
WHERE s.scope IS NOT NULL
GROUP BY 2, 3;
INSERT INTO refine_counts (kind, scope, state, stripe, n)
SELECT 'run', s.scope, r.status, 0, COUNT(*)
FROM refine_runs r, LATERAL (VALUES (''), (r.project_id)) AS s (scope)
WHERE s.scope IS NOT NULL
GROUP BY 2, 3;

-- Deferred to the commit: a stripe is locked for the commit only, not for the rest
-- of a long transaction (a job's end stores its L0 outcomes and events after its
-- status). The kind is the trigger's argument; only a job's row has `degraded`
-- (the inner IF is compiled only for a job).
CREATE FUNCTION refine_counts_keep() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    old_state TEXT;
    new_state TEXT;
    project TEXT;
    own_stripe SMALLINT := pg_backend_pid() % 16;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        old_state := OLD.status;
        project := OLD.project_id;
        IF TG_ARGV[0] = 'job' THEN
            IF OLD.degraded THEN
                old_state := 'degraded';
            END IF;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        new_state := NEW.status;
        project := NEW.project_id;
        IF TG_ARGV[0] = 'job' THEN
            IF NEW.degraded THEN
                new_state := 'degraded';
            END IF;
        END IF;
    END IF;
    IF old_state IS NOT DISTINCT FROM new_state THEN
        RETURN NULL;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('refine_counts:' || own_stripe, 0));
    INSERT INTO refine_counts AS c (kind, scope, state, stripe, n)
    SELECT TG_ARGV[0], s.scope, change.state, own_stripe, change.n
    FROM (VALUES (old_state, -1), (new_state, 1)) AS change (state, n),
         (VALUES (''), (project)) AS s (scope)
    WHERE change.state IS NOT NULL AND s.scope IS NOT NULL
    ON CONFLICT (kind, scope, state, stripe) DO UPDATE SET n = c.n + EXCLUDED.n;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER refine_jobs_counted
AFTER INSERT OR UPDATE OF status, degraded OR DELETE ON refine_jobs
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION refine_counts_keep('job');

CREATE CONSTRAINT TRIGGER refine_runs_counted
AFTER INSERT OR UPDATE OF status OR DELETE ON refine_runs
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION refine_counts_keep('run');
