-- The barrier's active wave as data (docs/architecture.md, "Claims at scale"): a
-- list's unfinished (pending or running) tasks by wave, in 16 rows per wave (a task
-- counts in the row of position % 16, as in `task_list_counts`), kept by every
-- write that ends a task. The active wave is the first entry of the partial index:
-- one read, however many tasks finished. It was the first entry of
-- `tasks_pending_by_wave` or of the running tasks in the wave index, and both walked
-- an entry for every task finished since the table's last vacuum (about 250 pages
-- a claim late in a 10,000-task list).
CREATE TABLE task_wave_counts (
    task_list_id    BLOB NOT NULL REFERENCES task_lists (id) ON DELETE CASCADE,
    parallel_group  integer NOT NULL,
    stripe          integer NOT NULL,
    unfinished      integer NOT NULL DEFAULT 0,
    PRIMARY KEY (task_list_id, parallel_group, stripe)
);
INSERT INTO task_wave_counts (task_list_id, parallel_group, stripe, unfinished)
SELECT task_list_id, parallel_group, position % 16,
       SUM(CASE WHEN status IN ('pending', 'running') THEN 1 ELSE 0 END)
FROM tasks GROUP BY task_list_id, parallel_group, position % 16;
CREATE INDEX task_waves_unfinished ON task_wave_counts (task_list_id, parallel_group)
    WHERE unfinished > 0;
