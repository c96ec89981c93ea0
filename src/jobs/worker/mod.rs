//! The worker pool of one process: claim loop, heartbeat and graceful shutdown
//! (docs/spec/jobs.md); the sink that stores a running job's writes ([`sink`]), the
//! reaper with retention and gauges ([`reaper`]) and what the HTTP layer shares with
//! the workers ([`hub`]). Every replica runs the same loops; Postgres row locks and
//! lease tokens keep them from stepping on each other.

mod hub;
mod pool;
mod reaper;
mod sink;

pub use hub::JobsHub;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::Utc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use self::pool::{Pool, chrono_duration, retry_db};
use self::reaper::reaper;
use self::sink::DbSink;
use super::engine::{EngineConfig, RefineJob, Stop, Switches, outcome_from_value, run_refine};
use super::request::{JobFiles, JobRequest};
use super::task_files::TaskDir;
use crate::agents::{Executor, Executors};
use crate::config::Settings;
use crate::db::Database;
use crate::db::notify::Notice;
use crate::db::refine_jobs::{
    ClaimFor, ClaimedJob, Finish, JobEnd, JobLease, LeaseLost, PendingProgress,
};
use crate::domain::job::JobStatus;
use crate::domain::refine::{ExecutorKind, JobProgress, RefineOutput};
use crate::domain::usage::MetricModels;
use crate::telemetry;

/// Workers poll at least this often, so a lost notification never stalls a job.
const POLL: Duration = Duration::from_secs(1);

/// Starts `settings.workers` workers, the reaper and (on Postgres) the listener.
/// `shutdown` starts the drain; the returned task ends when every job this process
/// held is finished or handed back. Fails, before starting anything, when the
/// task-file directory is not private (the message says why and what to do).
pub fn start(
    db: Database,
    settings: Arc<Settings>,
    executors: Executors,
    hub: Arc<JobsHub>,
    shutdown: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, String> {
    // Fresh per process start: a restarted pod reusing its hostname is still a
    // different worker, so its predecessor's leases are never mistaken for its own.
    let worker_id = Uuid::new_v4();
    let task_dir = TaskDir::open(&settings.task_dir, worker_id)?;
    let pool = Arc::new(Pool {
        db,
        settings: settings.clone(),
        executors,
        hub,
        worker_id,
        drain: shutdown.clone(),
        kill: CancellationToken::new(),
        metric_models: MetricModels::new(
            settings
                .executors
                .values()
                .filter_map(|profile| profile.model.clone())
                .chain(settings.prices.keys().cloned()),
        ),
        task_dir,
    });
    tracing::info!(worker_id = %pool.worker_id, workers = settings.workers, "job workers starting");
    let background = CancellationToken::new();
    let mut background_tasks = JoinSet::new();
    background_tasks.spawn(reaper(pool.clone(), background.clone()));
    // Its own life, not the job workers': it runs with none (`PLANGATE_WORKERS=0`
    // still delivers the events of API changes) and stops when the drain starts.
    let deliveries = tokio::spawn(crate::jobs::webhooks::run(
        pool.db.clone(),
        settings.webhooks.clone(),
        shutdown.clone(),
    ));
    if let Database::Postgres(_) = &pool.db {
        let (db, hub, stop) = (pool.db.clone(), pool.hub.clone(), background.clone());
        background_tasks.spawn(async move {
            let on_notice = |notice| match notice {
                Notice::Queued => hub.queued.notify_waiters(),
                Notice::Cancel(id) => hub.cancel_local(id),
                Notice::TaskList(id) => hub.task_list_changed_elsewhere(id),
            };
            db.listen(on_notice, stop).await;
        });
    }
    Ok(tokio::spawn(async move {
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
        let _ = deliveries.await;
        tracing::info!(worker_id = %pool.worker_id, "job workers stopped");
    }))
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
        let span = job_span(&job);
        next = run_claimed(&pool, job).instrument(span).await;
    }
}

/// The span of one attempt at a job. With traces on it continues the trace of
/// the request that created the job, wherever that request was served
/// (docs/observability.md, "Context in and out").
fn job_span(job: &ClaimedJob) -> tracing::Span {
    let span = tracing::info_span!(
        "refine_job",
        job_id = %job.lease.job_id,
        attempt = job.attempt,
        otel.name = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        plangate.job_id = tracing::field::Empty,
        plangate.phase_id = tracing::field::Empty,
        plangate.project_id = tracing::field::Empty,
        plangate.attempt = tracing::field::Empty,
        plangate.job.state = tracing::field::Empty,
    );
    if telemetry::traces_on() {
        span.record("otel.name", "refine job");
        span.record("plangate.job_id", job.lease.job_id.to_string());
        span.record("plangate.phase_id", job.phase_id.as_str());
        span.record("plangate.attempt", job.attempt);
        if let Some(project) = &job.project_id {
            span.record("plangate.project_id", project.as_str());
        }
        telemetry::follow(&span, job.trace_parent.as_deref(), None);
    }
    span
}

/// The state an attempt left its job in, on the job's span.
fn record_job_state(status: JobStatus) {
    if telemetry::traces_on() {
        let span = tracing::Span::current();
        span.record("plangate.job.state", status.as_str());
        if status == JobStatus::Failed {
            span.record("otel.status_code", "ERROR");
        }
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
    if job.cancel_requested {
        return finish_unrun(pool, &job, &Finish::Cancelled).await;
    }
    let (refine_job, files, executor) = match prepare(pool, &job) {
        Ok(prepared) => prepared,
        Err((code, message)) => {
            let failed = Finish::Failed {
                code,
                message: &message,
            };
            return finish_unrun(pool, &job, &failed).await;
        }
    };
    let ran = run_engine(pool, &job, &refine_job, executor).await;
    job.progress = ran.progress;
    match ran.outcome {
        Ok((output, new_lines)) => {
            let phase_id = &refine_job.context.phase_id;
            store_result(
                pool,
                &job,
                phase_id,
                &files,
                &ran.pending,
                output,
                new_lines,
            )
            .await
        }
        Err(Stop::Budget {
            reason,
            output,
            new_lines,
        }) if !ran.lease_lost => {
            tracing::warn!(%reason, "budget reached: no further L0 starts");
            metrics::counter!("refine_budget_stops_total").increment(1);
            let stopped = Finish::BudgetExceeded {
                result: &output.result,
                message: &reason,
            };
            finish(pool, &job, &stopped, &ran.pending, &output.log, &new_lines).await
        }
        Err(stop) if ran.lease_lost => {
            tracing::warn!(reason = %stop, "lease lost: stopped without writing");
            metrics::counter!("refine_lease_lost_total").increment(1);
            None
        }
        Err(stop) => end_stopped(pool, &job, stop, &ran.pending).await,
    }
}

/// Ends a job that never ran (cancelled while queued, or unusable), with nothing
/// held back and its log as claimed.
async fn finish_unrun(pool: &Pool, job: &ClaimedJob, how: &Finish<'_>) -> Option<ClaimedJob> {
    finish(pool, job, how, &PendingProgress::default(), &job.log, &[]).await
}

/// The job to run, its files and its executor; or why it cannot run (`code`,
/// message), checked in that order: a stored request that no longer parses, then
/// an executor this server does not configure.
fn prepare(
    pool: &Pool,
    job: &ClaimedJob,
) -> Result<(RefineJob, JobFiles, Arc<Executor>), (&'static str, String)> {
    let executor = pool.executors.resolve(Some(&job.executor));
    // The builtin reviewer reads the packets, never the task file.
    let task_dir = executor
        .as_ref()
        .is_none_or(|e| e.kind() != ExecutorKind::Builtin)
        .then_some(&pool.task_dir);
    let (refine_job, files) = JobRequest::parse(&job.request)
        .and_then(|r| r.into_job(job.lease.job_id, task_dir))
        .map_err(|message| ("invalid_request", message))?;
    let Some(executor) = executor else {
        let message = format!(
            "executor {:?} is not configured on this server (configured: {})",
            job.executor,
            pool.executors.names().collect::<Vec<_>>().join(", ")
        );
        return Err(("unknown_executor", message));
    };
    Ok((refine_job, files, executor))
}

/// What running the engine came to, with the sink's state after it.
struct Ran {
    outcome: Result<(RefineOutput, Vec<String>), Stop>,
    progress: JobProgress,
    /// The writes to store with the job's end.
    pending: PendingProgress,
    /// The heartbeat found the lease taken: nothing more may be written.
    lease_lost: bool,
}

/// Runs the L0s under a heartbeat and the job's kill switch, resuming after the
/// outcomes a previous attempt stored.
async fn run_engine(
    pool: &Arc<Pool>,
    job: &ClaimedJob,
    refine_job: &RefineJob,
    executor: Arc<Executor>,
) -> Ran {
    let lease = job.lease;
    let kill = pool.kill.child_token();
    pool.hub.register(lease.job_id, kill.clone());
    let lost = Arc::new(AtomicBool::new(false));
    let heartbeat = tokio::spawn(heartbeat(pool.clone(), lease, kill.clone(), lost.clone()));

    let prior = job
        .finished
        .iter()
        .filter_map(|f| Some((f.assignment_id.clone(), outcome_from_value(&f.outcome)?)))
        .collect();
    let mut sink = DbSink::new(pool, job, &executor);
    let switches = Switches {
        kill: kill.clone(),
        drain: pool.drain.clone(),
    };
    let config = EngineConfig {
        template: &pool.settings.prompt_template,
        max_parallel: pool.settings.l0_concurrency,
        budget_action: job.budget.map(|b| b.budget_action).unwrap_or_default(),
        attempt: job.attempt,
    };
    let outcome = run_refine(
        refine_job,
        executor,
        &config,
        prior,
        job.log.clone(),
        &mut sink,
        &switches,
    )
    .await;
    sink.leave_queue().await;
    heartbeat.abort();
    pool.hub.unregister(lease.job_id);
    let lease_lost = lost.load(Ordering::SeqCst);
    // A result or a budget stop stores what the sink holds back with the job's end;
    // any other stop stores it first (what ended stays stored for the resume).
    let pending = match &outcome {
        Ok(_) | Err(Stop::Budget { .. }) => std::mem::take(&mut sink.pending),
        Err(_) => {
            if !lease_lost && let Err(reason) = sink.store().await {
                tracing::warn!(%reason, "storing the last L0 writes failed");
            }
            PendingProgress::default()
        }
    };
    Ran {
        outcome,
        progress: sink.progress,
        pending,
        lease_lost,
    }
}

/// Writes the result file when the request asked for one, then ends the job
/// `succeeded` (or `failed` when the file cannot be written).
async fn store_result(
    pool: &Pool,
    job: &ClaimedJob,
    phase_id: &str,
    files: &JobFiles,
    pending: &PendingProgress,
    output: RefineOutput,
    new_lines: Vec<String>,
) -> Option<ClaimedJob> {
    let path = match &files.output_dir {
        None => None,
        Some(dir) => match super::output::write_result(dir, phase_id, &output.result) {
            Ok(path) => Some(path.display().to_string()),
            Err(e) => {
                let message = format!("cannot write the result file: {e}");
                let failed = Finish::Failed {
                    code: "output_write_failed",
                    message: &message,
                };
                return finish(pool, job, &failed, pending, &output.log, &new_lines).await;
            }
        },
    };
    let done = Finish::Succeeded {
        result: &output.result,
        phase_refined_path: path.as_deref(),
    };
    finish(pool, job, &done, pending, &output.log, &new_lines).await
}

/// After a stop with the lease still held: a cancel ends the job `cancelled`; a
/// shutdown hands it back; a sink failure leaves it to its lease's expiry.
async fn end_stopped(
    pool: &Pool,
    job: &ClaimedJob,
    stop: Stop,
    pending: &PendingProgress,
) -> Option<ClaimedJob> {
    let lease = job.lease;
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
        return finish(pool, job, &Finish::Cancelled, pending, &log, &[]).await;
    }
    match stop {
        Stop::Drained | Stop::Killed => {
            // Shutdown: hand the lease back uncharged so another replica resumes now.
            match pool.db.release_refine_job(lease).await {
                Ok(Ok(status)) => {
                    record_job_state(status);
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
        // A budget stop with the lease held ended the job in `run_claimed`.
        Stop::Budget { .. } => {}
    }
    None
}

/// Renews the lease every heartbeat; fires the kill switch when the lease is lost
/// or a cancel was requested on another replica (the renewal reports it; a local
/// cancel or a NOTIFY fires the switch at once through the hub).
async fn heartbeat(
    pool: Arc<Pool>,
    lease: JobLease,
    kill: CancellationToken,
    lost: Arc<AtomicBool>,
) {
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
        let end = JobEnd {
            how,
            pending,
            log,
            new_lines,
            l0s_running: job.progress.l0_running > 0,
        };
        let next = (!pool.drain.is_cancelled()).then(|| claim_for(pool));
        pool.db.finish_refine_job(lease, end, next)
    })
    .await;
    let mut next = None;
    match result {
        Ok(Ok((status, claimed))) => {
            record_job_state(status);
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
