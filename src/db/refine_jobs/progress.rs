//! The worker's fenced writes while a job runs: L0s started and finished, log lines.

use serde_json::{Value, json};
use sqlx::QueryBuilder;
use sqlx::types::Json;

use super::{Fenced, Lease, LeaseLost};
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
    /// counts them, one `progress` event each.
    pub async fn l0s_started(
        &self,
        lease: Lease,
        assignment_ids: &[String],
        attempt: i32,
    ) -> Fenced<()> {
        if assignment_ids.is_empty() {
            return Ok(Ok(()));
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
            q.build().execute(&mut *tx).await?;
            let progress = progress_of!(tx, lease.job_id);
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
        });
        Ok(Ok(()))
    }

    /// L0s ended: their records and outcomes (what a resumed job will not run
    /// again), the job log so far, a `progress` event each and a `log` event per
    /// new line — one transaction.
    pub async fn l0s_finished(
        &self,
        lease: Lease,
        dones: &[L0Done<'_>],
        log: &[String],
        new_lines: &[String],
    ) -> Fenced<()> {
        let at = now();
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let Some(seq) = bump_fenced!(tx, lease, at, dones.len() + new_lines.len()) else {
                return Ok(Err(LeaseLost));
            };
            for done in dones {
                sqlx::query(
                    "UPDATE refine_l0_runs SET status = $3, finished_at = $4, tries = $5, \
                     exit_code = $6, error = $7, output_excerpt = $8, outcome = $9, \
                     input_tokens = $10, output_tokens = $11, cache_read_input_tokens = $12, \
                     cache_creation_input_tokens = $13, cost_usd = $14, usage_model = $15, \
                     usage_source = $16, prompt_bytes = $17 \
                     WHERE job_id = $1 AND assignment_id = $2",
                )
                .bind(lease.job_id)
                .bind(done.assignment_id)
                .bind(done.status)
                .bind(at)
                .bind(done.tries)
                .bind(done.exit_code)
                .bind(done.error)
                .bind(done.output_excerpt)
                .bind(Json(done.outcome))
                .bind(done.usage.input_tokens)
                .bind(done.usage.output_tokens)
                .bind(done.usage.cache_read_input_tokens)
                .bind(done.usage.cache_creation_input_tokens)
                .bind(done.usage.cost_usd)
                .bind(done.usage.model.as_deref())
                .bind(done.usage.source.as_str())
                .bind(done.prompt_bytes)
                .execute(&mut *tx)
                .await?;
            }
            sqlx::query("UPDATE refine_jobs SET log = $2 WHERE id = $1")
                .bind(lease.job_id)
                .bind(Json(log))
                .execute(&mut *tx)
                .await?;
            let progress = progress_of!(tx, lease.job_id);
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
        });
        Ok(Ok(()))
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
            let Some(seq) = bump_fenced!(tx, lease, at, new_lines.len()) else {
                return Ok(Err(LeaseLost));
            };
            sqlx::query("UPDATE refine_jobs SET log = $2 WHERE id = $1")
                .bind(lease.job_id)
                .bind(Json(log))
                .execute(&mut *tx)
                .await?;
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
