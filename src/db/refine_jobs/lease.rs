//! The worker's lease on a job: claim, heartbeat, finish, hand back at shutdown, and
//! the reaper that recovers jobs whose lease expired.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::FromRow;
use sqlx::types::Json;
use uuid::Uuid;

use super::{JobProgress, PendingProgress, add_count, budget_of, state_event};
use crate::db::task_lists::now;
use crate::db::{Database, DbResult, status_list};
use crate::domain::job::{
    JobStatus, LEASE_EXPIRED, LeaseExpiry, after_hand_back, after_lease_expired,
};
use crate::domain::refine::L0Status;
use crate::domain::usage::{Budget, BudgetAction};

/// Moves a job's `running` L0 rows back to `pending` (they will run again: their
/// outcome was never stored), or to `failed` when the job ended.
macro_rules! reset_running_l0s {
    ($tx:expr, $job_id:expr, $status:expr) => {
        if $status == $crate::domain::job::JobStatus::Queued {
            sqlx::query(
                "UPDATE refine_l0_runs SET status = 'pending' WHERE job_id = $1 AND status = 'running'",
            )
            .bind($job_id)
            .execute(&mut *$tx)
            .await?;
        } else {
            sqlx::query(
                "UPDATE refine_l0_runs SET status = 'failed', error = 'the job ended before it finished' \
                 WHERE job_id = $1 AND status = 'running'",
            )
            .bind($job_id)
            .execute(&mut *$tx)
            .await?;
        }
    };
}

/// An L0 outcome the worker stored: enough to resume without running it again.
#[derive(Debug, Clone)]
pub struct FinishedL0 {
    pub assignment_id: String,
    pub outcome: Value,
}

/// A claimed job: what the worker needs to run it.
#[derive(Debug, Clone)]
pub struct ClaimedJob {
    pub lease: JobLease,
    pub attempt: i32,
    pub phase_id: String,
    pub run_id: Option<Uuid>,
    pub executor: String,
    pub request: Value,
    /// The log so far (a resumed job continues it).
    pub log: Vec<String>,
    /// L0s whose outcome is stored, natural order.
    pub finished: Vec<FinishedL0>,
    /// Its L0s by status as claimed (the worker's writes move it on).
    pub progress: JobProgress,
    pub cancel_requested: bool,
    pub project_id: Option<String>,
    /// The job's (or its run's) budget, if it has one.
    pub budget: Option<Budget>,
    /// The W3C `traceparent` of the request that created the job, when it was
    /// traced (docs/observability.md, "Context in and out").
    pub trace_parent: Option<String>,
}

/// The right to write for one job: its id and the token of the current claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobLease {
    pub job_id: Uuid,
    pub token: Uuid,
}

/// The lease was lost (expired and reaped, or handed back): stop, write nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the job's lease was lost")]
pub struct LeaseLost;

/// A worker write's outcome: `Ok(Err(LeaseLost))` when fencing refused it.
pub type Fenced<T> = DbResult<Result<T, LeaseLost>>;

/// How a worker ends a job.
pub enum Finish<'a> {
    Succeeded {
        result: &'a Value,
        phase_refined_path: Option<&'a str>,
    },
    Failed {
        code: &'a str,
        message: &'a str,
    },
    /// A budget was reached: `failed` with `budget_exceeded`, keeping the result
    /// of the L0s that finished (the others leave their assignments unchanged).
    BudgetExceeded {
        result: &'a Value,
        message: &'a str,
    },
    Cancelled,
}

/// A job's end as the worker writes it: how it ended, the writes its sink held
/// back, the final log (and the lines it adds), and whether it left L0s running.
#[derive(Clone, Copy)]
pub struct JobEnd<'a> {
    pub how: &'a Finish<'a>,
    pub pending: &'a PendingProgress,
    pub log: &'a [String],
    pub new_lines: &'a [String],
    pub l0s_running: bool,
}

/// What one reaper pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    pub requeued: u64,
    pub failed: u64,
    pub cancelled: u64,
}

/// What a claim returns: the claimed row's columns a worker needs.
#[derive(FromRow)]
struct ClaimRow {
    id: Uuid,
    attempt: i32,
    version: i64,
    l0_total: i32,
    phase_id: String,
    run_id: Option<Uuid>,
    executor: String,
    request: Json<Value>,
    log: Json<Vec<String>>,
    cancel_requested: bool,
    project_id: Option<String>,
    max_cost_usd: Option<f64>,
    max_output_tokens: Option<i64>,
    budget_action: BudgetAction,
    trace_parent: Option<String>,
}

const CLAIM_COLUMNS: &str = "id, attempt, version, l0_total, phase_id, run_id, executor, request, log, \
     cancel_requested, project_id, max_cost_usd, max_output_tokens, budget_action, trace_parent";

/// Who claims and until when: a claim's own inputs, also handed to
/// [`Database::finish_refine_job`] so that a worker's next claim shares the commit
/// that ends its job.
#[derive(Debug, Clone, Copy)]
pub struct ClaimFor {
    pub worker_id: Uuid,
    pub lease_until: DateTime<Utc>,
}

/// Claims the first runnable job inside `$tx` (its `running` event included);
/// evaluates to `Option<(ClaimRow, lease token)>`. `FOR UPDATE SKIP LOCKED` in a
/// MATERIALIZED CTE on Postgres (the planner cannot update more rows than the CTE
/// locked), with the event written by the same statement (a data-modifying CTE);
/// one atomic `UPDATE … WHERE id = (SELECT … LIMIT 1)` on SQLite, then the event.
///
/// Jobs that already ran (handed back at shutdown, or re-queued by the reaper once
/// their backoff is over) come first, so they resume at once instead of waiting
/// behind the whole backlog (their `run_after` is the hand-back or re-queue time,
/// later than every job queued meanwhile); then queue order. The order is an index's
/// (migration 0006), so a claim reads no more of the backlog than it takes. SQLite is
/// told to use it (`INDEXED BY`): without statistics its planner picks the status
/// index and sorts the backlog, and with the hint a plan without that index is an
/// error, not a slow claim.
macro_rules! claim_in {
    ($db:expr, $tx:expr, $claim:expr, $at:expr) => {{
        let claim: ClaimFor = $claim;
        let token = Uuid::new_v4();
        let sql = match $db {
            // The event's data is `state_event(Running, attempt, {worker_id})`.
            Database::Postgres(_) => sqlx::AssertSqlSafe(format!(
                "WITH next AS MATERIALIZED ( \
                     SELECT id FROM refine_jobs WHERE status = 'queued' AND run_after <= $1 \
                     ORDER BY started_at IS NULL, run_after, id LIMIT 1 FOR UPDATE SKIP LOCKED), \
                 claimed AS ( \
                     UPDATE refine_jobs AS j SET status = 'running', attempt = j.attempt + 1, \
                         worker_id = $2, lease_token = $3, lease_expires_at = $4, \
                         started_at = COALESCE(j.started_at, $1), updated_at = $1, \
                         version = j.version + 1 \
                     FROM next WHERE j.id = next.id RETURNING j.*), \
                 event AS ( \
                     INSERT INTO refine_job_events (job_id, seq, event, data, created_at) \
                     SELECT id, version, 'state', jsonb_build_object('status', 'running', \
                         'attempt', attempt, 'worker_id', $2), $1 FROM claimed) \
                 SELECT {CLAIM_COLUMNS} FROM claimed"
            )),
            Database::Sqlite(_) => sqlx::AssertSqlSafe(format!(
                "UPDATE refine_jobs SET status = 'running', attempt = attempt + 1, \
                     worker_id = $2, lease_token = $3, lease_expires_at = $4, \
                     started_at = COALESCE(started_at, $1), updated_at = $1, \
                     version = version + 1 \
                 WHERE id = (SELECT id FROM refine_jobs INDEXED BY refine_jobs_claim_order \
                     WHERE status = 'queued' AND run_after <= $1 \
                     ORDER BY started_at IS NULL, run_after, id LIMIT 1) \
                 RETURNING {CLAIM_COLUMNS}"
            )),
        };
        let row: Option<ClaimRow> = sqlx::query_as(sql)
            .bind($at)
            .bind(claim.worker_id)
            .bind(token)
            .bind(claim.lease_until)
            .fetch_optional(&mut *$tx)
            .await?;
        if let (Database::Sqlite(_), Some(row)) = ($db, &row) {
            let event =
                state_event(JobStatus::Running, row.attempt, json!({"worker_id": claim.worker_id}));
            push_events!($tx, row.id, row.version, $at, &[event]);
        }
        row.map(|row| (row, token))
    }};
}

impl Database {
    /// Claims a runnable job for a worker ([`claim_in!`] has the order and the SQL).
    pub async fn claim_refine_job(&self, claim: ClaimFor) -> DbResult<Option<ClaimedJob>> {
        let at = now();
        let claimed = on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let claimed = claim_in!(self, tx, claim, at);
            tx.commit().await?;
            claimed
        });
        match claimed {
            Some((row, token)) => Ok(Some(self.claimed_job(row, token).await?)),
            None => Ok(None),
        }
    }

    /// What a worker needs of the job it just claimed: the claimed row, and the
    /// stored outcomes of a job that ran before.
    async fn claimed_job(&self, row: ClaimRow, token: Uuid) -> DbResult<ClaimedJob> {
        // Version 2 is the insert's 1 bumped by this claim: no worker ever wrote,
        // so every L0 is pending and there is nothing to read.
        let rows: Vec<(String, L0Status, Option<Json<Value>>)> = if row.version <= 2 {
            Vec::new()
        } else {
            let sql = "SELECT assignment_id, status, outcome FROM refine_l0_runs \
                       WHERE job_id = $1 ORDER BY position";
            self.rows_by(sql, row.id).await?
        };
        let mut progress = JobProgress {
            l0_total: i64::from(row.l0_total),
            ..JobProgress::default()
        };
        if !rows.is_empty() {
            progress = JobProgress::default();
            for (_, status, _) in &rows {
                add_count(&mut progress, *status, 1);
            }
        }
        let finished = rows
            .into_iter()
            .filter_map(|(assignment_id, _, outcome)| {
                Some(FinishedL0 {
                    assignment_id,
                    outcome: outcome?.0,
                })
            })
            .collect();
        Ok(ClaimedJob {
            lease: JobLease {
                job_id: row.id,
                token,
            },
            attempt: row.attempt,
            phase_id: row.phase_id,
            run_id: row.run_id,
            executor: row.executor,
            request: row.request.0,
            log: row.log.0,
            finished,
            progress,
            cancel_requested: row.cancel_requested,
            project_id: row.project_id,
            budget: budget_of(row.max_cost_usd, row.max_output_tokens, row.budget_action),
            trace_parent: row.trace_parent,
        })
    }

    /// Renews the lease. `Ok(Ok(cancel_requested))`, or `LeaseLost`.
    pub async fn heartbeat_refine_job(
        &self,
        lease: JobLease,
        until: DateTime<Utc>,
    ) -> Fenced<bool> {
        let in_flight = status_list(&JobStatus::IN_FLIGHT);
        let _turn = self.writer_turn().await;
        let row: Option<bool> = on_pool!(self, pool => {
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "UPDATE refine_jobs SET lease_expires_at = $3 WHERE id = $1 AND lease_token = $2 \
                 AND status IN {in_flight} RETURNING cancel_requested"
            )))
            .bind(lease.job_id)
            .bind(lease.token)
            .bind(until)
            .fetch_optional(pool)
            .await?
        });
        Ok(row.ok_or(LeaseLost))
    }

    /// Ends a job (fenced), storing the worker's `pending` writes first in the same
    /// transaction (a job whose L0s all ended within the write-behind window costs
    /// this one commit after its claim, docs/jobs.md). L0 rows still `running`
    /// (killed by a cancel) become `failed` — looked for only when `l0s_running`
    /// says the worker left some (its progress; nobody else writes L0 rows under its
    /// lease); the lease is cleared. Returns the terminal status written.
    ///
    /// With `next`, the same transaction also claims the worker's next job: one
    /// commit, and so one WAL flush, ends a job and starts another (what bounds a
    /// worker's jobs per second, bench/README.md "queue.sh").
    pub async fn finish_refine_job(
        &self,
        lease: JobLease,
        end: JobEnd<'_>,
        next: Option<ClaimFor>,
    ) -> Fenced<(JobStatus, Option<ClaimedJob>)> {
        let JobEnd {
            how: finish,
            pending,
            log,
            new_lines,
            l0s_running,
        } = end;
        let at = now();
        let (status, result, path, code, message) = match finish {
            Finish::Succeeded {
                result,
                phase_refined_path,
            } => (
                JobStatus::Succeeded,
                Some(*result),
                *phase_refined_path,
                None,
                None,
            ),
            Finish::Failed { code, message } => {
                (JobStatus::Failed, None, None, Some(*code), Some(*message))
            }
            Finish::BudgetExceeded { result, message } => (
                JobStatus::Failed,
                Some(*result),
                None,
                Some("budget_exceeded"),
                Some(*message),
            ),
            Finish::Cancelled => (JobStatus::Cancelled, None, None, None, None),
        };
        let in_flight = status_list(&JobStatus::IN_FLIGHT);
        let claimed = on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            // The fenced bump and the terminal state in one statement.
            let ended: Option<(i64, i32)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "UPDATE refine_jobs SET version = version + $9, updated_at = $8, status = $2, \
                 result = $3, phase_refined_path = $4, error_code = $5, error_message = $6, \
                 log = $7, finished_at = $8, lease_token = NULL, lease_expires_at = NULL \
                 WHERE id = $1 AND lease_token = $10 AND status IN {in_flight} \
                 RETURNING version, attempt"
            )))
            .bind(lease.job_id)
            .bind(status.as_str())
            .bind(result.map(Json))
            .bind(path)
            .bind(code)
            .bind(message)
            .bind(Json(log))
            .bind(at)
            .bind(i64::try_from(pending.events.len() + new_lines.len() + 1).unwrap_or(i64::MAX))
            .bind(lease.token)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((seq, attempt)) = ended else {
                return Ok(Err(LeaseLost));
            };
            let mut events: Vec<(&str, Value)> = new_lines
                .iter()
                .map(|l| ("log", json!({"line": l})))
                .collect();
            let extra = match code {
                Some(code) => json!({"error": {"code": code, "message": message}}),
                None => json!({}),
            };
            events.push(state_event(status, attempt, extra));
            store_pending!(tx, lease.job_id, seq, pending, then = (&events, at));
            super::progress::store_error_codes!(tx, lease.job_id, pending);
            if l0s_running {
                sqlx::query(
                    "UPDATE refine_l0_runs SET status = 'failed', finished_at = $2, \
                     error = 'cancelled before it finished' WHERE job_id = $1 AND status = 'running'",
                )
                .bind(lease.job_id)
                .bind(at)
                .execute(&mut *tx)
                .await?;
            }
            if status == JobStatus::Succeeded {
                // Its L0 outcomes are all stored now: a success with one that is not
                // valid reads `degraded` (the job counters follow, migration 0026).
                sqlx::query(
                    "UPDATE refine_jobs SET degraded = TRUE WHERE id = $1 AND EXISTS \
                     (SELECT 1 FROM refine_l0_runs l WHERE l.job_id = $1 AND l.status <> 'valid')",
                )
                .bind(lease.job_id)
                .execute(&mut *tx)
                .await?;
            }
            outbox_job_ended!(tx, lease.job_id, at);
            let claimed = match next {
                Some(claim) => claim_in!(self, tx, claim, at),
                None => None,
            };
            tx.commit().await?;
            claimed
        });
        let next = match claimed {
            Some((row, token)) => Some(self.claimed_job(row, token).await?),
            None => None,
        };
        Ok(Ok((status, next)))
    }

    /// Graceful shutdown: give the job back as [`after_hand_back`] decides — queued
    /// without charging the attempt, so any replica resumes it at once, or
    /// `cancelled` when a cancel was in progress.
    pub async fn release_refine_job(&self, lease: JobLease) -> Fenced<JobStatus> {
        let at = now();
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let Some(seq) = bump_fenced!(tx, lease, at, 1usize) else {
                return Ok(Err(LeaseLost));
            };
            // The fenced bump holds the row: its status cannot change under us.
            let held: JobStatus = sqlx::query_scalar("SELECT status FROM refine_jobs WHERE id = $1")
                .bind(lease.job_id)
                .fetch_one(&mut *tx)
                .await?;
            let back = after_hand_back(held);
            let status = back.status;
            let attempt: i32 = sqlx::query_scalar(
                "UPDATE refine_jobs SET status = $2, attempt = attempt - $3, finished_at = $4, \
                   run_after = $5, worker_id = NULL, lease_token = NULL, lease_expires_at = NULL \
                 WHERE id = $1 RETURNING attempt",
            )
            .bind(lease.job_id)
            .bind(status.as_str())
            .bind(i32::from(back.refund_attempt))
            .bind(status.is_terminal().then_some(at))
            .bind(at)
            .fetch_one(&mut *tx)
            .await?;
            reset_running_l0s!(tx, lease.job_id, status);
            let event = state_event(
                status,
                attempt,
                json!({"reason": "handed back at shutdown"}),
            );
            push_events!(tx, lease.job_id, seq, at, &[event]);
            if status.is_terminal() {
                outbox_job_ended!(tx, lease.job_id, at);
            }
            tx.commit().await?;
            Ok(Ok(status))
        })
    }

    /// The reaper: each job whose lease expired gets what the attempt rule
    /// ([`after_lease_expired`]) decides — re-queued after `backoff` (its `running` L0s
    /// back to `pending`), failed with `lease_expired`, or cancelled.
    pub async fn reap_expired_refine_jobs(
        &self,
        backoff: impl Fn(u32) -> std::time::Duration,
    ) -> DbResult<Reaped> {
        let at = now();
        let in_flight = status_list(&JobStatus::IN_FLIGHT);
        let lock = match self {
            Database::Postgres(_) => " FOR UPDATE SKIP LOCKED",
            Database::Sqlite(_) => "",
        };
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            let expired: Vec<(Uuid, JobStatus, i32, i32)> =
                sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT id, status, attempt, max_attempts FROM refine_jobs \
                 WHERE status IN {in_flight} AND lease_expires_at < $1 \
                 ORDER BY lease_expires_at LIMIT 100{lock}"
                )))
                .bind(at)
                .fetch_all(&mut *tx)
                .await?;
            let mut reaped = Reaped::default();
            for (id, status, attempt, max_attempts) in expired {
                let expiry = after_lease_expired(status, attempt, max_attempts, &backoff);
                let next = expiry.status();
                let (run_after, error) = match &expiry {
                    LeaseExpiry::Cancel => {
                        reaped.cancelled += 1;
                        (at, None)
                    }
                    LeaseExpiry::Fail { message } => {
                        reaped.failed += 1;
                        (at, Some(message.as_str()))
                    }
                    LeaseExpiry::Retry { delay } => {
                        reaped.requeued += 1;
                        (at + chrono::Duration::from_std(*delay).unwrap_or_default(), None)
                    }
                };
                let seq = bump!(tx, id, at);
                sqlx::query(
                    "UPDATE refine_jobs SET status = $2, run_after = $3, worker_id = NULL, \
                     lease_token = NULL, lease_expires_at = NULL, finished_at = $4, \
                     error_code = $5, error_message = $6 WHERE id = $1",
                )
                .bind(id)
                .bind(next.as_str())
                .bind(run_after)
                .bind(next.is_terminal().then_some(at))
                .bind(error.map(|_| LEASE_EXPIRED))
                .bind(error)
                .execute(&mut *tx)
                .await?;
                reset_running_l0s!(tx, id, next);
                let extra = match error {
                    Some(message) => {
                        json!({"reason": "lease expired", "error": {"code": LEASE_EXPIRED, "message": message}})
                    }
                    None => json!({"reason": "lease expired"}),
                };
                push_events!(tx, id, seq, at, &[state_event(next, attempt, extra)]);
                if next.is_terminal() {
                    outbox_job_ended!(tx, id, at);
                }
            }
            tx.commit().await?;
            Ok(reaped)
        })
    }
}
