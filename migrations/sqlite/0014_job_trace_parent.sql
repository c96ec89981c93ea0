-- The W3C traceparent of the request that created a refine job (issue #28,
-- docs/observability.md): whichever worker claims the job, on any replica or
-- after a restart, starts the job's span as a child of that request. NULL when
-- the creating server did not trace.
ALTER TABLE refine_jobs ADD COLUMN trace_parent text;
