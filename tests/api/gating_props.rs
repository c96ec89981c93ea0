//! Properties of task-list gating over random lists.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use plangate::domain::gating::{Code, TaskListSource, Validation, validate};
use plangate::domain::natural::natural_cmp;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};

/// A random valid list: each task depends on earlier-generated tasks, sits in wave
/// `1 + max(dependency waves)`, writes files no other task of its wave writes and
/// reads files that exist or were written in an earlier wave. Tasks are listed in a
/// shuffled order; ids mix prefixes and numbers so natural order matters.
#[derive(Debug, Clone)]
struct Plan {
    tasks: Vec<Value>,
    existing_files: Vec<String>,
    /// `(task, dependency)` id pairs.
    edges: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
struct TaskSeed {
    dependencies: Vec<Index>,
    writes: Vec<Index>,
    reads: Vec<Index>,
    reviews_first_dependency: bool,
}

const FILE_POOL: usize = 12;
const EXISTING: usize = 4;

fn task_seed() -> impl Strategy<Value = TaskSeed> {
    (
        prop::collection::vec(any::<Index>(), 0..4),
        prop::collection::vec(any::<Index>(), 0..3),
        prop::collection::vec(any::<Index>(), 0..3),
        any::<bool>(),
    )
        .prop_map(
            |(dependencies, writes, reads, reviews_first_dependency)| TaskSeed {
                dependencies,
                writes,
                reads,
                reviews_first_dependency,
            },
        )
}

fn build_plan(seeds: Vec<TaskSeed>, id_numbers: Vec<usize>, order: Vec<usize>) -> Plan {
    let ids: Vec<String> = id_numbers
        .iter()
        .enumerate()
        .map(|(i, number)| format!("{}-{number}", ["t", "t", "T", "task"][i % 4]))
        .collect();
    let existing_files: Vec<String> = (0..EXISTING).map(|k| format!("./lib/e{k}.py")).collect();
    let mut waves: Vec<i64> = Vec::new();
    let mut used_writes: HashSet<(i64, usize)> = HashSet::new();
    let mut first_write_wave: HashMap<usize, i64> = HashMap::new();
    let mut tasks = Vec::new();
    let mut edges = Vec::new();
    for (i, seed) in seeds.iter().enumerate() {
        let mut dependencies: Vec<usize> = Vec::new();
        if i > 0 {
            for index in &seed.dependencies {
                let dependency = index.index(i);
                if !dependencies.contains(&dependency) {
                    dependencies.push(dependency);
                }
            }
        }
        let wave = 1 + dependencies.iter().map(|&d| waves[d]).max().unwrap_or(0);
        waves.push(wave);
        let writes: Vec<usize> = seed
            .writes
            .iter()
            .map(|index| index.index(FILE_POOL))
            .filter(|&file| used_writes.insert((wave, file)))
            .collect();
        for &file in &writes {
            let earliest = first_write_wave.entry(file).or_insert(wave);
            *earliest = (*earliest).min(wave);
        }
        // Reads: files already written in an earlier wave, else an existing file.
        let reads: Vec<String> = seed
            .reads
            .iter()
            .map(|index| {
                let file = index.index(FILE_POOL);
                match first_write_wave.get(&file) {
                    Some(&written) if written < wave => format!("src/f{file}.py"),
                    _ => format!("lib/e{}.py", file % EXISTING),
                }
            })
            .collect();
        let mut task = json!({
            "task_id": ids[i],
            "assigned_persona": format!("persona-{i}"),
            "parallel_group": wave,
            "depends_on": dependencies.iter().map(|&d| ids[d].clone()).collect::<Vec<_>>(),
            "reads": reads,
            "writes": writes.iter().map(|file| format!("src/f{file}.py")).collect::<Vec<_>>(),
            "description": format!("task {i}"),
        });
        if let (true, Some(&reviewed)) = (seed.reviews_first_dependency, dependencies.first()) {
            task["reviews"] = json!(ids[reviewed]);
        }
        edges.extend(
            dependencies
                .iter()
                .map(|&d| (ids[i].clone(), ids[d].clone())),
        );
        tasks.push(task);
    }
    let tasks = order
        .iter()
        .map(|&position| tasks[position].clone())
        .collect();
    Plan {
        tasks,
        existing_files,
        edges,
    }
}

fn plan() -> impl Strategy<Value = Plan> {
    (1usize..40)
        .prop_flat_map(|n| {
            (
                prop::collection::vec(task_seed(), n),
                Just((0..n * 3).step_by(3).collect::<Vec<usize>>()).prop_shuffle(),
                Just((0..n).collect::<Vec<usize>>()).prop_shuffle(),
            )
        })
        .prop_map(|(seeds, id_numbers, order)| build_plan(seeds, id_numbers, order))
}

fn check(tasks: &[Value], existing: &[String]) -> Validation {
    let list = Value::Array(tasks.to_vec());
    let from_value = validate(TaskListSource::Tasks(&list), existing);
    let from_text = validate(TaskListSource::Json(&list.to_string()), existing);
    assert_eq!(from_value, from_text, "Value and text paths disagree");
    from_value
}

fn add_dependency(tasks: &mut [Value], task_id: &str, dependency: &str) {
    for task in tasks.iter_mut() {
        if task["task_id"] == json!(task_id)
            && let Some(list) = task["depends_on"].as_array_mut()
        {
            list.push(json!(dependency));
        }
    }
}

/// Every reported cycle is a closed walk along `edges` through every task of its
/// component (its `task_ids`), starting at the naturally smallest of them.
fn assert_cycles_are_real(validation: &Validation, edges: &HashSet<(String, String)>) {
    for error in validation.errors.iter().filter(|e| e.code == Code::Cycle) {
        let path = error
            .cycle
            .as_ref()
            .expect("a cycle error carries its path");
        assert!(!path.is_empty());
        for pair in path.windows(2) {
            assert!(
                edges.contains(&(pair[0].clone(), pair[1].clone())),
                "no edge {pair:?}"
            );
        }
        let closing = (path[path.len() - 1].clone(), path[0].clone());
        assert!(edges.contains(&closing), "no closing edge {closing:?}");
        assert_eq!(
            path.iter().collect::<HashSet<_>>(),
            error.task_ids.iter().collect::<HashSet<_>>(),
            "the walk {path:?} does not cover the component"
        );
        for member in &error.task_ids {
            assert_ne!(
                natural_cmp(member, &path[0]),
                Ordering::Less,
                "{member} < {}",
                path[0]
            );
        }
        assert!(path.iter().all(|id| error.task_ids.contains(id)));
    }
}

/// Tasks `t-0..t-n` in one wave with the given `(task, dependency)` index pairs.
fn graph_tasks(n: usize, edges: &[(usize, usize)]) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let depends_on: Vec<String> = edges
                .iter()
                .filter(|(task, _)| *task == i)
                .map(|(_, dependency)| format!("t-{dependency}"))
                .collect();
            json!({"task_id": format!("t-{i}"), "assigned_persona": "p", "parallel_group": 1,
                   "depends_on": depends_on, "description": "d"})
        })
        .collect()
}

/// Nodes on some cycle, by plain reachability: `v` is when `v` reaches itself.
fn nodes_on_cycles(n: usize, edges: &[(usize, usize)]) -> HashSet<String> {
    (0..n)
        .filter(|&start| {
            let mut seen = vec![false; n];
            let mut stack: Vec<usize> = edges
                .iter()
                .filter(|(from, _)| *from == start)
                .map(|&(_, to)| to)
                .collect();
            while let Some(node) = stack.pop() {
                if node == start {
                    return true;
                }
                if !std::mem::replace(&mut seen[node], true) {
                    stack.extend(
                        edges
                            .iter()
                            .filter(|(from, _)| *from == node)
                            .map(|&(_, to)| to),
                    );
                }
            }
            false
        })
        .map(|i| format!("t-{i}"))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random graphs: the reported cycles cover exactly the tasks that lie on some
    /// cycle, each as a closed walk along real edges through its whole component.
    #[test]
    fn cycle_reports_cover_every_task_on_a_cycle(
        n in 1usize..12,
        raw_edges in prop::collection::vec((any::<Index>(), any::<Index>()), 0..30),
    ) {
        let mut edges: Vec<(usize, usize)> = raw_edges.iter().map(|(a, b)| (a.index(n), b.index(n))).collect();
        edges.sort_unstable();
        edges.dedup();
        let validation = check(&graph_tasks(n, &edges), &[]);
        let named: HashSet<(String, String)> =
            edges.iter().map(|(a, b)| (format!("t-{a}"), format!("t-{b}"))).collect();
        assert_cycles_are_real(&validation, &named);
        let reported: HashSet<String> = validation
            .errors
            .iter()
            .filter(|e| e.code == Code::Cycle)
            .flat_map(|e| e.cycle.clone().unwrap_or_default())
            .collect();
        prop_assert_eq!(reported, nodes_on_cycles(n, &edges));
    }

    #[test]
    fn consistent_lists_always_pass(plan in plan()) {
        let validation = check(&plan.tasks, &plan.existing_files);
        prop_assert!(validation.is_valid(), "{:#?}", validation.errors);
        prop_assert!(validation.errors.is_empty());
        prop_assert_eq!(validation.tasks.len(), plan.tasks.len());
        let listed: usize = validation.waves.iter().map(Vec::len).sum();
        prop_assert_eq!(listed, plan.tasks.len());
    }

    #[test]
    fn a_back_edge_always_yields_a_real_cycle(plan in plan(), pick in any::<Index>(), self_loop in any::<bool>()) {
        prop_assume!(!plan.edges.is_empty());
        let (task, dependency) = plan.edges[pick.index(plan.edges.len())].clone();
        // `task` depends on `dependency`; making `dependency` (or `task` itself)
        // depend on `task` closes a cycle.
        let (from, to) = if self_loop { (task.clone(), task.clone()) } else { (dependency.clone(), task.clone()) };
        let mut tasks = plan.tasks.clone();
        add_dependency(&mut tasks, &from, &to);
        let mut edges: HashSet<(String, String)> = plan.edges.iter().cloned().collect();
        edges.insert((from.clone(), to.clone()));

        let validation = check(&tasks, &plan.existing_files);
        prop_assert!(!validation.is_valid());
        let cycles: Vec<_> = validation.errors.iter().filter(|e| e.code == Code::Cycle).collect();
        prop_assert_eq!(cycles.len(), 1, "{:#?}", validation.errors);
        // The rest of the list was valid, so the cycle is the only error.
        prop_assert_eq!(validation.errors.len(), 1, "{:#?}", validation.errors);
        prop_assert!(cycles[0].task_ids.contains(&from) && cycles[0].task_ids.contains(&to));
        assert_cycles_are_real(&validation, &edges);
        // Edges inside the cycle are explained by it, never also as wave_order.
        for error in validation.errors.iter().filter(|e| e.code == Code::WaveOrder) {
            prop_assert!(!(cycles[0].task_ids.contains(&error.task_ids[0]) && cycles[0].task_ids.contains(&error.task_ids[1])));
        }
    }

    #[test]
    fn several_back_edges_give_real_cycles(plan in plan(), picks in prop::collection::vec(any::<Index>(), 1..5)) {
        prop_assume!(!plan.edges.is_empty());
        let mut tasks = plan.tasks.clone();
        let mut edges: HashSet<(String, String)> = plan.edges.iter().cloned().collect();
        for pick in picks {
            let (task, dependency) = plan.edges[pick.index(plan.edges.len())].clone();
            add_dependency(&mut tasks, &dependency, &task);
            edges.insert((dependency, task));
        }
        let validation = check(&tasks, &plan.existing_files);
        prop_assert!(validation.errors.iter().any(|e| e.code == Code::Cycle));
        assert_cycles_are_real(&validation, &edges);
    }

    #[test]
    fn arbitrary_json_never_panics(value in arbitrary_json()) {
        let validation = check(std::slice::from_ref(&value), &[]);
        prop_assert_eq!(validation.is_valid(), validation.errors.is_empty());
        for error in &validation.errors {
            prop_assert!(!error.message.contains('\n'));
        }
        let as_list = validate(TaskListSource::Tasks(&value), &[]);
        prop_assert_eq!(as_list.is_valid(), as_list.errors.is_empty());
    }

    #[test]
    fn arbitrary_planner_text_never_panics(text in "(```(json|python|)?\n|~~~\n|\\[|\\]|\\{|\\}|\"task_id\"|:|,|1|x|\r?\n| ){0,60}") {
        let validation = validate(TaskListSource::PlannerOutput(&text), &[]);
        prop_assert_eq!(validation.is_valid(), validation.errors.is_empty());
    }
}

/// Task-like objects with fields of random JSON types.
fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        // Quarter steps survive a text round trip exactly (serde_json's default float
        // parsing is best-effort beyond that, which would make the paths differ).
        (-4000i32..4000).prop_map(|quarters| Value::from(f64::from(quarters) / 4.0)),
        "[a-c0-9\\-\\x00 ]{0,6}".prop_map(Value::String),
    ];
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z_]{1,8}", inner), 0..4)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    });
    let mut fields = crate::common::TASK_FIELDS.to_vec();
    fields.push("extra");
    let field_names = prop::sample::select(fields);
    prop::collection::vec((field_names, value), 0..9).prop_map(|entries| {
        Value::Object(
            entries
                .into_iter()
                .map(|(name, value)| (name.to_owned(), value))
                .collect(),
        )
    })
}
