//! Submitting a refine job: one transaction, idempotent by key.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Created, JobProgress, NewRefineJob, StoredJob, budget_of};
use crate::db::task_lists::now;
use crate::db::{Database, DbError, DbResult};
use crate::domain::job::JobStatus;
use crate::domain::usage::UsageTotals;

impl Database {
    /// Inserts a job and its pending L0 rows in one transaction. With an
    /// idempotency key the unique constraint decides: a second create with the same
    /// key finds the first instead of inserting.
    pub async fn create_refine_job(&self, new: &NewRefineJob<'_>) -> DbResult<Created<StoredJob>> {
        let at = now();
        let inserted = on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let inserted = insert_job!(tx, new, at);
            if inserted {
                tx.commit().await?;
            }
            inserted
        });
        if inserted {
            return Ok(Created::New(as_inserted(new, at)));
        }
        let key = new.idempotency_key.unwrap_or_default();
        let found: Option<(Uuid, Option<String>)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT id, request_hash FROM refine_jobs WHERE idempotency_key = $1")
                .bind(key)
                .fetch_optional(pool)
                .await?
        });
        match found {
            Some((id, hash)) if hash.as_deref() == new.request_hash => Ok(self
                .refine_job(id)
                .await?
                .map_or(Created::KeyReused, Created::Existing)),
            Some(_) => Ok(Created::KeyReused),
            // Deleted by retention between the two statements: a conflict, retryable.
            None => Err(DbError::Conflict(
                "the idempotency key's job was just deleted; retry".into(),
            )),
        }
    }

    /// Whether a job holds this idempotency key (a create with it replays).
    pub async fn refine_job_key_exists(&self, key: &str) -> DbResult<bool> {
        let n: i64 = on_pool!(self, pool => {
            sqlx::query_scalar("SELECT COUNT(*) FROM refine_jobs WHERE idempotency_key = $1")
                .bind(key)
                .fetch_one(pool)
                .await?
        });
        Ok(n > 0)
    }
}

/// The job as `insert_job!` just wrote it (what reading it back would return: the
/// insert is its whole state, so the create answers without a second round trip).
fn as_inserted(new: &NewRefineJob<'_>, at: DateTime<Utc>) -> StoredJob {
    StoredJob {
        id: new.id,
        kind: "refine".to_owned(),
        status: JobStatus::Queued,
        phase_id: new.phase_id.to_owned(),
        run_id: new.run_id,
        project_id: new.project_id.map(str::to_owned),
        team_pk: new.team_pk.map(str::to_owned),
        executor: new.executor.to_owned(),
        executor_kind: new.executor_kind.to_owned(),
        created_at: at,
        started_at: None,
        cancel_requested_at: None,
        finished_at: None,
        updated_at: at,
        attempt: 0,
        max_attempts: i32::try_from(new.max_attempts).unwrap_or(i32::MAX),
        progress: JobProgress {
            l0_total: i64::try_from(new.l0s.len()).unwrap_or(i64::MAX),
            ..JobProgress::default()
        },
        log: Vec::new(),
        result: None,
        phase_refined_path: None,
        error: None,
        version: 1,
        usage: UsageTotals::default(),
        budget: budget_of(
            new.budget.max_cost_usd,
            new.budget.max_output_tokens,
            new.budget.budget_action.as_str(),
        ),
    }
}
