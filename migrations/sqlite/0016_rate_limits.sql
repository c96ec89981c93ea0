-- SQLite twin of migrations/postgres/0016.
-- Provider rate limits shared by every replica (docs/jobs.md, "Rate limits").
-- One row per executor: its token buckets (levels at `refilled_at`, refilled
-- continuously from the time that passed), the fair-queuing virtual time, a
-- provider's pause, what its headers said, and the limits a runtime change set.
-- Times are milliseconds since the Unix epoch.
CREATE TABLE rate_limit_state (
    executor TEXT PRIMARY KEY,
    overrides TEXT NOT NULL DEFAULT '{}',
    learned TEXT NOT NULL DEFAULT '{}',
    requests_level REAL,
    input_tokens_level REAL,
    output_tokens_level REAL,
    refilled_at INTEGER NOT NULL,
    virtual_time REAL NOT NULL DEFAULT 0,
    paused_until INTEGER,
    -- After a pause: how many calls may run at once until an answer succeeds.
    release_cap INTEGER
);

-- Each project's last finish tag per executor (weighted fair queuing), and
-- its starts counted by minute (`GET /v1/rate-limits`).
CREATE TABLE rate_limit_projects (
    executor TEXT NOT NULL,
    project_id TEXT NOT NULL,
    last_finish REAL NOT NULL,
    minute INTEGER NOT NULL DEFAULT 0,
    started_this_minute INTEGER NOT NULL DEFAULT 0,
    started_minute_before INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (executor, project_id)
);

-- Calls waiting for room ('waiting', or 'granted' a start another replica's
-- admission made for them) and calls running. A row expires unless its owner
-- renews it: a replica that dies leaves nothing behind past `expires_at`.
CREATE TABLE rate_limit_calls (
    id TEXT PRIMARY KEY,
    executor TEXT NOT NULL,
    project_id TEXT NOT NULL,
    job_id TEXT NOT NULL,
    state TEXT NOT NULL,
    start_tag REAL NOT NULL,
    finish_tag REAL NOT NULL,
    waiting_since INTEGER NOT NULL,
    granted_at INTEGER,
    expires_at INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL
);
CREATE INDEX rate_limit_calls_queue ON rate_limit_calls (executor, state, finish_tag, id);
CREATE INDEX rate_limit_calls_expiry ON rate_limit_calls (executor, expires_at);
