use serde_json::json;

use super::*;
use crate::domain::refine::builtin::builtin_review;
use crate::domain::refine::input::parse_context;
use crate::domain::refine::packet::build_packets;

const CONTEXT: &str = include_str!("../../../../examples/context_P2.json");
const ANSWER: &str = include_str!("../../../../examples/l0_answer_example.txt");

fn example() -> PhaseContext {
    parse_context("context_P2.json", CONTEXT).unwrap()
}

fn answer(id: &str, changes: &str, deps: &str, adjustments: &str) -> L0Outcome {
    L0Outcome::Answer(format!(
        "assignment_id = {id}\nchanges = {changes}\ndependency_corrections = {deps}\nwp_proposal_adjustments = {adjustments}\n"
    ))
}

fn ids(n: usize) -> Vec<String> {
    (1..=n).rev().map(|i| format!("P1-A{i}")).collect()
}

#[test]
fn batches_are_natural_and_clamped() {
    let b = batches(&ids(13), 6);
    assert_eq!(b.iter().map(Vec::len).collect::<Vec<_>>(), [6, 6, 1]);
    assert_eq!(b[0][..3], ["P1-A1", "P1-A2", "P1-A3"]);
    assert_eq!(b[1][4..], ["P1-A11", "P1-A12"]);
    assert_eq!(batches(&ids(13), 100).len(), 3);
    assert_eq!(batches(&ids(3), 0).len(), 3);
    assert_eq!(batches(&ids(3), 2), [vec!["P1-A1", "P1-A2"], vec!["P1-A3"]]);
    assert!(batches(&[], 6).is_empty());
    let mixed: Vec<String> = ["P1-A10", "P1-A2"].map(String::from).to_vec();
    assert_eq!(batches(&mixed, 6), [vec!["P1-A2", "P1-A10"]]);
}

#[test]
fn example_end_to_end_with_the_example_answer() {
    let context = example();
    let outcomes = vec![
        ("P2-A10".to_owned(), answer("P2-A1", "[]", "[]", "[]")),
        ("P2-A2".to_owned(), L0Outcome::Answer(ANSWER.to_owned())),
        (
            "P2-A1".to_owned(),
            L0Outcome::Failed("timeout after 600s".into()),
        ),
    ];
    let out = refine_phase(&context, &outcomes, 6);
    assert_eq!(
        out.log,
        [
            "CRITICAL: L0 for P2-A1 failed — proceeding with N-1 suggestions",
            "WARNING: L0 response assignment_id mismatch — expected P2-A10, got P2-A1 — skipping",
            "WP CONFLICT: P2-A1 vs P2-A2 — src/http/client.py assigned to P2-A1",
            "WP CONFLICT: P2-A1 vs P2-A10 — src/auth/cache.py assigned to P2-A1",
        ]
    );
    let statuses: Vec<(&str, L0Status)> = out
        .records
        .iter()
        .map(|r| (r.assignment_id.as_str(), r.status))
        .collect();
    assert_eq!(
        statuses,
        [
            ("P2-A1", L0Status::Failed),
            ("P2-A2", L0Status::Valid),
            ("P2-A10", L0Status::Mismatch)
        ]
    );
    assert_eq!(out.records[0].reason.as_deref(), Some("timeout after 600s"));
    assert_eq!(
        out.records[2].reason.as_deref(),
        Some("expected P2-A10, got P2-A1")
    );

    let list = out.result["assignments"].as_array().unwrap();
    assert_eq!(out.result["schema_version"], 1);
    let result_ids: Vec<&str> = list.iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(result_ids, ["P2-A1", "P2-A2", "P2-A10"], "input order");
    // P2-A1 keeps both WPs (they share cache.py with each other only).
    assert_eq!(
        list[0]["proposed_work_packages"].as_array().unwrap().len(),
        2
    );
    assert_eq!(list[1]["proposed_work_packages"], json!([]));
    assert_eq!(list[2]["proposed_work_packages"], json!([]));
    assert_eq!(
        list[1]["dependency_notes"],
        "Needs P2-A1-WP1 (token cache) before the client can read tokens.\n\
         Depends on P2-A1-WP1: Reads tokens through the cache defined there"
    );
    // Untouched assignments are byte-for-byte what came in, key order included.
    let input: serde_json::Value = serde_json::from_str(CONTEXT).unwrap();
    assert_eq!(
        serde_json::to_string(&list[0]).unwrap(),
        serde_json::to_string(&input["assignments"][0]).unwrap()
    );
}

#[test]
fn example_with_the_builtin_reviewer() {
    let context = example();
    let outcomes: Vec<(String, L0Outcome)> = build_packets(&context, None)
        .iter()
        .map(|p| {
            let text = builtin_review(p, &context.assignments);
            (p.target_assignment_id.clone(), L0Outcome::Answer(text))
        })
        .collect();
    let out = refine_phase(&context, &outcomes, 6);
    // The builtin removes the same WPs conflict resolution already removed: silent.
    assert_eq!(
        out.log,
        [
            "WP CONFLICT: P2-A1 vs P2-A2 — src/http/client.py assigned to P2-A1",
            "WP CONFLICT: P2-A1 vs P2-A10 — src/auth/cache.py assigned to P2-A1",
        ]
    );
    assert!(out.records.iter().all(|r| r.status == L0Status::Valid));
    let notes = out.result["assignments"][1]["dependency_notes"]
        .as_str()
        .unwrap();
    assert!(
        notes.starts_with("Depends on P2-A1: P2-A1 (Token cache) mentioned in goal"),
        "{notes}"
    );
}

#[test]
fn all_failed_still_produces_the_unchanged_assignments() {
    let context = example();
    let out = refine_phase(&context, &[], 2);
    assert_eq!(
        out.log[..4],
        [
            "CRITICAL: L0 for P2-A1 failed — proceeding with N-1 suggestions",
            "CRITICAL: L0 for P2-A2 failed — proceeding with N-1 suggestions",
            "--- next batch ---",
            "CRITICAL: L0 for P2-A10 failed — proceeding with N-1 suggestions",
        ]
    );
    assert!(out.records.iter().all(|r| r.status == L0Status::Failed));
    // Conflict resolution is a rule of the phase, not an L0 suggestion: it still runs.
    assert_eq!(out.log.len(), 6);
    let list = out.result["assignments"].as_array().unwrap();
    assert_eq!(
        list[0]["goal"],
        context.assignments[0].goal.clone().unwrap()
    );
}

fn small_context(wp_key: &str) -> PhaseContext {
    let text = json!({
        "phase_id": "P1",
        "custom": {"kept": true},
        "assignments": [
            {"id": "P1-A10", "zeta": 1, "name": "ten", wp_key: [
                {"id_suffix": "WP1", "name": "x", "files_touched": ["b.rs"], "note": "n"}
            ], "dependency_notes": "Depends on P1-A2: already"},
            {"id": "P1-A2", "name": "two", wp_key: [
                {"id_suffix": "WP1", "estimated_files": ["a.rs"]},
                {"id": "P1-A2-WP2", "estimated_files": ["c.rs"]}
            ]}
        ]
    });
    parse_context("request body", &text.to_string()).unwrap()
}

#[test]
fn removals_changes_and_corrections_apply_in_order() {
    let context = small_context("work_packages");
    let outcomes = vec![
        (
            "P1-A2".to_owned(),
            answer(
                "P1-A2",
                r#"[{"field": "goal", "new_value": "g"}, {"field": "id", "new_value": "X"}, {"field": "goal", "new_value": "g2"}]"#,
                r#"[{"missing_dep": "P1-A10", "reason": "r"}, {"missing_dep": "P1-A10", "reason": "r"}]"#,
                r#"[{"wp_id_suffix": "WP2", "action": "remove", "reason": "dup"}, {"wp_id_suffix": "WP9", "action": "remove", "reason": "?"}, {"wp_id_suffix": "WP1", "action": "split", "reason": "?"}]"#,
            ),
        ),
        (
            "P1-A10".to_owned(),
            answer(
                "P1-A10",
                r#"[{"field": "dependency_notes", "new_value": "none"}]"#,
                r#"[{"missing_dep": "P1-A2", "reason": ""}]"#,
                "[]",
            ),
        ),
        ("P1-A99".to_owned(), L0Outcome::Failed("stray".into())),
    ];
    let out = refine_phase(&context, &outcomes, 6);
    assert_eq!(
        out.log,
        [
            "WARNING: L0 outcome for unknown assignment P1-A99 — ignoring",
            "WARNING: Unknown work package 'WP9' in wp_proposal_adjustments for P1-A2 — skipping",
            "WARNING: Unsupported action 'split' in wp_proposal_adjustments for P1-A2 — skipping",
            "WARNING: Unrecognized field 'id' in changes for P1-A2 — skipping",
        ]
    );
    let list = out.result["assignments"].as_array().unwrap();
    let a10 = &list[0];
    // Input order and key order are kept, unknown keys included; the WP key too.
    let keys: Vec<&String> = a10.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["id", "zeta", "name", "work_packages", "dependency_notes"]
    );
    assert_eq!(a10["work_packages"][0]["note"], "n");
    assert_eq!(a10["dependency_notes"], "none\nDepends on P1-A2.");
    let a2 = &list[1];
    assert_eq!(a2["goal"], "g2");
    assert_eq!(a2["dependency_notes"], "Depends on P1-A10: r");
    assert_eq!(
        a2["work_packages"],
        json!([{"id_suffix": "WP1", "estimated_files": ["a.rs"]}])
    );
    assert!(a2.get("proposed_work_packages").is_none());
}

#[test]
fn corrections_already_in_the_notes_are_not_repeated() {
    let context = small_context("proposed_work_packages");
    let outcomes = vec![(
        "P1-A10".to_owned(),
        answer(
            "P1-A10",
            "[]",
            r#"[{"missing_dep": "P1-A2", "reason": "already"}]"#,
            "[]",
        ),
    )];
    let out = refine_phase(&context, &outcomes, 6);
    assert_eq!(
        out.result["assignments"][0]["dependency_notes"],
        "Depends on P1-A2: already"
    );
    assert!(
        out.result["assignments"][0]
            .get("proposed_work_packages")
            .is_some()
    );
}

#[test]
fn invalid_answers_are_skipped_with_the_reason_recorded() {
    let context = small_context("proposed_work_packages");
    let outcomes = vec![
        (
            "P1-A2".to_owned(),
            L0Outcome::Answer("I could not decide.".into()),
        ),
        (
            "P1-A10".to_owned(),
            answer(
                "P1-A10",
                r#"[{"field": "goal", "new_value": "x"}]"#,
                "{}",
                "[]",
            ),
        ),
    ];
    let out = refine_phase(&context, &outcomes, 1);
    assert_eq!(
        out.log,
        [
            "WARNING: L0 response for P1-A2 failed validation — skipping",
            "--- next batch ---",
            "WARNING: L0 response for P1-A10 failed validation — skipping",
        ]
    );
    assert_eq!(
        out.records[0].reason.as_deref(),
        Some("assignment_id is missing")
    );
    assert!(
        out.records[1]
            .reason
            .as_deref()
            .unwrap()
            .starts_with("dependency_corrections is not a JSON array")
    );
    // Nothing of the invalid answer was applied.
    assert!(out.result["assignments"][0].get("goal").is_none());
}

#[test]
fn mismatch_wins_over_other_validation_errors() {
    assert_eq!(
        classify(
            "P1-A1",
            &L0Outcome::Answer("assignment_id = P1-A2\nchanges = oops".into())
        ),
        Classified::Mismatch {
            expected: "P1-A1".into(),
            actual: "P1-A2".into()
        }
    );
}

#[test]
fn batch_separators_follow_the_batch_size() {
    let assignments: Vec<serde_json::Value> =
        (1..=8).map(|i| json!({"id": format!("P1-A{i}")})).collect();
    let context = parse_context(
        "request body",
        &json!({"phase_id": "P1", "assignments": assignments}).to_string(),
    )
    .unwrap();
    let outcomes: Vec<(String, L0Outcome)> = (1..=8)
        .map(|i| {
            let id = format!("P1-A{i}");
            (id.clone(), answer(&id, "[]", "[]", "[]"))
        })
        .collect();
    let out = refine_phase(&context, &outcomes, 3);
    assert_eq!(out.log, [NEXT_BATCH, NEXT_BATCH]);
    let out = refine_phase(&context, &outcomes, 6);
    assert_eq!(out.log, [NEXT_BATCH]);
}

#[test]
fn a_wp_conflicting_with_two_earlier_assignments_logs_both() {
    let context = parse_context(
        "request body",
        &json!({"phase_id": "P1", "assignments": [
            {"id": "P1-A3", "work_packages": [{"id_suffix": "WP1", "estimated_files": ["z.rs", "a.rs", "m.rs"]}]},
            {"id": "P1-A1", "work_packages": [{"id_suffix": "WP1", "estimated_files": ["m.rs", "a.rs"]}]},
            {"id": "P1-A2", "work_packages": [{"id_suffix": "WP1", "files_touched": ["z.rs"]}]}
        ]})
        .to_string(),
    )
    .unwrap();
    let out = refine_phase(&context, &[], 6);
    assert_eq!(
        out.log[3..],
        [
            "WP CONFLICT: P1-A1 vs P1-A3 — a.rs, m.rs assigned to P1-A1",
            "WP CONFLICT: P1-A2 vs P1-A3 — z.rs assigned to P1-A2",
        ]
    );
}

#[test]
fn a_budget_stop_says_not_started_not_failed() {
    let context = example();
    let out = refine_phase_stopped(&context, &[], 6, "the job's budget of $0.02 is spent");
    assert_eq!(
        out.log[0],
        "NOT STARTED: L0 for P2-A1 was not started: the job's budget of $0.02 is spent — \
         proceeding without its suggestions"
    );
    assert!(!out.log.iter().any(|l| l.contains("failed — proceeding")));
    assert_eq!(
        out.records[0].reason.as_deref(),
        Some("not started: the job's budget of $0.02 is spent")
    );
}

#[test]
fn a_failure_with_an_error_code_carries_it_in_its_record_and_log_line() {
    let reason = L0ErrorCode::RateLimited.reason("waited 600 s for room on executor c");
    assert_eq!(reason, "rate_limited: waited 600 s for room on executor c");
    let failed = Classified::Failed(reason.clone());
    let record = failed.record("P1-A1");
    assert_eq!(
        (record.status, record.error_code, record.reason.as_deref()),
        (
            L0Status::Failed,
            Some(L0ErrorCode::RateLimited),
            Some(reason.as_str())
        )
    );
    assert_eq!(
        failed.log_line("P1-A1").unwrap(),
        "CRITICAL: L0 for P1-A1 failed (rate_limited) — proceeding with N-1 suggestions"
    );
    let quota = L0ErrorCode::QuotaExhausted.reason("HTTP 429: spend limit");
    assert_eq!(
        L0ErrorCode::of_reason(&quota),
        Some(L0ErrorCode::QuotaExhausted)
    );
    // Every other failure has no code, and keeps the line of docs/spec/refine.md §3.
    for other in [
        "HTTP 500 Internal Server Error: oops",
        "timed out after 600 s",
        "",
    ] {
        let failed = Classified::Failed(other.into());
        assert_eq!(failed.record("P1-A1").error_code, None, "{other}");
        assert_eq!(
            failed.log_line("P1-A1").unwrap(),
            "CRITICAL: L0 for P1-A1 failed — proceeding with N-1 suggestions"
        );
    }
    assert_eq!(
        Classified::Invalid("x".into()).record("P1-A1").error_code,
        None
    );
    for code in L0ErrorCode::ALL {
        assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
    }
}
