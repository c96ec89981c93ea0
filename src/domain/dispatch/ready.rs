//! Which pending tasks may be dispatched now (docs/spec/gating.md §7, `GET …/ready`).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::TaskStatus;

/// Read model of one task for dispatch decisions. Indices in `depends_on` are
/// positions in the slice handed to [`ready`] / [`super::cascade`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DispatchTask {
    pub wave: i64,
    pub status: TaskStatus,
    pub depends_on: Vec<usize>,
    pub writes: Vec<String>,
}

/// `?mode=` of the ready endpoint.
#[derive(Serialize, Deserialize, ToSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum ReadyMode {
    /// Whole waves, one at a time (the spec's default).
    #[default]
    Barrier,
    /// Any task whose dependencies are done and whose writes do not race.
    Pipeline,
}

crate::domain::wire_strings!(ReadyMode, "ready mode", {
    Barrier => "barrier",
    Pipeline => "pipeline",
});

/// The answer: task indices to offer, and the wave they belong to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    /// Barrier: the active wave (`None` once every task is terminal).
    /// Pipeline: the lowest wave among the offered tasks (`None` if none offered).
    pub wave: Option<i64>,
    /// Barrier: ascending index. Pipeline: priority order `(wave, index)`, which is
    /// also the order in which write conflicts were settled.
    pub tasks: Vec<usize>,
}

/// Pending tasks that may start now under `mode`. Never panics; see the mode
/// functions for how corrupt data is treated.
pub fn ready(mode: ReadyMode, tasks: &[DispatchTask]) -> Ready {
    match mode {
        ReadyMode::Barrier => barrier(tasks),
        ReadyMode::Pipeline => pipeline(tasks),
    }
}

/// The active wave is the lowest wave holding a non-terminal task; by definition
/// every earlier wave is then entirely terminal, so no separate check is needed.
///
/// A `failed` task leaves its wave terminal: cascade-abandon has already abandoned
/// its dependents, so barrier moves on and offers the surviving independent work
/// instead of stalling the whole list behind one failure.
///
/// Dependencies are not consulted: gating guarantees each dependency sits in a
/// strictly earlier (hence terminal) wave, and a pending task with a non-`done`
/// dependency would have been cascaded. Barrier is wave order, nothing more (§7).
/// If the active wave only has running tasks, `tasks` is empty but `wave` still
/// names it, so clients can tell "wait" from "finished".
fn barrier(tasks: &[DispatchTask]) -> Ready {
    let Some(active) = tasks
        .iter()
        .filter(|t| !t.status.is_terminal())
        .map(|t| t.wave)
        .min()
    else {
        return Ready::default();
    };
    let offered = tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| t.wave == active && t.status == TaskStatus::Pending)
        .map(|(i, _)| i)
        .collect();
    Ready {
        wave: Some(active),
        tasks: offered,
    }
}

/// A pending task is offered when every dependency is `done` and none of its
/// `writes` is claimed — by a `running` task, or by a task already offered in this
/// same answer: two offered tasks writing one file would race exactly like a
/// running one, since the orchestrator may start everything offered at once.
///
/// Conflicts among candidates are settled greedily in `(wave, index)` order, so
/// earlier-wave work wins and the answer is deterministic. An out-of-range
/// dependency index counts as unsatisfied: running a task whose prerequisite cannot
/// be verified is irreversible, while a stuck task stays visible in the status.
///
/// Time is O(tasks + deps + writes) plus sorting the candidates.
fn pipeline(tasks: &[DispatchTask]) -> Ready {
    let is_done = |d: &usize| tasks.get(*d).is_some_and(|t| t.status == TaskStatus::Done);

    let mut candidates: Vec<(i64, usize, &DispatchTask)> = tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| t.status == TaskStatus::Pending && t.depends_on.iter().all(is_done))
        .map(|(i, t)| (t.wave, i, t))
        .collect();
    candidates.sort_unstable_by_key(|&(wave, i, _)| (wave, i));

    // One set holds running writes and, as we go, the offered ones.
    let mut claimed: HashSet<&str> = tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Running)
        .flat_map(|t| t.writes.iter().map(|w| normalize_path(w)))
        .collect();

    let mut offered = Vec::new();
    let mut wave = None::<i64>;
    for (w, i, task) in candidates {
        if task
            .writes
            .iter()
            .any(|p| claimed.contains(normalize_path(p)))
        {
            continue;
        }
        claimed.extend(task.writes.iter().map(|p| normalize_path(p)));
        offered.push(i);
        // Candidates are sorted by wave, so the first offered one has the lowest.
        wave.get_or_insert(w);
    }
    Ready {
        wave,
        tasks: offered,
    }
}

/// One step of [`pipeline`]'s greedy walk for a caller that walks the candidates
/// itself, in `(wave, index)` order (a claim reading them from an index): `claimed`
/// holds the running tasks' writes and those of the candidates offered so far. A
/// candidate is offered when none of its `writes` is claimed; its writes are then
/// claimed too.
pub fn offer_writes(claimed: &mut HashSet<String>, writes: &[String]) -> bool {
    if writes.iter().any(|p| claimed.contains(normalize_path(p))) {
        return false;
    }
    claimed.extend(writes.iter().map(|p| normalize_path(p).to_owned()));
    true
}

/// Paths are compared as given after dropping a leading `./` (docs/spec/gating.md §1), so
/// `./src/a.rs` and `src/a.rs` are recognized as the same file.
pub fn normalize_path(mut p: &str) -> &str {
    while let Some(rest) = p.strip_prefix("./") {
        p = rest;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::TaskStatus::*;
    use super::*;
    use proptest::prelude::*;

    fn t(wave: i64, status: TaskStatus, deps: &[usize], writes: &[&str]) -> DispatchTask {
        DispatchTask {
            wave,
            status,
            depends_on: deps.to_vec(),
            writes: writes.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// `tasks` offered, in `wave`.
    fn offered(wave: i64, tasks: &[usize]) -> Ready {
        Ready {
            wave: Some(wave),
            tasks: tasks.to_vec(),
        }
    }

    #[test]
    fn barrier_and_pipeline_differ_when_a_wave_is_still_running() {
        // 0 (w1) done, 1 (w1) running, 2 (w2) depends only on 0.
        let tasks = [
            t(1, Done, &[], &["a"]),
            t(1, Running, &[], &["b"]),
            t(2, Pending, &[0], &["c"]),
        ];
        let b = ready(ReadyMode::Barrier, &tasks);
        assert_eq!(b, offered(1, &[]));
        let p = ready(ReadyMode::Pipeline, &tasks);
        assert_eq!(p, offered(2, &[2]));
    }

    #[test]
    fn barrier_offers_pending_of_lowest_non_terminal_wave() {
        let tasks = [
            t(1, Done, &[], &[]),
            t(2, Pending, &[0], &[]),
            t(2, Running, &[0], &[]),
            t(2, Pending, &[0], &[]),
            t(3, Pending, &[1], &[]),
        ];
        assert_eq!(ready(ReadyMode::Barrier, &tasks), offered(2, &[1, 3]));
    }

    #[test]
    fn barrier_proceeds_past_a_failed_wave() {
        // 0 failed, its dependent 2 was cascaded; 3 is independent work in wave 2.
        let tasks = [
            t(1, Failed, &[], &[]),
            t(1, Done, &[], &[]),
            t(2, Abandoned, &[0], &[]),
            t(2, Pending, &[1], &[]),
        ];
        assert_eq!(ready(ReadyMode::Barrier, &tasks), offered(2, &[3]));
    }

    #[test]
    fn everything_terminal_or_empty_has_no_wave() {
        let tasks = [t(1, Done, &[], &[]), t(2, Abandoned, &[0], &[])];
        for mode in ReadyMode::ALL {
            assert_eq!(ready(mode, &tasks), Ready::default());
            assert_eq!(ready(mode, &[]), Ready::default());
        }
    }

    #[test]
    fn pipeline_requires_all_dependencies_done() {
        let tasks = [
            t(1, Done, &[], &[]),
            t(1, Failed, &[], &[]),
            t(1, Running, &[], &[]),
            t(2, Pending, &[0, 1], &[]),
            t(2, Pending, &[0, 2], &[]),
            t(2, Pending, &[0], &[]),
        ];
        assert_eq!(ready(ReadyMode::Pipeline, &tasks), offered(2, &[5]));
    }

    #[test]
    fn pipeline_skips_writes_held_by_running_tasks() {
        let tasks = [
            t(1, Running, &[], &["src/a.rs", "src/b.rs"]),
            t(1, Pending, &[], &["./src/b.rs"]), // same file, different spelling
            t(1, Pending, &[], &["src/c.rs"]),
            t(1, Pending, &[], &[]),
        ];
        assert_eq!(ready(ReadyMode::Pipeline, &tasks), offered(1, &[2, 3]));
    }

    #[test]
    fn pipeline_never_offers_two_writers_of_one_file() {
        // 1 (wave 3) comes first by index but 2 (wave 2) wins by wave priority.
        let tasks = [
            t(1, Done, &[], &[]),
            t(3, Pending, &[0], &["x", "y"]),
            t(2, Pending, &[0], &["y"]),
            t(2, Pending, &[0], &["z"]),
            t(4, Pending, &[0], &["z", "w"]),
            t(4, Pending, &[0], &["x"]),
        ];
        assert_eq!(ready(ReadyMode::Pipeline, &tasks), offered(2, &[2, 3, 5]));
    }

    #[test]
    fn bad_dependency_indices_do_not_panic() {
        let tasks = [
            t(1, Pending, &[usize::MAX], &[]),
            t(1, Pending, &[1], &[]), // self-loop: never done while pending
            t(1, Pending, &[], &[]),
        ];
        assert_eq!(ready(ReadyMode::Pipeline, &tasks), offered(1, &[2]));
        // Barrier is wave order only, so it offers all three.
        assert_eq!(ready(ReadyMode::Barrier, &tasks).tasks, vec![0, 1, 2]);
    }

    #[test]
    fn offering_one_candidate_at_a_time_matches_the_whole_answer() {
        let tasks = [
            t(1, Running, &[], &["src/a.rs"]),
            t(1, Pending, &[], &["./src/a.rs"]),
            t(2, Pending, &[], &["b", "c"]),
            t(2, Pending, &[], &["c"]),
            t(3, Pending, &[], &["d"]),
        ];
        let mut claimed: HashSet<String> = ["src/a.rs".to_owned()].into();
        let offered: Vec<usize> = (1..tasks.len())
            .filter(|&i| offer_writes(&mut claimed, &tasks[i].writes))
            .collect();
        assert_eq!(offered, ready(ReadyMode::Pipeline, &tasks).tasks);
    }

    #[test]
    fn mode_strings() {
        assert_eq!(ReadyMode::default(), ReadyMode::Barrier);
        for m in ReadyMode::ALL {
            assert_eq!(serde_json::to_value(m).unwrap(), m.as_str());
            assert_eq!(ReadyMode::parse(m.as_str()), Some(m));
        }
        assert_eq!(ReadyMode::parse("wave"), None);
    }

    fn arb_tasks() -> impl Strategy<Value = Vec<DispatchTask>> {
        let status = prop::sample::select(TaskStatus::ALL.to_vec());
        let file = prop::sample::select(vec!["a", "b", "c", "d", "e", "f"]);
        prop::collection::vec(
            (
                1i64..5,
                status,
                prop::collection::vec(0usize..24, 0..3),
                prop::collection::vec(file, 0..3),
            ),
            0..20,
        )
        .prop_map(|v| {
            v.into_iter()
                .map(|(wave, status, depends_on, writes)| DispatchTask {
                    wave,
                    status,
                    depends_on,
                    writes: writes.into_iter().map(String::from).collect(),
                })
                .collect()
        })
    }

    proptest! {
        /// Offered tasks are safe, and the answer is maximal: every eligible task
        /// left out conflicts with a running or an offered writer.
        #[test]
        fn pipeline_is_safe_and_maximal(tasks in arb_tasks()) {
            let r = ready(ReadyMode::Pipeline, &tasks);
            let eligible = |i: usize| {
                tasks[i].status == Pending
                    && tasks[i].depends_on.iter().all(|&d| d < tasks.len() && tasks[d].status == Done)
            };
            let running: HashSet<&str> = tasks.iter().filter(|t| t.status == Running)
                .flat_map(|t| t.writes.iter().map(String::as_str)).collect();
            let mut offered_writes = HashSet::new();
            for &i in &r.tasks {
                prop_assert!(eligible(i));
                for w in &tasks[i].writes {
                    prop_assert!(!running.contains(w.as_str()));
                }
                let own: HashSet<&str> = tasks[i].writes.iter().map(String::as_str).collect();
                prop_assert!(own.is_disjoint(&offered_writes));
                offered_writes.extend(own);
            }
            for i in (0..tasks.len()).filter(|&i| eligible(i) && !r.tasks.contains(&i)) {
                prop_assert!(tasks[i].writes.iter()
                    .any(|w| running.contains(w.as_str()) || offered_writes.contains(w.as_str())));
            }
            prop_assert_eq!(r.wave, r.tasks.iter().map(|&i| tasks[i].wave).min());
        }
    }
}
