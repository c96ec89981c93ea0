//! What the HTTP layer shares with the workers of its process: wake-ups, change
//! notices for waiters, and the kill switches of running jobs.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    running: Mutex<Running>,
    /// A job was queued since the last NOTIFY to the other replicas was sent.
    notice_pending: AtomicBool,
    /// A task is sending NOTIFYs (at most one at a time).
    notice_sending: AtomicBool,
    /// Task lists changed here since the last NOTIFY about them was sent.
    lists_pending: Mutex<std::collections::HashSet<Uuid>>,
    /// A task is sending task-list NOTIFYs (at most one at a time).
    lists_sending: AtomicBool,
}

impl Default for JobsHub {
    fn default() -> Self {
        JobsHub {
            queued: Notify::new(),
            changed: tokio::sync::broadcast::channel(1024).0,
            running: Mutex::new(Running::default()),
            notice_pending: AtomicBool::new(false),
            notice_sending: AtomicBool::new(false),
            lists_pending: Mutex::default(),
            lists_sending: AtomicBool::new(false),
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

    /// A task list changed (committed) in this process: wakes its `ready?wait=`
    /// long-polls here at once (task list and job ids are both UUIDv7, so one
    /// channel serves both) and, on Postgres, the other replicas' through NOTIFY,
    /// off the request's path and after its commit. Coalesced like
    /// [`Self::job_queued`]: one sender at a time, each list named once per round
    /// however many writes it had meanwhile.
    pub fn task_list_changed(self: &Arc<Self>, db: &Database, list_id: Uuid) {
        let _ = self.changed.send(list_id);
        if !matches!(db, Database::Postgres(_)) {
            return;
        }
        if let Ok(mut pending) = self.lists_pending.lock() {
            pending.insert(list_id);
        }
        if self.lists_sending.swap(true, Ordering::SeqCst) {
            return;
        }
        let (hub, db) = (self.clone(), db.clone());
        tokio::spawn(async move {
            loop {
                loop {
                    let ids: Vec<Uuid> = match hub.lists_pending.lock() {
                        Ok(mut pending) => pending.drain().collect(),
                        Err(_) => Vec::new(),
                    };
                    if ids.is_empty() {
                        break;
                    }
                    if let Err(e) = db.notify_task_lists(&ids).await {
                        tracing::debug!(error = %e, "task-list notification failed; waiters poll");
                    }
                }
                hub.lists_sending.store(false, Ordering::SeqCst);
                // A list changed between the last drain and that store saw a sender
                // and left it the notice: send it, unless another sender took over.
                let more = hub.lists_pending.lock().is_ok_and(|p| !p.is_empty());
                if !more || hub.lists_sending.swap(true, Ordering::SeqCst) {
                    return;
                }
            }
        });
    }

    /// Another replica changed a task list (its NOTIFY): wake the waiters here.
    pub fn task_list_changed_elsewhere(&self, list_id: Uuid) {
        let _ = self.changed.send(list_id);
    }

    /// Wake-ups of changed jobs; a lagging receiver should re-check (it missed some).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Uuid> {
        self.changed.subscribe()
    }

    /// Cancels a job running in this process (a cancel request or a NOTIFY).
    ///
    /// A job claimed just before its cancel was stored is not registered yet: the
    /// cancel is remembered for [`Self::register`], or it would wait for the next
    /// heartbeat (15 s by default) to be noticed.
    pub fn cancel_local(&self, job_id: Uuid) {
        if let Ok(mut running) = self.running.lock() {
            match running.tokens.get(&job_id) {
                Some(token) => token.cancel(),
                None => running.remember_cancel(job_id, Instant::now()),
            }
        }
    }

    /// Registers a running job's kill switch, firing it at once if a cancel for the
    /// job came in since its claim.
    pub(super) fn register(&self, job_id: Uuid, token: CancellationToken) {
        if let Ok(mut running) = self.running.lock() {
            if running.take_early_cancel(job_id) {
                token.cancel();
            }
            running.tokens.insert(job_id, token);
        }
    }

    pub(super) fn unregister(&self, job_id: Uuid) {
        if let Ok(mut running) = self.running.lock() {
            running.tokens.remove(&job_id);
        }
    }
}

/// How long a cancel for a job not running here is remembered: far longer than a
/// claim takes to register, far shorter than a job's lease.
const EARLY_CANCEL_MEMORY: Duration = Duration::from_secs(30);
/// A bound on the memory whatever the rate of cancels (most are for jobs that run
/// on another replica or are only queued, and are never taken).
const EARLY_CANCEL_LIMIT: usize = 4096;

#[derive(Default)]
struct Running {
    tokens: HashMap<Uuid, CancellationToken>,
    /// Cancels for jobs that were not running here, oldest first.
    early_cancels: VecDeque<(Uuid, Instant)>,
}

impl Running {
    fn remember_cancel(&mut self, job_id: Uuid, now: Instant) {
        while self
            .early_cancels
            .front()
            .is_some_and(|(_, at)| now.duration_since(*at) > EARLY_CANCEL_MEMORY)
            || self.early_cancels.len() >= EARLY_CANCEL_LIMIT
        {
            self.early_cancels.pop_front();
        }
        self.early_cancels.push_back((job_id, now));
    }

    fn take_early_cancel(&mut self, job_id: Uuid) -> bool {
        let now = Instant::now();
        let position = self
            .early_cancels
            .iter()
            .position(|(id, at)| *id == job_id && now.duration_since(*at) <= EARLY_CANCEL_MEMORY);
        position
            .and_then(|i| self.early_cancels.remove(i))
            .is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_before_registration_fires_the_switch_on_registration() {
        let hub = JobsHub::default();
        let (early, other) = (Uuid::new_v4(), Uuid::new_v4());
        hub.cancel_local(early);

        let token = CancellationToken::new();
        hub.register(early, token.clone());
        assert!(token.is_cancelled());

        let untouched = CancellationToken::new();
        hub.register(other, untouched.clone());
        assert!(!untouched.is_cancelled());
        hub.cancel_local(other);
        assert!(untouched.is_cancelled());

        // Taken once: a later attempt of the same job (a resume) starts unharmed.
        hub.unregister(early);
        let again = CancellationToken::new();
        hub.register(early, again.clone());
        assert!(!again.is_cancelled());
    }

    #[test]
    fn early_cancels_are_forgotten_when_old_or_too_many() {
        let mut running = Running::default();
        let start = Instant::now();
        let old = Uuid::new_v4();
        running.remember_cancel(old, start);
        let later = start + EARLY_CANCEL_MEMORY + Duration::from_secs(1);
        running.remember_cancel(Uuid::new_v4(), later);
        assert!(!running.early_cancels.iter().any(|(id, _)| *id == old));

        for _ in 0..EARLY_CANCEL_LIMIT + 10 {
            running.remember_cancel(Uuid::new_v4(), later);
        }
        assert_eq!(running.early_cancels.len(), EARLY_CANCEL_LIMIT);
    }
}
