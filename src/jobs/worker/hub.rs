//! What the HTTP layer shares with the workers of its process: wake-ups, change
//! notices for waiters, and the kill switches of running jobs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::db::Database;

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

    pub(super) fn register(&self, job_id: Uuid, token: CancellationToken) {
        if let Ok(mut running) = self.running.lock() {
            running.insert(job_id, token);
        }
    }

    pub(super) fn unregister(&self, job_id: Uuid) {
        if let Ok(mut running) = self.running.lock() {
            running.remove(&job_id);
        }
    }
}
