//! Webhooks over HTTP on both databases (docs/api.md, "Webhooks"): the REST
//! contract, scoping by a token's projects, the target policy, and the outbox — an
//! event stored with the change that causes it is delivered by the next server on
//! the same database, with the same `webhook-id`, signed. A real receiver on a real
//! port records each delivery. (`.ci/webhooks.sh` verifies deliveries with the
//! `standardwebhooks` library, kills servers with SIGKILL and runs two replicas.)

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use plangate::domain::webhooks::sign;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::common::{self, ADMIN, Backend, TOKEN_A, TestApp, expect_problem};

/// One delivery as the receiver saw it.
#[derive(Debug, Clone)]
struct Received {
    id: String,
    timestamp: String,
    signature: String,
    body: String,
}

/// A receiver on 127.0.0.1 that records every POST and answers 204.
struct Receiver {
    url: String,
    seen: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start_on(listener: TcpListener) -> Receiver {
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Received>>> = Arc::default();
        let record = seen.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: String| {
                let record = record.clone();
                async move {
                    let h = |name: &str| {
                        headers
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned()
                    };
                    record.lock().unwrap().push(Received {
                        id: h("webhook-id"),
                        timestamp: h("webhook-timestamp"),
                        signature: h("webhook-signature"),
                        body,
                    });
                    axum::http::StatusCode::NO_CONTENT
                }
            }),
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            url: format!("http://{addr}/hook"),
            seen,
            task,
        }
    }

    fn seen(&self) -> Vec<Received> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits (up to 30 s) until `n` deliveries arrived.
    async fn wait_for(&self, n: usize) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let seen = self.seen();
            if seen.len() >= n {
                return seen;
            }
            assert!(
                Instant::now() < deadline,
                "only {} of {n} deliveries: {seen:?}",
                seen.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn spawn_scoped(backend: Backend) -> TestApp {
    common::spawn_app_with_project_tokens(backend, |s| s.workers = 0).await
}

async fn send(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> reqwest::Response {
    let mut request = app.client.request(method, app.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    request.send().await.expect("request")
}

async fn create(app: &TestApp, token: Option<&str>, body: Value) -> Value {
    let response = send(
        app,
        reqwest::Method::POST,
        "/v1/webhooks",
        token,
        Some(&body),
    )
    .await;
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get("location")
        .map(|v| v.to_str().unwrap().to_owned());
    let created: Value = response.json().await.unwrap();
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        location.unwrap(),
        format!("/v1/webhooks/{}", created["id"].as_str().unwrap())
    );
    created
}

fn assert_secret(secret: &Value) {
    use base64::Engine as _;
    let text = secret.as_str().expect("secret is a string");
    let raw = text.strip_prefix("whsec_").expect("whsec_ prefix");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(raw)
        .expect("base64");
    assert!(bytes.len() >= 24, "{} random bytes", bytes.len());
}

async fn webhooks_rest_contract(app: TestApp) {
    let created = create(
        &app,
        None,
        json!({"url": "https://8.8.8.8/hook", "events": ["task.failed", "refine_job.failed"],
               "project_id": "proj-x", "description": "ops pager"}),
    )
    .await;
    for field in ["id", "url", "events", "project_id", "created_at", "secret"] {
        assert!(!created[field].is_null(), "{field} missing: {created}");
    }
    assert_eq!(
        created["events"],
        json!(["task.failed", "refine_job.failed"])
    );
    assert_eq!(created["disabled"], false);
    assert_secret(&created["secret"]);
    let id = created["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/webhooks/{id}");

    let one: Value = app.get_json(&path).await;
    assert_eq!(one["id"], created["id"]);
    assert_eq!(one["url"], "https://8.8.8.8/hook");
    assert!(one.get("secret").is_none(), "{one}");
    let list: Value = app.get_json("/v1/webhooks").await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert!(!list.to_string().contains("whsec_"), "{list}");

    // The wildcard stands for every type.
    let all = create(
        &app,
        None,
        json!({"url": "https://1.1.1.1/", "events": ["*", "task.failed"]}),
    )
    .await;
    assert_eq!(all["events"], json!(["*"]));
    assert!(all["project_id"].is_null());

    let rotated = send(
        &app,
        reqwest::Method::POST,
        &format!("{path}/rotate-secret"),
        None,
        None,
    )
    .await;
    assert_eq!(rotated.status(), 200);
    let rotated: Value = rotated.json().await.unwrap();
    assert_secret(&rotated["secret"]);
    assert_ne!(rotated["secret"], created["secret"]);

    let deliveries: Value = app.get_json(&format!("{path}/deliveries")).await;
    assert_eq!(deliveries, json!([]));
    let unknown = uuid::Uuid::now_v7();
    let replay = send(
        &app,
        reqwest::Method::POST,
        &format!("{path}/deliveries/{unknown}/replay"),
        None,
        None,
    )
    .await;
    expect_problem(replay, 404, "not_found").await;

    // Bad input: 422 naming the field, nothing stored.
    for (body, field) in [
        (json!({"events": ["*"]}), "url"),
        (json!({"url": "ftp://8.8.8.8/", "events": ["*"]}), "url"),
        (json!({"url": 5, "events": ["*"]}), "url"),
        (json!({"url": "https://8.8.8.8/"}), "events"),
        (json!({"url": "https://8.8.8.8/", "events": []}), "events"),
        (
            json!({"url": "https://8.8.8.8/", "events": ["task.done"]}),
            "events",
        ),
        (json!({"url": "https://8.8.8.8/", "events": "*"}), "events"),
        (
            json!({"url": "https://8.8.8.8/", "events": ["*"], "project_id": ""}),
            "project_id",
        ),
        (
            json!({"url": "https://8.8.8.8/", "events": ["*"], "colour": "red"}),
            "colour",
        ),
    ] {
        let response = send(
            &app,
            reqwest::Method::POST,
            "/v1/webhooks",
            None,
            Some(&body),
        )
        .await;
        let problem = expect_problem(response, 422, "invalid_field").await;
        assert_eq!(problem["field"], field, "{body}: {problem}");
    }
    app.get_problem("/v1/webhooks/not-a-uuid", 400, "invalid_path")
        .await;
    let list: Value = app.get_json("/v1/webhooks").await;
    assert_eq!(list.as_array().unwrap().len(), 2);

    // The dashboard lists them (never a secret).
    let page = app
        .client
        .get(app.url("/ui/webhooks"))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("https://8.8.8.8/hook") && html.contains("ops pager"),
        "{html}"
    );
    assert!(!html.contains("whsec_"));

    let deleted = send(&app, reqwest::Method::DELETE, &path, None, None).await;
    assert_eq!(deleted.status(), 204);
    app.get_problem(&path, 404, "not_found").await;
    let again = send(&app, reqwest::Method::DELETE, &path, None, None).await;
    expect_problem(again, 404, "not_found").await;
}

async fn webhook_targets_must_be_public(app: TestApp) {
    for url in [
        "http://127.0.0.1:9/hook",
        "http://127.1.2.3/",
        "http://localhost:8080/",
        "http://LOCALHOST./",
        "http://[::1]/",
        "http://10.0.0.5/",
        "http://172.16.0.1/",
        "http://172.31.9.9/",
        "http://192.168.1.10/",
        "http://169.254.169.254/latest/meta-data",
        "http://169.254.10.10/",
        "http://0.0.0.0/",
        "http://[fe80::1]/",
        "http://[fd12::1]/",
        "http://[::ffff:127.0.0.1]/",
    ] {
        let response = send(
            &app,
            reqwest::Method::POST,
            "/v1/webhooks",
            None,
            Some(&json!({"url": url, "events": ["*"]})),
        )
        .await;
        let problem = expect_problem(response, 422, "webhook_url_not_allowed").await;
        assert_eq!(problem["field"], "url", "{url}: {problem}");
    }
    let list: Value = app.get_json("/v1/webhooks").await;
    assert_eq!(list, json!([]), "refused targets are not stored");
    create(
        &app,
        None,
        json!({"url": "https://8.8.4.4/hook", "events": ["*"]}),
    )
    .await;
    create(
        &app,
        None,
        json!({"url": "http://172.32.0.1:8080/", "events": ["*"]}),
    )
    .await;
}

async fn limited_tokens_see_only_their_projects_webhooks(backend: Backend) {
    let app = spawn_scoped(backend).await;
    let hook = |project: Option<&str>| {
        let mut body = json!({"url": "https://8.8.8.8/hook", "events": ["*"]});
        if let Some(p) = project {
            body["project_id"] = json!(p);
        }
        body
    };
    let mine = create(&app, Some(TOKEN_A), hook(Some("proj-a"))).await;
    let theirs = create(&app, Some(ADMIN), hook(Some("proj-b"))).await;
    let global = create(&app, Some(ADMIN), hook(None)).await;

    // A limited token cannot create for another project or for every project.
    for body in [hook(Some("proj-b")), hook(None)] {
        let response = send(
            &app,
            reqwest::Method::POST,
            "/v1/webhooks",
            Some(TOKEN_A),
            Some(&body),
        )
        .await;
        expect_problem(response, 403, "forbidden_project").await;
    }
    // Nor read, rotate, list deliveries of, replay or delete them: 403, not 404.
    for other in [&theirs, &global] {
        let path = format!("/v1/webhooks/{}", other["id"].as_str().unwrap());
        let any = uuid::Uuid::now_v7();
        for (method, p) in [
            (reqwest::Method::GET, path.clone()),
            (reqwest::Method::POST, format!("{path}/rotate-secret")),
            (reqwest::Method::GET, format!("{path}/deliveries")),
            (
                reqwest::Method::POST,
                format!("{path}/deliveries/{any}/replay"),
            ),
            (reqwest::Method::DELETE, path.clone()),
        ] {
            let response = send(&app, method.clone(), &p, Some(TOKEN_A), None).await;
            expect_problem(response, 403, "forbidden_project").await;
        }
        let still = send(&app, reqwest::Method::GET, &path, Some(ADMIN), None).await;
        assert_eq!(still.status(), 200, "a refused delete deleted nothing");
    }
    let list: Value = send(
        &app,
        reqwest::Method::GET,
        "/v1/webhooks",
        Some(TOKEN_A),
        None,
    )
    .await
    .json()
    .await
    .unwrap();
    let ids: Vec<&Value> = list.as_array().unwrap().iter().map(|w| &w["id"]).collect();
    assert_eq!(ids, vec![&mine["id"]]);
    let all: Value = send(
        &app,
        reqwest::Method::GET,
        "/v1/webhooks",
        Some(ADMIN),
        None,
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(all.as_array().unwrap().len(), 3);
    let own = format!("/v1/webhooks/{}", mine["id"].as_str().unwrap());
    let deleted = send(&app, reqwest::Method::DELETE, &own, Some(TOKEN_A), None).await;
    assert_eq!(deleted.status(), 204);
}

fn one_task_list(project: &str) -> Value {
    json!({"project_id": project, "created_by": "pm", "tasks": [
        {"task_id": "a", "assigned_persona": "p1", "parallel_group": 1, "depends_on": [],
         "reads": [], "writes": ["a.py"], "description": "do a"},
        {"task_id": "b", "assigned_persona": "p2", "parallel_group": 2, "depends_on": ["a"],
         "reads": ["a.py"], "writes": ["b.py"], "description": "do b"},
    ]})
}

/// The events of a task failure are stored with it: the first server cannot reach
/// the receiver and is stopped; the next one on the same database delivers them,
/// with the event's id as `webhook-id` and a signature by the webhook's secret.
/// The cascade-abandoned task sends no `task.failed`; the list's end comes once.
async fn events_outlive_the_server_that_stored_them(backend: Backend) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener); // nobody listens yet: attempts fail with "connection refused"
    let url = format!("http://{addr}/hook");
    let tweak = |s: &mut plangate::config::Settings| {
        s.webhooks.allow_private = true;
        s.webhooks.retry_schedule = vec![Duration::from_secs(1); 20];
        s.workers = 0;
    };
    let app = common::spawn_app_with(backend, tweak).await;
    let other = create(
        &app,
        None,
        json!({"url": url, "events": ["*"], "project_id": "proj-other"}),
    )
    .await;
    let hook = create(
        &app,
        None,
        json!({"url": url, "events": ["task.failed", "task_list.finished"], "project_id": "proj-w"}),
    )
    .await;
    let secret = hook["secret"].as_str().unwrap().to_owned();
    let list = app
        .post_json("/v1/task-lists", &one_task_list("proj-w"))
        .await;
    assert_eq!(list.status(), 201);
    let list: Value = list.json().await.unwrap();
    let task_a = list["tasks"][0]["id"].as_str().unwrap().to_owned();
    for status in ["running", "failed"] {
        let r = app
            .patch_json(&format!("/v1/tasks/{task_a}"), &json!({"status": status}))
            .await;
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }
    let deliveries_path = format!("/v1/webhooks/{}/deliveries", hook["id"].as_str().unwrap());
    // Stored with the change: listed at once, and attempted (and failing) soon.
    let deliveries: Value = app.get_json(&deliveries_path).await;
    let mut types: Vec<&str> = deliveries
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["type"].as_str().unwrap())
        .collect();
    types.sort();
    assert_eq!(types, ["task.failed", "task_list.finished"], "{deliveries}");
    let deadline = Instant::now() + Duration::from_secs(15);
    let failing = loop {
        let now: Value = app.get_json(&deliveries_path).await;
        if now
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["attempts"].as_i64() >= Some(1))
        {
            break now;
        }
        assert!(Instant::now() < deadline, "no attempt recorded: {now}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for d in failing.as_array().unwrap() {
        assert_eq!(d["state"], "pending", "{d}");
        assert!(d["last_error"].is_string(), "{d}");
        assert!(d["next_attempt_at"].is_string(), "{d}");
        assert!(d["delivered_at"].is_null(), "{d}");
    }
    let other_path = format!("/v1/webhooks/{}/deliveries", other["id"].as_str().unwrap());
    let none: Value = app.get_json(&other_path).await;
    assert_eq!(none, json!([]), "another project's webhook gets nothing");

    let database = app.stop_keeping_database().await;
    let receiver = Receiver::start_on(TcpListener::bind(addr).await.unwrap()).await;
    let app = common::spawn_app_on(database, backend, tweak).await;
    let seen = receiver.wait_for(2).await;
    let event_ids: Vec<String> = failing
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["event_id"].as_str().unwrap().to_owned())
        .collect();
    let mut bodies = Vec::new();
    for r in &seen {
        assert!(
            event_ids.contains(&r.id),
            "{} is not one of {event_ids:?}",
            r.id
        );
        let ts: i64 = r.timestamp.parse().expect("whole seconds");
        assert!((chrono::Utc::now().timestamp() - ts).abs() < 60);
        assert_eq!(r.signature, sign(&secret, &r.id, ts, &r.body).unwrap());
        let body: Value = serde_json::from_str(&r.body).unwrap();
        assert!(r.body.len() < 20 * 1024);
        bodies.push(body);
    }
    let failed = bodies.iter().find(|b| b["type"] == "task.failed").unwrap();
    assert_eq!(failed["data"]["id"], task_a.as_str());
    assert_eq!(failed["data"]["task_list_id"], list["id"]);
    assert_eq!(failed["data"]["status"], "failed");
    assert_eq!(failed["data"]["project_id"], "proj-w");
    assert_eq!(failed["data"]["path"], format!("/v1/tasks/{task_a}"));
    assert!(!failed.to_string().contains("do a"), "no task text");
    let finished = bodies
        .iter()
        .find(|b| b["type"] == "task_list.finished")
        .unwrap();
    assert_eq!(finished["data"]["id"], list["id"]);
    assert_eq!(
        finished["data"]["next"], "blocked",
        "b was abandoned by the cascade"
    );
    assert_eq!(
        finished["data"]["path"],
        format!("/v1/task-lists/{}", list["id"].as_str().unwrap())
    );
    assert!(chrono::DateTime::parse_from_rfc3339(finished["timestamp"].as_str().unwrap()).is_ok());

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now: Value = app.get_json(&deliveries_path).await;
        if now
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["state"] == "delivered")
        {
            for d in now.as_array().unwrap() {
                assert!(
                    d["delivered_at"].is_string() && d["next_attempt_at"].is_null(),
                    "{d}"
                );
                assert_eq!(d["last_status_code"], 204);
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not recorded as delivered: {now}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Exactly the two events: no task.failed for the abandoned task, one end.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(receiver.seen().len(), 2, "{:?}", receiver.seen());
    // Retention deletes ended deliveries and their events, never pending ones.
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    assert_eq!(
        app.db
            .delete_webhook_deliveries_before(later)
            .await
            .unwrap(),
        2
    );
    let left: Value = app.get_json(&deliveries_path).await;
    assert_eq!(left, json!([]));
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("webhook_deliveries_total{outcome=\"delivered\"}"),
        "{metrics}"
    );
}

/// A server without `PLANGATE_WEBHOOK_ALLOW_PRIVATE` never calls a private
/// target, even one stored while it was allowed: the delivery stays listed.
async fn private_targets_stored_earlier_are_not_called(backend: Backend) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let receiver = Receiver::start_on(listener).await;
    let allowed = common::spawn_app_with(backend, |s| {
        s.webhooks.allow_private = true;
        s.workers = 0;
    })
    .await;
    let hook = create(
        &allowed,
        None,
        json!({"url": receiver.url, "events": ["task.failed"]}),
    )
    .await;
    let database = allowed.stop_keeping_database().await;
    let app = common::spawn_app_on(database, backend, |s| {
        s.webhooks.retry_schedule = vec![Duration::from_secs(1); 3];
        s.workers = 0;
    })
    .await;
    let list: Value = app
        .post_for_json("/v1/task-lists", &one_task_list("proj-p"))
        .await;
    let task_a = list["tasks"][0]["id"].as_str().unwrap();
    for status in ["running", "failed"] {
        let r = app
            .patch_json(&format!("/v1/tasks/{task_a}"), &json!({"status": status}))
            .await;
        assert_eq!(r.status(), 200);
    }
    let path = format!("/v1/webhooks/{}/deliveries", hook["id"].as_str().unwrap());
    let deadline = Instant::now() + Duration::from_secs(15);
    let delivery = loop {
        let now: Value = app.get_json(&path).await;
        let d = now[0].clone();
        if d["attempts"].as_i64() >= Some(2) {
            break d;
        }
        assert!(Instant::now() < deadline, "no attempts: {now}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        delivery["last_error"]
            .as_str()
            .unwrap()
            .contains("webhook_url_not_allowed"),
        "{delivery}"
    );
    assert!(delivery["delivered_at"].is_null());
    assert!(receiver.seen().is_empty(), "the private target was called");
}

both_backends!(
    webhooks_rest_contract,
    webhook_targets_must_be_public,
    limited_tokens_see_only_their_projects_webhooks,
    events_outlive_the_server_that_stored_them,
    private_targets_stored_earlier_are_not_called,
);
