//! L0 executors against real child processes (`tests/fixtures/l0/l0.sh`) and real
//! local HTTP servers speaking the OpenAI and Anthropic APIs. No mocks.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use crate::common::{Api, l0_script, max_concurrency};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use plangate::agents::{Cancelled, Executor, L0Request, L0Run};
use plangate::config::{ExecutorKind, ExecutorProfile};
use plangate::domain::refine::{Classified, L0Outcome, classify};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const OPENAI_KEY: &str = "test-openai-key-3f9a";
const ANTHROPIC_KEY: &str = "test-anthropic-key-77c1";

static ENV: Once = Once::new();

/// Sets the variables these tests rely on, once (every test here calls this first).
/// The names (`PLANGATE_TEST_*`) are read only by these tests' executor profiles.
fn init() {
    ENV.call_once(|| {
        // SAFETY: the test binary's threads read the environment only through std
        // (`env::var`, `Command::spawn`), which takes the same lock as `set_var`;
        // nothing here calls libc's getenv directly (hosts are IP literals).
        unsafe {
            std::env::set_var("PLANGATE_TEST_ALLOWED", "allowed-value");
            std::env::set_var("PLANGATE_TEST_SECRET", "secret-value");
            std::env::set_var("PLANGATE_TEST_OPENAI_KEY", OPENAI_KEY);
            std::env::set_var("PLANGATE_TEST_ANTHROPIC_KEY", ANTHROPIC_KEY);
            std::env::set_var("PLANGATE_TEST_EMPTY_KEY", "");
            std::env::remove_var("PLANGATE_TEST_UNSET_KEY");
        }
    });
}

use crate::common::executor_profile as profile;

fn command(args: &[&str]) -> ExecutorProfile {
    let mut p = profile(ExecutorKind::Command);
    p.argv = std::iter::once(l0_script())
        .chain(args.iter().map(|s| s.to_string()))
        .collect();
    p
}

fn executor(p: &ExecutorProfile) -> Executor {
    Executor::from_profile("test", p).expect("valid profile")
}

fn request(assignment_id: &str, prompt: &str) -> L0Request {
    crate::common::l0_request(0x1234, assignment_id, prompt, Some("/work/task.md"))
}

async fn run_l0(e: &Executor, req: &L0Request) -> L0Run {
    e.run(req, &CancellationToken::new())
        .await
        .expect("not cancelled")
}

fn answer(run: &L0Run) -> &str {
    match &run.outcome {
        L0Outcome::Answer(a) => a,
        L0Outcome::Failed(r) => panic!("expected an answer, got Failed({r:?}): {run:?}"),
    }
}

fn failure(run: &L0Run) -> &str {
    match &run.outcome {
        L0Outcome::Failed(r) => r,
        L0Outcome::Answer(a) => panic!("expected a failure, got Answer({a:?})"),
    }
}

/// What the validator makes of `run`'s outcome for the assignment `id`.
fn verdict(id: &str, run: &L0Run) -> &'static str {
    match classify(id, &run.outcome) {
        Classified::Valid(_) => "valid",
        Classified::Invalid(_) => "invalid",
        Classified::Mismatch { .. } => "mismatch",
        Classified::Failed(_) => "failed",
        Classified::NotStarted(_) => "not started",
    }
}

/// Whether `pid` is gone (or a zombie waiting for init): polls up to 3 s.
async fn process_dies(pid: u32) -> bool {
    for _ in 0..60 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) => {
                // The state follows the parenthesised command name.
                let state = stat.rsplit(')').next().unwrap_or("").trim_start();
                if state.starts_with('Z') || state.starts_with('X') {
                    return true;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

async fn wait_for_file(path: &Path) -> String {
    for _ in 0..200 {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} never appeared", path.display());
}

/// A `command` executor whose script (`--record`) writes its events and its
/// child's pid into `dir`.
fn recording(dir: &Path, args: &[&str]) -> Executor {
    let mut all = vec!["--record", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    executor(&command(&all))
}

/// The pid a recording script wrote to `path` (its sleeping child's).
async fn recorded_pid(path: &Path) -> u32 {
    wait_for_file(path).await.trim().parse().unwrap()
}

async fn assert_dies(grandchild: u32) {
    assert!(
        process_dies(grandchild).await,
        "sleep {grandchild} survived"
    );
}

// ---------------------------------------------------------------- command

#[tokio::test]
async fn command_valid_answer_is_stdout_and_validates() {
    init();
    let e = executor(&command(&["valid"]));
    assert_eq!(e.kind(), ExecutorKind::Command);
    assert_eq!(e.timeout(), Some(Duration::from_secs(600)));
    let run = run_l0(&e, &request("P1-A2", "the prompt")).await;
    assert_eq!(run.exit_code, Some(0));
    assert_eq!(run.tries, 1);
    assert_eq!(run.stderr, None);
    let text = answer(&run);
    assert!(text.starts_with("I reviewed assignment P1-A2"));
    match classify("P1-A2", &run.outcome) {
        Classified::Valid(a) => assert_eq!(a.dependency_corrections.len(), 1),
        other => panic!("not valid: {other:?}"),
    }
}

#[tokio::test]
async fn command_gets_the_prompt_on_stdin() {
    init();
    let e = executor(&command(&["echo"]));
    // Larger than a pipe buffer, multi-line, not ASCII.
    let prompt = format!("Review P1-A1 — «scope»\n{}\nend\n", "line\n".repeat(60_000));
    let run = run_l0(&e, &request("P1-A1", &prompt)).await;
    assert_eq!(answer(&run), prompt);

    // A program that reads no stdin and exits is fine too (EPIPE is not an error).
    let e = executor(&command(&["garbage"]));
    let run = run_l0(&e, &request("P1-A1", &prompt)).await;
    assert!(answer(&run).contains("Lorem ipsum"));

    // With --record the script keeps the prompt it read.
    let dir = tempfile::tempdir().unwrap();
    let e = recording(dir.path(), &["valid"]);
    run_l0(&e, &request("P1-A3", "short prompt")).await;
    assert_eq!(
        std::fs::read_to_string(dir.path().join("P1-A3.prompt")).unwrap(),
        "short prompt"
    );
}

#[tokio::test]
async fn command_environment_is_cleared_except_plangate_and_allowed_variables() {
    init();
    let e = executor(&command(&["env"]));
    let run = run_l0(&e, &request("P1-A1", "")).await;
    let env = answer(&run);
    let lines: Vec<&str> = env.lines().collect();
    let job = format!("PLANGATE_JOB_ID={}", Uuid::from_u128(0x1234));
    for expected in [
        job.as_str(),
        "PLANGATE_PHASE_ID=P1",
        "PLANGATE_ASSIGNMENT_ID=P1-A1",
        "PLANGATE_TASK_FILE=/work/task.md",
    ] {
        assert!(lines.contains(&expected), "{expected} missing from\n{env}");
    }
    for absent in [
        "PLANGATE_TEST_ALLOWED=",
        "PLANGATE_TEST_SECRET=",
        "PATH=",
        "HOME=",
    ] {
        assert!(
            !lines.iter().any(|l| l.starts_with(absent)),
            "{absent} leaked into\n{env}"
        );
    }

    let mut p = command(&["env"]);
    p.env_allow = vec![
        "PLANGATE_TEST_ALLOWED".into(),
        "PATH".into(),
        "PLANGATE_TEST_NOT_SET_ANYWHERE".into(),
    ];
    let e = executor(&p);
    let mut req = request("P1-A1", "");
    req.task_file = None;
    let run = run_l0(&e, &req).await;
    let env = answer(&run);
    let lines: Vec<&str> = env.lines().collect();
    assert!(
        lines.contains(&"PLANGATE_TEST_ALLOWED=allowed-value"),
        "{env}"
    );
    assert!(lines.contains(&"PLANGATE_TASK_FILE="), "{env}");
    let path = format!("PATH={}", std::env::var("PATH").unwrap());
    assert!(lines.contains(&path.as_str()), "{env}");
    assert!(!env.contains("PLANGATE_TEST_SECRET"), "{env}");
    assert!(!env.contains("PLANGATE_TEST_NOT_SET_ANYWHERE"), "{env}");
}

#[tokio::test]
async fn command_program_name_is_found_in_the_server_path() {
    init();
    // `sh` by name: the child has no PATH, the executor resolves it in the server's.
    let mut p = profile(ExecutorKind::Command);
    p.argv = vec!["sh".into(), l0_script(), "valid".into()];
    let run = run_l0(&executor(&p), &request("P1-A1", "")).await;
    assert_eq!(verdict("P1-A1", &run), "valid");
}

#[tokio::test]
async fn command_missing_program_fails_with_the_reason() {
    init();
    let mut p = profile(ExecutorKind::Command);
    p.argv = vec!["plangate-no-such-program-5e1b".into()];
    let run = run_l0(&executor(&p), &request("P1-A1", "x")).await;
    let reason = failure(&run);
    assert!(
        reason.starts_with("cannot spawn plangate-no-such-program-5e1b"),
        "{reason}"
    );
    assert!(reason.contains("not found in PATH"), "{reason}");
    assert_eq!((run.exit_code, run.tries), (None, 1));

    p.argv = vec!["/nonexistent/dir/l0".into()];
    let run = run_l0(&executor(&p), &request("P1-A1", "x")).await;
    let reason = failure(&run);
    assert!(
        reason.starts_with("cannot spawn /nonexistent/dir/l0: "),
        "{reason}"
    );
    assert!(reason.contains("No such file"), "{reason}");

    // Not executable.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain.sh");
    std::fs::write(&file, "echo hi\n").unwrap();
    p.argv = vec![file.to_str().unwrap().into()];
    let run = run_l0(&executor(&p), &request("P1-A1", "x")).await;
    assert!(failure(&run).contains("ermission denied"), "{run:?}");
}

#[tokio::test]
async fn command_silent_non_zero_exit_fails_with_a_stderr_tail() {
    init();
    let run = run_l0(&executor(&command(&["fail"])), &request("P1-A4", "x")).await;
    let reason = failure(&run);
    assert!(reason.starts_with("exit status 3, no output"), "{reason}");
    assert!(reason.contains("simulated failure for P1-A4"), "{reason}");
    assert_eq!(run.exit_code, Some(3));
    assert!(
        run.stderr
            .as_deref()
            .unwrap()
            .contains("simulated failure for P1-A4")
    );
    assert_eq!(verdict("P1-A4", &run), "failed");
}

#[tokio::test]
async fn command_non_zero_exit_with_output_is_an_answer() {
    init();
    let run = run_l0(
        &executor(&command(&["valid-exit", "5"])),
        &request("P1-A1", "x"),
    )
    .await;
    assert_eq!(run.exit_code, Some(5));
    assert_eq!(verdict("P1-A1", &run), "valid");

    // Exit 0 with nothing: an (empty) answer, which the validator rejects.
    let run = run_l0(&executor(&command(&["echo"])), &request("P1-A1", "")).await;
    assert_eq!(answer(&run), "");
    assert_eq!(verdict("P1-A1", &run), "invalid");
}

#[tokio::test]
async fn command_wrong_broken_and_garbage_answers_reach_the_validator() {
    init();
    let r = run_l0(&executor(&command(&["wrong"])), &request("P1-A1", "")).await;
    assert_eq!(
        classify("P1-A1", &r.outcome),
        Classified::Mismatch {
            expected: "P1-A1".into(),
            actual: "OTHER-P1-A1".into()
        }
    );
    let r = run_l0(
        &executor(&command(&["wrong", "P9-A9"])),
        &request("P1-A1", ""),
    )
    .await;
    assert!(
        matches!(classify("P1-A1", &r.outcome), Classified::Mismatch { actual, .. } if actual == "P9-A9")
    );
    for mode in ["broken", "garbage"] {
        let r = run_l0(&executor(&command(&[mode])), &request("P1-A1", "")).await;
        assert_eq!(r.exit_code, Some(0));
        assert_eq!(verdict("P1-A1", &r), "invalid", "{mode}: {r:?}");
    }
}

#[tokio::test]
async fn command_timeout_kills_the_whole_process_group() {
    init();
    let dir = tempfile::tempdir().unwrap();
    let e = recording(dir.path(), &["hang"]).with_timeout(Duration::from_millis(500));
    let started = Instant::now();
    let run = run_l0(&e, &request("P1-A1", "x")).await;
    let took = started.elapsed();
    assert_eq!(failure(&run), "timed out after 0.5 s");
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(run.exit_code, None);
    assert!(run.stderr.unwrap().contains("timed out after 0.5 s"));
    let grandchild = recorded_pid(&dir.path().join("P1-A1.pid")).await;
    assert_dies(grandchild).await;

    // timeout_secs from the profile.
    let mut p = command(&["hang"]);
    p.timeout_secs = Some(1);
    let e = executor(&p);
    assert_eq!(e.timeout(), Some(Duration::from_secs(1)));
    let run = run_l0(&e, &request("P1-A1", "x")).await;
    assert_eq!(failure(&run), "timed out after 1 s");
}

#[tokio::test]
async fn command_stdout_flood_is_capped_and_stopped() {
    init();
    let mut p = command(&["flood"]);
    p.max_output_bytes = Some(65_536);
    let started = Instant::now();
    let run = run_l0(&executor(&p), &request("P1-A1", "x")).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let text = answer(&run);
    assert_eq!(text.len(), 65_536);
    assert!(text.starts_with("flooding flooding"));
    assert!(
        run.stderr
            .as_deref()
            .unwrap()
            .contains("stdout truncated at 65536 bytes"),
        "{run:?}"
    );
    assert_eq!(verdict("P1-A1", &run), "invalid");

    // The default cap is 1 MiB.
    let run = run_l0(&executor(&command(&["flood"])), &request("P1-A1", "x")).await;
    assert_eq!(answer(&run).len(), 1024 * 1024);
}

#[tokio::test]
async fn command_stderr_keeps_its_last_64_kib() {
    init();
    let run = run_l0(
        &executor(&command(&["stderr-flood", "200"])),
        &request("P1-A1", "x"),
    )
    .await;
    assert_eq!(verdict("P1-A1", &run), "valid");
    let stderr = run.stderr.unwrap();
    assert!(stderr.len() <= 64 * 1024 + 100, "{}", stderr.len());
    assert!(stderr.starts_with("[first "), "{}", &stderr[..50]);
    assert!(stderr.trim_end().ends_with("stderr-end"));
}

#[tokio::test]
async fn command_cancellation_kills_the_group_at_once() {
    init();
    let dir = tempfile::tempdir().unwrap();
    let e = recording(dir.path(), &["hang"]);
    let cancel = CancellationToken::new();
    let req = request("P1-A1", "x");
    let pid_file = dir.path().join("P1-A1.pid");
    let (result, (grandchild, cancelled_at)) = tokio::join!(e.run(&req, &cancel), async {
        let pid = recorded_pid(&pid_file).await;
        cancel.cancel();
        (pid, Instant::now())
    });
    let took = cancelled_at.elapsed();
    assert_eq!(result, Err(Cancelled));
    assert!(took < Duration::from_millis(500), "cancel took {took:?}");
    assert_dies(grandchild).await;

    // An already cancelled token spawns nothing.
    let dir = tempfile::tempdir().unwrap();
    let e = recording(dir.path(), &["valid"]);
    assert_eq!(e.run(&req, &cancel).await, Err(Cancelled));
    assert!(!dir.path().join("events").exists());
}

#[tokio::test]
async fn command_dropping_the_run_kills_the_group() {
    init();
    let dir = tempfile::tempdir().unwrap();
    let e = recording(dir.path(), &["hang"]);
    let req = request("P1-A1", "x");
    let cancel = CancellationToken::new();
    let pid_file = dir.path().join("P1-A1.pid");
    let grandchild = tokio::select! {
        _ = e.run(&req, &cancel) => panic!("hang ended"),
        pid = recorded_pid(&pid_file) => pid,
    };
    assert_dies(grandchild).await;
}

/// `plangate refine` (a real plangate process) runs a `hang` L0 and is SIGKILLed:
/// neither the L0 nor its child may outlive it (its guardian kills them), or they
/// would keep spending tokens for a result nobody reads.
#[tokio::test]
async fn command_l0_dies_with_a_sigkilled_server() {
    init();
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record");
    std::fs::create_dir(&record).unwrap();
    let config = dir.path().join("plangate.toml");
    std::fs::write(
        &config,
        format!(
            "[executors.hang]\nkind = \"command\"\nargv = [{:?}, \"--record\", {:?}, \"hang\"]\n",
            l0_script(),
            record.display().to_string()
        ),
    )
    .unwrap();
    let context = dir.path().join("context.json");
    std::fs::write(
        &context,
        json!({"phase_id": "P1", "assignments": [{"id": "P1-A1", "name": "a"}], "peer_summaries": []})
            .to_string(),
    )
    .unwrap();
    let plan = dir.path().join("plan.json");
    std::fs::write(
        &plan,
        json!({"phases": [{"id": "P1", "name": "p"}]}).to_string(),
    )
    .unwrap();
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_plangate"))
        .arg("refine")
        .args([&context, &plan, &dir.path().join("run")])
        .args(["--executor", "hang", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let l0: u32 = wait_for_file(&record.join("P1-A1.l0pid"))
        .await
        .trim()
        .parse()
        .unwrap();
    let sleep: u32 = wait_for_file(&record.join("P1-A1.pid"))
        .await
        .trim()
        .parse()
        .unwrap();
    server.kill().unwrap(); // SIGKILL: the process cannot clean up.
    server.wait().unwrap();
    let died = process_dies(l0).await;
    // Its child too: the L0's guardian kills the whole tree (agents/guardian.rs).
    let sleep_died = process_dies(sleep).await;
    if !sleep_died {
        // SAFETY: plain syscall; the pid is the test's own grandchild's.
        unsafe {
            libc::kill(sleep as libc::pid_t, libc::SIGKILL);
        }
    }
    assert!(died, "L0 {l0} outlived the SIGKILLed plangate");
    assert!(
        sleep_died,
        "the L0's child {sleep} outlived the SIGKILLed plangate"
    );
}

#[tokio::test]
async fn command_record_dir_shows_overlapping_runs() {
    init();
    let dir = tempfile::tempdir().unwrap();
    let e = recording(dir.path(), &["sleep", "0.4"]);
    let (a, b, c) = (
        request("P1-A1", "1"),
        request("P1-A2", "2"),
        request("P1-A3", "3"),
    );
    let (ra, rb, rc) = tokio::join!(run_l0(&e, &a), run_l0(&e, &b), run_l0(&e, &c));
    for (id, r) in [("P1-A1", ra), ("P1-A2", rb), ("P1-A3", rc)] {
        assert!(
            matches!(classify(id, &r.outcome), Classified::Valid(_)),
            "{r:?}"
        );
    }
    assert_eq!(max_concurrency(dir.path()), 3);

    // One after the other: never more than one alive.
    let dir = tempfile::tempdir().unwrap();
    let e = recording(dir.path(), &["sleep", "0.05"]);
    for id in ["P1-A1", "P1-A2"] {
        run_l0(&e, &request(id, "")).await;
    }
    assert_eq!(max_concurrency(dir.path()), 1);
    let events = std::fs::read_to_string(dir.path().join("events")).unwrap();
    assert_eq!(events.lines().count(), 4);
}

#[tokio::test]
async fn command_profiles_are_checked() {
    init();
    let mut p = profile(ExecutorKind::Command);
    let err = Executor::from_profile("x", &p).unwrap_err().to_string();
    assert!(
        err.contains("[executors.x]") && err.contains("argv"),
        "{err}"
    );
    p.argv = vec!["sh".into()];
    p.timeout_secs = Some(0);
    assert!(
        Executor::from_profile("x", &p)
            .unwrap_err()
            .to_string()
            .contains("timeout_secs")
    );
    p.timeout_secs = None;
    p.max_output_bytes = Some(0);
    assert!(
        Executor::from_profile("x", &p)
            .unwrap_err()
            .to_string()
            .contains("max_output_bytes")
    );
    p.max_output_bytes = None;
    p.env_allow = vec!["A=B".into()];
    assert!(
        Executor::from_profile("x", &p)
            .unwrap_err()
            .to_string()
            .contains("env_allow")
    );
}

// ---------------------------------------------------------------- HTTP APIs

type Script = Arc<dyn Fn(usize) -> Response + Send + Sync>;

struct Fake {
    api: Api,
    prompt: String,
    hits: AtomicUsize,
    /// Why a request was refused (a check failed), for the test's assertion.
    problems: Mutex<Vec<String>>,
    script: Script,
}

/// A local server speaking `api`: it checks the path, headers, model and prompt
/// (400 with the reason when one is wrong), then answers with `script(n)` for its
/// n-th request (0-based).
async fn fake_api(api: Api, prompt: &str, script: Script) -> (String, Arc<Fake>) {
    let fake = Arc::new(Fake {
        api,
        prompt: prompt.to_owned(),
        hits: AtomicUsize::new(0),
        problems: Mutex::new(Vec::new()),
        script,
    });
    let app = axum::Router::new()
        .fallback(handle)
        .with_state(fake.clone());
    // The trailing slash is tolerated.
    (crate::common::serve_provider(api, app, "/v1/").await, fake)
}

async fn handle(
    State(fake): State<Arc<Fake>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let n = fake.hits.fetch_add(1, Ordering::SeqCst);
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut problems = Vec::new();
    let (path, model) = match fake.api {
        Api::Openai => {
            if header("authorization") != format!("Bearer {OPENAI_KEY}") {
                problems.push(format!("authorization {:?}", header("authorization")));
            }
            ("/v1/chat/completions", "gpt-test")
        }
        Api::Anthropic => {
            if header("x-api-key") != ANTHROPIC_KEY {
                problems.push(format!("x-api-key {:?}", header("x-api-key")));
            }
            if header("anthropic-version") != "2023-06-01" {
                problems.push("anthropic-version".into());
            }
            if body["max_tokens"] != json!(4096) {
                problems.push("max_tokens".into());
            }
            ("/v1/messages", "claude-test")
        }
    };
    if uri.path() != path {
        problems.push(format!("path {}", uri.path()));
    }
    if !header("content-type").starts_with("application/json") {
        problems.push("content-type".into());
    }
    if body["model"] != json!(model) {
        problems.push(format!("model {}", body["model"]));
    }
    if body["messages"] != json!([{"role": "user", "content": fake.prompt}]) {
        problems.push(format!("messages {}", body["messages"]));
    }
    if !problems.is_empty() {
        let text = problems.join("; ");
        fake.problems.lock().unwrap().push(text.clone());
        return (StatusCode::BAD_REQUEST, text).into_response();
    }
    (fake.script)(n)
}

fn openai_ok(text: &str) -> Response {
    axum::Json(json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    }))
    .into_response()
}

fn anthropic_ok(text: &str) -> Response {
    let (a, b) = text.split_at(text.len() / 2);
    axum::Json(json!({
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "text", "text": a},
            {"type": "tool_use", "id": "t", "name": "x", "input": {}},
            {"type": "text", "text": b},
        ],
        "stop_reason": "end_turn",
    }))
    .into_response()
}

fn ok(api: Api, text: &str) -> Response {
    match api {
        Api::Openai => openai_ok(text),
        Api::Anthropic => anthropic_ok(text),
    }
}

fn status(code: u16, body: &str) -> Response {
    (StatusCode::from_u16(code).unwrap(), body.to_owned()).into_response()
}

fn valid_answer(id: &str) -> String {
    format!(
        "Here is my review.\n```\nassignment_id = {id}\nchanges = []\ndependency_corrections = [\n  {{\"missing_dep\": \"X\", \"reason\": \"r\"}}\n]\nwp_proposal_adjustments = []\n```\nDone."
    )
}

fn api_profile(api: Api, base_url: &str) -> ExecutorProfile {
    let mut p = match api {
        Api::Openai => profile(ExecutorKind::Openai),
        Api::Anthropic => profile(ExecutorKind::Anthropic),
    };
    p.base_url = Some(base_url.to_owned());
    let (model, key) = match api {
        Api::Openai => ("gpt-test", "PLANGATE_TEST_OPENAI_KEY"),
        Api::Anthropic => ("claude-test", "PLANGATE_TEST_ANTHROPIC_KEY"),
    };
    p.model = Some(model.into());
    p.api_key_env = Some(key.into());
    p
}

/// A fast-retrying executor for `profile` (1 ms base backoff).
fn api_executor(p: &ExecutorProfile) -> Executor {
    executor(p).with_backoff(Duration::from_millis(1), Duration::from_secs(5))
}

/// One L0 of assignment P1-A1 through the fake API at `base`.
async fn run_api(api: Api, base: &str) -> L0Run {
    run_l0(
        &api_executor(&api_profile(api, base)),
        &request("P1-A1", PROMPT),
    )
    .await
}

const PROMPT: &str = "Review P1-A1 — check the task for scope creep.\n{\"x\": 1}";

#[tokio::test]
async fn api_valid_answers() {
    init();
    for api in [Api::Openai, Api::Anthropic] {
        let (base, fake) = fake_api(
            api,
            PROMPT,
            Arc::new(move |_| ok(api, &valid_answer("P1-A1"))),
        )
        .await;
        let e = api_executor(&api_profile(api, &base));
        assert_eq!(
            e.kind(),
            if api == Api::Openai {
                ExecutorKind::Openai
            } else {
                ExecutorKind::Anthropic
            }
        );
        let run = run_l0(&e, &request("P1-A1", PROMPT)).await;
        assert!(
            fake.problems.lock().unwrap().is_empty(),
            "{:?}",
            fake.problems
        );
        assert_eq!(answer(&run), valid_answer("P1-A1"), "{api:?}");
        assert_eq!(
            (run.tries, run.exit_code, run.stderr.as_deref()),
            (1, None, None)
        );
        assert_eq!(verdict("P1-A1", &run), "valid");
    }
}

#[tokio::test]
async fn api_429_is_retried_then_answers() {
    init();
    for api in [Api::Openai, Api::Anthropic] {
        let script: Script = Arc::new(move |n| {
            if n < 2 {
                status(429, "{\"error\": \"slow down\"}")
            } else {
                ok(api, &valid_answer("P1-A1"))
            }
        });
        let (base, fake) = fake_api(api, PROMPT, script).await;
        let run = run_api(api, &base).await;
        assert_eq!(answer(&run), valid_answer("P1-A1"));
        assert_eq!(run.tries, 3);
        assert_eq!(fake.hits.load(Ordering::SeqCst), 3);
        let last = run.stderr.unwrap();
        assert!(last.contains("429") && last.contains("slow down"), "{last}");
    }
}

#[tokio::test]
async fn a_spend_limit_429_is_tried_once_and_ends_quota_exhausted() {
    init();
    for api in [Api::Openai, Api::Anthropic] {
        let body = "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\
                    \"You have reached your specified API usage limits. You will regain access on \
                    2027-01-01 at 00:00 UTC.\"}}";
        let (base, fake) = fake_api(api, PROMPT, Arc::new(move |_| status(429, body))).await;
        let run = run_api(api, &base).await;
        let reason = failure(&run);
        assert!(reason.starts_with("quota_exhausted: HTTP 429"), "{reason}");
        assert_eq!(run.tries, 1);
        assert_eq!(fake.hits.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test]
async fn api_5xx_is_retried_a_bounded_number_of_times() {
    init();
    for api in [Api::Openai, Api::Anthropic] {
        let (base, fake) = fake_api(api, PROMPT, Arc::new(|_| status(500, "internal oops"))).await;
        let run = run_api(api, &base).await;
        let reason = failure(&run);
        assert!(
            reason.starts_with("HTTP 500 Internal Server Error: internal oops"),
            "{reason}"
        );
        assert!(reason.contains("after 4 tries"), "{reason}");
        assert_eq!(run.tries, 4);
        assert_eq!(fake.hits.load(Ordering::SeqCst), 4);
    }

    // 503 once, then an answer.
    let (base, _) = fake_api(
        Api::Openai,
        PROMPT,
        Arc::new(|n| {
            if n == 0 {
                status(503, "")
            } else {
                openai_ok("fine")
            }
        }),
    )
    .await;
    let run = run_api(Api::Openai, &base).await;
    assert_eq!((answer(&run), run.tries), ("fine", 2));
}

#[tokio::test]
async fn api_retry_after_is_honoured() {
    init();
    let script: Script = Arc::new(|n| {
        if n == 0 {
            let mut r = status(429, "");
            r.headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
            r
        } else {
            openai_ok("after the wait")
        }
    });
    let (base, _) = fake_api(Api::Openai, PROMPT, script).await;
    let started = Instant::now();
    let run = run_api(Api::Openai, &base).await;
    assert_eq!((answer(&run), run.tries), ("after the wait", 2));
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn api_client_errors_fail_at_once() {
    init();
    for api in [Api::Openai, Api::Anthropic] {
        let (base, fake) = fake_api(
            api,
            PROMPT,
            Arc::new(|_| {
                status(
                    400,
                    "{\"error\": {\"message\": \"bad request: max_tokens\"}}",
                )
            }),
        )
        .await;
        let run = run_api(api, &base).await;
        let reason = failure(&run);
        assert!(reason.starts_with("HTTP 400 Bad Request: "), "{reason}");
        assert!(reason.contains("bad request: max_tokens"), "{reason}");
        assert_eq!(run.tries, 1);
        assert_eq!(fake.hits.load(Ordering::SeqCst), 1);
        assert_eq!(run.stderr, None);
    }

    // A wrong key is refused by the server (400 here), never retried.
    let (base, _) = fake_api(Api::Openai, PROMPT, Arc::new(|_| openai_ok("x"))).await;
    let mut p = api_profile(Api::Openai, &base);
    p.api_key_env = Some("PLANGATE_TEST_ANTHROPIC_KEY".into());
    let run = run_l0(&api_executor(&p), &request("P1-A1", PROMPT)).await;
    let reason = failure(&run);
    assert!(reason.starts_with("HTTP 400"), "{reason}");
    assert_eq!(run.tries, 1);
}

#[tokio::test]
async fn api_malformed_or_empty_answers_fail_at_once() {
    init();
    let cases: Vec<(Api, Response, &str)> = vec![
        (
            Api::Openai,
            status(200, "not json {"),
            "malformed JSON response",
        ),
        (
            Api::Openai,
            axum::Json(json!({"choices": []})).into_response(),
            "no choices[0].message.content",
        ),
        (
            Api::Anthropic,
            axum::Json(json!({"content": [{"type": "tool_use"}]})).into_response(),
            "no text block",
        ),
        (Api::Anthropic, status(200, "[]"), "no content array"),
    ];
    for (api, response, expected) in cases {
        let response = Arc::new(Mutex::new(Some(response)));
        let script: Script = Arc::new(move |_| {
            response
                .lock()
                .unwrap()
                .take()
                .unwrap_or_else(|| status(500, "second request"))
        });
        let (base, fake) = fake_api(api, PROMPT, script).await;
        let run = run_api(api, &base).await;
        assert!(failure(&run).contains(expected), "{expected}: {run:?}");
        assert_eq!(run.tries, 1);
        assert_eq!(fake.hits.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test]
async fn api_connection_refused_fails_after_retries() {
    init();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    drop(listener);
    for api in [Api::Openai, Api::Anthropic] {
        let run = run_l0(
            &api_executor(&api_profile(api, &format!("http://{addr}"))),
            &request("P1-A1", PROMPT),
        )
        .await;
        let reason = failure(&run);
        assert!(reason.starts_with("cannot connect"), "{reason}");
        assert!(reason.contains("after 4 tries"), "{reason}");
        assert!(!reason.contains(OPENAI_KEY) && !reason.contains(ANTHROPIC_KEY));
        assert_eq!(run.tries, 4);
        assert!(run.stderr.unwrap().starts_with("cannot connect"));
    }
}

#[tokio::test]
async fn api_huge_body_is_capped() {
    init();
    // An endless chunked body (no content-length): the client must stop reading.
    let script: Script = Arc::new(|_| {
        let chunk = Bytes::from(vec![b' '; 64 * 1024]);
        let stream = futures::stream::repeat_with(move || Ok::<_, std::io::Error>(chunk.clone()))
            .take(100_000);
        Response::builder()
            .header("content-type", "application/json")
            .body(Body::from_stream(stream))
            .unwrap()
    });
    let (base, _) = fake_api(Api::Openai, PROMPT, script).await;
    let mut p = api_profile(Api::Openai, &base);
    p.max_output_bytes = Some(100_000);
    let started = Instant::now();
    let run = run_l0(&api_executor(&p), &request("P1-A1", PROMPT)).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        failure(&run),
        "response body exceeds max_output_bytes (100000 bytes)"
    );
    assert_eq!(run.tries, 1);

    // A body with a content-length over the cap is capped all the same (1 MiB default).
    let big = openai_ok(&"a".repeat(2 * 1024 * 1024));
    let big = Arc::new(Mutex::new(Some(big)));
    let (base, _) = fake_api(
        Api::Openai,
        PROMPT,
        Arc::new(move |_| big.lock().unwrap().take().unwrap()),
    )
    .await;
    let run = run_api(Api::Openai, &base).await;
    assert!(failure(&run).contains("1048576 bytes"), "{run:?}");
}

#[tokio::test]
async fn api_timeout_and_cancellation() {
    init();
    let script: Script = Arc::new(|_| {
        let stream = futures::stream::once(async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok::<_, std::io::Error>(Bytes::from_static(b"{}"))
        });
        Response::new(Body::from_stream(stream))
    });
    let (base, _) = fake_api(Api::Anthropic, PROMPT, script).await;
    let e =
        api_executor(&api_profile(Api::Anthropic, &base)).with_timeout(Duration::from_millis(300));
    assert_eq!(e.timeout(), Some(Duration::from_millis(300)));
    let started = Instant::now();
    let run = run_l0(&e, &request("P1-A1", PROMPT)).await;
    assert_eq!(failure(&run), "timed out after 0.3 s");
    assert!(started.elapsed() < Duration::from_secs(2));

    let e = api_executor(&api_profile(Api::Anthropic, &base));
    let cancel = CancellationToken::new();
    let req = request("P1-A1", PROMPT);
    let (result, cancelled_at) = tokio::join!(e.run(&req, &cancel), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
        Instant::now()
    });
    assert_eq!(result, Err(Cancelled));
    assert!(cancelled_at.elapsed() < Duration::from_millis(100));

    // Cancelled during the backoff between tries.
    let (base, fake) = fake_api(Api::Openai, PROMPT, Arc::new(|_| status(503, ""))).await;
    let e = executor(&api_profile(Api::Openai, &base))
        .with_backoff(Duration::from_secs(20), Duration::from_secs(20));
    let cancel = CancellationToken::new();
    let (result, cancelled_at) = tokio::join!(e.run(&req, &cancel), async {
        while fake.hits.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
        Instant::now()
    });
    assert_eq!(result, Err(Cancelled));
    assert!(cancelled_at.elapsed() < Duration::from_millis(100));
    assert_eq!(fake.hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn api_profiles_are_checked_at_build() {
    init();
    for kind in [ExecutorKind::Openai, ExecutorKind::Anthropic] {
        let mut p = profile(kind);
        let err = Executor::from_profile("llm", &p).unwrap_err().to_string();
        assert!(
            err.contains("[executors.llm]") && err.contains("needs a model"),
            "{err}"
        );

        p.model = Some("m".into());
        // No key variable named: fine (local servers need none); defaults apply.
        let e = Executor::from_profile("llm", &p).unwrap();
        assert_eq!(e.timeout(), Some(Duration::from_secs(600)));

        for var in ["PLANGATE_TEST_UNSET_KEY", "PLANGATE_TEST_EMPTY_KEY"] {
            p.api_key_env = Some(var.into());
            let err = Executor::from_profile("llm", &p).unwrap_err().to_string();
            assert!(err.contains(var) && err.contains("unset or empty"), "{err}");
        }
        p.api_key_env = Some("PLANGATE_TEST_OPENAI_KEY".into());
        let e = Executor::from_profile("llm", &p).unwrap();
        assert!(!format!("{e:?}").contains(OPENAI_KEY));

        p.base_url = Some("ftp://example.com".into());
        let err = Executor::from_profile("llm", &p).unwrap_err().to_string();
        assert!(err.contains("base_url"), "{err}");
    }
}

#[tokio::test]
async fn builtin_still_answers() {
    init();
    let e = Executor::builtin();
    assert_eq!(
        (e.kind(), e.name(), e.timeout()),
        (ExecutorKind::Builtin, "builtin", None)
    );
    let run = run_l0(&e, &request("P1-A1", "")).await;
    assert_eq!(verdict("P1-A1", &run), "valid");
    let e = executor(&profile(ExecutorKind::Builtin));
    assert_eq!(e.kind(), ExecutorKind::Builtin);
}
