-- Budgets are a cap (docs/jobs.md, "Budgets"): an L0 starts only when every
-- budget that applies covers what was spent, what running calls reserved and its
-- own expected cost. A running L0 holds its reservation here; storing its outcome
-- (or resetting it when its job is handed back, reaped or ended) moves the row out
-- of 'running', which releases it. NULL: the call's cost was unknown at start.
ALTER TABLE refine_l0_runs ADD COLUMN reserved_cost_usd double precision;

-- The gate reads a project's running calls on every start.
CREATE INDEX refine_l0_runs_project_running ON refine_l0_runs (project_id)
    WHERE status = 'running';
