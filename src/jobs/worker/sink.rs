//! The server-side [`JobSink`]: a running job's L0 starts, ends and log lines —
//! stored before the L0s start and as soon as they end, or, for the in-process
//! `builtin` executor, held back for at most [`WRITE_BEHIND`] and stored together
//! (docs/jobs.md, "Write-behind") — with their metrics.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use uuid::Uuid;

use super::pool::{Pool, retry_db};
use crate::agents::{Executor, RateFeedback};
use crate::db::rate_limits::RateAsk;
use crate::db::refine_jobs::{
    BudgetScopes, ClaimedJob, Gated, JobLease, L0Ended, LeaseLost, PendingProgress,
};
use crate::db::{Database, DbError};
use crate::domain::rate_limit::{Cost, Limits, ProviderSignal, estimated_cost};
use crate::domain::refine::JobProgress;
use crate::domain::refine::{Classified, ExecutorKind, L0Outcome};
use crate::domain::usage::{
    Budget, BudgetQuestion, BudgetVerdict, MetricModels, ScopeLimit, decide, utc_day_start,
};
use crate::jobs::engine::{FinishedL0Run, Gate, JobSink, excerpt, outcome_value};

/// Longest answer excerpt kept in an L0 record.
const EXCERPT_BYTES: usize = 2048;
/// How long a worker may hold back a `builtin` L0's start or end before storing
/// it: what happens within it shares one commit (docs/jobs.md, "Write-behind").
const WRITE_BEHIND: Duration = Duration::from_millis(2);

/// The server-side sink: fenced writes, metrics, wake-ups (docs/jobs.md).
pub(super) struct DbSink {
    pool: Arc<Pool>,
    lease: JobLease,
    attempt: i32,
    executor: &'static str,
    /// Whether writes may be held back: only for `builtin` L0s, which run in
    /// process and leave nothing behind when a crash loses them. An L0 of any other
    /// executor is a process or a paid call: its start is stored before it starts
    /// (so `starts` counts every process, even one a crash kills at once) and its
    /// outcome as soon as it ends (so a resume never runs it again).
    write_behind: bool,
    /// The budget's scope is the run when the job belongs to one.
    run_id: Option<Uuid>,
    budget: Option<Budget>,
    /// The job's project and its daily limit in dollars, when the config sets one.
    daily_limit: Option<(String, f64)>,
    /// Whether each L0 start passes the budget gate: a budget or a daily limit
    /// applies and the executor is not `builtin` (whose calls cost nothing).
    gated: bool,
    /// The per-call ceiling of the job's executor (`[budgets.max_call_cost_usd]`).
    call_ceiling_usd: Option<f64>,
    /// Its L0s by status: as claimed, then as this worker's writes left them.
    pub(super) progress: JobProgress,
    /// Writes held back, and when they must be stored.
    pub(super) pending: PendingProgress,
    due: Option<tokio::time::Instant>,
    /// The executor's rate limit, when one applies (docs/jobs.md, "Rate limits").
    pub(super) rate: Option<RateConf>,
    /// What each running L0 reserved of the rate limit, settled when it ends.
    reserved: HashMap<String, Cost>,
    /// The L0 that waits for the rate limit, since when, and its wait span.
    waiting: Option<(String, Instant, tracing::Span)>,
}

/// What a job's L0s ask of their executor's rate limit.
pub(super) struct RateConf {
    executor: String,
    configured: Limits,
    /// The job's project (`""` for none): its fair share.
    project: String,
    max_output_tokens: u64,
    running_ttl_ms: i64,
    feedback: Option<Arc<dyn RateFeedback>>,
}

/// Shares what a provider's answers say with every replica, through the database:
/// a refusal, a used-up resource or changed limits at once, the rest (remaining
/// counts, the success that ends a pause's gradual release) at most every
/// [`ROUTINE_SIGNAL`], so a busy executor's answers do not queue on its row.
#[derive(Debug)]
struct DbRateFeedback {
    db: Database,
    executor: String,
    configured: Limits,
    /// The limits last stored and when a routine answer was last stored.
    last: std::sync::Mutex<LastSignal>,
}

/// The limits a provider's answers said last, and when a routine one was stored.
type LastSignal = (Option<[Option<u64>; 4]>, Option<Instant>);

/// How often a routine answer's headers are stored at most, per job.
const ROUTINE_SIGNAL: Duration = Duration::from_secs(1);

impl RateFeedback for DbRateFeedback {
    fn signal(&self, signal: ProviderSignal) {
        if signal.too_many {
            metrics::counter!("l0_provider_429_total", "executor" => self.executor.clone())
                .increment(1);
        }
        let l = &signal.learned;
        let limits = [
            l.requests_limit,
            l.input_tokens_limit,
            l.output_tokens_limit,
            l.tokens_limit,
        ];
        let urgent = signal.too_many || l.exhausted_until().is_some();
        {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            let changed = last.0 != Some(limits);
            let due = last.1.is_none_or(|t| t.elapsed() >= ROUTINE_SIGNAL);
            if !(urgent || changed || due) {
                return;
            }
            *last = (Some(limits), Some(Instant::now()));
        }
        let (db, executor, configured) = (
            self.db.clone(),
            self.executor.clone(),
            self.configured.clone(),
        );
        tokio::spawn(async move {
            if let Err(e) = db.rate_observe(&executor, &configured, &signal).await {
                tracing::warn!(%executor, error = %e, "storing a provider's rate-limit answer failed");
            }
        });
    }
}

impl Drop for DbSink {
    fn drop(&mut self) {
        self.end_wait();
    }
}

impl DbSink {
    pub(super) fn new(pool: &Arc<Pool>, job: &ClaimedJob, exec: &Executor) -> Self {
        let executor = exec.kind();
        let builtin = executor == ExecutorKind::Builtin;
        let configured = pool.settings.rate_limits.get(&job.executor).cloned();
        let rate = (!builtin && (configured.is_some() || exec.speaks_rate_headers())).then(|| {
            let configured = configured.unwrap_or_default();
            let ttl = exec.timeout().unwrap_or_default() + pool.settings.lease;
            RateConf {
                executor: job.executor.clone(),
                project: job.project_id.clone().unwrap_or_default(),
                max_output_tokens: exec.max_output_tokens(),
                running_ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
                feedback: exec.speaks_rate_headers().then(|| {
                    Arc::new(DbRateFeedback {
                        db: pool.db.clone(),
                        executor: job.executor.clone(),
                        configured: configured.clone(),
                        last: std::sync::Mutex::new((None, None)),
                    }) as Arc<dyn RateFeedback>
                }),
                configured,
            }
        });
        let daily_limit = job
            .project_id
            .as_deref()
            .and_then(|p| Some((p.to_owned(), pool.settings.budgets.daily_limit(p)?)));
        let limited = job.budget.is_some_and(|b| b.is_limited()) || daily_limit.is_some();
        DbSink {
            gated: (limited || rate.is_some()) && !builtin,
            rate,
            reserved: HashMap::new(),
            waiting: None,
            call_ceiling_usd: pool
                .settings
                .budgets
                .max_call_cost_usd
                .get(&job.executor)
                .copied(),
            pool: pool.clone(),
            lease: job.lease,
            attempt: job.attempt,
            executor: executor.as_str(),
            write_behind: builtin,
            run_id: job.run_id,
            budget: job.budget,
            daily_limit,
            progress: job.progress,
            pending: PendingProgress::default(),
            due: None,
        }
    }

    /// The request's budget as a gate scope: over the run when the job is a run's.
    fn request_limit(&self) -> Option<ScopeLimit> {
        ScopeLimit::request(self.budget.as_ref()?, self.run_id.is_some())
    }

    /// Every budget that applies to this job's L0 starts, today.
    fn scopes(&self) -> BudgetScopes {
        BudgetScopes {
            request: self.request_limit(),
            run_id: self.run_id,
            project_day: self.daily_limit.as_ref().map(|(project, limit)| {
                let limit = ScopeLimit::project_day(project, *limit);
                (project.clone(), limit, utc_day_start(Utc::now()))
            }),
            call_ceiling_usd: self.call_ceiling_usd,
        }
    }

    /// [`decide`]s `question` over `scopes`, read from the stored L0 records
    /// (what this worker holds back is stored first): `Some(why)` on a stop.
    async fn budget_stop(
        &mut self,
        scopes: BudgetScopes,
        question: BudgetQuestion,
    ) -> Result<Option<String>, String> {
        if !scopes.any() {
            return Ok(None);
        }
        self.store().await?;
        let pool = &self.pool;
        let state = retry_db(pool, || {
            pool.db.budget_state(&scopes, Some(self.lease.job_id))
        })
        .await
        .map_err(|e| e.to_string())?;
        Ok(match decide(&state.scopes, question) {
            BudgetVerdict::Stop(why) => Some(why),
            BudgetVerdict::Go { .. } | BudgetVerdict::Wait => None,
        })
    }

    /// The front L0 waits for the rate limit (from now, unless it already did).
    fn begin_wait(&mut self, assignment_id: &str) {
        if self.waiting.as_ref().is_some_and(|w| w.0 == assignment_id) {
            return;
        }
        self.end_wait();
        let executor = self.rate.as_ref().map_or("", |r| r.executor.as_str());
        metrics::gauge!("l0_rate_waiting", "executor" => executor.to_owned()).increment(1.0);
        let span = if crate::telemetry::traces_on() {
            tracing::info_span!(
                "l0.wait",
                assignment_id,
                executor,
                otel.name = "l0 rate-limit wait"
            )
        } else {
            tracing::Span::none()
        };
        self.waiting = Some((assignment_id.to_owned(), Instant::now(), span));
    }

    /// The waiting L0 started, ended or was given up.
    fn end_wait(&mut self) {
        if let Some((_, since, span)) = self.waiting.take() {
            let executor = self.rate.as_ref().map_or("", |r| r.executor.as_str());
            metrics::gauge!("l0_rate_waiting", "executor" => executor.to_owned()).decrement(1.0);
            metrics::histogram!("l0_rate_wait_seconds", "executor" => executor.to_owned())
                .record(since.elapsed().as_secs_f64());
            drop(span);
        }
    }

    /// Gives back what ended calls reserved of the rate limit and did not use.
    async fn settle(&mut self, finished: &[FinishedL0Run]) {
        let Some(rate) = &self.rate else { return };
        for f in finished {
            let Some(reserved) = self.reserved.remove(&f.assignment_id) else {
                continue;
            };
            let used_in = f.run.usage.input_tokens.unwrap_or(reserved.input_tokens);
            let used_out = f.run.usage.output_tokens.unwrap_or(reserved.output_tokens);
            let unused = Cost {
                input_tokens: (reserved.input_tokens - used_in).max(0),
                output_tokens: (reserved.output_tokens - used_out).max(0),
            };
            let call_id = format!("{}:{}", self.lease.job_id, f.assignment_id);
            let pool = &self.pool;
            let r = retry_db(pool, || {
                pool.db
                    .rate_settle(&rate.executor, &rate.configured, &call_id, unused)
            })
            .await;
            if let Err(e) = r {
                tracing::warn!(error = %e, "settling an L0's rate-limit reservation failed");
            }
        }
    }

    /// Drops the job's calls still waiting in the rate limit's queue.
    pub(super) async fn leave_queue(&mut self) {
        self.end_wait();
        if self.rate.is_some()
            && let Err(e) = self.pool.db.rate_forget_waiting(self.lease.job_id).await
        {
            tracing::warn!(error = %e, "leaving the rate-limit queue failed");
        }
    }

    /// A write was added to `pending`: with write-behind it is due within
    /// [`WRITE_BEHIND`] of the first held; otherwise it is stored now.
    async fn held(&mut self) -> Result<(), String> {
        if !self.write_behind {
            return self.store().await;
        }
        self.due
            .get_or_insert_with(|| tokio::time::Instant::now() + WRITE_BEHIND);
        Ok(())
    }

    /// Stores the writes held back (one transaction).
    pub(super) async fn store(&mut self) -> Result<(), String> {
        // Nothing is due once this returns, even when nothing was held (a due time
        // left behind would wake the engine's wait at once, forever).
        self.due = None;
        if self.pending.is_empty() {
            return Ok(());
        }
        let pool = &self.pool;
        let r = retry_db(pool, || pool.db.write_progress(self.lease, &self.pending)).await;
        self.pending = PendingProgress::default();
        pool.hub.job_changed(self.lease.job_id);
        fenced(r)
    }
}

fn fenced<T>(result: Result<Result<T, LeaseLost>, DbError>) -> Result<T, String> {
    match result {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(LeaseLost)) => Err("the lease was lost".into()),
        Err(e) => Err(e.to_string()),
    }
}

impl JobSink for DbSink {
    async fn batch_started(&mut self, assignment_ids: &[String]) -> Result<(), String> {
        self.progress = self
            .pending
            .start(assignment_ids, self.attempt, self.progress);
        self.held().await
    }

    async fn l0s_finished(
        &mut self,
        finished: &[FinishedL0Run],
        log: &[String],
        new_lines: &[String],
    ) -> Result<(), String> {
        let ended: Vec<L0Ended> = finished
            .iter()
            .map(|f| {
                let status = f.classified.status();
                metrics::counter!("l0_runs_total", "executor" => self.executor, "outcome" => status.as_str())
                    .increment(1);
                metrics::histogram!("l0_run_duration_seconds", "executor" => self.executor)
                    .record(f.elapsed.as_secs_f64());
                record_usage_metrics(self.executor, &f.run.usage, &self.pool.metric_models);
                let record = f.classified.record(&f.assignment_id);
                let (error, error_code) = (record.reason, record.error_code);
                if matches!(f.classified, Classified::Failed(_)) {
                    tracing::warn!(assignment_id = %f.assignment_id, reason = ?error, "L0 failed");
                }
                let output = match &f.run.outcome {
                    L0Outcome::Answer(text) => Some(text.as_str()),
                    L0Outcome::Failed(_) => f.run.stderr.as_deref(),
                };
                L0Ended {
                    assignment_id: f.assignment_id.clone(),
                    status,
                    tries: i32::try_from(f.run.tries).unwrap_or(i32::MAX),
                    exit_code: f.run.exit_code,
                    error,
                    error_code,
                    output_excerpt: output.map(|o| excerpt(o, EXCERPT_BYTES).to_owned()),
                    outcome: outcome_value(&f.run.outcome),
                    usage: f.run.usage.clone(),
                    prompt_bytes: i64::try_from(f.prompt_bytes).unwrap_or(i64::MAX),
                }
            })
            .collect();
        self.progress = self.pending.end(ended, log, new_lines, self.progress);
        self.held().await?;
        self.settle(finished).await;
        Ok(())
    }

    async fn log(&mut self, log: &[String], new_lines: &[String]) -> Result<(), String> {
        self.pending.log(log, new_lines);
        self.held().await
    }

    fn gates_starts(&self) -> bool {
        self.gated
    }

    /// The budget gate, in the database: what it decides is read from stored
    /// truth — every scope's spent costs and running reservations, across
    /// replicas (docs/jobs.md, "Budgets").
    async fn gate_start(
        &mut self,
        assignment_id: &str,
        prompt_bytes: usize,
    ) -> Result<Gate, String> {
        self.store().await?;
        let scopes = self.scopes();
        let ask = self.rate.as_ref().map(|r| RateAsk {
            executor: r.executor.clone(),
            configured: r.configured.clone(),
            project_id: r.project.clone(),
            job_id: self.lease.job_id,
            assignment_id: assignment_id.to_owned(),
            cost: estimated_cost(prompt_bytes, r.max_output_tokens),
            running_ttl_ms: r.running_ttl_ms,
        });
        let pool = self.pool.clone();
        let gated = retry_db(&pool, || {
            pool.db.gate_l0_start(
                self.lease,
                self.attempt,
                assignment_id,
                self.progress,
                &scopes,
                ask.as_ref(),
            )
        })
        .await;
        match fenced(gated)? {
            Gated::Started(progress) => {
                self.progress = progress;
                self.end_wait();
                if let Some(ask) = ask {
                    self.reserved.insert(assignment_id.to_owned(), ask.cost);
                }
                pool.hub.job_changed(self.lease.job_id);
                Ok(Gate::Start)
            }
            Gated::Wait(hint) => {
                if hint.is_some() {
                    self.begin_wait(assignment_id);
                }
                Ok(Gate::Wait(hint))
            }
            Gated::Stop(why) => {
                self.end_wait();
                Ok(Gate::Stop(why))
            }
            Gated::RateLimited(why) => {
                self.end_wait();
                Ok(Gate::Fail(why))
            }
        }
    }

    fn rate_feedback(&self) -> Option<Arc<dyn RateFeedback>> {
        self.rate.as_ref().and_then(|r| r.feedback.clone())
    }

    /// Over the request's budget only: a project's day has no end to judge.
    async fn budget_overrun(&mut self) -> Result<Option<String>, String> {
        let scopes = BudgetScopes {
            request: self.request_limit(),
            run_id: self.run_id,
            ..BudgetScopes::default()
        };
        self.budget_stop(scopes, BudgetQuestion::Overrun).await
    }

    fn flush_due(&self) -> Option<tokio::time::Instant> {
        self.due
    }

    async fn flush(&mut self) -> Result<(), String> {
        self.store().await
    }

    /// The request's budget (over the run when the job is a run's), then the
    /// project's daily limit. Unknown costs count as 0 (docs/jobs.md).
    async fn budget_reached(&mut self) -> Result<Option<String>, String> {
        let scopes = self.scopes();
        self.budget_stop(scopes, BudgetQuestion::Spent).await
    }
}

/// `l0_tokens_total{executor, model, kind}` and `l0_cost_usd_total{executor,
/// model}` (a gauge that only grows: the metrics crate counts integers only).
/// `model` is a configured model, `other` or `unknown` ([`MetricModels`]): one
/// series per model an agent made up would grow `/metrics` without bound.
fn record_usage_metrics(
    executor: &'static str,
    usage: &crate::domain::usage::L0Usage,
    models: &MetricModels,
) {
    let model = models.label(usage.model.as_deref()).to_owned();
    let kinds = [
        ("input", usage.input_tokens),
        ("output", usage.output_tokens),
        ("cache_read", usage.cache_read_input_tokens),
        ("cache_creation", usage.cache_creation_input_tokens),
    ];
    for (kind, tokens) in kinds {
        if let Some(n) = tokens.filter(|n| *n > 0) {
            metrics::counter!("l0_tokens_total", "executor" => executor, "model" => model.clone(), "kind" => kind)
                .increment(u64::try_from(n).unwrap_or(0));
        }
    }
    if let Some(cost) = usage.cost_usd.filter(|c| *c > 0.0) {
        metrics::gauge!("l0_cost_usd_total", "executor" => executor, "model" => model)
            .increment(cost);
    }
}
