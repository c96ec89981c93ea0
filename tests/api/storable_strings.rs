//! Every string a client sends into storage, on SQLite and Postgres: generated JSON
//! strings (U+0000, lone surrogates written `\ud800`, other control characters, 4-byte
//! UTF-8, long text) go into each stored field. The answer is never 5xx; a string
//! with U+0000 is refused with 422 `invalid_field` naming the field by JSON pointer,
//! and nothing is written; a lone surrogate is a 4xx; what is accepted reads back
//! equal. And an L0 that prints U+0000 does not fail its job's writes.

use std::path::Path;

use crate::common::{Backend, TestApp, one_phase_plan, snapshot_tables};
use plangate::config::{ExecutorKind, ExecutorProfile};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use reqwest::Method;
use serde_json::{Value, json};

/// Marks the generated string's place in a request body.
const MARK: &str = "\u{e000}GENERATED\u{e000}";

/// One piece of a generated JSON string.
#[derive(Debug, Clone)]
enum Piece {
    Char(char),
    /// A lone UTF-16 surrogate, only expressible as a JSON escape.
    Surrogate(u16),
    /// A long run of text.
    Long(usize),
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        3 => any::<char>().prop_map(Piece::Char),
        2 => Just(Piece::Char('\0')),
        2 => prop_oneof![0x01u32..0x20, Just(0x7f), 0x80u32..0xa0]
            .prop_map(|c| Piece::Char(char::from_u32(c).unwrap())),
        2 => (0x1_0000u32..0x11_0000).prop_map(|c| Piece::Char(char::from_u32(c).unwrap())),
        2 => "[a-z/._-]{1,8}".prop_map(|s| Piece::Char(s.chars().next().unwrap())),
        1 => (0xd800u16..0xe000).prop_map(Piece::Surrogate),
        1 => (1_000usize..70_000).prop_map(Piece::Long),
    ]
}

#[derive(Debug, Clone)]
struct Generated(Vec<Piece>);

impl Generated {
    /// The JSON string literal (with quotes).
    fn literal(&self) -> String {
        let mut out = String::from("\"");
        for piece in &self.0 {
            match piece {
                Piece::Char(c) => {
                    let quoted = serde_json::to_string(&c.to_string()).unwrap();
                    out.push_str(&quoted[1..quoted.len() - 1]);
                }
                Piece::Surrogate(unit) => out.push_str(&format!("\\u{unit:04x}")),
                Piece::Long(n) => out.push_str(&"lorem ipsum ".repeat(n / 12 + 1)),
            }
        }
        out.push('"');
        out
    }

    /// A surrogate not paired with its other half. A high surrogate followed by a low one
    /// is a valid escape for one astral character, so the JSON parser decides.
    fn has_lone_surrogate(&self) -> bool {
        self.0.iter().any(|p| matches!(p, Piece::Surrogate(_)))
            && serde_json::from_str::<String>(&self.literal()).is_err()
    }

    fn has_nul(&self) -> bool {
        self.0.iter().any(|p| matches!(p, Piece::Char('\0')))
    }

    /// The string itself (only without lone surrogates).
    fn text(&self) -> String {
        serde_json::from_str(&self.literal()).expect("a string without lone surrogates")
    }
}

/// Where a stored field is written and how it is read back.
struct Field {
    name: &'static str,
    /// Set-up run once per case before the request (e.g. a list to patch).
    setup: Setup,
    method: Method,
    /// `{id}` is replaced by the set-up's resource id, `{n}` by a fresh number.
    path: &'static str,
    /// The body without the field; [`MARK`] goes at `pointer`.
    base: fn() -> Value,
    /// The JSON pointer the 422 names for a string holding U+0000.
    pointer: &'static str,
    read_back: ReadBack,
}

#[derive(Clone, Copy)]
enum Setup {
    None,
    TaskList,
    Track,
    TrackStarted,
}

#[derive(Clone, Copy)]
enum ReadBack {
    /// GET this path (`{id}` from the creation answer's `id`, `{n}` as in the path).
    Get(&'static str),
    /// The stored `request` column of the created row of this table.
    Request(&'static str),
}

fn tasks_with(description: Value, persona: Value, writes: Value, extra: Value) -> Value {
    json!([
        {"task_id": "t-1", "assigned_persona": persona, "parallel_group": 1, "writes": writes,
         "description": description, "custom": extra},
        {"task_id": "t-2", "assigned_persona": "rev", "parallel_group": 2, "depends_on": ["t-1"],
         "reads": ["a.py"], "description": "y"},
    ])
}

fn list_body(tasks: Value) -> Value {
    json!({"project_id": "proj", "team_pk": "cycle-1", "created_by": "pm", "tasks": tasks})
}

fn job_body() -> Value {
    json!({
        "context": {"schema_version": 1, "phase_id": "P1", "assignments": [one_phase_plan()["assignments"][0].clone()]},
        "refined_plan": one_phase_plan(),
        "task_text": "Ship it.",
    })
}

fn track(id: &str, description: Value) -> Value {
    json!({"track_id": id, "type": "feature", "status": "new",
           "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z",
           "description": description})
}

/// A task list whose every string is plain; the table marks one of them.
fn list() -> Value {
    list_body(tasks_with(
        json!("x"),
        json!("dev"),
        json!(["a.py"]),
        json!({"k": 1}),
    ))
}

fn job() -> Value {
    job_body()
}

fn run() -> Value {
    json!({"plan": one_phase_plan()})
}

/// `base()` with [`MARK`] written at `pointer` (a member or the next array entry is
/// added when missing).
fn marked(base: fn() -> Value, pointer: &str) -> Value {
    let mut body = base();
    let (parent, last) = pointer.rsplit_once('/').expect("a pointer");
    match body.pointer_mut(parent).expect("the parent exists") {
        Value::Array(items) => {
            let index: usize = last.parse().expect("an index");
            items.resize(items.len().max(index + 1), Value::Null);
            items[index] = json!(MARK);
        }
        parent => parent[last] = json!(MARK),
    }
    body
}

#[allow(clippy::too_many_arguments)]
fn field(
    name: &'static str,
    setup: Setup,
    method: Method,
    path: &'static str,
    base: fn() -> Value,
    pointer: &'static str,
    read_back: ReadBack,
) -> Field {
    Field {
        name,
        setup,
        method,
        path,
        base,
        pointer,
        read_back,
    }
}

// One field per line, read across: rustfmt would give each row a dozen lines.
#[rustfmt::skip]
fn fields() -> Vec<Field> {
    use ReadBack::{Get, Request};
    use Setup::{None, TaskList, Track, TrackStarted};
    let track_body = || track("track-{n}", json!("d"));
    vec![
        field("task description", None, Method::POST, "/v1/task-lists", list, "/tasks/0/description", Get("/v1/task-lists/{id}")),
        field("task persona", None, Method::POST, "/v1/task-lists", list, "/tasks/0/assigned_persona", Get("/v1/task-lists/{id}")),
        field("task writes entry", None, Method::POST, "/v1/task-lists", list, "/tasks/0/writes/1", Get("/v1/task-lists/{id}")),
        field("task extra member", None, Method::POST, "/v1/task-lists", list, "/tasks/0/custom/k", Get("/v1/task-lists/{id}")),
        field("task-list created_by", None, Method::POST, "/v1/task-lists", list, "/created_by", Get("/v1/task-lists/{id}")),
        field("task notes", TaskList, Method::PATCH, "/v1/tasks/{id}", || json!({"status": "running"}), "/notes", Get("/v1/tasks-of-setup")),
        field("team lead_role", None, Method::POST, "/v1/projects/proj/teams", || json!({"team_pk": "team-{n}"}), "/lead_role", Get("/v1/projects/proj/teams")),
        field("track description", None, Method::PUT, "/v1/tracks/track-{n}", track_body, "/description", Get("/v1/tracks/track-{n}")),
        field("track step agent", Track, Method::POST, "/v1/tracks/track-{n}/steps/PLAN/start", || json!({}), "/agent", Get("/v1/tracks/track-{n}")),
        field("track step notes", TrackStarted, Method::POST, "/v1/tracks/track-{n}/steps/PLAN/complete", || json!({"outcome": "PASSED"}), "/notes", Get("/v1/tracks/track-{n}")),
        field("refine job task_text", None, Method::POST, "/v1/refine-jobs", job, "/task_text", Request("refine_jobs")),
        field("refine job assignment goal", None, Method::POST, "/v1/refine-jobs", job, "/context/assignments/0/goal", Request("refine_jobs")),
        field("refine job project_id", None, Method::POST, "/v1/refine-jobs", job, "/project_id", Get("/v1/refine-jobs/{id}")),
        field("refine run plan task", None, Method::POST, "/v1/refine-runs", run, "/plan/task", Request("refine_runs")),
        field("refine run assignment name", None, Method::POST, "/v1/refine-runs", run, "/plan/assignments/0/name", Request("refine_runs")),
    ]
}

async fn send_text(app: &TestApp, method: Method, path: &str, body: String) -> reqwest::Response {
    app.client
        .request(method, app.url(path))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("request")
}

/// Whether `needle` is one of the strings anywhere in `document`.
fn holds_string(document: &Value, needle: &str) -> bool {
    match document {
        Value::String(s) => s == needle,
        Value::Array(items) => items.iter().any(|v| holds_string(v, needle)),
        Value::Object(members) => members.values().any(|v| holds_string(v, needle)),
        _ => false,
    }
}

async fn stored_request(app: &TestApp, table: &str, id: &str) -> Value {
    let query = format!("SELECT CAST(request AS TEXT) FROM {table} WHERE id = $1");
    let id = uuid::Uuid::parse_str(id).unwrap();
    let text: String = with_connection!(app, conn => {
        sqlx::query_scalar(sqlx::AssertSqlSafe(query))
            .bind(id)
            .fetch_one(conn)
            .await
            .unwrap()
    });
    serde_json::from_str(&text).unwrap()
}

/// One generated string into one field.
async fn check(app: &TestApp, field: &Field, generated: &Generated, n: u64) -> Result<(), String> {
    let fresh = |s: &str| s.replace("{n}", &n.to_string());
    // Set-up, with the unrestricted plain values.
    let mut setup_id = None;
    match field.setup {
        Setup::None => {}
        Setup::TaskList => {
            let body = list_body(tasks_with(
                json!("x"),
                json!("dev"),
                json!(["a.py"]),
                json!(1),
            ));
            let list: Value = app.post_for_json("/v1/task-lists", &body).await;
            setup_id = Some((
                list["id"].as_str().unwrap().to_owned(),
                list["tasks"][0]["id"].as_str().unwrap().to_owned(),
            ));
        }
        Setup::Track | Setup::TrackStarted => {
            let path = fresh("/v1/tracks/track-{n}");
            let body = track(&fresh("track-{n}"), json!("d"));
            let put = send_text(app, Method::PUT, &path, body.to_string()).await;
            assert_eq!(put.status(), 201);
            if matches!(field.setup, Setup::TrackStarted) {
                let start = app
                    .post_json(
                        &fresh("/v1/tracks/track-{n}/steps/PLAN/start"),
                        &json!({"agent": "a"}),
                    )
                    .await;
                assert_eq!(start.status(), 200);
            }
        }
    }
    let path = match &setup_id {
        Some((_, task)) => field.path.replace("{id}", task),
        None => fresh(field.path),
    };
    let body = fresh(&marked(field.base, field.pointer).to_string())
        .replace(&format!("\"{MARK}\""), &generated.literal());
    let before = if generated.has_nul() {
        Some(snapshot_tables(app).await)
    } else {
        None
    };
    let response = send_text(app, field.method.clone(), &path, body).await;
    let status = response.status().as_u16();
    let answer: Value = response.json().await.unwrap_or(Value::Null);
    if status >= 500 {
        return Err(format!("{status}: {answer}"));
    }
    if generated.has_lone_surrogate() {
        if !(400..500).contains(&status) {
            return Err(format!("a lone surrogate was accepted: {status} {answer}"));
        }
        return Ok(());
    }
    if generated.has_nul() {
        if status != 422 || answer["code"] != "invalid_field" || answer["field"] != field.pointer {
            return Err(format!(
                "NUL: expected 422 invalid_field at {}: {status} {answer}",
                field.pointer
            ));
        }
        if Some(snapshot_tables(app).await) != before {
            return Err("a refused request changed the database".into());
        }
        return Ok(());
    }
    if !(200..300).contains(&status) {
        return Ok(()); // refused for another reason (an id's rules, a length limit)
    }
    let text = generated.text();
    let stored = match field.read_back {
        ReadBack::Get("/v1/tasks-of-setup") => {
            let (list, _) = setup_id.as_ref().unwrap();
            app.get_json(&format!("/v1/task-lists/{list}")).await
        }
        ReadBack::Get(read) => {
            let id = answer["id"].as_str().unwrap_or_default();
            app.get_json(&fresh(read).replace("{id}", id)).await
        }
        ReadBack::Request(table) => {
            stored_request(app, table, answer["id"].as_str().unwrap()).await
        }
    };
    if !holds_string(&stored, &text) {
        return Err(format!(
            "accepted ({status}) but not read back equal: {stored}"
        ));
    }
    Ok(())
}

async fn every_stored_field_takes_or_refuses_every_string(backend: Backend) {
    let app = crate::common::spawn_app_with(backend, |s| s.workers = 0).await;
    let fields = fields();
    let mut runner = TestRunner::new(Config {
        cases: 12,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = prop::collection::vec(piece(), 0..6).prop_map(Generated);
    let handle = tokio::runtime::Handle::current();
    let n = std::cell::Cell::new(0u64);
    // Every field also gets each of these fixed strings, so each branch is reached.
    let fixed = [
        Generated(vec![Piece::Char('a'), Piece::Char('\0'), Piece::Char('b')]),
        Generated(vec![Piece::Surrogate(0xd800)]),
        Generated(vec![
            Piece::Char('\u{1}'),
            Piece::Char('\u{1f600}'),
            Piece::Long(70_000),
        ]),
    ];
    for field in &fields {
        for generated in &fixed {
            n.set(n.get() + 1);
            if let Err(e) = check(&app, field, generated, n.get()).await {
                panic!("{}: {generated:?}: {e}", field.name);
            }
        }
    }
    let result = tokio::task::block_in_place(|| {
        runner.run(&strategy, |generated| {
            for field in &fields {
                n.set(n.get() + 1);
                handle
                    .block_on(check(&app, field, &generated, n.get()))
                    .map_err(|e| TestCaseError::fail(format!("{}: {e}", field.name)))?;
            }
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    app.shutdown().await;
}

both_backends!(every_stored_field_takes_or_refuses_every_string);

// ---------------------------------------------------------------------------
// L0 output is not client input: U+0000 from an agent is stored as U+FFFD.

fn l0_profile(mode: &str) -> ExecutorProfile {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/l0/l0.sh");
    ExecutorProfile {
        argv: vec![script.display().to_string(), mode.to_owned()],
        timeout_secs: Some(30),
        ..crate::common::executor_profile(ExecutorKind::Command)
    }
}

async fn l0_output_with_nul_is_stored(backend: Backend) {
    let app = crate::common::spawn_app_with(backend, |s| {
        s.executors.insert("nul".into(), l0_profile("nul"));
        s.executors
            .insert("nul-fail".into(), l0_profile("nul-fail"));
    })
    .await;
    // A failed L0 does not fail its job (the phase goes on with N-1 suggestions).
    for (executor, job_status, l0_status) in [
        ("nul", "succeeded", "valid"),
        ("nul-fail", "succeeded", "failed"),
    ] {
        let mut body = job_body();
        body["executor"] = json!(executor);
        let created = app.post_json("/v1/refine-jobs", &body).await;
        assert_eq!(created.status(), 202);
        let id = created.json::<Value>().await.unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let job = app.wait_job(&id).await;
        assert_eq!(job["status"], job_status, "{job}");
        let log = job["log"].to_string();
        assert!(log.contains("held U+0000 (NUL)"), "{job}");
        let text = job.to_string();
        assert!(!text.contains("\\u0000"), "{text}");
        let l0s: Value = app
            .get_json(&format!("/v1/refine-jobs/{id}/assignments"))
            .await;
        assert_eq!(l0s[0]["status"], l0_status, "{l0s}");
        let excerpt = l0s[0]["output_excerpt"].as_str().unwrap_or_default();
        assert!(excerpt.contains('\u{fffd}'), "{l0s}");
        if executor == "nul" {
            // The escaped NUL in the answer's JSON became U+FFFD too.
            let result = job["result"].to_string();
            assert!(result.contains("before\u{fffd}after"), "{result}");
        }
    }
    // A client's NUL is still refused.
    let mut body = job_body();
    body["task_text"] = json!("a\u{0}b");
    let problem = app
        .post_problem("/v1/refine-jobs", &body, 422, "invalid_field")
        .await;
    assert_eq!(problem["field"], "/task_text");
    app.shutdown().await;
}

both_backends!(l0_output_with_nul_is_stored);
