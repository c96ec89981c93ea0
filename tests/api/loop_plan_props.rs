//! Properties of loop plans over random DAGs: plan.md round trips, level rule,
//! group rules, marker progress.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use plangate::domain::loop_plan::{
    CompletedTrack, LoopPlan, LoopPlanRequest, PhaseInfo, ProgressStatus, TrackInfo,
    parse_markdown, plan, render_markdown,
};
use plangate::domain::natural::natural_cmp;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};

const FILE_POOL: usize = 8;

#[derive(Debug, Clone)]
struct TaskSeed {
    id: String,
    name: String,
    description: String,
    acceptance: Option<String>,
    duration: Option<&'static str>,
    dependencies: Vec<Index>,
    files: Vec<usize>,
    phase: u32,
}

/// Ids: mostly `P.K` (natural order matters), sometimes any text without control
/// characters (quotes, colons, backticks, `: `, unicode, leading spaces…).
fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (1u32..4, 1u32..30).prop_map(|(p, k)| format!("{p}.{k}")),
        1 => "[^\\p{Cc}]{1,12}",
    ]
}

fn task_seed() -> impl Strategy<Value = TaskSeed> {
    (
        id(),
        any::<String>(),
        any::<String>(),
        proptest::option::of(any::<String>()),
        proptest::option::of(prop::sample::select(vec![
            "30m", "1.5h", "2 hours", "45 min",
        ])),
        prop::collection::vec(any::<Index>(), 0..4),
        prop::collection::vec(0..FILE_POOL, 0..3),
        1u32..4,
    )
        .prop_map(
            |(id, name, description, acceptance, duration, dependencies, files, phase)| TaskSeed {
                id,
                name,
                description,
                acceptance,
                duration,
                dependencies,
                files,
                phase,
            },
        )
}

fn file(slot: usize) -> String {
    [
        "src/a.py",
        "src/b.tsx",
        "tests/test_a.py",
        "docs/a.md",
        "api/x.go",
        ".env",
        "c.json",
        "d/e f.rs",
    ][slot]
        .to_owned()
}

/// A valid request: task `i` depends only on tasks generated before it (so no
/// cycles), ids made unique, tasks listed in a shuffled order.
fn request() -> impl Strategy<Value = LoopPlanRequest> {
    (
        prop::collection::vec(task_seed(), 1..30),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(mut seeds, with_tracks, shuffle)| {
            let mut seen = HashSet::new();
            for (position, seed) in seeds.iter_mut().enumerate() {
                if !seen.insert(seed.id.clone()) {
                    seed.id = format!("{}#{position}", seed.id);
                    seen.insert(seed.id.clone());
                }
            }
            let mut tasks: Vec<Value> = seeds
                .iter()
                .enumerate()
                .map(|(position, seed)| {
                    let mut depends_on: Vec<String> = Vec::new();
                    if position > 0 {
                        for index in &seed.dependencies {
                            depends_on.push(seeds[index.index(position)].id.clone());
                        }
                    }
                    let files: Vec<String> = seed.files.iter().map(|&slot| file(slot)).collect();
                    let mut task = json!({
                        "id": seed.id, "name": seed.name, "description": seed.description,
                        "files": files, "depends_on": depends_on, "phase": seed.phase,
                    });
                    if let Some(acceptance) = &seed.acceptance {
                        task["acceptance"] = json!(acceptance);
                    }
                    if let Some(duration) = seed.duration {
                        task["estimated_duration"] = json!(duration);
                    }
                    task
                })
                .collect();
            // Deterministic shuffle from the seed (Fisher–Yates on a xorshift).
            let mut state = shuffle | 1;
            for i in (1..tasks.len()).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                tasks.swap(i, (state % (i as u64 + 1)) as usize);
            }
            LoopPlanRequest {
                track: TrackInfo {
                    id: "prop_1".into(),
                    name: "Property \"track\"\n".into(),
                    spec: "random".into(),
                    dependencies: vec!["dep_1".into()],
                },
                phases: (1..4)
                    .map(|number| PhaseInfo {
                        number,
                        name: format!("Phase #{number}"),
                    })
                    .collect(),
                tasks,
                completed_tracks: with_tracks.then(|| {
                    vec![CompletedTrack {
                        id: "done_1".into(),
                        name: None,
                        deliverables: vec![file(0), file(7)],
                    }]
                }),
                tracks_md: None,
            }
        })
}

fn valid_plan(request: &LoopPlanRequest) -> LoopPlan {
    let plan = plan(request);
    assert!(plan.is_valid(), "{:?}", plan.errors);
    plan
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn markdown_round_trip_keeps_the_dag(request in request()) {
        let plan = valid_plan(&request);
        let markdown = render_markdown(&plan);
        let parsed = parse_markdown(&markdown).map_err(|e| TestCaseError::fail(format!("{e}\n{markdown}")))?;
        prop_assert_eq!(&parsed.dag, &plan.dag);
        prop_assert_eq!(parsed.progress.counts.total, plan.dag.nodes.len());
        prop_assert_eq!(parsed.progress.counts.pending, plan.dag.nodes.len());
        prop_assert_eq!(parsed.progress.counts.skipped, plan.summary.skipped_tasks);
        prop_assert!(parsed.progress.tasks.iter().all(|t| t.line.is_some()));
        prop_assert!(parsed.progress.discovered_work.is_empty());
        // And again: rendering is a function of the DAG-bearing plan.
        prop_assert_eq!(render_markdown(&plan), markdown);
    }

    #[test]
    fn levels_and_groups_follow_the_rules(request in request()) {
        let plan = valid_plan(&request);
        let level_of: HashMap<&str, u32> = plan
            .dag
            .nodes
            .iter()
            .map(|n| (n.id.as_str(), n.level.unwrap_or(0)))
            .collect();
        for node in &plan.dag.nodes {
            let expected = 1 + node
                .depends_on
                .iter()
                .map(|d| level_of[d.as_str()])
                .max()
                .unwrap_or(0);
            prop_assert_eq!(node.level, Some(expected), "node {:?}", node.id);
        }
        let max_level = level_of.values().copied().max().unwrap_or(0) as usize;
        prop_assert_eq!(plan.dag.parallel_groups.len(), max_level);
        let files_of: HashMap<&str, &Vec<String>> =
            plan.dag.nodes.iter().map(|n| (n.id.as_str(), &n.files)).collect();
        for (position, group) in plan.dag.parallel_groups.iter().enumerate() {
            let level = position as u32 + 1;
            prop_assert_eq!(&group.id, &format!("pg-{level}"));
            prop_assert!(!group.tasks.is_empty());
            prop_assert!(group.tasks.windows(2).all(|w| natural_cmp(&w[0], &w[1]) == Ordering::Less));
            prop_assert!(group.tasks.iter().all(|t| level_of[t.as_str()] == level));
            let mut counts: HashMap<&str, usize> = HashMap::new();
            for task in &group.tasks {
                for file in files_of[task.as_str()] {
                    *counts.entry(file.as_str()).or_default() += 1;
                }
            }
            let mut shared: Vec<String> = counts
                .iter()
                .filter(|&(_, &n)| n > 1)
                .map(|(f, _)| (*f).to_owned())
                .collect();
            shared.sort_by(|a, b| natural_cmp(a, b));
            prop_assert_eq!(group.conflict_free, shared.is_empty());
            prop_assert_eq!(group.shared_resources.clone(), (!shared.is_empty()).then_some(shared));
            prop_assert_eq!(group.coordination_strategy.is_some(), !group.conflict_free);
        }
        let total: usize = plan.dag.parallel_groups.iter().map(|g| g.tasks.len()).sum();
        prop_assert_eq!(total, plan.dag.nodes.len());
    }

    #[test]
    fn markers_read_back_as_progress(request in request(), statuses in prop::collection::vec(0usize..4, 30)) {
        let plan = valid_plan(&request);
        let markdown = render_markdown(&plan);
        // Task lines appear per phase (by number), DAG order within a phase.
        let mut order: Vec<usize> = Vec::new();
        for phase in &plan.phases {
            order.extend(
                plan.dag.nodes.iter().enumerate().filter(|(_, n)| n.phase == phase.number).map(|(i, _)| i),
            );
        }
        let all = [ProgressStatus::Pending, ProgressStatus::InProgress, ProgressStatus::Done, ProgressStatus::Blocked];
        let mut expected = vec![ProgressStatus::Pending; plan.dag.nodes.len()];
        let mut next = 0;
        let mut edited = String::new();
        for line in markdown.lines() {
            if let Some(rest) = line.strip_prefix("- [ ] Task ") {
                let status = all[statuses[next % statuses.len()]];
                expected[order[next]] = status;
                next += 1;
                edited.push_str(&format!("- [{}] Task {rest}\n", status.marker()));
            } else {
                edited.push_str(line);
                edited.push('\n');
            }
        }
        prop_assert_eq!(next, plan.dag.nodes.len());
        let parsed = parse_markdown(&edited).map_err(|e| TestCaseError::fail(format!("{e}")))?;
        let got: Vec<ProgressStatus> = parsed.progress.tasks.iter().map(|t| t.status).collect();
        prop_assert_eq!(got, expected);
        prop_assert_eq!(parsed.dag, plan.dag);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Readers never panic, whatever the text.
    #[test]
    fn readers_never_panic(text in any::<String>(), tail in "(- \\[.\\] Task .{0,8}|```(yaml)?|dag:|\\|.{0,6}\\||[ :#-]){0,12}") {
        let joined = format!("{text}\n{}", tail.replace("  ", "\n"));
        let _ = parse_markdown(&joined);
        let _ = plangate::domain::loop_plan::parse_tracks_md(&joined);
        let _ = plangate::domain::loop_plan::normalize_duration(&text);
        let _ = plangate::domain::loop_plan::parse_request_yaml(&joined);
        let _ = plangate::domain::loop_plan::parse_request_json(&joined);
    }

    /// Canonical durations read back as themselves.
    #[test]
    fn durations_round_trip(minutes in 0u32..600_000) {
        let text = plangate::domain::loop_plan::format_duration(minutes);
        prop_assert_eq!(plangate::domain::loop_plan::normalize_duration(&text), Some(text));
    }

    /// `plan` never panics on arbitrary task values and stays deterministic.
    #[test]
    fn plan_never_panics(tasks in prop::collection::vec(arbitrary_task(), 0..12)) {
        let request = LoopPlanRequest {
            track: TrackInfo { id: "t".into(), name: "T".into(), spec: String::new(), dependencies: vec![] },
            phases: vec![PhaseInfo { number: 1, name: "P".into() }],
            tasks,
            completed_tracks: None,
            tracks_md: None,
        };
        let first = plan(&request);
        prop_assert_eq!(&first, &plan(&request));
        prop_assert!(first.errors.iter().all(|e| !e.message.contains('\n')));
        let markdown = render_markdown(&first);
        if first.dag.nodes.iter().all(|n| n.phase >= 1) {
            let parsed = parse_markdown(&markdown).map_err(|e| TestCaseError::fail(format!("{e}")))?;
            prop_assert_eq!(parsed.dag, first.dag);
        }
    }
}

fn arbitrary_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-c0-9.\\n]{0,4}".prop_map(Value::from),
        prop::collection::vec("[a-c0-9.]{0,3}".prop_map(Value::from), 0..4).prop_map(Value::Array),
    ]
}

fn arbitrary_task() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        prop::sample::select(vec![
            "id",
            "name",
            "phase",
            "files",
            "depends_on",
            "description",
            "acceptance",
            "estimated_duration",
            "type",
        ]),
        arbitrary_value(),
        0..9,
    )
    .prop_map(|fields| Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
}
