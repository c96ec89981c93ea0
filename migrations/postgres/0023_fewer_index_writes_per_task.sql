-- Fewer index entries written per task write (docs/architecture.md, "Claims at
-- scale"). A Postgres update that changes no indexed column and finds room on its
-- page is HOT: it writes no index entry at all. Any other update writes a new entry
-- in every index of `tasks`, and a claim-and-complete loop is index maintenance
-- first (docs/decisions.md, "Fewer index writes per task").

-- 1. A dependency's `done` decrements its dependents' `unmet_deps`, and `tasks_unblocked`
--    named that column in its predicate, so every decrement was a non-HOT update.
--    The predicate now names `unblocked`, computed from it: only the decrement that
--    reaches 0 changes an indexed value.
ALTER TABLE tasks ADD COLUMN unblocked boolean GENERATED ALWAYS AS (unmet_deps = 0) STORED;
DROP INDEX tasks_unblocked;
CREATE INDEX tasks_unblocked ON tasks (task_list_id, parallel_group, position)
    WHERE status = 'pending' AND unblocked;

-- 2. One index for a list's waves instead of two, `(task_list_id, parallel_group,
--    status, position)`: a wave's counts by status (index-only), a wave's page of
--    one status in list order, and the claim's pick of the active wave's first
--    pending task all read a range of it. It also ends an ambiguity that cost the
--    claims most of their time: `tasks_by_list_wave_position` (0021) served the
--    claim's `ORDER BY position` as well as the partial `tasks_pending_by_wave`, so
--    the planner, whose statistics say every task is pending right after a create,
--    could pick it and walk every claimed task of the wave (about 600 entries and
--    470 pages a claim on a 10,000-task list) before the first pending one.
DROP INDEX tasks_by_list_wave;
DROP INDEX tasks_by_list_wave_position;
CREATE INDEX tasks_by_list_wave_status ON tasks (task_list_id, parallel_group, status, position);

-- 3. A project's or a cycle's counts by wave and status read its lists
--    (`task_lists_by_project`), then each list's entries of the wave index above: the
--    index by project repeated them, at one more entry per task write.
DROP INDEX tasks_by_project_team_status;

-- 4. Room on each page for the HOT versions of a task's row (new pages only).
ALTER TABLE tasks SET (fillfactor = 80);
