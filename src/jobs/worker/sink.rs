//! The server-side [`JobSink`]: a running job's L0 starts, ends and log lines —
//! stored before the L0s start and as soon as they end, or, for the in-process
//! `builtin` executor, held back for at most [`WRITE_BEHIND`] and stored together
//! (docs/jobs.md, "Write-behind") — with their metrics.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use uuid::Uuid;

use super::{Pool, retry_db};
use crate::db::DbError;
use crate::db::refine_jobs::{
    BudgetScopes, ClaimedJob, Gated, JobLease, L0Ended, LeaseLost, PendingProgress, ProgressRecord,
};
use crate::domain::refine::{Classified, L0Outcome};
use crate::domain::usage::{Budget, MetricModels, ScopeLimit, utc_day_start};
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
    pub(super) progress: ProgressRecord,
    /// Writes held back, and when they must be stored.
    pub(super) pending: PendingProgress,
    due: Option<tokio::time::Instant>,
}

impl DbSink {
    pub(super) fn new(pool: &Arc<Pool>, job: &ClaimedJob, executor: &'static str) -> Self {
        let daily_limit = job
            .project_id
            .as_deref()
            .and_then(|p| Some((p.to_owned(), pool.settings.budgets.daily_limit(p)?)));
        let limited = job.budget.is_some_and(|b| b.is_limited()) || daily_limit.is_some();
        DbSink {
            gated: limited && executor != "builtin",
            call_ceiling_usd: pool
                .settings
                .budgets
                .max_call_cost_usd
                .get(&job.executor)
                .copied(),
            pool: pool.clone(),
            lease: job.lease,
            attempt: job.attempt,
            executor,
            write_behind: executor == "builtin",
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
        let budget = self.budget.filter(|b| b.is_limited())?;
        let scope = if self.run_id.is_some() { "run" } else { "job" };
        Some(ScopeLimit {
            name: format!("the {scope}'s budget"),
            max_cost_usd: budget.max_cost_usd,
            max_output_tokens: budget.max_output_tokens,
        })
    }

    /// Every budget that applies to this job's L0 starts, today.
    fn scopes(&self) -> BudgetScopes {
        BudgetScopes {
            request: self.request_limit(),
            run_id: self.run_id,
            project_day: self.daily_limit.as_ref().map(|(project, limit)| {
                let limit = ScopeLimit {
                    name: format!("project {project}'s daily limit"),
                    max_cost_usd: Some(*limit),
                    max_output_tokens: None,
                };
                (project.clone(), limit, utc_day_start(Utc::now()))
            }),
            call_ceiling_usd: self.call_ceiling_usd,
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
                let error = f.classified.record(&f.assignment_id).reason;
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
                    output_excerpt: output.map(|o| excerpt(o, EXCERPT_BYTES).to_owned()),
                    outcome: outcome_value(&f.run.outcome),
                    usage: f.run.usage.clone(),
                    prompt_bytes: i64::try_from(f.prompt_bytes).unwrap_or(i64::MAX),
                }
            })
            .collect();
        self.progress = self.pending.end(ended, log, new_lines, self.progress);
        self.held().await
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
    async fn gate_start(&mut self, assignment_id: &str) -> Result<Gate, String> {
        self.store().await?;
        let scopes = self.scopes();
        let pool = &self.pool;
        let gated = retry_db(pool, || {
            pool.db.gate_l0_start(
                self.lease,
                self.attempt,
                assignment_id,
                self.progress,
                &scopes,
            )
        })
        .await;
        match fenced(gated)? {
            Gated::Started(progress) => {
                self.progress = progress;
                pool.hub.job_changed(self.lease.job_id);
                Ok(Gate::Start)
            }
            Gated::Wait => Ok(Gate::Wait),
            Gated::Stop(why) => Ok(Gate::Stop(why)),
        }
    }

    async fn budget_overrun(&mut self) -> Result<Option<String>, String> {
        let Some(limit) = self.request_limit() else {
            return Ok(None);
        };
        self.store().await?;
        let pool = &self.pool;
        retry_db(pool, || {
            pool.db
                .budget_overrun(self.lease.job_id, self.run_id, &limit)
        })
        .await
        .map_err(|e| e.to_string())
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
        if self.budget.is_some() || self.daily_limit.is_some() {
            // What was spent is read from the stored L0 records: store them first.
            self.store().await?;
        }
        let pool = &self.pool;
        if let Some(budget) = self.budget {
            let spent = retry_db(pool, || {
                pool.db.budget_spent(self.lease.job_id, self.run_id)
            })
            .await
            .map_err(|e| e.to_string())?;
            if let Some(why) = budget.exceeded(spent) {
                let scope = if self.run_id.is_some() { "run" } else { "job" };
                return Ok(Some(format!("the {scope}'s {why}")));
            }
        }
        if let Some((project, limit)) = &self.daily_limit {
            let since = utc_day_start(Utc::now());
            let spent = retry_db(pool, || pool.db.project_cost_since(project, since))
                .await
                .map_err(|e| e.to_string())?;
            if spent >= *limit {
                return Ok(Some(format!(
                    "project {project}'s daily limit of ${limit} is spent (${spent:.6} today, UTC)"
                )));
            }
        }
        Ok(None)
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
