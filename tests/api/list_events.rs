//! A task list's event stream (docs/api.md, "List events"): claims and status
//! changes arrive as SSE `task` events on the replica that made them and on
//! another; `Last-Event-ID` resumes after an event; an event committed out of id
//! order is still sent; bad input is a problem — on both databases.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Backend, TestApp, expect_problem, server_id, spawn_app, sse};

/// An open stream and what it has buffered of its next frame.
struct Stream {
    body: reqwest::Response,
    buffer: String,
}

impl Stream {
    async fn open(app: &TestApp, list: &str, last_event_id: Option<&str>) -> Stream {
        let path = format!("/v1/task-lists/{list}/events");
        Stream {
            body: sse::open(app, &path, last_event_id).await,
            buffer: String::new(),
        }
    }

    /// The next `task` event: `(id, data)`.
    async fn next(&mut self) -> (String, Value) {
        let read = async {
            loop {
                if let Some(end) = self.buffer.find("\n\n") {
                    let frame: String = self.buffer.drain(..end + 2).collect();
                    let field = |name: &str| sse::field(&frame, name);
                    if field("event").as_deref() != Some("task") {
                        continue; // a keep-alive comment
                    }
                    let data: Value = serde_json::from_str(&field("data").unwrap()).unwrap();
                    return (field("id").unwrap(), data);
                }
                let chunk = self.body.chunk().await.unwrap().expect("the stream ended");
                self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        };
        tokio::time::timeout(Duration::from_secs(20), read)
            .await
            .expect("no event within 20 s")
    }
}

async fn two_task_list(app: &TestApp) -> Value {
    let task = |id: &str, deps: &[&str]| {
        json!({"task_id": id, "assigned_persona": "dev", "parallel_group": if deps.is_empty() { 1 } else { 2 },
               "depends_on": deps, "reads": [], "writes": [format!("{id}.rs")], "description": id})
    };
    let body = json!({"project_id": "proj", "created_by": "pm",
                      "tasks": [task("A", &[]), task("B", &["A"])]});
    let response = app.post_json("/v1/task-lists", &body).await;
    assert_eq!(response.status(), 201);
    response.json().await.unwrap()
}

/// Claim A and finish it on `writer`; the stream (opened before, on `reader`)
/// sees both, in order, with what an agent needs to act.
async fn claim_and_finish_are_streamed(backend: Backend) {
    let app = spawn_app(backend).await;
    // On Postgres the stream is on another replica (its wake-up comes by NOTIFY);
    // SQLite has one server.
    let other = match backend {
        Backend::Postgres => Some(app.spawn_replica(|_| {}).await),
        Backend::Sqlite => None,
    };
    let reader = other.as_ref().unwrap_or(&app);
    let list = two_task_list(&app).await;
    let list_id = list["id"].as_str().unwrap();
    let a = server_id(&list, "A");
    let mut stream = Stream::open(reader, list_id, None).await;

    let claim = app.claim(list_id, &json!({"holder": "agent-1"})).await;
    assert_eq!(claim.status(), 200);
    let (claimed_id, claimed) = stream.next().await;
    assert_eq!(claimed["kind"], "claimed", "{claimed}");
    assert_eq!(claimed["task"], a.as_str());
    assert_eq!(claimed["task_id"], "A");
    assert_eq!(claimed["holder"], "agent-1");
    assert_eq!(claimed["to_status"], "running");
    assert_eq!(claimed["id"], claimed_id.as_str());

    let done = app
        .patch_json(
            &format!("/v1/tasks/{a}"),
            &json!({"status": "done", "holder": "agent-1"}),
        )
        .await;
    assert_eq!(done.status(), 200, "{}", done.text().await.unwrap());
    let (done_id, finished) = stream.next().await;
    assert_eq!(finished["kind"], "status_changed", "{finished}");
    assert_eq!(finished["from_status"], "running");
    assert_eq!(finished["to_status"], "done");
    assert!(
        done_id > claimed_id,
        "ids grow: {claimed_id} then {done_id}"
    );

    // Resumed after the claim: the next event is the `done`.
    let mut resumed = Stream::open(reader, list_id, Some(&claimed_id)).await;
    let (first_id, _) = resumed.next().await;
    assert_eq!(first_id, done_id);

    // An event whose write took its id earlier but committed after later ones
    // were sent (as concurrent writers do) is still sent.
    let late_id = uuid::Uuid::now_v7();
    let b = server_id(&list, "B");
    let claim_b = app.claim(list_id, &json!({"holder": "agent-2"})).await;
    assert_eq!(claim_b.status(), 200);
    let (_, claimed_b) = stream.next().await;
    assert_eq!(claimed_b["task"], b.as_str(), "{claimed_b}");
    let (task, list_uuid) = (
        uuid::Uuid::parse_str(&b).unwrap(),
        uuid::Uuid::parse_str(list_id).unwrap(),
    );
    with_connection!(app, conn => {
        sqlx::query(
            "INSERT INTO task_events (id, task_id, task_list_id, at, kind, holder, from_status, \
             to_status, attempt, forced) VALUES ($1, $2, $3, $4, 'renewed', 'agent-2', 'running', \
             'running', 1, false)",
        )
        .bind(late_id)
        .bind(task)
        .bind(list_uuid)
        .bind(chrono::Utc::now())
        .execute(&mut *conn)
        .await
        .unwrap();
    });
    let (id, late) = stream.next().await;
    assert_eq!(id, late_id.to_string(), "{late}");
    assert_eq!(late["kind"], "renewed");

    if let Some(other) = other {
        other.shutdown().await;
    }
    app.shutdown().await;
}

/// Unknown lists, other projects' lists and bad `Last-Event-ID`s are problems.
async fn bad_requests_are_problems(backend: Backend) {
    let app = crate::common::spawn_app_with_project_tokens(backend, |_| {}).await;
    let list = {
        let body = json!({"project_id": "proj-a", "created_by": "pm", "tasks": [
            {"task_id": "A", "assigned_persona": "dev", "parallel_group": 1, "depends_on": [],
             "reads": [], "writes": ["a.rs"], "description": "a"}]});
        let response = app
            .client
            .post(app.url("/v1/task-lists"))
            .bearer_auth(crate::common::TOKEN_A)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
        response.json::<Value>().await.unwrap()
    };
    let events = format!("/v1/task-lists/{}/events", list["id"].as_str().unwrap());
    let get = |token: &'static str, last: Option<&'static str>| {
        let mut request = app.client.get(app.url(&events)).bearer_auth(token);
        if let Some(last) = last {
            request = request.header("last-event-id", last);
        }
        request.send()
    };
    expect_problem(
        get(crate::common::TOKEN_A, Some("seven")).await.unwrap(),
        400,
        "invalid_last_event_id",
    )
    .await;
    expect_problem(
        get(crate::common::TOKEN_B, None).await.unwrap(),
        403,
        "forbidden_project",
    )
    .await;
    let unknown = app
        .client
        .get(app.url(&format!("/v1/task-lists/{}/events", uuid::Uuid::now_v7())))
        .bearer_auth(crate::common::TOKEN_A)
        .send()
        .await
        .unwrap();
    expect_problem(unknown, 404, "not_found").await;
    app.shutdown().await;
}

both_backends!(claim_and_finish_are_streamed, bad_requests_are_problems);
