//! Submitting a refine job: one transaction, idempotent by key.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use sqlx::types::Json;

use super::{Created, JobProgress, NewRefineJob, StoredJob, budget_of, state_event};
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
        let inserted = match self {
            Database::Postgres(pool) => insert_job_in_one_statement(pool, new, at).await?,
            Database::Sqlite(pool) => {
                let mut tx = pool.begin().await?;
                let inserted = insert_job!(tx, new, at);
                if inserted {
                    tx.commit().await?;
                }
                inserted
            }
        };
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

/// What `insert_job!` writes — the job, its pending L0 rows and its `queued` event —
/// as one Postgres statement (data-modifying CTEs, the L0 rows from arrays): one
/// round trip in its own transaction instead of five (BEGIN, three INSERTs,
/// COMMIT), which on a busy queue is a fifth of the round trips per job
/// (bench/README.md, "queue.sh"). SQLite runs `insert_job!` in-process, where round
/// trips cost nothing. `true` when inserted (`false`: the idempotency key exists).
async fn insert_job_in_one_statement(
    pool: &sqlx::PgPool,
    new: &NewRefineJob<'_>,
    at: DateTime<Utc>,
) -> DbResult<bool> {
    let (assignment_ids, batches): (Vec<&str>, Vec<i32>) = new
        .l0s
        .iter()
        .map(|(id, batch)| (id.as_str(), *batch))
        .unzip();
    let (_, event) = state_event(JobStatus::Queued, 0, serde_json::json!({}));
    let inserted: i64 = sqlx::query_scalar(
        "WITH job AS ( \
             INSERT INTO refine_jobs (id, status, phase_id, run_id, project_id, team_pk, \
                 executor, executor_kind, request, idempotency_key, request_hash, max_attempts, \
                 run_after, l0_total, version, created_at, updated_at, max_cost_usd, \
                 max_output_tokens, budget_action) \
             VALUES ($1, 'queued', $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 1, $12, \
                 $12, $14, $15, $16) \
             ON CONFLICT (idempotency_key) DO NOTHING RETURNING id), \
         l0 AS ( \
             INSERT INTO refine_l0_runs (job_id, assignment_id, position, batch, status, \
                 project_id, team_pk) \
             SELECT job.id, l0.assignment_id, (l0.n - 1)::int, l0.batch, 'pending', $4, $5 \
             FROM job, UNNEST($17::text[], $18::int[]) WITH ORDINALITY \
                 AS l0(assignment_id, batch, n)), \
         event AS ( \
             INSERT INTO refine_job_events (job_id, seq, event, data, created_at) \
             SELECT id, 1, 'state', $19, $12 FROM job) \
         SELECT COUNT(*) FROM job",
    )
    .bind(new.id)
    .bind(new.phase_id)
    .bind(new.run_id)
    .bind(new.project_id)
    .bind(new.team_pk)
    .bind(new.executor)
    .bind(new.executor_kind)
    .bind(Json(new.request))
    .bind(new.idempotency_key)
    .bind(new.request_hash)
    .bind(i32::try_from(new.max_attempts).unwrap_or(i32::MAX))
    .bind(at)
    .bind(i32::try_from(new.l0s.len()).unwrap_or(i32::MAX))
    .bind(new.budget.max_cost_usd)
    .bind(new.budget.max_output_tokens)
    .bind(new.budget.budget_action.as_str())
    .bind(assignment_ids)
    .bind(batches)
    .bind(Json(event))
    .fetch_one(pool)
    .await?;
    Ok(inserted == 1)
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
