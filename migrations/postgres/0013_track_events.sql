-- A track's history (issue #27, docs/api.md "Tracks"): one row per write of its
-- document — import, step started, step completed — so a FAILED evaluation and its
-- notes stay readable after FIX starts the loop again (the document keeps only each
-- step's latest checkpoint). Written in the same transaction as the document.
CREATE TABLE track_events (
    id            uuid PRIMARY KEY,      -- UUIDv7: ties on `at` keep insertion order
    track_id      text NOT NULL,
    revision      bigint NOT NULL,       -- the document revision this write made
    at            timestamptz NOT NULL,
    action        text NOT NULL CHECK (action IN ('imported', 'started', 'completed')),
    step          text,                  -- started / completed: the step
    outcome       text,                  -- completed: PASSED, FAILED or BLOCKED
    agent         text,                  -- started: who
    notes         text,                  -- completed: the verdict's notes
    commit_sha    text,
    status        text NOT NULL,         -- the track's status after the write
    current_step  text NOT NULL          -- and its current step
);
CREATE INDEX track_events_by_track ON track_events (track_id, at, id);
