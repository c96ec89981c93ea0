//! Many writers at once on one database (docs/architecture.md, "Writers
//! on SQLite"): task PATCHes whose cascades span a 2,000-task list, task-list
//! creates, track steps and refine-job creates, with the dashboard's live stream
//! and page open on the big list. Every write must be acknowledged (no 5xx: on
//! SQLite, no "database is locked"), and every acknowledged write must be read back.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::common::TestApp;
use futures::StreamExt;
use serde_json::{Value, json};

/// Roots of the big list; each has `DEPENDENTS` dependents, so failing a root
/// cascade-abandons them all: 40 × (1 + 49) = 2,000 tasks.
const ROOTS: usize = 40;
const DEPENDENTS: usize = 49;
/// Writers at once, a quarter of each kind.
const WRITERS: usize = 32;
/// Writes of each list and job writer.
const ROUNDS: usize = 3;

fn big_list() -> Value {
    let mut tasks = Vec::with_capacity(ROOTS * (DEPENDENTS + 1));
    for root in 0..ROOTS {
        tasks.push(json!({
            "task_id": format!("r{root}"), "assigned_persona": "dev", "parallel_group": 1,
            "depends_on": [], "reads": [], "writes": [format!("r{root}.py")],
            "description": format!("root {root}"),
        }));
        for dep in 0..DEPENDENTS {
            tasks.push(json!({
                "task_id": format!("r{root}-d{dep}"), "assigned_persona": "dev",
                "parallel_group": 2, "depends_on": [format!("r{root}")], "reads": [],
                "writes": [format!("r{root}-d{dep}.py")],
                "description": format!("dependent {dep} of root {root}"),
            }));
        }
    }
    Value::Array(tasks)
}

fn small_list(writer: usize, round: usize) -> Value {
    let tasks: Vec<Value> = (0..50)
        .map(|i| {
            json!({
                "task_id": format!("w{writer}-{round}-t{i}"), "assigned_persona": "dev",
                "parallel_group": 1, "depends_on": [], "reads": [],
                "writes": [format!("w{writer}-{round}-{i}.py")], "description": "small",
            })
        })
        .collect();
    json!({"project_id": format!("load-{writer}"), "created_by": "pm", "tasks": tasks})
}

/// A refine job with one assignment (the default `builtin` executor runs it, so the
/// workers write too).
fn refine_job() -> Value {
    json!({
        "context": {"schema_version": 1, "phase_id": "P1", "assignments": [{
            "id": "P1-A1", "phase_id": "P1", "name": "One", "goal": "g",
            "technical_approach": "t", "dependency_notes": "", "overlap_notes": "",
            "proposed_work_packages": [
                {"id_suffix": "WP1", "name": "first", "estimated_files": ["src/a.rs"]}
            ]}], "peer_summaries": []},
        "refined_plan": {"task": "t", "phases": [{"id": "P1", "name": "P", "goal": "g",
            "scope": "s", "technical_approach": "t", "relationship_notes": "", "ordering": 1}]},
        "task_text": "t",
    })
}

/// What the writers saw: the failures (anything but the expected status) and what
/// the acknowledged writes promise is stored.
#[derive(Default)]
struct Seen {
    failures: Vec<String>,
    cascade_latencies: Vec<Duration>,
    lists: Vec<String>,
    tracks: Vec<String>,
    jobs: Vec<String>,
}

async fn expect(
    seen: &Mutex<Seen>,
    what: &str,
    response: reqwest::Response,
    status: u16,
) -> Option<Value> {
    let got = response.status().as_u16();
    let body = response.text().await.unwrap_or_default();
    if got != status {
        seen.lock()
            .unwrap()
            .failures
            .push(format!("{what}: {got} {body}"));
        return None;
    }
    Some(serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// Fails roots `writer, writer + 8, …` of the big list one by one (running, then
/// failed: each failure cascades over its 49 dependents).
async fn cascade_writer(app: &TestApp, seen: &Mutex<Seen>, roots: &[String], writer: usize) {
    for root in roots.iter().skip(writer).step_by(WRITERS / 4) {
        let path = format!("/v1/tasks/{root}");
        let running = app.patch_json(&path, &json!({"status": "running"})).await;
        if expect(seen, "PATCH running", running, 200).await.is_none() {
            continue;
        }
        let started = Instant::now();
        let failed = app.patch_json(&path, &json!({"status": "failed"})).await;
        let elapsed = started.elapsed();
        if let Some(answer) = expect(seen, "PATCH failed", failed, 200).await {
            let cascaded = answer["cascaded"].as_array().map_or(0, Vec::len);
            let mut seen = seen.lock().unwrap();
            seen.cascade_latencies.push(elapsed);
            if cascaded != DEPENDENTS {
                seen.failures
                    .push(format!("PATCH failed cascaded {cascaded}: {answer}"));
            }
        }
    }
}

async fn list_writer(app: &TestApp, seen: &Mutex<Seen>, writer: usize) {
    for round in 0..ROUNDS {
        let response = app
            .post_json("/v1/task-lists", &small_list(writer, round))
            .await;
        if let Some(list) = expect(seen, "POST task-list", response, 201).await {
            let id = list["id"].as_str().unwrap_or_default().to_owned();
            seen.lock().unwrap().lists.push(id);
        }
    }
}

async fn track_writer(app: &TestApp, seen: &Mutex<Seen>, writer: usize) {
    let track = format!("load-{writer}_20261202");
    let document = json!({"track_id": track, "type": "feature", "status": "new",
        "created_at": "2026-12-02T09:00:00Z", "updated_at": "2026-12-02T09:00:00Z",
        "description": "load"});
    let put = app
        .client
        .put(app.url(&format!("/v1/tracks/{track}")))
        .json(&document)
        .send()
        .await
        .unwrap();
    if expect(seen, "PUT track", put, 201).await.is_none() {
        return;
    }
    for step in ["PLAN", "EVALUATE_PLAN"] {
        for (action, body) in [
            ("start", json!({"agent": "a"})),
            ("complete", json!({"outcome": "PASSED"})),
        ] {
            let response = app
                .post_json(&format!("/v1/tracks/{track}/steps/{step}/{action}"), &body)
                .await;
            if expect(seen, "track step", response, 200).await.is_none() {
                return;
            }
        }
    }
    seen.lock().unwrap().tracks.push(track);
}

async fn job_writer(app: &TestApp, seen: &Mutex<Seen>) {
    for _ in 0..ROUNDS {
        let response = app.post_json("/v1/refine-jobs", &refine_job()).await;
        if let Some(job) = expect(seen, "POST refine-job", response, 202).await {
            let id = job["id"].as_str().unwrap_or_default().to_owned();
            seen.lock().unwrap().jobs.push(id);
        }
    }
}

/// 32 writers of every kind at once, with the dashboard open on the big list: no
/// write is refused, and each one acknowledged is stored. Prints the p99 of a
/// cascading PATCH (measured, not asserted).
async fn writers_of_every_kind_are_all_acknowledged_and_stored(app: TestApp) {
    let response = app
        .post_json(
            "/v1/task-lists",
            &json!({"project_id": "big", "created_by": "pm", "tasks": big_list()}),
        )
        .await;
    assert_eq!(response.status(), 201);
    let big: Value = response.json().await.unwrap();
    let big_id = big["id"].as_str().unwrap().to_owned();
    let roots: Vec<String> = (0..ROOTS)
        .map(|r| {
            big["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["task_id"] == format!("r{r}"))
                .unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();

    // The dashboard: two live streams and a page reloaded in a loop.
    let mut streams = Vec::new();
    for _ in 0..2 {
        let response = app.get(&format!("/ui/task-lists/{big_id}/events")).await;
        assert_eq!(response.status(), 200);
        streams.push(tokio::spawn(async move {
            let mut body = response.bytes_stream();
            while let Some(Ok(_)) = body.next().await {}
        }));
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    let seen = Mutex::new(Seen::default());
    let page = async {
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            let response = app.get(&format!("/ui/task-lists/{big_id}")).await;
            expect(&seen, "GET dashboard page", response, 200).await;
            // A person reloading, not a busy loop taking a core from the writers.
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    let writers = async {
        futures::future::join_all((0..WRITERS).map(|w| {
            let (app, seen, roots) = (&app, &seen, &roots);
            async move {
                match w % 4 {
                    0 => cascade_writer(app, seen, roots, w / 4).await,
                    1 => list_writer(app, seen, w).await,
                    2 => track_writer(app, seen, w).await,
                    _ => job_writer(app, seen).await,
                }
            }
        }))
        .await;
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    };
    tokio::join!(page, writers);
    for stream in streams {
        stream.abort();
    }

    let mut seen = seen.into_inner().unwrap();
    let mut latencies = std::mem::take(&mut seen.cascade_latencies);
    latencies.sort();
    if let Some(max) = latencies.last() {
        let p = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
        println!(
            "{:?}: {} cascading PATCHes over {} tasks: p50 {:?}, p99 {:?}, max {max:?}",
            app.backend,
            latencies.len(),
            ROOTS * (DEPENDENTS + 1),
            p(0.5),
            p(0.99),
        );
    }
    assert!(
        seen.failures.is_empty(),
        "{} writes refused:\n{}",
        seen.failures.len(),
        seen.failures.join("\n")
    );

    // Every acknowledged write is stored.
    let stored: Value = app.get_json(&format!("/v1/task-lists/{big_id}")).await;
    for task in stored["tasks"].as_array().unwrap() {
        let expected = if task["parallel_group"] == 1 {
            "failed"
        } else {
            "abandoned"
        };
        assert_eq!(task["status"], expected, "{task}");
    }
    assert_eq!(seen.lists.len(), WRITERS / 4 * ROUNDS);
    for id in &seen.lists {
        let response = app.get(&format!("/v1/task-lists/{id}")).await;
        assert_eq!(response.status(), 200, "list {id}");
        let list: Value = response.json().await.unwrap();
        assert_eq!(list["tasks"].as_array().unwrap().len(), 50, "list {id}");
    }
    assert_eq!(seen.tracks.len(), WRITERS / 4);
    for track in &seen.tracks {
        let meta: Value = app.get_json(&format!("/v1/tracks/{track}")).await;
        assert_eq!(meta["loop_state"]["current_step"], "EXECUTE", "{track}");
    }
    assert_eq!(seen.jobs.len(), WRITERS / 4 * ROUNDS);
    for id in &seen.jobs {
        let response = app.get(&format!("/v1/refine-jobs/{id}")).await;
        assert_eq!(response.status(), 200, "job {id}");
    }
    app.shutdown().await;
}

/// Another process holding SQLite's write lock past `busy_timeout` (10 s) makes a
/// write answer 503 `database_unavailable` with `Retry-After` — retryable, not a 500
/// — and the write is not applied (docs/architecture.md, "Writers on SQLite").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_locked_by_another_process_answers_503_with_retry_after() {
    // The PATCH may queue behind the background workers' own writes (claim poll,
    // reaper), each of which first waits out busy_timeout against the foreign lock:
    // give the request room for those waits, so what is checked is the answer (503
    // with Retry-After, never 500), not the request timeout (seen in CI: 408).
    let app = crate::common::spawn_app_with(crate::common::Backend::Sqlite, |s| {
        s.request_timeout = std::time::Duration::from_secs(120);
    })
    .await;
    let tasks = json!([{"task_id": "a", "assigned_persona": "dev", "parallel_group": 1,
                        "depends_on": [], "reads": [], "writes": [], "description": "a"}]);
    let list: Value = app
        .post_for_json(
            "/v1/task-lists",
            &json!({"project_id": "p", "created_by": "pm", "tasks": tasks}),
        )
        .await;
    let task = list["tasks"][0]["id"].as_str().unwrap().to_owned();
    // The other process: a connection of its own holding the write lock.
    let mut other = crate::common::hold_sqlite_write_lock(&app).await;
    let response = app
        .patch_json(&format!("/v1/tasks/{task}"), &json!({"status": "running"}))
        .await;
    let retry_after = response.headers().get("retry-after").cloned();
    crate::common::expect_problem(response, 503, "database_unavailable").await;
    assert_eq!(retry_after.unwrap(), "1");
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    let stored: Value = app
        .get_json(&format!("/v1/task-lists/{}", list["id"].as_str().unwrap()))
        .await;
    assert_eq!(stored["tasks"][0]["status"], "pending");
    app.shutdown().await;
}

both_backends!(writers_of_every_kind_are_all_acknowledged_and_stored);
