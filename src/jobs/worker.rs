//! The worker pool of one process: claim loop, heartbeat, reaper, retention and
//! graceful shutdown (docs/spec/jobs.md). Every replica runs the same loops; Postgres row
//! locks and lease tokens keep them from stepping on each other.
//!
//! Long (about 670 lines) on purpose: the claim loop, heartbeat, sink and reaper
//! share the private `Pool` and its drain and kill switches; each part is short.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use super::engine::{
    EngineConfig, FinishedL0Run, JobSink, Stop, Switches, excerpt, outcome_from_value,
    outcome_value, run_refine,
};
use super::request::StoredRequest;
use crate::agents::Executors;
use crate::config::Settings;
use crate::db::notify::Notice;
use crate::db::refine_jobs::{
    ClaimFor, ClaimedJob, Finish, JobProgress, L0Ended, Lease, LeaseLost, PendingProgress,
};
use crate::db::{Database, DbError};
use crate::domain::job::{JobStatus, requeue_backoff};
use crate::domain::refine::{Classified, L0Outcome};
use crate::domain::usage::{Budget, utc_day_start};

/// Longest answer excerpt kept in an L0 record.
const EXCERPT_BYTES: usize = 2048;
/// Workers poll at least this often, so a lost notification never stalls a job.
const POLL: Duration = Duration::from_secs(1);
/// How long a worker may hold back an L0's start or end before storing it: what
/// happens within it shares one commit (docs/jobs.md, "Write-behind").
const WRITE_BEHIND: Duration = Duration::from_millis(2);

/// What the HTTP layer shares with the workers of its process.
pub struct JobsHub {
    /// Woken when a job is queued (locally or, through LISTEN, elsewhere).
    pub queued: Notify,
    /// The id of every job this process just wrote: `?wait=` and SSE wake early
    /// for *their* job only (a global wake-up made every waiter query the database
    /// on every write of every job).
    changed: tokio::sync::broadcast::Sender<Uuid>,
    /// Kill switches of the jobs running in this process.
    running: Mutex<HashMap<Uuid, CancellationToken>>,
    /// A job was queued since the last NOTIFY to the other replicas was sent.
    notice_pending: AtomicBool,
    /// A task is sending NOTIFYs (at most one at a time).
    notice_sending: AtomicBool,
}

impl Default for JobsHub {
    fn default() -> Self {
        JobsHub {
            queued: Notify::new(),
            changed: tokio::sync::broadcast::channel(1024).0,
            running: Mutex::new(HashMap::new()),
            notice_pending: AtomicBool::new(false),
            notice_sending: AtomicBool::new(false),
        }
    }
}

impl JobsHub {
    /// A job was queued: wakes this process's workers now and the other replicas'
    /// through NOTIFY, off the request's path. The NOTIFYs are coalesced — at most
    /// one in flight, the jobs queued meanwhile covered by one more — because a
    /// notice only says "look for queued work" (workers also poll, docs/jobs.md) and
    /// one per job cost each submit a round trip under load.
    pub fn job_queued(self: &Arc<Self>, db: &Database) {
        self.queued.notify_waiters();
        if !matches!(db, Database::Postgres(_)) {
            return;
        }
        self.notice_pending.store(true, Ordering::SeqCst);
        if self.notice_sending.swap(true, Ordering::SeqCst) {
            return;
        }
        let (hub, db) = (self.clone(), db.clone());
        tokio::spawn(async move {
            loop {
                while hub.notice_pending.swap(false, Ordering::SeqCst) {
                    if let Err(e) = db.notify_job_queued().await {
                        tracing::debug!(error = %e, "queue notification failed; workers will poll");
                    }
                }
                hub.notice_sending.store(false, Ordering::SeqCst);
                // A job queued between the last swap and that store saw a sender
                // and left it the notice: send it, unless another sender took over.
                if !hub.notice_pending.load(Ordering::SeqCst)
                    || hub.notice_sending.swap(true, Ordering::SeqCst)
                {
                    return;
                }
            }
        });
    }

    /// A job changed in this process (waiters of other replicas poll).
    pub fn job_changed(&self, job_id: Uuid) {
        // No receiver is fine: nobody is waiting.
        let _ = self.changed.send(job_id);
    }

    /// Wake-ups of changed jobs; a lagging receiver should re-check (it missed some).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Uuid> {
        self.changed.subscribe()
    }

    /// Cancels a job running in this process (a cancel request or a NOTIFY).
    pub fn cancel_local(&self, job_id: Uuid) {
        if let Ok(running) = self.running.lock()
            && let Some(token) = running.get(&job_id)
        {
            token.cancel();
        }
    }

    fn register(&self, job_id: Uuid, token: CancellationToken) {
        if let Ok(mut running) = self.running.lock() {
            running.insert(job_id, token);
        }
    }

    fn unregister(&self, job_id: Uuid) {
        if let Ok(mut running) = self.running.lock() {
            running.remove(&job_id);
        }
    }
}

/// Everything a worker needs, shared by the pool.
struct Pool {
    db: Database,
    settings: Arc<Settings>,
    executors: Executors,
    hub: Arc<JobsHub>,
    worker_id: Uuid,
    /// Stop claiming; start no new batch.
    drain: CancellationToken,
    /// The shutdown grace is over: kill what still runs.
    kill: CancellationToken,
}

/// Starts `settings.workers` workers, the reaper and (on Postgres) the listener.
/// `shutdown` starts the drain; the returned task ends when every job this process
/// held is finished or handed back.
pub fn start(
    db: Database,
    settings: Arc<Settings>,
    executors: Executors,
    hub: Arc<JobsHub>,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let pool = Arc::new(Pool {
        db,
        settings: settings.clone(),
        executors,
        hub,
        // Fresh per process start: a restarted pod reusing its hostname is still a
        // different worker, so its predecessor's leases are never mistaken for its own.
        worker_id: Uuid::new_v4(),
        drain: shutdown.clone(),
        kill: CancellationToken::new(),
    });
    tracing::info!(worker_id = %pool.worker_id, workers = settings.workers, "job workers starting");
    let background = CancellationToken::new();
    let mut background_tasks = JoinSet::new();
    background_tasks.spawn(reaper(pool.clone(), background.clone()));
    if let Database::Postgres(_) = &pool.db {
        let (db, hub, stop) = (pool.db.clone(), pool.hub.clone(), background.clone());
        background_tasks.spawn(async move {
            let on_notice = |notice| match notice {
                Notice::Queued => hub.queued.notify_waiters(),
                Notice::Cancel(id) => hub.cancel_local(id),
            };
            db.listen(on_notice, stop).await;
        });
    }
    tokio::spawn(async move {
        let mut workers = JoinSet::new();
        for slot in 0..settings.workers {
            workers.spawn(worker(pool.clone(), slot));
        }
        // The grace starts with the drain: after it, running L0s are killed.
        let kill_after_grace = {
            let pool = pool.clone();
            async move {
                pool.drain.cancelled().await;
                tokio::time::sleep(pool.settings.shutdown_grace).await;
                pool.kill.cancel();
            }
        };
        tokio::select! {
            _ = async { while workers.join_next().await.is_some() {} } => {}
            _ = kill_after_grace => {
                while workers.join_next().await.is_some() {}
            }
        }
        background.cancel();
        while background_tasks.join_next().await.is_some() {}
        tracing::info!(worker_id = %pool.worker_id, "job workers stopped");
    })
}

async fn worker(pool: Arc<Pool>, slot: u32) {
    // The job claimed with the end of the previous one, if any.
    let mut next: Option<ClaimedJob> = None;
    loop {
        let job = match next.take() {
            Some(job) => job,
            None => match claim(&pool, slot).await {
                Some(job) => job,
                None if pool.drain.is_cancelled() => return,
                None => continue,
            },
        };
        metrics::counter!("refine_jobs_claimed_total").increment(1);
        let span = tracing::info_span!(
            "refine_job",
            job_id = %job.lease.job_id,
            attempt = job.attempt
        );
        next = run_claimed(&pool, job).instrument(span).await;
    }
}

/// Claims a job on its own (the worker has none), or waits for one to be queued
/// (a wake-up or the poll) and returns `None`.
async fn claim(pool: &Arc<Pool>, slot: u32) -> Option<ClaimedJob> {
    if pool.drain.is_cancelled() {
        return None;
    }
    // Registered before the claim, so a job queued while this worker finds the
    // queue empty still wakes it (not only the next poll).
    let queued = pool.hub.queued.notified();
    tokio::pin!(queued);
    queued.as_mut().enable();
    match pool.db.claim_refine_job(claim_for(pool)).await {
        Ok(Some(job)) => return Some(job),
        Ok(None) => {
            tokio::select! {
                _ = queued => {}
                _ = tokio::time::sleep(POLL) => {}
                _ = pool.drain.cancelled() => {}
            }
        }
        Err(e) => {
            tracing::warn!(slot, error = %e, "claiming a job failed; retrying");
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = pool.drain.cancelled() => {}
            }
        }
    }
    None
}

/// This worker's claim, with a lease from now.
fn claim_for(pool: &Pool) -> ClaimFor {
    ClaimFor {
        worker_id: pool.worker_id,
        lease_until: Utc::now() + chrono_duration(pool.settings.lease),
    }
}

/// Runs a claimed job to its end; returns the next job when its end claimed one.
async fn run_claimed(pool: &Arc<Pool>, mut job: ClaimedJob) -> Option<ClaimedJob> {
    let lease = job.lease;

    if job.cancel_requested {
        let none = PendingProgress::default();
        return finish(pool, &job, &Finish::Cancelled, &none, &job.log, &[]).await;
    }
    // The builtin reviewer reads the packets, never the task file.
    let copy_task_text = pool
        .executors
        .resolve(Some(&job.executor))
        .is_none_or(|e| e.kind() != "builtin");
    let prepared =
        StoredRequest::parse(&job.request).and_then(|r| r.into_job(lease.job_id, copy_task_text));
    let (refine_job, files) = match prepared {
        Ok(p) => p,
        Err(message) => {
            let failed = Finish::Failed {
                code: "invalid_request",
                message: &message,
            };
            let none = PendingProgress::default();
            return finish(pool, &job, &failed, &none, &job.log, &[]).await;
        }
    };
    let Some(executor) = pool.executors.resolve(Some(&job.executor)) else {
        let message = format!(
            "executor {:?} is not configured on this server (configured: {})",
            job.executor,
            pool.executors.names().collect::<Vec<_>>().join(", ")
        );
        let failed = Finish::Failed {
            code: "unknown_executor",
            message: &message,
        };
        let none = PendingProgress::default();
        return finish(pool, &job, &failed, &none, &job.log, &[]).await;
    };

    let kill = pool.kill.child_token();
    pool.hub.register(lease.job_id, kill.clone());
    let lost = Arc::new(AtomicBool::new(false));
    let heartbeat = tokio::spawn(heartbeat(pool.clone(), lease, kill.clone(), lost.clone()));

    let prior = job
        .finished
        .iter()
        .filter_map(|f| Some((f.assignment_id.clone(), outcome_from_value(&f.outcome)?)))
        .collect();
    let mut sink = DbSink {
        pool: pool.clone(),
        lease,
        attempt: job.attempt,
        executor: executor.kind(),
        run_id: job.run_id,
        budget: job.budget,
        daily_limit: job
            .project_id
            .as_deref()
            .and_then(|p| Some((p.to_owned(), pool.settings.budgets.daily_limit(p)?))),
        progress: job.progress,
        pending: PendingProgress::default(),
        due: None,
    };
    let switches = Switches {
        kill: kill.clone(),
        drain: pool.drain.clone(),
    };
    let config = EngineConfig {
        template: &pool.settings.prompt_template,
        max_parallel: pool.settings.l0_concurrency,
        budget_action: job.budget.map(|b| b.budget_action).unwrap_or_default(),
    };
    let outcome = run_refine(
        &refine_job,
        executor,
        &config,
        prior,
        job.log.clone(),
        &mut sink,
        &switches,
    )
    .await;
    heartbeat.abort();
    pool.hub.unregister(lease.job_id);
    job.progress = sink.progress;
    // A result or a budget stop stores what the sink holds back with the job's end;
    // any other stop stores it first (what ended stays stored for the resume).
    let pending = match &outcome {
        Ok(_) | Err(Stop::Budget { .. }) => std::mem::take(&mut sink.pending),
        Err(_) => {
            if !lost.load(Ordering::SeqCst)
                && let Err(reason) = sink.store().await
            {
                tracing::warn!(%reason, "storing the last L0 writes failed");
            }
            PendingProgress::default()
        }
    };

    let stop = match outcome {
        Ok((output, new_lines)) => {
            let path = match &files.output_dir {
                None => None,
                Some(dir) => {
                    match super::output::write_result(
                        dir,
                        &refine_job.context.phase_id,
                        &output.result,
                    ) {
                        Ok(path) => Some(path.display().to_string()),
                        Err(e) => {
                            let message = format!("cannot write the result file: {e}");
                            let failed = Finish::Failed {
                                code: "output_write_failed",
                                message: &message,
                            };
                            return finish(pool, &job, &failed, &pending, &output.log, &new_lines)
                                .await;
                        }
                    }
                }
            };
            let done = Finish::Succeeded {
                result: &output.result,
                phase_refined_path: path.as_deref(),
            };
            return finish(pool, &job, &done, &pending, &output.log, &new_lines).await;
        }
        Err(Stop::Budget {
            reason,
            output,
            new_lines,
        }) if !lost.load(Ordering::SeqCst) => {
            tracing::warn!(%reason, "budget reached: no further L0 starts");
            metrics::counter!("refine_budget_stops_total").increment(1);
            let stopped = Finish::BudgetExceeded {
                result: &output.result,
                message: &reason,
            };
            return finish(pool, &job, &stopped, &pending, &output.log, &new_lines).await;
        }
        Err(stop) => stop,
    };
    if lost.load(Ordering::SeqCst) {
        tracing::warn!(reason = %stop, "lease lost: stopped without writing");
        metrics::counter!("refine_lease_lost_total").increment(1);
        return None;
    }
    // The database says why the kill switch fired: a cancel leaves `cancelling`.
    let status = pool
        .db
        .refine_job_version(lease.job_id)
        .await
        .ok()
        .flatten();
    if matches!(status, Some((_, JobStatus::Cancelling))) {
        let log = pool
            .db
            .refine_job(lease.job_id)
            .await
            .ok()
            .flatten()
            .map(|j| j.log)
            .unwrap_or_default();
        return finish(pool, &job, &Finish::Cancelled, &pending, &log, &[]).await;
    }
    match stop {
        Stop::Drained | Stop::Killed => {
            // Shutdown: hand the lease back uncharged so another replica resumes now.
            match pool.db.release_refine_job(lease).await {
                Ok(Ok(status)) => {
                    tracing::info!(status = status.as_str(), "job handed back at shutdown");
                }
                Ok(Err(LeaseLost)) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "handing the job back failed; its lease will expire");
                }
            }
            pool.hub.job_changed(lease.job_id);
        }
        Stop::Sink(reason) => {
            tracing::warn!(%reason, "job stopped; its lease will expire and another attempt resumes it");
        }
        // Handled above unless the lease was lost (then nothing may be written).
        Stop::Budget { .. } => {}
    }
    None
}

/// Renews the lease every heartbeat; fires the kill switch when the lease is lost
/// or a cancel was requested on another replica (the renewal reports it; a local
/// cancel or a NOTIFY fires the switch at once through the hub).
async fn heartbeat(pool: Arc<Pool>, lease: Lease, kill: CancellationToken, lost: Arc<AtomicBool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(pool.settings.heartbeat) => {}
            _ = kill.cancelled() => return,
        }
        let until = Utc::now() + chrono_duration(pool.settings.lease);
        match pool.db.heartbeat_refine_job(lease, until).await {
            Ok(Ok(cancel_requested)) => {
                if cancel_requested {
                    kill.cancel();
                    return;
                }
            }
            Ok(Err(LeaseLost)) => {
                lost.store(true, Ordering::SeqCst);
                kill.cancel();
                return;
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat failed; retrying"),
        }
    }
}

/// Ends a job with the writes its sink held back, retrying transient database
/// errors while the lease is still ours. Unless the pool is draining, the same
/// commit claims this worker's next job, which is returned.
async fn finish(
    pool: &Pool,
    job: &ClaimedJob,
    how: &Finish<'_>,
    pending: &PendingProgress,
    log: &[String],
    new_lines: &[String],
) -> Option<ClaimedJob> {
    let lease = job.lease;
    let result = retry_db(pool, || {
        pool.db.finish_refine_job(
            lease,
            how,
            pending,
            log,
            new_lines,
            job.progress.l0_running > 0,
            (!pool.drain.is_cancelled()).then(|| claim_for(pool)),
        )
    })
    .await;
    let mut next = None;
    match result {
        Ok(Ok((status, claimed))) => {
            next = claimed;
            metrics::counter!("refine_jobs_finished_total", "status" => status.as_str())
                .increment(1);
            if let Some(run_id) = job.run_id {
                // The last phase job to end merges its run (exactly once, in the db).
                let merged = retry_db(pool, || super::runs::merge_if_due(&pool.db, run_id)).await;
                if let Err(e) = merged {
                    tracing::warn!(%run_id, error = %e, "merging the run failed; the reaper retries");
                }
            }
        }
        Ok(Err(LeaseLost)) => tracing::warn!("lease lost before the job could be finished"),
        Err(e) => tracing::error!(error = %e, "finishing the job failed; its lease will expire"),
    }
    pool.hub.job_changed(lease.job_id);
    next
}

/// Retries a write while the database is unavailable, for at most half a lease
/// (after that the reaper takes over anyway).
async fn retry_db<T, F, Fut>(pool: &Pool, mut write: F) -> Result<T, DbError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, DbError>>,
{
    let deadline = Instant::now() + pool.settings.lease / 2;
    let mut delay = Duration::from_millis(100);
    loop {
        match write().await {
            Err(DbError::Unavailable(e)) if Instant::now() + delay < deadline => {
                tracing::warn!(error = %e, "database unavailable; retrying the write");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

/// The server-side sink: fenced writes, metrics, wake-ups. Writes are held back
/// for at most [`WRITE_BEHIND`] and stored together (docs/jobs.md).
struct DbSink {
    pool: Arc<Pool>,
    lease: Lease,
    attempt: i32,
    executor: &'static str,
    /// The budget's scope is the run when the job belongs to one.
    run_id: Option<Uuid>,
    budget: Option<Budget>,
    /// The job's project and its daily limit in dollars, when the config sets one.
    daily_limit: Option<(String, f64)>,
    /// Its L0s by status: as claimed, then as this worker's writes left them.
    progress: JobProgress,
    /// Writes held back, and when they must be stored.
    pending: PendingProgress,
    due: Option<tokio::time::Instant>,
}

impl DbSink {
    /// A write was held back: it is due within [`WRITE_BEHIND`] of the first.
    fn held(&mut self) {
        self.due
            .get_or_insert_with(|| tokio::time::Instant::now() + WRITE_BEHIND);
    }

    /// Stores the writes held back (one transaction).
    async fn store(&mut self) -> Result<(), String> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pool = &self.pool;
        let r = retry_db(pool, || pool.db.write_progress(self.lease, &self.pending)).await;
        self.pending = PendingProgress::default();
        self.due = None;
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
        self.held();
        Ok(())
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
                let status = f.classified.status().as_str();
                metrics::counter!("l0_runs_total", "executor" => self.executor, "outcome" => status)
                    .increment(1);
                metrics::histogram!("l0_run_duration_seconds", "executor" => self.executor)
                    .record(f.elapsed.as_secs_f64());
                record_usage_metrics(self.executor, &f.run.usage);
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
        self.held();
        Ok(())
    }

    async fn log(&mut self, log: &[String], new_lines: &[String]) -> Result<(), String> {
        self.pending.log(log, new_lines);
        self.held();
        Ok(())
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
fn record_usage_metrics(executor: &'static str, usage: &crate::domain::usage::L0Usage) {
    let model = usage.model.clone().unwrap_or_else(|| "unknown".to_owned());
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

/// Re-queues expired leases, sweeps old jobs and refreshes the job gauges, in
/// every replica (a loop, not a queued job: it must run when the queue is stuck).
async fn reaper(pool: Arc<Pool>, stop: CancellationToken) {
    let mut last_sweep: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(pool.settings.reaper_interval) => {}
            _ = stop.cancelled() => return,
        }
        let jitter = || f64::from(Uuid::new_v4().as_u128() as u16) / f64::from(u16::MAX);
        match pool
            .db
            .reap_expired_refine_jobs(|attempts| requeue_backoff(attempts, jitter()))
            .await
        {
            Ok(reaped) => {
                let expired = reaped.requeued + reaped.failed + reaped.cancelled;
                if expired > 0 {
                    metrics::counter!("refine_lease_expiries_total").increment(expired);
                    tracing::warn!(
                        requeued = reaped.requeued,
                        failed = reaped.failed,
                        cancelled = reaped.cancelled,
                        "expired leases reaped"
                    );
                    pool.hub.queued.notify_waiters();
                }
            }
            Err(e) => tracing::warn!(error = %e, "reaper pass failed"),
        }
        // Unfinished jobs every pass; the finished ones (a scan of the retained
        // history) only with the hourly sweep.
        let hourly = last_sweep.is_none_or(|t| t.elapsed() > Duration::from_secs(3600));
        if let Ok(counts) = pool.db.refine_job_counts(!hourly).await {
            for status in JobStatus::ALL
                .into_iter()
                .filter(|s| hourly || !s.is_terminal())
            {
                let n = counts
                    .iter()
                    .find(|(s, _)| s == status.as_str())
                    .map_or(0, |(_, n)| *n);
                metrics::gauge!("refine_jobs", "status" => status.as_str()).set(n as f64);
            }
        }
        if hourly {
            let cutoff = Utc::now() - chrono_duration(pool.settings.retention);
            match pool.db.delete_refine_jobs_finished_before(cutoff).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(deleted = n, "retention sweep"),
                Err(e) => tracing::warn!(error = %e, "retention sweep failed"),
            }
            last_sweep = Some(Instant::now());
        }
        match pool.db.refine_runs_due_for_merge().await {
            Ok(runs) => {
                for run_id in runs {
                    if let Err(e) = super::runs::merge_if_due(&pool.db, run_id).await {
                        tracing::warn!(%run_id, error = %e, "merging a due run failed");
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "looking for runs to merge failed"),
        }
    }
}

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}
