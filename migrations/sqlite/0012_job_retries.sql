-- SQLite twin of migrations/postgres/0012 (uuids are BLOBs).
-- A retry of an ended refine job is a new job made from the same stored request
-- (docs/api.md, "Retry"): it names the job it retries. One retry per job: the
-- unique index refuses a second. No foreign key: retention may delete the
-- original first.
ALTER TABLE refine_jobs ADD COLUMN retry_of BLOB;
CREATE UNIQUE INDEX refine_jobs_retry_of ON refine_jobs (retry_of) WHERE retry_of IS NOT NULL;
