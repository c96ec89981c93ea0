-- Provider rate limits shared by every replica (docs/jobs.md, "Rate limits").
-- One row per executor: its token buckets (levels at `refilled_at`, refilled
-- continuously from the time that passed), the fair-queuing virtual time, a
-- provider's pause, what its headers said, and the limits a runtime change set.
-- Times are milliseconds since the Unix epoch.
CREATE TABLE rate_limit_state (
    executor text PRIMARY KEY,
    overrides text NOT NULL DEFAULT '{}',
    learned text NOT NULL DEFAULT '{}',
    requests_level double precision,
    input_tokens_level double precision,
    output_tokens_level double precision,
    refilled_at bigint NOT NULL,
    virtual_time double precision NOT NULL DEFAULT 0,
    paused_until bigint,
    -- After a pause: how many calls may run at once until an answer succeeds.
    release_cap bigint
);

-- Each project's last finish tag per executor (weighted fair queuing), and
-- its starts counted by minute (`GET /v1/rate-limits`).
CREATE TABLE rate_limit_projects (
    executor text NOT NULL,
    project_id text NOT NULL,
    last_finish double precision NOT NULL,
    minute bigint NOT NULL DEFAULT 0,
    started_this_minute bigint NOT NULL DEFAULT 0,
    started_minute_before bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (executor, project_id)
);

-- Calls waiting for room ('waiting', or 'granted' a start another replica's
-- admission made for them) and calls running. A row expires unless its owner
-- renews it: a replica that dies leaves nothing behind past `expires_at`.
CREATE TABLE rate_limit_calls (
    id text PRIMARY KEY,
    executor text NOT NULL,
    project_id text NOT NULL,
    job_id text NOT NULL,
    state text NOT NULL,
    start_tag double precision NOT NULL,
    finish_tag double precision NOT NULL,
    waiting_since bigint NOT NULL,
    granted_at bigint,
    expires_at bigint NOT NULL,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL
);
CREATE INDEX rate_limit_calls_queue ON rate_limit_calls (executor, state, finish_tag, id);
CREATE INDEX rate_limit_calls_expiry ON rate_limit_calls (executor, expires_at);
