-- Webhooks (docs/api.md, "Webhooks"): subscriptions, the outbox of events and one
-- delivery per (webhook, event). An event and its deliveries are written in the
-- same transaction as the state change that causes them, so a crash right after
-- the change still delivers it; any replica's delivery worker claims due
-- deliveries with a lease (`next_attempt_at` pushed past the attempt, fenced by
-- `claim_token`), so a killed attempt is retried with the same event id.
CREATE TABLE webhooks (
    id                  uuid PRIMARY KEY,
    url                 text NOT NULL,
    events              text NOT NULL,          -- ",type,type," or ",*,"
    project_id          text,                   -- NULL: every project's events
    description         text,
    secret              text NOT NULL,
    old_secret          text,                   -- the secret a rotation replaced
    old_secret_until    timestamptz,            -- signs too until then
    disabled_at         timestamptz,
    disabled_reason     text,
    created_at          timestamptz NOT NULL
);
CREATE INDEX webhooks_by_project ON webhooks (project_id, created_at);

CREATE TABLE webhook_events (
    id          uuid PRIMARY KEY,               -- the `webhook-id` of every attempt
    type        text NOT NULL,
    project_id  text,
    dedupe_key  text UNIQUE,                    -- at most one event per key
    body        text NOT NULL,                  -- the exact bytes signed and sent
    created_at  timestamptz NOT NULL
);

CREATE TABLE webhook_deliveries (
    id                uuid PRIMARY KEY,
    webhook_id        uuid NOT NULL,
    event_id          uuid NOT NULL,
    type              text NOT NULL,
    state             text NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts          integer NOT NULL DEFAULT 0,
    failures          integer NOT NULL DEFAULT 0, -- failed attempts since the last replay
    next_attempt_at   timestamptz,
    claim_token       uuid,
    last_status_code  integer,
    last_error        text,
    last_attempt_at   timestamptz,
    delivered_at      timestamptz,
    created_at        timestamptz NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, created_at);
-- Retention (docs/configuration.md, PLANGATE_RETENTION_DAYS): ended deliveries, then
-- the events none refers to any more.
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id);
CREATE INDEX webhook_deliveries_ended ON webhook_deliveries (created_at) WHERE state <> 'pending';
CREATE INDEX webhook_events_by_time ON webhook_events (created_at);
