//! Postgres `LISTEN/NOTIFY` wake-ups. A hint only: workers also poll, so a dropped
//! notification or a reconnecting listener never stalls a job.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::worker::JobsHub;

/// A job was queued (payload: job id).
pub const QUEUED_CHANNEL: &str = "plangate_job_queued";
/// A job's cancel was requested (payload: job id).
pub const CANCEL_CHANNEL: &str = "plangate_job_cancel";

pub async fn listen(pool: PgPool, hub: Arc<JobsHub>, stop: CancellationToken) {
    loop {
        let session = async {
            let mut listener = PgListener::connect_with(&pool).await?;
            listener
                .listen_all([QUEUED_CHANNEL, CANCEL_CHANNEL])
                .await?;
            // Anything queued while we were not listening is found by polling.
            hub.queued.notify_waiters();
            loop {
                let note = listener.recv().await?;
                if note.channel() == CANCEL_CHANNEL {
                    if let Ok(id) = note.payload().parse::<Uuid>() {
                        hub.cancel_local(id);
                    }
                } else {
                    hub.queued.notify_waiters();
                }
            }
            #[allow(unreachable_code)]
            Ok::<(), sqlx::Error>(())
        };
        tokio::select! {
            result = session => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "job listener lost its connection; reconnecting");
                }
            }
            _ = stop.cancelled() => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.cancelled() => return,
        }
    }
}
