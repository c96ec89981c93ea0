//! Retention: deleting finished refine jobs and runs.

use chrono::{DateTime, Utc};

use crate::db::{Database, DbResult};

impl Database {
    /// Retention: deletes terminal jobs (and runs) finished before `cutoff`.
    pub async fn delete_refine_jobs_finished_before(&self, cutoff: DateTime<Utc>) -> DbResult<u64> {
        on_pool!(self, pool => {
            let runs = sqlx::query(
                "DELETE FROM refine_runs WHERE status IN ('succeeded', 'failed', 'cancelled') \
                 AND finished_at < $1",
            )
            .bind(cutoff)
            .execute(pool)
            .await?
            .rows_affected();
            let jobs = sqlx::query(
                "DELETE FROM refine_jobs WHERE run_id IS NULL \
                 AND status IN ('succeeded', 'failed', 'cancelled') AND finished_at < $1",
            )
            .bind(cutoff)
            .execute(pool)
            .await?
            .rows_affected();
            Ok(runs + jobs)
        })
    }
}
