//! The worker's fenced writes while a job runs: L0s started and finished, log lines.
//!
//! The `progress` their events carry is the job's as the claim found it, moved by
//! each write the worker makes — not counted again from the L0 rows each time: while
//! the lease holds, no one else writes those rows (the reaper and a hand-back only
//! touch them once the lease is gone, and then this worker's writes are refused).

use serde_json::{Value, json};
use sqlx::QueryBuilder;
use sqlx::types::Json;

use super::{Fenced, JobProgress, Lease, LeaseLost};
use crate::db::Database;
use crate::db::task_lists::now;
use crate::domain::usage::L0Usage;

/// An L0 that ended, as the worker stores it.
pub struct L0Done<'a> {
    pub assignment_id: &'a str,
    pub status: &'a str,
    pub tries: i32,
    pub exit_code: Option<i32>,
    pub error: Option<&'a str>,
    pub output_excerpt: Option<&'a str>,
    /// What a resumed job uses instead of running the L0 again.
    pub outcome: &'a Value,
    /// Stored in the same write as the outcome: counted once, never again.
    pub usage: &'a L0Usage,
    pub prompt_bytes: i64,
}

impl Database {
    /// A batch's L0s are about to start: their rows go `running` and `starts`
    /// counts them, one `progress` event each. `progress` is the job's before this
    /// write; the job's after it is returned.
    pub async fn l0s_started(
        &self,
        lease: Lease,
        assignment_ids: &[String],
        attempt: i32,
        progress: JobProgress,
    ) -> Fenced<JobProgress> {
        if assignment_ids.is_empty() {
            return Ok(Ok(progress));
        }
        let at = now();
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let Some(seq) = bump_fenced!(tx, lease, at, assignment_ids.len()) else {
                return Ok(Err(LeaseLost));
            };
            let mut q = QueryBuilder::new(
                "UPDATE refine_l0_runs SET status = 'running', finished_at = NULL, started_at = ",
            );
            q.push_bind(at)
                .push(", attempt = ")
                .push_bind(attempt)
                .push(", starts = starts + 1 WHERE job_id = ")
                .push_bind(lease.job_id)
                .push(" AND assignment_id IN (");
            let mut sep = q.separated(", ");
            for id in assignment_ids {
                sep.push_bind(id.clone());
            }
            q.push(")");
            let started = q.build().execute(&mut *tx).await?.rows_affected();
            let progress = progress.started(started);
            let events: Vec<(&str, Value)> = assignment_ids
                .iter()
                .map(|id| {
                    (
                        "progress",
                        json!({"assignment_id": id, "status": "running", "progress": progress}),
                    )
                })
                .collect();
            push_events!(tx, lease.job_id, seq, at, &events);
            tx.commit().await?;
            Ok(Ok(progress))
        })
    }

    /// L0s ended: their records and outcomes (what a resumed job will not run
    /// again), the job log so far, a `progress` event each and a `log` event per
    /// new line — one transaction. `progress` as for [`Database::l0s_started`].
    pub async fn l0s_finished(
        &self,
        lease: Lease,
        dones: &[L0Done<'_>],
        log: &[String],
        new_lines: &[String],
        progress: JobProgress,
    ) -> Fenced<JobProgress> {
        let at = now();
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let Some(seq) = bump_fenced!(tx, lease, at, dones.len() + new_lines.len(), log = log)
            else {
                return Ok(Err(LeaseLost));
            };
            if !dones.is_empty() {
                // One statement for all of them: `UPDATE … FROM (VALUES …)`, whose
                // columns both back-ends name column1, column2, …
                let mut q = QueryBuilder::new(
                    "UPDATE refine_l0_runs SET status = v.column2, finished_at = ",
                );
                q.push_bind(at).push(
                    ", tries = v.column3, exit_code = v.column4, error = v.column5, \
                     output_excerpt = v.column6, outcome = v.column7, input_tokens = v.column8, \
                     output_tokens = v.column9, cache_read_input_tokens = v.column10, \
                     cache_creation_input_tokens = v.column11, cost_usd = v.column12, \
                     usage_model = v.column13, usage_source = v.column14, \
                     prompt_bytes = v.column15 FROM (",
                );
                q.push_values(dones, |mut row, done| {
                    row.push_bind(done.assignment_id)
                        .push_bind(done.status)
                        .push_bind(done.tries)
                        .push_bind(done.exit_code)
                        .push_bind(done.error)
                        .push_bind(done.output_excerpt)
                        .push_bind(Json(done.outcome))
                        .push_bind(done.usage.input_tokens)
                        .push_bind(done.usage.output_tokens)
                        .push_bind(done.usage.cache_read_input_tokens)
                        .push_bind(done.usage.cache_creation_input_tokens)
                        .push_bind(done.usage.cost_usd)
                        .push_bind(done.usage.model.as_deref())
                        .push_bind(done.usage.source.as_str())
                        .push_bind(done.prompt_bytes);
                });
                q.push(") AS v WHERE refine_l0_runs.job_id = ")
                    .push_bind(lease.job_id)
                    .push(" AND refine_l0_runs.assignment_id = v.column1");
                q.build().execute(&mut *tx).await?;
            }
            let progress = progress.ended(dones.iter().map(|d| d.status));
            let mut events: Vec<(&str, Value)> = dones
                .iter()
                .map(|d| {
                    (
                        "progress",
                        json!({"assignment_id": d.assignment_id, "status": d.status, "progress": progress}),
                    )
                })
                .collect();
            events.extend(new_lines.iter().map(|l| ("log", json!({"line": l}))));
            push_events!(tx, lease.job_id, seq, at, &events);
            tx.commit().await?;
            Ok(Ok(progress))
        })
    }

    /// Stores the job log and one `log` event per new line.
    pub async fn append_job_log(
        &self,
        lease: Lease,
        log: &[String],
        new_lines: &[String],
    ) -> Fenced<()> {
        if new_lines.is_empty() {
            return Ok(Ok(()));
        }
        let at = now();
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let Some(seq) = bump_fenced!(tx, lease, at, new_lines.len(), log = log) else {
                return Ok(Err(LeaseLost));
            };
            let events: Vec<(&str, Value)> = new_lines
                .iter()
                .map(|l| ("log", json!({"line": l})))
                .collect();
            push_events!(tx, lease.job_id, seq, at, &events);
            tx.commit().await?;
        });
        Ok(Ok(()))
    }
}
