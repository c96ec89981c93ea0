use serde_json::{Value, json};

use super::*;
use crate::domain::refine::input::{parse_assignments, parse_plan};
use crate::domain::refine::phase::refine_phase;

/// 12 phases listed out of order; two assignments each, plus: `P3-A1` repeated in
/// P5 (cross-phase duplicate), `P4-A1` repeated in P4, one assignment without a
/// phase and one naming a phase the plan lacks, and `shared/config.rs` claimed by
/// P2-A1, P7-A2 and two WPs of P10-A3.
fn twelve_phases() -> (PlanDocument, Vec<Assignment>) {
    let order = [10, 3, 1, 12, 2, 7, 5, 11, 4, 9, 6, 8];
    let phases: Vec<Value> = order
        .iter()
        .map(|n| json!({"id": format!("P{n}"), "name": format!("Phase {n}")}))
        .collect();
    let plan = parse_plan("refined_plan.json", &json!({"phases": phases}).to_string()).unwrap();

    let mut list = Vec::new();
    for n in order {
        for a in [1, 2] {
            let id = format!("P{n}-A{a}");
            let mut files = vec![format!("src/p{n}/a{a}.rs")];
            let shared = matches!((n, a), (2, 1) | (7, 2));
            if shared {
                files.push("shared/config.rs".into());
            }
            list.push(json!({
                "id": id, "phase_id": format!("P{n}"), "name": format!("N{n}.{a}"),
                "goal": format!("G{n}.{a}"),
                "proposed_work_packages": [{"id_suffix": "WP1", "estimated_files": files}]
            }));
        }
    }
    list.push(json!({"id": "P10-A3", "phase_id": "P10", "work_packages": [
        {"id_suffix": "WP1", "files_touched": ["shared/config.rs"]},
        {"id_suffix": "WP2", "estimated_files": ["src/p10/own.rs"], "files_touched": ["shared/config.rs"]}
    ]}));
    list.push(json!({"id": "P3-A1", "phase_id": "P5", "name": "duplicate across phases"}));
    list.push(json!({"id": "P4-A1", "phase_id": "P4", "name": "duplicate within a phase"}));
    list.push(json!({"id": "X-1", "name": "no phase"}));
    list.push(json!({"id": "X-2", "phase_id": "P99"}));
    let assignments = parse_assignments("request body", &Value::Array(list).to_string()).unwrap();
    (plan, assignments)
}

#[test]
fn split_orders_phases_naturally_and_reports_what_it_cannot_place() {
    let (plan, assignments) = twelve_phases();
    let split = split_plan(&plan, &assignments);
    let ids: Vec<&str> = split.contexts.iter().map(|c| c.phase_id.as_str()).collect();
    let expected: Vec<String> = (1..=12).map(|n| format!("P{n}")).collect();
    assert_eq!(ids, expected);
    assert_eq!(split.unassigned, ["X-1", "X-2"]);
    assert_eq!(split.duplicates, ["P4-A1"]);
    assert!(split.empty_phases.is_empty());

    let p5 = &split.contexts[4];
    let own: Vec<&str> = p5.assignments.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(own, ["P5-A1", "P5-A2", "P3-A1"]);
    // Peers: every placed assignment of every other phase, as {id, name, goal}.
    let placed = assignments.len() - 3;
    for c in &split.contexts {
        assert_eq!(
            c.peer_summaries.len(),
            placed - c.assignments.len(),
            "{}",
            c.phase_id
        );
    }
    let p1_peers: Vec<&str> = split.contexts[0]
        .peer_summaries
        .iter()
        .map(|p| p.id.as_str())
        .collect();
    assert!(!p1_peers.contains(&"P1-A1") && p1_peers.contains(&"P12-A2"));
    let peer = serde_json::to_value(&split.contexts[0].peer_summaries[0]).unwrap();
    assert_eq!(peer, json!({"id": "P2-A1", "name": "N2.1", "goal": "G2.1"}));
    // Contexts re-parse (the job layer stores them as JSON).
    for c in &split.contexts {
        crate::domain::refine::parse_context("ctx", &c.to_value().to_string()).unwrap();
    }
}

#[test]
fn twelve_phase_merge_dedups_strips_and_keeps_failed_phases() {
    let (plan, assignments) = twelve_phases();
    let split = split_plan(&plan, &assignments);
    let mut results: Vec<(String, Option<Value>)> = split
        .contexts
        .iter()
        .rev()
        .map(|c| {
            let result = match c.phase_id.as_str() {
                "P6" => None,
                "P8" => Some(json!({"oops": true})),
                _ => Some(refine_phase(c, &[], 6).result),
            };
            (c.phase_id.clone(), result)
        })
        .collect();
    results.swap(0, 5);
    let merged = merge_phase_results(&results, &assignments);

    assert_eq!(merged.failed_phases, ["P6", "P8"]);
    assert_eq!(merged.duplicates, ["P3-A1"]);
    let ids: Vec<&str> = merged.assignments.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids.len(), 25);
    assert_eq!(ids[..5], ["P1-A1", "P1-A2", "P2-A1", "P2-A2", "P3-A1"]);
    assert_eq!(ids[ids.len() - 2..], ["P12-A1", "P12-A2"]);
    assert!(ids.contains(&"P6-A1") && ids.contains(&"P8-A2"));
    let p3 = merged.assignments.iter().find(|a| a.id == "P3-A1").unwrap();
    assert_eq!(p3.name.as_deref(), Some("N3.1"), "first copy wins");

    assert_eq!(
        merged.conflicts,
        [FileConflict {
            file: "shared/config.rs".into(),
            owner: "P2-A1".into(),
            stripped_from: vec!["P7-A2".into(), "P10-A3".into()],
        }]
    );
    assert_eq!(merged.conflict_count, 2);
    // P10-A3-WP1 held only the shared file; WP2 keeps its own file.
    assert_eq!(merged.emptied_wps, ["P10-A3-WP1"]);
    let p10 = merged
        .assignments
        .iter()
        .find(|a| a.id == "P10-A3")
        .unwrap();
    assert_eq!(p10.wp_key, Some(crate::domain::refine::WpKey::WorkPackages));
    assert_eq!(p10.work_packages[1].files_touched, Some(vec![]));
    assert_eq!(
        p10.work_packages[1].estimated_files,
        Some(vec!["src/p10/own.rs".into()])
    );
    let p7 = merged.assignments.iter().find(|a| a.id == "P7-A2").unwrap();
    assert_eq!(p7.work_packages[0].files(), ["src/p7/a2.rs"]);
    let p2 = merged.assignments.iter().find(|a| a.id == "P2-A1").unwrap();
    assert!(
        p2.work_packages[0]
            .files()
            .contains(&"shared/config.rs".to_owned())
    );

    let value = merged.result_value();
    assert_eq!(value["schema_version"], 1);
    assert_eq!(value["conflict_count"], 2);
    assert_eq!(value["assignments"].as_array().map(Vec::len), Some(25));
}

#[test]
fn ownership_is_natural_not_lexicographic_and_per_assignment() {
    let list = json!([
        {"id": "P1-A10", "phase_id": "P1", "proposed_work_packages": [
            {"id_suffix": "WP1", "estimated_files": ["f"]},
            {"id_suffix": "WP2", "files_touched": ["f"]}]},
        {"id": "P1-A2", "phase_id": "P1", "proposed_work_packages": [
            {"id_suffix": "WP1", "estimated_files": ["f"]}]}
    ]);
    let assignments = parse_assignments("x", &list.to_string()).unwrap();
    let merged = merge_phase_results(&[("P1".into(), None)], &assignments);
    assert_eq!(merged.conflicts[0].owner, "P1-A2");
    assert_eq!(merged.conflicts[0].stripped_from, ["P1-A10"]);
    assert_eq!(merged.emptied_wps, ["P1-A10-WP1", "P1-A10-WP2"]);
    assert_eq!(merged.conflict_count, 1);
}

#[test]
fn empty_phases_get_no_context() {
    let plan = parse_plan("p", r#"{"phases": [{"id": "P2"}, {"id": "P1"}]}"#).unwrap();
    let assignments = parse_assignments("a", r#"[{"id": "P1-A1", "phase_id": "P1"}]"#).unwrap();
    let split = split_plan(&plan, &assignments);
    assert_eq!(split.contexts.len(), 1);
    assert_eq!(split.empty_phases, ["P2"]);
    assert!(split.contexts[0].peer_summaries.is_empty());
}
