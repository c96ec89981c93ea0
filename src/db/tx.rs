//! The transaction helpers of the db modules, in one place.
//!
//! They are macros, not functions, because one body must be compiled once per
//! back-end: each arm of `Database` holds its own pool and connection types
//! (`Transaction<'_, Postgres>`, `Transaction<'_, Sqlite>`), and a generic function
//! over both would need a `where` clause for every type it binds or decodes.
//! Pasting the body into each arm type-checks the same SQL text against each driver,
//! so the SQL is written once. Declared `#[macro_use]` first in `db/mod.rs`, so every
//! db module sees them.

/// Runs `$body` once per back-end with `$pool` bound to that back-end's pool:
/// `on_pool!(db, pool => { … })`. Not a closure: the body is pasted into the arms of
/// a `match`, so a `return` or `?` inside it leaves the enclosing function — hence
/// the match-arm syntax.
macro_rules! on_pool {
    ($db:expr, $pool:ident => $body:block) => {
        match $db {
            $crate::db::Database::Postgres($pool) => $body,
            $crate::db::Database::Sqlite(sqlite) => {
                let $pool = &sqlite.pool;
                $body
            }
        }
    };
}

/// Opens a write transaction inside an `on_pool!` arm; evaluates to `(turn, tx)`,
/// the writer's turn ([`Database::writer_turn`](crate::db::Database::writer_turn))
/// to keep until the transaction ends. Every transaction that writes opens this way,
/// on SQLite:
/// - after its turn, so the writers of this process queue in order instead of
///   polling for the lock and timing out (docs/architecture.md, "Writers on SQLite");
/// - with `BEGIN IMMEDIATE`, which takes the write lock up front: a deferred
///   transaction that reads and then writes fails at once with SQLITE_BUSY (no busy
///   wait) when another connection wrote since its read.
///
/// On Postgres it is a plain transaction whose locking reads lock their rows
/// ([`Database::row_lock`](crate::db::Database::row_lock)).
macro_rules! begin_write {
    ($db:expr, $pool:ident) => {{
        let turn = $db.writer_turn().await;
        let tx = match $db {
            $crate::db::Database::Sqlite(_) => $pool.begin_with("BEGIN IMMEDIATE").await?,
            $crate::db::Database::Postgres(_) => $pool.begin().await?,
        };
        (turn, tx)
    }};
}

/// Bumps `version` by `$events` (the events this write will insert, at least 1) if
/// `$lease` still holds the job; evaluates to `Option<i64>`, the last event's seq.
/// With `log = Some(…)` the same statement stores the job log (one round trip less).
macro_rules! bump_fenced {
    ($tx:expr, $lease:expr, $at:expr, $events:expr, log = $log:expr) => {{
        let log: Option<&[String]> = $log;
        bump_fenced!(@ $tx, $lease, $at, $events, log.map(sqlx::types::Json))
    }};
    ($tx:expr, $lease:expr, $at:expr, $events:expr) => {
        bump_fenced!(@ $tx, $lease, $at, $events, None::<sqlx::types::Json<&[String]>>)
    };
    (@ $tx:expr, $lease:expr, $at:expr, $events:expr, $log:expr) => {
        sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
            "UPDATE refine_jobs SET version = version + $4, updated_at = $3, \
             log = COALESCE($5, log) \
             WHERE id = $1 AND lease_token = $2 AND status IN {} \
             RETURNING version",
            $crate::db::status_list(&$crate::domain::job::JobStatus::IN_FLIGHT)
        )))
        .bind($lease.job_id)
        .bind($lease.token)
        .bind($at)
        .bind(i64::try_from(($events).max(1)).unwrap_or(i64::MAX))
        .bind($log)
        .fetch_optional(&mut *$tx)
        .await?
    };
}

/// Bumps `version` unconditionally (API-side writes: cancel, reaper).
macro_rules! bump {
    ($tx:expr, $job_id:expr, $at:expr) => {
        sqlx::query_scalar::<_, i64>(
            "UPDATE refine_jobs SET version = version + 1, updated_at = $2 WHERE id = $1 \
             RETURNING version",
        )
        .bind($job_id)
        .bind($at)
        .fetch_one(&mut *$tx)
        .await?
    };
}

/// Inserts events `$seq - n + 1 ..= $seq` for the `(event, data)` pairs given, in
/// one statement.
macro_rules! push_events {
    // `(event, &data, created_at)` triples: each event keeps its own time.
    ($tx:expr, $job_id:expr, $last_seq:expr, timed = $events:expr) => {{
        let events: &[(&str, &serde_json::Value, chrono::DateTime<chrono::Utc>)] = $events;
        if !events.is_empty() {
            let first = $last_seq - events.len() as i64 + 1;
            let mut q = sqlx::QueryBuilder::new(
                "INSERT INTO refine_job_events (job_id, seq, event, data, created_at) ",
            );
            q.push_values(
                events.iter().enumerate(),
                |mut b, (i, (event, data, at))| {
                    b.push_bind($job_id)
                        .push_bind(first + i as i64)
                        .push_bind(event.to_string())
                        .push_bind(sqlx::types::Json(data))
                        .push_bind(*at);
                },
            );
            q.build().execute(&mut *$tx).await?;
        }
    }};
    // `(event, data)` pairs, all created at `$at`.
    ($tx:expr, $job_id:expr, $last_seq:expr, $at:expr, $events:expr) => {{
        let events: &[(&str, serde_json::Value)] = $events;
        let at: chrono::DateTime<chrono::Utc> = $at;
        let timed: Vec<(&str, &serde_json::Value, chrono::DateTime<chrono::Utc>)> = events
            .iter()
            .map(|(event, data)| (*event, data, at))
            .collect();
        push_events!($tx, $job_id, $last_seq, timed = &timed);
    }};
}

/// Stores a worker's [`PendingProgress`](crate::db::refine_jobs::PendingProgress)
/// inside `$tx`, after the fenced bump that numbered its events and `$then`'s
/// (`$last_seq`: the seq of the last): each batch's starts (those whose end is not
/// in it), then every end in one `UPDATE … FROM (VALUES …)` — whose columns both
/// back-ends name column1, column2, … — folding in the starts stored with them, then
/// its events followed by `$then` (`(&[(event, data)], created_at)`), one INSERT.
macro_rules! store_pending {
    ($tx:expr, $job_id:expr, $last_seq:expr, $pending:expr, then = $then:expr) => {{
        let pending: &$crate::db::refine_jobs::PendingProgress = $pending;
        for batch in &pending.started {
            let mut q = sqlx::QueryBuilder::new(
                "UPDATE refine_l0_runs SET status = 'running', finished_at = NULL, started_at = ",
            );
            q.push_bind(batch.at)
                .push(", attempt = ")
                .push_bind(batch.attempt)
                .push(", starts = starts + 1 WHERE job_id = ")
                .push_bind($job_id)
                .push(" AND assignment_id IN (");
            let mut sep = q.separated(", ");
            for id in &batch.ids {
                sep.push_bind(id.as_str());
            }
            q.push(")");
            q.build().execute(&mut *$tx).await?;
        }
        if !pending.ended.is_empty() {
            let mut q = sqlx::QueryBuilder::new(
                "UPDATE refine_l0_runs SET status = v.column2, finished_at = v.column3, \
                 tries = v.column4, exit_code = v.column5, error = v.column6, \
                 output_excerpt = v.column7, outcome = v.column8, input_tokens = v.column9, \
                 output_tokens = v.column10, cache_read_input_tokens = v.column11, \
                 cache_creation_input_tokens = v.column12, cost_usd = v.column13, \
                 usage_model = v.column14, usage_source = v.column15, \
                 prompt_bytes = v.column16, started_at = COALESCE(v.column17, started_at), \
                 attempt = COALESCE(v.column18, attempt), starts = starts + v.column19 FROM (",
            );
            q.push_values(&pending.ended, |mut row, ended| {
                let l0 = &ended.l0;
                row.push_bind(l0.assignment_id.as_str())
                    .push_bind(l0.status)
                    .push_bind(ended.at)
                    .push_bind(l0.tries)
                    .push_bind(l0.exit_code)
                    .push_bind(l0.error.as_deref())
                    .push_bind(l0.output_excerpt.as_deref())
                    .push_bind(sqlx::types::Json(&l0.outcome))
                    .push_bind(l0.usage.input_tokens)
                    .push_bind(l0.usage.output_tokens)
                    .push_bind(l0.usage.cache_read_input_tokens)
                    .push_bind(l0.usage.cache_creation_input_tokens)
                    .push_bind(l0.usage.cost_usd)
                    .push_bind(l0.usage.model.as_deref())
                    .push_bind(l0.usage.source.as_str())
                    .push_bind(l0.prompt_bytes)
                    .push_bind(ended.start.map(|(at, _)| at))
                    .push_bind(ended.start.map(|(_, attempt)| attempt))
                    .push_bind(i32::from(ended.start.is_some()));
            });
            q.push(") AS v WHERE refine_l0_runs.job_id = ")
                .push_bind($job_id)
                .push(" AND refine_l0_runs.assignment_id = v.column1");
            q.build().execute(&mut *$tx).await?;
        }
        let (then, then_at): (&[(&str, serde_json::Value)], chrono::DateTime<chrono::Utc>) = $then;
        let events: Vec<(&str, &serde_json::Value, chrono::DateTime<chrono::Utc>)> = pending
            .events
            .iter()
            .map(|(event, data, at)| (*event, data, *at))
            .chain(then.iter().map(|(event, data)| (*event, data, then_at)))
            .collect();
        push_events!($tx, $job_id, $last_seq, timed = &events);
    }};
}

/// Progress of one job from its L0 rows.
macro_rules! progress_of {
    ($tx:expr, $job_id:expr) => {{
        let rows: Vec<($crate::domain::refine::L0Status, i64)> = sqlx::query_as(
            "SELECT status, COUNT(*) FROM refine_l0_runs WHERE job_id = $1 GROUP BY status",
        )
        .bind($job_id)
        .fetch_all(&mut *$tx)
        .await?;
        let mut p = $crate::db::refine_jobs::ProgressRecord::default();
        for (status, n) in rows {
            $crate::db::refine_jobs::add_count(&mut p, status, n);
        }
        p
    }};
}

/// Moves a job's `running` L0 rows back to `pending` (they will run again: their
/// outcome was never stored), or to `failed` when the job ended.
macro_rules! reset_running_l0s {
    ($tx:expr, $job_id:expr, $status:expr) => {
        if $status == $crate::domain::job::JobStatus::Queued {
            sqlx::query(
                "UPDATE refine_l0_runs SET status = 'pending' WHERE job_id = $1 AND status = 'running'",
            )
            .bind($job_id)
            .execute(&mut *$tx)
            .await?;
        } else {
            sqlx::query(
                "UPDATE refine_l0_runs SET status = 'failed', error = 'the job ended before it finished' \
                 WHERE job_id = $1 AND status = 'running'",
            )
            .bind($job_id)
            .execute(&mut *$tx)
            .await?;
        }
    };
}

/// Inserts jobs, their L0 rows and their `queued` events inside `$tx`, a few
/// multi-row statements for all of them; evaluates to the ids inserted (a job whose
/// idempotency key is taken, by a stored job or an earlier one of `$jobs`, is not).
/// Rows go in chunks of power-of-two sizes, so the statements prepared stay few
/// whatever the number of jobs ([`pow2_chunks`](crate::db::refine_jobs::pow2_chunks)).
macro_rules! insert_jobs {
    ($tx:expr, $jobs:expr, $at:expr) => {{
        use $crate::db::refine_jobs::{NewRefineJob, pow2_chunks};
        let jobs: &[&NewRefineJob] = $jobs;
        let at: chrono::DateTime<chrono::Utc> = $at;
        let mut inserted: Vec<uuid::Uuid> = Vec::with_capacity(jobs.len());
        for chunk in pow2_chunks(jobs, 32) {
            let mut q = sqlx::QueryBuilder::new(
                "INSERT INTO refine_jobs (id, status, phase_id, run_id, project_id, team_pk, \
                 executor, executor_kind, request, idempotency_key, request_hash, max_attempts, \
                 run_after, l0_total, version, created_at, updated_at, max_cost_usd, \
                 max_output_tokens, budget_action, retry_of, trace_parent) ",
            );
            q.push_values(chunk, |mut b, new| {
                b.push_bind(new.id)
                    .push("'queued'")
                    .push_bind(new.phase_id.as_str())
                    .push_bind(new.run_id)
                    .push_bind(new.project_id.as_deref())
                    .push_bind(new.team_pk.as_deref())
                    .push_bind(new.executor.as_str())
                    .push_bind(new.executor_kind.as_str())
                    .push_bind(sqlx::types::Json(&new.request))
                    .push_bind(new.idempotency_key.as_deref())
                    .push_bind(new.request_hash.as_deref())
                    .push_bind(i32::try_from(new.max_attempts).unwrap_or(i32::MAX))
                    .push_bind(at)
                    .push_bind(i32::try_from(new.l0s.len()).unwrap_or(i32::MAX))
                    .push("1")
                    .push_bind(at)
                    .push_bind(at)
                    .push_bind(new.budget.max_cost_usd)
                    .push_bind(new.budget.max_output_tokens)
                    .push_bind(new.budget.budget_action.as_str())
                    .push_bind(new.retry_of)
                    .push_bind(new.trace_parent.as_deref());
            });
            q.push(" ON CONFLICT (idempotency_key) DO NOTHING RETURNING id");
            let ids: Vec<uuid::Uuid> = q.build_query_scalar().fetch_all(&mut *$tx).await?;
            inserted.extend(ids);
        }
        let stored: Vec<&NewRefineJob> = jobs
            .iter()
            .copied()
            .filter(|j| inserted.contains(&j.id))
            .collect();
        let rows: Vec<(&NewRefineJob, usize, &(String, i32))> = stored
            .iter()
            .flat_map(|new| new.l0s.iter().enumerate().map(move |(i, l0)| (*new, i, l0)))
            .collect();
        for chunk in pow2_chunks(&rows, 256) {
            let mut q = sqlx::QueryBuilder::new(
                "INSERT INTO refine_l0_runs (job_id, assignment_id, position, batch, status, \
                 project_id, team_pk) ",
            );
            q.push_values(chunk, |mut b, (new, i, (assignment_id, batch))| {
                b.push_bind(new.id)
                    .push_bind(assignment_id.as_str())
                    .push_bind(i32::try_from(*i).unwrap_or(i32::MAX))
                    .push_bind(*batch)
                    .push("'pending'")
                    .push_bind(new.project_id.as_deref())
                    .push_bind(new.team_pk.as_deref());
            });
            q.build().execute(&mut *$tx).await?;
        }
        let (event, data) = $crate::db::refine_jobs::state_event(
            $crate::domain::job::JobStatus::Queued,
            0,
            serde_json::json!({}),
        );
        for chunk in pow2_chunks(&stored, 32) {
            let mut q = sqlx::QueryBuilder::new(
                "INSERT INTO refine_job_events (job_id, seq, event, data, created_at) ",
            );
            q.push_values(chunk, |mut b, new| {
                b.push_bind(new.id)
                    .push("1")
                    .push_bind(event)
                    .push_bind(sqlx::types::Json(&data))
                    .push_bind(at);
            });
            q.build().execute(&mut *$tx).await?;
        }
        inserted
    }};
}
