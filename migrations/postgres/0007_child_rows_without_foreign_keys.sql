-- A job's events and L0 records no longer have foreign keys to refine_jobs. Each
-- of the ~18 rows a job writes fired a foreign-key check (a lookup and a share lock
-- of the job row): about a tenth of the queue's CPU (bench/README.md, "queue.sh").
-- The checks guarded nothing the writes do not already guarantee: every child row
-- is written in a transaction that has just inserted or updated its job row (so
-- the job exists and cannot be deleted under it), and retention deletes a job's
-- children with the job, in one transaction (docs/decisions.md).
ALTER TABLE refine_job_events DROP CONSTRAINT refine_job_events_job_id_fkey;
ALTER TABLE refine_l0_runs DROP CONSTRAINT refine_l0_runs_job_id_fkey;
