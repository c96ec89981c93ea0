//! Storage of refine runs (docs/spec/refine.md §7): a run row and its phase jobs, which are
//! ordinary refine jobs with `run_id` set.
//!
//! The merge happens exactly once: [`Database::try_merge_refine_run`] locks the run
//! row, checks that it is not merged yet and that every phase job is terminal, and
//! writes the merged result (`domain::refine::merge_run`) in the same transaction.
//! Whoever sees the last phase job end calls it — a worker on any replica, a cancel,
//! the reaper after a crash — and all but one find nothing to do.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::types::Json;
use uuid::Uuid;

use super::refine_jobs::{Created, NewRefineJob, budget_of};
use super::task_lists::now;
use super::{Database, DbError, DbResult, status_list};
use crate::domain::job::JobStatus;
use crate::domain::refine::{PhaseOutcome, StoredRun, merge_run};
use crate::domain::usage::{Budget, BudgetAction};

pub struct NewRefineRun<'a> {
    pub id: Uuid,
    pub request: &'a Value,
    pub executor: &'a str,
    pub project_id: Option<&'a str>,
    pub team_pk: Option<&'a str>,
    pub idempotency_key: Option<&'a str>,
    pub request_hash: &'a str,
    /// One per phase, natural phase order; their `run_id` must be `id`.
    pub jobs: Vec<NewRefineJob>,
    /// Applies to the whole run (its phase jobs carry it too).
    pub budget: Budget,
}

impl Database {
    /// Inserts a run and its phase jobs in one transaction (all or nothing).
    pub async fn create_refine_run(&self, new: &NewRefineRun<'_>) -> DbResult<Created<Uuid>> {
        let at = now();
        let inserted = on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let inserted = sqlx::query(
                "INSERT INTO refine_runs (id, status, request, executor, project_id, team_pk, \
                 idempotency_key, request_hash, version, created_at, updated_at, max_cost_usd, \
                 max_output_tokens, budget_action) \
                 VALUES ($1, 'running', $2, $3, $4, $5, $6, $7, 1, $8, $8, $9, $10, $11) \
                 ON CONFLICT (idempotency_key) DO NOTHING",
            )
            .bind(new.id)
            .bind(Json(new.request))
            .bind(new.executor)
            .bind(new.project_id)
            .bind(new.team_pk)
            .bind(new.idempotency_key)
            .bind(new.request_hash)
            .bind(at)
            .bind(new.budget.max_cost_usd)
            .bind(new.budget.max_output_tokens)
            .bind(new.budget.budget_action)
            .execute(&mut *tx)
            .await?
            .rows_affected()
                == 1;
            if inserted {
                let jobs: Vec<&NewRefineJob> = new.jobs.iter().collect();
                if insert_jobs!(tx, &jobs, at).len() != jobs.len() {
                    return Err(DbError::Conflict("a phase job's id collided".into()));
                }
                tx.commit().await?;
            }
            inserted
        });
        if inserted {
            return Ok(Created::New(new.id));
        }
        let key = new.idempotency_key.unwrap_or_default();
        let sql = "SELECT id, request_hash FROM refine_runs WHERE idempotency_key = $1";
        let found: Option<(Uuid, Option<String>)> = self.row_by(sql, key).await?;
        match found {
            Some((id, hash)) if hash.as_deref() == Some(new.request_hash) => {
                Ok(Created::Existing(id))
            }
            Some(_) => Ok(Created::KeyReused),
            None => Err(DbError::Conflict(
                "the idempotency key's run was just deleted; retry".into(),
            )),
        }
    }

    pub async fn refine_run(&self, id: Uuid) -> DbResult<Option<StoredRun>> {
        type Row = (
            JobStatus,
            Option<String>,
            Option<String>,
            String,
            DateTime<Utc>,
            Option<DateTime<Utc>>,
            Option<Json<Value>>,
            Option<f64>,
            Option<i64>,
            BudgetAction,
        );
        let sql = "SELECT status, project_id, team_pk, executor, created_at, finished_at, result, \
                   max_cost_usd, max_output_tokens, budget_action FROM refine_runs WHERE id = $1";
        let row: Option<Row> = self.row_by(sql, id).await?;
        let Some((
            status,
            project_id,
            team_pk,
            executor,
            created_at,
            finished_at,
            result,
            max_cost_usd,
            max_output_tokens,
            budget_action,
        )) = row
        else {
            return Ok(None);
        };
        let sql = "SELECT phase_id, id, status FROM refine_jobs WHERE run_id = $1 ORDER BY created_at, id";
        let mut jobs: Vec<(String, Uuid, JobStatus)> = self.rows_by(sql, id).await?;
        jobs.sort_by(|a, b| crate::domain::natural::natural_cmp(&a.0, &b.0));
        let phases = jobs
            .into_iter()
            .map(|(phase, job_id, status)| (phase, json!({"job_id": job_id, "status": status})))
            .collect();
        let version = self.refine_run_version(id).await?.map_or(0, |(v, _)| v);
        let usage = self.run_usage(id).await?;
        Ok(Some(StoredRun {
            id,
            status,
            project_id,
            team_pk,
            executor,
            phases,
            created_at,
            finished_at,
            result: result.map(|r| r.0),
            version,
            usage,
            budget: budget_of(max_cost_usd, max_output_tokens, budget_action),
        }))
    }

    /// `(version, status)` where the version moves with the run and every phase job.
    pub async fn refine_run_version(&self, id: Uuid) -> DbResult<Option<(i64, JobStatus)>> {
        // SUM(bigint) is NUMERIC on Postgres: cast back so both back-ends give INT8.
        Ok(on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT CAST(r.version + COALESCE((SELECT SUM(j.version) FROM refine_jobs j \
                 WHERE j.run_id = r.id), 0) AS BIGINT), r.status FROM refine_runs r WHERE r.id = $1",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?
        }))
    }

    /// Whether a run holds this idempotency key (a create with it replays).
    pub async fn refine_run_key_exists(&self, key: &str) -> DbResult<bool> {
        let n: i64 = on_pool!(self, pool => {
            sqlx::query_scalar("SELECT COUNT(*) FROM refine_runs WHERE idempotency_key = $1")
                .bind(key)
                .fetch_one(pool)
                .await?
        });
        Ok(n > 0)
    }

    /// Marks a running run `cancelling` and returns its non-terminal phase jobs
    /// (the caller cancels each). `None` for an unknown run.
    pub async fn cancel_refine_run(&self, id: Uuid) -> DbResult<Option<Vec<Uuid>>> {
        let at = now();
        let turn = self.writer_turn().await;
        let found = on_pool!(self, pool => {
            sqlx::query(
                "UPDATE refine_runs SET status = 'cancelling', version = version + 1, updated_at = $2 \
                 WHERE id = $1 AND status = 'running'",
            )
            .bind(id)
            .bind(at)
            .execute(pool)
            .await?;
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM refine_runs WHERE id = $1")
                .bind(id)
                .fetch_one(pool)
                .await?
        });
        drop(turn);
        if found == 0 {
            return Ok(None);
        }
        let terminal = status_list(&JobStatus::TERMINAL);
        let sql =
            format!("SELECT id FROM refine_jobs WHERE run_id = $1 AND status NOT IN {terminal}");
        let jobs: Vec<(Uuid,)> = self.rows_by(&sql, id).await?;
        Ok(Some(jobs.into_iter().map(|(job,)| job).collect()))
    }

    /// Runs not merged yet whose phase jobs are all terminal (missed merges: a
    /// crash between the last job's end and its merge).
    pub async fn refine_runs_due_for_merge(&self) -> DbResult<Vec<Uuid>> {
        let (in_flight, terminal) = (
            status_list(&JobStatus::IN_FLIGHT),
            status_list(&JobStatus::TERMINAL),
        );
        Ok(on_pool!(self, pool => {
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT r.id FROM refine_runs r WHERE r.status IN {in_flight} \
                 AND NOT EXISTS (SELECT 1 FROM refine_jobs j WHERE j.run_id = r.id \
                   AND j.status NOT IN {terminal}) LIMIT 100"
            )))
            .fetch_all(pool)
            .await?
        }))
    }

    /// Merges the run if it is due, exactly once (see the module comment). Returns
    /// the status written, or `None` when there was nothing to do.
    pub async fn try_merge_refine_run(&self, run_id: Uuid) -> DbResult<Option<JobStatus>> {
        let at = now();
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let run: Option<(JobStatus, Json<Value>)> =
                locked_row!(self, tx, "refine_runs", "status, request", run_id);
            let Some((status, request)) = run else {
                return Ok(None);
            };
            // Merged already (terminal): nothing to do.
            let Some(run_status) = Some(status).filter(|s| JobStatus::IN_FLIGHT.contains(s))
            else {
                return Ok(None);
            };
            type PhaseRow = (String, Uuid, JobStatus, Option<Json<Value>>, Option<String>);
            let jobs: Vec<PhaseRow> = sqlx::query_as(
                "SELECT phase_id, id, status, result, error_code FROM refine_jobs WHERE run_id = $1",
            )
            .bind(run_id)
            .fetch_all(&mut *tx)
            .await?;
            let mut outcomes = Vec::with_capacity(jobs.len());
            for (phase_id, job_id, status, result, error_code) in jobs {
                if !status.is_terminal() {
                    return Ok(None);
                }
                outcomes.push(PhaseOutcome {
                    phase_id,
                    job_id,
                    status,
                    result: result.map(|r| r.0),
                    error_code,
                });
            }
            let (final_status, result) =
                merge_run(&request.0, &outcomes, run_status == JobStatus::Cancelling);
            sqlx::query(
                "UPDATE refine_runs SET status = $2, result = $3, finished_at = $4, updated_at = $4, \
                 version = version + 1, merge_count = merge_count + 1 WHERE id = $1",
            )
            .bind(run_id)
            .bind(final_status.as_str())
            .bind(Json(&result))
            .bind(at)
            .execute(&mut *tx)
            .await?;
            outbox_run_finished!(tx, run_id, final_status, at);
            tx.commit().await?;
            Ok(Some(final_status))
        })
    }
}
