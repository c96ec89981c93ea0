-- SQLite twin of migrations/postgres/0003 (uuids are BLOBs, JSON and timestamps TEXT).
-- Refine jobs (refine.md, jobs.md): the durable queue, per-L0 records and the event
-- log that `?wait=` and the SSE stream follow.
--
-- `version` is bumped by every write and equals the `seq` of the job's last event,
-- so a reader can tell "changed since" with one INTEGER. Every worker write matches
-- `lease_token` (fencing): a worker that lost its lease changes nothing.

CREATE TABLE refine_runs (
    id                BLOB PRIMARY KEY,
    status            TEXT NOT NULL CHECK (status IN ('running', 'cancelling', 'succeeded', 'failed', 'cancelled')),
    request           TEXT NOT NULL,
    executor          TEXT NOT NULL,
    project_id        TEXT,
    team_pk           TEXT,
    idempotency_key   TEXT UNIQUE,
    request_hash      TEXT,
    result            TEXT,
    merge_count       INTEGER NOT NULL DEFAULT 0,
    version           INTEGER NOT NULL DEFAULT 0,
    created_at        TEXT NOT NULL,
    finished_at       TEXT,
    updated_at        TEXT NOT NULL
);

CREATE TABLE refine_jobs (
    id                  BLOB PRIMARY KEY,
    kind                TEXT NOT NULL DEFAULT 'refine',
    status              TEXT NOT NULL CHECK (status IN ('queued', 'running', 'cancelling', 'succeeded', 'failed', 'cancelled')),
    phase_id            TEXT NOT NULL,
    run_id              BLOB REFERENCES refine_runs (id) ON DELETE CASCADE,
    project_id          TEXT,
    team_pk             TEXT,
    executor            TEXT NOT NULL,
    executor_kind       TEXT NOT NULL,
    request             TEXT NOT NULL,
    idempotency_key     TEXT UNIQUE,
    request_hash        TEXT,
    attempt             INTEGER NOT NULL DEFAULT 0,
    max_attempts        INTEGER NOT NULL,
    run_after           TEXT NOT NULL,
    worker_id           BLOB,
    lease_token         BLOB,
    lease_expires_at    TEXT,
    cancel_requested    INTEGER NOT NULL DEFAULT 0,
    l0_total            INTEGER NOT NULL,
    log                 TEXT NOT NULL DEFAULT '[]',
    result              TEXT,
    phase_refined_path  TEXT,
    error_code          TEXT,
    error_message       TEXT,
    version             INTEGER NOT NULL DEFAULT 0,
    created_at          TEXT NOT NULL,
    started_at          TEXT,
    cancel_requested_at TEXT,
    finished_at         TEXT,
    updated_at          TEXT NOT NULL
);
CREATE INDEX refine_jobs_claimable ON refine_jobs (run_after) WHERE status = 'queued';
CREATE INDEX refine_jobs_leased ON refine_jobs (lease_expires_at) WHERE status IN ('running', 'cancelling');
CREATE INDEX refine_jobs_run ON refine_jobs (run_id);
CREATE INDEX refine_jobs_finished ON refine_jobs (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE refine_l0_runs (
    job_id          BLOB NOT NULL REFERENCES refine_jobs (id) ON DELETE CASCADE,
    assignment_id   TEXT NOT NULL,
    position        INTEGER NOT NULL,
    batch           INTEGER NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('pending', 'running', 'valid', 'invalid', 'mismatch', 'failed')),
    attempt         INTEGER NOT NULL DEFAULT 0,
    starts          INTEGER NOT NULL DEFAULT 0,
    tries           INTEGER NOT NULL DEFAULT 0,
    project_id      TEXT,
    team_pk         TEXT,
    started_at      TEXT,
    finished_at     TEXT,
    exit_code       INTEGER,
    error           TEXT,
    output_excerpt  TEXT,
    outcome         TEXT,
    PRIMARY KEY (job_id, assignment_id)
);

CREATE TABLE refine_job_events (
    job_id      BLOB NOT NULL REFERENCES refine_jobs (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    event       TEXT NOT NULL,
    data        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
);
