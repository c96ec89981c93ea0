use serde_json::{Value, json};

use super::*;
use crate::domain::{assert_contains, assert_schemas_build};

fn example_request() -> LoopPlanRequest {
    parse_request_json(include_str!("../../../examples/loop_plan_request.json")).unwrap()
}

fn request(tasks: Value) -> LoopPlanRequest {
    LoopPlanRequest {
        track: TrackInfo {
            id: "t_1".into(),
            name: "Track".into(),
            spec: "spec".into(),
            dependencies: vec![],
        },
        phases: vec![
            PhaseInfo {
                number: 1,
                name: "One".into(),
            },
            PhaseInfo {
                number: 2,
                name: "Two".into(),
            },
        ],
        tasks: tasks.as_array().cloned().unwrap_or_default(),
        completed_tracks: None,
        tracks_md: None,
    }
}

fn task(id: &str, depends_on: &[&str], files: &[&str]) -> Value {
    json!({"id": id, "name": format!("Task {id}"), "phase": 1, "depends_on": depends_on, "files": files})
}

/// `f` of each item, in order: what a test compares with a literal list.
fn each<'a, T, U>(items: &'a [T], f: impl FnMut(&'a T) -> U) -> Vec<U> {
    items.iter().map(f).collect()
}

fn group_tasks(plan: &LoopPlan) -> Vec<Vec<&str>> {
    each(&plan.dag.parallel_groups, |g| {
        each(&g.tasks, String::as_str)
    })
}

fn codes(plan: &LoopPlan) -> Vec<&'static str> {
    each(&plan.errors, |e| e.code.as_str())
}

#[test]
fn example_request_end_to_end() {
    let plan = plan(&example_request());
    assert!(plan.is_valid(), "{:?}", plan.errors);
    assert_eq!(
        group_tasks(&plan),
        vec![vec!["1.1", "1.2"], vec!["1.3", "1.10"], vec!["2.1", "2.2"]]
    );
    let ids = each(&plan.dag.parallel_groups, |g| g.id.as_str());
    assert_eq!(ids, ["pg-1", "pg-2", "pg-3"]);
    // `src/auth/cache.py` (1.1, 1.3) and `src/http/client.py` (1.3, 2.2) are shared
    // across levels only, so every group is conflict-free.
    assert!(plan.dag.parallel_groups.iter().all(|g| g.conflict_free
        && g.shared_resources.is_none()
        && g.coordination_strategy.is_none()));
    assert_eq!(plan.execution_mode, ExecutionMode::Parallel);

    let by_id = |id: &str| plan.dag.nodes.iter().find(|n| n.id == id).unwrap();
    let kinds = each(&plan.dag.nodes, |n| {
        let duration = n.estimated_duration.as_str();
        (n.id.as_str(), n.r#type, duration, n.level)
    });
    assert_eq!(
        kinds,
        vec![
            ("1.1", TaskType::Code, "30m", Some(1)),
            ("1.2", TaskType::Code, "30m", Some(1)),
            ("1.3", TaskType::Code, "45m", Some(2)),
            ("1.10", TaskType::Test, "30m", Some(2)),
            ("2.1", TaskType::Docs, "15m", Some(3)),
            ("2.2", TaskType::Integration, "1h30m", Some(3)),
        ]
    );
    assert_eq!(
        by_id("1.1").acceptance.as_deref(),
        Some("cache hit avoids a token request")
    );
    assert_eq!(
        plan.summary,
        Summary {
            total_tasks: 6,
            phases: 2,
            parallel_groups: 3,
            max_concurrency: 2,
            conflict_free_groups: 3,
            coordinated_groups: 0,
            dependencies: vec!["tenancy_20261120".into()],
            skipped_tasks: 0,
        }
    );
    assert!(plan.overlap.is_empty());
    assert_eq!(plan.checked_tracks, ["tenancy_20261120"]);

    // The JSON answer has the contract's keys.
    let body = serde_json::to_value(&plan).unwrap();
    for key in ["dag", "execution_mode", "summary", "overlap", "errors"] {
        assert!(body.get(key).is_some(), "{key}");
    }
    assert_eq!(body["execution_mode"], "PARALLEL");
    assert_eq!(body["dag"]["nodes"][3]["type"], "test");
    assert!(
        body["dag"]["parallel_groups"][0]
            .get("shared_resources")
            .is_none()
    );

    // plan.md has the spec's parts, and reads back to the same DAG.
    let markdown = render_markdown(&plan);
    for part in [
        "# Per-tenant token cache — Execution Plan\n",
        "## Context\n",
        "- **Track**: auth-cache_20261130\n",
        "- **Spec**: Cache tokens per tenant and retry idempotent calls\n",
        "- **Dependencies**: tenancy_20261120\n",
        "- **Overlap Check**: checked tenancy_20261120; no overlap\n",
        "- **Execution Mode**: PARALLEL\n",
        "## Dependency Graph\n",
        "```yaml\ndag:\n  nodes:\n    - id: \"1.1\"\n      name: \"Token cache\"\n      type: \"code\"\n      files: [\"src/auth/cache.py\"]\n      depends_on: []\n      estimated_duration: \"30m\"\n      phase: 1\n",
        "    - id: \"pg-2\"\n      tasks: [\"1.3\", \"1.10\"]\n      conflict_free: true\n",
        "```mermaid\nflowchart TD\n",
        "  t0 --> t2\n",
        "### Phase 1: Core\n",
        "- [ ] Task 1.1: Token cache\n  - Type: code\n  - Acceptance: cache hit avoids a token request\n  - Files: `src/auth/cache.py`\n",
        "### Phase 2: Polish\n",
        "## Discovered Work\n",
    ] {
        assert!(markdown.contains(part), "missing {part:?} in\n{markdown}");
    }
    let parsed = parse_markdown(&markdown).unwrap();
    assert_eq!(parsed.dag, plan.dag);
    assert_eq!(parsed.progress.counts.pending, 6);
    assert!(parsed.progress.discovered_work.is_empty());
}

#[test]
fn single_task_levels_get_a_group_and_sequential_mode() {
    let plan = plan(&request(json!([
        task("a", &[], &[]),
        task("b", &["a"], &[]),
        task("c", &["b"], &[]),
    ])));
    assert!(plan.is_valid());
    assert_eq!(group_tasks(&plan), vec![vec!["a"], vec!["b"], vec!["c"]]);
    assert!(plan.dag.parallel_groups.iter().all(|g| g.conflict_free));
    assert_eq!(plan.execution_mode, ExecutionMode::Sequential);
    assert_eq!(plan.summary.max_concurrency, 1);
    assert_eq!(plan.summary.conflict_free_groups, 3);
}

#[test]
fn shared_files_in_a_level_make_a_coordinated_group() {
    let plan = plan(&request(json!([
        task("1.2", &[], &["src/b.py", "./src/a.py", "src/z.py"]),
        task("1.1", &[], &["src/a.py", "src/b.py", "src/a.py"]),
        task("1.3", &[], &["src/c.py"]),
        task("1.4", &["1.1"], &["src/a.py"]),
        task("1.5", &["1.1"], &["src/z.py"]),
    ])));
    assert!(plan.is_valid());
    let first = &plan.dag.parallel_groups[0];
    assert_eq!(first.tasks, ["1.1", "1.2", "1.3"]);
    assert!(!first.conflict_free);
    assert_eq!(
        first.shared_resources.as_deref(),
        Some(&["src/a.py".to_owned(), "src/b.py".to_owned()][..])
    );
    assert_eq!(first.coordination_strategy.as_deref(), Some("file_lock"));
    // Files are listed once, without `./`.
    assert_eq!(plan.dag.nodes[1].files, ["src/a.py", "src/b.py"]);
    assert_eq!(
        plan.dag.nodes[0].files,
        ["src/b.py", "src/a.py", "src/z.py"]
    );
    // 1.4 and 1.5 touch files of level 1 tasks, but not each other's.
    assert!(plan.dag.parallel_groups[1].conflict_free);
    assert_eq!(plan.summary.coordinated_groups, 1);
    assert_eq!(plan.summary.conflict_free_groups, 1);
    let json = serde_json::to_value(&plan.dag.parallel_groups[0]).unwrap();
    assert_eq!(json["coordination_strategy"], "file_lock");
}

#[test]
fn natural_order_within_a_level() {
    let plan = plan(&request(json!([
        task("1.10", &[], &[]),
        task("1.2", &[], &[]),
        task("1.1", &[], &[]),
        task("10.1", &[], &[]),
        task("2.1", &[], &[]),
    ])));
    assert_eq!(
        group_tasks(&plan),
        vec![vec!["1.1", "1.2", "1.10", "2.1", "10.1"]]
    );
    // Nodes keep input order.
    assert_eq!(plan.dag.nodes[0].id, "1.10");
}

#[test]
fn levels_are_longest_paths() {
    // d depends on a directly and through b -> c: level 4, not 2.
    let plan = plan(&request(json!([
        task("a", &[], &[]),
        task("b", &["a"], &[]),
        task("c", &["b"], &[]),
        task("d", &["a", "c"], &[]),
        task("e", &[], &[]),
    ])));
    let levels = each(&plan.dag.nodes, |n| n.level);
    assert_eq!(levels, [Some(1), Some(2), Some(3), Some(4), Some(1)]);
    assert_eq!(group_tasks(&plan)[0], ["a", "e"]);
}

#[test]
fn overlap_by_file_and_by_name() {
    let mut req = request(json!([
        task("1.1", &[], &["src/tenancy/model.py"]),
        {"id": "1.2", "name": "Audit LOG", "phase": 1, "files": ["src/new.py"]},
        task("1.3", &["1.1"], &["src/other.py"]),
        {"id": "1.4", "name": "Rate limits", "phase": 1, "files": ["src/rate.py"]},
    ]));
    req.completed_tracks = Some(vec![CompletedTrack {
        id: "tenancy_20261120".into(),
        name: Some("Tenancy".into()),
        deliverables: vec!["src/tenancy/model.py".into(), "audit log".into()],
    }]);
    req.tracks_md = Some(
        "| Track | Status | Deliverables |\n|---|---|---|\n| limits_1 | done | Rate limits, src/rate.py |\n| wip_2 | in progress | src/other.py |\n"
            .into(),
    );
    let plan = plan(&req);
    assert!(plan.is_valid(), "{:?}", plan.errors);
    let overlap = each(&plan.overlap, |o| {
        let (task, track) = (o.task_id.as_str(), o.track_id.as_str());
        (task, track, o.reason.as_str(), o.matched.as_str())
    });
    assert_eq!(
        overlap,
        vec![
            (
                "1.1",
                "tenancy_20261120",
                "SKIP — already done in tenancy_20261120",
                "src/tenancy/model.py"
            ),
            (
                "1.2",
                "tenancy_20261120",
                "SKIP — already done in tenancy_20261120",
                "Audit LOG"
            ),
            (
                "1.4",
                "limits_1",
                "SKIP — already done in limits_1",
                "src/rate.py"
            ),
        ]
    );
    // Skipped tasks stay in the plan and their group, marked.
    assert_eq!(plan.dag.nodes.len(), 4);
    assert_eq!(
        plan.dag.nodes[0].skip.as_deref(),
        Some("SKIP — already done in tenancy_20261120")
    );
    assert_eq!(plan.dag.nodes[2].skip, None);
    assert_eq!(group_tasks(&plan)[0], ["1.1", "1.2", "1.4"]);
    assert_eq!(plan.summary.skipped_tasks, 3);
    assert_eq!(plan.checked_tracks, ["tenancy_20261120", "limits_1"]);
    let markdown = render_markdown(&plan);
    assert!(markdown.contains("  - Overlap: SKIP — already done in tenancy_20261120\n"));
    assert!(markdown.contains(
        "- **Overlap Check**: checked tenancy_20261120, limits_1; 3 overlap(s): 1.1 (SKIP — already done in tenancy_20261120)"
    ));
    assert!(markdown.contains("class t0,t1,t3 skip"));
    let parsed = parse_markdown(&markdown).unwrap();
    assert_eq!(parsed.dag, plan.dag);
    assert_eq!(parsed.progress.counts.skipped, 3);
}

#[test]
fn unreadable_tracks_md_is_an_error() {
    let mut req = request(json!([task("1.1", &[], &[])]));
    req.tracks_md = Some("just prose".into());
    let plan = plan(&req);
    assert_eq!(codes(&plan), ["invalid_field"]);
    assert_eq!(plan.errors[0].field.as_deref(), Some("tracks_md"));
}

#[test]
fn durations_given_are_normalized_and_bad_ones_reported() {
    let plan = plan(&request(json!([
        {"id": "a", "name": "A", "phase": 1, "estimated_duration": "90m"},
        {"id": "b", "name": "B", "phase": 1, "estimated_duration": "1.5h"},
        {"id": "c", "name": "C", "phase": 1, "estimated_duration": "2 hours"},
        {"id": "d", "name": "D", "phase": 1, "estimated_duration": "soon"},
        {"id": "e", "name": "E", "phase": 1, "estimated_duration": 30},
    ])));
    let durations = each(&plan.dag.nodes, |n| n.estimated_duration.as_str());
    assert_eq!(durations, ["1h30m", "1h30m", "2h", "30m", "30m"]);
    assert_eq!(codes(&plan), ["invalid_field", "invalid_field"]);
    assert_eq!(
        plan.errors[0].message,
        "TaskShapeError: task 'd' (index 3) has an invalid 'estimated_duration': expected a \
         duration such as \"30m\", \"1h\", \"1h30m\" or \"1.5h\", got string 'soon'"
    );
    assert_eq!(plan.errors[1].index, Some(4));
}

#[test]
fn explicit_type_overrides_detection() {
    let plan = plan(&request(json!([
        {"id": "a", "name": "A", "phase": 1, "files": ["docs/a.md"], "type": "config"},
        {"id": "b", "name": "B", "phase": 1, "type": "chore"},
    ])));
    assert_eq!(plan.dag.nodes[0].r#type, TaskType::Config);
    assert_eq!(plan.dag.nodes[0].estimated_duration, "15m");
    assert_eq!(codes(&plan), ["invalid_field"]);
    assert_eq!(plan.errors[0].field.as_deref(), Some("type"));
}

#[test]
fn a_cycle_with_a_chord_is_reported_whole() {
    // a -> b -> c -> a along depends_on, plus the chord a -> c.
    let plan = plan(&request(json!([
        task("a", &["b", "c"], &[]),
        task("b", &["c"], &[]),
        task("c", &["a"], &[]),
    ])));
    assert_eq!(codes(&plan), ["cycle"]);
    assert_eq!(
        plan.errors[0].cycle.as_deref(),
        Some(&["a".to_owned(), "b".to_owned(), "c".to_owned()][..])
    );
    assert!(plan.errors[0].message.contains("a -> b -> c -> a"));
}

#[test]
fn cycle_errors_carry_the_path_along_depends_on() {
    let plan = plan(&request(json!([
        task("1.3", &["1.10"], &[]),
        task("1.10", &["1.2"], &[]),
        task("1.2", &["1.3"], &[]),
        task("x", &["x"], &[]),
        task("y", &["1.2"], &[]),
    ])));
    assert_eq!(codes(&plan), ["cycle", "cycle"]);
    let cycle = &plan.errors[0];
    assert_eq!(
        cycle.cycle.as_deref(),
        Some(&["1.2".to_owned(), "1.3".to_owned(), "1.10".to_owned()][..])
    );
    assert_eq!(
        cycle.message,
        "CycleError: dependency graph contains a cycle: 1.2 -> 1.3 -> 1.10 -> 1.2 (each task \
         depends_on the next); remove depends_on entries until no task depends on itself"
    );
    assert_eq!(cycle.task_ids, ["1.3", "1.10", "1.2"]);
    assert_eq!(plan.errors[1].cycle.as_deref(), Some(&["x".to_owned()][..]));
    assert!(plan.errors[1].message.contains("x -> x"));
    // No levels or groups without a topological order, but nodes are still there.
    assert!(plan.dag.parallel_groups.is_empty());
    assert!(plan.dag.nodes.iter().all(|n| n.level.is_none()));
    assert_eq!(plan.dag.nodes.len(), 5);
}

#[test]
fn orphans_duplicates_and_shape_errors_in_gate_order() {
    let plan = plan(&request(json!([
        task("a", &["ghost", "ghost"], &[]),
        {"name": "no id", "phase": 1},
        task("a", &[], &[]),
        {"id": "b", "phase": 3, "files": "src/x.py"},
        {"id": 1.1, "name": "number id", "phase": 1},
        "not an object",
        {"id": "c", "name": "C", "phase": 0, "depends_on": ["a", 2]},
    ])));
    let summary = each(&plan.errors, |e| {
        (e.code.as_str(), e.index, e.field.as_deref())
    });
    assert_eq!(
        summary,
        vec![
            ("missing_field", Some(1), Some("id")),
            ("duplicate_task_id", Some(2), Some("id")),
            ("missing_field", Some(3), Some("name")),
            ("invalid_field", Some(3), Some("files")),
            ("invalid_field", Some(4), Some("id")),
            ("invalid_field", Some(5), None),
            ("invalid_field", Some(6), Some("depends_on")),
            ("invalid_field", Some(6), Some("phase")),
            ("invalid_field", Some(3), Some("phase")),
            ("orphan_dependency", Some(0), Some("depends_on")),
        ]
    );
    let messages = each(&plan.errors, |e| e.message.as_str());
    assert_eq!(
        messages[0],
        "TaskShapeError: task at index 1 is missing required field 'id'; add it as a non-empty \
         string of at most 256 bytes without control characters, such as \"1.1\""
    );
    assert_eq!(
        messages[1],
        "TaskShapeError: task id 'a' is used by the tasks at index 0 and index 2; task ids must \
         be unique — rename one of them"
    );
    assert_contains(messages[4], "got number 1.1 (quote ids in YAML");
    assert_eq!(
        messages[8],
        "TaskShapeError: task 'b' (index 3) has an invalid 'phase': phase 3 is not in phases \
         (listed: 1, 2); add it to phases or fix the task"
    );
    assert_eq!(
        messages[9],
        "OrphanDepsError: task 'a' depends_on 'ghost' which is not in the task list; remove it \
         from depends_on or add the missing task"
    );
    assert_eq!(plan.errors[9].task_ids, ["a", "ghost"]);
    // Every message is one line.
    assert!(messages.iter().all(|m| !m.contains('\n')));
    assert!(!plan.is_valid());
}

#[test]
fn duplicate_phase_numbers_are_invalid() {
    let mut req = request(json!([task("a", &[], &[])]));
    req.phases.push(PhaseInfo {
        number: 1,
        name: "Again".into(),
    });
    let plan = plan(&req);
    assert_eq!(codes(&plan), ["invalid_field"]);
    assert_eq!(plan.errors[0].field.as_deref(), Some("phases"));
}

#[test]
fn empty_task_list_is_a_valid_empty_plan() {
    let plan = plan(&request(json!([])));
    assert!(plan.is_valid());
    assert_eq!(plan.execution_mode, ExecutionMode::Sequential);
    let markdown = render_markdown(&plan);
    assert!(markdown.contains("  nodes: []\n  parallel_groups: []\n"));
    assert_eq!(parse_markdown(&markdown).unwrap().dag, plan.dag);
}

#[test]
fn plan_is_deterministic() {
    let req = generate::generate_request(2_000, 9);
    assert_eq!(plan(&req), plan(&req));
    assert_eq!(render_markdown(&plan(&req)), render_markdown(&plan(&req)));
}

#[test]
fn long_chain_needs_no_recursion() {
    let n = 100_000;
    let tasks: Vec<Value> = (0..n)
        .map(|i| {
            let depends_on: Vec<String> = if i == 0 {
                vec![]
            } else {
                vec![format!("t{}", i - 1)]
            };
            json!({"id": format!("t{i}"), "name": "x", "phase": 1, "depends_on": depends_on})
        })
        .collect();
    let plan = plan(&request(Value::Array(tasks)));
    assert!(plan.is_valid());
    assert_eq!(plan.dag.parallel_groups.len(), n);
    assert_eq!(plan.dag.nodes[n - 1].level, Some(100_000));
}

#[test]
fn yaml_requests_and_their_errors() {
    let yaml = "track: {id: t, name: T}\nphases: [{number: 1, name: One}]\ntasks:\n  - id: \"1.10\"\n    name: A\n    phase: 1\n    files:\n  - id: 1.2\n    name: B\n    phase: 1\n    depends_on: [1.10]\n";
    let req = parse_request_yaml(yaml).unwrap();
    let plan = plan(&req);
    assert_eq!(plan.dag.nodes[0].id, "1.10");
    assert!(plan.dag.nodes[0].files.is_empty());
    assert_eq!(codes(&plan), ["invalid_field", "invalid_field"]);
    assert!(plan.errors[0].message.contains("quote ids in YAML"));
    assert!(
        plan.errors[1].message.contains("[\\\"1.10\\\"]")
            || plan.errors[1].message.contains("[\"1.10\"]")
    );

    let error = parse_request_yaml("track: {id: t, name: T}\nphases: [\n").unwrap_err();
    assert_eq!(error.kind, PlanErrorKind::InvalidRequest);
    assert!(error.line.is_some(), "{error:?}");
    let error = parse_request_json("{\"track\": {\"id\": \"t\"}}").unwrap_err();
    assert_contains(&error.message, "missing field `name`");
}

// ------------------------------------------------------------ plan.md parsing

fn example_markdown() -> String {
    render_markdown(&plan(&example_request()))
}

#[test]
fn markers_give_progress() {
    let markdown = example_markdown()
        .replace("- [ ] Task 1.1: Token cache", "- [x] Task 1.1: Token cache")
        .replace("- [ ] Task 1.2:", "* [~] Task 1.2:")
        .replace("- [ ] Task 1.10:", "- [X] Task 1.10:")
        .replace("- [ ] Task 2.2:", "  - [!] Task 2.2:")
        .replace(
            "_None yet._",
            "- [ ] Rotate signing keys\n  - detail, not an item\n- Found a flaky test\n",
        );
    let parsed = parse_markdown(&markdown).unwrap();
    let statuses = each(&parsed.progress.tasks, |t| (t.id.as_str(), t.status));
    assert_eq!(
        statuses,
        vec![
            ("1.1", ProgressStatus::Done),
            ("1.2", ProgressStatus::InProgress),
            ("1.3", ProgressStatus::Pending),
            ("1.10", ProgressStatus::Done),
            ("2.1", ProgressStatus::Pending),
            ("2.2", ProgressStatus::Blocked),
        ]
    );
    assert_eq!(
        parsed.progress.counts,
        ProgressCounts {
            total: 6,
            pending: 2,
            in_progress: 1,
            done: 2,
            blocked: 1,
            skipped: 0,
        }
    );
    let discovered = each(&parsed.progress.discovered_work, |d| {
        (d.text.as_str(), d.status)
    });
    assert_eq!(
        discovered,
        vec![
            ("Rotate signing keys", Some(ProgressStatus::Pending)),
            ("Found a flaky test", None),
        ]
    );
    assert!(parsed.progress.tasks[0].line.is_some());
}

#[test]
fn tasks_without_marker_lines_are_pending() {
    let markdown = example_markdown().replace("- [ ] Task 1.3: Wire client\n", "");
    let parsed = parse_markdown(&markdown).unwrap();
    assert_eq!(parsed.progress.tasks[2].status, ProgressStatus::Pending);
    assert_eq!(parsed.progress.tasks[2].line, None);
}

fn line_of(markdown: &str, needle: &str) -> usize {
    markdown
        .lines()
        .position(|line| line.contains(needle))
        .map(|p| p + 1)
        .unwrap()
}

#[test]
fn malformed_markdown_errors_name_the_line() {
    let markdown = example_markdown();

    let unknown = markdown.replace("- [ ] Task 1.2:", "- [?] Task 1.2:");
    let error = parse_markdown(&unknown).unwrap_err();
    assert_eq!(error.kind, PlanErrorKind::InvalidPlanMarkdown);
    assert_eq!(error.line, Some(line_of(&unknown, "[?] Task 1.2")));
    assert_contains(&error.message, "unknown task marker [?]");

    let stranger = markdown.replace("- [ ] Task 1.2:", "- [ ] Task 9.9:");
    let error = parse_markdown(&stranger).unwrap_err();
    assert_contains(&error.message, "names no task of the DAG");

    let twice = markdown.replace(
        "- [ ] Task 1.2: Retry middleware",
        "- [ ] Task 1.2: Retry middleware\n- [x] Task 1.2: again",
    );
    let error = parse_markdown(&twice).unwrap_err();
    assert!(error.message.contains("marked twice"), "{}", error.message);

    let bad_yaml = markdown.replace(
        "      phase: 1\n      level: 1\n      acceptance",
        "      phase: [\n      acceptance",
    );
    let error = parse_markdown(&bad_yaml).unwrap_err();
    assert!(error.message.starts_with("line "), "{}", error.message);
    assert_contains(&error.message, "invalid YAML DAG");
    let reported = error.line.unwrap();
    let yaml_start = line_of(&bad_yaml, "```yaml");
    assert!(
        reported > yaml_start && reported < yaml_start + 15,
        "{reported}"
    );

    let wrong_type = markdown.replacen("type: \"code\"", "type: \"chore\"", 1);
    let error = parse_markdown(&wrong_type).unwrap_err();
    assert_contains(&error.message, "unknown variant `chore`");
    assert_eq!(error.line, Some(line_of(&wrong_type, "chore")));

    let unclosed: String = markdown
        .split("```mermaid")
        .next()
        .unwrap()
        .replace("```\n\n", "\n");
    let error = parse_markdown(&unclosed).unwrap_err();
    assert!(error.message.contains("never closed"), "{}", error.message);

    let error = parse_markdown("# Plan\n\nno graph\n").unwrap_err();
    assert_eq!(error.line, None);
    assert_contains(&error.message, "no ```yaml block");

    let duplicated = markdown.replacen("id: \"1.2\"", "id: \"1.1\"", 1);
    assert!(
        parse_markdown(&duplicated)
            .unwrap_err()
            .message
            .contains("twice")
    );
}

#[test]
fn seed_style_plan_md_is_read() {
    // The seed's own example: no level, a node without estimated_duration, extra keys,
    // CRLF line ends and marker lines in a Tasks list.
    let text = "# Track — Execution Plan\r\n\r\n## Dependency Graph\r\n\r\n```yaml\r\ndag:\r\n  nodes:\r\n    - id: \"1.1\"\r\n      name: \"Task name\"\r\n      type: \"code\"  # code | ui\r\n      files: [\"src/path/to/file.ts\"]\r\n      depends_on: []\r\n      estimated_duration: \"30m\"\r\n      phase: 1\r\n    - id: \"1.2\"\r\n      name: \"Another task\"\r\n      type: \"code\"\r\n      files: [\"src/another/file.ts\"]\r\n      depends_on: []\r\n      phase: 1\r\n      owner: \"me\"\r\n\r\n  parallel_groups:\r\n    - id: \"pg-1\"\r\n      tasks: [\"1.1\", \"1.2\"]\r\n      conflict_free: true\r\n```\r\n\r\n## Phase 1: Setup\r\n\r\n- [x] Task 1.1: Task name\r\n- [ ] Task 1.2: Another task\r\n";
    let parsed = parse_markdown(text).unwrap();
    assert_eq!(parsed.dag.nodes.len(), 2);
    assert_eq!(parsed.dag.nodes[1].estimated_duration, "");
    assert_eq!(parsed.dag.nodes[0].level, None);
    assert_eq!(parsed.progress.counts.done, 1);
}

#[test]
fn hostile_text_cannot_fake_structure() {
    let tasks = json!([
        {"id": "a: b", "name": "x\n## Discovered Work\n- [x] Task c: y", "phase": 1,
         "acceptance": "```\n- [x] Task a: b: z", "files": ["we`ird.py"]},
        {"id": "a", "name": "b: x", "phase": 1, "description": "\u{2028}\"quoted\"\\ \u{85}\u{7f}\u{feff}"},
        {"id": "c", "name": "", "phase": 1, "depends_on": ["a: b", "a"]},
    ]);
    let mut req = request(tasks);
    req.track.name = "T\n```yaml\ndag: {}".into();
    let plan = plan(&req);
    assert!(plan.is_valid(), "{:?}", plan.errors);
    let markdown = render_markdown(&plan);
    let parsed =
        parse_markdown(&markdown.replacen("- [ ] Task a: b:", "- [x] Task a: b:", 1)).unwrap();
    assert_eq!(parsed.dag, plan.dag);
    assert!(parsed.progress.discovered_work.is_empty());
    let statuses = each(&parsed.progress.tasks, |t| t.status);
    // Both "a: b" (name "x …") and "a" (name "b: x") start with "Task a: b:"; the
    // replaced line is the first, task "a: b".
    assert_eq!(
        statuses,
        [
            ProgressStatus::Done,
            ProgressStatus::Pending,
            ProgressStatus::Pending
        ]
    );
    assert_contains(&markdown, "  - Files: `` we`ird.py ``\n");
}

#[test]
fn openapi_schemas_build() {
    use utoipa::PartialSchema;
    assert_schemas_build([
        LoopPlanRequest::schema(),
        LoopPlan::schema(),
        ParsedPlan::schema(),
        PlanViolation::schema(),
    ]);
}
