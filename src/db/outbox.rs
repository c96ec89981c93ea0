//! The webhook outbox (docs/api.md, "Webhooks"): the macros a state change calls,
//! inside its own transaction, to store the events it causes and one delivery per
//! subscribed webhook. Written with the change or not at all: a crash after the
//! commit still delivers (the delivery worker of any replica finds the rows), a
//! rollback sends nothing.
//!
//! Macros for the reason given in `db/tx.rs`: each body is pasted into both
//! back-ends' arms of an `on_pool!`. With no webhook the cost is one indexed read of
//! the (small) `webhooks` table per change.

/// The enabled webhooks of an event's project (or of every project) subscribed to
/// its type; `$2` is `%,type,%`.
pub(crate) const SUBSCRIBERS: &str = "SELECT id FROM webhooks WHERE disabled_at IS NULL \
     AND (project_id IS NULL OR project_id = $1) AND (events = ',*,' OR events LIKE $2)";

/// Stores one [`OutboxEvent`](crate::domain::webhooks::OutboxEvent) and its
/// deliveries, when a webhook is subscribed (an event nobody is subscribed to is not
/// kept). An event whose dedupe key is taken is dropped with its deliveries.
macro_rules! outbox_enqueue {
    ($tx:expr, $event:expr) => {{
        let event: &$crate::domain::webhooks::OutboxEvent = $event;
        let hooks: Vec<uuid::Uuid> = sqlx::query_scalar($crate::db::outbox::SUBSCRIBERS)
            .bind(event.project_id.as_deref())
            .bind(format!("%,{},%", event.event_type.as_str()))
            .fetch_all(&mut *$tx)
            .await?;
        if !hooks.is_empty() {
            let stored: Option<uuid::Uuid> = sqlx::query_scalar(
                "INSERT INTO webhook_events (id, type, project_id, dedupe_key, body, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING RETURNING id",
            )
            .bind(event.id)
            .bind(event.event_type.as_str())
            .bind(event.project_id.as_deref())
            .bind(event.dedupe_key.as_deref())
            .bind(event.body.as_str())
            .bind(event.at)
            .fetch_optional(&mut *$tx)
            .await?;
            if stored.is_some() {
                let mut q = sqlx::QueryBuilder::new(
                    "INSERT INTO webhook_deliveries (id, webhook_id, event_id, type, state, \
                     attempts, failures, next_attempt_at, created_at) ",
                );
                q.push_values(hooks.iter(), |mut b, hook| {
                    b.push_bind(uuid::Uuid::now_v7())
                        .push_bind(*hook)
                        .push_bind(event.id)
                        .push_bind(event.event_type.as_str())
                        .push_bind($crate::domain::webhooks::DeliveryState::Pending)
                        .push_bind(0i32)
                        .push_bind(0i32)
                        .push_bind(event.at)
                        .push_bind(event.at);
                });
                q.build().execute(&mut *$tx).await?;
            }
        }
    }};
}

/// A refine job's terminal state was just written in `$tx`: its
/// `refine_job.<status>` event (and `budget.exceeded` for a budget stop). Reads the
/// job's row only when a webhook may want it.
macro_rules! outbox_job_ended {
    ($tx:expr, $job_id:expr, $at:expr) => {{
        let job_id: uuid::Uuid = $job_id;
        type EndRow = (
            $crate::domain::job::JobStatus,
            Option<String>,
            Option<String>,
            Option<String>,
            i32,
        );
        let row: Option<EndRow> = sqlx::query_as(
            "SELECT j.status, j.project_id, j.team_pk, j.error_code, j.l0_total FROM refine_jobs j \
             WHERE j.id = $1 AND EXISTS (SELECT 1 FROM webhooks w WHERE w.disabled_at IS NULL \
               AND (w.project_id IS NULL OR w.project_id = j.project_id))",
        )
        .bind(job_id)
        .fetch_optional(&mut *$tx)
        .await?;
        if let Some((status, project_id, team_pk, error_code, l0_total)) = row {
            let mut progress = progress_of!($tx, job_id);
            progress.l0_total = i64::from(l0_total);
            let ended = $crate::domain::webhooks::JobEnded {
                id: job_id,
                status,
                project_id: project_id.as_deref(),
                team_pk: team_pk.as_deref(),
                error_code: error_code.as_deref(),
                progress: serde_json::to_value(progress).unwrap_or_default(),
            };
            for event in $crate::domain::webhooks::job_ended_events(&ended, $at) {
                outbox_enqueue!($tx, &event);
            }
        }
    }};
}

/// A refine run was merged in `$tx`: `refine_run.finished`.
macro_rules! outbox_run_finished {
    ($tx:expr, $run_id:expr, $status:expr, $at:expr) => {{
        let run_id: uuid::Uuid = $run_id;
        let row: Option<(Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT r.project_id, r.team_pk FROM refine_runs r WHERE r.id = $1 \
             AND EXISTS (SELECT 1 FROM webhooks w WHERE w.disabled_at IS NULL \
               AND (w.project_id IS NULL OR w.project_id = r.project_id))",
        )
        .bind(run_id)
        .fetch_optional(&mut *$tx)
        .await?;
        if let Some((project_id, team_pk)) = row {
            let event = $crate::domain::webhooks::run_finished_event(
                run_id,
                $status,
                project_id.as_deref(),
                team_pk.as_deref(),
                $at,
            );
            outbox_enqueue!($tx, &event);
        }
    }};
}

/// Task `$task_id` of list `$list_id` moved to `$to` in `$tx` (after the change's
/// own writes, counters included): `task.failed` when it failed (never for the
/// tasks a cascade abandoned), and `task_list.finished` when no task is left
/// pending or running. Exactly one transaction sees a list finish: on Postgres the
/// terminal changes of one list take a per-list advisory lock here, at their very
/// end, so the later of two concurrent last changes reads the other's committed
/// counters (SQLite has one writer). It waits for nothing while it holds the lock.
/// A list no enabled webhook may hear of skips all of it.
macro_rules! outbox_task_changed {
    ($db:expr, $tx:expr, $list_id:expr, $task_id:expr, $to:expr, $at:expr, $heard_by:expr) => {{
        let list_id: uuid::Uuid = $list_id;
        let to: $crate::domain::dispatch::TaskStatus = $to;
        let failed = to == $crate::domain::dispatch::TaskStatus::Failed;
        // `$heard_by`: the list's project and cycle when an enabled webhook may want
        // its events, as the change's own `UPDATE` read them; with none, a terminal
        // change takes no lock and reads no counters here.
        let heard_by: Option<(String, Option<String>)> = $heard_by;
        let row = heard_by.filter(|_| to.is_terminal());
        if let Some((project_id, team_pk)) = row {
            if matches!($db, $crate::db::Database::Postgres(_)) {
                sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                    .bind(list_id.to_string())
                    .execute(&mut *$tx)
                    .await?;
            }
            let counts = read_counts!(&mut *$tx, list_id);
            let mut next = None;
            if counts.pending + counts.running == 0 {
                // Once per list: which of `done` and `blocked` it ended in.
                let cascaded: bool = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM tasks WHERE task_list_id = $1 \
                     AND status = 'abandoned' AND upstream_task_id IS NOT NULL)",
                )
                .bind(list_id)
                .fetch_one(&mut *$tx)
                .await?;
                next = $crate::domain::webhooks::list_finished(0, 0, cascaded);
            }
            if failed {
                let event = $crate::domain::webhooks::task_failed_event(
                    $task_id,
                    list_id,
                    &project_id,
                    team_pk.as_deref(),
                    $at,
                );
                outbox_enqueue!($tx, &event);
            }
            if let Some(next) = next {
                let event = $crate::domain::webhooks::task_list_finished_event(
                    list_id,
                    next,
                    &project_id,
                    team_pk.as_deref(),
                    $at,
                );
                outbox_enqueue!($tx, &event);
            }
        }
    }};
}
