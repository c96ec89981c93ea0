-- What is ready, kept as data (docs/architecture.md, "Claims at scale"): every write
-- of a task's status maintains these in its own transaction, so a claim is one
-- indexed pick and no write path reads the whole list.

-- How many of a task's dependencies are not done; a pending task with none is
-- ready in pipeline mode. Decremented when a dependency becomes done (terminal
-- statuses are final, so it never goes back up).
ALTER TABLE tasks ADD COLUMN unmet_deps integer NOT NULL DEFAULT 0;
UPDATE tasks SET unmet_deps = (
    SELECT COUNT(*) FROM task_dependencies d JOIN tasks p ON p.id = d.depends_on
    WHERE d.task_id = tasks.id AND p.status <> 'done')
WHERE id IN (SELECT task_id FROM task_dependencies);

-- A list's tasks by status, in 16 rows per list (a task counts in the row of
-- position % 16): concurrent claims and completions of one list update different
-- rows instead of queueing on one. The list's counts are the rows' sums.
CREATE TABLE task_list_counts (
    task_list_id  uuid NOT NULL REFERENCES task_lists (id) ON DELETE CASCADE,
    stripe        integer NOT NULL,
    pending       integer NOT NULL DEFAULT 0,
    running       integer NOT NULL DEFAULT 0,
    done          integer NOT NULL DEFAULT 0,
    failed        integer NOT NULL DEFAULT 0,
    abandoned     integer NOT NULL DEFAULT 0,
    PRIMARY KEY (task_list_id, stripe)
);
INSERT INTO task_list_counts (task_list_id, stripe, pending, running, done, failed, abandoned)
SELECT task_list_id, position % 16,
       SUM(CASE WHEN status = 'pending' THEN 1 ELSE 0 END),
       SUM(CASE WHEN status = 'running' THEN 1 ELSE 0 END),
       SUM(CASE WHEN status = 'done' THEN 1 ELSE 0 END),
       SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END),
       SUM(CASE WHEN status = 'abandoned' THEN 1 ELSE 0 END)
FROM tasks GROUP BY task_list_id, position % 16;

-- Barrier claims: the first pending task of the active wave, in list order.
CREATE INDEX tasks_pending_by_wave ON tasks (task_list_id, parallel_group, position)
    WHERE status = 'pending';
-- Pipeline claims: the first pending task whose dependencies are all done.
CREATE INDEX tasks_unblocked ON tasks (task_list_id, parallel_group, position)
    WHERE status = 'pending' AND unmet_deps = 0;
-- Lapsed leases, the running tasks' writes and the earliest lease of a list.
CREATE INDEX tasks_running_by_lease ON tasks (task_list_id, lease_expires_at)
    WHERE status = 'running';
