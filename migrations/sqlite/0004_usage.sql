-- SQLite twin of migrations/postgres/0004.
-- What L0 calls cost (docs/jobs.md, "Usage, cost and budgets"): the usage of each
-- L0 call on its record, the size of its prompt, and the budgets of jobs and runs.
-- Totals are sums over the L0 rows, never counters: a job resumed after a crash
-- stores each L0's usage once, with its outcome, so nothing is counted twice.

ALTER TABLE refine_l0_runs ADD COLUMN input_tokens INTEGER;
ALTER TABLE refine_l0_runs ADD COLUMN output_tokens INTEGER;
ALTER TABLE refine_l0_runs ADD COLUMN cache_read_input_tokens INTEGER;
ALTER TABLE refine_l0_runs ADD COLUMN cache_creation_input_tokens INTEGER;
ALTER TABLE refine_l0_runs ADD COLUMN cost_usd REAL;
ALTER TABLE refine_l0_runs ADD COLUMN usage_model TEXT;
ALTER TABLE refine_l0_runs ADD COLUMN usage_source TEXT CHECK (usage_source IN ('reported', 'priced', 'unknown'));
ALTER TABLE refine_l0_runs ADD COLUMN prompt_bytes INTEGER;

CREATE INDEX refine_l0_runs_project_usage ON refine_l0_runs (project_id, finished_at)
    WHERE usage_source IS NOT NULL;

ALTER TABLE refine_jobs ADD COLUMN max_cost_usd REAL;
ALTER TABLE refine_jobs ADD COLUMN max_output_tokens INTEGER;
ALTER TABLE refine_jobs ADD COLUMN budget_action TEXT NOT NULL DEFAULT 'finish' CHECK (budget_action IN ('finish', 'kill'));

ALTER TABLE refine_runs ADD COLUMN max_cost_usd REAL;
ALTER TABLE refine_runs ADD COLUMN max_output_tokens INTEGER;
ALTER TABLE refine_runs ADD COLUMN budget_action TEXT NOT NULL DEFAULT 'finish' CHECK (budget_action IN ('finish', 'kill'));
