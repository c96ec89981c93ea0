-- A task list's event feed (docs/api.md, "List events") reads a list's history
-- entries by id from a point on.
CREATE INDEX task_events_by_list ON task_events (task_list_id, id);
