-- Refine jobs (refine.md, jobs.md): the durable queue, per-L0 records and the event
-- log that `?wait=` and the SSE stream follow.
--
-- `version` is bumped by every write and equals the `seq` of the job's last event,
-- so a reader can tell "changed since" with one integer. Every worker write matches
-- `lease_token` (fencing): a worker that lost its lease changes nothing.

CREATE TABLE refine_runs (
    id                uuid PRIMARY KEY,
    status            text NOT NULL CHECK (status IN ('running', 'cancelling', 'succeeded', 'failed', 'cancelled')),
    request           jsonb NOT NULL,
    executor          text NOT NULL,
    project_id        text,
    team_pk           text,
    idempotency_key   text UNIQUE,
    request_hash      text,
    result            jsonb,
    merge_count       integer NOT NULL DEFAULT 0,
    version           bigint NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL,
    finished_at       timestamptz,
    updated_at        timestamptz NOT NULL
);

CREATE TABLE refine_jobs (
    id                  uuid PRIMARY KEY,
    kind                text NOT NULL DEFAULT 'refine',
    status              text NOT NULL CHECK (status IN ('queued', 'running', 'cancelling', 'succeeded', 'failed', 'cancelled')),
    phase_id            text NOT NULL,
    run_id              uuid REFERENCES refine_runs (id) ON DELETE CASCADE,
    project_id          text,
    team_pk             text,
    executor            text NOT NULL,
    executor_kind       text NOT NULL,
    request             jsonb NOT NULL,
    idempotency_key     text UNIQUE,
    request_hash        text,
    attempt             integer NOT NULL DEFAULT 0,
    max_attempts        integer NOT NULL,
    run_after           timestamptz NOT NULL,
    worker_id           uuid,
    lease_token         uuid,
    lease_expires_at    timestamptz,
    cancel_requested    boolean NOT NULL DEFAULT false,
    l0_total            integer NOT NULL,
    log                 jsonb NOT NULL DEFAULT '[]',
    result              jsonb,
    phase_refined_path  text,
    error_code          text,
    error_message       text,
    version             bigint NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL,
    started_at          timestamptz,
    cancel_requested_at timestamptz,
    finished_at         timestamptz,
    updated_at          timestamptz NOT NULL
);
CREATE INDEX refine_jobs_claimable ON refine_jobs (run_after) WHERE status = 'queued';
CREATE INDEX refine_jobs_leased ON refine_jobs (lease_expires_at) WHERE status IN ('running', 'cancelling');
CREATE INDEX refine_jobs_run ON refine_jobs (run_id);
CREATE INDEX refine_jobs_finished ON refine_jobs (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE refine_l0_runs (
    job_id          uuid NOT NULL REFERENCES refine_jobs (id) ON DELETE CASCADE,
    assignment_id   text NOT NULL,
    position        integer NOT NULL,
    batch           integer NOT NULL,
    status          text NOT NULL CHECK (status IN ('pending', 'running', 'valid', 'invalid', 'mismatch', 'failed')),
    attempt         integer NOT NULL DEFAULT 0,
    starts          integer NOT NULL DEFAULT 0,
    tries           integer NOT NULL DEFAULT 0,
    project_id      text,
    team_pk         text,
    started_at      timestamptz,
    finished_at     timestamptz,
    exit_code       integer,
    error           text,
    output_excerpt  text,
    outcome         jsonb,
    PRIMARY KEY (job_id, assignment_id)
);

CREATE TABLE refine_job_events (
    job_id      uuid NOT NULL REFERENCES refine_jobs (id) ON DELETE CASCADE,
    seq         bigint NOT NULL,
    event       text NOT NULL,
    data        jsonb NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (job_id, seq)
);
