//! Track loop state over HTTP on both databases: v1 import, the seed's transitions,
//! bounds, illegal steps, and optimistic concurrency with ETag / If-Match.

use crate::common::{ADMIN, Backend, TOKEN_A, TOKEN_B, TestApp, expect_problem};
use serde_json::{Value, json};

const TRACK: &str = "auth-cache_20261130";

fn v1() -> Value {
    json!({"track_id": TRACK, "type": "feature", "status": "new",
           "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z",
           "description": "Per-tenant token cache"})
}

async fn put(app: &TestApp, id: &str, body: &Value) -> reqwest::Response {
    app.client
        .put(app.url(&format!("/v1/tracks/{id}")))
        .json(body)
        .send()
        .await
        .unwrap()
}

/// `POST /v1/tracks/{TRACK}/steps/{step}/{action}` with `body`.
async fn step(app: &TestApp, action: &str, step: &str, body: Value) -> reqwest::Response {
    step_if_match(app, action, step, body, None).await
}

/// [`step`] with an `If-Match` header, if any.
async fn step_if_match(
    app: &TestApp,
    action: &str,
    step: &str,
    body: Value,
    if_match: Option<&str>,
) -> reqwest::Response {
    let mut request = app
        .client
        .post(app.url(&format!("/v1/tracks/{TRACK}/steps/{step}/{action}")))
        .json(&body);
    if let Some(tag) = if_match {
        request = request.header("if-match", tag);
    }
    request.send().await.unwrap()
}

/// Start and complete `name` with `outcome`; return the metadata after it.
async fn run_step(app: &TestApp, name: &str, outcome: &str) -> Value {
    let started = step(app, "start", name, json!({"agent": "agent-1"})).await;
    assert_eq!(
        started.status(),
        200,
        "start {name}: {}",
        started.text().await.unwrap()
    );
    let done = step(app, "complete", name, json!({"outcome": outcome})).await;
    assert_eq!(
        done.status(),
        200,
        "complete {name}: {}",
        done.text().await.unwrap()
    );
    done.json().await.unwrap()
}

async fn v1_import_upgrades_and_keeps_fields(app: TestApp) {
    let created = put(&app, TRACK, &v1()).await;
    assert_eq!(created.status(), 201);
    assert_eq!(created.headers()["etag"], "\"1\"");
    let meta: Value = created.json().await.unwrap();
    assert_eq!(meta["version"], 2);
    assert_eq!(meta["loop_state"]["current_step"], "PLAN");
    assert_eq!(meta["loop_state"]["step_status"], "NOT_STARTED");
    assert_eq!(meta["loop_state"]["max_fix_cycles"], 3);
    assert_eq!(meta["loop_state"]["max_plan_revisions"], 3);
    assert_eq!(
        meta["description"], "Per-tenant token cache",
        "unknown fields kept"
    );
    let fetched = app.get(&format!("/v1/tracks/{TRACK}")).await;
    assert_eq!(fetched.headers()["etag"], "\"1\"");
    assert_eq!(fetched.json::<Value>().await.unwrap(), meta);
    let replaced = put(&app, TRACK, &meta).await;
    assert_eq!(replaced.status(), 200);
    assert_eq!(replaced.headers()["etag"], "\"2\"");
    app.shutdown().await;
}

async fn plan_passed_moves_to_evaluate_plan(app: TestApp) {
    put(&app, TRACK, &v1()).await;
    let started: Value = step(&app, "start", "PLAN", json!({"agent": "planner"}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(started["loop_state"]["step_status"], "IN_PROGRESS");
    assert_eq!(
        started["loop_state"]["checkpoints"]["PLAN"]["status"],
        "IN_PROGRESS"
    );
    assert_eq!(
        started["loop_state"]["checkpoints"]["PLAN"]["agent"],
        "planner"
    );
    let done = step(
        &app,
        "complete",
        "PLAN",
        json!({"outcome": "PASSED", "commit_sha": "abc123"}),
    )
    .await;
    let meta: Value = done.json().await.unwrap();
    let plan = &meta["loop_state"]["checkpoints"]["PLAN"];
    assert_eq!(plan["status"], "PASSED");
    assert_eq!(plan["plan_version"], 1);
    assert_eq!(plan["commit_sha"], "abc123");
    assert!(plan["completed_at"].is_string());
    assert_eq!(meta["loop_state"]["current_step"], "EVALUATE_PLAN");
    assert_eq!(meta["loop_state"]["step_status"], "NOT_STARTED");
    app.shutdown().await;
}

async fn plan_revisions_are_bounded(app: TestApp) {
    put(&app, TRACK, &v1()).await;
    for revision in 1..=3 {
        run_step(&app, "PLAN", "PASSED").await;
        let meta = run_step(&app, "EVALUATE_PLAN", "FAILED").await;
        assert_eq!(meta["loop_state"]["plan_revision_count"], revision);
        if revision < 3 {
            assert_eq!(meta["loop_state"]["current_step"], "PLAN");
            assert_eq!(
                meta["loop_state"]["checkpoints"]["PLAN"]["plan_version"],
                revision
            );
        } else {
            assert_eq!(meta["status"], "blocked", "{meta}");
        }
    }
    let refused = step(&app, "start", "PLAN", json!({"agent": "a"})).await;
    let problem = expect_problem(refused, 409, "track_closed").await;
    assert_eq!(problem["legal"], json!([]));
    // Re-importing re-opens the track.
    let mut fresh = v1();
    fresh["status"] = json!("new");
    assert_eq!(put(&app, TRACK, &fresh).await.status(), 200);
    assert_eq!(
        step(&app, "start", "PLAN", json!({"agent": "a"}))
            .await
            .status(),
        200
    );
    app.shutdown().await;
}

async fn execution_with_a_fix_cycle_reaches_complete(app: TestApp) {
    put(&app, TRACK, &v1()).await;
    run_step(&app, "PLAN", "PASSED").await;
    let meta = run_step(&app, "EVALUATE_PLAN", "PASSED").await;
    assert_eq!(meta["loop_state"]["current_step"], "EXECUTE");
    step(&app, "start", "EXECUTE", json!({"agent": "dev"})).await;
    let meta: Value = step(&app, "complete", "EXECUTE",
        json!({"outcome": "PASSED", "tasks_completed": 4, "tasks_total": 4, "last_task": "2.2", "last_commit": "def"}))
        .await.json().await.unwrap();
    assert_eq!(
        meta["loop_state"]["checkpoints"]["EXECUTE"]["tasks_total"],
        4
    );
    assert_eq!(meta["loop_state"]["current_step"], "EVALUATE_EXECUTION");
    let meta = run_step(&app, "EVALUATE_EXECUTION", "FAILED").await;
    assert_eq!(meta["loop_state"]["current_step"], "FIX");
    assert_eq!(meta["loop_state"]["fix_cycle_count"], 1);
    let meta = run_step(&app, "FIX", "PASSED").await;
    assert_eq!(meta["loop_state"]["current_step"], "EVALUATE_EXECUTION");
    let meta = run_step(&app, "EVALUATE_EXECUTION", "PASSED").await;
    assert_eq!(meta["loop_state"]["current_step"], "COMPLETE");
    assert_eq!(meta["status"], "complete");
    expect_problem(
        step(&app, "start", "FIX", json!({"agent": "a"})).await,
        409,
        "track_closed",
    )
    .await;
    app.shutdown().await;
}

async fn fix_cycles_are_bounded_and_blocked_blocks(app: TestApp) {
    put(&app, TRACK, &v1()).await;
    run_step(&app, "PLAN", "PASSED").await;
    run_step(&app, "EVALUATE_PLAN", "PASSED").await;
    run_step(&app, "EXECUTE", "PASSED").await;
    for cycle in 1..=3 {
        let meta = run_step(&app, "EVALUATE_EXECUTION", "FAILED").await;
        assert_eq!(meta["loop_state"]["fix_cycle_count"], cycle);
        if cycle < 3 {
            run_step(&app, "FIX", "PASSED").await;
        } else {
            assert_eq!(meta["status"], "blocked");
        }
    }
    // BLOCKED from any step blocks the track.
    put(&app, TRACK, &v1()).await;
    let meta = run_step(&app, "PLAN", "BLOCKED").await;
    assert_eq!(meta["status"], "blocked");
    assert_eq!(meta["loop_state"]["step_status"], "BLOCKED");
    app.shutdown().await;
}

async fn illegal_steps_list_the_legal_ones(app: TestApp) {
    put(&app, TRACK, &v1()).await;
    let early = step(&app, "complete", "PLAN", json!({"outcome": "PASSED"})).await;
    let problem = expect_problem(early, 409, "illegal_transition").await;
    assert_eq!(problem["legal"], json!(["start PLAN"]));
    let wrong = step(&app, "start", "EXECUTE", json!({"agent": "a"})).await;
    let problem = expect_problem(wrong, 409, "illegal_transition").await;
    assert_eq!(problem["current_step"], "PLAN");
    let unknown = step(&app, "start", "DEPLOY", json!({"agent": "a"})).await;
    let problem = expect_problem(unknown, 409, "unknown_step").await;
    assert_eq!(problem["legal"], json!(["start PLAN"]));
    let bad_outcome = step(&app, "complete", "PLAN", json!({"outcome": "MAYBE"})).await;
    expect_problem(bad_outcome, 422, "invalid_body").await;
    let missing = app
        .client
        .post(app.url("/v1/tracks/nope/steps/PLAN/start"))
        .json(&json!({"agent": "a"}))
        .send()
        .await
        .unwrap();
    expect_problem(missing, 404, "not_found").await;
    app.shutdown().await;
}

async fn bad_track_ids_and_documents_store_nothing(app: TestApp) {
    for id in ["..", "a%2Fb", "a%5Cb", "a%00b", ".hidden", "a%20b"] {
        let response = put(&app, id, &v1()).await;
        assert!(
            response.status().is_client_error(),
            "{id}: {}",
            response.status()
        );
        let problem: Value = response.json().await.unwrap();
        assert!(
            problem["code"] == "invalid_track_id" || problem["code"] == "route_not_found",
            "{id}: {problem}"
        );
    }
    let long = "x".repeat(300);
    expect_problem(put(&app, &long, &v1()).await, 400, "invalid_track_id").await;
    expect_problem(
        put(&app, TRACK, &json!([1, 2])).await,
        422,
        "invalid_metadata",
    )
    .await;
    let mut other = v1();
    other["track_id"] = json!("someone-else");
    expect_problem(put(&app, TRACK, &other).await, 422, "track_id_mismatch").await;
    app.get_problem(&format!("/v1/tracks/{TRACK}"), 404, "not_found")
        .await;
    app.shutdown().await;
}

async fn stale_if_match_is_412_and_no_write_is_lost(app: TestApp) {
    put(&app, TRACK, &v1()).await;
    let stale = step_if_match(&app, "start", "PLAN", json!({"agent": "a"}), Some("\"7\"")).await;
    expect_problem(stale, 412, "stale_etag").await;
    // Two agents read version 1 and both try to start PLAN with it: one wins.
    let (a, b) = tokio::join!(
        step_if_match(
            &app,
            "start",
            "PLAN",
            json!({"agent": "agent-a"}),
            Some("\"1\"")
        ),
        step_if_match(
            &app,
            "start",
            "PLAN",
            json!({"agent": "agent-b"}),
            Some("\"1\"")
        ),
    );
    let mut statuses = [a.status().as_u16(), b.status().as_u16()];
    statuses.sort();
    assert_eq!(statuses, [200, 412]);
    let meta = app.get(&format!("/v1/tracks/{TRACK}")).await;
    assert_eq!(meta.headers()["etag"], "\"2\"");
    // Without If-Match, racing writers are re-checked against the newest version:
    // exactly one completion applies, the others see the step is no longer running.
    let results = futures::future::join_all(
        (0..6).map(|_| step(&app, "complete", "PLAN", json!({"outcome": "PASSED"}))),
    )
    .await;
    let ok = results.iter().filter(|r| r.status() == 200).count();
    let conflicts = results.iter().filter(|r| r.status() == 409).count();
    assert_eq!((ok, conflicts), (1, 5));
    let meta: Value = app.get_json(&format!("/v1/tracks/{TRACK}")).await;
    assert_eq!(
        meta["loop_state"]["checkpoints"]["PLAN"]["plan_version"], 1,
        "applied once"
    );
    let put_stale = app
        .client
        .put(app.url(&format!("/v1/tracks/{TRACK}")))
        .header("if-match", "\"1\"")
        .json(&v1())
        .send()
        .await
        .unwrap();
    expect_problem(put_stale, 412, "stale_etag").await;
    app.shutdown().await;
}

/// The history keeps every write: a FAILED evaluation and its notes are still there
/// once FIX has started the loop again (the document keeps only the latest
/// checkpoint of each step); racing writers leave one entry per applied write.
async fn history_keeps_a_failed_evaluation_after_fix(app: TestApp) {
    put(&app, TRACK, &v1()).await;
    run_step(&app, "PLAN", "PASSED").await;
    run_step(&app, "EVALUATE_PLAN", "PASSED").await;
    run_step(&app, "EXECUTE", "PASSED").await;
    step(
        &app,
        "start",
        "EVALUATE_EXECUTION",
        json!({"agent": "reviewer"}),
    )
    .await;
    let failed = step(
        &app,
        "complete",
        "EVALUATE_EXECUTION",
        json!({"outcome": "FAILED", "notes": "cache key ignores the tenant"}),
    )
    .await;
    assert_eq!(failed.status(), 200);
    // Only the applied one of racing starts of FIX is recorded.
    let starts = futures::future::join_all(
        (0..4).map(|i| step(&app, "start", "FIX", json!({"agent": format!("fixer-{i}")}))),
    )
    .await;
    assert_eq!(starts.iter().filter(|r| r.status() == 200).count(), 1);
    let fixed = step(&app, "complete", "FIX", json!({"outcome": "PASSED"})).await;
    assert_eq!(fixed.status(), 200);
    // The evaluation runs again and passes: its checkpoint forgets the failed verdict.
    run_step(&app, "EVALUATE_EXECUTION", "PASSED").await;
    let meta: Value = app.get_json(&format!("/v1/tracks/{TRACK}")).await;
    assert_ne!(
        meta["loop_state"]["checkpoints"]["EVALUATE_EXECUTION"]["notes"],
        "cache key ignores the tenant",
        "the document alone no longer has the failed verdict"
    );

    let history: Value = app.get_json(&format!("/v1/tracks/{TRACK}/history")).await;
    assert_eq!(history["track_id"], TRACK);
    let events = history["events"].as_array().unwrap();
    let what: Vec<String> = events
        .iter()
        .map(|e| {
            let mut w = e["action"].as_str().unwrap().to_owned();
            for key in ["step", "outcome", "agent"] {
                if let Some(v) = e[key].as_str() {
                    w.push(' ');
                    w.push_str(v);
                }
            }
            w
        })
        .collect();
    let fixer = events
        .iter()
        .find_map(|e| (e["step"] == "FIX" && e["action"] == "started").then(|| e["agent"].clone()))
        .unwrap();
    let fixer = fixer.as_str().unwrap();
    assert_eq!(
        what,
        [
            "imported".to_owned(),
            "started PLAN agent-1".into(),
            "completed PLAN PASSED".into(),
            "started EVALUATE_PLAN agent-1".into(),
            "completed EVALUATE_PLAN PASSED".into(),
            "started EXECUTE agent-1".into(),
            "completed EXECUTE PASSED".into(),
            "started EVALUATE_EXECUTION reviewer".into(),
            "completed EVALUATE_EXECUTION FAILED".into(),
            format!("started FIX {fixer}"),
            "completed FIX PASSED".into(),
            "started EVALUATE_EXECUTION agent-1".into(),
            "completed EVALUATE_EXECUTION PASSED".into(),
        ]
    );
    let verdict = &events[8];
    assert_eq!(verdict["notes"], "cache key ignores the tenant");
    assert_eq!(verdict["current_step"], "FIX");
    assert_eq!(verdict["status"], "in_progress");
    // One entry per revision, in order: no write lost or recorded twice.
    let revisions: Vec<i64> = events
        .iter()
        .map(|e| e["revision"].as_i64().unwrap())
        .collect();
    assert_eq!(revisions, (1..=13).collect::<Vec<_>>());
    assert_eq!(events.last().unwrap()["status"], "complete");

    app.get_problem("/v1/tracks/no-such-track/history", 404, "not_found")
        .await;
    app.get_problem("/v1/tracks/.hidden/history", 400, "invalid_track_id")
        .await;
    app.shutdown().await;
}

async fn spawn_with_tokens(backend: Backend) -> TestApp {
    crate::common::spawn_app_with_project_tokens(backend, |_| {}).await
}

fn v1_of(id: &str) -> Value {
    let mut doc = v1();
    doc["track_id"] = json!(id);
    doc
}

/// `PUT /v1/tracks/{id}[?project_id=…]` with a token.
async fn import_as(
    app: &TestApp,
    token: &str,
    id: &str,
    project: Option<&str>,
) -> reqwest::Response {
    let query = project.map_or_else(String::new, |p| format!("?project_id={p}"));
    let path = format!("/v1/tracks/{id}{query}");
    app.send_as(token, reqwest::Method::PUT, &path, Some(&v1_of(id)))
        .await
}

async fn get_as(app: &TestApp, token: &str, id: &str) -> reqwest::Response {
    app.get_as(token, &format!("/v1/tracks/{id}")).await
}

/// `POST /v1/tracks/{id}/steps/PLAN/{action}` with `body`, as `token`.
async fn step_as(
    app: &TestApp,
    token: &str,
    id: &str,
    action: &str,
    body: Value,
) -> reqwest::Response {
    let path = format!("/v1/tracks/{id}/steps/PLAN/{action}");
    app.send_as(token, reqwest::Method::POST, &path, Some(&body))
        .await
}

async fn start_as(app: &TestApp, token: &str, id: &str) -> reqwest::Response {
    step_as(app, token, id, "start", json!({"agent": "agent-1"})).await
}

async fn tracks_belong_to_projects(backend: Backend) {
    let app = spawn_with_tokens(backend).await;
    // Each token works on its own project's tracks.
    assert_eq!(
        import_as(&app, TOKEN_A, "track-a", Some("proj-a"))
            .await
            .status(),
        201
    );
    assert_eq!(get_as(&app, TOKEN_A, "track-a").await.status(), 200);
    assert_eq!(start_as(&app, TOKEN_A, "track-a").await.status(), 200);
    // A replace without project_id keeps the track's project.
    assert_eq!(
        import_as(&app, TOKEN_A, "track-a", None).await.status(),
        200
    );
    assert_eq!(
        import_as(&app, ADMIN, "track-b", Some("proj-b"))
            .await
            .status(),
        201
    );
    assert_eq!(
        import_as(&app, ADMIN, "track-none", None).await.status(),
        201
    );

    // Another project's track, and one of no project, are refused whole: read,
    // step, replace, or take over; and a limited token cannot make a track of no
    // project, or move its own track out of its projects.
    let before = crate::common::snapshot_tables(&app).await;
    for id in ["track-b", "track-none"] {
        expect_problem(get_as(&app, TOKEN_A, id).await, 403, "forbidden_project").await;
        let history = app
            .get_as(TOKEN_A, &format!("/v1/tracks/{id}/history"))
            .await;
        expect_problem(history, 403, "forbidden_project").await;
        expect_problem(start_as(&app, TOKEN_A, id).await, 403, "forbidden_project").await;
        let complete = step_as(&app, TOKEN_A, id, "complete", json!({"outcome": "PASSED"})).await;
        expect_problem(complete, 403, "forbidden_project").await;
        for project in [None, Some("proj-a")] {
            let replace = import_as(&app, TOKEN_A, id, project).await;
            expect_problem(replace, 403, "forbidden_project").await;
        }
    }
    let loose = import_as(&app, TOKEN_A, "track-new", None).await;
    let problem = expect_problem(loose, 403, "forbidden_project").await;
    assert!(
        problem["detail"].as_str().unwrap().contains("project_id"),
        "{problem}"
    );
    let moved = import_as(&app, TOKEN_A, "track-a", Some("proj-b")).await;
    expect_problem(moved, 403, "forbidden_project").await;
    assert_eq!(
        crate::common::snapshot_tables(&app).await,
        before,
        "a refused call wrote"
    );
    expect_problem(get_as(&app, ADMIN, "track-new").await, 404, "not_found").await;

    // A project id that is not one is a 422 naming the field.
    let blank = import_as(&app, ADMIN, "track-x", Some("")).await;
    let problem = expect_problem(blank, 422, "invalid_field").await;
    assert_eq!(problem["field"], "project_id", "{problem}");

    // An unrestricted token may move a track; then its new project's token owns it.
    assert_eq!(
        import_as(&app, ADMIN, "track-none", Some("proj-a"))
            .await
            .status(),
        200
    );
    assert_eq!(start_as(&app, TOKEN_A, "track-none").await.status(), 200);
    expect_problem(
        get_as(&app, TOKEN_B, "track-none").await,
        403,
        "forbidden_project",
    )
    .await;
    app.shutdown().await;
}

/// Two projects' tokens import one new track id at once: one creates it, in its
/// project; the other may not replace it.
async fn racing_imports_keep_the_creators_project(backend: Backend) {
    let app = spawn_with_tokens(backend).await;
    for round in 0..5 {
        let id = format!("raced-{round}");
        let (a, b) = tokio::join!(
            import_as(&app, TOKEN_A, &id, Some("proj-a")),
            import_as(&app, TOKEN_B, &id, Some("proj-b")),
        );
        let mut statuses = [a.status().as_u16(), b.status().as_u16()];
        statuses.sort();
        assert_eq!(statuses, [201, 403], "{id}");
        let (winner, loser) = if a.status() == 201 {
            (TOKEN_A, TOKEN_B)
        } else {
            (TOKEN_B, TOKEN_A)
        };
        assert_eq!(get_as(&app, winner, &id).await.status(), 200);
        let etag = get_as(&app, ADMIN, &id).await.headers()["etag"].clone();
        assert_eq!(etag, "\"1\"", "{id}: the loser wrote nothing");
        expect_problem(get_as(&app, loser, &id).await, 403, "forbidden_project").await;
    }
    app.shutdown().await;
}

both_backends!(
    tracks_belong_to_projects,
    racing_imports_keep_the_creators_project,
    v1_import_upgrades_and_keeps_fields,
    plan_passed_moves_to_evaluate_plan,
    plan_revisions_are_bounded,
    execution_with_a_fix_cycle_reaches_complete,
    fix_cycles_are_bounded_and_blocked_blocks,
    illegal_steps_list_the_legal_ones,
    bad_track_ids_and_documents_store_nothing,
    stale_if_match_is_412_and_no_write_is_lost,
    history_keeps_a_failed_evaluation_after_fix,
);
