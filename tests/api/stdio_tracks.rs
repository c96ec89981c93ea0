//! Tracks for the stdio user (docs/mcp.md, README): the `import_track` tool then
//! `track_step` (over HTTP here; over stdio by the Python SDK in
//! tests/mcp_client/stdio_tracks.py), `plangate track import|show|step` as the real
//! binary on both databases, and where `plangate mcp` keeps its database when no
//! `DATABASE_URL` names one.

use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::common::{self, Backend, FreshDatabase, TestApp};

use crate::common::{ADMIN, LIMITED};

async fn spawn(backend: Backend) -> TestApp {
    common::spawn_app_with_tokens(backend).await
}

/// One JSON-RPC request to an MCP endpoint as `token`: the response object.
async fn rpc(app: &TestApp, path: &str, token: &str, method: &str, params: Value) -> Value {
    app.mcp_rpc(path, Some(token), method, params).await
}

/// Call a tool on `/mcp` as `token`; answers (is_error, the JSON its text carries).
async fn call(app: &TestApp, token: &str, name: &str, arguments: Value) -> (bool, Value) {
    app.call_tool_as("/mcp", Some(token), name, arguments).await
}

async fn rest_revision(app: &TestApp, id: &str) -> (u16, Option<String>) {
    let response = app
        .client
        .get(app.url(&format!("/v1/tracks/{id}")))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("GET track");
    let etag = response
        .headers()
        .get("etag")
        .map(|v| v.to_str().expect("ascii").to_owned());
    (response.status().as_u16(), etag)
}

fn v1(track_id: Option<&str>) -> Value {
    let mut doc = json!({"type": "feature", "status": "new",
                         "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z"});
    if let Some(id) = track_id {
        doc["track_id"] = json!(id);
    }
    doc
}

/// `import_track` creates a track `track_step` then moves, pinned revisions and
/// project limits work as on `PUT /v1/tracks/{id}`, and every refusal changes nothing.
async fn import_track_then_track_step(backend: Backend) {
    let app = spawn(backend).await;
    let (error, imported) = call(
        &app,
        LIMITED,
        "import_track",
        json!({"track_id": "imp-1", "metadata": v1(None), "project_id": "proj-a"}),
    )
    .await;
    assert!(!error, "{imported}");
    assert_eq!(
        imported,
        json!({"track_id": "imp-1", "created": true, "status": "new", "current_step": "PLAN",
               "step_status": "NOT_STARTED", "revision": 1, "legal_next": ["start PLAN"]})
    );
    let (error, started) = call(
        &app,
        LIMITED,
        "track_step",
        json!({"track_id": "imp-1", "step": "PLAN", "action": "start", "agent": "a1", "if_match": 1}),
    )
    .await;
    assert!(!error, "{started}");
    assert_eq!(
        (&started["step_status"], &started["revision"]),
        (&json!("IN_PROGRESS"), &json!(2))
    );

    // Refusals, each naming its code; none of them writes.
    let refusals = [
        (
            LIMITED,
            json!({"track_id": "imp-1", "metadata": v1(None), "if_match": 1}),
            "stale_etag",
        ),
        (
            LIMITED,
            json!({"track_id": "imp-1", "metadata": v1(None), "project_id": "proj-b"}),
            "forbidden_project",
        ),
        (
            LIMITED,
            json!({"track_id": "imp-2", "metadata": v1(None)}),
            "forbidden_project",
        ),
        (
            ADMIN,
            json!({"track_id": "imp-1", "metadata": v1(Some("other"))}),
            "track_id_mismatch",
        ),
        (
            ADMIN,
            json!({"track_id": "imp-1", "metadata": {"version": 3}}),
            "unsupported_version",
        ),
        (
            ADMIN,
            json!({"track_id": "imp-1", "metadata": [1]}),
            "invalid_metadata",
        ),
        (
            ADMIN,
            json!({"track_id": "imp 1", "metadata": v1(None)}),
            "invalid_track_id",
        ),
        (
            ADMIN,
            json!({"track_id": "imp-1", "metadata": {"description": "a\u{0}b"}}),
            "invalid_field",
        ),
        (
            ADMIN,
            json!({"track_id": "imp-1", "metadata": v1(None), "if_match": "1"}),
            "invalid_body",
        ),
        (ADMIN, json!({"track_id": "imp-1"}), "invalid_body"),
    ];
    for (token, arguments, code) in refusals {
        let (error, refused) = call(&app, token, "import_track", arguments.clone()).await;
        assert!(error, "{arguments}: {refused}");
        assert_eq!(refused["code"], code, "{arguments}: {refused}");
    }
    assert_eq!(
        rest_revision(&app, "imp-1").await,
        (200, Some("\"2\"".into()))
    );
    assert_eq!(rest_revision(&app, "imp-2").await.0, 404);
    for arguments in [
        json!({"track_id": "imp-1", "step": "PLAN", "action": "complete", "outcome": "PASSED",
               "agent": "x"}),
        json!({"track_id": "imp-1", "step": "PLAN", "action": "start", "agent": "a\u{0}"}),
    ] {
        let (error, refused) = call(&app, ADMIN, "track_step", arguments).await;
        assert!(error, "{refused}");
        assert_eq!(
            (&refused["code"], &refused["field"]),
            (&json!("invalid_field"), &json!("agent")),
            "{refused}"
        );
    }
    assert_eq!(
        rest_revision(&app, "imp-1").await,
        (200, Some("\"2\"".into()))
    );

    // A re-import replaces (and keeps the project); the track starts over.
    let (error, replaced) = call(
        &app,
        LIMITED,
        "import_track",
        json!({"track_id": "imp-1", "metadata": v1(None), "if_match": 2}),
    )
    .await;
    assert!(!error, "{replaced}");
    assert_eq!(
        (
            &replaced["created"],
            &replaced["revision"],
            &replaced["step_status"]
        ),
        (&json!(false), &json!(3), &json!("NOT_STARTED"))
    );

    // `track_history`: every write, oldest first, as REST's `events`; refused as
    // the track is.
    let (error, history) = call(&app, LIMITED, "track_history", json!({"track_id": "imp-1"})).await;
    assert!(!error, "{history}");
    let actions: Vec<&str> = history
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["action"].as_str().expect("action"))
        .collect();
    assert_eq!(actions, ["imported", "started", "imported"], "{history}");
    assert_eq!(history[1]["agent"], "a1", "{history}");
    let rest: Value = app
        .client
        .get(app.url("/v1/tracks/imp-1/history"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("GET history")
        .json()
        .await
        .expect("JSON");
    assert_eq!(rest["events"], history);
    for (token, track_id, code) in [
        (ADMIN, "imp-2", "not_found"),
        (ADMIN, "imp 1", "invalid_track_id"),
    ] {
        let (error, refused) =
            call(&app, token, "track_history", json!({"track_id": track_id})).await;
        assert!(error, "{refused}");
        assert_eq!(refused["code"], code, "{refused}");
    }

    // Not on the read-only surface; on the full one, marked as replacing things.
    let listed = rpc(&app, "/mcp/readonly", ADMIN, "tools/list", json!({})).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(!names.contains(&"import_track"), "{names:?}");
    let listed = rpc(&app, "/mcp", ADMIN, "tools/list", json!({})).await;
    let tool = listed["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "import_track")
        .expect("import_track listed")
        .clone();
    assert_eq!(tool["annotations"]["destructiveHint"], true, "{tool}");
    assert_eq!(
        tool["inputSchema"]["required"],
        json!(["track_id", "metadata"]),
        "{tool}"
    );
    app.shutdown().await;
}

both_backends!(import_track_then_track_step);

// ---------------------------------------------------------------------------
// The CLI, as the real binary.

/// `plangate` with no setting from the caller's environment, on `database_url`.
fn plangate(database_url: Option<&str>) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_plangate"));
    for (key, _) in std::env::vars() {
        if key.starts_with("PLANGATE_") || key == "DATABASE_URL" {
            command.env_remove(key);
        }
    }
    command.env_remove("XDG_DATA_HOME");
    if let Some(url) = database_url {
        command.env("DATABASE_URL", url);
    }
    command.kill_on_drop(true);
    command
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn json(&self) -> Value {
        assert_eq!(self.code, Some(0), "stderr: {}", self.stderr);
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }

    /// A refusal: exit 1 and one line naming the code.
    fn refused(&self, code: &str) {
        assert_eq!(self.code, Some(1), "{}{}", self.stdout, self.stderr);
        assert!(self.stdout.is_empty(), "{}", self.stdout);
        assert_eq!(self.stderr.lines().count(), 1, "{}", self.stderr);
        assert!(
            self.stderr.starts_with(&format!("plangate: {code}: ")),
            "{}",
            self.stderr
        );
    }
}

async fn track(database_url: &str, args: &[&str]) -> Ran {
    let output = plangate(Some(database_url))
        .arg("track")
        .args(args)
        .output()
        .await
        .expect("run plangate track");
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path.to_str().expect("utf-8").to_owned()
}

async fn track_cli_imports_shows_and_steps(backend: Backend) {
    let database = FreshDatabase::new(backend).await;
    let url = database.url.as_str();
    let dir = tempfile::tempdir().expect("tempdir");
    let good = write(dir.path(), "meta.json", &v1(Some("cli-1")).to_string());

    let imported = track(url, &["import", &good, "--project", "proj-a"])
        .await
        .json();
    assert_eq!(
        (
            &imported["track_id"],
            &imported["created"],
            &imported["revision"]
        ),
        (&json!("cli-1"), &json!(true), &json!(1))
    );
    let started = track(
        url,
        &[
            "step", "cli-1", "--step", "PLAN", "--action", "start", "--agent", "a1",
        ],
    )
    .await
    .json();
    assert_eq!(started["step_status"], "IN_PROGRESS", "{started}");
    let done = track(
        url,
        &[
            "step",
            "cli-1",
            "--step",
            "PLAN",
            "--action",
            "complete",
            "--outcome",
            "passed",
            "--if-match",
            "2",
        ],
    )
    .await
    .json();
    assert_eq!(
        (&done["current_step"], &done["revision"]),
        (&json!("EVALUATE_PLAN"), &json!(3))
    );
    let shown = track(url, &["show", "cli-1"]).await.json();
    assert_eq!(shown["revision"], 3, "{shown}");
    assert_eq!(
        shown["metadata"]["loop_state"]["current_step"], "EVALUATE_PLAN",
        "{shown}"
    );

    // Refusals: one line with the REST code, exit 1, nothing changed.
    let not_json = write(dir.path(), "bad.json", "{\"type\": ");
    let unusable = write(dir.path(), "v3.json", "{\"version\": 3}");
    let anonymous = write(dir.path(), "anon.json", "{}");
    let step =
        |id: &'static str, step: &'static str, action: &'static str, more: &[&'static str]| {
            let mut args = vec!["step", id, "--step", step, "--action", action];
            args.extend_from_slice(more);
            args
        };
    let refusals: [(Vec<&str>, &str); 10] = [
        (vec!["import", &not_json, "--id", "cli-2"], "malformed_json"),
        (
            vec!["import", &unusable, "--id", "cli-2"],
            "unsupported_version",
        ),
        (vec!["import", &anonymous], "invalid_metadata"),
        (vec!["import", &good, "--if-match", "1"], "stale_etag"),
        (
            step("cli-1", "PLAN", "start", &["--agent", "a1"]),
            "illegal_transition",
        ),
        (
            step(
                "cli-1",
                "EVALUATE_PLAN",
                "complete",
                &["--outcome", "maybe"],
            ),
            "invalid_field",
        ),
        (
            step("cli-1", "EVALUATE_PLAN", "start", &[]),
            "invalid_field",
        ),
        (vec!["show", "nope"], "not_found"),
        (
            step("nope", "PLAN", "start", &["--agent", "a1"]),
            "not_found",
        ),
        (vec!["show", "bad id"], "invalid_track_id"),
    ];
    for (args, code) in refusals {
        track(url, &args).await.refused(code);
    }
    assert_eq!(track(url, &["show", "cli-1"]).await.json()["revision"], 3);
    assert_eq!(track(url, &["show", "cli-2"]).await.code, Some(1));

    // A file that cannot be read is not a refusal but a failure to run (exit 2).
    let missing = dir.path().join("missing.json");
    let ran = track(url, &["import", missing.to_str().expect("utf-8")]).await;
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(ran.stderr.contains("cannot read"), "{}", ran.stderr);

    // A re-import from stdin replaces the track and starts its loop over.
    let mut child = plangate(Some(url))
        .args(["track", "import", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(v1(Some("cli-1")).to_string().as_bytes())
        .await
        .expect("write stdin");
    drop(stdin);
    let output = child.wait_with_output().await.expect("wait");
    let replaced: Value = serde_json::from_slice(&output.stdout).expect("JSON answer");
    assert_eq!(
        (
            &replaced["created"],
            &replaced["revision"],
            &replaced["current_step"]
        ),
        (&json!(false), &json!(4), &json!("PLAN"))
    );
}

both_backends!(track_cli_imports_shows_and_steps);

// ---------------------------------------------------------------------------
// The default database of the local commands.

/// `plangate mcp` with no `DATABASE_URL`: a real stdio session (initialize,
/// tools/list, a tool call) on the file in the user's data directory, whose path
/// the log names; `plangate track` uses the same file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_without_a_database_url_uses_the_data_directory() {
    let work = tempfile::tempdir().expect("working directory");
    // XDG_DATA_HOME: unset, relative (ignored, as the XDG spec says), absolute.
    for xdg_data_home in [None, Some("relative/dir"), Some("xdg")] {
        let home = tempfile::tempdir().expect("home");
        let (xdg_data_home, expected) = match xdg_data_home {
            Some("xdg") => {
                let dir = home.path().join("xdg");
                (Some(dir.clone()), dir.join("plangate/plangate.db"))
            }
            other => (
                other.map(std::path::PathBuf::from),
                home.path().join(".local/share/plangate/plangate.db"),
            ),
        };
        let mut command = plangate(None);
        command
            .arg("mcp")
            .env("HOME", home.path())
            .env("PLANGATE_LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            .current_dir(work.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(dir) = &xdg_data_home {
            command.env("XDG_DATA_HOME", dir);
        }
        let mut child = command.spawn().expect("spawn plangate mcp");
        let mut stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let messages = [
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                "name": "import_track", "arguments": {"track_id": "home-1", "metadata": {}}}}),
        ];
        let mut answers = Vec::new();
        for message in messages {
            let answers_back = message.get("id").is_some();
            stdin
                .write_all(format!("{message}\n").as_bytes())
                .await
                .expect("write");
            if answers_back {
                let line =
                    tokio::time::timeout(std::time::Duration::from_secs(60), stdout.next_line())
                        .await
                        .expect("an answer in time")
                        .expect("read")
                        .expect("a line");
                answers.push(serde_json::from_str::<Value>(&line).expect("JSON-RPC"));
            }
        }
        drop(stdin);
        let output = child.wait_with_output().await.expect("plangate mcp ends");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        assert_eq!(answers[0]["result"]["serverInfo"]["name"], "plangate");
        assert_eq!(
            answers[1]["result"]["tools"].as_array().map(Vec::len),
            Some(15)
        );
        assert_eq!(answers[2]["result"]["isError"], false, "{}", answers[2]);

        assert!(expected.is_file(), "no {}: {stderr}", expected.display());
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(expected.parent().expect("dir"))
                .expect("dir")
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o700);
        let logged = stderr
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .any(|line| line["database"] == expected.to_str().expect("utf-8"));
        assert!(logged, "no log line names {}: {stderr}", expected.display());
        assert!(!work.path().join("plangate.db").exists());

        // `plangate track` finds it there too.
        let output = plangate(None)
            .args(["track", "show", "home-1"])
            .env("HOME", home.path())
            .envs(xdg_data_home.iter().map(|dir| ("XDG_DATA_HOME", dir)))
            .current_dir(work.path())
            .output()
            .await
            .expect("plangate track show");
        assert!(output.status.success(), "{output:?}");
    }
}

/// With neither XDG_DATA_HOME nor HOME there is no data directory: the start is
/// refused with one line, and nothing lands in the working directory.
#[tokio::test]
async fn mcp_without_any_data_directory_is_refused() {
    let work = tempfile::tempdir().expect("working directory");
    for args in [&["mcp"][..], &["track", "show", "x"][..]] {
        let output = plangate(None)
            .args(args)
            .env_remove("HOME")
            .env_remove("XDG_DATA_HOME")
            .current_dir(work.path())
            .stdin(Stdio::null())
            .output()
            .await
            .expect("run");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.contains("DATABASE_URL") && stderr.contains("XDG_DATA_HOME"),
            "{stderr}"
        );
        assert!(!work.path().join("plangate.db").exists());
    }
}
