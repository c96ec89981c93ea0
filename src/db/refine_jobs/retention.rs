//! Retention: deleting finished refine jobs and runs, with their events and L0
//! records.

use chrono::{DateTime, Utc};

use crate::db::{Database, DbResult, status_list};
use crate::domain::job::JobStatus;

/// The tables holding a job's rows, keyed by `job_id`. On Postgres they have no
/// foreign key to `refine_jobs` (migration 0007: the checks cost the queue a tenth
/// of its CPU), so nothing cascades to them: retention deletes them itself. SQLite
/// keeps its foreign keys, and the explicit deletes only make its cascade a no-op.
const JOB_CHILDREN: [&str; 2] = ["refine_job_events", "refine_l0_runs"];

impl Database {
    /// Retention: deletes terminal jobs (and runs) finished before `cutoff`, and
    /// every event and L0 record of them, in one transaction. Returns the runs and
    /// standalone jobs deleted (a run's jobs go with it).
    ///
    /// The sets cannot grow between the statements: a job or run finishes at the
    /// current time, never before a cutoff in the past.
    pub async fn delete_refine_jobs_finished_before(&self, cutoff: DateTime<Utc>) -> DbResult<u64> {
        let terminal = status_list(&JobStatus::TERMINAL);
        // Two selects rather than one with OR, so each reads its own index.
        let expired_job_sets = [
            format!(
                "SELECT j.id FROM refine_jobs j JOIN refine_runs r ON r.id = j.run_id \
                 WHERE r.status IN {terminal} AND r.finished_at < $1"
            ),
            format!(
                "SELECT id FROM refine_jobs WHERE run_id IS NULL \
                 AND status IN {terminal} AND finished_at < $1"
            ),
        ];
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            for child in JOB_CHILDREN {
                for jobs in &expired_job_sets {
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DELETE FROM {child} WHERE job_id IN ({jobs})"
                    )))
                    .bind(cutoff)
                    .execute(&mut *tx)
                    .await?;
                }
            }
            // A run's jobs go with it (refine_jobs.run_id cascades).
            let runs = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM refine_runs WHERE status IN {terminal} AND finished_at < $1"
            )))
            .bind(cutoff)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            let jobs = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM refine_jobs WHERE run_id IS NULL \
                 AND status IN {terminal} AND finished_at < $1"
            )))
            .bind(cutoff)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            tx.commit().await?;
            Ok(runs + jobs)
        })
    }
}
