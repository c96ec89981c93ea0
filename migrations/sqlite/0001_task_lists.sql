-- SQLite twin of migrations/postgres/0001: uuids are 16-byte BLOBs (sqlx binds Uuid so),
-- JSON and timestamps are TEXT.
-- Task-list gating (gating.md §4–§7): lists, tasks with their edges, retry
-- accounting per (project_id, team_pk), and the teams registered per project.

CREATE TABLE task_lists (
    id          BLOB PRIMARY KEY,
    project_id  text NOT NULL,
    team_pk     text,                 -- NULL = the project-wide fallback
    created_by  text NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX task_lists_by_project ON task_lists (project_id, team_pk, created_at);

CREATE TABLE tasks (
    id                BLOB PRIMARY KEY,
    task_list_id      BLOB NOT NULL REFERENCES task_lists (id) ON DELETE CASCADE,
    position          integer NOT NULL,   -- order in the submitted list
    project_id        text NOT NULL,
    team_pk           text,
    task_id           text NOT NULL,      -- synthesis-local id
    assigned_persona  text NOT NULL,
    parallel_group    INTEGER NOT NULL CHECK (parallel_group >= 1),
    description       text NOT NULL,
    reads             TEXT NOT NULL,
    writes            TEXT NOT NULL,
    reviews           text,
    extra             TEXT NOT NULL,     -- unknown fields, returned as given
    status            text NOT NULL CHECK (status IN ('pending', 'running', 'done', 'failed', 'abandoned')),
    abandon_category  text,
    upstream_task_id  BLOB REFERENCES tasks (id) ON DELETE SET NULL,
    notes             text,
    attempts          integer NOT NULL DEFAULT 0,
    started_at        TEXT,
    finished_at       TEXT,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    UNIQUE (task_list_id, task_id),
    UNIQUE (task_list_id, position)
);
-- Ready tasks by list and wave; status snapshots by project/cycle.
CREATE INDEX tasks_by_list_wave ON tasks (task_list_id, parallel_group, status);
CREATE INDEX tasks_by_project_team ON tasks (project_id, team_pk, parallel_group);

CREATE TABLE task_dependencies (
    task_id     BLOB NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    depends_on  BLOB NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    position    integer NOT NULL,        -- order in the submitted depends_on
    PRIMARY KEY (task_id, depends_on)
);
-- The cascade walks edges backwards (who depends on me?).
CREATE INDEX task_dependencies_reverse ON task_dependencies (depends_on);

CREATE TABLE planner_attempts (
    project_id         text NOT NULL,
    team_scope         text NOT NULL,    -- team_pk, or '' for no team (team_pk is never empty)
    rejected_count     integer NOT NULL DEFAULT 0,  -- rejections since the last accepted list
    updated_at         TEXT NOT NULL,
    PRIMARY KEY (project_id, team_scope)
);

-- No uniqueness on project_id: a project hosts several cycles.
CREATE TABLE teams (
    id          BLOB PRIMARY KEY,
    project_id  text NOT NULL,
    team_pk     text NOT NULL,
    lead_role   text,
    created_at  TEXT NOT NULL,
    UNIQUE (project_id, team_pk)
);
