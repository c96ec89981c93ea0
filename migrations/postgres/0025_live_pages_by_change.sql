-- A live dashboard page asks twice a second whether what it shows changed
-- (docs/architecture.md, "Live pages"): the newest change among the rows a reader
-- may see is the last entry of one of these indexes, for all projects or for each
-- project of a limited token. It was a count and a scan of every row.
CREATE INDEX refine_jobs_by_change ON refine_jobs (updated_at);
CREATE INDEX refine_jobs_by_project_change ON refine_jobs (project_id, updated_at);
CREATE INDEX refine_runs_by_change ON refine_runs (updated_at);
CREATE INDEX refine_runs_by_project_change ON refine_runs (project_id, updated_at);
CREATE INDEX tracks_by_change ON tracks (updated_at);
CREATE INDEX tracks_by_project_change ON tracks (project_id, updated_at);
