//! Postgres `LISTEN/NOTIFY` between replicas: "a job was queued" and "cancel this
//! job". A hint only: workers also poll, so a dropped notification or a
//! reconnecting listener never stalls a job. SQLite is single-node: nothing to send.

use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{Database, DbResult};

/// A job was queued (empty payload).
const QUEUED_CHANNEL: &str = "plangate_job_queued";
/// A job's cancel was requested (payload: job id).
const CANCEL_CHANNEL: &str = "plangate_job_cancel";

/// What another replica told us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// Look for queued work (also sent after each (re)connect: anything queued
    /// while we were not listening is found by polling).
    Queued,
    /// Kill this job's L0s now.
    Cancel(Uuid),
}

impl Database {
    /// Tells the other replicas' workers a job was queued (a no-op on SQLite).
    pub async fn notify_job_queued(&self) -> DbResult<()> {
        if let Database::Postgres(pool) = self {
            sqlx::query("SELECT pg_notify($1, '')")
                .bind(QUEUED_CHANNEL)
                .execute(pool)
                .await?;
        }
        Ok(())
    }

    /// Tells the replica running `job_id` to kill its L0s now (its heartbeat would
    /// see the cancel later anyway).
    pub async fn notify_job_cancel(&self, job_id: Uuid) -> DbResult<()> {
        if let Database::Postgres(pool) = self {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CANCEL_CHANNEL)
                .bind(job_id.to_string())
                .execute(pool)
                .await?;
        }
        Ok(())
    }

    /// Hands every notice to `on_notice` until `stop`, reconnecting after a lost
    /// connection. Returns at once on SQLite.
    pub async fn listen(&self, on_notice: impl Fn(Notice), stop: CancellationToken) {
        let Database::Postgres(pool) = self else {
            return;
        };
        loop {
            let session = async {
                let mut listener = PgListener::connect_with(pool).await?;
                listener
                    .listen_all([QUEUED_CHANNEL, CANCEL_CHANNEL])
                    .await?;
                on_notice(Notice::Queued);
                loop {
                    let note = listener.recv().await?;
                    if note.channel() == CANCEL_CHANNEL {
                        if let Ok(id) = note.payload().parse::<Uuid>() {
                            on_notice(Notice::Cancel(id));
                        }
                    } else {
                        on_notice(Notice::Queued);
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
}
