-- SQLite twin of migrations/postgres/0002: JSON and timestamps are TEXT.
-- `revision` is the optimistic-concurrency version the API exposes as the ETag.
CREATE TABLE tracks (
    track_id    TEXT PRIMARY KEY,
    metadata    TEXT NOT NULL,
    revision    INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
