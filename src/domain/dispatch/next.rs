//! What an agent should do after a ready answer (docs/api.md, "Agents at
//! work"): an empty `tasks` alone cannot tell "wait for work in flight" from
//! "finished" or "stuck", so every ready and claim answer carries a [`NextStep`].

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{DispatchTask, Ready, TaskStatus};

/// The agent's next move.
#[derive(Serialize, Deserialize, ToSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Next {
    /// Tasks are ready: start (or claim) them.
    Dispatch,
    /// Nothing is ready but tasks are running: ask again later (or long-poll).
    Wait,
    /// Every task is terminal and none was abandoned because another failed.
    Done,
    /// Nothing is ready or running, and work will never run: tasks abandoned
    /// because a dependency failed, or pending tasks that can never become ready.
    Blocked,
}

crate::domain::wire_strings!(Next, "next step", {
    Dispatch => "dispatch",
    Wait => "wait",
    Done => "done",
    Blocked => "blocked",
});

/// Tasks of the list by status.
#[derive(Serialize, Deserialize, ToSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Remaining {
    pub pending: u64,
    pub running: u64,
    pub done: u64,
    pub failed: u64,
    pub abandoned: u64,
}

impl Remaining {
    fn count(&mut self, status: TaskStatus) {
        let slot = match status {
            TaskStatus::Pending => &mut self.pending,
            TaskStatus::Running => &mut self.running,
            TaskStatus::Done => &mut self.done,
            TaskStatus::Failed => &mut self.failed,
            TaskStatus::Abandoned => &mut self.abandoned,
        };
        *slot += 1;
    }
}

/// Why a task of a `blocked` list will not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockedBy {
    /// Cascade-abandoned: the task at this index failed (or was abandoned).
    Upstream(usize),
    /// Still pending, but this dependency (index) is not done and nothing is in
    /// flight that could finish it (only corrupt stored data gets here).
    UnmetDependency(usize),
    /// Still pending with no dependency to blame (barrier or corrupt data).
    NotOffered,
}

/// One task of a `blocked` answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockedTask {
    pub index: usize,
    pub by: BlockedBy,
}

/// The decision and what it rests on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NextStep {
    pub next: Next,
    /// Tasks `running`.
    pub in_flight: u64,
    /// With `wait`: when asking again is worth it, in seconds.
    pub retry_after_s: Option<u64>,
    pub remaining: Remaining,
    /// With `blocked`: the tasks that will not run, in list order.
    pub blocked: Vec<BlockedTask>,
}

/// Suggested pause before asking again while tasks run; a lease that expires
/// sooner shortens it (its task may become ready then).
pub const WAIT_RETRY_SECS: u64 = 5;

/// Decides [`Next`] from the tasks, the ready answer computed on them, which task
/// each cascade-abandoned task was abandoned for (`upstream[i]`, index), and the
/// seconds until the earliest lease of a running task expires, if any.
pub fn next_step(
    tasks: &[DispatchTask],
    upstream: &[Option<usize>],
    ready: &Ready,
    earliest_lease_s: Option<u64>,
) -> NextStep {
    let mut remaining = Remaining::default();
    for task in tasks {
        remaining.count(task.status);
    }
    let mut step = NextStep {
        next: Next::Dispatch,
        in_flight: remaining.running,
        retry_after_s: None,
        remaining,
        blocked: Vec::new(),
    };
    if !ready.tasks.is_empty() {
        return step;
    }
    if remaining.running > 0 {
        step.next = Next::Wait;
        step.retry_after_s = Some(
            earliest_lease_s
                .unwrap_or(WAIT_RETRY_SECS)
                .clamp(1, WAIT_RETRY_SECS),
        );
        return step;
    }
    let is_done = |d: &usize| tasks.get(*d).is_some_and(|t| t.status == TaskStatus::Done);
    for (index, task) in tasks.iter().enumerate() {
        let by = match task.status {
            TaskStatus::Abandoned => match upstream.get(index).copied().flatten() {
                Some(up) => BlockedBy::Upstream(up),
                None => continue,
            },
            TaskStatus::Pending => match task.depends_on.iter().find(|d| !is_done(d)) {
                Some(&dep) => BlockedBy::UnmetDependency(dep),
                None => BlockedBy::NotOffered,
            },
            _ => continue,
        };
        step.blocked.push(BlockedTask { index, by });
    }
    step.next = if step.blocked.is_empty() {
        Next::Done
    } else {
        Next::Blocked
    };
    step
}

/// The answer the list's counts alone decide once nothing is ready or running:
/// `done` when no task is pending or abandoned (a `blocked` answer names pending
/// tasks and cascade-abandoned ones, so without either there is none). `None`
/// when it takes the tasks to tell `done` from `blocked`. [`next_step`] decides
/// the same on the whole list; this spares a finished list's every late claim
/// and `ready` the read of all its tasks (docs/architecture.md, "Claims at scale").
pub fn next_from_counts(remaining: Remaining) -> Option<NextStep> {
    let settled = remaining.pending == 0 && remaining.running == 0 && remaining.abandoned == 0;
    settled.then_some(NextStep {
        next: Next::Done,
        in_flight: 0,
        retry_after_s: None,
        remaining,
        blocked: Vec::new(),
    })
}

/// Whether the counts alone say a task must be ready: work is pending and nothing
/// is running or abandoned. A pending task then waits on no work in flight and on
/// no failure (a failure abandons its descendants), so the earliest of them in the
/// active wave has every dependency done. An answer of "nothing ready" on such
/// counts read the tasks before a concurrent commit and the counts after it
/// (each statement sees the commits before it): asking again is worth it before
/// reading the whole list to say why nothing runs.
pub fn ready_by_counts(remaining: Remaining) -> bool {
    remaining.pending > 0 && remaining.running == 0 && remaining.abandoned == 0
}

#[cfg(test)]
mod tests {
    use super::super::{ReadyMode, cascade, ready};
    use super::TaskStatus::*;
    use super::*;
    use proptest::prelude::*;

    fn t(wave: i64, status: TaskStatus, deps: &[usize]) -> DispatchTask {
        DispatchTask {
            wave,
            status,
            depends_on: deps.to_vec(),
            writes: vec![],
        }
    }

    fn decide(mode: ReadyMode, tasks: &[DispatchTask], upstream: &[Option<usize>]) -> NextStep {
        next_step(tasks, upstream, &ready(mode, tasks), None)
    }

    #[test]
    fn pipeline_with_a_running_task_and_work_behind_it_says_wait() {
        // t-2 running, t-3 pending behind it: nothing ready, but work in flight.
        let tasks = [t(1, Done, &[]), t(2, Running, &[0]), t(3, Pending, &[1])];
        for mode in ReadyMode::ALL {
            let step = decide(mode, &tasks, &[None; 3]);
            assert_eq!(step.next, Next::Wait, "{mode}");
            assert_eq!(step.in_flight, 1);
            assert_eq!(step.retry_after_s, Some(WAIT_RETRY_SECS));
            assert_eq!(
                step.remaining,
                Remaining {
                    pending: 1,
                    running: 1,
                    done: 1,
                    ..Remaining::default()
                }
            );
        }
    }

    #[test]
    fn a_lease_expiring_sooner_shortens_the_retry() {
        let tasks = [t(1, Running, &[]), t(2, Pending, &[0])];
        let r = ready(ReadyMode::Barrier, &tasks);
        assert_eq!(
            next_step(&tasks, &[None; 2], &r, Some(2)).retry_after_s,
            Some(2)
        );
        assert_eq!(
            next_step(&tasks, &[None; 2], &r, Some(0)).retry_after_s,
            Some(1)
        );
        assert_eq!(
            next_step(&tasks, &[None; 2], &r, Some(900)).retry_after_s,
            Some(5)
        );
    }

    #[test]
    fn everything_terminal_without_cascade_is_done() {
        let tasks = [t(1, Done, &[]), t(1, Failed, &[]), t(2, Abandoned, &[0])];
        for mode in ReadyMode::ALL {
            let step = decide(mode, &tasks, &[None; 3]);
            assert_eq!(step.next, Next::Done);
            assert!(step.blocked.is_empty());
        }
        assert_eq!(decide(ReadyMode::Barrier, &[], &[]).next, Next::Done);
    }

    #[test]
    fn counts_decide_done_only_without_pending_running_or_abandoned_tasks() {
        let tasks = [t(1, Done, &[]), t(1, Failed, &[]), t(2, Done, &[0])];
        let step = decide(ReadyMode::Barrier, &tasks, &[None; 3]);
        assert_eq!(next_from_counts(step.remaining), Some(step));
        for other in [Pending, Running, Abandoned] {
            let tasks = [t(1, Done, &[]), t(2, other, &[0])];
            let step = decide(ReadyMode::Barrier, &tasks, &[None, Some(0)]);
            assert_eq!(next_from_counts(step.remaining), None, "{other:?}");
        }
    }

    #[test]
    fn a_cascaded_failure_is_blocked_naming_the_failure() {
        let tasks = [
            t(1, Failed, &[]),
            t(2, Abandoned, &[0]),
            t(3, Abandoned, &[1]),
            t(1, Done, &[]),
        ];
        let step = decide(ReadyMode::Pipeline, &tasks, &[None, Some(0), Some(0), None]);
        assert_eq!(step.next, Next::Blocked);
        assert_eq!(
            step.blocked,
            [
                BlockedTask {
                    index: 1,
                    by: BlockedBy::Upstream(0)
                },
                BlockedTask {
                    index: 2,
                    by: BlockedBy::Upstream(0)
                },
            ]
        );
    }

    #[test]
    fn a_pending_task_that_can_never_run_is_blocked() {
        // A self-loop (corrupt data): nothing ready, nothing running, not terminal.
        let tasks = [t(1, Pending, &[0])];
        let step = decide(ReadyMode::Pipeline, &tasks, &[None]);
        assert_eq!(step.next, Next::Blocked);
        assert_eq!(step.blocked[0].by, BlockedBy::UnmetDependency(0));
    }

    fn arb_list() -> impl Strategy<Value = Vec<(i64, Vec<usize>)>> {
        prop::collection::vec((1i64..4, prop::collection::vec(0usize..12, 0..3)), 0..12)
    }

    proptest! {
        /// Driving a valid list the way an agent does — start what is ready, finish
        /// or fail what runs, cascade failures — `next` is `dispatch` exactly when
        /// something is ready, `wait` exactly when something runs and nothing is
        /// ready, and the drive always ends in `done` or `blocked`, never stuck.
        #[test]
        fn agents_following_next_always_finish(list in arb_list(), fails in prop::collection::vec(any::<bool>(), 12), mode_pipeline in any::<bool>()) {
            let mode = if mode_pipeline { ReadyMode::Pipeline } else { ReadyMode::Barrier };
            // Only earlier-wave dependencies, as gating guarantees.
            let mut tasks: Vec<DispatchTask> = list.iter().enumerate().map(|(i, (wave, deps))| {
                let deps = deps.iter().copied().filter(|&d| d < i && list[d].0 < *wave).collect::<Vec<_>>();
                t(*wave, Pending, &deps)
            }).collect();
            let mut upstream = vec![None; tasks.len()];
            for _round in 0..(3 * tasks.len() + 2) {
                let r = ready(mode, &tasks);
                let step = next_step(&tasks, &upstream, &r, None);
                let running: Vec<usize> = (0..tasks.len()).filter(|&i| tasks[i].status == Running).collect();
                prop_assert_eq!(step.next == Next::Dispatch, !r.tasks.is_empty());
                prop_assert_eq!(step.next == Next::Wait, r.tasks.is_empty() && !running.is_empty());
                if ready_by_counts(step.remaining) {
                    prop_assert_eq!(step.next, Next::Dispatch);
                }
                match step.next {
                    Next::Dispatch => for i in r.tasks { tasks[i].status = Running },
                    Next::Wait => for i in running {
                        if fails[i % fails.len()] {
                            tasks[i].status = Failed;
                            for d in cascade(i, &tasks) {
                                tasks[d].status = Abandoned;
                                upstream[d] = Some(i);
                            }
                        } else {
                            tasks[i].status = Done;
                        }
                    },
                    Next::Done | Next::Blocked => {
                        prop_assert!(tasks.iter().all(|t| t.status.is_terminal()));
                        // The counts, when they decide alone, decide the same.
                        if let Some(by_counts) = next_from_counts(step.remaining) {
                            prop_assert_eq!(&by_counts, &step);
                        }
                        prop_assert_eq!(step.next == Next::Blocked, upstream.iter().any(Option::is_some));
                        return Ok(());
                    }
                }
            }
            prop_assert!(false, "the drive did not finish");
        }
    }
}
