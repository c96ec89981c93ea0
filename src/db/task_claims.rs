//! Claims with leases and the task history (docs/api.md "Claims"): claim, renew,
//! expire — each a few indexed statements that lock only the rows they change (a
//! Postgres barrier claim, one statement; otherwise one transaction;
//! docs/architecture.md, "Claims at scale"), so a task is handed to one holder at a
//! time and a lapsed lease is expired exactly once.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, QueryBuilder};
use uuid::Uuid;

use super::readiness::{LapsedRow, Move};
use super::task_lists::{TASK_COLUMNS, TaskRow, TaskRowDeps, now};
use super::{Database, DbError, DbResult, Row, retrying};
use crate::domain::dispatch::{
    self, HeldByOther, ListEvent, ReadyMode, Remaining, StoredTask, StoredTaskEvent, TaskEventKind,
    TaskStatus,
};

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

/// Puts the lapsed tasks `$rows` (`Vec<LapsedRow>`, locked, of list `$list_id`)
/// back to `pending` at `$at`, records `lease_expired` for each and moves the
/// counters; evaluates to how many. The attempt stays counted (the claim charged
/// it).
macro_rules! expire_rows {
    ($tx:ident, $list_id:expr, $rows:expr, $at:expr) => {{
        let rows: Vec<$crate::db::readiness::LapsedRow> = $rows;
        let at: chrono::DateTime<chrono::Utc> = $at;
        let mut moves = Vec::with_capacity(rows.len());
        for row in &rows {
            sqlx::query(
                "UPDATE tasks SET status = 'pending', claim_holder = NULL, \
                 lease_expires_at = NULL, updated_at = $2 WHERE id = $1",
            )
            .bind(row.id)
            .bind(at)
            .execute(&mut *$tx)
            .await?;
            insert_event!(
                $tx,
                $crate::db::task_claims::TaskEvent {
                    task_id: row.id,
                    task_list_id: row.task_list_id,
                    at,
                    kind: $crate::domain::dispatch::TaskEventKind::LeaseExpired,
                    holder: row.claim_holder.as_deref(),
                    from: $crate::domain::dispatch::TaskStatus::Running,
                    to: $crate::domain::dispatch::TaskStatus::Pending,
                    attempt: row.attempts,
                    forced: false,
                    overrode: None,
                    lease_expires_at: row.lease_expires_at,
                }
            );
            moves.push($crate::db::readiness::Move {
                wave: row.parallel_group,
                position: row.position,
                from: $crate::domain::dispatch::TaskStatus::Running,
                to: $crate::domain::dispatch::TaskStatus::Pending,
            });
        }
        apply_moves!($tx, $list_id, &moves);
        rows.len()
    }};
}

/// Expires the lapsed leases of list `$list_id` at `$at` inside `$tx` (found by
/// `tasks_running_by_lease`); evaluates to how many. On Postgres a lapsed task
/// another writer holds locked is skipped: that writer is expiring it or ending it.
macro_rules! expire_lapsed {
    ($db:expr, $tx:ident, $list_id:expr, $at:expr) => {{
        let at: chrono::DateTime<chrono::Utc> = $at;
        let skip = $db.skip_locked();
        let lapsed: Vec<$crate::db::readiness::LapsedRow> =
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT id, task_list_id, parallel_group, position, claim_holder, lease_expires_at, \
                 attempts FROM tasks WHERE task_list_id = $1 AND status = 'running' \
                 AND lease_expires_at <= $2 AND claim_holder IS NOT NULL \
                 ORDER BY lease_expires_at LIMIT {}{skip}",
                $crate::db::readiness::EXPIRE_BATCH
            )))
            .bind($list_id)
            .bind(at)
            .fetch_all(&mut *$tx)
            .await?;
        expire_rows!($tx, $list_id, lapsed, at)
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

#[derive(FromRow)]
struct TaskEventRow {
    at: DateTime<Utc>,
    kind: TaskEventKind,
    holder: Option<String>,
    from_status: TaskStatus,
    to_status: TaskStatus,
    attempt: i32,
    forced: bool,
    overrode: Option<String>,
    lease_expires_at: Option<DateTime<Utc>>,
}

impl TaskEventRow {
    fn into_record(self) -> StoredTaskEvent {
        StoredTaskEvent {
            at: self.at,
            kind: self.kind,
            holder: self.holder,
            from_status: self.from_status,
            to_status: self.to_status,
            attempt: self.attempt,
            forced: self.forced,
            overrode: self.overrode,
            lease_expires_at: self.lease_expires_at,
        }
    }
}

/// A claim: who, for which persona (optional), for how long, under which rule.
#[derive(Clone, Copy)]
pub struct ClaimAsk<'a> {
    pub holder: &'a str,
    pub persona: Option<&'a str>,
    pub lease: chrono::Duration,
    pub mode: ReadyMode,
}

/// What a claim came to.
pub enum ClaimOutcome {
    /// The task now held, and the list's tasks by status after the claim.
    Claimed {
        task: Box<StoredTask>,
        remaining: Remaining,
    },
    /// No task for this claim.
    NoneReady {
        /// Ready tasks exist, none for the persona asked.
        others_ready: bool,
        remaining: Remaining,
        /// The soonest lease of a running task to run out.
        earliest_lease: Option<DateTime<Utc>>,
    },
}

pub enum HeartbeatOutcome {
    Renewed(Box<StoredTask>),
    /// The task holds no live claim (never claimed, finished, or its lease lapsed).
    NotClaimed(TaskStatus),
    HeldByOther(HeldByOther),
    NotFound,
}

/// The barrier's active wave of list `$1` as a scalar subquery: the lowest wave
/// holding a pending or running task, the first entry of `task_waves_unfinished`
/// (`db::readiness`), read after `FROM task_wave_counts` and `$hint` (an index hint
/// or nothing).
macro_rules! active_wave_sql {
    ($hint:literal) => {
        concat!(
            "(SELECT parallel_group FROM task_wave_counts",
            $hint,
            " WHERE task_list_id = $1 AND unfinished > 0 ORDER BY parallel_group LIMIT 1)"
        )
    };
}

impl Database {
    /// [`active_wave_sql!`] for this back-end. SQLite keeps no statistics and could
    /// walk the primary key past every finished wave; `INDEXED BY` names the
    /// partial index (an error, not a slow plan, if it ever stops applying).
    pub(crate) fn active_wave(&self) -> &'static str {
        match self {
            Database::Postgres(_) => active_wave_sql!(""),
            Database::Sqlite(_) => active_wave_sql!(" INDEXED BY task_waves_unfinished"),
        }
    }
}

/// Claims the first pending task of list `$list_id`'s active wave (for `$persona`,
/// if given) in list order, in one statement: the pick (read with `$lock` appended,
/// so a claim locks it and passes over tasks other claimers hold) and its update.
/// Evaluates to the claimed row, if any.
macro_rules! barrier_claim {
    ($tx:ident, $list_id:expr, $persona:expr, $lock:expr, $active_wave:expr, $deps:expr, $at:expr, $holder:expr, $expires_at:expr) => {{
        let persona: Option<&str> = $persona;
        let lock: &str = $lock;
        let for_persona = if persona.is_some() {
            " AND assigned_persona = $5"
        } else {
            ""
        };
        let mut claim = sqlx::query_as::<_, TaskRowDeps>(sqlx::AssertSqlSafe(format!(
            "UPDATE tasks SET status = 'running', attempts = attempts + 1, \
             started_at = $2, claim_holder = $3, lease_expires_at = $4, updated_at = $2 \
             WHERE id = (SELECT id FROM tasks WHERE task_list_id = $1 AND status = 'pending' \
             AND parallel_group = {}{for_persona} ORDER BY position LIMIT 1{lock}) \
             AND status = 'pending' RETURNING {TASK_COLUMNS}{}",
            $active_wave, $deps
        )))
        .bind($list_id)
        .bind($at)
        .bind($holder)
        .bind($expires_at);
        if let Some(persona) = persona {
            claim = claim.bind(persona);
        }
        claim.fetch_optional(&mut *$tx).await?
    }};
}

/// A pipeline candidate, as a claim reads it.
#[derive(FromRow)]
struct Candidate {
    id: Uuid,
    parallel_group: i64,
    position: i32,
    assigned_persona: String,
    writes: sqlx::types::Json<Vec<String>>,
}

/// The first task pipeline mode offers (for `$persona`, if given), with its
/// writes ([`pipeline_walk!`]): a task of another persona is offered all the same,
/// so its writes still race later tasks'. `$skip` (`&HashSet<Uuid>`): tasks passed
/// over; `$busy` (`&[String]`): writes of tasks other claimers are taking right
/// now, counted as running.
macro_rules! pipeline_pick {
    ($tx:ident, $list_id:expr, $persona:expr, $skip:expr, $busy:expr) => {{
        let persona: Option<&str> = $persona;
        let mut pick: Option<(Uuid, Vec<String>)> = None;
        pipeline_walk!(
            &mut *$tx,
            $list_id,
            $busy,
            $skip,
            Candidate,
            "id, parallel_group, position, assigned_persona, writes",
            |row| {
                let mine = persona.is_none_or(|p| p == row.assigned_persona);
                if mine {
                    pick = Some((row.id, row.writes.0));
                }
                mine
            }
        );
        pick
    }};
}

/// A task [`Database::claim_in_one_statement`] claimed, with the list's counter sums
/// read in the same statement.
#[derive(FromRow)]
struct ClaimedRow {
    #[sqlx(flatten)]
    task: TaskRowDeps,
    pending_sum: i64,
    running_sum: i64,
    done_sum: i64,
    failed_sum: i64,
    abandoned_sum: i64,
}

/// Rounds of a Postgres pipeline claim that met tasks other claimers were taking,
/// before it answers `wait`.
const PIPELINE_BUSY_ROUNDS: u32 = 50;

/// What one pipeline claim transaction came to.
enum Attempt {
    Settled(Option<ClaimOutcome>),
    /// Postgres: every task it could take was being taken by another claimer.
    Busy,
}

impl Database {
    /// Hands the first ready task (for `persona`, if given) to `holder` with a lease,
    /// moving it to `running`, after expiring the list's lapsed leases — in one
    /// transaction of a few indexed statements, or on Postgres, when no lease has
    /// lapsed, one statement for a barrier claim (docs/architecture.md, "Claims at
    /// scale"). On Postgres a barrier claim locks only the task it takes and passes
    /// over tasks other claimers hold (`SKIP LOCKED`); a pipeline claim, which
    /// decides write races over every running task, takes advisory locks on the
    /// task and on the files it writes. `None`: no such list.
    pub async fn claim_task(
        &self,
        list_id: Uuid,
        ask: ClaimAsk<'_>,
    ) -> DbResult<Option<ClaimOutcome>> {
        if let (Database::Postgres(pool), ReadyMode::Barrier) = (self, ask.mode)
            && let Some(claimed) =
                retrying(|| self.claim_in_one_statement(pool, list_id, &ask)).await?
        {
            return Ok(Some(claimed));
        }
        let mut round = 0;
        loop {
            match retrying(|| self.claim_once(list_id, &ask)).await? {
                Attempt::Settled(outcome) => return Ok(outcome),
                // Tasks other claimers are taking: their commits decide whether
                // anything is left, so look again rather than say "nothing ready".
                Attempt::Busy if round < PIPELINE_BUSY_ROUNDS => {
                    round += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                }
                Attempt::Busy => {
                    let remaining = self.tasks_by_status(list_id).await?;
                    return Ok(Some(ClaimOutcome::NoneReady {
                        others_ready: true,
                        remaining,
                        earliest_lease: None,
                    }));
                }
            }
        }
    }

    /// A Postgres barrier claim as one statement outside any transaction: the pick,
    /// its update, its history entry and its counter row, and the counts it answers
    /// with (docs/architecture.md, "Claims at scale"). Each statement is a round trip
    /// to the database and a wake-up on both sides, and a claim's seven (with
    /// `BEGIN`/`COMMIT`) cost more CPU than its reads and writes. `None` when it took
    /// nothing: no pending task it could lock in the active wave, or a lapsed lease
    /// of the list to expire first; [`Self::claim_once`] then decides, as before.
    async fn claim_in_one_statement(
        &self,
        pool: &sqlx::PgPool,
        list_id: Uuid,
        ask: &ClaimAsk<'_>,
    ) -> DbResult<Option<ClaimOutcome>> {
        let at = now();
        let expires_at = at + ask.lease;
        let for_persona = if ask.persona.is_some() {
            " AND assigned_persona = $9"
        } else {
            ""
        };
        let mut claim = sqlx::query_as::<_, ClaimedRow>(sqlx::AssertSqlSafe(format!(
            "WITH lapsed AS (SELECT 1 FROM tasks WHERE task_list_id = $1 AND status = 'running' \
               AND lease_expires_at <= $2 AND claim_holder IS NOT NULL LIMIT 1), \
             claimed AS (UPDATE tasks SET status = 'running', attempts = attempts + 1, \
               started_at = $2, claim_holder = $3, lease_expires_at = $4, updated_at = $2 \
               WHERE id = (SELECT id FROM tasks WHERE task_list_id = $1 AND status = 'pending' \
                 AND parallel_group = {wave}{for_persona} ORDER BY position LIMIT 1 FOR UPDATE SKIP LOCKED) \
               AND status = 'pending' AND NOT EXISTS (SELECT 1 FROM lapsed) \
               RETURNING {TASK_COLUMNS}{deps}), \
             history AS (INSERT INTO task_events (id, task_id, task_list_id, at, kind, holder, \
               from_status, to_status, attempt, forced, overrode, lease_expires_at) \
               SELECT $5, id, task_list_id, $2, $6, $3, $7, $8, attempts, false, NULL, $4 FROM claimed), \
             counted AS (UPDATE task_list_counts SET pending = pending - 1, running = running + 1 \
               FROM claimed WHERE task_list_counts.task_list_id = $1 \
               AND task_list_counts.stripe = claimed.position % {stripes}) \
             SELECT claimed.*, s.* FROM claimed, (SELECT COALESCE(SUM(pending), 0) AS pending_sum, \
               COALESCE(SUM(running), 0) AS running_sum, COALESCE(SUM(done), 0) AS done_sum, \
               COALESCE(SUM(failed), 0) AS failed_sum, COALESCE(SUM(abandoned), 0) AS abandoned_sum \
               FROM task_list_counts WHERE task_list_id = $1) s",
            wave = self.active_wave(),
            deps = self.depends_on_column(),
            stripes = super::readiness::STRIPES,
        )))
        .bind(list_id)
        .bind(at)
        .bind(ask.holder)
        .bind(expires_at)
        .bind(Uuid::now_v7())
        .bind(TaskEventKind::Claimed.as_str())
        .bind(TaskStatus::Pending.as_str())
        .bind(TaskStatus::Running.as_str());
        if let Some(persona) = ask.persona {
            claim = claim.bind(persona);
        }
        let Some(claimed) = claim.fetch_optional(pool).await? else {
            return Ok(None);
        };
        // The sums were read in the statement's snapshot, before its own counter
        // update: this claim is added here, as `claim_once` does.
        let mut remaining = super::readiness::remaining((
            claimed.pending_sum,
            claimed.running_sum,
            claimed.done_sum,
            claimed.failed_sum,
            claimed.abandoned_sum,
        ));
        remaining.pending = remaining.pending.saturating_sub(1);
        remaining.running += 1;
        Ok(Some(ClaimOutcome::Claimed {
            task: Box::new(claimed.task.into_task()),
            remaining,
        }))
    }

    async fn claim_once(&self, list_id: Uuid, ask: &ClaimAsk<'_>) -> DbResult<Attempt> {
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            // Stamped once the task is locked: the history (ordered by `at`)
            // follows the order the writes took, and a lease runs from when it is
            // granted.
            let at = now();
            expire_lapsed!(self, tx, list_id, at);
            let expires_at = at + ask.lease;
            let deps = self.depends_on_column();
            let stored = match ask.mode {
                ReadyMode::Barrier => {
                    match barrier_claim!(
                        tx, list_id, ask.persona, self.skip_locked(), self.active_wave(), deps, at, ask.holder, expires_at
                    ) {
                        // Every candidate was held by another claimer (Postgres): wait
                        // for them to commit and look again, so that "nothing ready"
                        // is never said of tasks still being claimed.
                        None if !self.skip_locked().is_empty() => barrier_claim!(
                            tx, list_id, ask.persona, self.row_lock(), self.active_wave(), deps, at, ask.holder, expires_at
                        ),
                        claimed => claimed,
                    }
                }
                ReadyMode::Pipeline => {
                    // No list-wide lock (docs/architecture.md, "Claims at scale"): on
                    // Postgres the claimer takes transaction advisory locks on the
                    // task and on each file it writes, passes over a task another
                    // claimer holds them for, and reads the running tasks' writes
                    // again once it holds them (a claim that committed meanwhile
                    // shows there). SQLite has one writer at a time.
                    let concurrent = !self.skip_locked().is_empty();
                    let mut skip = std::collections::HashSet::new();
                    let mut busy: Vec<String> = Vec::new();
                    let mut claimed = None;
                    while let Some((pick, writes)) =
                        pipeline_pick!(tx, list_id, ask.persona, &skip, &busy)
                    {
                        skip.insert(pick);
                        if concurrent {
                            let mut keys = vec![format!("claim-task {pick}")];
                            keys.extend(writes.iter().map(|p| {
                                format!("claim-write {list_id} {}", dispatch::normalize_path(p))
                            }));
                            let mut try_lock = QueryBuilder::new("SELECT ");
                            let mut all = try_lock.separated(" AND ");
                            for key in &keys {
                                all.push("pg_try_advisory_xact_lock(hashtextextended(");
                                all.push_bind_unseparated(key.clone());
                                all.push_unseparated(", 0))");
                            }
                            let locked: bool =
                                try_lock.build_query_scalar().fetch_one(&mut *tx).await?;
                            if !locked {
                                busy.extend(writes);
                                continue;
                            }
                            let mut taken = running_writes!(&mut *tx, list_id);
                            if !dispatch::offer_writes(&mut taken, &writes) {
                                continue;
                            }
                        }
                        claimed = sqlx::query_as::<_, TaskRowDeps>(sqlx::AssertSqlSafe(format!(
                            "UPDATE tasks SET status = 'running', attempts = attempts + 1, \
                             started_at = $2, claim_holder = $3, lease_expires_at = $4, \
                             updated_at = $2 WHERE id = $1 AND status = 'pending' \
                             RETURNING {TASK_COLUMNS}{deps}"
                        )))
                        .bind(pick)
                        .bind(at)
                        .bind(ask.holder)
                        .bind(expires_at)
                        .fetch_optional(&mut *tx)
                        .await?;
                        if claimed.is_some() {
                            break;
                        }
                    }
                    if claimed.is_none() && !busy.is_empty() {
                        return Ok(Attempt::Busy);
                    }
                    claimed
                }
            };
            let Some(stored) = stored else {
                let others_ready = match (ask.persona, ask.mode) {
                    (None, _) => false,
                    (Some(_), ReadyMode::Barrier) => {
                        let any: Option<Uuid> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                            "SELECT id FROM tasks WHERE task_list_id = $1 AND status = 'pending' \
                             AND parallel_group = {} LIMIT 1",
                            self.active_wave()
                        )))
                        .bind(list_id)
                        .fetch_optional(&mut *tx)
                        .await?;
                        any.is_some()
                    }
                    (Some(_), ReadyMode::Pipeline) => {
                        pipeline_pick!(tx, list_id, None, &Default::default(), &[]).is_some()
                    }
                };
                let remaining = read_counts!(&mut *tx, list_id);
                let earliest_lease = earliest_lease!(&mut *tx, list_id);
                if remaining == Remaining::default() {
                    let list: Option<Uuid> =
                        sqlx::query_scalar("SELECT id FROM task_lists WHERE id = $1")
                            .bind(list_id)
                            .fetch_optional(&mut *tx)
                            .await?;
                    if list.is_none() {
                        return Ok(Attempt::Settled(None));
                    }
                }
                tx.commit().await?;
                return Ok(Attempt::Settled(Some(ClaimOutcome::NoneReady {
                    others_ready,
                    remaining,
                    earliest_lease,
                })));
            };
            insert_event!(tx, TaskEvent {
                task_id: stored.row.id,
                task_list_id: list_id,
                at,
                kind: TaskEventKind::Claimed,
                holder: Some(ask.holder),
                from: TaskStatus::Pending,
                to: TaskStatus::Running,
                attempt: stored.row.attempts,
                forced: false,
                overrode: None,
                lease_expires_at: Some(expires_at),
            });
            // The counts with this claim, read before its counter row is updated:
            // the update is the last statement, so the stripe's row lock is held
            // for the commit only.
            let mut remaining = read_counts!(&mut *tx, list_id);
            remaining.pending = remaining.pending.saturating_sub(1);
            remaining.running += 1;
            apply_moves!(tx, list_id, &[Move {
                wave: stored.row.parallel_group,
                position: stored.row.position,
                from: TaskStatus::Pending,
                to: TaskStatus::Running,
            }]);
            tx.commit().await?;
            Ok::<_, DbError>(Attempt::Settled(Some(ClaimOutcome::Claimed {
                task: Box::new(stored.into_task()),
                remaining,
            })))
        })
    }

    /// Expires the lapsed leases of a list (lazily, when a read saw one); returns
    /// how many. Exactly once: each lapsed task is locked (Postgres; SQLite's write
    /// lock) and changed by one writer, a second finds it pending.
    pub async fn expire_claims(&self, list_id: Uuid) -> DbResult<usize> {
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let at = now();
            let expired = expire_lapsed!(self, tx, list_id, at);
            tx.commit().await?;
            Ok::<_, DbError>(expired)
        })
    }

    /// Renews `holder`'s lease on a task to `lease` from now, with the task's row
    /// locked (the only row it reads or writes).
    pub async fn heartbeat_task(
        &self,
        id: Uuid,
        holder: &str,
        lease: chrono::Duration,
    ) -> DbResult<HeartbeatOutcome> {
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            // The common case in one statement: the holder's live claim, renewed.
            let at = now();
            let expires_at = at + lease;
            let deps = self.depends_on_column();
            let renewed = sqlx::query_as::<_, TaskRowDeps>(sqlx::AssertSqlSafe(format!(
                "UPDATE tasks SET lease_expires_at = $2, updated_at = $3 \
                 WHERE id = $1 AND status = 'running' AND claim_holder = $4 \
                 AND lease_expires_at > $3 RETURNING {TASK_COLUMNS}{deps}"
            )))
            .bind(id)
            .bind(expires_at)
            .bind(at)
            .bind(holder)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(stored) = renewed {
                insert_event!(tx, TaskEvent {
                    task_id: id,
                    task_list_id: stored.row.task_list_id,
                    at,
                    kind: TaskEventKind::Renewed,
                    holder: Some(holder),
                    from: TaskStatus::Running,
                    to: TaskStatus::Running,
                    attempt: stored.row.attempts,
                    forced: false,
                    overrode: None,
                    lease_expires_at: Some(expires_at),
                });
                tx.commit().await?;
                return Ok(HeartbeatOutcome::Renewed(Box::new(stored.into_task())));
            }
            // Otherwise decide on the locked row: not found, lapsed, not claimed
            // or held by another.
            let row: Option<TaskRow> = locked_row!(self, tx, "tasks", TASK_COLUMNS, id);
            let Some(row) = row else {
                return Ok(HeartbeatOutcome::NotFound);
            };
            let at = now();
            let list_id = row.task_list_id;
            if row.lapsed(at) {
                // A holder whose lease ran out no longer holds the task.
                expire_rows!(tx, list_id, vec![LapsedRow {
                    id,
                    task_list_id: list_id,
                    parallel_group: row.parallel_group,
                    position: row.position,
                    claim_holder: row.claim_holder.clone(),
                    lease_expires_at: row.lease_expires_at,
                    attempts: row.attempts,
                }], at);
                tx.commit().await?;
                return Ok(HeartbeatOutcome::NotClaimed(TaskStatus::Pending));
            }
            let current = row.claim_holder.as_deref().filter(|_| row.lease_expires_at.is_some());
            let outcome = match current {
                None => HeartbeatOutcome::NotClaimed(row.status),
                Some(current) if current != holder => {
                    HeartbeatOutcome::HeldByOther(HeldByOther { holder: current.to_owned() })
                }
                Some(_) => {
                    let expires_at = at + lease;
                    let stored = sqlx::query_as::<_, TaskRowDeps>(sqlx::AssertSqlSafe(format!(
                        "UPDATE tasks SET lease_expires_at = $2, updated_at = $3 \
                         WHERE id = $1 RETURNING {TASK_COLUMNS}{deps}"
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
                        attempt: row.attempts,
                        forced: false,
                        overrode: None,
                        lease_expires_at: Some(expires_at),
                    });
                    HeartbeatOutcome::Renewed(Box::new(stored.into_task()))
                }
            };
            tx.commit().await?;
            Ok::<_, DbError>(outcome)
        })
    }

    /// A task's history, oldest first, with its project (for authorisation);
    /// `None` when the task does not exist.
    pub async fn task_history(&self, id: Uuid) -> DbResult<Option<(String, Vec<StoredTaskEvent>)>> {
        let Some(project_id) = self.task_project(id).await? else {
            return Ok(None);
        };
        let sql = "SELECT at, kind, holder, from_status, to_status, attempt, forced, overrode, \
                   lease_expires_at FROM task_events WHERE task_id = $1 ORDER BY at, id";
        let rows: Vec<TaskEventRow> = self.rows_by(sql, id).await?;
        let events = rows.into_iter().map(TaskEventRow::into_record).collect();
        Ok(Some((project_id, events)))
    }
}

#[derive(FromRow)]
struct ListEventRow {
    id: Uuid,
    task: Uuid,
    task_name: String,
    #[sqlx(flatten)]
    event: TaskEventRow,
}

impl Database {
    /// A list's history entries with ids in `(after, up_to]` (no upper bound when
    /// `up_to` is `None`), oldest id first, at most `limit`: a range of the
    /// `(task_list_id, id)` index, each task's name by its primary key.
    pub async fn task_list_events(
        &self,
        list_id: Uuid,
        after: Uuid,
        up_to: Option<Uuid>,
        limit: i64,
    ) -> DbResult<Vec<ListEvent>> {
        let columns = "e.id, e.task_id AS task, \
                       (SELECT t.task_id FROM tasks t WHERE t.id = e.task_id) AS task_name, \
                       e.at, e.kind, e.holder, e.from_status, e.to_status, e.attempt, e.forced, \
                       e.overrode, e.lease_expires_at";
        let up_to = up_to.unwrap_or(Uuid::max());
        let rows: Vec<ListEventRow> = self
            .list_event_page(columns, list_id, after, up_to, limit)
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| ListEvent {
                id: r.id,
                task: r.task,
                task_id: r.task_name,
                event: r.event.into_record(),
            })
            .collect())
    }

    /// The ids alone of a list's history entries in `(after, up_to]`, oldest
    /// first, at most `limit` (read from the index only).
    pub async fn task_list_event_ids(
        &self,
        list_id: Uuid,
        after: Uuid,
        up_to: Uuid,
        limit: i64,
    ) -> DbResult<Vec<Uuid>> {
        let ids: Vec<(Uuid,)> = self
            .list_event_page("e.id", list_id, after, up_to, limit)
            .await?;
        Ok(ids.into_iter().map(|(id,)| id).collect())
    }

    /// `columns` of a list's history entries `e` with ids in `(after, up_to]`,
    /// oldest first, at most `limit`: a range of the `(task_list_id, id)` index.
    async fn list_event_page<T: Row>(
        &self,
        columns: &str,
        list_id: Uuid,
        after: Uuid,
        up_to: Uuid,
        limit: i64,
    ) -> DbResult<Vec<T>> {
        let sql = format!(
            "SELECT {columns} FROM task_events e \
             WHERE e.task_list_id = $1 AND e.id > $2 AND e.id <= $3 ORDER BY e.id LIMIT $4"
        );
        Ok(on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql.as_str()))
                .bind(list_id)
                .bind(after)
                .bind(up_to)
                .bind(limit)
                .fetch_all(pool)
                .await?
        }))
    }
}
