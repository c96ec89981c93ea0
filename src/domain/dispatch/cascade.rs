//! Cascade-abandon: who must be abandoned when a task fails (docs/spec/gating.md §7).

use super::DispatchTask;

/// Every transitive dependent of `origin` that is not terminal, ascending, without
/// `origin` itself. The caller abandons them with [`super::AbandonCategory::CASCADE`]
/// in the same transaction as the change to `origin`.
///
/// The walk goes *through* terminal tasks: if `b` (already abandoned) depends on
/// `origin` and `c` depends on `b`, then `c` is reported too — it can never run
/// either. Only the reported set is filtered by status.
///
/// Stored data may be corrupt, so: the walk is iterative (a 100k chain must not
/// overflow the stack), a visited flag makes cycles and self-loops terminate,
/// out-of-range `depends_on` indices are ignored (they name no task, so no edge),
/// and an out-of-range `origin` has no dependents. O(tasks + edges).
pub fn cascade(origin: usize, tasks: &[DispatchTask]) -> Vec<usize> {
    let n = tasks.len();
    if origin >= n {
        return Vec::new();
    }
    let (start, dependents) = reverse_adjacency(tasks);

    let mut visited = vec![false; n];
    visited[origin] = true;
    let mut stack = vec![origin];
    while let Some(u) = stack.pop() {
        // start has n + 1 entries and u < n, so both bounds exist.
        for &v in &dependents[start[u]..start[u + 1]] {
            if !visited[v] {
                visited[v] = true;
                stack.push(v);
            }
        }
    }

    // Scanning by index yields ascending order without a sort.
    visited
        .iter()
        .zip(tasks)
        .enumerate()
        .filter(|&(i, (&seen, t))| seen && i != origin && !t.status.is_terminal())
        .map(|(i, _)| i)
        .collect()
}

/// Reverse edges in compressed form: the dependents of task `d` are
/// `dependents[start[d]..start[d + 1]]`. Two flat vectors instead of a `Vec` per
/// task keep 100k-task lists to two allocations.
fn reverse_adjacency(tasks: &[DispatchTask]) -> (Vec<usize>, Vec<usize>) {
    let n = tasks.len();

    let mut start = vec![0usize; n + 1];
    for t in tasks {
        for d in valid_deps(t, n) {
            start[d + 1] += 1;
        }
    }
    for i in 0..n {
        start[i + 1] += start[i];
    }
    let mut next = start.clone();
    let mut dependents = vec![0usize; start[n]];
    for (i, t) in tasks.iter().enumerate() {
        for d in valid_deps(t, n) {
            dependents[next[d]] = i;
            next[d] += 1;
        }
    }
    (start, dependents)
}

/// Dependencies that name a task; out-of-range ones are no edge at all.
fn valid_deps(t: &DispatchTask, n: usize) -> impl Iterator<Item = usize> + '_ {
    t.depends_on.iter().copied().filter(move |&d| d < n)
}

#[cfg(test)]
mod tests {
    use super::super::TaskStatus::{self, *};
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn t(status: TaskStatus, deps: &[usize]) -> DispatchTask {
        DispatchTask {
            wave: 1,
            status,
            depends_on: deps.to_vec(),
            writes: Vec::new(),
        }
    }

    #[test]
    fn diamond_abandons_each_dependent_once() {
        // a=0 -> b=1, a -> c=2, b -> d=3, c -> d
        let tasks = [
            t(Failed, &[]),
            t(Pending, &[0]),
            t(Pending, &[0]),
            t(Pending, &[1, 2]),
        ];
        assert_eq!(cascade(0, &tasks), vec![1, 2, 3]);
        assert_eq!(cascade(1, &tasks), vec![3]);
        assert_eq!(cascade(3, &tasks), Vec::<usize>::new());
    }

    #[test]
    fn long_chain_does_not_overflow_the_stack() {
        const N: usize = 100_000;
        let tasks: Vec<_> = (0..N)
            .map(|i| t(Pending, &i.checked_sub(1).into_iter().collect::<Vec<_>>()))
            .collect();
        let got = cascade(0, &tasks);
        assert_eq!(got.len(), N - 1);
        assert!(got.iter().copied().eq(1..N));
    }

    #[test]
    fn cycles_and_self_loops_terminate() {
        // 0 <-> 1 cycle, 2 self-loop depending on 1, 3 depends on 2.
        let tasks = [
            t(Failed, &[1]),
            t(Pending, &[0]),
            t(Pending, &[2, 1, 1]),
            t(Running, &[2]),
            t(Pending, &[3, 3]),
        ];
        assert_eq!(cascade(0, &tasks), vec![1, 2, 3, 4]);
        // The cycle leads back to 0, which is terminal (and 1, the origin, is excluded).
        assert_eq!(cascade(1, &tasks), vec![2, 3, 4]);
        assert_eq!(cascade(2, &tasks), vec![3, 4]);
    }

    #[test]
    fn terminal_dependents_are_left_alone_but_walked_through() {
        let tasks = [
            t(Failed, &[]),
            t(Done, &[0]),      // corrupt but possible: leave it
            t(Abandoned, &[0]), // already abandoned: not reported again
            t(Pending, &[2]),   // blocked through an abandoned task
            t(Failed, &[1]),
        ];
        assert_eq!(cascade(0, &tasks), vec![3]);
    }

    #[test]
    fn out_of_range_indices_are_ignored() {
        let tasks = [t(Failed, &[7, usize::MAX]), t(Pending, &[0, 99])];
        assert_eq!(cascade(0, &tasks), vec![1]);
        assert_eq!(cascade(5, &tasks), Vec::<usize>::new());
        assert_eq!(cascade(usize::MAX, &tasks), Vec::<usize>::new());
        assert_eq!(cascade(0, &[]), Vec::<usize>::new());
    }

    /// Fixed-point reachability: obviously correct, quadratic, fine for tests.
    fn naive(origin: usize, tasks: &[DispatchTask]) -> Vec<usize> {
        let mut reached = BTreeSet::from([origin]);
        loop {
            let before = reached.len();
            for (i, task) in tasks.iter().enumerate() {
                // Out-of-range indices name no task, so they are no edge.
                if task
                    .depends_on
                    .iter()
                    .any(|d| *d < tasks.len() && reached.contains(d))
                {
                    reached.insert(i);
                }
            }
            if reached.len() == before {
                break;
            }
        }
        reached
            .into_iter()
            .filter(|&i| i != origin && i < tasks.len() && !tasks[i].status.is_terminal())
            .collect()
    }

    fn status() -> impl Strategy<Value = TaskStatus> {
        prop::sample::select(TaskStatus::ALL.to_vec())
    }

    /// A DAG: task i only depends on lower indices.
    fn arb_dag() -> impl Strategy<Value = Vec<DispatchTask>> {
        prop::collection::vec(
            (
                status(),
                prop::collection::vec(any::<prop::sample::Index>(), 0..4),
            ),
            1..60,
        )
        .prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (status, picks))| DispatchTask {
                    wave: 1,
                    status,
                    depends_on: if i == 0 {
                        vec![]
                    } else {
                        picks.iter().map(|p| p.index(i)).collect()
                    },
                    writes: Vec::new(),
                })
                .collect()
        })
    }

    /// Anything goes: cycles, self-loops, out-of-range indices.
    fn arb_corrupt() -> impl Strategy<Value = Vec<DispatchTask>> {
        prop::collection::vec((status(), prop::collection::vec(0usize..50, 0..4)), 0..40).prop_map(
            |v| {
                v.into_iter()
                    .map(|(status, depends_on)| DispatchTask {
                        wave: 1,
                        status,
                        depends_on,
                        writes: Vec::new(),
                    })
                    .collect()
            },
        )
    }

    proptest! {
        #[test]
        fn cascade_matches_naive_reachability_on_dags(tasks in arb_dag(), pick in any::<prop::sample::Index>()) {
            let origin = pick.index(tasks.len());
            prop_assert_eq!(cascade(origin, &tasks), naive(origin, &tasks));
        }

        #[test]
        fn cascade_matches_naive_reachability_on_corrupt_data(tasks in arb_corrupt(), origin in 0usize..45) {
            prop_assert_eq!(cascade(origin, &tasks), naive(origin, &tasks));
        }
    }
}
