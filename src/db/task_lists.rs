//! Storage of gated task lists, their tasks and edges, retry accounting and teams.
//!
//! The SQL is written once for both back-ends (`$N` placeholders work in SQLite too);
//! `on_pool!` expands each body per pool so each is type-checked against its own
//! driver. Where the engines differ (row locks, write transactions) the code says so.
//!
//! Long on purpose: the create, read and transition transactions
//! share the private row types, the column list and `assemble`.

use std::collections::HashMap;

use chrono::{DateTime, SubsecRound, Utc};
use sqlx::types::Json;
use sqlx::{FromRow, QueryBuilder};
use uuid::Uuid;

use super::task_claims::TaskEvent;
use super::{Database, DbError, DbResult};
use crate::domain::dispatch::{
    self, AbandonCategory, DispatchTask, HeldByOther, HolderCheck, IllegalTransition, Lease,
    StatusScope, TaskEventKind, TaskStatus, Transition,
};
use crate::domain::gating::Task;

/// Rows per multi-row INSERT: 16 columns × 1000 rows stays under both engines'
/// bind-parameter limits (SQLite 32766, Postgres 65535).
const TASK_ROWS_PER_INSERT: usize = 1000;
const EDGE_ROWS_PER_INSERT: usize = 5000;

/// Postgres keeps microseconds, SQLite whatever it is given: store what both keep.
pub fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

pub struct NewTaskList<'a> {
    pub project_id: &'a str,
    pub team_pk: Option<&'a str>,
    pub created_by: &'a str,
    pub tasks: &'a [Task],
}

/// The idempotency key a create came with (already scoped by the caller) and the
/// hash of its body.
#[derive(Debug, Clone, Copy)]
pub struct TaskListKey<'a> {
    pub key: &'a str,
    pub request_hash: &'a str,
}

/// What the first create with a key came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTaskListKey {
    pub request_hash: String,
    pub outcome: KeyedOutcome,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyedOutcome {
    /// The list stored.
    Accepted(Uuid),
    /// Rejected by the gate, with this retry count (this rejection included).
    Rejected(u32),
}

/// A keyed write: done, or the key was taken first (by another create, maybe a
/// concurrent one) and this is what it came to.
#[derive(Debug)]
pub enum Keyed<T> {
    Done(T),
    Taken(StoredTaskListKey),
}

#[derive(Debug, Clone)]
/// A stored task list (the API shows it as `StoredTaskList`).
pub struct TaskListRecord {
    /// Server-assigned id of the list.
    pub id: Uuid,
    pub project_id: String,
    /// The planning cycle; null = the project-wide fallback.
    pub team_pk: Option<String>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    /// In submission order.
    pub tasks: Vec<TaskRecord>,
}

#[derive(Debug, Clone)]
/// A stored task with its current status.
pub struct TaskRecord {
    /// Server-assigned id (use it with `PATCH /v1/tasks/{id}`).
    pub id: Uuid,
    pub task_list_id: Uuid,
    /// The synthesis-local id the planner gave.
    pub task_id: String,
    pub assigned_persona: String,
    /// The wave.
    pub parallel_group: i64,
    pub status: TaskStatus,
    /// Synthesis-local ids of the tasks this one depends on (duplicates removed).
    pub depends_on: Vec<String>,
    pub reads: Vec<String>,
    pub writes: Vec<String>,
    pub reviews: Option<String>,
    pub description: String,
    /// Fields of the submitted task that plangate does not interpret, as given.
    pub extra: serde_json::Map<String, serde_json::Value>,
    pub abandon_category: Option<AbandonCategory>,
    /// For a cascade-abandoned task: the server id of the task whose failure caused it.
    pub upstream_task_id: Option<Uuid>,
    pub notes: Option<String>,
    /// `running` transitions so far.
    pub attempts: i32,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The live claim of a running task (docs/api.md "Claims").
    pub lease: Option<Lease>,
    /// Whose claim the task had when it finished (kept after the lease ends), so a
    /// late holder cannot take another holder's completion for its own.
    pub last_holder: Option<String>,
}

#[derive(FromRow)]
struct TaskListRow {
    id: Uuid,
    project_id: String,
    team_pk: Option<String>,
    created_by: String,
    created_at: DateTime<Utc>,
}

#[derive(FromRow)]
pub(super) struct TaskRow {
    id: Uuid,
    task_list_id: Uuid,
    task_id: String,
    assigned_persona: String,
    parallel_group: i64,
    description: String,
    reads: Json<Vec<String>>,
    writes: Json<Vec<String>>,
    reviews: Option<String>,
    extra: Json<serde_json::Map<String, serde_json::Value>>,
    status: String,
    abandon_category: Option<String>,
    upstream_task_id: Option<Uuid>,
    notes: Option<String>,
    attempts: i32,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    claim_holder: Option<String>,
    lease_expires_at: Option<DateTime<Utc>>,
}

#[derive(FromRow)]
pub(super) struct EdgeRow {
    task_id: Uuid,
    depends_on: Uuid,
}

pub(super) const TASK_COLUMNS: &str = "id, task_list_id, task_id, assigned_persona, parallel_group, \
     description, reads, writes, reviews, extra, status, abandon_category, upstream_task_id, \
     notes, attempts, started_at, finished_at, created_at, updated_at, claim_holder, \
     lease_expires_at";

impl TaskRow {
    pub(super) fn into_task(self, depends_on: Vec<String>) -> DbResult<TaskRecord> {
        let status = TaskStatus::parse(&self.status).ok_or_else(|| {
            DbError::Corrupt(format!("task {} has status {:?}", self.id, self.status))
        })?;
        let abandon_category = match self.abandon_category.as_deref() {
            None => None,
            Some(text) => Some(AbandonCategory::parse(text).ok_or_else(|| {
                DbError::Corrupt(format!("task {} has abandon_category {text:?}", self.id))
            })?),
        };
        Ok(TaskRecord {
            id: self.id,
            task_list_id: self.task_list_id,
            task_id: self.task_id,
            assigned_persona: self.assigned_persona,
            parallel_group: self.parallel_group,
            status,
            depends_on,
            reads: self.reads.0,
            writes: self.writes.0,
            reviews: self.reviews,
            description: self.description,
            extra: self.extra.0,
            abandon_category,
            upstream_task_id: self.upstream_task_id,
            notes: self.notes,
            attempts: self.attempts,
            started_at: self.started_at,
            finished_at: self.finished_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
            lease: match (&self.claim_holder, self.lease_expires_at) {
                (Some(holder), Some(expires_at)) => Some(Lease {
                    holder: holder.clone(),
                    expires_at,
                }),
                _ => None,
            },
            last_holder: self.claim_holder,
        })
    }
}

/// Tasks of one list with their edges resolved, in submission order.
pub(super) fn assemble(rows: Vec<TaskRow>, edges: Vec<EdgeRow>) -> DbResult<Vec<TaskRecord>> {
    let local_id: HashMap<Uuid, String> = rows.iter().map(|r| (r.id, r.task_id.clone())).collect();
    let mut depends: HashMap<Uuid, Vec<String>> = HashMap::new();
    for edge in edges {
        // An edge to a task outside the list cannot be written (same-list insert),
        // but stored data is read defensively.
        if let Some(dep) = local_id.get(&edge.depends_on) {
            depends.entry(edge.task_id).or_default().push(dep.clone());
        }
    }
    rows.into_iter()
        .map(|row| {
            let deps = depends.remove(&row.id).unwrap_or_default();
            row.into_task(deps)
        })
        .collect()
}

/// The dispatch read model (indices into `tasks`) the pure rules work on.
pub fn dispatch_view(tasks: &[TaskRecord]) -> Vec<DispatchTask> {
    let index: HashMap<&str, usize> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.task_id.as_str(), i))
        .collect();
    tasks
        .iter()
        .map(|t| DispatchTask {
            wave: t.parallel_group,
            status: t.status,
            depends_on: t
                .depends_on
                .iter()
                .filter_map(|d| index.get(d.as_str()).copied())
                .collect(),
            writes: t.writes.clone(),
        })
        .collect()
}

/// What a status change asks for.
pub struct TaskChange {
    pub status: TaskStatus,
    pub abandon_category: Option<AbandonCategory>,
    pub notes: Option<String>,
    /// Who makes the change; must be the holder of a claimed task unless `force`.
    pub holder: Option<String>,
    pub force: bool,
}

pub enum TransitionOutcome {
    Changed {
        task: Box<TaskRecord>,
        /// Server ids of the dependents this change abandoned.
        cascaded: Vec<Uuid>,
    },
    Illegal(IllegalTransition),
    /// The task is claimed by another holder and the change did not force it.
    HeldByOther(HeldByOther),
    NotFound,
}

#[derive(Debug, Clone, FromRow)]
pub struct TeamRecord {
    pub id: Uuid,
    pub project_id: String,
    pub team_pk: String,
    pub lead_role: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// What a status snapshot found.
#[derive(Debug)]
pub enum StatusRows {
    /// `(wave, status)` of every task in the scope (none for a known but empty one).
    Rows(StatusScope, Vec<(i64, TaskStatus)>),
    /// The project has no task list and no team.
    UnknownProject,
    /// The project is known; the cycle is neither a team nor on any task list.
    UnknownCycle,
}

impl Database {
    /// Store an accepted list all or nothing: the list, its tasks, their edges; and
    /// reset the retry count of `(project_id, team_pk)`. With a key, the key's row
    /// is inserted first, in the same transaction: its primary key decides between
    /// concurrent creates, and the losers store nothing and read what won.
    pub async fn create_task_list(
        &self,
        new: NewTaskList<'_>,
        key: Option<TaskListKey<'_>>,
    ) -> DbResult<Keyed<TaskListRecord>> {
        let list_id = Uuid::now_v7();
        let created_at = now();
        let ids: Vec<Uuid> = new.tasks.iter().map(|_| Uuid::now_v7()).collect();
        let by_local: HashMap<&str, Uuid> = new
            .tasks
            .iter()
            .zip(&ids)
            .map(|(t, id)| (t.task_id.as_str(), *id))
            .collect();
        // Edges deduplicated in first-seen order (a duplicate is only a warning).
        let mut edges: Vec<(Uuid, Uuid, i32)> = Vec::new();
        for (task, id) in new.tasks.iter().zip(&ids) {
            let mut seen = std::collections::HashSet::new();
            for dep in &task.depends_on {
                if let Some(dep_id) = by_local.get(dep.as_str())
                    && seen.insert(*dep_id)
                {
                    edges.push((*id, *dep_id, seen.len() as i32 - 1));
                }
            }
        }
        let team_scope = new.team_pk.unwrap_or("");
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            if let Some(key) = key {
                let claimed = sqlx::query(
                    "INSERT INTO task_list_keys (idempotency_key, request_hash, task_list_id, \
                     created_at) VALUES ($1, $2, $3, $4) ON CONFLICT (idempotency_key) DO NOTHING",
                )
                .bind(key.key)
                .bind(key.request_hash)
                .bind(list_id)
                .bind(created_at)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                    == 1;
                if !claimed {
                    tx.rollback().await?;
                    return self.taken_key(key.key).await;
                }
            }
            sqlx::query(
                "INSERT INTO task_lists (id, project_id, team_pk, created_by, created_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(list_id)
            .bind(new.project_id)
            .bind(new.team_pk)
            .bind(new.created_by)
            .bind(created_at)
            .execute(&mut *tx)
            .await?;
            for (chunk_no, chunk) in new.tasks.chunks(TASK_ROWS_PER_INSERT).enumerate() {
                let offset = chunk_no * TASK_ROWS_PER_INSERT;
                let mut insert = QueryBuilder::new(
                    "INSERT INTO tasks (id, task_list_id, position, project_id, team_pk, task_id, \
                     assigned_persona, parallel_group, description, reads, writes, reviews, extra, \
                     status, created_at, updated_at) ",
                );
                insert.push_values(chunk.iter().enumerate(), |mut row, (i, task)| {
                    row.push_bind(ids[offset + i])
                        .push_bind(list_id)
                        .push_bind((offset + i) as i32)
                        .push_bind(new.project_id)
                        .push_bind(new.team_pk)
                        .push_bind(task.task_id.as_str())
                        .push_bind(task.assigned_persona.as_str())
                        .push_bind(task.parallel_group)
                        .push_bind(task.description.as_str())
                        .push_bind(Json(&task.reads))
                        .push_bind(Json(&task.writes))
                        .push_bind(task.reviews.as_deref())
                        .push_bind(Json(&task.extra))
                        .push_bind(TaskStatus::Pending.as_str())
                        .push_bind(created_at)
                        .push_bind(created_at);
                });
                insert.build().execute(&mut *tx).await?;
            }
            for chunk in edges.chunks(EDGE_ROWS_PER_INSERT) {
                let mut insert = QueryBuilder::new(
                    "INSERT INTO task_dependencies (task_id, depends_on, position) ",
                );
                insert.push_values(chunk, |mut row, (task, dep, position)| {
                    row.push_bind(*task).push_bind(*dep).push_bind(*position);
                });
                insert.build().execute(&mut *tx).await?;
            }
            sqlx::query("DELETE FROM planner_attempts WHERE project_id = $1 AND team_scope = $2")
                .bind(new.project_id)
                .bind(team_scope)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok::<(), DbError>(())
        })?;
        // Everything stored is known here; answering from it saves reading the
        // whole list back (10,000 rows for a big plan).
        let local_of: HashMap<Uuid, &str> = new
            .tasks
            .iter()
            .zip(&ids)
            .map(|(t, id)| (*id, t.task_id.as_str()))
            .collect();
        let mut depends: HashMap<Uuid, Vec<String>> = HashMap::new();
        for (task, dep, _) in &edges {
            if let Some(local) = local_of.get(dep) {
                depends.entry(*task).or_default().push((*local).to_owned());
            }
        }
        let tasks = new
            .tasks
            .iter()
            .zip(ids)
            .map(|(task, id)| TaskRecord {
                id,
                task_list_id: list_id,
                task_id: task.task_id.clone(),
                assigned_persona: task.assigned_persona.clone(),
                parallel_group: task.parallel_group,
                status: TaskStatus::Pending,
                depends_on: depends.remove(&id).unwrap_or_default(),
                reads: task.reads.clone(),
                writes: task.writes.clone(),
                reviews: task.reviews.clone(),
                description: task.description.clone(),
                extra: task.extra.clone(),
                abandon_category: None,
                upstream_task_id: None,
                notes: None,
                attempts: 0,
                started_at: None,
                finished_at: None,
                created_at,
                updated_at: created_at,
                lease: None,
                last_holder: None,
            })
            .collect();
        Ok(Keyed::Done(TaskListRecord {
            id: list_id,
            project_id: new.project_id.to_owned(),
            team_pk: new.team_pk.map(str::to_owned),
            created_by: new.created_by.to_owned(),
            created_at,
            tasks,
        }))
    }

    /// What the first create with this (scoped) key came to, if there was one.
    pub async fn task_list_key(&self, key: &str) -> DbResult<Option<StoredTaskListKey>> {
        let row: Option<(String, Option<Uuid>, Option<i32>)> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT request_hash, task_list_id, rejections FROM task_list_keys \
                 WHERE idempotency_key = $1",
            )
            .bind(key)
            .fetch_optional(pool)
            .await?
        });
        let Some((request_hash, list, rejections)) = row else {
            return Ok(None);
        };
        let outcome = match (list, rejections) {
            (Some(id), None) => KeyedOutcome::Accepted(id),
            (None, Some(n)) => KeyedOutcome::Rejected(u32::try_from(n).unwrap_or(u32::MAX)),
            _ => {
                return Err(DbError::Corrupt(
                    "a task-list key holds neither or both of a list and a rejection".into(),
                ));
            }
        };
        Ok(Some(StoredTaskListKey {
            request_hash,
            outcome,
        }))
    }

    /// [`Keyed::Taken`] with what the key's first create came to: read after this
    /// create's insert found the key taken, so the row is committed.
    async fn taken_key<T>(&self, key: &str) -> DbResult<Keyed<T>> {
        self.task_list_key(key)
            .await?
            .map(Keyed::Taken)
            .ok_or_else(|| {
                DbError::Conflict("the idempotency key's create did not commit; retry".into())
            })
    }

    /// Count one more rejected submission of `(project_id, team_pk)`; returns the
    /// number of rejections since the last accepted list, this one included. With a
    /// key, the count and the key's row go in one transaction, and a key already
    /// taken counts nothing (its first create was counted).
    pub async fn record_rejection(
        &self,
        project_id: &str,
        team_pk: Option<&str>,
        key: Option<TaskListKey<'_>>,
    ) -> DbResult<Keyed<u32>> {
        let at = now();
        let _turn = self.writer_turn().await;
        let count: i32 = on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            if let Some(key) = key {
                // 0 stands in until the count is known, a statement later.
                let claimed = sqlx::query(
                    "INSERT INTO task_list_keys (idempotency_key, request_hash, rejections, \
                     created_at) VALUES ($1, $2, 0, $3) ON CONFLICT (idempotency_key) DO NOTHING",
                )
                .bind(key.key)
                .bind(key.request_hash)
                .bind(at)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                    == 1;
                if !claimed {
                    tx.rollback().await?;
                    return self.taken_key(key.key).await;
                }
            }
            let count: i32 = sqlx::query_scalar(
                "INSERT INTO planner_attempts (project_id, team_scope, rejected_count, updated_at) \
                 VALUES ($1, $2, 1, $3) \
                 ON CONFLICT (project_id, team_scope) DO UPDATE \
                 SET rejected_count = planner_attempts.rejected_count + 1, updated_at = excluded.updated_at \
                 RETURNING rejected_count",
            )
            .bind(project_id)
            .bind(team_pk.unwrap_or(""))
            .bind(at)
            .fetch_one(&mut *tx)
            .await?;
            if let Some(key) = key {
                sqlx::query("UPDATE task_list_keys SET rejections = $2 WHERE idempotency_key = $1")
                    .bind(key.key)
                    .bind(count)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            count
        });
        Ok(Keyed::Done(u32::try_from(count).unwrap_or(u32::MAX)))
    }

    pub async fn task_list(&self, id: Uuid) -> DbResult<Option<TaskListRecord>> {
        on_pool!(self, pool => {
            let Some(list) = sqlx::query_as::<_, TaskListRow>(
                "SELECT id, project_id, team_pk, created_by, created_at FROM task_lists WHERE id = $1",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?
            else {
                return Ok(None);
            };
            let rows = sqlx::query_as::<_, TaskRow>(sqlx::AssertSqlSafe(format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE task_list_id = $1 ORDER BY position"
            )))
            .bind(id)
            .fetch_all(pool)
            .await?;
            let edges = sqlx::query_as::<_, EdgeRow>(
                "SELECT d.task_id, d.depends_on FROM task_dependencies d \
                 JOIN tasks t ON t.id = d.task_id WHERE t.task_list_id = $1 \
                 ORDER BY d.task_id, d.position",
            )
            .bind(id)
            .fetch_all(pool)
            .await?;
            Ok(Some(TaskListRecord {
                id: list.id,
                project_id: list.project_id,
                team_pk: list.team_pk,
                created_by: list.created_by,
                created_at: list.created_at,
                tasks: assemble(rows, edges)?,
            }))
        })
    }

    /// The project of a task (for authorisation before a change); `None` when the
    /// task does not exist.
    pub async fn task_project(&self, id: Uuid) -> DbResult<Option<String>> {
        on_pool!(self, pool => {
            Ok(
                sqlx::query_scalar::<_, String>("SELECT project_id FROM tasks WHERE id = $1")
                    .bind(id)
                    .fetch_optional(pool)
                    .await?,
            )
        })
    }

    /// A task named within its list: the list's project and the server id of its
    /// task whose planner `task_id` is `task_id` (or, failing that, whose server id
    /// is `or_id`: a client that passes the server id with its list). `None` when the
    /// list does not exist; `Some((project, None))` when it holds no such task. One
    /// statement over the `(task_list_id, task_id)` unique index.
    pub async fn task_in_list(
        &self,
        list_id: Uuid,
        task_id: &str,
        or_id: Option<Uuid>,
    ) -> DbResult<Option<(String, Option<Uuid>)>> {
        Ok(on_pool!(self, pool => {
            sqlx::query_as::<_, (String, Option<Uuid>)>(
                "SELECT l.project_id, t.id FROM task_lists l \
                 LEFT JOIN tasks t ON t.task_list_id = l.id AND (t.task_id = $2 OR t.id = $3) \
                 WHERE l.id = $1 ORDER BY CASE WHEN t.task_id = $2 THEN 0 ELSE 1 END LIMIT 1",
            )
            .bind(list_id)
            .bind(task_id)
            .bind(or_id)
            .fetch_optional(pool)
            .await?
        }))
    }

    /// Apply a status change and, on `failed`/`abandoned`, cascade-abandon every
    /// non-terminal transitive dependent — in one transaction that locks the list
    /// (its `task_lists` row; SQLite's write lock), so two concurrent changes cannot
    /// both decide on the old state and a lapsed lease is applied first
    /// (docs/architecture.md, "Read, decide, write").
    pub async fn transition_task(
        &self,
        id: Uuid,
        change: TaskChange,
    ) -> DbResult<TransitionOutcome> {
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let list_id: Option<Uuid> =
                sqlx::query_scalar("SELECT task_list_id FROM tasks WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?;
            let Some(list_id) = list_id else {
                return Ok(TransitionOutcome::NotFound);
            };
            let mut tasks = read_list_locked!(self, tx, list_id);
            // Stamped once the list is locked, not before the wait for the lock: the
            // history (ordered by `at`) then follows the order the writes took, and a
            // lease runs from when it is granted.
            let at = now();
            // Lapsed leases first (docs/api.md "Claims"): a holder whose lease ran
            // out no longer holds the task, whatever it sends now.
            expire_lapsed!(tx, tasks, at);
            let Some(origin) = tasks.iter().position(|t| t.id == id) else {
                return Ok(TransitionOutcome::NotFound);
            };
            let current = tasks[origin].status;
            // A live claim's holder; for a finished task, whoever held it last when
            // the change names a holder (an unnamed repeat stays idempotent).
            let live_holder = tasks[origin]
                .lease
                .as_ref()
                .map(|l| l.holder.as_str())
                .or_else(|| {
                    let origin = &tasks[origin];
                    let named = change.holder.is_some() && origin.status.is_terminal();
                    origin.last_holder.as_deref().filter(|_| named)
                });
            let holder_check =
                match dispatch::check_holder(live_holder, change.holder.as_deref(), change.force) {
                    Ok(check) => check,
                    Err(held) => {
                        tx.commit().await?;
                        return Ok(TransitionOutcome::HeldByOther(held));
                    }
                };
            match dispatch::check_transition(current, change.status) {
                Err(illegal) => {
                    tx.commit().await?;
                    return Ok(TransitionOutcome::Illegal(illegal));
                }
                Ok(Transition::NoChange) => {
                    tx.commit().await?;
                    return Ok(TransitionOutcome::Changed {
                        task: Box::new(tasks[origin].clone()),
                        cascaded: Vec::new(),
                    });
                }
                Ok(Transition::Apply) => {}
            }
            let starts = change.status == TaskStatus::Running;
            let finishes = change.status.is_terminal();
            // Leaving `running` ends the claim; a claimed task only ever leaves it.
            // RETURNING: the answer shows exactly what is stored without re-reading.
            let stored = sqlx::query_as::<_, TaskRow>(sqlx::AssertSqlSafe(format!(
                "UPDATE tasks SET status = $2, abandon_category = $3, \
                 notes = COALESCE($4, notes), attempts = attempts + $5, \
                 started_at = CASE WHEN $6 THEN $8 ELSE started_at END, \
                 finished_at = CASE WHEN $7 THEN $8 ELSE finished_at END, \
                 lease_expires_at = NULL, \
                 updated_at = $8 WHERE id = $1 RETURNING {TASK_COLUMNS}"
            )))
            .bind(id)
            .bind(change.status.as_str())
            .bind(change.abandon_category.map(AbandonCategory::as_str))
            .bind(change.notes.as_deref())
            .bind(i32::from(starts))
            .bind(starts)
            .bind(finishes)
            .bind(at)
            .fetch_one(&mut *tx)
            .await?;
            let overrode = match &holder_check {
                HolderCheck::Forced { overrode } => Some(overrode.as_str()),
                _ => None,
            };
            insert_event!(tx, TaskEvent {
                task_id: id,
                task_list_id: list_id,
                at,
                kind: TaskEventKind::StatusChanged,
                holder: change.holder.as_deref(),
                from: current,
                to: change.status,
                attempt: stored.attempts,
                forced: overrode.is_some(),
                overrode,
                lease_expires_at: None,
            });
            let mut cascaded = Vec::new();
            if matches!(change.status, TaskStatus::Failed | TaskStatus::Abandoned) {
                let view = dispatch_view(&tasks);
                cascaded = dispatch::cascade(origin, &view)
                    .into_iter()
                    .map(|i| tasks[i].id)
                    .collect::<Vec<Uuid>>();
                for chunk in cascaded.chunks(EDGE_ROWS_PER_INSERT) {
                    let mut update = QueryBuilder::new("UPDATE tasks SET status = ");
                    update
                        .push_bind(TaskStatus::Abandoned.as_str())
                        .push(", abandon_category = ")
                        .push_bind(AbandonCategory::CASCADE.as_str())
                        .push(", upstream_task_id = ")
                        .push_bind(id)
                        .push(", finished_at = ")
                        .push_bind(at)
                        .push(", lease_expires_at = NULL")
                        .push(", updated_at = ")
                        .push_bind(at)
                        .push(" WHERE id IN (");
                    let mut ids = update.separated(", ");
                    for dependent in chunk {
                        ids.push_bind(*dependent);
                    }
                    update.push(")");
                    update.build().execute(&mut *tx).await?;
                }
            }
            outbox_task_changed!(tx, list_id, &tasks, origin, change.status, &cascaded, at);
            tx.commit().await?;
            let depends_on = tasks[origin].depends_on.clone();
            Ok::<_, DbError>(TransitionOutcome::Changed {
                task: Box::new(stored.into_task(depends_on)?),
                cascaded,
            })
        })
    }

    /// `(wave, status)` of the tasks a snapshot covers, and which scope that is; or
    /// that the project or the cycle is unknown (never a wider scope than asked: an
    /// agent that names a cycle must not read the project's counts as its own).
    ///
    /// Counted in the database (a project can hold a year of lists): one row per
    /// `(wave, status)` from an index-only scan of `tasks_by_project_team_status`
    /// (migration 0005), expanded here, instead of one row per task. Only an empty
    /// answer asks whether the project (a task list or a team) or the cycle (a team
    /// or a task list stamped with it) exists.
    pub async fn status_rows(
        &self,
        project_id: &str,
        team_pk: Option<&str>,
    ) -> DbResult<StatusRows> {
        let (counts, project_known, cycle_known): (Vec<(i64, String, i64)>, bool, bool) = on_pool!(self, pool => {
            let counts: Vec<(i64, String, i64)> = match team_pk {
                Some(team) => sqlx::query_as(
                    "SELECT parallel_group, status, COUNT(*) FROM tasks \
                     WHERE project_id = $1 AND team_pk = $2 GROUP BY parallel_group, status",
                )
                .bind(project_id)
                .bind(team)
                .fetch_all(pool)
                .await?,
                None => sqlx::query_as(
                    "SELECT parallel_group, status, COUNT(*) FROM tasks WHERE project_id = $1 \
                     GROUP BY parallel_group, status",
                )
                .bind(project_id)
                .fetch_all(pool)
                .await?,
            };
            if !counts.is_empty() {
                (counts, true, true)
            } else {
                let cycle_known = match team_pk {
                    Some(team) => sqlx::query_scalar::<_, i32>(
                        "SELECT 1 FROM teams WHERE project_id = $1 AND team_pk = $2 \
                         UNION ALL SELECT 1 FROM task_lists WHERE project_id = $1 AND team_pk = $2 \
                         LIMIT 1",
                    )
                    .bind(project_id)
                    .bind(team)
                    .fetch_optional(pool)
                    .await?
                    .is_some(),
                    None => true,
                };
                let project_known = cycle_known && team_pk.is_some()
                    || sqlx::query_scalar::<_, i32>(
                        "SELECT 1 FROM teams WHERE project_id = $1 \
                         UNION ALL SELECT 1 FROM task_lists WHERE project_id = $1 LIMIT 1",
                    )
                    .bind(project_id)
                    .fetch_optional(pool)
                    .await?
                    .is_some();
                (counts, project_known, cycle_known)
            }
        });
        if !project_known {
            return Ok(StatusRows::UnknownProject);
        }
        if !cycle_known {
            return Ok(StatusRows::UnknownCycle);
        }
        let scope = if team_pk.is_some() {
            StatusScope::Cycle
        } else {
            StatusScope::Project
        };
        let mut rows = Vec::new();
        for (wave, status, n) in counts {
            let status = TaskStatus::parse(&status)
                .ok_or_else(|| DbError::Corrupt(format!("a task has status {status:?}")))?;
            rows.extend(std::iter::repeat_n(
                (wave, status),
                usize::try_from(n).unwrap_or(0),
            ));
        }
        Ok(StatusRows::Rows(scope, rows))
    }

    /// Register a cycle of a project. `(project_id, team_pk)` is unique; a project
    /// may have many.
    pub async fn create_team(
        &self,
        project_id: &str,
        team_pk: &str,
        lead_role: Option<&str>,
    ) -> DbResult<TeamRecord> {
        let team = TeamRecord {
            id: Uuid::now_v7(),
            project_id: project_id.to_owned(),
            team_pk: team_pk.to_owned(),
            lead_role: lead_role.map(str::to_owned),
            created_at: now(),
        };
        let turn = self.writer_turn().await;
        let inserted = on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO teams (id, project_id, team_pk, lead_role, created_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (project_id, team_pk) DO NOTHING",
            )
            .bind(team.id)
            .bind(&team.project_id)
            .bind(&team.team_pk)
            .bind(&team.lead_role)
            .bind(team.created_at)
            .execute(pool)
            .await?
            .rows_affected()
        });
        drop(turn);
        if inserted == 0 {
            return Err(DbError::Conflict(format!(
                "team {team_pk:?} is already registered for project {project_id:?}"
            )));
        }
        Ok(team)
    }

    pub async fn teams(&self, project_id: &str) -> DbResult<Vec<TeamRecord>> {
        Ok(on_pool!(self, pool => {
            sqlx::query_as::<_, TeamRecord>(
                "SELECT id, project_id, team_pk, lead_role, created_at FROM teams \
                 WHERE project_id = $1 ORDER BY created_at, id",
            )
            .bind(project_id)
            .fetch_all(pool)
            .await?
        }))
    }
}
