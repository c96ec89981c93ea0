//! Check before acting, for every route that reads or changes a project's data: a
//! token limited to another project gets 403 `forbidden_project`, and the database
//! is exactly as it was (every row of every table compared), on SQLite and Postgres.
//!
//! The table below is checked against the OpenAPI document, so a new route that
//! names a project's resource must be added here.

use std::collections::BTreeSet;

use crate::common::{Backend, TestApp, expect_problem, one_phase_plan};
use plangate::config::ApiToken;
use reqwest::Method;
use serde_json::{Value, json};

const ADMIN: &str = "admin-token-aaaaaaaaaaaa";
/// May act on `proj-a` only.
const LIMITED: &str = "limited-token-bbbbbbbbbb";

/// Routes that name no project's data (any valid token may call them).
const PROJECTLESS: &[&str] = &[
    "GET /healthz",
    "GET /readyz",
    "GET /metrics",
    "POST /v1/task-lists/validate",
    "POST /v1/loop-plans/generate",
    "POST /v1/loop-plans/parse",
    // Filtered to the caller's projects rather than refused (checked below).
    "GET /v1/refine-jobs",
    "GET /v1/webhooks",
    "GET /v1/rate-limits",
];

async fn spawn(backend: Backend) -> TestApp {
    crate::common::spawn_app_with(backend, |s| {
        s.api_tokens = vec![
            ApiToken::unrestricted(ADMIN),
            ApiToken::limited(LIMITED, &["proj-a"]),
        ];
        // No workers: jobs stay queued, so a cancel that slipped through would show.
        s.workers = 0;
    })
    .await
}

async fn created(response: reqwest::Response) -> Value {
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("JSON body");
    assert!(status == 201 || status == 202, "{status}: {body}");
    body
}

/// `method path` with `body` as [`ADMIN`], expecting 201 or 202: the answer.
async fn admin_creates(app: &TestApp, method: Method, path: &str, body: &Value) -> Value {
    created(app.send_as(ADMIN, method, path, Some(body)).await).await
}

fn tasks() -> Value {
    json!([
        {"task_id": "t-1", "assigned_persona": "dev", "parallel_group": 1, "writes": ["a.py"], "description": "x"},
        {"task_id": "t-2", "assigned_persona": "rev", "parallel_group": 2, "depends_on": ["t-1"], "reads": ["a.py"], "description": "y"},
    ])
}

fn task_list(project: &str) -> Value {
    json!({"project_id": project, "team_pk": "cycle-1", "created_by": "pm", "tasks": tasks()})
}

fn job(project: Option<&str>, run_id: Option<&str>) -> Value {
    let mut body = json!({
        "context": {"schema_version": 1, "phase_id": "P1", "assignments": [one_phase_plan()["assignments"][0].clone()]},
        "refined_plan": one_phase_plan(),
        "task_text": "Ship it.",
    });
    if let Some(project) = project {
        body["project_id"] = json!(project);
    }
    if let Some(run_id) = run_id {
        body["run_id"] = json!(run_id);
    }
    body
}

fn run(project: Option<&str>) -> Value {
    let mut body = json!({"plan": one_phase_plan()});
    if let Some(project) = project {
        body["project_id"] = json!(project);
    }
    body
}

/// `METHOD /path/{param}` of a concrete request, for matching the OpenAPI document.
fn route_of(method: &Method, path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    let tracks = path.starts_with("/v1/tracks/");
    let in_list = path.starts_with("/v1/task-lists/") && path.split('/').nth(4) == Some("tasks");
    let webhooks = path.starts_with("/v1/webhooks/");
    let rate_limits = path.starts_with("/v1/rate-limits/");
    let templated: Vec<&str> = path
        .split('/')
        .enumerate()
        .map(|(i, segment)| match (i, segment) {
            (3, _) if tracks => "{track_id}",
            (3, _) if rate_limits => "{executor}",
            (5, _) if tracks => "{step}",
            (5, _) if in_list => "{task_id}",
            (5, _) if webhooks => "{delivery_id}",
            (3, "proj-b") => "{project_id}",
            (3, s) if uuid::Uuid::parse_str(s).is_ok() => "{id}",
            _ => segment,
        })
        .collect();
    format!("{method} {}", templated.join("/"))
}

async fn limited_tokens_change_and_see_nothing_of_other_projects(backend: Backend) {
    let app = spawn(backend).await;

    // Another project's resources, made by the unrestricted token, and one of each
    // refine resource without a project (for unrestricted callers only).
    let list = admin_creates(&app, Method::POST, "/v1/task-lists", &task_list("proj-b")).await;
    let list_id = list["id"].as_str().unwrap().to_owned();
    let task_id = list["tasks"][0]["id"].as_str().unwrap().to_owned();
    let planner_id = list["tasks"][0]["task_id"].as_str().unwrap().to_owned();
    let team = json!({"team_pk": "cycle-1"});
    admin_creates(&app, Method::POST, "/v1/projects/proj-b/teams", &team).await;
    let other_run =
        admin_creates(&app, Method::POST, "/v1/refine-runs", &run(Some("proj-b"))).await;
    let other_run = other_run["id"].as_str().unwrap().to_owned();
    let loose_run = admin_creates(&app, Method::POST, "/v1/refine-runs", &run(None)).await;
    let loose_run = loose_run["id"].as_str().unwrap().to_owned();
    let other_job = admin_creates(
        &app,
        Method::POST,
        "/v1/refine-jobs",
        &job(Some("proj-b"), None),
    )
    .await;
    let other_job = other_job["id"].as_str().unwrap().to_owned();
    let loose_job = admin_creates(&app, Method::POST, "/v1/refine-jobs", &job(None, None)).await;
    let loose_job = loose_job["id"].as_str().unwrap().to_owned();
    // Webhooks: one of proj-b, one of every project (subscribed to an event this
    // test never causes: nothing is sent anywhere).
    let mut hooks = Vec::new();
    for project in [Some("proj-b"), None] {
        let mut body = json!({"url": "https://8.8.8.8/hook", "events": ["budget.exceeded"]});
        if let Some(p) = project {
            body["project_id"] = json!(p);
        }
        let hook = admin_creates(&app, Method::POST, "/v1/webhooks", &body).await;
        hooks.push(hook["id"].as_str().unwrap().to_owned());
    }
    // Tracks: one of proj-b, one of no project.
    let track = |id: &str| {
        json!({"track_id": id, "type": "feature", "status": "new",
               "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z"})
    };
    for (id, query) in [("track-b", "?project_id=proj-b"), ("track-loose", "")] {
        admin_creates(
            &app,
            Method::PUT,
            &format!("/v1/tracks/{id}{query}"),
            &track(id),
        )
        .await;
    }

    let status = json!({"status": "failed"});
    let new_team = json!({"team_pk": "cycle-2"});
    let holder = json!({"holder": "agent-b"});
    // One route per line, read across.
    #[rustfmt::skip]
    let table: Vec<(Method, String, Option<Value>)> = vec![
        (Method::POST, "/v1/task-lists".into(), Some(task_list("proj-b"))),
        (Method::GET, format!("/v1/task-lists/{list_id}"), None),
        (Method::GET, format!("/v1/task-lists/{list_id}/ready"), None),
        (Method::GET, format!("/v1/task-lists/{list_id}/graph"), None),
        (Method::GET, format!("/v1/task-lists/{list_id}/events"), None),
        (Method::PATCH, format!("/v1/tasks/{task_id}"), Some(status)),
        (Method::POST, format!("/v1/task-lists/{list_id}/claim"), Some(holder.clone())),
        (Method::POST, format!("/v1/tasks/{task_id}/heartbeat"), Some(holder.clone())),
        (Method::GET, format!("/v1/tasks/{task_id}/history"), None),
        // The same task by the planner's id within its list.
        (Method::PATCH, format!("/v1/task-lists/{list_id}/tasks/{planner_id}"),
         Some(json!({"status": "failed"}))),
        (Method::POST, format!("/v1/task-lists/{list_id}/tasks/{planner_id}/heartbeat"),
         Some(holder)),
        (Method::GET, format!("/v1/task-lists/{list_id}/tasks/{planner_id}/history"), None),
        // Naming a task the list does not hold: still 403, nothing told about it.
        (Method::GET, format!("/v1/task-lists/{list_id}/tasks/no-such-task/history"), None),
        (Method::GET, "/v1/projects/proj-b/status".into(), None),
        (Method::GET, "/v1/projects/proj-b/teams".into(), None),
        (Method::GET, "/v1/projects/proj-b/usage".into(), None),
        (Method::POST, "/v1/projects/proj-b/teams".into(), Some(new_team)),
        (Method::POST, "/v1/refine-jobs".into(), Some(job(Some("proj-b"), None))),
        (Method::POST, "/v1/refine-jobs".into(), Some(job(None, None))),
        // Its own project, but joining another project's run.
        (Method::POST, "/v1/refine-jobs".into(), Some(job(Some("proj-a"), Some(&other_run)))),
        (Method::POST, "/v1/refine-runs".into(), Some(run(Some("proj-b")))),
        (Method::POST, "/v1/refine-runs".into(), Some(run(None))),
        // A new track in another project, or in none.
        (Method::PUT, "/v1/tracks/track-new?project_id=proj-b".into(), Some(track("track-new"))),
        (Method::PUT, "/v1/tracks/track-new".into(), Some(track("track-new"))),
    ]
    .into_iter()
    .chain([&other_job, &loose_job].into_iter().flat_map(|id| {
        [
            (Method::GET, format!("/v1/refine-jobs/{id}"), None),
            (Method::GET, format!("/v1/refine-jobs/{id}/result"), None),
            (Method::GET, format!("/v1/refine-jobs/{id}/assignments"), None),
            (Method::GET, format!("/v1/refine-jobs/{id}/events"), None),
            (Method::POST, format!("/v1/refine-jobs/{id}/cancel"), None),
            (Method::POST, format!("/v1/refine-jobs/{id}/retry"), None),
        ]
    }))
    .chain(["track-b", "track-loose"].into_iter().flat_map(|id| {
        [
            (Method::GET, format!("/v1/tracks/{id}"), None),
            (Method::GET, format!("/v1/tracks/{id}/history"), None),
            // Replacing it, naming the caller's own project or none.
            (Method::PUT, format!("/v1/tracks/{id}?project_id=proj-a"), Some(track(id))),
            (Method::PUT, format!("/v1/tracks/{id}"), Some(track(id))),
            (Method::POST, format!("/v1/tracks/{id}/steps/PLAN/start"),
             Some(json!({"agent": "a"}))),
            (Method::POST, format!("/v1/tracks/{id}/steps/PLAN/complete"),
             Some(json!({"outcome": "PASSED"}))),
        ]
    }))
    .chain(hooks.iter().flat_map(|id| {
        let delivery = uuid::Uuid::now_v7();
        [
            (Method::GET, format!("/v1/webhooks/{id}"), None),
            (Method::DELETE, format!("/v1/webhooks/{id}"), None),
            (Method::POST, format!("/v1/webhooks/{id}/rotate-secret"), None),
            (Method::GET, format!("/v1/webhooks/{id}/deliveries"), None),
            (Method::POST, format!("/v1/webhooks/{id}/deliveries/{delivery}/replay"), None),
        ]
    }))
    .chain([
        (Method::POST, "/v1/webhooks".to_owned(),
         Some(json!({"url": "https://8.8.8.8/", "events": ["*"], "project_id": "proj-b"}))),
        (Method::POST, "/v1/webhooks".to_owned(),
         Some(json!({"url": "https://8.8.8.8/", "events": ["*"]}))),
    ])
    // Rate limits belong to every project: only an unrestricted token changes one.
    .chain([(Method::PUT, "/v1/rate-limits/anthropic".to_owned(),
             Some(json!({"requests_per_minute": 1})))])
    .chain([&other_run, &loose_run].into_iter().flat_map(|id| {
        [
            (Method::GET, format!("/v1/refine-runs/{id}"), None),
            (Method::GET, format!("/v1/refine-runs/{id}/result"), None),
            (Method::POST, format!("/v1/refine-runs/{id}/cancel"), None),
        ]
    }))
    .collect();

    // The table covers every route of the API that is not project-free.
    let doc: Value = serde_json::to_value(plangate::http::openapi()).unwrap();
    let covered: BTreeSet<String> = table.iter().map(|(m, p, _)| route_of(m, p)).collect();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let route = format!("{} {path}", method.to_uppercase());
            assert!(
                covered.contains(&route) || PROJECTLESS.contains(&route.as_str()),
                "{route} is neither in the cross-project table nor project-free"
            );
        }
    }

    let before = crate::common::snapshot_tables(&app).await;
    for (method, path, body) in &table {
        let response = app
            .send_as(LIMITED, method.clone(), path, body.as_ref())
            .await;
        let problem = expect_problem(response, 403, "forbidden_project").await;
        assert!(!problem.to_string().contains(LIMITED), "{problem}");
        assert_eq!(
            crate::common::snapshot_tables(&app).await,
            before,
            "{method} {path} changed the database"
        );
    }

    // The list endpoint filters instead: nothing of proj-b, even when asked for it.
    for query in ["", "?project_id=proj-b", &format!("?run_id={other_run}")] {
        let page: Value = app
            .get_as(LIMITED, &format!("/v1/refine-jobs{query}"))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(page["jobs"], json!([]), "{query}: {page}");
    }

    let hooks_seen: Value = app
        .get_as(LIMITED, "/v1/webhooks")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        hooks_seen,
        json!([]),
        "a limited token lists no other webhook"
    );

    // The same requests do act for the unrestricted token (the table is not vacuous).
    let cancel = app
        .send_as(
            ADMIN,
            Method::POST,
            &format!("/v1/refine-jobs/{other_job}/cancel"),
            None,
        )
        .await;
    assert_eq!(cancel.status(), 200);
    assert_ne!(
        crate::common::snapshot_tables(&app).await,
        before,
        "an allowed cancel changes the job"
    );
    // ...and a retry of the cancelled job is made for it.
    let retry = app
        .send_as(
            ADMIN,
            Method::POST,
            &format!("/v1/refine-jobs/{other_job}/retry"),
            None,
        )
        .await;
    assert_eq!(retry.status(), 201);

    app.shutdown().await;
}

both_backends!(limited_tokens_change_and_see_nothing_of_other_projects);
