-- SQLite twin of migrations/postgres/0019.
-- Why a failed L0 failed, typed, when a client can act on it (docs/jobs.md,
-- "Rate limits"): 'rate_limited', 'quota_exhausted' or NULL. The `error` text
-- stays as it was.
ALTER TABLE refine_l0_runs ADD COLUMN error_code TEXT;

-- The dashboard's job page lists that job's calls waiting for room: one job's
-- rows, not a scan of every executor's queue.
CREATE INDEX rate_limit_calls_job ON rate_limit_calls (job_id, state);
