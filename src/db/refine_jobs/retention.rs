//! Retention: deleting finished refine jobs and runs.

use chrono::{DateTime, Utc};

use crate::db::{Database, DbResult, status_list};
use crate::domain::job::JobStatus;

impl Database {
    /// Retention: deletes terminal jobs (and runs) finished before `cutoff`.
    pub async fn delete_refine_jobs_finished_before(&self, cutoff: DateTime<Utc>) -> DbResult<u64> {
        let terminal = status_list(&JobStatus::TERMINAL);
        on_pool!(self, pool => {
            let runs = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM refine_runs WHERE status IN {terminal} AND finished_at < $1"
            )))
            .bind(cutoff)
            .execute(pool)
            .await?
            .rows_affected();
            let jobs = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM refine_jobs WHERE run_id IS NULL \
                 AND status IN {terminal} AND finished_at < $1"
            )))
            .bind(cutoff)
            .execute(pool)
            .await?
            .rows_affected();
            Ok(runs + jobs)
        })
    }
}
