//! The worker's writes while a job runs: L0s started and ended, log lines.
//!
//! The worker gathers them in a [`PendingProgress`] and stores them together — by
//! [`Database::write_progress`], or inside the job's end
//! ([`Database::finish_refine_job`]) — so the starts and ends that fall within its
//! write-behind window (docs/jobs.md, "Write-behind") cost one commit, not one each.
//! Every row and event is still written, in the order it happened, with its own time.
//!
//! The `progress` their events carry is the job's as the claim found it, moved by
//! each write the worker makes — not counted again from the L0 rows each time: while
//! the lease holds, no one else writes those rows (the reaper and a hand-back only
//! touch them once the lease is gone, and then this worker's writes are refused).

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{Fenced, JobLease, JobProgress, LeaseLost};
use crate::db::Database;
use crate::db::task_lists::now;
use crate::domain::refine::{L0ErrorCode, L0Status};
use crate::domain::usage::L0Usage;

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
                .push(" AND assignment_id IN ");
            $crate::db::push_bound_list(&mut q, batch.ids.iter().map(String::as_str));
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
                    .push_bind(l0.usage.source)
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
        let mut p = $crate::db::refine_jobs::JobProgress::default();
        for (status, n) in rows {
            $crate::db::refine_jobs::add_count(&mut p, status, n);
        }
        p
    }};
}

/// An L0 that ended, as the worker stores it.
#[derive(Debug, Clone)]
pub struct L0Ended {
    pub assignment_id: String,
    pub status: L0Status,
    pub tries: i32,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    /// The typed cause of a failure a client can act on (docs/jobs.md).
    pub error_code: Option<L0ErrorCode>,
    pub output_excerpt: Option<String>,
    /// What a resumed job uses instead of running the L0 again.
    pub outcome: Value,
    /// Stored in the same write as the outcome: counted once, never again.
    pub usage: L0Usage,
    pub prompt_bytes: i64,
}

/// Worker writes not stored yet, in the order they happened. Building it is pure;
/// storing it is one transaction.
#[derive(Debug, Default)]
pub struct PendingProgress {
    /// Batches whose start is not stored and whose L0s have not all ended here.
    pub(super) started: Vec<StartedBatch>,
    /// L0s that ended; `start` is set when their start is stored in the same row
    /// write (it is still pending: one UPDATE instead of two).
    pub(super) ended: Vec<EndedRow>,
    /// `(event, data, created_at)`, numbered in this order.
    pub(super) events: Vec<(&'static str, Value, DateTime<Utc>)>,
    /// The job log after the latest of these writes, when one changed it.
    pub(super) log: Option<Vec<String>>,
}

#[derive(Debug)]
pub(super) struct StartedBatch {
    pub(super) ids: Vec<String>,
    pub(super) attempt: i32,
    pub(super) at: DateTime<Utc>,
}

#[derive(Debug)]
pub(super) struct EndedRow {
    pub(super) l0: L0Ended,
    pub(super) at: DateTime<Utc>,
    /// `(started_at, attempt)` of a start stored with this end.
    pub(super) start: Option<(DateTime<Utc>, i32)>,
}

impl PendingProgress {
    pub fn is_empty(&self) -> bool {
        self.events.is_empty() && self.log.is_none()
    }

    /// A batch's L0s are about to start: their rows go `running` and `starts`
    /// counts them, one `progress` event each. Returns the job's progress after it.
    pub fn start(&mut self, ids: &[String], attempt: i32, progress: JobProgress) -> JobProgress {
        let at = now();
        let progress = progress.started(ids.len());
        for id in ids {
            let data =
                json!({"assignment_id": id, "status": L0Status::Running, "progress": progress});
            self.events.push(("progress", data, at));
        }
        self.started.push(StartedBatch {
            ids: ids.to_vec(),
            attempt,
            at,
        });
        progress
    }

    /// L0s ended: their records and outcomes, the job log so far (`log`), a
    /// `progress` event each and a `log` event per new line.
    pub fn end(
        &mut self,
        l0s: Vec<L0Ended>,
        log: &[String],
        new_lines: &[String],
        progress: JobProgress,
    ) -> JobProgress {
        let at = now();
        let progress = progress.ended(l0s.iter().map(|l| l.status));
        for l0 in &l0s {
            let data = json!({"assignment_id": l0.assignment_id, "status": l0.status, "progress": progress});
            self.events.push(("progress", data, at));
        }
        self.push_lines(log, new_lines, at);
        for l0 in l0s {
            let start = self.take_start(&l0.assignment_id);
            self.ended.push(EndedRow { l0, at, start });
        }
        progress
    }

    /// Lines not tied to one L0: the job log so far and a `log` event per new line.
    pub fn log(&mut self, log: &[String], new_lines: &[String]) {
        self.push_lines(log, new_lines, now());
    }

    fn push_lines(&mut self, log: &[String], new_lines: &[String], at: DateTime<Utc>) {
        if new_lines.is_empty() {
            return;
        }
        for line in new_lines {
            self.events.push(("log", json!({"line": line}), at));
        }
        self.log = Some(log.to_vec());
    }

    /// The pending start of `id`, moved out of its batch.
    fn take_start(&mut self, id: &str) -> Option<(DateTime<Utc>, i32)> {
        let (b, i) = self.started.iter().enumerate().find_map(|(b, batch)| {
            Some((b, batch.ids.iter().position(|started| started == id)?))
        })?;
        let batch = &mut self.started[b];
        batch.ids.remove(i);
        let start = (batch.at, batch.attempt);
        if batch.ids.is_empty() {
            self.started.remove(b);
        }
        Some(start)
    }
}

/// After `store_pending!` in the same transaction: the `error_code` of each ended
/// L0 that has one (docs/jobs.md, "Rate limits"). Failures with a code are rare,
/// so this is usually no statement at all.
macro_rules! store_error_codes {
    ($tx:expr, $job_id:expr, $pending:expr) => {{
        let pending: &$crate::db::refine_jobs::PendingProgress = $pending;
        for ended in &pending.ended {
            if let Some(code) = ended.l0.error_code {
                sqlx::query(
                    "UPDATE refine_l0_runs SET error_code = $3 \
                     WHERE job_id = $1 AND assignment_id = $2",
                )
                .bind($job_id)
                .bind(ended.l0.assignment_id.as_str())
                .bind(code)
                .execute(&mut *$tx)
                .await?;
            }
        }
    }};
}
pub(crate) use store_error_codes;

impl Database {
    /// Stores `pending` in one fenced transaction (nothing when it is empty).
    pub async fn write_progress(&self, lease: JobLease, pending: &PendingProgress) -> Fenced<()> {
        if pending.is_empty() {
            return Ok(Ok(()));
        }
        let at = now();
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let log = pending.log.as_deref();
            let Some(seq) = bump_fenced!(tx, lease, at, pending.events.len(), log = log) else {
                return Ok(Err(LeaseLost));
            };
            store_pending!(tx, lease.job_id, seq, pending, then = (&[], at));
            store_error_codes!(tx, lease.job_id, pending);
            tx.commit().await?;
        });
        Ok(Ok(()))
    }
}
