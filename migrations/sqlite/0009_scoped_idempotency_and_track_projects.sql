-- SQLite twin of migrations/postgres/0009 (read it for the why).
-- `json_array` writes the same compact text as serde_json.
UPDATE refine_jobs
   SET idempotency_key = json_array(project_id, NULL, idempotency_key)
 WHERE idempotency_key IS NOT NULL;
UPDATE refine_runs
   SET idempotency_key = json_array(project_id, NULL, idempotency_key)
 WHERE idempotency_key IS NOT NULL;

ALTER TABLE tracks ADD COLUMN project_id TEXT;

CREATE TABLE task_list_keys (
    idempotency_key  TEXT PRIMARY KEY,
    request_hash     TEXT NOT NULL,
    task_list_id     BLOB,
    rejections       INTEGER,
    created_at       TEXT NOT NULL,
    CHECK ((task_list_id IS NULL) <> (rejections IS NULL))
);
