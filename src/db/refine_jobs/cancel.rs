//! Cancelling a refine job from the API.

use serde_json::json;
use uuid::Uuid;

use super::state_event;
use crate::db::task_lists::now;
use crate::db::{Database, DbResult};
use crate::domain::job::JobStatus;

impl Database {
    /// Cancel from the API, as the cancel table ([`JobStatus::after_cancel`]) says: a
    /// queued job is cancelled at once, a running one goes `cancelling` (its worker
    /// stops the L0s and ends it), anything else is left as it is. Returns the status
    /// the job is in afterwards, `None` for an unknown job.
    pub async fn cancel_refine_job(&self, id: Uuid) -> DbResult<Option<JobStatus>> {
        let at = now();
        let status = on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let row: Option<(JobStatus, i32)> =
                locked_row!(self, tx, "refine_jobs", "status, attempt", id);
            let Some((status, attempt)) = row else {
                return Ok(None);
            };
            let Some(next) = status.after_cancel() else {
                return Ok(Some(status));
            };
            let seq = bump!(tx, id, at);
            sqlx::query(
                "UPDATE refine_jobs SET status = $2, cancel_requested = TRUE, \
                 cancel_requested_at = $3, finished_at = COALESCE($4, finished_at) \
                 WHERE id = $1",
            )
            .bind(id)
            .bind(next.as_str())
            .bind(at)
            .bind(next.is_terminal().then_some(at))
            .execute(&mut *tx)
            .await?;
            push_events!(tx, id, seq, at, &[state_event(next, attempt, json!({}))]);
            if next.is_terminal() {
                outbox_job_ended!(tx, id, at);
            }
            tx.commit().await?;
            next
        });
        Ok(Some(status))
    }
}
