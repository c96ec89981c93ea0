//! What is ready, kept as data (docs/architecture.md, "Claims at scale"): every
//! write of a task's status keeps these up to date in its own transaction, so no
//! write path reads the whole list.
//!
//! - `tasks.unmet_deps`: how many of a task's dependencies are not `done` (a task
//!   becoming `done` decrements its dependents'); a pending task with none is
//!   pipeline-ready, found by the partial index `tasks_unblocked`.
//! - `task_list_counts`: the list's tasks by status, in [`STRIPES`] rows per list
//!   (a task counts in the row of `position % STRIPES`), so concurrent claims and
//!   completions of one list update different rows instead of queueing on one.
//! - `task_wave_counts`: a list's unfinished (pending or running) tasks by wave,
//!   striped as above. The barrier's active wave, the lowest wave with a pending or
//!   running task, is the first entry of its partial index `task_waves_unfinished`:
//!   one read whatever the list's size or how many of its tasks finished (the
//!   tasks' own indexes hold an entry for every task finished since the last vacuum,
//!   and a walk past them grew with the list).
//! - Lapsed leases are found by `tasks_running_by_lease`.

use chrono::{DateTime, Utc};
use sqlx::FromRow;
use uuid::Uuid;

use crate::domain::dispatch::{Remaining, TaskStatus};

/// Counter rows per list (see the module doc).
pub const STRIPES: i32 = 16;

/// Lapsed leases one write expires at most; the rest go at the next write or read.
pub const EXPIRE_BATCH: usize = 256;

/// Candidates a pipeline walk ([`pipeline_walk!`]) reads at a time.
pub const PIPELINE_BATCH: usize = 128;

/// One task's move between statuses, for the counters.
#[derive(Clone, Copy, Debug)]
pub struct Move {
    pub wave: i64,
    pub position: i32,
    pub from: TaskStatus,
    pub to: TaskStatus,
}

/// The counters' changes of `moves`, one entry per stripe touched, in ascending
/// stripe order (every writer updates its stripes in that order, so two writers
/// never wait on each other's rows in a cycle). Deltas in [`TaskStatus::ALL`]
/// order.
pub fn stripe_deltas(moves: &[Move]) -> Vec<(i32, [i32; 5])> {
    let mut by_stripe: std::collections::BTreeMap<i32, [i32; 5]> = Default::default();
    for m in moves.iter().filter(|m| m.from != m.to) {
        let delta = by_stripe.entry(m.position.rem_euclid(STRIPES)).or_default();
        delta[m.from.index()] -= 1;
        delta[m.to.index()] += 1;
    }
    by_stripe.into_iter().collect()
}

/// The wave counters' changes of `moves`: −1 for a task that ends, +1 for one that
/// leaves a final status (no transition does today; counted so the rows stay true
/// if one ever does), by `(wave, stripe)` in ascending order, the order every
/// writer locks them in (before the list's counters).
pub fn wave_deltas(moves: &[Move]) -> Vec<((i64, i32), i32)> {
    let mut by_row: std::collections::BTreeMap<(i64, i32), i32> = Default::default();
    for m in moves {
        let delta = i32::from(m.from.is_terminal()) - i32::from(m.to.is_terminal());
        if delta != 0 {
            *by_row
                .entry((m.wave, m.position.rem_euclid(STRIPES)))
                .or_default() += delta;
        }
    }
    by_row.into_iter().filter(|(_, d)| *d != 0).collect()
}

/// The wave counters of a new list, all its tasks pending: `(wave, stripe,
/// unfinished)` for each `(wave, position)` of `tasks`.
pub fn initial_wave_counts(tasks: impl IntoIterator<Item = (i64, i32)>) -> Vec<(i64, i32, i32)> {
    let mut by_row: std::collections::BTreeMap<(i64, i32), i32> = Default::default();
    for (wave, position) in tasks {
        *by_row
            .entry((wave, position.rem_euclid(STRIPES)))
            .or_default() += 1;
    }
    by_row.into_iter().map(|((w, s), n)| (w, s, n)).collect()
}

/// The counters of a new list of `tasks` tasks, all pending, by stripe.
pub fn initial_counts(tasks: usize) -> Vec<(i32, i32)> {
    let stripes = STRIPES as usize;
    (0..stripes.min(tasks))
        .map(|s| (s as i32, ((tasks - s).div_ceil(stripes)) as i32))
        .collect()
}

/// [`Remaining`] from summed counters.
pub fn remaining(counts: (i64, i64, i64, i64, i64)) -> Remaining {
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    Remaining {
        pending: n(counts.0),
        running: n(counts.1),
        done: n(counts.2),
        failed: n(counts.3),
        abandoned: n(counts.4),
    }
}

/// A running task whose lease lapsed, as locked for its expiry.
#[derive(FromRow, Debug)]
pub struct LapsedRow {
    pub id: Uuid,
    pub task_list_id: Uuid,
    pub parallel_group: i64,
    pub position: i32,
    pub claim_holder: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub attempts: i32,
}

/// Applies `$moves` (`&[Move]`) of list `$list_id` to its counters inside `$tx`:
/// the wave counters first, then the list's (the order every writer takes them in).
macro_rules! apply_moves {
    ($tx:ident, $list_id:expr, $moves:expr) => {{
        for ((wave, stripe), d) in $crate::db::readiness::wave_deltas($moves) {
            sqlx::query(
                "UPDATE task_wave_counts SET unfinished = unfinished + $4 \
                 WHERE task_list_id = $1 AND parallel_group = $2 AND stripe = $3",
            )
            .bind($list_id)
            .bind(wave)
            .bind(stripe)
            .bind(d)
            .execute(&mut *$tx)
            .await?;
        }
        for (stripe, d) in $crate::db::readiness::stripe_deltas($moves) {
            sqlx::query(
                "UPDATE task_list_counts SET pending = pending + $3, running = running + $4, \
                 done = done + $5, failed = failed + $6, abandoned = abandoned + $7 \
                 WHERE task_list_id = $1 AND stripe = $2",
            )
            .bind($list_id)
            .bind(stripe)
            .bind(d[0])
            .bind(d[1])
            .bind(d[2])
            .bind(d[3])
            .bind(d[4])
            .execute(&mut *$tx)
            .await?;
        }
    }};
}

/// The list's tasks by status ([`Remaining`](crate::domain::dispatch::Remaining))
/// from its counter rows, read through `$conn`.
macro_rules! read_counts {
    ($conn:expr, $list_id:expr) => {
        $crate::db::readiness::remaining(read_count_sums!($conn, $list_id))
    };
}

/// The 16 counter rows of list `$list_id` summed: `(pending, running, done,
/// failed, abandoned)`.
macro_rules! read_count_sums {
    ($conn:expr, $list_id:expr) => {{
        let sums: (i64, i64, i64, i64, i64) = sqlx::query_as(
            "SELECT COALESCE(SUM(pending), 0), COALESCE(SUM(running), 0), \
             COALESCE(SUM(done), 0), COALESCE(SUM(failed), 0), COALESCE(SUM(abandoned), 0) \
             FROM task_list_counts WHERE task_list_id = $1",
        )
        .bind($list_id)
        .fetch_one($conn)
        .await?;
        sums
    }};
}

/// The files the running tasks of list `$list_id` write, normalised
/// (`dispatch::normalize_path`), read through `$conn`: a `HashSet<String>`.
macro_rules! running_writes {
    ($conn:expr, $list_id:expr) => {{
        let running: Vec<sqlx::types::Json<Vec<String>>> = sqlx::query_scalar(
            "SELECT writes FROM tasks WHERE task_list_id = $1 AND status = 'running'",
        )
        .bind($list_id)
        .fetch_all($conn)
        .await?;
        running
            .iter()
            .flat_map(|w| w.0.iter())
            .map(|p| $crate::domain::dispatch::normalize_path(p).to_owned())
            .collect::<std::collections::HashSet<String>>()
    }};
}

/// The soonest lease of a running task of list `$list_id` to run out, read
/// through `$conn` from the `tasks_running_by_lease` index: an
/// `Option<DateTime<Utc>>`.
macro_rules! earliest_lease {
    ($conn:expr, $list_id:expr) => {{
        let earliest: Option<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
            "SELECT lease_expires_at FROM tasks WHERE task_list_id = $1 \
             AND status = 'running' AND lease_expires_at IS NOT NULL \
             ORDER BY lease_expires_at LIMIT 1",
        )
        .bind($list_id)
        .fetch_optional($conn)
        .await?;
        earliest
    }};
}

/// Walks the tasks pipeline mode offers on list `$list_id`, read through `$conn`,
/// as `dispatch::ready` does: the pending tasks whose dependencies are all done
/// (`tasks_unblocked`), in `(wave, list)` order, [`PIPELINE_BATCH`] at a time,
/// passing over a task whose writes race a running task's or an earlier offered
/// task's. `$busy` (`&[String]`): writes counted as running besides the running
/// tasks'; `$skip` (`&HashSet<Uuid>`): tasks passed over whose writes do not count.
/// Each candidate is read as `$row` (a `$ty` of the columns `$columns`, which hold
/// `id`, `parallel_group`, `position` and `writes`); for each one offered,
/// `$offered` runs and evaluates to whether the walk stops there.
macro_rules! pipeline_walk {
    (
        $conn:expr, $list_id:expr, $busy:expr, $skip:expr,
        $ty:ty, $columns:expr, |$row:ident| $offered:expr
    ) => {{
        let busy: &[String] = $busy;
        let skip: &std::collections::HashSet<uuid::Uuid> = $skip;
        let mut claimed = running_writes!($conn, $list_id);
        claimed.extend(
            busy.iter()
                .map(|p| $crate::domain::dispatch::normalize_path(p).to_owned()),
        );
        let mut after: (i64, i32) = (i64::MIN, -1);
        'walk: loop {
            let batch: Vec<$ty> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {} FROM tasks \
                 WHERE task_list_id = $1 AND status = 'pending' AND unblocked \
                 AND (parallel_group, position) > ($2, $3) \
                 ORDER BY parallel_group, position LIMIT {}",
                $columns,
                $crate::db::readiness::PIPELINE_BATCH
            )))
            .bind($list_id)
            .bind(after.0)
            .bind(after.1)
            .fetch_all($conn)
            .await?;
            let full = batch.len() == $crate::db::readiness::PIPELINE_BATCH;
            for $row in batch {
                after = ($row.parallel_group, $row.position);
                if skip.contains(&$row.id) {
                    continue;
                }
                if $crate::domain::dispatch::offer_writes(&mut claimed, &$row.writes.0) && $offered
                {
                    break 'walk;
                }
            }
            if !full {
                break;
            }
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskStatus::*;

    #[test]
    fn deltas_group_by_stripe_in_ascending_order() {
        let moves = [
            Move {
                wave: 2,
                position: 17,
                from: Pending,
                to: Running,
            },
            Move {
                wave: 1,
                position: 1,
                from: Running,
                to: Done,
            },
            Move {
                wave: 1,
                position: 3,
                from: Pending,
                to: Pending,
            },
            Move {
                wave: 1,
                position: 0,
                from: Pending,
                to: Abandoned,
            },
        ];
        assert_eq!(
            stripe_deltas(&moves),
            vec![(0, [-1, 0, 0, 0, 1]), (1, [-1, 0, 1, 0, 0])]
        );
        // Only the two tasks that end leave their waves' unfinished counts.
        assert_eq!(wave_deltas(&moves), vec![((1, 0), -1), ((1, 1), -1)]);
    }

    #[test]
    fn wave_deltas_count_a_reopen_and_cancel_out() {
        let moves = [
            Move {
                wave: 3,
                position: 16,
                from: Done,
                to: Pending,
            },
            Move {
                wave: 3,
                position: 0,
                from: Running,
                to: Failed,
            },
            Move {
                wave: 1,
                position: 5,
                from: Abandoned,
                to: Running,
            },
        ];
        assert_eq!(wave_deltas(&moves), vec![((1, 5), 1)]);
    }

    #[test]
    fn initial_wave_counts_group_by_wave_and_stripe() {
        let counts = initial_wave_counts([(1, 0), (1, 16), (1, 1), (2, 2)]);
        assert_eq!(counts, vec![(1, 0, 2), (1, 1, 1), (2, 2, 1)]);
    }

    #[test]
    fn initial_counts_spread_positions_over_stripes() {
        assert!(initial_counts(0).is_empty());
        assert_eq!(initial_counts(3), vec![(0, 1), (1, 1), (2, 1)]);
        let c = initial_counts(33);
        assert_eq!(c.len(), 16);
        assert_eq!(c[0], (0, 3));
        assert_eq!(c[1], (1, 2));
        assert_eq!(c.iter().map(|(_, n)| n).sum::<i32>(), 33);
    }
}
