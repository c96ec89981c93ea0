-- The dashboard's page of one wave of a large list (docs/architecture.md, "The
-- dashboard's task-list page") reads the wave's tasks in list order from a
-- position on: this index answers it without reading or sorting the whole wave.
CREATE INDEX tasks_by_list_wave_position ON tasks (task_list_id, parallel_group, position);
