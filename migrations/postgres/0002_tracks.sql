-- Track loop state (loop-plan.md §2): one metadata.json v2 document per track.
-- `revision` is the optimistic-concurrency version the API exposes as the ETag.
CREATE TABLE tracks (
    track_id    text PRIMARY KEY,
    metadata    jsonb NOT NULL,
    revision    bigint NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
