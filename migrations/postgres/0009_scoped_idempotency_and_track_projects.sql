-- Scoping (issue #23): idempotency keys per project and token, tracks with a
-- project, idempotent task-list creates (docs/api.md, "Idempotency").
--
-- The `idempotency_key` columns now hold the key in its scope, a JSON array
-- `[project_id, token fingerprint, key]` (null for none), so their UNIQUE
-- constraints decide per scope. Keys stored before were global and sent with no
-- token identity known: they become `[project_id, null, key]`, replayable by a
-- caller with auth off (the only callers they could have matched unambiguously).
-- `to_json` escapes exactly as serde_json does for what a key or project id may
-- hold (no control characters).
UPDATE refine_jobs
   SET idempotency_key = '[' || COALESCE(to_json(project_id)::text, 'null') || ',null,'
       || to_json(idempotency_key)::text || ']'
 WHERE idempotency_key IS NOT NULL;
UPDATE refine_runs
   SET idempotency_key = '[' || COALESCE(to_json(project_id)::text, 'null') || ',null,'
       || to_json(idempotency_key)::text || ']'
 WHERE idempotency_key IS NOT NULL;

-- A track's project: set on import (optional), checked on every read and write. A
-- track without one (all tracks imported before) is for unrestricted tokens only.
ALTER TABLE tracks ADD COLUMN project_id text;

-- One row per task-list create that came with an idempotency key: what the first
-- create's answer was, so a retry gets it again without gating (and counting) anew.
-- Exactly one of `task_list_id` (accepted) and `rejections` (rejected by the gate:
-- the retry count its answer showed) is set.
CREATE TABLE task_list_keys (
    idempotency_key  text PRIMARY KEY,   -- scoped, as above
    request_hash     text NOT NULL,
    task_list_id     uuid,
    rejections       integer,
    created_at       timestamptz NOT NULL,
    CHECK ((task_list_id IS NULL) <> (rejections IS NULL))
);
