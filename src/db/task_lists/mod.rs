//! Storage of gated task lists, their tasks and edges, retry accounting and teams.
//!
//! The SQL is written once for both back-ends (`$N` placeholders work in SQLite too);
//! `on_pool!` expands each body per pool so each is type-checked against its own
//! driver. Where the engines differ (row locks, write transactions) the code says so.
//!
//! One concern a file: this one holds the records and rows they share; `create`
//! stores a list, `read` reads one, `ready` reads what it offers now, `transition` changes a task's status (and
//! cascades), `status` counts a project's or a cycle's tasks, `teams` registers
//! cycles. Claims, heartbeats and lease expiry are in `db/task_claims.rs`, what is
//! ready kept as data in `db/readiness.rs` (docs/architecture.md, "Claims at scale").

mod create;
mod read;
mod ready;
mod status;
mod teams;
mod transition;

pub use read::TaskPage;
pub use ready::{ReadyRead, ReadyTake};

use std::collections::HashMap;

use chrono::{DateTime, SubsecRound, Utc};
use sqlx::types::Json;
use sqlx::{FromRow, QueryBuilder};
use uuid::Uuid;

use crate::db::push_bound_list;
use crate::domain::dispatch::{
    AbandonCategory, DispatchTask, HeldByOther, IllegalTransition, StatusScope, StoredTask,
    TaskClaim, TaskStatus,
};
use crate::domain::gating::Task;

/// Rows per multi-row INSERT on SQLite: 17 columns × 1000 rows stays under its
/// bind-parameter limit (32766). Postgres binds whole columns as arrays instead
/// (`create.rs`, `InsertRows`).
pub(super) const TASK_ROWS_PER_INSERT: usize = 1000;
pub(crate) const EDGE_ROWS_PER_INSERT: usize = 5000;

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

#[derive(FromRow)]
pub(crate) struct TaskRow {
    pub(crate) id: Uuid,
    pub(crate) task_list_id: Uuid,
    pub(crate) position: i32,
    pub(crate) task_id: String,
    pub(crate) assigned_persona: String,
    pub(crate) parallel_group: i64,
    pub(crate) description: String,
    pub(crate) reads: Json<Vec<String>>,
    pub(crate) writes: Json<Vec<String>>,
    pub(crate) reviews: Option<String>,
    pub(crate) extra: Json<serde_json::Map<String, serde_json::Value>>,
    pub(crate) status: TaskStatus,
    pub(crate) abandon_category: Option<AbandonCategory>,
    pub(crate) upstream_task_id: Option<Uuid>,
    pub(crate) notes: Option<String>,
    pub(crate) attempts: i32,
    pub(crate) started_at: Option<DateTime<Utc>>,
    pub(crate) finished_at: Option<DateTime<Utc>>,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) updated_at: DateTime<Utc>,
    pub(crate) claim_holder: Option<String>,
    pub(crate) lease_expires_at: Option<DateTime<Utc>>,
}

/// A task row with its dependencies' planner ids, read by the same statement (the
/// column [`Database::depends_on_column`] adds) instead of a read of its own.
#[derive(FromRow)]
pub(crate) struct TaskRowDeps {
    #[sqlx(flatten)]
    pub(crate) row: TaskRow,
    pub(crate) depends_on: Json<Vec<String>>,
}

impl TaskRowDeps {
    pub(crate) fn into_task(self) -> StoredTask {
        self.row.into_task(self.depends_on.0)
    }
}

impl super::Database {
    /// A column for a statement on `tasks` (after [`TASK_COLUMNS`]): the planner
    /// ids of the task's dependencies in their order, as a JSON array, each name by
    /// a primary-key lookup per edge: never a join the planner may turn into a scan
    /// of `tasks` when it has no statistics yet (a list just created). The two
    /// engines name their JSON aggregate differently.
    pub(crate) fn depends_on_column(&self) -> &'static str {
        match self {
            super::Database::Postgres(_) => {
                ", (SELECT COALESCE(json_agg((SELECT p.task_id FROM tasks p \
                 WHERE p.id = d.depends_on) ORDER BY d.position), '[]') \
                 FROM task_dependencies d WHERE d.task_id = tasks.id) AS depends_on"
            }
            super::Database::Sqlite(_) => {
                ", (SELECT json_group_array((SELECT p.task_id FROM tasks p \
                 WHERE p.id = d.depends_on) ORDER BY d.position) \
                 FROM task_dependencies d WHERE d.task_id = tasks.id) AS depends_on"
            }
        }
    }
}

#[derive(FromRow)]
pub(crate) struct EdgeRow {
    task_id: Uuid,
    depends_on: Uuid,
}

pub(crate) const TASK_COLUMNS: &str = "id, task_list_id, position, task_id, assigned_persona, parallel_group, \
     description, reads, writes, reviews, extra, status, abandon_category, upstream_task_id, \
     notes, attempts, started_at, finished_at, created_at, updated_at, claim_holder, \
     lease_expires_at";

impl TaskRow {
    /// Whether the task's lease lapsed at `at` (docs/api.md "Claims").
    pub(crate) fn lapsed(&self, at: DateTime<Utc>) -> bool {
        self.status == TaskStatus::Running
            && self.claim_holder.is_some()
            && self.lease_expires_at.is_some_and(|e| e <= at)
    }

    pub(crate) fn into_task(self, depends_on: Vec<String>) -> StoredTask {
        StoredTask {
            id: self.id,
            task_list_id: self.task_list_id,
            task_id: self.task_id,
            assigned_persona: self.assigned_persona,
            parallel_group: self.parallel_group,
            status: self.status,
            depends_on,
            reads: self.reads.0,
            writes: self.writes.0,
            reviews: self.reviews,
            description: self.description,
            extra: self.extra.0,
            abandon_category: self.abandon_category,
            upstream_task_id: self.upstream_task_id,
            notes: self.notes,
            attempts: self.attempts,
            started_at: self.started_at,
            finished_at: self.finished_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
            claim: match (&self.claim_holder, self.lease_expires_at) {
                (Some(holder), Some(lease_expires_at)) => Some(TaskClaim {
                    holder: holder.clone(),
                    lease_expires_at,
                }),
                _ => None,
            },
            last_holder: self.claim_holder,
        }
    }
}

/// Tasks of one list with their edges resolved, in submission order.
pub(crate) fn assemble(rows: Vec<TaskRow>, edges: Vec<EdgeRow>) -> Vec<StoredTask> {
    let local_id: HashMap<Uuid, String> = rows.iter().map(|r| (r.id, r.task_id.clone())).collect();
    // An edge to a task outside the list cannot be written (same-list insert), but
    // stored data is read defensively.
    let named = edges.into_iter().filter_map(|edge| {
        let dep = local_id.get(&edge.depends_on)?;
        Some((edge.task_id, dep.clone()))
    });
    with_depends(rows, named)
}

/// The statement that names the dependencies of the tasks `ids`: `(task,
/// dependency's planner id)` rows, each task's in its edge order. By primary key
/// per edge, never a join a planner without statistics turns into a scan
/// (docs/architecture.md).
pub(crate) fn dependency_names_of<DB>(ids: impl IntoIterator<Item = Uuid>) -> QueryBuilder<DB>
where
    DB: sqlx::Database,
    for<'e> Uuid: sqlx::Encode<'e, DB> + sqlx::Type<DB>,
{
    let mut q = QueryBuilder::new(
        "SELECT d.task_id, (SELECT p.task_id FROM tasks p WHERE p.id = d.depends_on) \
         FROM task_dependencies d WHERE d.task_id IN ",
    );
    push_bound_list(&mut q, ids);
    q.push(" ORDER BY d.task_id, d.position");
    q
}

/// `rows` as records, in their order, each with the names of its dependencies
/// from `edges` (`(task, dependency's planner id)`, each task's in its edge order).
pub(crate) fn with_depends(
    rows: Vec<TaskRow>,
    edges: impl IntoIterator<Item = (Uuid, String)>,
) -> Vec<StoredTask> {
    let mut depends: HashMap<Uuid, Vec<String>> = HashMap::new();
    for (task, dep) in edges {
        depends.entry(task).or_default().push(dep);
    }
    rows.into_iter()
        .map(|row| {
            let deps = depends.remove(&row.id).unwrap_or_default();
            row.into_task(deps)
        })
        .collect()
}

/// The dispatch read model (indices into `tasks`) the pure rules work on.
pub fn dispatch_view(tasks: &[StoredTask]) -> Vec<DispatchTask> {
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
        task: Box<StoredTask>,
        /// Server ids of the dependents this change abandoned.
        cascaded: Vec<Uuid>,
    },
    Illegal(IllegalTransition),
    /// The task is claimed by another holder and the change did not force it.
    HeldByOther(HeldByOther),
    NotFound,
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
