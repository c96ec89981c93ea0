//! Storage of refine jobs: the durable queue (claim, lease, heartbeat, reaper), the
//! per-L0 records and the event log (docs/spec/jobs.md).
//!
//! Fencing: every write a worker makes goes through [`bump_fenced!`], an UPDATE that
//! matches the job's current `lease_token` and bumps `version`. When it matches no
//! row the lease is gone (expired, reaped, handed back) and the transaction is rolled
//! back, so a stale worker changes nothing. `version` is also the `seq` of the
//! event written in the same transaction, so readers follow one integer.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use sqlx::types::Json;
use sqlx::{FromRow, QueryBuilder};
use uuid::Uuid;

use super::task_lists::now;
use super::{Database, DbError, DbResult};
use crate::domain::job::JobStatus;
use crate::domain::usage::{Budget, BudgetAction, L0Usage, UsageSource, UsageTotals};

/// A job to insert, with its L0 rows (`(assignment_id, batch)` in natural order).
pub struct NewRefineJob<'a> {
    pub id: Uuid,
    pub phase_id: &'a str,
    pub run_id: Option<Uuid>,
    pub project_id: Option<&'a str>,
    pub team_pk: Option<&'a str>,
    pub executor: &'a str,
    pub executor_kind: &'a str,
    /// What the worker needs: context, refined plan, task file, output dir.
    pub request: &'a Value,
    pub idempotency_key: Option<&'a str>,
    pub request_hash: Option<&'a str>,
    pub max_attempts: u32,
    pub l0s: Vec<(String, i32)>,
    /// The job's budget (a run's phase jobs carry the run's; the scope is the run).
    pub budget: Budget,
}

/// What a create with an idempotency key found.
#[derive(Debug)]
pub enum Created<T> {
    New(T),
    /// The key was used before with the same body: the original.
    Existing(T),
    /// The key was used before with another body.
    KeyReused,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct JobProgress {
    pub l0_total: i64,
    pub l0_running: i64,
    /// Valid answers.
    pub l0_succeeded: i64,
    /// Answers that failed validation or were for another assignment.
    pub l0_invalid: i64,
    /// No answer (spawn error, timeout, non-zero exit with no output, cancelled).
    pub l0_failed: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobError {
    /// `lease_expired`, `internal`, …
    pub code: String,
    pub message: String,
}

/// A refine job as stored (the API's shape is `service::refine_jobs::StoredJob`).
#[derive(Debug, Clone)]
pub struct StoredJob {
    pub id: Uuid,
    /// Always `refine`.
    pub kind: String,
    pub status: JobStatus,
    pub phase_id: String,
    pub run_id: Option<Uuid>,
    pub project_id: Option<String>,
    pub team_pk: Option<String>,
    /// The executor profile name the job runs with.
    pub executor: String,
    /// Its kind: `command`, `openai`, `anthropic` or `builtin`.
    pub executor_kind: String,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub cancel_requested_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    /// Attempts started so far (a hand-back at shutdown is not charged).
    pub attempt: i32,
    pub max_attempts: i32,
    pub progress: JobProgress,
    /// The job log, in order: one line per L0 verdict, work-package conflict or warning.
    pub log: Vec<String>,
    pub result: Option<Value>,
    pub phase_refined_path: Option<String>,
    pub error: Option<JobError>,
    /// Bumped by every change; the `id` of the job's last event.
    pub version: i64,
    /// What its L0 calls cost so far (for a run's phase job: this job's calls).
    pub usage: UsageTotals,
    /// Its spending limits; null when the request set none. A run's phase jobs
    /// show the run's budget, which applies to the whole run.
    pub budget: Option<Budget>,
}

/// A budget from its stored columns (`None` when nothing is limited).
pub(crate) fn budget_of(
    max_cost_usd: Option<f64>,
    max_output_tokens: Option<i64>,
    action: &str,
) -> Option<Budget> {
    let budget = Budget {
        max_cost_usd,
        max_output_tokens,
        budget_action: BudgetAction::parse(action).unwrap_or_default(),
    };
    budget.is_limited().then_some(budget)
}

#[derive(FromRow)]
struct JobRow {
    id: Uuid,
    kind: String,
    status: String,
    phase_id: String,
    run_id: Option<Uuid>,
    project_id: Option<String>,
    team_pk: Option<String>,
    executor: String,
    executor_kind: String,
    created_at: DateTime<Utc>,
    started_at: Option<DateTime<Utc>>,
    cancel_requested_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    updated_at: DateTime<Utc>,
    attempt: i32,
    max_attempts: i32,
    l0_total: i32,
    log: Json<Vec<String>>,
    result: Option<Json<Value>>,
    phase_refined_path: Option<String>,
    error_code: Option<String>,
    error_message: Option<String>,
    version: i64,
    max_cost_usd: Option<f64>,
    max_output_tokens: Option<i64>,
    budget_action: String,
}

const JOB_COLUMNS: &str = "id, kind, status, phase_id, run_id, project_id, team_pk, executor, \
     executor_kind, created_at, started_at, cancel_requested_at, finished_at, updated_at, \
     attempt, max_attempts, l0_total, log, result, phase_refined_path, error_code, \
     error_message, version, max_cost_usd, max_output_tokens, budget_action";

fn parse_status(id: Uuid, text: &str) -> DbResult<JobStatus> {
    JobStatus::parse(text).ok_or_else(|| DbError::Corrupt(format!("job {id} has status {text:?}")))
}

impl JobRow {
    fn into_job(self, mut progress: JobProgress, usage: UsageTotals) -> DbResult<StoredJob> {
        progress.l0_total = i64::from(self.l0_total);
        let error = self.error_code.map(|code| JobError {
            code,
            message: self.error_message.unwrap_or_default(),
        });
        Ok(StoredJob {
            status: parse_status(self.id, &self.status)?,
            id: self.id,
            kind: self.kind,
            phase_id: self.phase_id,
            run_id: self.run_id,
            project_id: self.project_id,
            team_pk: self.team_pk,
            executor: self.executor,
            executor_kind: self.executor_kind,
            created_at: self.created_at,
            started_at: self.started_at,
            cancel_requested_at: self.cancel_requested_at,
            finished_at: self.finished_at,
            updated_at: self.updated_at,
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            progress,
            log: self.log.0,
            result: self.result.map(|r| r.0),
            phase_refined_path: self.phase_refined_path,
            error,
            version: self.version,
            usage,
            budget: budget_of(
                self.max_cost_usd,
                self.max_output_tokens,
                &self.budget_action,
            ),
        })
    }
}

/// One L0's record.
#[derive(Debug, Clone)]
pub struct StoredL0 {
    pub assignment_id: String,
    /// 1-based batch number.
    pub batch: i32,
    /// `pending`, `running`, `valid`, `invalid`, `mismatch` or `failed`.
    pub status: String,
    /// The job attempt that ran it last.
    pub attempt: i32,
    /// How many times an L0 process/call was started for it (1 unless a crash
    /// interrupted it before its outcome was stored).
    pub starts: i32,
    /// Executor tries of the last start (transient errors retried).
    pub tries: i32,
    pub project_id: Option<String>,
    pub team_pk: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub exit_code: Option<i32>,
    /// Why it was not valid.
    pub error: Option<String>,
    /// The start of its answer (or stderr when it gave none).
    pub output_excerpt: Option<String>,
    /// What the call cost (all its tries); null until its outcome is stored.
    pub usage: Option<L0Usage>,
    /// The size of the prompt sent, in bytes (the prompt names the task file,
    /// never inlines it); null until its outcome is stored.
    pub prompt_bytes: Option<i64>,
}

#[derive(FromRow)]
struct L0Row {
    assignment_id: String,
    batch: i32,
    status: String,
    attempt: i32,
    starts: i32,
    tries: i32,
    project_id: Option<String>,
    team_pk: Option<String>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    exit_code: Option<i32>,
    error: Option<String>,
    output_excerpt: Option<String>,
    input_tokens: Option<i64>,
    output_tokens: Option<i64>,
    cache_read_input_tokens: Option<i64>,
    cache_creation_input_tokens: Option<i64>,
    cost_usd: Option<f64>,
    usage_model: Option<String>,
    usage_source: Option<String>,
    prompt_bytes: Option<i64>,
}

impl From<L0Row> for StoredL0 {
    fn from(r: L0Row) -> Self {
        let usage = r.usage_source.map(|source| L0Usage {
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            cache_read_input_tokens: r.cache_read_input_tokens,
            cache_creation_input_tokens: r.cache_creation_input_tokens,
            cost_usd: r.cost_usd,
            model: r.usage_model,
            source: UsageSource::parse(&source).unwrap_or_default(),
        });
        StoredL0 {
            assignment_id: r.assignment_id,
            batch: r.batch,
            status: r.status,
            attempt: r.attempt,
            starts: r.starts,
            tries: r.tries,
            project_id: r.project_id,
            team_pk: r.team_pk,
            started_at: r.started_at,
            finished_at: r.finished_at,
            exit_code: r.exit_code,
            error: r.error,
            output_excerpt: r.output_excerpt,
            usage,
            prompt_bytes: r.prompt_bytes,
        }
    }
}

const L0_COLUMNS: &str = "assignment_id, batch, status, attempt, starts, tries, project_id, \
     team_pk, started_at, finished_at, exit_code, error, output_excerpt, input_tokens, \
     output_tokens, cache_read_input_tokens, cache_creation_input_tokens, cost_usd, \
     usage_model, usage_source, prompt_bytes";

/// An L0 outcome the worker stored: enough to resume without running it again.
#[derive(Debug, Clone)]
pub struct FinishedL0 {
    pub assignment_id: String,
    pub outcome: Value,
}

/// A claimed job: what the worker needs to run it.
#[derive(Debug, Clone)]
pub struct ClaimedJob {
    pub lease: Lease,
    pub attempt: i32,
    pub phase_id: String,
    pub run_id: Option<Uuid>,
    pub executor: String,
    pub request: Value,
    /// The log so far (a resumed job continues it).
    pub log: Vec<String>,
    /// L0s whose outcome is stored, natural order.
    pub finished: Vec<FinishedL0>,
    pub cancel_requested: bool,
    pub project_id: Option<String>,
    /// The job's (or its run's) budget, if it has one.
    pub budget: Option<Budget>,
}

/// The right to write for one job: its id and the token of the current claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub job_id: Uuid,
    pub token: Uuid,
}

/// The lease was lost (expired and reaped, or handed back): stop, write nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the job's lease was lost")]
pub struct LeaseLost;

/// A worker write's outcome: `Ok(Err(LeaseLost))` when fencing refused it.
pub type Fenced<T> = DbResult<Result<T, LeaseLost>>;

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

#[derive(Debug, Clone, FromRow)]
pub struct JobEvent {
    pub seq: i64,
    pub event: String,
    pub data: Json<Value>,
}

/// List filters of `GET /v1/refine-jobs`.
#[derive(Debug, Default, Clone)]
pub struct JobFilter {
    pub status: Option<JobStatus>,
    pub phase_id: Option<String>,
    pub run_id: Option<Uuid>,
    pub project_id: Option<String>,
    pub team_pk: Option<String>,
    /// Only these projects (a token limited to projects); `None` = all.
    pub allowed_projects: Option<Vec<String>>,
}

/// What one reaper pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    pub requeued: u64,
    pub failed: u64,
    pub cancelled: u64,
}

/// Bumps `version` by `$events` (the events this write will insert, at least 1) if
/// `$lease` still holds the job; evaluates to `Option<i64>`, the last event's seq.
macro_rules! bump_fenced {
    ($tx:expr, $lease:expr, $at:expr, $events:expr) => {
        sqlx::query_scalar::<_, i64>(
            "UPDATE refine_jobs SET version = version + $4, updated_at = $3 \
             WHERE id = $1 AND lease_token = $2 AND status IN ('running', 'cancelling') \
             RETURNING version",
        )
        .bind($lease.job_id)
        .bind($lease.token)
        .bind($at)
        .bind(i64::try_from(($events).max(1)).unwrap_or(i64::MAX))
        .fetch_optional(&mut *$tx)
        .await?
    };
}

/// Bumps `version` unconditionally (API-side writes: cancel, reaper).
macro_rules! bump {
    ($tx:expr, $job_id:expr, $at:expr) => {
        sqlx::query_scalar::<_, i64>(
            "UPDATE refine_jobs SET version = version + 1, updated_at = $2 WHERE id = $1 \
             RETURNING version",
        )
        .bind($job_id)
        .bind($at)
        .fetch_one(&mut *$tx)
        .await?
    };
}

/// Inserts events `$seq - n + 1 ..= $seq` for the `(event, data)` pairs given, in
/// one statement.
macro_rules! push_events {
    ($tx:expr, $job_id:expr, $last_seq:expr, $at:expr, $events:expr) => {{
        let events: &[(&str, serde_json::Value)] = $events;
        if !events.is_empty() {
            let first = $last_seq - events.len() as i64 + 1;
            let mut q = sqlx::QueryBuilder::new(
                "INSERT INTO refine_job_events (job_id, seq, event, data, created_at) ",
            );
            q.push_values(events.iter().enumerate(), |mut b, (i, (event, data))| {
                b.push_bind($job_id)
                    .push_bind(first + i as i64)
                    .push_bind(event.to_string())
                    .push_bind(sqlx::types::Json(data.clone()))
                    .push_bind($at);
            });
            q.build().execute(&mut *$tx).await?;
        }
    }};
}
pub(crate) use push_events;

/// Progress of one job from its L0 rows.
macro_rules! progress_of {
    ($tx:expr, $job_id:expr) => {{
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT status, COUNT(*) FROM refine_l0_runs WHERE job_id = $1 GROUP BY status",
        )
        .bind($job_id)
        .fetch_all(&mut *$tx)
        .await?;
        let mut p = JobProgress::default();
        for (status, n) in rows {
            add_count(&mut p, &status, n);
        }
        p
    }};
}

fn add_count(p: &mut JobProgress, status: &str, n: i64) {
    p.l0_total += n;
    match status {
        "running" => p.l0_running += n,
        "valid" => p.l0_succeeded += n,
        "invalid" | "mismatch" => p.l0_invalid += n,
        "failed" => p.l0_failed += n,
        _ => {}
    }
}

pub(crate) fn state_event(status: JobStatus, attempt: i32, extra: Value) -> (&'static str, Value) {
    let mut data = json!({"status": status.as_str(), "attempt": attempt});
    if let (Some(obj), Value::Object(more)) = (data.as_object_mut(), extra) {
        obj.extend(more);
    }
    ("state", data)
}

fn lock_suffix(db: &Database) -> &'static str {
    match db {
        Database::Postgres(_) => " FOR UPDATE",
        Database::Sqlite(_) => "",
    }
}

/// Moves a job's `running` L0 rows back to `pending` (they will run again: their
/// outcome was never stored), or to `failed` when the job ended.
macro_rules! reset_running_l0s {
    ($tx:expr, $job_id:expr, $status:expr) => {
        if $status == JobStatus::Queued {
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

/// Inserts a job and its L0 rows inside `$tx`; evaluates to `true` when inserted
/// (`false`: the idempotency key exists).
macro_rules! insert_job {
    ($tx:expr, $new:expr, $at:expr) => {{
        let new: &$crate::db::refine_jobs::NewRefineJob<'_> = $new;
        let inserted = sqlx::query(
            "INSERT INTO refine_jobs (id, status, phase_id, run_id, project_id, team_pk, \
             executor, executor_kind, request, idempotency_key, request_hash, max_attempts, \
             run_after, l0_total, version, created_at, updated_at, max_cost_usd, \
             max_output_tokens, budget_action) \
             VALUES ($1, 'queued', $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 1, $12, $12, \
             $14, $15, $16) \
             ON CONFLICT (idempotency_key) DO NOTHING",
        )
        .bind(new.id)
        .bind(new.phase_id)
        .bind(new.run_id)
        .bind(new.project_id)
        .bind(new.team_pk)
        .bind(new.executor)
        .bind(new.executor_kind)
        .bind(sqlx::types::Json(new.request))
        .bind(new.idempotency_key)
        .bind(new.request_hash)
        .bind(i32::try_from(new.max_attempts).unwrap_or(i32::MAX))
        .bind($at)
        .bind(i32::try_from(new.l0s.len()).unwrap_or(i32::MAX))
        .bind(new.budget.max_cost_usd)
        .bind(new.budget.max_output_tokens)
        .bind(new.budget.budget_action.as_str())
        .execute(&mut *$tx)
        .await?
        .rows_affected()
            == 1;
        if inserted {
            let rows: Vec<(usize, &(String, i32))> = new.l0s.iter().enumerate().collect();
            for chunk in rows.chunks(500) {
                let mut q = sqlx::QueryBuilder::new(
                    "INSERT INTO refine_l0_runs (job_id, assignment_id, position, batch, status, \
                     project_id, team_pk) ",
                );
                q.push_values(chunk.iter(), |mut b, (i, (assignment_id, batch))| {
                    b.push_bind(new.id)
                        .push_bind(assignment_id.clone())
                        .push_bind(i32::try_from(*i).unwrap_or(i32::MAX))
                        .push_bind(*batch)
                        .push_bind("pending")
                        .push_bind(new.project_id.map(str::to_owned))
                        .push_bind(new.team_pk.map(str::to_owned));
                });
                q.build().execute(&mut *$tx).await?;
            }
            let event = $crate::db::refine_jobs::state_event(
                $crate::domain::job::JobStatus::Queued,
                0,
                serde_json::json!({}),
            );
            $crate::db::refine_jobs::push_events!($tx, new.id, 1, $at, &[event]);
        }
        inserted
    }};
}
pub(crate) use insert_job;

impl Database {
    /// Inserts a job and its pending L0 rows in one transaction. With an
    /// idempotency key the unique constraint decides: a second create with the same
    /// key finds the first instead of inserting.
    pub async fn create_refine_job(&self, new: &NewRefineJob<'_>) -> DbResult<Created<StoredJob>> {
        let at = now();
        let inserted = on_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            let inserted = insert_job!(tx, new, at);
            if inserted {
                tx.commit().await?;
            }
            inserted
        });
        if inserted {
            return self
                .refine_job(new.id)
                .await?
                .map(Created::New)
                .ok_or_else(|| DbError::Corrupt("a created job vanished".into()));
        }
        let key = new.idempotency_key.unwrap_or_default();
        let found: Option<(Uuid, Option<String>)> = on_pool!(self, |pool| {
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
        let n: i64 = on_pool!(self, |pool| {
            sqlx::query_scalar("SELECT COUNT(*) FROM refine_jobs WHERE idempotency_key = $1")
                .bind(key)
                .fetch_one(pool)
                .await?
        });
        Ok(n > 0)
    }

    pub async fn refine_job(&self, id: Uuid) -> DbResult<Option<StoredJob>> {
        let row: Option<JobRow> = on_pool!(self, |pool| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {JOB_COLUMNS} FROM refine_jobs WHERE id = $1"
            )))
            .bind(id)
            .fetch_optional(pool)
            .await?
        });
        let Some(row) = row else { return Ok(None) };
        let progress = on_pool!(self, |pool| {
            let mut conn = pool.acquire().await?;
            progress_of!(conn, id)
        });
        let usage = self
            .job_usage(&[id])
            .await?
            .pop()
            .map(|(_, u)| u)
            .unwrap_or_default();
        row.into_job(progress, usage).map(Some)
    }

    /// Newest first (ids are time-ordered v7 uuids), `after` = the last id of the
    /// previous page.
    pub async fn refine_jobs(
        &self,
        filter: &JobFilter,
        limit: u32,
        after: Option<Uuid>,
    ) -> DbResult<Vec<StoredJob>> {
        let rows: Vec<JobRow> = on_pool!(self, |pool| {
            let mut q =
                QueryBuilder::new(format!("SELECT {JOB_COLUMNS} FROM refine_jobs WHERE TRUE"));
            if let Some(s) = filter.status {
                q.push(" AND status = ").push_bind(s.as_str());
            }
            if let Some(p) = &filter.phase_id {
                q.push(" AND phase_id = ").push_bind(p.clone());
            }
            if let Some(r) = filter.run_id {
                q.push(" AND run_id = ").push_bind(r);
            }
            if let Some(p) = &filter.project_id {
                q.push(" AND project_id = ").push_bind(p.clone());
            }
            if let Some(t) = &filter.team_pk {
                q.push(" AND team_pk = ").push_bind(t.clone());
            }
            if let Some(allowed) = &filter.allowed_projects {
                if allowed.is_empty() {
                    q.push(" AND FALSE");
                } else {
                    q.push(" AND project_id IN (");
                    let mut sep = q.separated(", ");
                    for p in allowed {
                        sep.push_bind(p.clone());
                    }
                    q.push(")");
                }
            }
            if let Some(after) = after {
                q.push(" AND id < ").push_bind(after);
            }
            q.push(" ORDER BY id DESC LIMIT ")
                .push_bind(i64::from(limit));
            q.build_query_as().fetch_all(pool).await?
        });
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let counts: Vec<(Uuid, String, i64)> = on_pool!(self, |pool| {
            let mut q = QueryBuilder::new(
                "SELECT job_id, status, COUNT(*) FROM refine_l0_runs WHERE job_id IN (",
            );
            let mut sep = q.separated(", ");
            for r in &rows {
                sep.push_bind(r.id);
            }
            q.push(") GROUP BY job_id, status");
            q.build_query_as().fetch_all(pool).await?
        });
        let mut progress: HashMap<Uuid, JobProgress> = HashMap::new();
        for (id, status, n) in counts {
            add_count(progress.entry(id).or_default(), &status, n);
        }
        let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
        let mut usage: HashMap<Uuid, UsageTotals> =
            self.job_usage(&ids).await?.into_iter().collect();
        rows.into_iter()
            .map(|r| {
                let p = progress.get(&r.id).copied().unwrap_or_default();
                let u = usage.remove(&r.id).unwrap_or_default();
                r.into_job(p, u)
            })
            .collect()
    }

    /// The job's `(version, status)`: what `?wait=` and the event stream poll.
    pub async fn refine_job_version(&self, id: Uuid) -> DbResult<Option<(i64, JobStatus)>> {
        let row: Option<(i64, String)> = on_pool!(self, |pool| {
            sqlx::query_as("SELECT version, status FROM refine_jobs WHERE id = $1")
                .bind(id)
                .fetch_optional(pool)
                .await?
        });
        row.map(|(v, s)| Ok((v, parse_status(id, &s)?))).transpose()
    }

    pub async fn refine_job_events(
        &self,
        id: Uuid,
        after_seq: i64,
        limit: i64,
    ) -> DbResult<Vec<JobEvent>> {
        Ok(on_pool!(self, |pool| {
            sqlx::query_as(
                "SELECT seq, event, data FROM refine_job_events WHERE job_id = $1 AND seq > $2 \
                 ORDER BY seq LIMIT $3",
            )
            .bind(id)
            .bind(after_seq)
            .bind(limit)
            .fetch_all(pool)
            .await?
        }))
    }

    /// Per-L0 records in natural assignment order (`position`).
    pub async fn refine_job_l0s(&self, id: Uuid) -> DbResult<Vec<StoredL0>> {
        let rows: Vec<L0Row> = on_pool!(self, |pool| {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {L0_COLUMNS} FROM refine_l0_runs WHERE job_id = $1 ORDER BY position"
            )))
            .bind(id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows.into_iter().map(StoredL0::from).collect())
    }

    /// Claims a runnable job for `worker_id`: `FOR UPDATE SKIP LOCKED` in a
    /// MATERIALIZED CTE on Postgres (the planner cannot update more rows than the
    /// CTE locked), one atomic `UPDATE … WHERE id = (SELECT … LIMIT 1)` on SQLite.
    ///
    /// Jobs that already ran (handed back at shutdown, or re-queued by the reaper
    /// once their backoff is over) come first, so they resume at once instead of
    /// waiting behind the whole backlog (their `run_after` is the hand-back or
    /// re-queue time, later than every job queued meanwhile); then queue order.
    pub async fn claim_refine_job(
        &self,
        worker_id: Uuid,
        lease_until: DateTime<Utc>,
    ) -> DbResult<Option<ClaimedJob>> {
        let at = now();
        let token = Uuid::new_v4();
        let claimed: Option<(Uuid, i32)> = on_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            let sql = match self {
                Database::Postgres(_) => {
                    "WITH next AS MATERIALIZED ( \
                         SELECT id FROM refine_jobs WHERE status = 'queued' AND run_after <= $1 \
                         ORDER BY started_at IS NULL, run_after, id LIMIT 1 FOR UPDATE SKIP LOCKED) \
                     UPDATE refine_jobs AS j SET status = 'running', attempt = j.attempt + 1, \
                         worker_id = $2, lease_token = $3, lease_expires_at = $4, \
                         started_at = COALESCE(j.started_at, $1), updated_at = $1, \
                         version = j.version + 1 \
                     FROM next WHERE j.id = next.id RETURNING j.id, j.attempt, j.version"
                }
                Database::Sqlite(_) => {
                    "UPDATE refine_jobs SET status = 'running', attempt = attempt + 1, \
                         worker_id = $2, lease_token = $3, lease_expires_at = $4, \
                         started_at = COALESCE(started_at, $1), updated_at = $1, \
                         version = version + 1 \
                     WHERE id = (SELECT id FROM refine_jobs WHERE status = 'queued' \
                         AND run_after <= $1 ORDER BY started_at IS NULL, run_after, id LIMIT 1) \
                     RETURNING id, attempt, version"
                }
            };
            let row: Option<(Uuid, i32, i64)> = sqlx::query_as(sql)
                .bind(at)
                .bind(worker_id)
                .bind(token)
                .bind(lease_until)
                .fetch_optional(&mut *tx)
                .await?;
            match row {
                None => None,
                Some((id, attempt, seq)) => {
                    let event =
                        state_event(JobStatus::Running, attempt, json!({"worker_id": worker_id}));
                    push_events!(tx, id, seq, at, &[event]);
                    tx.commit().await?;
                    Some((id, attempt))
                }
            }
        });
        let Some((id, attempt)) = claimed else {
            return Ok(None);
        };
        type Claimed = (
            String,
            Option<Uuid>,
            String,
            Json<Value>,
            Json<Vec<String>>,
            bool,
            Option<String>,
            Option<f64>,
            Option<i64>,
            String,
        );
        let (row, finished): (Option<Claimed>, Vec<(String, Json<Value>)>) =
            on_pool!(self, |pool| {
                let row = sqlx::query_as(
                    "SELECT phase_id, run_id, executor, request, log, cancel_requested, \
                 project_id, max_cost_usd, max_output_tokens, budget_action \
                 FROM refine_jobs WHERE id = $1",
                )
                .bind(id)
                .fetch_optional(pool)
                .await?;
                let finished = sqlx::query_as(
                    "SELECT assignment_id, outcome FROM refine_l0_runs \
                 WHERE job_id = $1 AND outcome IS NOT NULL ORDER BY position",
                )
                .bind(id)
                .fetch_all(pool)
                .await?;
                (row, finished)
            });
        let Some((
            phase_id,
            run_id,
            executor,
            request,
            log,
            cancel_requested,
            project_id,
            max_cost_usd,
            max_output_tokens,
            budget_action,
        )) = row
        else {
            return Ok(None);
        };
        Ok(Some(ClaimedJob {
            lease: Lease { job_id: id, token },
            attempt,
            phase_id,
            run_id,
            executor,
            request: request.0,
            log: log.0,
            finished: finished
                .into_iter()
                .map(|(assignment_id, outcome)| FinishedL0 {
                    assignment_id,
                    outcome: outcome.0,
                })
                .collect(),
            cancel_requested,
            project_id,
            budget: budget_of(max_cost_usd, max_output_tokens, &budget_action),
        }))
    }

    /// Renews the lease. `Ok(Ok(cancel_requested))`, or `LeaseLost`.
    pub async fn heartbeat_refine_job(&self, lease: Lease, until: DateTime<Utc>) -> Fenced<bool> {
        let row: Option<bool> = on_pool!(self, |pool| {
            sqlx::query_scalar(
                "UPDATE refine_jobs SET lease_expires_at = $3 WHERE id = $1 AND lease_token = $2 \
                 AND status IN ('running', 'cancelling') RETURNING cancel_requested",
            )
            .bind(lease.job_id)
            .bind(lease.token)
            .bind(until)
            .fetch_optional(pool)
            .await?
        });
        Ok(row.ok_or(LeaseLost))
    }

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
        on_pool!(self, |pool| {
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
        on_pool!(self, |pool| {
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
        on_pool!(self, |pool| {
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

    /// Ends a job (fenced). L0 rows still `running` (killed by a cancel) become
    /// `failed`; the lease is cleared. Returns the terminal status written.
    pub async fn finish_refine_job(
        &self,
        lease: Lease,
        finish: &Finish<'_>,
        log: &[String],
        new_lines: &[String],
    ) -> Fenced<JobStatus> {
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
        on_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            let Some(seq) = bump_fenced!(tx, lease, at, new_lines.len() + 1) else {
                return Ok(Err(LeaseLost));
            };
            let attempt: i32 = sqlx::query_scalar(
                "UPDATE refine_jobs SET status = $2, result = $3, phase_refined_path = $4, \
                 error_code = $5, error_message = $6, log = $7, finished_at = $8, \
                 lease_token = NULL, lease_expires_at = NULL WHERE id = $1 RETURNING attempt",
            )
            .bind(lease.job_id)
            .bind(status.as_str())
            .bind(result.map(Json))
            .bind(path)
            .bind(code)
            .bind(message)
            .bind(Json(log))
            .bind(at)
            .fetch_one(&mut *tx)
            .await?;
            sqlx::query(
                "UPDATE refine_l0_runs SET status = 'failed', finished_at = $2, \
                 error = 'cancelled before it finished' WHERE job_id = $1 AND status = 'running'",
            )
            .bind(lease.job_id)
            .bind(at)
            .execute(&mut *tx)
            .await?;
            let mut events: Vec<(&str, Value)> = new_lines
                .iter()
                .map(|l| ("log", json!({"line": l})))
                .collect();
            let extra = match code {
                Some(code) => json!({"error": {"code": code, "message": message}}),
                None => json!({}),
            };
            events.push(state_event(status, attempt, extra));
            push_events!(tx, lease.job_id, seq, at, &events);
            tx.commit().await?;
        });
        Ok(Ok(status))
    }

    /// Graceful shutdown: give the job back without charging the attempt, so any
    /// replica resumes it at once. A job being cancelled ends `cancelled` instead.
    pub async fn release_refine_job(&self, lease: Lease) -> Fenced<JobStatus> {
        let at = now();
        on_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            let Some(seq) = bump_fenced!(tx, lease, at, 1usize) else {
                return Ok(Err(LeaseLost));
            };
            let (status, attempt): (String, i32) = sqlx::query_as(
                "UPDATE refine_jobs SET \
                   status = CASE WHEN status = 'cancelling' THEN 'cancelled' ELSE 'queued' END, \
                   attempt = CASE WHEN status = 'cancelling' THEN attempt ELSE attempt - 1 END, \
                   finished_at = CASE WHEN status = 'cancelling' THEN $2 ELSE NULL END, \
                   run_after = $2, worker_id = NULL, lease_token = NULL, lease_expires_at = NULL \
                 WHERE id = $1 RETURNING status, attempt",
            )
            .bind(lease.job_id)
            .bind(at)
            .fetch_one(&mut *tx)
            .await?;
            let status = parse_status(lease.job_id, &status)?;
            reset_running_l0s!(tx, lease.job_id, status);
            let event = state_event(
                status,
                attempt,
                json!({"reason": "handed back at shutdown"}),
            );
            push_events!(tx, lease.job_id, seq, at, &[event]);
            tx.commit().await?;
            Ok(Ok(status))
        })
    }

    /// Cancel from the API: a queued job is cancelled at once, a running one goes
    /// `cancelling` (its worker stops the L0s and ends it), anything else is left
    /// as it is. Returns `None` for an unknown job.
    pub async fn cancel_refine_job(&self, id: Uuid) -> DbResult<Option<JobStatus>> {
        let at = now();
        let lock = lock_suffix(self);
        let status = on_pool!(self, |pool| {
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

    /// The reaper: jobs whose lease expired are re-queued with backoff (their
    /// `running` L0s back to `pending`), or fail with `lease_expired` once
    /// `max_attempts` is used up; a job being cancelled ends `cancelled`.
    pub async fn reap_expired_refine_jobs(
        &self,
        backoff: impl Fn(u32) -> std::time::Duration,
    ) -> DbResult<Reaped> {
        let at = now();
        let lock = match self {
            Database::Postgres(_) => " FOR UPDATE SKIP LOCKED",
            Database::Sqlite(_) => "",
        };
        on_pool!(self, |pool| {
            let mut tx = match self {
                Database::Sqlite(_) => pool.begin_with("BEGIN IMMEDIATE").await?,
                Database::Postgres(_) => pool.begin().await?,
            };
            let expired: Vec<(Uuid, String, i32, i32)> =
                sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT id, status, attempt, max_attempts FROM refine_jobs \
                 WHERE status IN ('running', 'cancelling') AND lease_expires_at < $1 \
                 ORDER BY lease_expires_at LIMIT 100{lock}"
                )))
                .bind(at)
                .fetch_all(&mut *tx)
                .await?;
            let mut reaped = Reaped::default();
            for (id, status, attempt, max_attempts) in expired {
                let (next, run_after, error) = if status == "cancelling" {
                    reaped.cancelled += 1;
                    (JobStatus::Cancelled, at, None)
                } else if attempt >= max_attempts {
                    reaped.failed += 1;
                    let message = format!(
                        "the worker's lease expired on attempt {attempt} of {max_attempts}"
                    );
                    (JobStatus::Failed, at, Some(message))
                } else {
                    reaped.requeued += 1;
                    let delay = backoff(u32::try_from(attempt).unwrap_or(1));
                    let delay = chrono::Duration::from_std(delay).unwrap_or_default();
                    (JobStatus::Queued, at + delay, None)
                };
                let seq = bump!(tx, id, at);
                sqlx::query(
                    "UPDATE refine_jobs SET status = $2, run_after = $3, worker_id = NULL, \
                     lease_token = NULL, lease_expires_at = NULL, \
                     finished_at = CASE WHEN $2 = 'queued' THEN NULL ELSE $4 END, \
                     error_code = $5, error_message = $6 WHERE id = $1",
                )
                .bind(id)
                .bind(next.as_str())
                .bind(run_after)
                .bind(at)
                .bind(error.as_ref().map(|_| "lease_expired"))
                .bind(error.as_deref())
                .execute(&mut *tx)
                .await?;
                reset_running_l0s!(tx, id, next);
                let extra = match &error {
                    Some(message) => {
                        json!({"reason": "lease expired", "error": {"code": "lease_expired", "message": message}})
                    }
                    None => json!({"reason": "lease expired"}),
                };
                push_events!(tx, id, seq, at, &[state_event(next, attempt, extra)]);
            }
            tx.commit().await?;
            Ok(reaped)
        })
    }

    /// Retention: deletes terminal jobs (and runs) finished before `cutoff`.
    pub async fn delete_refine_jobs_finished_before(&self, cutoff: DateTime<Utc>) -> DbResult<u64> {
        on_pool!(self, |pool| {
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

    /// Jobs by status (the `refine_jobs` gauge; `queued` is the queue depth).
    /// `active_only` counts just the unfinished ones, which the partial indexes
    /// cover, so the every-few-seconds refresh never scans the retained history.
    pub async fn refine_job_counts(&self, active_only: bool) -> DbResult<Vec<(String, i64)>> {
        let sql = if active_only {
            "SELECT status, COUNT(*) FROM refine_jobs \
             WHERE status IN ('queued', 'running', 'cancelling') GROUP BY status"
        } else {
            "SELECT status, COUNT(*) FROM refine_jobs GROUP BY status"
        };
        Ok(on_pool!(self, |pool| {
            sqlx::query_as(sql).fetch_all(pool).await?
        }))
    }
}
