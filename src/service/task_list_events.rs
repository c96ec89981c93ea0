//! A task list's event stream (docs/api.md, "List events"): every claim, renewal,
//! lease expiry and status change of the list's tasks as it is committed, so an
//! agent waiting for a dependency learns of its `done` without polling.
//!
//! Events are read by id (UUIDv7, taken when the event is written) from the
//! `(task_list_id, id)` index: the cost of a read is the events it returns, not
//! the list. Concurrent writers commit out of id order, so an event can become
//! visible after a later one was sent: each stream remembers the ids it sent in
//! the last [`LATE_COMMIT_MS`] and looks back over that window (ids only) every
//! [`LATE_SWEEP`], sending what it had not seen, until the window has closed.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use uuid::Uuid;

use super::submission::{WAIT_POLL, resume_point, wake_for};
use super::{Caller, Service, ServiceError};

/// Most events one read returns.
const BATCH: i64 = 500;
/// A write commits within this long of taking its event's id (writes are a few
/// statements; the slowest seen under load took well under a second).
const LATE_COMMIT_MS: u64 = 2_000;
/// How often a stream looks back for events committed out of order.
const LATE_SWEEP: Duration = Duration::from_millis(250);
/// Most ids one look back reads.
const SWEEP_IDS: i64 = 20_000;

pub use crate::domain::dispatch::ListEvent;

/// The smallest UUIDv7 of millisecond `ms`: every event id taken at or after it
/// sorts above it.
fn first_id_of(ms: u64) -> Uuid {
    let mut bytes = [0_u8; 16];
    bytes[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    Uuid::from_bytes(bytes)
}

/// The millisecond a UUIDv7 was taken (0 for any other id).
fn ms_of(id: &Uuid) -> u64 {
    let mut ms = [0_u8; 8];
    ms[2..].copy_from_slice(&id.as_bytes()[..6]);
    u64::from_be_bytes(ms)
}

fn now_ms() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0)
}

/// Where a stream stands.
struct Feed {
    service: Service,
    list: Uuid,
    /// Nothing at or below it is sent (the client's `Last-Event-ID`, or the
    /// start of the look-back window when it subscribed).
    floor: Uuid,
    /// The newest id sent.
    newest: Uuid,
    /// Ids sent within the look-back window below `newest`.
    sent: BTreeSet<Uuid>,
    last_sweep: tokio::time::Instant,
    /// The window below `newest` was looked over after it closed (every write
    /// that took an id in it has committed): no look back until something newer.
    settled: bool,
}

impl Feed {
    /// The low end of the look-back window.
    fn window_start(&self) -> Uuid {
        self.floor.max(first_id_of(
            ms_of(&self.newest).saturating_sub(LATE_COMMIT_MS),
        ))
    }

    /// Events not sent yet: first those newer than any sent, then (every
    /// [`LATE_SWEEP`]) those that committed late inside the look-back window.
    async fn unsent(&mut self) -> Result<Vec<ListEvent>, ServiceError> {
        let db = &self.service.db;
        let mut out = db
            .task_list_events(self.list, self.newest, None, BATCH)
            .await?;
        if self.last_sweep.elapsed() >= LATE_SWEEP && self.newest > self.floor && !self.settled {
            self.last_sweep = tokio::time::Instant::now();
            // After this look, anything committed later took an id above `newest`.
            self.settled = now_ms() > ms_of(&self.newest) + LATE_COMMIT_MS;
            let start = self.window_start();
            let ids = db
                .task_list_event_ids(self.list, start, self.newest, SWEEP_IDS)
                .await?;
            if let Some(first_missing) = ids.iter().find(|id| !self.sent.contains(id)) {
                // From the first one missed to the newest sent: what was not sent.
                let after = Uuid::from_u128(first_missing.as_u128().saturating_sub(1));
                let late = db
                    .task_list_events(self.list, after, Some(self.newest), SWEEP_IDS)
                    .await?;
                out.extend(late.into_iter().filter(|e| !self.sent.contains(&e.id)));
            }
        }
        for e in &out {
            self.sent.insert(e.id);
            if e.id > self.newest {
                self.newest = e.id;
                self.settled = false;
            }
        }
        let start = self.window_start();
        self.sent = self.sent.split_off(&start);
        Ok(out)
    }
}

impl Service {
    /// The list's events after `last_event_id` (raw, as a transport received it;
    /// absent: from the last two seconds on), then new ones as they are committed,
    /// until the server shuts down.
    pub async fn task_list_events(
        &self,
        caller: &Caller,
        id: Uuid,
        last_event_id: Option<&[u8]>,
    ) -> Result<BoxStream<'static, ListEvent>, ServiceError> {
        self.check_list_visible(caller, id).await?;
        let expected = "Last-Event-ID must be the id of an event of this stream";
        let floor = resume_point(last_event_id, |v| Uuid::parse_str(v).ok(), expected)?
            .unwrap_or_else(|| first_id_of(now_ms().saturating_sub(LATE_COMMIT_MS)));
        let feed = Feed {
            service: self.clone(),
            list: id,
            floor,
            newest: floor,
            sent: BTreeSet::new(),
            last_sweep: tokio::time::Instant::now(),
            settled: false,
        };
        let stream = futures::stream::unfold(feed, move |mut feed| async move {
            loop {
                if feed.service.is_shutting_down() {
                    return None;
                }
                // Subscribed before the read: a change committed after it wakes us.
                let mut wakeups = feed.service.hub.subscribe();
                match feed.unsent().await {
                    Ok(events) if !events.is_empty() => {
                        return Some((futures::stream::iter(events), feed));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "list event stream: reading events failed");
                        return None;
                    }
                }
                let ours = |changed: Uuid| changed == id;
                tokio::select! {
                    _ = wake_for(&mut wakeups, &ours) => {}
                    _ = tokio::time::sleep(WAIT_POLL) => {}
                }
            }
        });
        Ok(stream.flatten().boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_id_of_a_millisecond_sorts_below_every_id_taken_then() {
        for _ in 0..100 {
            let id = Uuid::now_v7();
            let ms = ms_of(&id);
            assert!(first_id_of(ms) < id);
            assert!(first_id_of(ms + 1) > id);
            assert_eq!(ms_of(&first_id_of(ms)), ms);
        }
    }
}
