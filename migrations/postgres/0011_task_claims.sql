-- Claims with leases and the task history (issue #24, docs/api.md "Claims").
-- A running task may be held by one agent until lease_expires_at; an expired
-- lease puts the task back to pending. Both are NULL for a task nobody claimed.
ALTER TABLE tasks ADD COLUMN claim_holder text;
ALTER TABLE tasks ADD COLUMN lease_expires_at timestamptz;

-- What happened to a task, oldest first: claims, renewals, lease expiries and
-- status changes, with the holder who did it. No foreign key (as in 0007): rows
-- are written in the task's own locked transaction and read by task.
CREATE TABLE task_events (
    id            uuid PRIMARY KEY,      -- UUIDv7: ties on `at` keep insertion order
    task_id       uuid NOT NULL,
    task_list_id  uuid NOT NULL,
    at            timestamptz NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('claimed', 'renewed', 'lease_expired', 'status_changed')),
    holder        text,
    from_status   text NOT NULL,
    to_status     text NOT NULL,
    attempt       integer NOT NULL,
    forced        boolean NOT NULL DEFAULT false,
    overrode      text,                  -- with forced: whose claim was overridden
    lease_expires_at timestamptz
);
CREATE INDEX task_events_by_task ON task_events (task_id, at, id);
