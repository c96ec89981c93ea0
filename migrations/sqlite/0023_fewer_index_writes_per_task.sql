-- As on Postgres (its 0023 says why):
-- `tasks_unblocked` names the computed `unblocked` instead of `unmet_deps`, so the
-- pipeline's pick is the same statement on both databases.
ALTER TABLE tasks ADD COLUMN unblocked integer GENERATED ALWAYS AS (unmet_deps = 0) VIRTUAL;
DROP INDEX tasks_unblocked;
CREATE INDEX tasks_unblocked ON tasks (task_list_id, parallel_group, position)
    WHERE status = 'pending' AND unblocked;

-- One wave index, `(task_list_id, parallel_group, status, position)`, instead of
-- `(…, status)` and `(…, position)`: SQLite, too, picked the latter for the claim's
-- `ORDER BY position` and walked every claimed task of the active wave first.
DROP INDEX tasks_by_list_wave;
DROP INDEX tasks_by_list_wave_position;
CREATE INDEX tasks_by_list_wave_status ON tasks (task_list_id, parallel_group, status, position);
