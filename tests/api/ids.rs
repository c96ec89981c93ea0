//! One meaning per id (docs/api.md, "Conventions") and refusals that say what is unknown
//! (item 7) over REST, on both databases: a task by the planner's id within its
//! list (`/v1/task-lists/{id}/tasks/{task_id}`) next to `/v1/tasks/{uuid}`, 404s
//! and 400s that name the id at fault, and project snapshots that 404 an unknown
//! project or cycle instead of answering zeros or the project's counts. The MCP
//! side is in `mcp.rs`; the cross-project 403s in `cross_project.rs`.

use crate::common::{TestApp, expect_problem, server_id, snapshot_tables};
use serde_json::{Value, json};

fn tasks() -> Value {
    json!([
        {"task_id": "t-1", "assigned_persona": "dev", "parallel_group": 1,
         "writes": ["a.rs"], "description": "write a"},
        {"task_id": "t-2", "assigned_persona": "dev", "parallel_group": 2, "depends_on": ["t-1"],
         "reads": ["a.rs"], "writes": ["b.rs"], "description": "write b"},
    ])
}

async fn create(app: &TestApp, project: &str, team: Option<&str>) -> Value {
    let mut body = json!({"project_id": project, "created_by": "pm", "tasks": tasks()});
    if let Some(team) = team {
        body["team_pk"] = json!(team);
    }
    let response = app.post_json("/v1/task-lists", &body).await;
    assert_eq!(response.status(), 201);
    response.json().await.unwrap()
}

async fn ok(response: reqwest::Response) -> Value {
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    body
}

async fn planner_ids_address_tasks_as_server_ids_do(app: TestApp) {
    let list = create(&app, "ids", None).await;
    let list_id = list["id"].as_str().unwrap();
    let t1 = server_id(&list, "t-1");
    let t2 = server_id(&list, "t-2");
    let in_list = |task: &str| format!("/v1/task-lists/{list_id}/tasks/{task}");

    // Claim t-1, renew and finish it, all by its planner id.
    let claimed = ok(app
        .post_json(
            &format!("/v1/task-lists/{list_id}/claim"),
            &json!({"holder": "agent-1"}),
        )
        .await)
    .await;
    assert_eq!(claimed["task"]["task_id"], "t-1", "{claimed}");
    let renewed = ok(app
        .post_json(
            &format!("{}/heartbeat", in_list("t-1")),
            &json!({"holder": "agent-1", "lease_s": 600}),
        )
        .await)
    .await;
    assert_eq!(renewed["id"], t1.as_str());
    assert_eq!(renewed["claim"]["holder"], "agent-1", "{renewed}");
    let done = ok(app
        .patch_json(
            &in_list("t-1"),
            &json!({"status": "done", "holder": "agent-1"}),
        )
        .await)
    .await;
    assert_eq!(done["id"], t1.as_str());
    assert_eq!(done["status"], "done");
    let history = ok(app.get(&format!("{}/history", in_list("t-1"))).await).await;
    assert_eq!(history["id"], t1.as_str());
    let kinds: Vec<&str> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or_default())
        .collect();
    assert!(kinds.len() >= 3, "claim, renewal, done: {history}");
    // The same history by the server id: one task, two names.
    let by_uuid = ok(app.get(&format!("/v1/tasks/{t1}/history")).await).await;
    assert_eq!(by_uuid, history);

    // The server id in the planner slot works too (a client passing both ids).
    let running = ok(app
        .patch_json(&in_list(&t2), &json!({"status": "running"}))
        .await)
    .await;
    assert_eq!(running["task_id"], "t-2");
    // And /v1/tasks/{uuid} keeps working.
    let failed = ok(app
        .patch_json(&format!("/v1/tasks/{t2}"), &json!({"status": "failed"}))
        .await)
    .await;
    assert_eq!(failed["status"], "failed");
    app.shutdown().await;
}

async fn refusals_name_the_id_at_fault(app: TestApp) {
    let list = create(&app, "ids", None).await;
    let list_id = list["id"].as_str().unwrap().to_owned();
    let other = create(&app, "ids", None).await;
    let other_t1 = server_id(&other, "t-1");
    let unknown_list = uuid::Uuid::now_v7();
    let before = snapshot_tables(&app).await;
    let running = json!({"status": "running"});

    // A planner id the list does not hold: 404 naming task_id.
    for task in ["t-9", "%00", &other_t1] {
        let problem = expect_problem(
            app.patch_json(&format!("/v1/task-lists/{list_id}/tasks/{task}"), &running)
                .await,
            404,
            "not_found",
        )
        .await;
        assert_eq!(problem["field"], "task_id", "{task}: {problem}");
        assert!(
            problem["detail"].as_str().unwrap().contains(&list_id),
            "{problem}"
        );
    }
    // A list that does not exist: 404 naming task_list_id, on every route.
    for (method, suffix) in [("PATCH", ""), ("POST", "/heartbeat"), ("GET", "/history")] {
        let path = format!("/v1/task-lists/{unknown_list}/tasks/t-1{suffix}");
        let response = match method {
            "PATCH" => app.patch_json(&path, &running).await,
            "POST" => app.post_json(&path, &json!({"holder": "a"})).await,
            _ => app.get(&path).await,
        };
        let problem = expect_problem(response, 404, "not_found").await;
        assert_eq!(
            problem["field"], "task_list_id",
            "{method} {path}: {problem}"
        );
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("create_task_list"),
            "{problem}"
        );
    }
    // A malformed UUID in a path: 400 naming the parameter.
    for path in [
        "/v1/task-lists/t-1/tasks/t-1".to_owned(),
        "/v1/tasks/t-1".to_owned(),
    ] {
        let problem =
            expect_problem(app.patch_json(&path, &running).await, 400, "invalid_path").await;
        assert_eq!(problem["parameter"], "id", "{path}: {problem}");
    }
    let problem = app
        .get_problem("/v1/task-lists/nope/tasks/t-1/history", 400, "invalid_path")
        .await;
    assert_eq!(problem["parameter"], "id", "{problem}");
    assert_eq!(
        snapshot_tables(&app).await,
        before,
        "a refusal changed nothing"
    );
    app.shutdown().await;
}

async fn status_of_unknown_projects_and_cycles_is_404(app: TestApp) {
    // Nothing of the project: 404 project_not_found, with or without a cycle.
    for path in [
        "/v1/projects/ghost/status",
        "/v1/projects/ghost/status?team_pk=cycle-1",
    ] {
        let problem = app.get_problem(path, 404, "project_not_found").await;
        assert_eq!(problem["field"], "project_id", "{problem}");
        assert!(
            problem["detail"].as_str().unwrap().contains("ghost"),
            "{problem}"
        );
    }
    create(&app, "known", Some("cycle-A")).await;
    // A cycle the project lacks is 404 team_not_found, never the project's counts.
    let problem = app
        .get_problem(
            "/v1/projects/known/status?team_pk=cycle-typo",
            404,
            "team_not_found",
        )
        .await;
    assert_eq!(problem["field"], "team_pk", "{problem}");
    let cycle = ok(app.get("/v1/projects/known/status?team_pk=cycle-A").await).await;
    assert_eq!(cycle["scope"], "cycle");
    assert_eq!(cycle["counts"]["pending"], 2, "{cycle}");
    // A registered team with no tasks yet is known: zeros in its own scope.
    let team = app
        .post_json("/v1/projects/known/teams", &json!({"team_pk": "cycle-B"}))
        .await;
    assert_eq!(team.status(), 201);
    let empty = ok(app.get("/v1/projects/known/status?team_pk=cycle-B").await).await;
    assert_eq!(empty["scope"], "cycle");
    assert_eq!(empty["counts"]["pending"], 0, "{empty}");
    // A project with only a team is known too.
    let team = app
        .post_json("/v1/projects/teams-only/teams", &json!({"team_pk": "c"}))
        .await;
    assert_eq!(team.status(), 201);
    let whole = ok(app.get("/v1/projects/teams-only/status").await).await;
    assert_eq!(whole["scope"], "project");
    assert_eq!(whole["in_flight"], 0);
    app.shutdown().await;
}

both_backends!(
    planner_ids_address_tasks_as_server_ids_do,
    refusals_name_the_id_at_fault,
    status_of_unknown_projects_and_cycles_is_404,
);
