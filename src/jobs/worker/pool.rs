//! What every worker, the reaper and the sink share: the pool's state and the
//! two small rules they all follow when they write.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::hub::JobsHub;
use crate::agents::Executors;
use crate::config::Settings;
use crate::db::{Database, DbError};
use crate::domain::usage::MetricModels;
use crate::jobs::task_files::TaskDir;

/// Everything a worker needs, shared by the pool.
pub(super) struct Pool {
    pub(super) db: Database,
    pub(super) settings: Arc<Settings>,
    pub(super) executors: Executors,
    pub(super) hub: Arc<JobsHub>,
    pub(super) worker_id: Uuid,
    /// Stop claiming; start no new batch.
    pub(super) drain: CancellationToken,
    /// The shutdown grace is over: kill what still runs.
    pub(super) kill: CancellationToken,
    /// The `model` label values of the L0 usage metrics.
    pub(super) metric_models: MetricModels,
    /// Where inline task text is copied for the L0s (docs/jobs.md, "Task files").
    pub(super) task_dir: TaskDir,
}

/// Retries a write while the database is unavailable, for at most half a lease
/// (after that the reaper takes over anyway).
pub(super) async fn retry_db<T, F, Fut>(pool: &Pool, mut write: F) -> Result<T, DbError>
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

pub(super) fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}
