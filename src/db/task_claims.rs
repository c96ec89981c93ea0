//! Claims with leases and the task history (docs/api.md "Claims"): claim, renew,
//! expire — each in one locked transaction over the whole list, like a status
//! change (docs/architecture.md, "Read, decide, write"), so a task is handed to
//! one holder at a time and a lapsed lease is expired exactly once.

use chrono::{DateTime, Utc};
use sqlx::FromRow;
use uuid::Uuid;

use super::task_lists::{TASK_COLUMNS, TaskRecord, TaskRow, dispatch_view, now};
use super::{Database, DbError, DbResult};
use crate::domain::dispatch::{self, HeldByOther, ReadyMode, TaskEventKind, TaskStatus};

/// Every task of list `$list_id`, the list locked for the rest of transaction
/// `$tx`: on Postgres its `task_lists` row `FOR UPDATE` — one row lock that every
/// writer of the list's tasks takes first (status change, claim, heartbeat,
/// expiry), where locking each task row cost a write per task per claim; SQLite's
/// `BEGIN IMMEDIATE` already holds the database's write lock.
macro_rules! read_list_locked {
    ($db:expr, $tx:ident, $list_id:expr) => {{
        let lock = $db.row_lock();
        let _list: Option<uuid::Uuid> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT id FROM task_lists WHERE id = $1{lock}"
        )))
        .bind($list_id)
        .fetch_optional(&mut *$tx)
        .await?;
        let rows =
            sqlx::query_as::<_, $crate::db::task_lists::TaskRow>(sqlx::AssertSqlSafe(format!(
                "SELECT {} FROM tasks WHERE task_list_id = $1 ORDER BY position",
                $crate::db::task_lists::TASK_COLUMNS
            )))
            .bind($list_id)
            .fetch_all(&mut *$tx)
            .await?;
        let edges = sqlx::query_as::<_, $crate::db::task_lists::EdgeRow>(
            "SELECT d.task_id, d.depends_on FROM task_dependencies d \
             JOIN tasks t ON t.id = d.task_id WHERE t.task_list_id = $1 \
             ORDER BY d.task_id, d.position",
        )
        .bind($list_id)
        .fetch_all(&mut *$tx)
        .await?;
        $crate::db::task_lists::assemble(rows, edges)?
    }};
}

/// Appends one [`TaskEvent`] to a task's history inside transaction `$tx`.
macro_rules! insert_event {
    ($tx:ident, $event:expr) => {{
        let event: $crate::db::task_claims::TaskEvent<'_> = $event;
        sqlx::query(
            "INSERT INTO task_events (id, task_id, task_list_id, at, kind, holder, from_status, \
             to_status, attempt, forced, overrode, lease_expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(uuid::Uuid::now_v7())
        .bind(event.task_id)
        .bind(event.task_list_id)
        .bind(event.at)
        .bind(event.kind.as_str())
        .bind(event.holder)
        .bind(event.from.as_str())
        .bind(event.to.as_str())
        .bind(event.attempt)
        .bind(event.forced)
        .bind(event.overrode)
        .bind(event.lease_expires_at)
        .execute(&mut *$tx)
        .await?;
    }};
}

/// Puts every running task of `$tasks` whose lease lapsed at `$at` back to
/// `pending`, records `lease_expired`, and updates `$tasks` to match; evaluates to
/// how many expired. The attempt stays counted (it was charged by the claim).
macro_rules! expire_lapsed {
    ($tx:ident, $tasks:ident, $at:expr) => {{
        let at: chrono::DateTime<chrono::Utc> = $at;
        let lapsed = $crate::domain::dispatch::expired_leases(
            $tasks.iter().map(|t| (t.status, t.lease.as_ref())),
            at,
        );
        for &i in &lapsed {
            let task = &mut $tasks[i];
            let lease = task.lease.take();
            sqlx::query(
                "UPDATE tasks SET status = $2, claim_holder = NULL, lease_expires_at = NULL, \
                 updated_at = $3 WHERE id = $1",
            )
            .bind(task.id)
            .bind($crate::domain::dispatch::TaskStatus::Pending.as_str())
            .bind(at)
            .execute(&mut *$tx)
            .await?;
            task.status = $crate::domain::dispatch::TaskStatus::Pending;
            task.updated_at = at;
            insert_event!(
                $tx,
                $crate::db::task_claims::TaskEvent {
                    task_id: task.id,
                    task_list_id: task.task_list_id,
                    at,
                    kind: $crate::domain::dispatch::TaskEventKind::LeaseExpired,
                    holder: lease.as_ref().map(|l| l.holder.as_str()),
                    from: $crate::domain::dispatch::TaskStatus::Running,
                    to: $crate::domain::dispatch::TaskStatus::Pending,
                    attempt: task.attempts,
                    forced: false,
                    overrode: None,
                    lease_expires_at: lease.as_ref().map(|l| l.expires_at),
                }
            );
        }
        lapsed.len()
    }};
}

/// One history entry to write.
pub struct TaskEvent<'a> {
    pub task_id: Uuid,
    pub task_list_id: Uuid,
    pub at: DateTime<Utc>,
    pub kind: TaskEventKind,
    pub holder: Option<&'a str>,
    pub from: TaskStatus,
    pub to: TaskStatus,
    pub attempt: i32,
    pub forced: bool,
    pub overrode: Option<&'a str>,
    pub lease_expires_at: Option<DateTime<Utc>>,
}

/// One stored history entry.
#[derive(Debug, Clone)]
pub struct TaskEventRecord {
    pub at: DateTime<Utc>,
    pub kind: TaskEventKind,
    pub holder: Option<String>,
    pub from: TaskStatus,
    pub to: TaskStatus,
    pub attempt: i32,
    pub forced: bool,
    pub overrode: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
}

#[derive(FromRow)]
struct TaskEventRow {
    at: DateTime<Utc>,
    kind: String,
    holder: Option<String>,
    from_status: String,
    to_status: String,
    attempt: i32,
    forced: bool,
    overrode: Option<String>,
    lease_expires_at: Option<DateTime<Utc>>,
}

impl TaskEventRow {
    fn into_record(self) -> DbResult<TaskEventRecord> {
        let corrupt =
            |what: &str, v: &str| DbError::Corrupt(format!("a task event has {what} {v:?}"));
        Ok(TaskEventRecord {
            at: self.at,
            kind: TaskEventKind::parse(&self.kind).ok_or_else(|| corrupt("kind", &self.kind))?,
            holder: self.holder,
            from: TaskStatus::parse(&self.from_status)
                .ok_or_else(|| corrupt("from_status", &self.from_status))?,
            to: TaskStatus::parse(&self.to_status)
                .ok_or_else(|| corrupt("to_status", &self.to_status))?,
            attempt: self.attempt,
            forced: self.forced,
            overrode: self.overrode,
            lease_expires_at: self.lease_expires_at,
        })
    }
}

/// A claim: who, for which persona (optional), for how long, under which rule.
pub struct ClaimAsk<'a> {
    pub holder: &'a str,
    pub persona: Option<&'a str>,
    pub lease: chrono::Duration,
    pub mode: ReadyMode,
}

/// The list after the claim, and which task (index) was claimed, if any.
pub struct ClaimOutcome {
    pub tasks: Vec<TaskRecord>,
    pub claimed: Option<usize>,
}

pub enum HeartbeatOutcome {
    Renewed(Box<TaskRecord>),
    /// The task holds no live claim (never claimed, finished, or its lease lapsed).
    NotClaimed(TaskStatus),
    HeldByOther(HeldByOther),
    NotFound,
}

impl Database {
    /// Hands the first ready task (for `persona`, if given) to `holder` with a lease,
    /// moving it to `running` — after expiring lapsed leases, in one transaction
    /// over the locked list. `None`: no such list.
    pub async fn claim_task(
        &self,
        list_id: Uuid,
        ask: ClaimAsk<'_>,
    ) -> DbResult<Option<ClaimOutcome>> {
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let mut tasks = read_list_locked!(self, tx, list_id);
            // Stamped once the list is locked, not before the wait for the lock: the
            // history (ordered by `at`) then follows the order the writes took, and a
            // lease runs from when it is granted.
            let at = now();
            if tasks.is_empty() {
                let exists: Option<Uuid> = sqlx::query_scalar("SELECT id FROM task_lists WHERE id = $1")
                    .bind(list_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                if exists.is_none() {
                    return Ok(None);
                }
            }
            expire_lapsed!(tx, tasks, at);
            let ready = dispatch::ready(ask.mode, &dispatch_view(&tasks));
            let personas: Vec<&str> = tasks.iter().map(|t| t.assigned_persona.as_str()).collect();
            let Some(pick) = dispatch::pick_claim(&ready, &personas, ask.persona) else {
                tx.commit().await?;
                return Ok(Some(ClaimOutcome { tasks, claimed: None }));
            };
            let expires_at = at + ask.lease;
            let stored = sqlx::query_as::<_, TaskRow>(sqlx::AssertSqlSafe(format!(
                "UPDATE tasks SET status = $2, attempts = attempts + 1, started_at = $3, \
                 claim_holder = $4, lease_expires_at = $5, updated_at = $3 \
                 WHERE id = $1 RETURNING {TASK_COLUMNS}"
            )))
            .bind(tasks[pick].id)
            .bind(TaskStatus::Running.as_str())
            .bind(at)
            .bind(ask.holder)
            .bind(expires_at)
            .fetch_one(&mut *tx)
            .await?;
            let depends_on = std::mem::take(&mut tasks[pick].depends_on);
            tasks[pick] = stored.into_task(depends_on)?;
            insert_event!(tx, TaskEvent {
                task_id: tasks[pick].id,
                task_list_id: list_id,
                at,
                kind: TaskEventKind::Claimed,
                holder: Some(ask.holder),
                from: TaskStatus::Pending,
                to: TaskStatus::Running,
                attempt: tasks[pick].attempts,
                forced: false,
                overrode: None,
                lease_expires_at: Some(expires_at),
            });
            tx.commit().await?;
            Ok::<_, DbError>(Some(ClaimOutcome { tasks, claimed: Some(pick) }))
        })
    }

    /// Expires the lapsed leases of a list (lazily, when a read saw one); returns
    /// how many. Exactly once: under the list's lock, a second caller finds none.
    pub async fn expire_leases(&self, list_id: Uuid) -> DbResult<usize> {
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let mut tasks = read_list_locked!(self, tx, list_id);
            // Stamped once the list is locked, not before the wait for the lock: the
            // history (ordered by `at`) then follows the order the writes took, and a
            // lease runs from when it is granted.
            let at = now();
            let expired = expire_lapsed!(tx, tasks, at);
            tx.commit().await?;
            Ok::<_, DbError>(expired)
        })
    }

    /// Renews `holder`'s lease on a task to `lease` from now.
    pub async fn heartbeat_task(
        &self,
        id: Uuid,
        holder: &str,
        lease: chrono::Duration,
    ) -> DbResult<HeartbeatOutcome> {
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let list_id: Option<Uuid> =
                sqlx::query_scalar("SELECT task_list_id FROM tasks WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?;
            let Some(list_id) = list_id else {
                return Ok(HeartbeatOutcome::NotFound);
            };
            let mut tasks = read_list_locked!(self, tx, list_id);
            // Stamped once the list is locked, not before the wait for the lock: the
            // history (ordered by `at`) then follows the order the writes took, and a
            // lease runs from when it is granted.
            let at = now();
            expire_lapsed!(tx, tasks, at);
            let Some(origin) = tasks.iter().position(|t| t.id == id) else {
                return Ok(HeartbeatOutcome::NotFound);
            };
            let task = &tasks[origin];
            let outcome = match task.lease.as_ref().map(|l| l.holder.as_str()) {
                None => HeartbeatOutcome::NotClaimed(task.status),
                Some(current) if current != holder => {
                    HeartbeatOutcome::HeldByOther(HeldByOther { holder: current.to_owned() })
                }
                Some(_) => {
                    let expires_at = at + lease;
                    let stored = sqlx::query_as::<_, TaskRow>(sqlx::AssertSqlSafe(format!(
                        "UPDATE tasks SET lease_expires_at = $2, updated_at = $3 \
                         WHERE id = $1 RETURNING {TASK_COLUMNS}"
                    )))
                    .bind(id)
                    .bind(expires_at)
                    .bind(at)
                    .fetch_one(&mut *tx)
                    .await?;
                    insert_event!(tx, TaskEvent {
                        task_id: id,
                        task_list_id: list_id,
                        at,
                        kind: TaskEventKind::Renewed,
                        holder: Some(holder),
                        from: TaskStatus::Running,
                        to: TaskStatus::Running,
                        attempt: task.attempts,
                        forced: false,
                        overrode: None,
                        lease_expires_at: Some(expires_at),
                    });
                    HeartbeatOutcome::Renewed(Box::new(stored.into_task(task.depends_on.clone())?))
                }
            };
            tx.commit().await?;
            Ok::<_, DbError>(outcome)
        })
    }

    /// A task's history, oldest first, with its project (for authorisation);
    /// `None` when the task does not exist.
    pub async fn task_history(&self, id: Uuid) -> DbResult<Option<(String, Vec<TaskEventRecord>)>> {
        let Some(project_id) = self.task_project(id).await? else {
            return Ok(None);
        };
        let rows: Vec<TaskEventRow> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT at, kind, holder, from_status, to_status, attempt, forced, overrode, \
                 lease_expires_at FROM task_events WHERE task_id = $1 ORDER BY at, id",
            )
            .bind(id)
            .fetch_all(pool)
            .await?
        });
        let events = rows
            .into_iter()
            .map(TaskEventRow::into_record)
            .collect::<DbResult<Vec<_>>>()?;
        Ok(Some((project_id, events)))
    }
}
