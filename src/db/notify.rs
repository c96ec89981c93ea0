//! Postgres `LISTEN/NOTIFY` between replicas: "a job was queued", "cancel this
//! job" and "these task lists changed". A hint only, sent after the write's commit:
//! workers and long-polls also poll, so a dropped notification or a reconnecting
//! listener never stalls a job or a waiting agent. SQLite is single-node: nothing
//! to send.

use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{Database, DbResult};

/// A job was queued (empty payload).
const QUEUED_CHANNEL: &str = "plangate_job_queued";
/// A job's cancel was requested (payload: job id).
const CANCEL_CHANNEL: &str = "plangate_job_cancel";

/// Task lists changed (payload: their ids, comma-separated).
const TASK_LIST_CHANNEL: &str = "plangate_task_list_changed";
/// Ids per task-list notice: 100 × 37 bytes stays well under NOTIFY's 8,000-byte
/// payload limit.
const LISTS_PER_NOTICE: usize = 100;

/// What another replica told us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// Look for queued work (also sent after each (re)connect: anything queued
    /// while we were not listening is found by polling).
    Queued,
    /// Kill this job's L0s now.
    Cancel(Uuid),
    /// This task list changed: wake its long-polls.
    TaskList(Uuid),
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

    /// Tells the other replicas these task lists changed (committed), so their
    /// `ready?wait=` long-polls answer now instead of at their next poll.
    pub async fn notify_task_lists(&self, ids: &[Uuid]) -> DbResult<()> {
        if let Database::Postgres(pool) = self {
            for chunk in ids.chunks(LISTS_PER_NOTICE) {
                let payload: Vec<String> = chunk.iter().map(Uuid::to_string).collect();
                sqlx::query("SELECT pg_notify($1, $2)")
                    .bind(TASK_LIST_CHANNEL)
                    .bind(payload.join(","))
                    .execute(pool)
                    .await?;
            }
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
                    .listen_all([QUEUED_CHANNEL, CANCEL_CHANNEL, TASK_LIST_CHANNEL])
                    .await?;
                on_notice(Notice::Queued);
                loop {
                    let note = listener.recv().await?;
                    if note.channel() == TASK_LIST_CHANNEL {
                        for id in note.payload().split(',').filter_map(|s| s.parse().ok()) {
                            on_notice(Notice::TaskList(id));
                        }
                    } else if note.channel() == CANCEL_CHANNEL {
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
