//! Storage of refine jobs: the durable queue (claim, lease, heartbeat, reaper), the
//! per-L0 records and the event log (docs/spec/jobs.md). This module holds the row
//! types; each concern has its own file:
//! - `submit`: insert a job (idempotency key);
//! - `read`: one job, list pages, versions, events, L0 records, status counts;
//! - `lease`: the worker's side — claim, heartbeat, finish, hand back — and the reaper;
//! - `progress`: the worker's writes while it runs (L0s started/finished, log lines);
//! - `budget`: the budget gate in front of each L0 start;
//! - `cancel`: cancel from the API;
//! - `retention`: deleting finished jobs.
//!
//! Fencing: every write a worker makes goes through [`bump_fenced!`] (or, to end a
//! job, one UPDATE with the same condition), an UPDATE that
//! matches the job's current `lease_token` and bumps `version`. When it matches no
//! row the lease is gone (expired, reaped, handed back) and the transaction is rolled
//! back, so a stale worker changes nothing. `version` is also the `seq` of the
//! event written in the same transaction, so readers follow one integer. The
//! transaction helpers (`on_pool!`, `begin_write!`) live in `db/tx.rs`; the job's
//! own write macros live beside what they write: the fencing and event-log ones
//! here, `store_pending!`/`progress_of!` in `progress`, `reset_running_l0s!` in
//! `lease`, `insert_jobs!` in `submit`.
//!
//! Macro order matters (textual scope): the macros below come first so every file
//! sees them; `progress` and `lease` are declared before the files that use their
//! macros; `submit`'s `insert_jobs!` is also used by `db/refine_runs.rs`.

/// Bumps `version` by `$events` (the events this write will insert, at least 1) if
/// `$lease` still holds the job; evaluates to `Option<i64>`, the last event's seq.
/// With `log = Some(…)` the same statement stores the job log (one round trip less).
macro_rules! bump_fenced {
    ($tx:expr, $lease:expr, $at:expr, $events:expr, log = $log:expr) => {{
        let log: Option<&[String]> = $log;
        bump_fenced!(@ $tx, $lease, $at, $events, log.map(sqlx::types::Json))
    }};
    ($tx:expr, $lease:expr, $at:expr, $events:expr) => {
        bump_fenced!(@ $tx, $lease, $at, $events, None::<sqlx::types::Json<&[String]>>)
    };
    (@ $tx:expr, $lease:expr, $at:expr, $events:expr, $log:expr) => {
        sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
            "UPDATE refine_jobs SET version = version + $4, updated_at = $3, \
             log = COALESCE($5, log) \
             WHERE id = $1 AND lease_token = $2 AND status IN {} \
             RETURNING version",
            $crate::db::status_list(&$crate::domain::job::JobStatus::IN_FLIGHT)
        )))
        .bind($lease.job_id)
        .bind($lease.token)
        .bind($at)
        .bind(i64::try_from(($events).max(1)).unwrap_or(i64::MAX))
        .bind($log)
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
    // `(event, &data, created_at)` triples: each event keeps its own time.
    ($tx:expr, $job_id:expr, $last_seq:expr, timed = $events:expr) => {{
        let events: &[(&str, &serde_json::Value, chrono::DateTime<chrono::Utc>)] = $events;
        if !events.is_empty() {
            let first = $last_seq - events.len() as i64 + 1;
            let mut q = sqlx::QueryBuilder::new(
                "INSERT INTO refine_job_events (job_id, seq, event, data, created_at) ",
            );
            q.push_values(
                events.iter().enumerate(),
                |mut b, (i, (event, data, at))| {
                    b.push_bind($job_id)
                        .push_bind(first + i as i64)
                        .push_bind(event.to_string())
                        .push_bind(sqlx::types::Json(data))
                        .push_bind(*at);
                },
            );
            q.build().execute(&mut *$tx).await?;
        }
    }};
    // `(event, data)` pairs, all created at `$at`.
    ($tx:expr, $job_id:expr, $last_seq:expr, $at:expr, $events:expr) => {{
        let events: &[(&str, serde_json::Value)] = $events;
        let at: chrono::DateTime<chrono::Utc> = $at;
        let timed: Vec<(&str, &serde_json::Value, chrono::DateTime<chrono::Utc>)> = events
            .iter()
            .map(|(event, data)| (*event, data, at))
            .collect();
        push_events!($tx, $job_id, $last_seq, timed = &timed);
    }};
}

#[macro_use]
mod progress;
#[macro_use]
mod lease;
#[macro_use]
mod submit;
mod budget;
mod cancel;
mod read;
mod retention;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::FromRow;
use sqlx::types::Json;
use uuid::Uuid;

use super::DbResult;
use crate::domain::job::JobStatus;
use crate::domain::refine::{
    ExecutorKind, JobError, JobKind, JobProgress, L0ErrorCode, L0Status, StoredJob, StoredL0,
};
use crate::domain::usage::{Budget, BudgetAction, L0Usage, UsageSource, UsageTotals};

pub use budget::{BudgetScopes, BudgetState, Gated};
pub use lease::{
    ClaimFor, ClaimedJob, Fenced, Finish, FinishedL0, JobEnd, JobLease, LeaseLost, Reaped,
};
pub use progress::{L0Ended, PendingProgress};
pub use submit::{GroupOutcome, KeyedJob, RetryInsert, SubmitQueue, store_group};

/// A job to insert, with its L0 rows (`(assignment_id, batch)` in natural order).
/// Owned: a job submitted on its own travels to the group writer (`submit.rs`).
#[derive(Debug, Clone)]
pub struct NewRefineJob {
    pub id: Uuid,
    pub phase_id: String,
    pub run_id: Option<Uuid>,
    pub project_id: Option<String>,
    pub team_pk: Option<String>,
    pub executor: String,
    pub executor_kind: ExecutorKind,
    /// What the worker needs: context, refined plan, task file, output dir.
    pub request: Value,
    pub idempotency_key: Option<String>,
    pub request_hash: Option<String>,
    pub max_attempts: u32,
    pub l0s: Vec<(String, i32)>,
    /// The job's budget (a run's phase jobs carry the run's; the scope is the run).
    pub budget: Budget,
    /// The ended job this one retries (docs/api.md, "Retry").
    pub retry_of: Option<Uuid>,
    /// The W3C `traceparent` its worker's span continues (docs/observability.md).
    pub trace_parent: Option<String>,
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

/// A budget from its stored columns (`None` when nothing is limited).
pub(crate) fn budget_of(
    max_cost_usd: Option<f64>,
    max_output_tokens: Option<i64>,
    budget_action: BudgetAction,
) -> Option<Budget> {
    let budget = Budget {
        max_cost_usd,
        max_output_tokens,
        budget_action,
    };
    budget.is_limited().then_some(budget)
}

#[derive(FromRow)]
struct RawJobRow {
    id: Uuid,
    kind: JobKind,
    status: JobStatus,
    phase_id: String,
    run_id: Option<Uuid>,
    project_id: Option<String>,
    team_pk: Option<String>,
    executor: String,
    executor_kind: ExecutorKind,
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
    // Decodes strictly: the column's CHECK (migration 0004) holds its words.
    budget_action: BudgetAction,
    retry_of: Option<Uuid>,
    retried_by: Option<Uuid>,
}

const JOB_COLUMNS: &str = "id, kind, status, phase_id, run_id, project_id, team_pk, executor, \
     executor_kind, created_at, started_at, cancel_requested_at, finished_at, updated_at, \
     attempt, max_attempts, l0_total, log, result, phase_refined_path, error_code, \
     error_message, version, max_cost_usd, max_output_tokens, budget_action, retry_of, \
     (SELECT r.id FROM refine_jobs r WHERE r.retry_of = refine_jobs.id) AS retried_by";

impl RawJobRow {
    fn into_job(self, mut progress: JobProgress, usage: UsageTotals) -> DbResult<StoredJob> {
        progress.l0_total = i64::from(self.l0_total);
        let error = self.error_code.map(|code| JobError {
            code,
            message: self.error_message.unwrap_or_default(),
        });
        Ok(StoredJob {
            status: self.status,
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
                self.budget_action,
            ),
            retry_of: self.retry_of,
            retried_by: self.retried_by,
        })
    }
}

#[derive(FromRow)]
struct L0Row {
    assignment_id: String,
    batch: i32,
    status: L0Status,
    attempt: i32,
    starts: i32,
    tries: i32,
    project_id: Option<String>,
    team_pk: Option<String>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    exit_code: Option<i32>,
    error: Option<String>,
    error_code: Option<L0ErrorCode>,
    output_excerpt: Option<String>,
    input_tokens: Option<i64>,
    output_tokens: Option<i64>,
    cache_read_input_tokens: Option<i64>,
    cache_creation_input_tokens: Option<i64>,
    cost_usd: Option<f64>,
    usage_model: Option<String>,
    // Decodes strictly: the column's CHECK (migration 0004) holds its words.
    usage_source: Option<UsageSource>,
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
            source,
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
            error_code: r.error_code,
            output_excerpt: r.output_excerpt,
            usage,
            prompt_bytes: r.prompt_bytes,
        }
    }
}

const L0_COLUMNS: &str = "assignment_id, batch, status, attempt, starts, tries, project_id, \
     team_pk, started_at, finished_at, exit_code, error, error_code, output_excerpt, input_tokens, \
     output_tokens, cache_read_input_tokens, cache_creation_input_tokens, cost_usd, \
     usage_model, usage_source, prompt_bytes";

#[derive(Debug, Clone, FromRow)]
pub struct JobEvent {
    pub seq: i64,
    pub event: String,
    pub data: Json<Value>,
    pub created_at: DateTime<Utc>,
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

pub(crate) fn add_count(p: &mut JobProgress, status: L0Status, n: i64) {
    p.l0_total += n;
    p.count(status, n);
}

impl JobProgress {
    fn count(&mut self, status: L0Status, n: i64) {
        match status {
            L0Status::Pending => {}
            L0Status::Running => self.l0_running += n,
            L0Status::Valid => self.l0_succeeded += n,
            L0Status::Invalid | L0Status::Mismatch => self.l0_invalid += n,
            // No answer, whether the call failed or the provider refused it.
            L0Status::Failed => self.l0_failed += n,
        }
    }

    /// After `n` L0 rows went `running`.
    fn started(mut self, n: usize) -> Self {
        self.l0_running += i64::try_from(n).unwrap_or(i64::MAX);
        self
    }

    /// After running L0 rows ended with these statuses.
    fn ended(mut self, statuses: impl IntoIterator<Item = L0Status>) -> Self {
        for status in statuses {
            self.l0_running -= 1;
            self.count(status, 1);
        }
        self
    }
}

/// `items` in consecutive chunks of power-of-two sizes, largest first, none over
/// `max` (a power of two): a multi-row statement per chunk then has one of a few
/// shapes, so each connection prepares a handful of statements instead of one per
/// row count.
pub(crate) fn pow2_chunks<T>(items: &[T], max: usize) -> impl Iterator<Item = &[T]> {
    debug_assert!(max.is_power_of_two());
    let mut rest = items;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let n = rest.len().min(max);
        let size = 1 << n.ilog2();
        let (chunk, tail) = rest.split_at(size);
        rest = tail;
        Some(chunk)
    })
}

pub(crate) fn state_event(status: JobStatus, attempt: i32, extra: Value) -> (&'static str, Value) {
    let mut data = json!({"status": status.as_str(), "attempt": attempt});
    if let (Some(obj), Value::Object(more)) = (data.as_object_mut(), extra) {
        obj.extend(more);
    }
    ("state", data)
}

#[cfg(test)]
mod tests {
    use super::pow2_chunks;

    #[test]
    fn chunks_are_powers_of_two_in_order_and_cover_everything() {
        for len in 0..200usize {
            let items: Vec<usize> = (0..len).collect();
            let chunks: Vec<&[usize]> = pow2_chunks(&items, 32).collect();
            assert!(
                chunks
                    .iter()
                    .all(|c| c.len().is_power_of_two() && c.len() <= 32)
            );
            assert_eq!(chunks.concat(), items, "{len}");
        }
        let sizes: Vec<usize> = pow2_chunks(&[0; 13], 32).map(<[i32]>::len).collect();
        assert_eq!(sizes, [8, 4, 1]);
    }
}
