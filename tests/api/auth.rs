//! Tokens limited to projects, over HTTP on both databases: every route that names a
//! project answers 403 `forbidden_project` for other projects' resources, before it
//! changes anything; routes without a project take any valid token.

use crate::common::{Backend, TestApp, expect_problem};
use plangate::config::ApiToken;
use reqwest::Method;
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
    app.send_as(token, Method::POST, "/v1/task-lists", Some(&body))
        .await
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
        let mine = app
            .get_as(LIMITED, &format!("/v1/task-lists/{own_id}{suffix}"))
            .await;
        assert_eq!(mine.status(), 200, "{suffix}");
        forbidden(
            app.get_as(LIMITED, &format!("/v1/task-lists/{other_id}{suffix}"))
                .await,
        )
        .await;
        let admin = app
            .get_as(ADMIN, &format!("/v1/task-lists/{other_id}{suffix}"))
            .await;
        assert_eq!(admin.status(), 200, "{suffix}");
    }

    // PATCH /v1/tasks/{id}: the task's list's project, checked before the change.
    let other_task = other["tasks"][0]["id"].as_str().unwrap();
    let fail = json!({"status": "failed"});
    forbidden(
        app.send_as(
            LIMITED,
            Method::PATCH,
            &format!("/v1/tasks/{other_task}"),
            Some(&fail),
        )
        .await,
    )
    .await;
    let after: Value = app
        .get_as(ADMIN, &format!("/v1/task-lists/{other_id}"))
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
    let running = app
        .send_as(
            LIMITED,
            Method::PATCH,
            &format!("/v1/tasks/{own_task}"),
            Some(&json!({"status": "running"})),
        )
        .await;
    assert_eq!(running.status(), 200);
    let missing = app
        .send_as(
            LIMITED,
            Method::PATCH,
            "/v1/tasks/0190a4b2-0000-7000-8000-000000000000",
            Some(&fail),
        )
        .await;
    expect_problem(missing, 404, "not_found").await;

    // /v1/projects/{project_id}/...
    for (project, allowed) in [("proj-a", true), ("proj-c", true), ("proj-b", false)] {
        let team = app
            .send_as(
                LIMITED,
                Method::POST,
                &format!("/v1/projects/{project}/teams"),
                Some(&json!({"team_pk": "cycle-9"})),
            )
            .await;
        // After the team: a cycle nobody registered is 404 `team_not_found`.
        let status = app
            .get_as(
                LIMITED,
                &format!("/v1/projects/{project}/status?team_pk=cycle-9"),
            )
            .await;
        let teams = app
            .get_as(LIMITED, &format!("/v1/projects/{project}/teams"))
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
    let teams: Value = app
        .get_as(ADMIN, "/v1/projects/proj-b/teams")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(teams, json!([]), "the refused team was not registered");

    // Routes without a project take any valid token; a wrong token is still 401.
    let validate = app
        .send_as(
            LIMITED,
            Method::POST,
            "/v1/task-lists/validate",
            Some(&json!({"tasks": two_tasks()})),
        )
        .await;
    assert_eq!(validate.status(), 200);
    let track = json!({"track_id": "t_1", "type": "feature", "status": "new",
                       "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z",
                       "description": "d"});
    // A track is a project's (tests/api/tracks.rs): a limited token names one of its own.
    let loose = app
        .send_as(LIMITED, Method::PUT, "/v1/tracks/t_1", Some(&track))
        .await;
    forbidden(loose).await;
    let put = app
        .send_as(
            LIMITED,
            Method::PUT,
            "/v1/tracks/t_1?project_id=proj-a",
            Some(&track),
        )
        .await;
    assert_eq!(put.status(), 201);
    let wrong = app
        .get_as("limited-token-bbbbbbbbbX", "/v1/projects/proj-a/teams")
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

/// RFC 9110 §11.1: the scheme is case-insensitive; SDKs send `bearer` too.
async fn auth_schemes_are_case_insensitive(backend: Backend) {
    let app = spawn(backend).await;
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let teams = app
            .client
            .get(app.url("/v1/projects/proj-a/teams"))
            .header("authorization", format!("{scheme} {ADMIN}"))
            .send()
            .await
            .unwrap();
        assert_eq!(teams.status(), 200, "{scheme}");
        let tools = app
            .client
            .post(app.url("/mcp"))
            .header("authorization", format!("{scheme} {ADMIN}"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(tools.status(), 200, "{scheme} on /mcp");
    }
    for wrong in [
        format!("Basic {ADMIN}"),
        format!("Bearer{ADMIN}"),
        "bearer".to_owned(),
    ] {
        let teams = app
            .client
            .get(app.url("/v1/projects/proj-a/teams"))
            .header("authorization", wrong.clone())
            .send()
            .await
            .unwrap();
        expect_problem(teams, 401, "unauthorized").await;
    }
    app.shutdown().await;
}

both_backends!(auth_schemes_are_case_insensitive);

/// The dashboard's session cookie (docs/configuration.md, "Dashboard sessions").
mod sessions {
    use super::*;

    use crate::common::browser;

    /// What `GET /ui/` answers with this cookie: 200 signed in, 303 to the login.
    pub(super) async fn overview_status(app: &TestApp, cookie: &str) -> u16 {
        browser()
            .get(app.url("/ui/"))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    async fn two_logins_get_different_sessions(backend: Backend) {
        let app = spawn(backend).await;
        let first = app.sign_in(ADMIN).await;
        let second = app.sign_in(ADMIN).await;
        assert_ne!(first, second, "each login is a new session");
        assert_eq!(overview_status(&app, &first).await, 200);
        assert_eq!(overview_status(&app, &second).await, 200);
        assert_eq!(overview_status(&app, "plangate_session=forged").await, 303);
        app.shutdown().await;
    }

    both_backends!(two_logins_get_different_sessions);

    async fn logout_revokes_the_session(backend: Backend) {
        let app = spawn(backend).await;
        let kept = app.sign_in(ADMIN).await;
        let ended = app.sign_in(ADMIN).await;
        let logout = browser()
            .post(app.url("/ui/logout"))
            .header("origin", app.base.clone())
            .header("cookie", &ended)
            .send()
            .await
            .unwrap();
        assert_eq!(logout.status(), 303);
        // The browser forgets the cookie, and the server no longer takes it from
        // anyone who copied it.
        assert_eq!(overview_status(&app, &ended).await, 303);
        let cancel = browser()
            .post(app.url(&format!("/ui/jobs/{}/cancel", uuid::Uuid::new_v4())))
            .header("origin", app.base.clone())
            .header("cookie", &ended)
            .send()
            .await
            .unwrap();
        assert_eq!(cancel.status(), 401, "a revoked session cannot act");
        assert_eq!(
            overview_status(&app, &kept).await,
            200,
            "other sessions live on"
        );
        app.shutdown().await;
    }

    both_backends!(logout_revokes_the_session);

    async fn the_session_cookie_is_no_api_credential(backend: Backend) {
        let app = spawn(backend).await;
        let cookie = app.sign_in(ADMIN).await;
        for path in ["/v1/refine-jobs", "/v1/projects/proj-a/teams"] {
            let read = app
                .client
                .get(app.url(path))
                .header("cookie", &cookie)
                .send()
                .await
                .unwrap();
            expect_problem(read, 401, "unauthorized").await;
        }
        let cancel = app
            .client
            .post(app.url(&format!("/v1/refine-jobs/{}/cancel", uuid::Uuid::new_v4())))
            .header("origin", app.base.clone())
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        expect_problem(cancel, 401, "unauthorized").await;
        let mcp = app
            .client
            .post(app.url("/mcp"))
            .header("cookie", &cookie)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(mcp.status(), 401, "/mcp takes bearer tokens only");
        app.shutdown().await;
    }

    both_backends!(the_session_cookie_is_no_api_credential);

    async fn an_expired_session_is_refused(backend: Backend) {
        let app = crate::common::spawn_app_with(backend, |s| {
            s.api_tokens = vec![ApiToken::unrestricted(ADMIN)];
            s.perimeter.session_ttl = std::time::Duration::from_secs(1);
        })
        .await;
        let cookie = app.sign_in(ADMIN).await;
        assert_eq!(overview_status(&app, &cookie).await, 200);
        // Expiry is kept in whole seconds: past it whatever the rounding.
        tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
        assert_eq!(overview_status(&app, &cookie).await, 303, "expired");
        let events = browser()
            .get(app.url(&format!("/ui/jobs/{}/events", uuid::Uuid::new_v4())))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(events.status(), 401);
        app.shutdown().await;
    }

    both_backends!(an_expired_session_is_refused);

    /// Sessions live in the database: a restarted server (or another replica on
    /// the same database) honours them, and the cookie's lifetime is the session's.
    async fn sessions_outlive_a_restart(backend: Backend) {
        let app = spawn(backend).await;
        let set_cookie = app.sign_in_header(ADMIN).await;
        assert!(set_cookie.contains("Max-Age=43200"), "{set_cookie}");
        let cookie = set_cookie.split(';').next().unwrap().to_owned();
        let database = app.stop_keeping_database().await;
        let app = crate::common::spawn_app_on(database, backend, |s| {
            s.api_tokens = vec![ApiToken::unrestricted(ADMIN)];
        })
        .await;
        assert_eq!(overview_status(&app, &cookie).await, 200);
        app.shutdown().await;
    }

    both_backends!(sessions_outlive_a_restart);
}
