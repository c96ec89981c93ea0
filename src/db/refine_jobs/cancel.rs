//! Cancelling a refine job from the API.

use serde_json::json;
use uuid::Uuid;

use super::{lock_suffix, parse_status, state_event};
use crate::db::task_lists::now;
use crate::db::{Database, DbResult};
use crate::domain::job::JobStatus;

impl Database {
    /// Cancel from the API: a queued job is cancelled at once, a running one goes
    /// `cancelling` (its worker stops the L0s and ends it), anything else is left
    /// as it is. Returns `None` for an unknown job.
    pub async fn cancel_refine_job(&self, id: Uuid) -> DbResult<Option<JobStatus>> {
        let at = now();
        let lock = lock_suffix(self);
        let status = on_pool!(self, pool => {
            let mut tx = match self {
                Database::Sqlite(_) => pool.begin_with("BEGIN IMMEDIATE").await?,
                Database::Postgres(_) => pool.begin().await?,
            };
            let row: Option<(String, i32)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT status, attempt FROM refine_jobs WHERE id = $1{lock}"
            )))
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((status, attempt)) = row else {
                return Ok(None);
            };
            let status = parse_status(id, &status)?;
            let next = match status {
                JobStatus::Queued => JobStatus::Cancelled,
                JobStatus::Running => JobStatus::Cancelling,
                other => return Ok(Some(other)),
            };
            let seq = bump!(tx, id, at);
            sqlx::query(
                "UPDATE refine_jobs SET status = $2, cancel_requested = TRUE, \
                 cancel_requested_at = $3, \
                 finished_at = CASE WHEN $2 = 'cancelled' THEN $3 ELSE finished_at END \
                 WHERE id = $1",
            )
            .bind(id)
            .bind(next.as_str())
            .bind(at)
            .execute(&mut *tx)
            .await?;
            push_events!(tx, id, seq, at, &[state_event(next, attempt, json!({}))]);
            tx.commit().await?;
            next
        });
        Ok(Some(status))
    }
}
