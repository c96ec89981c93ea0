use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::{Value, json};

use super::*;
use crate::domain::{assert_contains, assert_schemas_build};

fn metadata_v1() -> Value {
    serde_json::from_str(include_str!("../../../examples/metadata_v1.json")).unwrap()
}

/// Minute `n` after 2026-12-01T10:00:00Z.
fn at(n: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap() + Duration::minutes(n)
}

fn fresh() -> Metadata {
    import(metadata_v1(), at(0)).unwrap()
}

fn passed() -> Completion {
    Completion::new(StepOutcome::Passed)
}

fn failed() -> Completion {
    Completion::new(StepOutcome::Failed)
}

fn blocked() -> Completion {
    Completion::new(StepOutcome::Blocked)
}

/// Starts and completes `step` at minutes `minute` and `minute + 1`.
fn run(meta: &Metadata, step: Step, completion: &Completion, minute: i64) -> Metadata {
    let started = start_step(meta, step, "agent-1", at(minute)).unwrap();
    complete_step(&started, step, completion, at(minute + 1)).unwrap()
}

fn state(meta: &Metadata) -> (&'static str, &'static str, &'static str) {
    (
        meta.loop_state.current_step.as_str(),
        meta.loop_state.step_status.as_str(),
        meta.status.as_str(),
    )
}

/// A track at EVALUATE_EXECUTION, NOT_STARTED.
fn at_evaluate_execution(required_sync: bool) -> Metadata {
    let mut meta = fresh();
    meta.loop_state.checkpoints.business_sync.required = Some(required_sync);
    let meta = run(&meta, Step::Plan, &passed(), 1);
    let meta = run(&meta, Step::EvaluatePlan, &passed(), 3);
    run(&meta, Step::Execute, &passed(), 5)
}

#[test]
fn v1_import_upgrades_to_v2() {
    let meta = fresh();
    let json = serde_json::to_value(&meta).unwrap();
    assert_eq!(
        json,
        json!({
            "version": 2,
            "track_id": "auth-cache_20261130",
            "type": "feature",
            "status": "new",
            "created_at": "2026-11-30T09:00:00Z",
            "updated_at": "2026-12-01T10:00:00Z",
            "loop_state": {
                "current_step": "PLAN",
                "step_status": "NOT_STARTED",
                "step_started_at": null,
                "fix_cycle_count": 0,
                "max_fix_cycles": 3,
                "plan_revision_count": 0,
                "max_plan_revisions": 3,
                "checkpoints": {
                    "PLAN": {"status": "NOT_STARTED"},
                    "EVALUATE_PLAN": {"status": "NOT_STARTED"},
                    "EXECUTE": {"status": "NOT_STARTED"},
                    "EVALUATE_EXECUTION": {"status": "NOT_STARTED"},
                    "FIX": {"status": "NOT_STARTED"},
                    "BUSINESS_SYNC": {"status": "NOT_STARTED", "required": false}
                }
            },
            "discovered_work": [],
            "blockers": [],
            "description": "Per-tenant token cache"
        })
    );
    // Key order: the contract's fields first, unknown ones after.
    let text = serde_json::to_string(&meta).unwrap();
    assert!(text.starts_with("{\"version\":2,\"track_id\":"), "{text}");
    // v2 re-imports unchanged (updated_at kept), and round-trips through serde.
    assert_eq!(import(json.clone(), at(99)).unwrap(), meta);
    assert_eq!(serde_json::from_value::<Metadata>(json).unwrap(), meta);
}

#[test]
fn v1_defaults_statuses_and_partial_loop_state() {
    let meta = import(json!({"track_id": "a"}), at(0)).unwrap();
    assert_eq!(meta.r#type, "feature");
    assert_eq!(meta.status, TrackStatus::New);
    assert_eq!(meta.created_at, at(0));

    let done = import(json!({"track_id": "a", "status": "Completed"}), at(0)).unwrap();
    assert_eq!(state(&done), ("COMPLETE", "PASSED", "complete"));

    // An agent's partial loop_state (the seed's "On Start" write) is kept.
    let partial = import(
        json!({"track_id": "a", "status": "in_progress", "loop_state": {
            "current_step": "PLAN", "step_status": "IN_PROGRESS",
            "step_started_at": "2026-12-01T09:00:00+01:00",
            "checkpoints": {"PLAN": {"status": "IN_PROGRESS", "agent": "loop-planner", "x": 1}}
        }}),
        at(0),
    )
    .unwrap();
    assert_eq!(state(&partial), ("PLAN", "IN_PROGRESS", "in_progress"));
    assert_eq!(partial.loop_state.step_started_at, Some(at(-120)));
    assert_eq!(partial.loop_state.max_fix_cycles, 3);
    assert_eq!(partial.loop_state.checkpoints.plan.extra["x"], 1);
    assert_eq!(
        partial.loop_state.checkpoints.business_sync.required,
        Some(false)
    );

    let error = import(json!({"track_id": "a", "status": "someday"}), at(0)).unwrap_err();
    assert_eq!(error.code, TrackErrorCode::InvalidMetadata);
    assert_contains(&error.message, "unknown v1 status");
}

#[test]
fn v2_validation_errors() {
    let good = serde_json::to_value(fresh()).unwrap();
    let with = |pointer: &str, value: Value| {
        let mut document = good.clone();
        *document.pointer_mut(pointer).unwrap() = value;
        import(document, at(0))
    };
    assert_eq!(
        with("/version", json!(3)).unwrap_err().code,
        TrackErrorCode::UnsupportedVersion
    );
    assert_eq!(
        with("/version", json!("2")).unwrap_err().code,
        TrackErrorCode::UnsupportedVersion
    );
    let error = with("/loop_state/current_step", json!("DEPLOY")).unwrap_err();
    assert_contains(&error.message, "unknown variant `DEPLOY`");
    assert!(with("/loop_state/max_fix_cycles", json!(0)).is_err());
    assert!(with("/loop_state/fix_cycle_count", json!(-1)).is_err());
    assert!(
        with("/status", json!("complete"))
            .unwrap_err()
            .message
            .contains("contradicts")
    );
    assert!(with("/created_at", json!("yesterday")).is_err());
    assert_eq!(
        with("/track_id", json!("../etc")).unwrap_err().code,
        TrackErrorCode::InvalidMetadata
    );
    assert!(import(json!([1]), at(0)).is_err());
    // Unknown fields are kept at every level.
    let kept = with(
        "/loop_state/checkpoints/FIX",
        json!({"status": "NOT_STARTED", "k": [1]}),
    )
    .unwrap();
    assert_eq!(kept.loop_state.checkpoints.fix.extra["k"], json!([1]));
}

#[test]
fn import_for_track_fills_or_checks_the_id() {
    let id = TrackId::parse("t-1").unwrap();
    let meta = import_for_track(&id, json!({"status": "new"}), at(0)).unwrap();
    assert_eq!(meta.track_id, id);
    let error = import_for_track(&id, json!({"track_id": "t-2"}), at(0)).unwrap_err();
    assert_eq!(error.code, TrackErrorCode::TrackIdMismatch);
}

#[test]
fn track_ids_are_single_safe_path_segments() {
    for good in ["auth-cache_20261130", "a", "A.b-c_9", &"x".repeat(128)] {
        assert!(TrackId::parse(good).is_ok(), "{good}");
    }
    for bad in [
        "",
        ".",
        "..",
        "../x",
        "a/b",
        "a\\b",
        "a\0b",
        ".hidden",
        "a b",
        "é",
        "a:b",
        &"x".repeat(129),
    ] {
        let error = TrackId::parse(bad).unwrap_err();
        assert_eq!(error.code, TrackErrorCode::InvalidTrackId, "{bad:?}");
        assert!(!error.message.contains('\0'));
    }
    assert!(serde_json::from_value::<TrackId>(json!("a/b")).is_err());
}

#[test]
fn step_names_are_a_closed_enum() {
    for step in Step::ALL {
        assert_eq!(Step::parse(step.as_str()), Some(step));
        assert_eq!(serde_json::to_value(step).unwrap(), step.as_str());
    }
    assert_eq!(Step::parse("evaluate_plan"), Some(Step::EvaluatePlan));
    for unknown in ["", "COMPLETE", "DEPLOY", "PLAN ", "EVALUATE-PLAN", "plan\0"] {
        assert_eq!(Step::parse(unknown), None, "{unknown:?}");
    }
    let error = unknown_step(&fresh(), "DEPLOY");
    assert_eq!(error.code, TransitionCode::UnknownStep);
    assert_eq!(error.legal, ["start PLAN"]);
    assert_eq!(
        error.message,
        "unknown step 'DEPLOY'; steps are PLAN, EVALUATE_PLAN, EXECUTE, EVALUATE_EXECUTION, \
         FIX, BUSINESS_SYNC; legal next: start PLAN"
    );
}

#[test]
fn plan_start_and_completion_match_the_seed() {
    let started = start_step(&fresh(), Step::Plan, "loop-planner", at(1)).unwrap();
    assert_eq!(state(&started), ("PLAN", "IN_PROGRESS", "in_progress"));
    assert_eq!(started.updated_at, at(1));
    let json = serde_json::to_value(&started).unwrap();
    assert_eq!(
        json["loop_state"]["step_started_at"],
        "2026-12-01T10:01:00Z"
    );
    assert_eq!(
        json["loop_state"]["checkpoints"]["PLAN"],
        json!({"status": "IN_PROGRESS", "started_at": "2026-12-01T10:01:00Z", "agent": "loop-planner"})
    );

    let mut completion = passed();
    completion.commit_sha = Some("abc123".into());
    let done = complete_step(&started, Step::Plan, &completion, at(2)).unwrap();
    assert_eq!(
        state(&done),
        ("EVALUATE_PLAN", "NOT_STARTED", "in_progress")
    );
    assert_eq!(done.updated_at, at(2));
    let json = serde_json::to_value(&done).unwrap();
    assert_eq!(
        json["loop_state"]["checkpoints"]["PLAN"],
        json!({
            "status": "PASSED",
            "started_at": "2026-12-01T10:01:00Z",
            "completed_at": "2026-12-01T10:02:00Z",
            "agent": "loop-planner",
            "commit_sha": "abc123",
            "plan_version": 1
        })
    );
    assert_eq!(
        json["loop_state"]["checkpoints"]["EVALUATE_PLAN"],
        json!({"status": "NOT_STARTED"})
    );
    assert_eq!(json["loop_state"]["step_started_at"], Value::Null);
}

#[test]
fn plan_failure_stays_and_can_be_retried() {
    let meta = run(&fresh(), Step::Plan, &failed(), 1);
    assert_eq!(state(&meta), ("PLAN", "FAILED", "in_progress"));
    assert_eq!(
        meta.loop_state.checkpoints.plan.status,
        CheckpointStatus::Failed
    );
    assert_eq!(legal_next_steps(&meta), ["start PLAN"]);
    let retried = start_step(&meta, Step::Plan, "agent-2", at(5)).unwrap();
    assert_eq!(retried.loop_state.checkpoints.plan.completed_at, None);
    assert_eq!(
        retried.loop_state.checkpoints.plan.agent.as_deref(),
        Some("agent-2")
    );
    let meta = complete_step(&retried, Step::Plan, &passed(), at(6)).unwrap();
    assert_eq!(meta.loop_state.checkpoints.plan.plan_version, Some(1));
}

#[test]
fn evaluate_plan_outcomes_and_revision_bound() {
    let meta = run(&fresh(), Step::Plan, &passed(), 1);
    // PASSED → EXECUTE
    let executing = run(&meta, Step::EvaluatePlan, &passed(), 3);
    assert_eq!(state(&executing), ("EXECUTE", "NOT_STARTED", "in_progress"));
    assert_eq!(
        executing.loop_state.checkpoints.evaluate_plan.status,
        CheckpointStatus::Passed
    );

    // FAILED → PLAN with a revision counted; the third failure blocks.
    let mut meta = meta;
    for revision in 1..=2 {
        meta = run(&meta, Step::EvaluatePlan, &failed(), 10 * revision);
        assert_eq!(state(&meta), ("PLAN", "NOT_STARTED", "in_progress"));
        assert_eq!(meta.loop_state.plan_revision_count, revision as u32);
        assert_eq!(
            meta.loop_state.checkpoints.plan.status,
            CheckpointStatus::NotStarted
        );
        meta = run(&meta, Step::Plan, &passed(), 10 * revision + 5);
        assert_eq!(
            meta.loop_state.checkpoints.plan.plan_version,
            Some(1 + revision as u32)
        );
    }
    let blocked_meta = run(&meta, Step::EvaluatePlan, &failed(), 40);
    assert_eq!(state(&blocked_meta), ("EVALUATE_PLAN", "FAILED", "blocked"));
    assert_eq!(blocked_meta.loop_state.plan_revision_count, 3);
    assert_eq!(blocked_meta.blockers.len(), 1);
    assert_eq!(blocked_meta.blockers[0]["step"], "EVALUATE_PLAN");
    assert_eq!(
        blocked_meta.blockers[0]["reason"],
        "plan_revision_count reached max_plan_revisions (3)"
    );
    let error = start_step(&blocked_meta, Step::Plan, "a", at(50)).unwrap_err();
    assert_eq!(error.code, TransitionCode::TrackClosed);
    assert!(error.legal.is_empty());
    assert_eq!(
        error.message,
        "cannot start PLAN: the track is blocked; legal next: none until the metadata is \
         re-imported (PUT the track)"
    );
}

#[test]
fn execute_outcomes() {
    let meta = run(&fresh(), Step::Plan, &passed(), 1);
    let meta = run(&meta, Step::EvaluatePlan, &passed(), 3);
    let mut report = passed();
    report.tasks_completed = Some(6);
    report.tasks_total = Some(6);
    report.last_task = Some("2.2".into());
    report.last_commit = Some("def456".into());
    report.notes = Some("all green".into());
    let evaluated = run(&meta, Step::Execute, &report, 5);
    assert_eq!(
        state(&evaluated),
        ("EVALUATE_EXECUTION", "NOT_STARTED", "in_progress")
    );
    let execute = &evaluated.loop_state.checkpoints.execute;
    assert_eq!(
        (
            execute.tasks_completed,
            execute.tasks_total,
            execute.last_task.as_deref()
        ),
        (Some(6), Some(6), Some("2.2"))
    );
    assert_eq!(execute.notes.as_deref(), Some("all green"));

    let fixing = run(&meta, Step::Execute, &failed(), 5);
    assert_eq!(state(&fixing), ("FIX", "NOT_STARTED", "in_progress"));
    assert_eq!(fixing.loop_state.fix_cycle_count, 0);
}

#[test]
fn evaluate_execution_outcomes_and_fix_bound() {
    // PASSED without a required sync → COMPLETE, BUSINESS_SYNC skipped.
    let done = run(
        &at_evaluate_execution(false),
        Step::EvaluateExecution,
        &passed(),
        10,
    );
    assert_eq!(state(&done), ("COMPLETE", "PASSED", "complete"));
    assert_eq!(
        done.loop_state.checkpoints.business_sync.status,
        CheckpointStatus::Skipped
    );
    assert!(legal_next_steps(&done).is_empty());
    let error = start_step(&done, Step::BusinessSync, "a", at(11)).unwrap_err();
    assert_eq!(error.code, TransitionCode::TrackClosed);
    assert_eq!(error.current_step.as_str(), "COMPLETE");
    assert!(
        error
            .message
            .ends_with("legal next: none (the track is complete)"),
        "{}",
        error.message
    );

    // PASSED with a required sync → BUSINESS_SYNC.
    let syncing = run(
        &at_evaluate_execution(true),
        Step::EvaluateExecution,
        &passed(),
        10,
    );
    assert_eq!(
        state(&syncing),
        ("BUSINESS_SYNC", "NOT_STARTED", "in_progress")
    );

    // FAILED → FIX (+1), FIX PASSED → EVALUATE_EXECUTION; the third failure blocks.
    let mut meta = at_evaluate_execution(false);
    for cycle in 1..=2u32 {
        meta = run(
            &meta,
            Step::EvaluateExecution,
            &failed(),
            20 * i64::from(cycle),
        );
        assert_eq!(state(&meta), ("FIX", "NOT_STARTED", "in_progress"));
        assert_eq!(meta.loop_state.fix_cycle_count, cycle);
        meta = run(&meta, Step::Fix, &passed(), 20 * i64::from(cycle) + 5);
        assert_eq!(
            state(&meta),
            ("EVALUATE_EXECUTION", "NOT_STARTED", "in_progress")
        );
    }
    let mut last = failed();
    last.notes = Some("still failing".into());
    let blocked_meta = run(&meta, Step::EvaluateExecution, &last, 80);
    assert_eq!(
        state(&blocked_meta),
        ("EVALUATE_EXECUTION", "FAILED", "blocked")
    );
    assert_eq!(blocked_meta.loop_state.fix_cycle_count, 3);
    assert_eq!(
        blocked_meta.blockers[0],
        json!({
            "step": "EVALUATE_EXECUTION",
            "reason": "fix_cycle_count reached max_fix_cycles (3)",
            "at": "2026-12-01T11:21:00Z",
            "notes": "still failing"
        })
    );
}

#[test]
fn fix_and_business_sync_outcomes() {
    let fixing = run(
        &at_evaluate_execution(true),
        Step::EvaluateExecution,
        &failed(),
        10,
    );
    let retry = run(&fixing, Step::Fix, &failed(), 12);
    assert_eq!(state(&retry), ("FIX", "FAILED", "in_progress"));
    let back = run(&retry, Step::Fix, &passed(), 14);
    assert_eq!(
        state(&back),
        ("EVALUATE_EXECUTION", "NOT_STARTED", "in_progress")
    );

    let syncing = run(&back, Step::EvaluateExecution, &passed(), 16);
    let sync_failed = run(&syncing, Step::BusinessSync, &failed(), 18);
    assert_eq!(
        state(&sync_failed),
        ("BUSINESS_SYNC", "FAILED", "in_progress")
    );
    let done = run(&sync_failed, Step::BusinessSync, &passed(), 20);
    assert_eq!(state(&done), ("COMPLETE", "PASSED", "complete"));
    assert_eq!(
        done.loop_state.checkpoints.business_sync.status,
        CheckpointStatus::Passed
    );
    assert_eq!(done.updated_at, at(21));
}

#[test]
fn blocked_outcome_blocks_from_every_step() {
    let fixing = run(
        &at_evaluate_execution(true),
        Step::EvaluateExecution,
        &failed(),
        10,
    );
    let syncing = run(
        &at_evaluate_execution(true),
        Step::EvaluateExecution,
        &passed(),
        10,
    );
    let before_plan = fresh();
    let before_evaluate = run(&before_plan, Step::Plan, &passed(), 1);
    let before_execute = run(&before_evaluate, Step::EvaluatePlan, &passed(), 3);
    let cases = [
        (before_plan, Step::Plan),
        (before_evaluate, Step::EvaluatePlan),
        (before_execute, Step::Execute),
        (at_evaluate_execution(false), Step::EvaluateExecution),
        (fixing, Step::Fix),
        (syncing, Step::BusinessSync),
    ];
    for (meta, step) in cases {
        let result = run(&meta, step, &blocked(), 30);
        assert_eq!(
            state(&result),
            (step.as_str(), "BLOCKED", "blocked"),
            "{step}"
        );
        assert_eq!(
            result.loop_state.checkpoints.get(step).status,
            CheckpointStatus::Blocked
        );
        assert_eq!(
            result.blockers.last().unwrap()["reason"],
            "the step reported BLOCKED"
        );
        let error = complete_step(&result, step, &passed(), at(40)).unwrap_err();
        assert_eq!(error.code, TransitionCode::TrackClosed);
        // Re-importing with the status changed unblocks it.
        let mut document = serde_json::to_value(&result).unwrap();
        document["status"] = json!("in_progress");
        document["loop_state"]["step_status"] = json!("NOT_STARTED");
        let unblocked = import(document, at(50)).unwrap();
        assert!(start_step(&unblocked, step, "a", at(51)).is_ok(), "{step}");
    }
}

#[test]
fn illegal_transitions_name_the_legal_next_step() {
    let meta = fresh();
    // Not the current step.
    let error = start_step(&meta, Step::Execute, "a", at(1)).unwrap_err();
    assert_eq!(error.code, TransitionCode::IllegalTransition);
    assert_eq!(
        error.message,
        "cannot start EXECUTE: the current step is PLAN (NOT_STARTED); legal next: start PLAN"
    );
    assert_eq!(
        (error.current_step.as_str(), error.step_status.as_str()),
        ("PLAN", "NOT_STARTED")
    );
    // Completing before starting.
    let error = complete_step(&meta, Step::Plan, &passed(), at(1)).unwrap_err();
    assert_eq!(error.legal, ["start PLAN"]);
    assert!(error.message.contains("it is NOT_STARTED, not IN_PROGRESS"));
    // Starting twice.
    let started = start_step(&meta, Step::Plan, "a", at(1)).unwrap();
    let error = start_step(&started, Step::Plan, "b", at(2)).unwrap_err();
    assert_eq!(error.legal, ["complete PLAN"]);
    // Completing another step than the one in progress.
    let error = complete_step(&started, Step::EvaluatePlan, &passed(), at(2)).unwrap_err();
    assert_eq!(error.legal, ["complete PLAN"]);
    // Skipping ahead after PLAN.
    let evaluating = complete_step(&started, Step::Plan, &passed(), at(2)).unwrap();
    let error = start_step(&evaluating, Step::Plan, "a", at(3)).unwrap_err();
    assert_eq!(error.legal, ["start EVALUATE_PLAN"]);
    for step in [
        Step::Execute,
        Step::EvaluateExecution,
        Step::Fix,
        Step::BusinessSync,
    ] {
        assert!(start_step(&evaluating, step, "a", at(3)).is_err(), "{step}");
    }
    // Refusals never change anything (the input is borrowed; nothing to compare but
    // that a legal call still works afterwards).
    assert!(start_step(&evaluating, Step::EvaluatePlan, "a", at(3)).is_ok());
}

#[test]
fn invalid_inputs_are_not_transitions() {
    let meta = fresh();
    for agent in ["", "  ", "a\nb"] {
        let error = start_step(&meta, Step::Plan, agent, at(1)).unwrap_err();
        assert_eq!(error.code, TransitionCode::InvalidInput, "{agent:?}");
    }
    let started = start_step(&meta, Step::Plan, "a", at(1)).unwrap();
    let mut report = passed();
    report.tasks_completed = Some(1);
    let error = complete_step(&started, Step::Plan, &report, at(2)).unwrap_err();
    assert_eq!(error.code, TransitionCode::InvalidInput);
    assert_contains(&error.message, "EXECUTE and FIX only");

    let meta = run(&meta, Step::Plan, &passed(), 1);
    let meta = run(&meta, Step::EvaluatePlan, &passed(), 3);
    let started = start_step(&meta, Step::Execute, "a", at(5)).unwrap();
    let mut report = passed();
    report.tasks_completed = Some(7);
    report.tasks_total = Some(6);
    assert_eq!(
        complete_step(&started, Step::Execute, &report, at(6))
            .unwrap_err()
            .code,
        TransitionCode::InvalidInput
    );
    let mut report = passed();
    report.commit_sha = Some(String::new());
    assert!(complete_step(&started, Step::Execute, &report, at(6)).is_err());
}

#[test]
fn completion_body_is_strict() {
    let body: Completion =
        serde_json::from_value(json!({"outcome": "FAILED", "notes": "flaky"})).unwrap();
    assert_eq!(body.outcome, StepOutcome::Failed);
    assert!(serde_json::from_value::<Completion>(json!({"outcome": "PASSED", "oops": 1})).is_err());
    assert!(serde_json::from_value::<Completion>(json!({"outcome": "DONE"})).is_err());
    assert!(serde_json::from_value::<Completion>(json!({})).is_err());
    assert!(serde_json::from_value::<StepStart>(json!({"agent": "a", "x": 1})).is_err());
}

#[test]
fn every_change_updates_updated_at_and_new_tracks_are_fresh() {
    let id = TrackId::parse("t").unwrap();
    let meta = Metadata::new(id, "bug", at(0));
    assert_eq!(state(&meta), ("PLAN", "NOT_STARTED", "new"));
    let started = start_step(&meta, Step::Plan, "a", at(7)).unwrap();
    assert_eq!(started.updated_at, at(7));
    assert_eq!(started.created_at, at(0));
    let done = complete_step(&started, Step::Plan, &passed(), at(9)).unwrap();
    assert_eq!(done.updated_at, at(9));
}

#[test]
fn openapi_schemas_build() {
    use utoipa::PartialSchema;
    assert_schemas_build([
        Metadata::schema(),
        Completion::schema(),
        StepStart::schema(),
        TransitionError::schema(),
    ]);
    let metadata = serde_json::to_value(Metadata::schema()).unwrap();
    let text = metadata.to_string();
    assert!(
        text.contains("loop_state") && text.contains("track_id"),
        "{text}"
    );
}
