//! The reaper loop of every replica: expired leases, retention, gauges, due merges.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::pool::{Pool, chrono_duration};
use crate::domain::job::{JobStatus, requeue_backoff};

/// Re-queues expired leases, sweeps old jobs and refreshes the job gauges, in
/// every replica (a loop, not a queued job: it must run when the queue is stuck).
pub(super) async fn reaper(pool: Arc<Pool>, stop: CancellationToken) {
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
        let hourly = last_sweep.is_none_or(|t| t.elapsed() > Duration::from_secs(3600));
        if let Ok(counts) = pool.db.refine_jobs_by_status().await {
            for status in JobStatus::ALL {
                let n = counts
                    .iter()
                    .find(|(s, _)| *s == status)
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
            match pool.db.delete_webhook_deliveries_before(cutoff).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(deleted = n, "webhook deliveries retention sweep"),
                Err(e) => tracing::warn!(error = %e, "webhook deliveries retention sweep failed"),
            }
            last_sweep = Some(Instant::now());
        }
        match pool.db.refine_runs_due_for_merge().await {
            Ok(runs) => {
                for run_id in runs {
                    if let Err(e) = crate::jobs::runs::merge_if_due(&pool.db, run_id).await {
                        tracing::warn!(%run_id, error = %e, "merging a due run failed");
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "looking for runs to merge failed"),
        }
    }
}
