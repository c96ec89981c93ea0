//! Task-list gating over HTTP on both databases: validation, persistence with
//! edges and team_pk, retry/escalation accounting, transitions with cascade,
//! barrier vs pipeline readiness, status scoping, teams, and bad input.

use std::collections::BTreeSet;

use crate::common::{Backend, TestApp, expect_problem, server_id, task_ids};
use serde_json::{Value, json};

fn task(
    id: &str,
    persona: &str,
    wave: i64,
    deps: &[&str],
    reads: &[&str],
    writes: &[&str],
) -> Value {
    json!({
        "task_id": id, "assigned_persona": persona, "parallel_group": wave,
        "depends_on": deps, "reads": reads, "writes": writes, "description": format!("do {id}"),
    })
}

/// a → b, a → c, b → d, c → d
fn diamond() -> Value {
    json!([
        task("a", "p1", 1, &[], &[], &["a.py"]),
        task("b", "p2", 2, &["a"], &["a.py"], &["b.py"]),
        task("c", "p3", 2, &["a"], &["a.py"], &["c.py"]),
        task("d", "p4", 3, &["b", "c"], &["b.py", "c.py"], &["d.py"]),
    ])
}

async fn create(app: &TestApp, project: &str, team: Option<&str>, tasks: Value) -> Value {
    let mut body = json!({"project_id": project, "created_by": "pm", "tasks": tasks});
    if let Some(team) = team {
        body["team_pk"] = json!(team);
    }
    let response = app.post_json("/v1/task-lists", &body).await;
    let status = response.status();
    let location = response
        .headers()
        .get("location")
        .map(|v| v.to_str().unwrap().to_owned());
    let list: Value = response.json().await.unwrap();
    assert_eq!(status, 201, "{list}");
    assert_eq!(
        location.unwrap(),
        format!("/v1/task-lists/{}", list["id"].as_str().unwrap())
    );
    list
}

async fn set_status(app: &TestApp, id: &str, body: Value) -> reqwest::Response {
    app.patch_json(&format!("/v1/tasks/{id}"), &body).await
}

async fn status_of(app: &TestApp, list_id: &str) -> std::collections::HashMap<String, Value> {
    let list: Value = app.get_json(&format!("/v1/task-lists/{list_id}")).await;
    list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["task_id"].as_str().unwrap().to_owned(), t.clone()))
        .collect()
}

async fn validate_reports_every_violation_in_gate_order(app: TestApp) {
    let planner_output = include_str!("../../examples/planner_output.md");
    let ok: Value = app
        .post_for_json(
            "/v1/task-lists/validate",
            &json!({
                "planner_output": planner_output,
                "existing_files": ["src/http/client.py", "src/tenancy/model.py", "README.md"],
            }),
        )
        .await;
    assert_eq!(ok["valid"], true, "{ok}");
    assert_eq!(ok["waves"], json!([["t-1", "t-2"], ["t-3"], ["t-4"]]));

    // Same-wave dependency, orphan, write contention, unsatisfied read.
    let bad = json!([
        task("x", "p1", 1, &[], &[], &["f.py"]),
        task("y", "p2", 1, &["x", "ghost"], &["nowhere.py"], &["f.py"]),
    ]);
    let report: Value = app
        .post_for_json("/v1/task-lists/validate", &json!({"tasks": bad}))
        .await;
    assert_eq!(report["valid"], false);
    let codes: Vec<&str> = report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_str().unwrap())
        .collect();
    assert_eq!(
        codes,
        [
            "orphan_dependency",
            "wave_order",
            "write_contention",
            "unsatisfied_read"
        ],
        "{report}"
    );
    assert_eq!(report["errors"][0]["task_ids"], json!(["y", "ghost"]));

    // Unparseable planner output: 200 with one synthesis_failure.
    let failure: Value = app
        .post_for_json(
            "/v1/task-lists/validate",
            &json!({"planner_output": "```json\n[{\n```"}),
        )
        .await;
    assert_eq!(failure["valid"], false);
    assert_eq!(failure["errors"].as_array().unwrap().len(), 1);
    assert_eq!(failure["errors"][0]["code"], "synthesis_failure");
    app.shutdown().await;
}

async fn validate_refuses_malformed_requests(app: TestApp) {
    app.post_problem(
        "/v1/task-lists/validate",
        &json!({"existing_files": []}),
        422,
        "invalid_body",
    )
    .await;
    app.post_problem(
        "/v1/task-lists/validate",
        &json!({"tasks": [], "planner_output": "x"}),
        422,
        "invalid_body",
    )
    .await;
    let problem = app
        .post_problem(
            "/v1/task-lists/validate",
            &json!({"taks": []}),
            422,
            "invalid_body",
        )
        .await;
    assert!(
        problem["detail"].as_str().unwrap().contains("taks"),
        "{problem}"
    );
    let problem = app
        .post_problem(
            "/v1/task-lists/validate",
            &json!({"tasks": [], "existing_files": "README.md"}),
            422,
            "invalid_body",
        )
        .await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("existing_files"),
        "{problem}"
    );
    let syntax = app
        .post_body(
            "/v1/task-lists/validate",
            "application/json",
            "{\"tasks\": [",
        )
        .await;
    expect_problem(syntax, 400, "malformed_json").await;
    let not_json = app
        .post_body("/v1/task-lists/validate", "text/plain", "[]")
        .await;
    expect_problem(not_json, 415, "unsupported_media_type").await;
    // 100,000-deep nesting stops at the parser's recursion limit, without a crash.
    // 100,000-deep nesting: the task list is read without recursing into what it
    // skips, so this is a list whose entry is not an object — a synthesis failure
    // (200 on the dry run, 422 on create), never a crash or a stack overflow.
    let nesting = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep = format!("{{\"tasks\": {nesting}}}");
    let nested = app
        .post_body("/v1/task-lists/validate", "application/json", deep)
        .await;
    assert_eq!(nested.status(), 200);
    let report: Value = nested.json().await.unwrap();
    assert_eq!(report["errors"][0]["code"], "synthesis_failure", "{report}");
    let deep_create =
        format!("{{\"project_id\": \"p\", \"created_by\": \"pm\", \"tasks\": {nesting}}}");
    let nested = app
        .post_body("/v1/task-lists", "application/json", deep_create)
        .await;
    expect_problem(nested, 422, "synthesis_failure").await;
    // Deep nesting elsewhere in the body stops at the parser's recursion limit.
    let deep_field = format!("{{\"existing_files\": {nesting}, \"tasks\": []}}");
    let nested = app
        .post_body("/v1/task-lists/validate", "application/json", deep_field)
        .await;
    assert!(nested.status().is_client_error(), "{}", nested.status());
    assert_eq!(nested.headers()["content-type"], "application/problem+json");
    // Over the 16 MiB default limit: the answer comes from the headers alone, before
    // the body is sent (a client still writing would see the connection close).
    let answer = crate::common::refused_from_headers(
        &app,
        "POST",
        "/v1/task-lists/validate",
        17 * 1024 * 1024,
    )
    .await;
    assert!(answer.contains("\"code\":\"body_too_large\""), "{answer}");
    // A chunked body (no length up front) is cut at the same limit by the extractor.
    // The server answers and closes while the client may still be writing, so under
    // load the client can see a broken pipe before it reads the answer: try a few
    // times, and require one 413 answer (a server that never answers 413 still fails).
    let mut last_error = None;
    let mut chunked = None;
    for _ in 0..5 {
        let chunks = futures::stream::iter(
            (0..18).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1024 * 1024])),
        );
        match app
            .client
            .post(app.url("/v1/task-lists/validate"))
            .header("content-type", "application/json")
            .body(reqwest::Body::wrap_stream(chunks))
            .send()
            .await
        {
            Ok(answer) => {
                chunked = Some(answer);
                break;
            }
            Err(error) => last_error = Some(error),
        }
    }
    let chunked = chunked.unwrap_or_else(|| {
        panic!("the server reads the body up to the limit, then answers: {last_error:?}")
    });
    // The server closes the connection with the rest of the body unread, so TCP
    // may reset it before the client has read the problem body: the status and
    // content type arrive first and are the contract; the body is checked when it
    // survives.
    assert_eq!(chunked.status(), 413);
    assert_eq!(
        chunked.headers()["content-type"],
        "application/problem+json"
    );
    if let Ok(body) = chunked.json::<serde_json::Value>().await {
        assert_eq!(body["code"], "body_too_large", "{body}");
    }
    app.shutdown().await;
}

async fn created_list_keeps_edges_team_and_extra_fields(app: TestApp) {
    let mut tasks = diamond();
    tasks[0]["estimate_hours"] = json!(3);
    tasks[3]["depends_on"] = json!(["b", "c", "b"]); // duplicate: a warning, one edge
    tasks[3]["reviews"] = json!(null);
    let list = create(&app, "proj", Some("cycle-1"), tasks).await;
    assert_eq!(list["project_id"], "proj");
    assert_eq!(list["team_pk"], "cycle-1");
    assert_eq!(list["created_by"], "pm");
    let tasks = list["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 4);
    for t in tasks {
        assert_eq!(t["status"], "pending");
        assert_ne!(t["id"], t["task_id"], "server ids differ from local ids");
    }
    assert_eq!(tasks[0]["extra"], json!({"estimate_hours": 3}));
    assert_eq!(tasks[3]["depends_on"], json!(["b", "c"]));
    assert_eq!(tasks[3]["reads"], json!(["b.py", "c.py"]));
    // What GET returns is what POST answered.
    let id = list["id"].as_str().unwrap();
    let fetched: Value = app.get_json(&format!("/v1/task-lists/{id}")).await;
    assert_eq!(fetched, list);
    app.shutdown().await;
}

async fn rejected_lists_are_counted_per_cycle_and_escalate(app: TestApp) {
    let bad = json!([task("a", "p", 1, &["a"], &[], &[])]);
    let submit = |team: &'static str, tasks: Value| {
        let body =
            json!({"project_id": "proj", "team_pk": team, "created_by": "pm", "tasks": tasks});
        let app = &app;
        async move { app.post_json("/v1/task-lists", &body).await }
    };
    let first = expect_problem(submit("c1", bad.clone()).await, 422, "dag_invalid").await;
    assert_eq!(
        (first["attempt"].clone(), first["escalate"].clone()),
        (json!(1), json!(false))
    );
    assert!(first["escalation"].is_null());
    assert_eq!(first["errors"][0]["code"], "cycle");
    assert!(
        first["reprompt"]
            .as_str()
            .unwrap()
            .starts_with("CycleError: "),
        "{first}"
    );
    // Another cycle of the same project has its own count.
    let other = expect_problem(submit("c2", bad.clone()).await, 422, "dag_invalid").await;
    assert_eq!(other["attempt"], 1);
    let second = expect_problem(submit("c1", bad.clone()).await, 422, "dag_invalid").await;
    assert_eq!(
        (second["attempt"].clone(), second["escalate"].clone()),
        (json!(2), json!(true))
    );
    assert_eq!(second["escalation"], "dag-invalid");
    // Nothing was stored by the rejections: the project has no list yet.
    app.get_problem("/v1/projects/proj/status", 404, "project_not_found")
        .await;
    // An accepted list resets the count.
    create(&app, "proj", Some("c1"), diamond()).await;
    let after = expect_problem(submit("c1", bad.clone()).await, 422, "dag_invalid").await;
    assert_eq!(after["attempt"], 1);
    // A synthesis failure escalates at once.
    let body = json!({"project_id": "proj", "team_pk": "c3", "created_by": "pm", "planner_output": "no list here"});
    let synthesis = app
        .post_problem("/v1/task-lists", &body, 422, "synthesis_failure")
        .await;
    assert_eq!(
        (
            synthesis["escalate"].clone(),
            synthesis["escalation"].clone()
        ),
        (json!(true), json!("synthesis-failure"))
    );
    app.shutdown().await;
}

async fn bad_task_fields_name_the_field_and_store_nothing(app: TestApp) {
    for (value, needle) in [
        (json!(null), "null parallel_group"),
        (json!(0), "got 0"),
        (json!(-1), "got -1"),
        (json!(true), "got true"),
        (json!(1.5), "got 1.5"),
        (json!("2"), "got"),
    ] {
        let mut tasks = json!([task("t-1", "p", 1, &[], &[], &[])]);
        tasks[0]["parallel_group"] = value.clone();
        let body = json!({"project_id": "shape", "created_by": "pm", "tasks": tasks});
        let problem = app
            .post_problem("/v1/task-lists", &body, 422, "dag_invalid")
            .await;
        let error = &problem["errors"][0];
        assert_eq!(
            error["code"], "invalid_parallel_group",
            "{value}: {problem}"
        );
        assert_eq!(error["task_ids"], json!(["t-1"]));
        assert!(
            error["message"].as_str().unwrap().contains(needle),
            "{value}: {error}"
        );
    }
    // U+0000 cannot be stored on Postgres: refused before the gate, naming the field.
    let nul_id = json!([task("a\u{0}b", "p", 1, &[], &[], &[])]);
    let body = json!({"project_id": "shape", "created_by": "pm", "tasks": nul_id});
    let problem = app
        .post_problem("/v1/task-lists", &body, 422, "invalid_field")
        .await;
    assert_eq!(problem["field"], "/tasks/0/task_id", "{problem}");
    let long_id = json!([task(&"x".repeat(10_000), "p", 1, &[], &[], &[])]);
    let body = json!({"project_id": "shape", "created_by": "pm", "tasks": long_id});
    let problem = app
        .post_problem("/v1/task-lists", &body, 422, "dag_invalid")
        .await;
    assert!(
        problem.to_string().len() < 5_000,
        "a 10 KB id is not echoed in full"
    );
    let bad_project = json!({"project_id": "", "created_by": "pm", "tasks": diamond()});
    let problem = app
        .post_problem("/v1/task-lists", &bad_project, 422, "invalid_field")
        .await;
    assert_eq!(problem["field"], "project_id");
    // Nothing was stored: the project has no list, so its status is unknown.
    app.get_problem("/v1/projects/shape/status", 404, "project_not_found")
        .await;
    app.shutdown().await;
}

async fn failure_cascades_through_a_diamond(app: TestApp) {
    let list = create(&app, "proj", None, diamond()).await;
    let list_id = list["id"].as_str().unwrap();
    let a = server_id(&list, "a");
    let running = set_status(&app, &a, json!({"status": "running"})).await;
    let running: Value = running.json().await.unwrap();
    assert_eq!(running["attempts"], 1);
    assert!(running["started_at"].is_string());
    let failed = set_status(
        &app,
        &a,
        json!({"status": "failed", "notes": "tests broke"}),
    )
    .await;
    assert_eq!(failed.status(), 200);
    let failed: Value = failed.json().await.unwrap();
    let mut cascaded: Vec<String> = failed["cascaded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    cascaded.sort();
    let mut expected = vec![
        server_id(&list, "b"),
        server_id(&list, "c"),
        server_id(&list, "d"),
    ];
    expected.sort();
    assert_eq!(cascaded, expected, "each dependent abandoned once");
    let tasks = status_of(&app, list_id).await;
    assert_eq!(tasks["a"]["status"], "failed");
    assert_eq!(tasks["a"]["notes"], "tests broke");
    for dependent in ["b", "c", "d"] {
        assert_eq!(tasks[dependent]["status"], "abandoned");
        assert_eq!(tasks[dependent]["abandon_category"], "blocked");
        assert_eq!(tasks[dependent]["upstream_task_id"], a.as_str());
        assert_eq!(tasks[dependent]["attempts"], 0, "no attempt charged");
    }
    app.shutdown().await;
}

async fn abandon_cascades_down_a_long_chain_but_spares_terminal_tasks(app: TestApp) {
    let n = 300;
    let tasks: Vec<Value> = (0..n)
        .map(|i| {
            let deps: Vec<String> = if i == 0 {
                vec![]
            } else {
                vec![format!("t{}", i - 1)]
            };
            let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
            task(&format!("t{i}"), "p", i as i64 + 1, &deps, &[], &[])
        })
        .collect();
    let list = create(&app, "chain", None, Value::Array(tasks)).await;
    // t0 and t1 finish; abandoning t1 afterwards is illegal (terminal), so abandon t2.
    for id in ["t0", "t1"] {
        let sid = server_id(&list, id);
        assert_eq!(
            set_status(&app, &sid, json!({"status": "running"}))
                .await
                .status(),
            200
        );
        assert_eq!(
            set_status(&app, &sid, json!({"status": "done"}))
                .await
                .status(),
            200
        );
    }
    let t2 = server_id(&list, "t2");
    let response = set_status(
        &app,
        &t2,
        json!({"status": "abandoned", "abandon_category": "scope"}),
    )
    .await;
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["abandon_category"], "scope");
    assert_eq!(body["cascaded"].as_array().unwrap().len(), n - 3);
    let tasks = status_of(&app, list["id"].as_str().unwrap()).await;
    assert_eq!(tasks["t0"]["status"], "done");
    assert_eq!(tasks["t1"]["status"], "done");
    assert_eq!(tasks[&format!("t{}", n - 1)]["status"], "abandoned");
    assert_eq!(
        tasks[&format!("t{}", n - 1)]["upstream_task_id"],
        t2.as_str()
    );
    app.shutdown().await;
}

async fn illegal_transitions_are_409_and_repeats_are_idempotent(app: TestApp) {
    let list = create(&app, "proj", None, diamond()).await;
    let a = server_id(&list, "a");
    let problem = expect_problem(
        set_status(&app, &a, json!({"status": "done"})).await,
        409,
        "illegal_transition",
    )
    .await;
    assert_eq!(problem["from"], "pending");
    assert_eq!(problem["allowed"], json!(["running", "abandoned"]));
    set_status(&app, &a, json!({"status": "running"})).await;
    let again: Value = set_status(&app, &a, json!({"status": "running"}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["attempts"], 1, "a repeat charges nothing");
    assert_eq!(again["cascaded"], json!([]));
    set_status(&app, &a, json!({"status": "done"})).await;
    expect_problem(
        set_status(&app, &a, json!({"status": "running"})).await,
        409,
        "illegal_transition",
    )
    .await;
    // Field checks, then unknown and malformed ids: (task, body, status, code).
    let b = server_id(&list, "b");
    let unknown = uuid::Uuid::new_v4().to_string();
    let refusals = [
        (&*b, json!({"status": "abandoned"}), 422, "invalid_field"),
        (
            &*b,
            json!({"status": "running", "abandon_category": "scope"}),
            422,
            "invalid_field",
        ),
        (&*b, json!({"status": "finished"}), 422, "invalid_body"),
        (
            &*b,
            json!({"status": "abandoned", "abandon_category": "bored"}),
            422,
            "invalid_body",
        ),
        (&*unknown, json!({"status": "running"}), 404, "not_found"),
        (
            "not-a-uuid",
            json!({"status": "running"}),
            400,
            "invalid_path",
        ),
    ];
    for (task, body, status, code) in refusals {
        expect_problem(set_status(&app, task, body).await, status, code).await;
    }
    app.get_problem(&format!("/v1/task-lists/{unknown}"), 404, "not_found")
        .await;
    app.get_problem(&format!("/v1/task-lists/{unknown}/ready"), 404, "not_found")
        .await;
    app.shutdown().await;
}

async fn barrier_waits_for_the_wave_pipeline_does_not(app: TestApp) {
    // w1: a, x (x is slow); w2: b depends only on a.
    let tasks = json!([
        task("a", "p1", 1, &[], &[], &["a.py"]),
        task("x", "p2", 1, &[], &[], &["x.py"]),
        task("b", "p3", 2, &["a"], &["a.py"], &["b.py"]),
    ]);
    let list = create(&app, "proj", None, tasks).await;
    let id = list["id"].as_str().unwrap();
    let ready = |mode: &'static str| {
        let app = &app;
        async move {
            let r: Value = app
                .get_json(&format!("/v1/task-lists/{id}/ready?mode={mode}"))
                .await;
            (r["wave"].clone(), task_ids(&r))
        }
    };
    assert_eq!(
        ready("barrier").await,
        (json!(1), vec!["a".to_owned(), "x".to_owned()])
    );
    let a = server_id(&list, "a");
    let x = server_id(&list, "x");
    for sid in [&a, &x] {
        set_status(&app, sid, json!({"status": "running"})).await;
    }
    set_status(&app, &a, json!({"status": "done"})).await;
    // x still runs: barrier offers nothing, pipeline offers b.
    assert_eq!(ready("barrier").await, (json!(1), vec![]));
    assert_eq!(ready("pipeline").await, (json!(2), vec!["b".to_owned()]));
    let default: Value = app.get_json(&format!("/v1/task-lists/{id}/ready")).await;
    assert_eq!(default["mode"], "barrier");
    app.get_problem(
        &format!("/v1/task-lists/{id}/ready?mode=eager"),
        400,
        "invalid_query",
    )
    .await;
    set_status(&app, &x, json!({"status": "done"})).await;
    assert_eq!(ready("barrier").await, (json!(2), vec!["b".to_owned()]));
    app.shutdown().await;
}

/// Pipeline mode offers, over more candidates than one read takes, every unblocked
/// task whose writes race neither a running task's nor an earlier offered task's.
async fn pipeline_passes_over_racing_writes_across_batches(app: TestApp) {
    let mut tasks: Vec<Value> = (0..200)
        .map(|i| task(&format!("t{i}"), "p", 1, &[], &[], &[&format!("f{i}.py")]))
        .collect();
    // Wave 2, no dependencies: t200..t249 write what t0..t49 write.
    tasks.extend((200..300).map(|i| {
        let writes = if i < 250 {
            format!("f{}.py", i - 200)
        } else {
            format!("g{i}.py")
        };
        task(&format!("t{i}"), "p", 2, &[], &[], &[&writes])
    }));
    let list = create(&app, "proj", None, json!(tasks)).await;
    let id = list["id"].as_str().unwrap();
    set_status(&app, &server_id(&list, "t5"), json!({"status": "running"})).await;
    let ready: Value = app
        .get_json(&format!("/v1/task-lists/{id}/ready?mode=pipeline"))
        .await;
    let offered: Vec<&str> = ready["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..200)
        .filter(|i| *i != 5)
        .chain(250..300)
        .map(|i| format!("t{i}"))
        .collect();
    assert_eq!(offered, expected);
    assert_eq!(ready["wave"], 1);
    app.shutdown().await;
}

async fn status_is_scoped_per_cycle(app: TestApp) {
    let one = create(&app, "shared", Some("cycle-A"), diamond()).await;
    create(
        &app,
        "shared",
        Some("cycle-B"),
        json!([task("solo", "p", 1, &[], &[], &[])]),
    )
    .await;
    let a = server_id(&one, "a");
    set_status(&app, &a, json!({"status": "running"})).await;

    let cycle_a: Value = app
        .get_json("/v1/projects/shared/status?team_pk=cycle-A")
        .await;
    assert_eq!(cycle_a["scope"], "cycle");
    assert_eq!(cycle_a["team_pk"], "cycle-A");
    assert_eq!(cycle_a["counts"]["pending"], 3);
    assert_eq!(cycle_a["counts"]["running"], 1);
    assert_eq!(cycle_a["in_flight"], 1);
    assert_eq!(cycle_a["active_wave"], 1);
    assert_eq!(cycle_a["waves"].as_array().unwrap().len(), 3);

    let cycle_b: Value = app
        .get_json("/v1/projects/shared/status?team_pk=cycle-B")
        .await;
    assert_eq!(cycle_b["scope"], "cycle");
    assert_eq!(cycle_b["counts"]["pending"], 1);
    assert_eq!(cycle_b["in_flight"], 0);

    // An unknown cycle is not widened to the project (docs/mcp.md, `project_status`): 404 naming it.
    let unknown = app
        .get_problem(
            "/v1/projects/shared/status?team_pk=nope",
            404,
            "team_not_found",
        )
        .await;
    assert_eq!(unknown["field"], "team_pk");
    let whole: Value = app.get_json("/v1/projects/shared/status").await;
    assert_eq!(whole["scope"], "project");
    assert_eq!(whole["counts"]["running"], 1);
    app.shutdown().await;
}

async fn teams_register_per_project(app: TestApp) {
    let first = app
        .post_json(
            "/v1/projects/p1/teams",
            &json!({"team_pk": "c1", "lead_role": "pm"}),
        )
        .await;
    assert_eq!(first.status(), 201);
    let second = app
        .post_json("/v1/projects/p1/teams", &json!({"team_pk": "c2"}))
        .await;
    assert_eq!(second.status(), 201);
    app.post_problem(
        "/v1/projects/p1/teams",
        &json!({"team_pk": "c1"}),
        409,
        "team_exists",
    )
    .await;
    let other_project = app
        .post_json("/v1/projects/p2/teams", &json!({"team_pk": "c1"}))
        .await;
    assert_eq!(other_project.status(), 201);
    let teams: Value = app.get_json("/v1/projects/p1/teams").await;
    let pks: Vec<&str> = teams
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["team_pk"].as_str().unwrap())
        .collect();
    assert_eq!(pks, ["c1", "c2"]);
    assert_eq!(teams[0]["lead_role"], "pm");
    app.post_problem(
        "/v1/projects/p1/teams",
        &json!({"team_pk": ""}),
        422,
        "invalid_field",
    )
    .await;
    app.shutdown().await;
}

async fn graph_renders_waves_as_text(app: TestApp) {
    let list = create(&app, "proj", None, diamond()).await;
    let id = list["id"].as_str().unwrap();
    let mermaid = app.get(&format!("/v1/task-lists/{id}/graph")).await;
    assert!(
        mermaid.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = mermaid.text().await.unwrap();
    assert!(text.starts_with("flowchart"), "{text}");
    assert!(text.contains("Wave 3"), "{text}");
    let dot = app
        .get(&format!("/v1/task-lists/{id}/graph?format=dot"))
        .await
        .text()
        .await
        .unwrap();
    assert!(
        dot.contains("digraph") && dot.contains("rank=same"),
        "{dot}"
    );
    app.get_problem(
        &format!("/v1/task-lists/{id}/graph?format=svg"),
        400,
        "invalid_query",
    )
    .await;
    app.shutdown().await;
}

async fn large_lists_persist_in_batches(app: TestApp) {
    // More rows than one INSERT batch holds, with edges across batches.
    let n = 2_500;
    let tasks: Vec<Value> = (0..n)
        .map(|i| {
            let wave = i / 100 + 1;
            let deps: Vec<String> = if wave > 1 {
                vec![format!("t{}", i - 100)]
            } else {
                vec![]
            };
            let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
            task(
                &format!("t{i}"),
                "p",
                wave as i64,
                &deps,
                &[],
                &[&format!("f{i}.py")],
            )
        })
        .collect();
    let list = create(&app, "big", None, Value::Array(tasks)).await;
    let id = list["id"].as_str().unwrap().to_owned();
    // Read back what the database holds, not the POST echo: every row and edge.
    let (ids, edges) = stored_tasks_and_edges(&app, &id).await;
    let expected_ids: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
    assert_eq!(ids, expected_ids);
    let expected_edges: BTreeSet<(String, String)> = (100..n)
        .map(|i| (format!("t{i}"), format!("t{}", i - 100)))
        .collect();
    assert_eq!(edges.len(), n - 100);
    assert_eq!(edges, expected_edges);
    let fetched: Value = app.get_json(&format!("/v1/task-lists/{id}")).await;
    assert_eq!(fetched["tasks"].as_array().unwrap().len(), n);
    assert_eq!(
        fetched["tasks"][n - 1]["depends_on"],
        json!([format!("t{}", n - 101)])
    );
    app.shutdown().await;
}

/// The task ids of a stored list in submission order, and its edges as
/// `(task, depends_on)` pairs of task ids, straight from the database.
async fn stored_tasks_and_edges(
    app: &TestApp,
    list_id: &str,
) -> (Vec<String>, BTreeSet<(String, String)>) {
    use sqlx::Connection as _;
    let list_id = uuid::Uuid::parse_str(list_id).unwrap();
    let tasks = "SELECT task_id FROM tasks WHERE task_list_id = $1 ORDER BY position";
    let edges = "SELECT t.task_id, d.task_id FROM task_dependencies e \
                 JOIN tasks t ON t.id = e.task_id JOIN tasks d ON d.id = e.depends_on \
                 WHERE t.task_list_id = $1";
    let url = &app.database.url;
    let (ids, pairs): (Vec<String>, Vec<(String, String)>) = match app.backend {
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
            let ids = sqlx::query_scalar(tasks).bind(list_id).fetch_all(&mut conn);
            let ids = ids.await.unwrap();
            let pairs = sqlx::query_as(edges).bind(list_id).fetch_all(&mut conn);
            (ids, pairs.await.unwrap())
        }
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            let ids = sqlx::query_scalar(tasks).bind(list_id).fetch_all(&mut conn);
            let ids = ids.await.unwrap();
            let pairs = sqlx::query_as(edges).bind(list_id).fetch_all(&mut conn);
            (ids, pairs.await.unwrap())
        }
    };
    (ids, pairs.into_iter().collect())
}

/// 500 tasks, each depending on a task that does not exist: 500 errors.
fn five_hundred_orphans() -> Value {
    let tasks: Vec<Value> = (0..500)
        .map(|i| {
            task(
                &format!("t{i}"),
                "p",
                1,
                &[&format!("ghost{i}")],
                &[],
                &[&format!("f{i}.py")],
            )
        })
        .collect();
    Value::Array(tasks)
}

/// A rejected list answers the first 100 errors (docs/api.md, "Bounded gating answers": a 12 MB list once got a
/// 52.6 MB answer), with the count of all of them by code, and a re-prompt that
/// lists those 100 and says how many more of which kind to fix; `validate` answers
/// the same, and the limit is a setting.
async fn rejected_large_lists_answer_the_first_errors_and_the_counts(backend: Backend) {
    let app = crate::common::spawn_app(backend).await;
    let body = json!({"project_id": "proj", "created_by": "pm", "tasks": five_hundred_orphans()});
    let problem = app
        .post_problem("/v1/task-lists", &body, 422, "dag_invalid")
        .await;
    let errors = problem["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 100, "the first 100 errors only");
    assert_eq!(errors[0]["task_ids"], json!(["t0", "ghost0"]));
    assert_eq!(errors[99]["task_ids"], json!(["t99", "ghost99"]));
    assert_eq!(problem["error_count"], 500, "{}", problem["error_count"]);
    assert_eq!(problem["error_counts"], json!({"orphan_dependency": 500}));
    assert_eq!(problem["truncated"], true);
    let reprompt = problem["reprompt"].as_str().unwrap();
    let lines: Vec<&str> = reprompt.lines().collect();
    assert_eq!(lines.len(), 101, "{reprompt}");
    assert!(lines[0].starts_with("OrphanDepsError: "), "{}", lines[0]);
    assert!(
        lines[100].contains("400 more errors")
            && lines[100].contains("400 orphan_dependency")
            && lines[100].contains("resubmit"),
        "{}",
        lines[100]
    );

    let report: Value = app
        .post_for_json(
            "/v1/task-lists/validate",
            &json!({"tasks": five_hundred_orphans()}),
        )
        .await;
    assert_eq!(report["errors"].as_array().unwrap().len(), 100);
    assert_eq!(
        (report["error_count"].clone(), report["truncated"].clone()),
        (json!(500), json!(true))
    );
    assert_eq!(report["error_counts"], json!({"orphan_dependency": 500}));
    // A short list is whole.
    let diamond_report: Value = app
        .post_for_json("/v1/task-lists/validate", &json!({"tasks": diamond()}))
        .await;
    assert_eq!(
        (
            diamond_report["error_count"].clone(),
            diamond_report["truncated"].clone()
        ),
        (json!(0), json!(false))
    );
    app.shutdown().await;

    let app = crate::common::spawn_app_with(backend, |s| s.max_gating_errors = 3).await;
    let problem = app
        .post_problem("/v1/task-lists", &body, 422, "dag_invalid")
        .await;
    assert_eq!(problem["errors"].as_array().unwrap().len(), 3);
    assert_eq!(problem["error_count"], 500);
    assert_eq!(problem["reprompt"].as_str().unwrap().lines().count(), 4);
    app.shutdown().await;
}

/// Large gating bodies take their size from `PLANGATE_GATING_BUDGET_BYTES` before
/// they are read (docs/api.md, "Bounded gating answers"): while a client holds
/// most of it (headers sent, half its body not), another large list waits, then
/// answers 503 `server_busy` with `Retry-After`; once the first is answered, the
/// gating memory is back. Small bodies never wait.
async fn large_gating_bodies_share_the_gating_memory(backend: Backend) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = crate::common::spawn_app_with(backend, |s| s.gating_memory_bytes = 400 * 1024).await;
    // About 300 KiB: over the 256 KiB a body may have without asking the gating memory.
    let tasks: Vec<Value> = (0..1000)
        .map(|i| {
            let mut t = task(&format!("t{i}"), "p", 1, &[], &[], &[&format!("f{i}.py")]);
            t["description"] = json!("x".repeat(280));
            t
        })
        .collect();
    let body = json!({"tasks": tasks}).to_string();
    assert!(
        body.len() > 256 * 1024 && body.len() < 400 * 1024,
        "{}",
        body.len()
    );

    let mut stalled = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let head = format!(
        "POST /v1/task-lists/validate HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let (first_half, second_half) = body.as_bytes().split_at(body.len() / 2);
    stalled.write_all(head.as_bytes()).await.unwrap();
    stalled.write_all(first_half).await.unwrap();
    // Sequencing only (nothing is timed): let the server take the stalled request's
    // share before the next large body arrives.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;

    let post = || {
        app.client
            .post(app.url("/v1/task-lists/validate"))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
    };
    let refused = post().await.unwrap();
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned()),
        Some("1".to_owned())
    );
    let problem = expect_problem(refused, 503, "server_busy").await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("PLANGATE_GATING_BUDGET_BYTES"),
        "{problem}"
    );
    // A small list does not wait for the gating memory.
    let small = app
        .post_json("/v1/task-lists/validate", &json!({"tasks": diamond()}))
        .await;
    assert_eq!(small.status(), 200);

    stalled.write_all(second_half).await.unwrap();
    let mut answer = String::new();
    stalled.read_to_string(&mut answer).await.unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "{}",
        &answer[..answer.len().min(200)]
    );
    let accepted = post().await.unwrap();
    assert_eq!(accepted.status(), 200, "the budget is back");
    app.shutdown().await;
}

/// `?limit=` and `?cursor=` page a list in submission order; the last page says
/// no `next_cursor`; a bad limit or cursor is a 400 naming it.
async fn lists_come_in_pages_on_request(app: TestApp) {
    let tasks: Vec<Value> = (0..7)
        .map(|i| task(&format!("t{i}"), "p", 1, &[], &[], &[]))
        .collect();
    let list = create(&app, "proj", None, Value::Array(tasks)).await;
    let path = format!("/v1/task-lists/{}", list["id"].as_str().unwrap());
    let whole: Value = app.get_json(&path).await;
    assert_eq!(whole["tasks"].as_array().unwrap().len(), 7);
    assert!(whole["next_cursor"].is_null(), "{whole}");
    let mut seen = Vec::new();
    let mut query = "?limit=3".to_owned();
    for pages in 1.. {
        let response = app.get(&format!("{path}{query}")).await;
        assert_eq!(response.status(), 200);
        let page: Value = response.json().await.unwrap();
        let tasks = page["tasks"].as_array().unwrap();
        assert!(tasks.len() <= 3, "{page}");
        seen.extend(
            tasks
                .iter()
                .map(|t| t["task_id"].as_str().unwrap().to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(cursor) => query = format!("?limit=3&cursor={cursor}"),
            None => {
                assert_eq!(pages, 3);
                break;
            }
        }
    }
    let want: Vec<String> = (0..7).map(|i| format!("t{i}")).collect();
    assert_eq!(seen, want, "every task once, in submission order");
    for (query, field) in [
        ("?limit=0", "limit"),
        ("?limit=1001", "limit"),
        ("?cursor=x", "cursor"),
    ] {
        let problem = app
            .get_problem(&format!("{path}{query}"), 400, "invalid_query")
            .await;
        assert_eq!(problem["field"], field, "{query}: {problem}");
    }
}

both_backends!(
    lists_come_in_pages_on_request,
    large_gating_bodies_share_the_gating_memory,
    rejected_large_lists_answer_the_first_errors_and_the_counts,
    validate_reports_every_violation_in_gate_order,
    validate_refuses_malformed_requests,
    created_list_keeps_edges_team_and_extra_fields,
    rejected_lists_are_counted_per_cycle_and_escalate,
    bad_task_fields_name_the_field_and_store_nothing,
    failure_cascades_through_a_diamond,
    abandon_cascades_down_a_long_chain_but_spares_terminal_tasks,
    illegal_transitions_are_409_and_repeats_are_idempotent,
    barrier_waits_for_the_wave_pipeline_does_not,
    pipeline_passes_over_racing_writes_across_batches,
    status_is_scoped_per_cycle,
    teams_register_per_project,
    graph_renders_waves_as_text,
    large_lists_persist_in_batches,
);
