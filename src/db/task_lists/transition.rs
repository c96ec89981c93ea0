//! The status change (`PATCH /v1/tasks/{id}`, `set_task_status`): the one function
//! that writes a task's status outside claims and lease expiry
//! (`db/task_claims.rs`). It locks and changes only the task, its dependents'
//! readiness and, on `failed`/`abandoned`, its descendants — never the whole list
//! (docs/architecture.md, "Claims at scale").

use sqlx::QueryBuilder;
use uuid::Uuid;

use super::{
    EDGE_ROWS_PER_INSERT, TASK_COLUMNS, TaskChange, TaskRow, TaskRowDeps, TransitionOutcome, now,
};
use crate::db::readiness::{LapsedRow, Move};
use crate::db::task_claims::TaskEvent;
use crate::db::{Database, DbError, DbResult, push_bound_list, retrying};
use crate::domain::dispatch::{
    self, AbandonCategory, HolderCheck, TaskEventKind, TaskStatus, Transition,
};

/// The changed task as stored, with its list's project and cycle and whether an
/// enabled webhook may hear of them.
#[derive(sqlx::FromRow)]
struct Changed {
    #[sqlx(flatten)]
    row: TaskRow,
    project_id: String,
    team_pk: Option<String>,
    hooked: bool,
}

/// A descendant the cascade abandons, as locked.
#[derive(sqlx::FromRow)]
struct Descendant {
    id: Uuid,
    parallel_group: i64,
    position: i32,
    status: TaskStatus,
}

impl Database {
    /// Apply a status change and, on `failed`/`abandoned`, cascade-abandon every
    /// non-terminal transitive dependent — in one transaction that locks the task's
    /// row (SQLite: the write lock), so two concurrent changes cannot both decide on
    /// the old state, and a lapsed lease of the task is applied first
    /// (docs/architecture.md, "Read, decide, write").
    ///
    /// Everything a status change writes happens in [`Self::transition_once`]; a
    /// write that must accompany every status change (an outbox row) belongs there,
    /// before its commit.
    pub async fn transition_task(
        &self,
        id: Uuid,
        change: TaskChange,
    ) -> DbResult<TransitionOutcome> {
        if let Database::Postgres(pool) = self
            && change.status == TaskStatus::Done
            && !change.force
            && let Some(holder) = change.holder.as_deref()
            && let Some(done) =
                retrying(|| self.done_in_one_statement(pool, id, holder, change.notes.as_deref()))
                    .await?
        {
            return Ok(done);
        }
        retrying(|| self.transition_once(id, &change)).await
    }

    /// The common status change on Postgres, its holder's `done` of a live claim,
    /// as one statement outside any transaction: the update, its history entry, the
    /// dependents' readiness and the counter row (docs/architecture.md, "Claims at
    /// scale"); a claim-and-`done` loop is then two round trips a task instead of
    /// fourteen. `None` when the task is not running under `holder`'s live lease,
    /// or an enabled webhook may hear of its list (the outbox's list-finished check
    /// needs the transaction): [`Self::transition_once`] then decides, as before.
    ///
    /// Locks in the transaction's order — the task, its dependents, the wave's
    /// counter row, the list's last — or a cascade (descendants, then counters) and
    /// this `done` could each hold what the other waits for until the deadlock check
    /// (1 s). Postgres runs unread CTEs last-declared first, so `waved` reads
    /// `unblocked` and `counted` reads `waved`, each to run after the other.
    async fn done_in_one_statement(
        &self,
        pool: &sqlx::PgPool,
        id: Uuid,
        holder: &str,
        notes: Option<&str>,
    ) -> DbResult<Option<TransitionOutcome>> {
        let at = now();
        let done: Option<TaskRowDeps> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "WITH changed AS (UPDATE tasks SET status = $2, abandon_category = NULL, \
               notes = COALESCE($4, notes), finished_at = $5, lease_expires_at = NULL, updated_at = $5 \
               WHERE id = $1 AND status = $6 AND claim_holder = $3 AND lease_expires_at > $5 \
               AND NOT EXISTS (SELECT 1 FROM webhooks w WHERE w.disabled_at IS NULL \
                 AND (w.project_id IS NULL OR w.project_id = tasks.project_id)) \
               RETURNING {TASK_COLUMNS}{deps}), \
             history AS (INSERT INTO task_events (id, task_id, task_list_id, at, kind, holder, \
               from_status, to_status, attempt, forced, overrode, lease_expires_at) \
               SELECT $7, id, task_list_id, $5, $8, $3, $6, $2, attempts, false, NULL, NULL FROM changed), \
             unblocked AS (UPDATE tasks SET unmet_deps = unmet_deps - 1 WHERE id = ANY(ARRAY( \
               SELECT d.task_id FROM task_dependencies d JOIN changed c ON d.depends_on = c.id)) \
               RETURNING 1), \
             waved AS (UPDATE task_wave_counts SET unfinished = unfinished - 1 \
               FROM changed WHERE task_wave_counts.task_list_id = changed.task_list_id \
               AND task_wave_counts.parallel_group = changed.parallel_group \
               AND task_wave_counts.stripe = changed.position % {stripes} \
               AND (SELECT COUNT(*) FROM unblocked) >= 0 RETURNING 1), \
             counted AS (UPDATE task_list_counts SET running = running - 1, done = done + 1 \
               FROM changed WHERE task_list_counts.task_list_id = changed.task_list_id \
               AND task_list_counts.stripe = changed.position % {stripes} \
               AND (SELECT COUNT(*) FROM waved) >= 0) \
             SELECT * FROM changed",
            deps = self.depends_on_column(),
            stripes = crate::db::readiness::STRIPES,
        )))
        .bind(id)
        .bind(TaskStatus::Done.as_str())
        .bind(holder)
        .bind(notes)
        .bind(at)
        .bind(TaskStatus::Running.as_str())
        .bind(Uuid::now_v7())
        .bind(TaskEventKind::StatusChanged.as_str())
        .fetch_optional(pool)
        .await?;
        Ok(done.map(|done| TransitionOutcome::Changed {
            task: Box::new(done.into_task()),
            cascaded: Vec::new(),
        }))
    }

    async fn transition_once(&self, id: Uuid, change: &TaskChange) -> DbResult<TransitionOutcome> {
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let (lock, deps) = (self.row_lock(), self.depends_on_column());
            let columns = format!("{TASK_COLUMNS}{deps}");
            let Some(TaskRowDeps { row, depends_on }) = locked_row!(self, tx, "tasks", columns, id)
            else {
                return Ok(TransitionOutcome::NotFound);
            };
            // Stamped once the task is locked, not before the wait for the lock: the
            // history (ordered by `at`) then follows the order the writes took.
            let at = now();
            let list_id = row.task_list_id;
            let position = row.position;
            // A lapsed lease first (docs/api.md "Claims"): a holder whose lease ran
            // out no longer holds the task, whatever it sends now.
            let lapsed = row.lapsed(at);
            if lapsed {
                expire_rows!(tx, list_id, vec![LapsedRow {
                    id,
                    task_list_id: list_id,
                    parallel_group: row.parallel_group,
                    position,
                    claim_holder: row.claim_holder.clone(),
                    lease_expires_at: row.lease_expires_at,
                    attempts: row.attempts,
                }], at);
            }
            let mut task = row.into_task(depends_on.0);
            if lapsed {
                task.status = TaskStatus::Pending;
                task.claim = None;
                task.last_holder = None;
                task.updated_at = at;
            }
            let current = task.status;
            // A live claim's holder; for a finished task, whoever held it last when
            // the change names a holder (an unnamed repeat stays idempotent).
            let live_holder = task.claim.as_ref().map(|c| c.holder.as_str()).or_else(|| {
                let named = change.holder.is_some() && task.status.is_terminal();
                task.last_holder.as_deref().filter(|_| named)
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
                        task: Box::new(task),
                        cascaded: Vec::new(),
                    });
                }
                Ok(Transition::Apply) => {}
            }
            let starts = change.status == TaskStatus::Running;
            let finishes = change.status.is_terminal();
            // Leaving `running` ends the claim; a claimed task only ever leaves it.
            // RETURNING: the answer shows exactly what is stored without re-reading.
            // And, for a terminal change (the only kind the outbox below writes),
            // whether an enabled webhook may hear of the list, in the same round trip.
            let Changed { row: stored, project_id, team_pk, hooked } =
                sqlx::query_as::<_, Changed>(sqlx::AssertSqlSafe(format!(
                "UPDATE tasks SET status = $2, abandon_category = $3, \
                 notes = COALESCE($4, notes), attempts = attempts + $5, \
                 started_at = CASE WHEN $6 THEN $8 ELSE started_at END, \
                 finished_at = CASE WHEN $7 THEN $8 ELSE finished_at END, \
                 lease_expires_at = NULL, \
                 updated_at = $8 WHERE id = $1 RETURNING {TASK_COLUMNS}, project_id, team_pk, \
                 $7 AND EXISTS (SELECT 1 FROM webhooks w WHERE w.disabled_at IS NULL \
                   AND (w.project_id IS NULL OR w.project_id = tasks.project_id)) AS hooked"
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
            let mut moves = vec![Move {
                wave: stored.parallel_group,
                position,
                from: current,
                to: change.status,
            }];
            if change.status == TaskStatus::Done {
                // One dependency fewer to wait for: one statement, the dependents
                // found by the reverse-edge index and updated by primary key. On
                // Postgres the keys go to the primary-key index as one array, a plan
                // that does not depend on the tables' statistics (a list just created
                // has none; a join could scan the whole table). Completions sharing
                // dependents lock them in the scan's order and queue; a rare cycle
                // fails with 40P01 and `retrying` runs the transaction again.
                let dependents = match self {
                    Database::Postgres(_) => {
                        "= ANY(ARRAY(SELECT task_id FROM task_dependencies WHERE depends_on = $1))"
                    }
                    Database::Sqlite(_) => {
                        "IN (SELECT task_id FROM task_dependencies WHERE depends_on = $1)"
                    }
                };
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE tasks SET unmet_deps = unmet_deps - 1 WHERE id {dependents}"
                )))
                .bind(id)
                .execute(&mut *tx)
                .await?;
            }
            let mut cascaded = Vec::new();
            if matches!(change.status, TaskStatus::Failed | TaskStatus::Abandoned) {
                // The descendants only, wave by wave through the reverse-edge index;
                // the walk goes through terminal tasks (docs/spec/gating.md §7) and
                // stops at a task already seen, so corrupt cycles end too. Each step
                // is a single-table indexed read, whatever the planner knows.
                let mut seen: std::collections::HashSet<Uuid> = std::collections::HashSet::from([id]);
                let mut frontier = vec![id];
                let mut found: Vec<Uuid> = Vec::new();
                while !frontier.is_empty() {
                    let mut next = Vec::new();
                    for chunk in frontier.chunks(EDGE_ROWS_PER_INSERT) {
                        let mut read = QueryBuilder::new(
                            "SELECT task_id FROM task_dependencies WHERE depends_on IN ",
                        );
                        push_bound_list(&mut read, chunk.iter().copied());
                        let children: Vec<Uuid> =
                            read.build_query_scalar().fetch_all(&mut *tx).await?;
                        next.extend(children.into_iter().filter(|c| seen.insert(*c)));
                    }
                    found.extend_from_slice(&next);
                    frontier = next;
                }
                // Locked in id order, the non-terminal ones only.
                found.sort_unstable();
                let mut descendants: Vec<Descendant> = Vec::new();
                for chunk in found.chunks(EDGE_ROWS_PER_INSERT) {
                    let mut read = QueryBuilder::new(
                        "SELECT id, parallel_group, position, status FROM tasks \
                         WHERE status IN ('pending', 'running') \
                         AND id IN ",
                    );
                    push_bound_list(&mut read, chunk.iter().copied());
                    read.push(" ORDER BY id");
                    read.push(lock);
                    descendants.extend(read.build_query_as::<Descendant>().fetch_all(&mut *tx).await?);
                }
                // Answered in list order, as the list-wide walk did.
                descendants.sort_by_key(|d| d.position);
                for d in &descendants {
                    moves.push(Move {
                        wave: d.parallel_group,
                        position: d.position,
                        from: d.status,
                        to: TaskStatus::Abandoned,
                    });
                }
                cascaded = descendants.iter().map(|d| d.id).collect::<Vec<Uuid>>();
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
                        .push(" WHERE id IN ");
                    push_bound_list(&mut update, chunk.iter().copied());
                    update.build().execute(&mut *tx).await?;
                }
            }
            // The counters last, in stripe order: see `readiness::stripe_deltas`.
            apply_moves!(tx, list_id, &moves);
            let heard_by = hooked.then_some((project_id, team_pk));
            outbox_task_changed!(self, tx, list_id, id, change.status, at, heard_by);
            tx.commit().await?;
            Ok::<_, DbError>(TransitionOutcome::Changed {
                task: Box::new(stored.into_task(task.depends_on)),
                cascaded,
            })
        })
    }
}
