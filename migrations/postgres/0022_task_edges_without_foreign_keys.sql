-- A task list's dependency edges no longer have foreign keys to tasks. Each edge
-- row fired two foreign-key checks (a lookup and a share lock of each task row):
-- creating a 100,000-task list spent about two of its seconds on them
-- (bench/claims.sh, "create 100,000 tasks"). They guarded nothing the create does
-- not already guarantee: a list's edges are written in the transaction that has
-- just inserted both of their tasks, the gate has checked that every dependency
-- names a task of the same list, and tasks are never deleted (as for 0007's child
-- rows). SQLite keeps its checks: its create is well under the goal.
ALTER TABLE task_dependencies
    DROP CONSTRAINT task_dependencies_task_id_fkey,
    DROP CONSTRAINT task_dependencies_depends_on_fkey;
