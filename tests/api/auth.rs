//! Tokens limited to projects, over HTTP on both databases: every route that names a
//! project answers 403 `forbidden_project` for other projects' resources, before it
//! changes anything; routes without a project take any valid token.

use crate::common::{Backend, TestApp, expect_problem};
use plangate::config::ApiToken;
use reqwest::{Method, RequestBuilder};
use serde_json::{Value, json};

const ADMIN: &str = "admin-token-aaaaaaaaaaaa";
const LIMITED: &str = "limited-token-bbbbbbbbbb";

async fn spawn(backend: Backend) -> TestApp {
    crate::common::spawn_app_with(backend, |s| {
        s.api_tokens = vec![
            ApiToken::unrestricted(ADMIN),
            ApiToken::limited(LIMITED, &["proj-a", "proj-c"]),
        ];
    })
    .await
}

fn call(app: &TestApp, token: &str, method: Method, path: &str) -> RequestBuilder {
    app.client.request(method, app.url(path)).bearer_auth(token)
}

async fn send(
    app: &TestApp,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> reqwest::Response {
    let mut request = call(app, token, method, path);
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.expect("request")
}

fn two_tasks() -> Value {
    json!([
        {"task_id": "t-1", "assigned_persona": "dev", "parallel_group": 1, "writes": ["a.py"], "description": "x"},
        {"task_id": "t-2", "assigned_persona": "rev", "parallel_group": 2, "depends_on": ["t-1"], "reads": ["a.py"], "description": "y"},
    ])
}

fn cyclic() -> Value {
    json!([{"task_id": "t-1", "assigned_persona": "dev", "parallel_group": 1, "depends_on": ["t-1"], "description": "x"}])
}

async fn create(app: &TestApp, token: &str, project: &str, tasks: Value) -> reqwest::Response {
    let body =
        json!({"project_id": project, "team_pk": "cycle-1", "created_by": "pm", "tasks": tasks});
    send(app, token, Method::POST, "/v1/task-lists", Some(body)).await
}

async fn forbidden(response: reqwest::Response) {
    let problem = expect_problem(response, 403, "forbidden_project").await;
    let text = problem.to_string();
    assert!(!text.contains(LIMITED) && !text.contains(ADMIN), "{text}");
}

async fn limited_tokens_stay_in_their_projects(backend: Backend) {
    let app = spawn(backend).await;

    // POST /v1/task-lists: the body's project_id.
    let own = create(&app, LIMITED, "proj-a", two_tasks()).await;
    assert_eq!(own.status(), 201);
    let own: Value = own.json().await.unwrap();
    forbidden(create(&app, LIMITED, "proj-b", two_tasks()).await).await;
    // A refused rejection is not counted: the admin's first rejection is attempt 1.
    forbidden(create(&app, LIMITED, "proj-b", cyclic()).await).await;
    let rejected = create(&app, ADMIN, "proj-b", cyclic()).await;
    let rejected = expect_problem(rejected, 422, "dag_invalid").await;
    assert_eq!(rejected["attempt"], 1, "{rejected}");

    let other = create(&app, ADMIN, "proj-b", two_tasks()).await;
    assert_eq!(other.status(), 201);
    let other: Value = other.json().await.unwrap();
    let (own_id, other_id) = (own["id"].as_str().unwrap(), other["id"].as_str().unwrap());

    // The list's project for GET, /ready and /graph.
    for suffix in ["", "/ready", "/graph"] {
        let mine = send(
            &app,
            LIMITED,
            Method::GET,
            &format!("/v1/task-lists/{own_id}{suffix}"),
            None,
        )
        .await;
        assert_eq!(mine.status(), 200, "{suffix}");
        forbidden(
            send(
                &app,
                LIMITED,
                Method::GET,
                &format!("/v1/task-lists/{other_id}{suffix}"),
                None,
            )
            .await,
        )
        .await;
        let admin = send(
            &app,
            ADMIN,
            Method::GET,
            &format!("/v1/task-lists/{other_id}{suffix}"),
            None,
        )
        .await;
        assert_eq!(admin.status(), 200, "{suffix}");
    }

    // PATCH /v1/tasks/{id}: the task's list's project, checked before the change.
    let other_task = other["tasks"][0]["id"].as_str().unwrap();
    let fail = json!({"status": "failed"});
    forbidden(
        send(
            &app,
            LIMITED,
            Method::PATCH,
            &format!("/v1/tasks/{other_task}"),
            Some(fail.clone()),
        )
        .await,
    )
    .await;
    let after: Value = send(
        &app,
        ADMIN,
        Method::GET,
        &format!("/v1/task-lists/{other_id}"),
        None,
    )
    .await
    .json()
    .await
    .unwrap();
    for task in after["tasks"].as_array().unwrap() {
        assert_eq!(
            task["status"], "pending",
            "nothing changed or cascaded: {after}"
        );
    }
    let own_task = own["tasks"][0]["id"].as_str().unwrap();
    let running = send(
        &app,
        LIMITED,
        Method::PATCH,
        &format!("/v1/tasks/{own_task}"),
        Some(json!({"status": "running"})),
    )
    .await;
    assert_eq!(running.status(), 200);
    let missing = send(
        &app,
        LIMITED,
        Method::PATCH,
        "/v1/tasks/0190a4b2-0000-7000-8000-000000000000",
        Some(fail),
    )
    .await;
    expect_problem(missing, 404, "not_found").await;

    // /v1/projects/{project_id}/...
    for (project, allowed) in [("proj-a", true), ("proj-c", true), ("proj-b", false)] {
        let status = send(
            &app,
            LIMITED,
            Method::GET,
            &format!("/v1/projects/{project}/status?team_pk=cycle-1"),
            None,
        )
        .await;
        let team = send(
            &app,
            LIMITED,
            Method::POST,
            &format!("/v1/projects/{project}/teams"),
            Some(json!({"team_pk": "cycle-9"})),
        )
        .await;
        let teams = send(
            &app,
            LIMITED,
            Method::GET,
            &format!("/v1/projects/{project}/teams"),
            None,
        )
        .await;
        if allowed {
            assert_eq!(status.status(), 200, "{project}");
            assert_eq!(team.status(), 201, "{project}");
            assert_eq!(teams.status(), 200, "{project}");
        } else {
            forbidden(status).await;
            forbidden(team).await;
            forbidden(teams).await;
        }
    }
    let teams: Value = send(&app, ADMIN, Method::GET, "/v1/projects/proj-b/teams", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(teams, json!([]), "the refused team was not registered");

    // Routes without a project take any valid token; a wrong token is still 401.
    let validate = send(
        &app,
        LIMITED,
        Method::POST,
        "/v1/task-lists/validate",
        Some(json!({"tasks": two_tasks()})),
    )
    .await;
    assert_eq!(validate.status(), 200);
    let track = json!({"track_id": "t_1", "type": "feature", "status": "new",
                       "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z",
                       "description": "d"});
    // A track is a project's (tests/api/tracks.rs): a limited token names one of its own.
    let loose = send(
        &app,
        LIMITED,
        Method::PUT,
        "/v1/tracks/t_1",
        Some(track.clone()),
    )
    .await;
    forbidden(loose).await;
    let put = send(
        &app,
        LIMITED,
        Method::PUT,
        "/v1/tracks/t_1?project_id=proj-a",
        Some(track),
    )
    .await;
    assert_eq!(put.status(), 201);
    let wrong = send(
        &app,
        "limited-token-bbbbbbbbbX",
        Method::GET,
        "/v1/projects/proj-a/teams",
        None,
    )
    .await;
    expect_problem(wrong, 401, "unauthorized").await;

    app.shutdown().await;
}

both_backends!(limited_tokens_stay_in_their_projects);

#[test]
fn the_openapi_document_lists_403_where_a_project_is_named() {
    let doc: Value = serde_json::to_value(plangate::http::openapi()).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    for (path, item) in paths {
        let names_project = path.starts_with("/v1/projects/")
            || path.starts_with("/v1/tasks/")
            || path.starts_with("/v1/tracks/")
            || (path.starts_with("/v1/task-lists") && path != "/v1/task-lists/validate");
        let names_none = path == "/v1/task-lists/validate" || path.starts_with("/v1/loop-plans/");
        for (method, operation) in item.as_object().unwrap() {
            if !["get", "put", "post", "patch", "delete"].contains(&method.as_str()) {
                continue;
            }
            let has_403 = operation["responses"].get("403").is_some();
            if names_project {
                assert!(has_403, "{method} {path} lacks 403");
            }
            if names_none {
                assert!(
                    !has_403,
                    "{method} {path} names no project but documents 403"
                );
            }
        }
    }
}
