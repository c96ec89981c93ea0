//! Refine jobs over real HTTP on both back-ends, with real L0 child processes
//! (`tests/fixtures/l0/`): the log lines, per-L0 records, batches and the 6-L0
//! ceiling, cancel, idempotency, `?wait`, SSE, file output and bad input.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{Backend, TestApp, expect_problem, max_concurrency, spawn_app_with, sse};
use futures::StreamExt as _;
use plangate::config::{ExecutorKind, ExecutorProfile, Settings};
use plangate::db::dashboard::JobListFilter;
use plangate::domain::job::{JobState, JobStatus};
use serde_json::{Value, json};

/// Scratch directories that live as long as the test: the fixture's record dir,
/// the workspace root (task files) and the output root.
struct Dirs {
    _tmp: tempfile::TempDir,
    record: PathBuf,
    workspace: PathBuf,
    output: PathBuf,
}

impl Dirs {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let record = tmp.path().join("record");
        let workspace = tmp.path().join("workspace");
        let output = tmp.path().join("output");
        for d in [&record, &workspace, &output] {
            std::fs::create_dir_all(d).unwrap();
        }
        Dirs {
            _tmp: tmp,
            record,
            workspace,
            output,
        }
    }
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/l0")
        .join(name)
        .display()
        .to_string()
}

fn command(argv: Vec<String>, timeout_secs: u64) -> ExecutorProfile {
    ExecutorProfile {
        argv,
        timeout_secs: Some(timeout_secs),
        max_output_bytes: Some(64 * 1024),
        ..crate::common::executor_profile(ExecutorKind::Command)
    }
}

/// A server whose executors are the fixtures: `mixed` (behaviour by assignment id
/// suffix, 2 s timeout), `sleep` (half a second, then valid), `hang` (until killed).
async fn app(backend: Backend, dirs: &Dirs) -> TestApp {
    spawn_app_with(backend, fixtures(dirs)).await
}

/// The settings of [`app`]'s server, for a replica of it too.
fn fixtures(dirs: &Dirs) -> impl FnOnce(&mut Settings) + use<> {
    let record = dirs.record.display().to_string();
    let (workspace, output) = (dirs.workspace.clone(), dirs.output.clone());
    move |s| {
        let rec = |args: &[&str]| {
            let mut argv = vec![fixture("l0.sh"), "--record".into(), record.clone()];
            argv.extend(args.iter().map(|a| a.to_string()));
            argv
        };
        s.executors.insert(
            "mixed".into(),
            command(
                vec![fixture("mixed.sh"), "--record".into(), record.clone()],
                2,
            ),
        );
        s.executors
            .insert("sleep".into(), command(rec(&["sleep", "0.5"]), 30));
        s.executors
            .insert("hang".into(), command(rec(&["hang"]), 600));
        s.workspace_root = Some(workspace);
        s.output_root = Some(output);
    }
}

fn assignment(id: &str, files: &[&str]) -> Value {
    json!({
        "id": id,
        "phase_id": "P1",
        "name": format!("Assignment {id}"),
        "goal": "Do one thing well.",
        "technical_approach": "Small steps.",
        "dependency_notes": "",
        "overlap_notes": "",
        "proposed_work_packages": [
            {"id_suffix": "WP1", "name": "first", "estimated_files": files}
        ],
        "custom_key": {"kept": true}
    })
}

fn plan() -> Value {
    json!({
        "task": "Ship it",
        "phases": [{"id": "P1", "name": "Phase one", "goal": "g", "scope": "s",
                    "technical_approach": "t", "relationship_notes": "", "ordering": 1}]
    })
}

pub(crate) fn body(ids: &[&str]) -> Value {
    let assignments: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| assignment(id, &[&format!("src/file{i}.rs")]))
        .collect();
    json!({
        "context": {"schema_version": 1, "phase_id": "P1", "assignments": assignments,
                    "peer_summaries": [{"id": "P2-A1", "name": "Peer", "goal": "Other"}]},
        "refined_plan": plan(),
        "task_text": "The task: ship it.",
    })
}

fn log_of(job: &Value) -> Vec<String> {
    job["log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_owned())
        .collect()
}

/// The refine tests get a server whose executors are the fixtures, and its dirs.
impl crate::common::Fixture for (TestApp, Dirs) {
    async fn set_up(backend: Backend) -> Self {
        let dirs = Dirs::new();
        (app(backend, &dirs).await, dirs)
    }
}

both_backends!(
    every_kind_of_l0_costs_only_its_own_suggestions,
    eight_assignments_make_two_batches_of_at_most_six,
    cancel_kills_running_l0s_and_is_idempotent,
    idempotency_key_returns_the_original_job,
    wait_returns_when_the_job_changes,
    events_stream_resumes_after_last_event_id,
    result_file_is_written_under_the_output_root,
    task_file_is_read_only_inside_the_workspace_root,
    list_filters_and_pages_newest_first,
    bad_submissions_are_refused_and_create_nothing,
    a_job_end_claims_the_workers_next_job,
    creates_arriving_together_are_each_stored_whole,
    racing_creates_with_one_key_and_two_bodies_make_one_job,
    a_failing_job_in_a_group_fails_alone,
    retry_makes_one_linked_job_from_the_same_request,
    job_counters_follow_every_write,
);

async fn every_kind_of_l0_costs_only_its_own_suggestions(app: TestApp, dirs: Dirs) {
    let ids = [
        "P1-A1-valid",
        "P1-A2-wrong",
        "P1-A3-broken",
        "P1-A4-garbage",
        "P1-A5-fail",
        "P1-A6-hang",
        "P1-A7-flood",
    ];
    let mut request = body(&ids);
    request["executor"] = json!("mixed");
    let job = app.submit_refine_job(&request).await;
    // A worker may claim it before the create answers.
    assert!(
        ["queued", "running"].contains(&job["status"].as_str().unwrap()),
        "{job}"
    );
    assert_eq!(job["executor"], "mixed");
    assert_eq!(job["executor_kind"], "command");
    let id = job["id"].as_str().unwrap();
    let job = app.wait_job(id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let log = log_of(&job);
    for line in [
        "WARNING: L0 response assignment_id mismatch — expected P1-A2-wrong, got OTHER-P1-A2-wrong — skipping",
        "WARNING: L0 response for P1-A3-broken failed validation — skipping",
        "WARNING: L0 response for P1-A4-garbage failed validation — skipping",
        "CRITICAL: L0 for P1-A5-fail failed — proceeding with N-1 suggestions",
        "CRITICAL: L0 for P1-A6-hang failed — proceeding with N-1 suggestions",
        "WARNING: L0 response for P1-A7-flood failed validation — skipping",
        "--- next batch ---",
    ] {
        assert!(
            log.contains(&line.to_owned()),
            "missing {line:?} in {log:#?}"
        );
    }
    let p = &job["progress"];
    assert_eq!(
        (
            p["l0_total"].as_i64(),
            p["l0_succeeded"].as_i64(),
            p["l0_invalid"].as_i64(),
            p["l0_failed"].as_i64(),
            p["l0_running"].as_i64()
        ),
        (Some(7), Some(1), Some(4), Some(2), Some(0))
    );

    let records: Vec<Value> = app
        .get_json(&format!("/v1/refine-jobs/{id}/assignments"))
        .await;
    let status_of = |a: &str| {
        let r = records.iter().find(|r| r["assignment_id"] == a).unwrap();
        (r["status"].as_str().unwrap().to_owned(), r.clone())
    };
    assert_eq!(status_of("P1-A1-valid").0, "valid");
    assert_eq!(status_of("P1-A2-wrong").0, "mismatch");
    assert_eq!(status_of("P1-A3-broken").0, "invalid");
    assert_eq!(status_of("P1-A4-garbage").0, "invalid");
    let (fail, fail_record) = status_of("P1-A5-fail");
    assert_eq!(fail, "failed");
    assert_eq!(fail_record["exit_code"], 3);
    assert!(
        fail_record["error"]
            .as_str()
            .unwrap()
            .contains("exit status 3"),
        "{fail_record}"
    );
    let (hang, hang_record) = status_of("P1-A6-hang");
    assert_eq!(hang, "failed");
    assert!(
        hang_record["error"].as_str().unwrap().contains("timed out"),
        "{hang_record}"
    );
    assert_eq!(status_of("P1-A7-flood").0, "invalid");
    for r in &records {
        assert_eq!(r["starts"], 1, "{r}");
        assert_eq!(
            r["batch"],
            if r["assignment_id"] == "P1-A7-flood" {
                2
            } else {
                1
            }
        );
        assert!(r["finished_at"].is_string());
    }
    // The hanging L0's grandchild (`sleep 600`) died with its process group.
    let pid = std::fs::read_to_string(dirs.record.join("P1-A6-hang.pid")).unwrap();
    assert!(process_gone(pid.trim()), "sleep {pid} outlived the timeout");

    // Only the valid answer changed anything: its dependency correction.
    let result: Value = app.get_json(&format!("/v1/refine-jobs/{id}/result")).await;
    assert_eq!(result, job["result"]);
    assert_eq!(result["schema_version"], 1);
    let out = result["assignments"].as_array().unwrap();
    assert_eq!(out.len(), 7);
    let ids_out: Vec<&str> = out.iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids_out, ids, "input order is kept");
    assert_eq!(out[0]["dependency_notes"], "Depends on X: r");
    assert_eq!(out[0]["custom_key"], json!({"kept": true}));
    for a in &out[1..] {
        assert_eq!(a["dependency_notes"], "", "{a}");
    }
}

fn process_gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie (state Z) is dead; only its parent has not reaped it.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

async fn eight_assignments_make_two_batches_of_at_most_six(app: TestApp, dirs: Dirs) {
    let ids: Vec<String> = (1..=8).map(|i| format!("P1-A{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut request = body(&refs);
    request["executor"] = json!("sleep");
    let job = app.submit_refine_job(&request).await;
    let job = app.wait_job(job["id"].as_str().unwrap()).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let log = log_of(&job);
    assert_eq!(
        log.iter().filter(|l| *l == "--- next batch ---").count(),
        1,
        "{log:?}"
    );
    assert_eq!(
        max_concurrency(&dirs.record),
        6,
        "six L0s at once, never more"
    );
    // Natural order: the first batch is A1..A6, A7 and A8 start after it.
    let events = std::fs::read_to_string(dirs.record.join("events")).unwrap();
    let starts: Vec<&str> = events
        .lines()
        .filter(|l| l.starts_with("start"))
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    let late: Vec<&str> = starts[6..].to_vec();
    let mut late_sorted = late.clone();
    late_sorted.sort();
    assert_eq!(late_sorted, ["P1-A7", "P1-A8"]);
    assert_eq!(job["progress"]["l0_succeeded"], 8);
}

async fn cancel_kills_running_l0s_and_is_idempotent(app: TestApp, dirs: Dirs) {
    let mut request = body(&["P1-A1", "P1-A2"]);
    request["executor"] = json!("hang");
    let job = app.submit_refine_job(&request).await;
    let id = job["id"].as_str().unwrap().to_owned();
    // Wait until both L0s run (their grandchild pids are recorded).
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(dirs.record.join("P1-A1.pid").exists() && dirs.record.join("P1-A2.pid").exists()) {
        assert!(Instant::now() < deadline, "L0s never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cancelled: Value = app
        .post_for_json(&format!("/v1/refine-jobs/{id}/cancel"), &json!({}))
        .await;
    assert!(
        ["cancelling", "cancelled"].contains(&cancelled["status"].as_str().unwrap()),
        "{cancelled}"
    );
    let job = app.wait_job(&id).await;
    assert_eq!(job["status"], "cancelled");
    assert!(job["cancel_requested_at"].is_string());
    assert!(job.get("result").is_none());
    for a in ["P1-A1", "P1-A2"] {
        let pid = std::fs::read_to_string(dirs.record.join(format!("{a}.pid"))).unwrap();
        assert!(process_gone(pid.trim()), "{a}'s sleep survived the cancel");
    }
    let again = app
        .post_json(&format!("/v1/refine-jobs/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(again.status(), 200);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["status"], "cancelled");
    assert_eq!(
        again["version"], job["version"],
        "a terminal job is returned unchanged"
    );
    let problem = app
        .get_problem(
            &format!("/v1/refine-jobs/{id}/result"),
            409,
            "job_not_succeeded",
        )
        .await;
    assert_eq!(problem["job_status"], "cancelled");

    // A queued job is cancelled at once (the hang executor keeps the only... any
    // worker busy is irrelevant: cancel of a queued or running job both end here).
    let unknown = uuid::Uuid::now_v7();
    app.post_problem(
        &format!("/v1/refine-jobs/{unknown}/cancel"),
        &json!({}),
        404,
        "not_found",
    )
    .await;
}

async fn idempotency_key_returns_the_original_job(app: TestApp, _dirs: Dirs) {
    let request = body(&["P1-A1", "P1-A2"]);
    let send = |body: Value, key: &'static str| {
        let app = &app;
        async move {
            app.client
                .post(app.url("/v1/refine-jobs"))
                .header("Idempotency-Key", key)
                .json(&body)
                .send()
                .await
                .unwrap()
        }
    };
    let first = send(request.clone(), "key-1").await;
    assert_eq!(first.status(), 202);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();

    let again = send(request.clone(), "key-1").await;
    assert_eq!(again.status(), 202);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["id"], first["id"]);

    // The same body with its keys in another order is the same body.
    let reordered: Value = serde_json::from_str(&format!(
        "{{\"task_text\": {}, \"refined_plan\": {}, \"context\": {}}}",
        request["task_text"], request["refined_plan"], request["context"]
    ))
    .unwrap();
    let third: Value = send(reordered, "key-1").await.json().await.unwrap();
    assert_eq!(third["id"], first["id"]);

    // The key in the body works like the header.
    let mut with_field = request.clone();
    with_field["idempotency_key"] = json!("key-1");
    let fourth: Value = app.post_for_json("/v1/refine-jobs", &with_field).await;
    assert_eq!(fourth["id"], first["id"]);

    let mut other = request.clone();
    other["task_text"] = json!("another task");
    expect_problem(send(other, "key-1").await, 422, "idempotency_key_reused").await;

    let page: Value = app.get_json("/v1/refine-jobs").await;
    assert_eq!(
        page["jobs"].as_array().unwrap().len(),
        1,
        "one job for one key"
    );
}

async fn wait_returns_when_the_job_changes(app: TestApp, _dirs: Dirs) {
    let mut request = body(&["P1-A1"]);
    request["executor"] = json!("sleep");
    let job = app.submit_refine_job(&request).await;
    let id = job["id"].as_str().unwrap();
    let started = Instant::now();
    let seen: Value = app.get_json(&format!("/v1/refine-jobs/{id}?wait=20")).await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "a change ends the wait early"
    );
    assert_ne!(seen["version"], job["version"], "{seen}");
    let done = app.wait_job(id).await;
    assert_eq!(done["status"], "succeeded");
    // On a terminal job `wait` answers at once, unchanged.
    let again: Value = app.get_json(&format!("/v1/refine-jobs/{id}?wait=30")).await;
    assert_eq!(again["version"], done["version"]);
    app.get_problem(
        &format!("/v1/refine-jobs/{id}?wait=soon"),
        400,
        "invalid_query",
    )
    .await;
}

/// Reads a whole SSE stream into `(id, event, data)` triples.
async fn read_events(app: &TestApp, id: &str, last: Option<i64>) -> Vec<(i64, String, Value)> {
    let path = format!("/v1/refine-jobs/{id}/events");
    let response = sse::open(app, &path, last.map(|l| l.to_string()).as_deref()).await;
    let mut text = String::new();
    let mut stream = response.bytes_stream();
    let reading = async {
        while let Some(chunk) = stream.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
    };
    tokio::time::timeout(Duration::from_secs(60), reading)
        .await
        .expect("the stream ends after the terminal event");
    text.split("\n\n")
        .filter(|block| block.contains("data:"))
        .map(|block| {
            let field = |name: &str| sse::field(block, name).unwrap_or_default();
            (
                field("id").parse().unwrap(),
                field("event"),
                serde_json::from_str(&field("data")).unwrap(),
            )
        })
        .collect()
}

async fn events_stream_resumes_after_last_event_id(app: TestApp, _dirs: Dirs) {
    let mut request = body(&["P1-A1", "P1-A2", "P1-A3-garbage"]);
    request["executor"] = json!("mixed");
    let job = app.submit_refine_job(&request).await;
    let id = job["id"].as_str().unwrap();
    let events = read_events(&app, id, None).await;
    let ids: Vec<i64> = events.iter().map(|e| e.0).collect();
    assert_eq!(
        ids,
        (1..=ids.len() as i64).collect::<Vec<_>>(),
        "gapless ids from 1"
    );
    assert_eq!(events[0].1, "state");
    assert_eq!(events[0].2["status"], "queued");
    let last = events.last().unwrap();
    assert_eq!(
        (last.1.as_str(), &last.2["status"]),
        ("state", &json!("succeeded"))
    );
    assert!(
        events
            .iter()
            .any(|e| e.1 == "state" && e.2["status"] == "running")
    );
    assert_eq!(
        events.iter().filter(|e| e.1 == "progress").count(),
        6,
        "start + end per L0"
    );
    assert!(events.iter().any(|e| e.1 == "log"
        && e.2["line"] == "WARNING: L0 response for P1-A3-garbage failed validation — skipping"));
    // The job's version is its last event's id.
    let done: Value = app.get_json(&format!("/v1/refine-jobs/{id}")).await;
    assert_eq!(done["version"], json!(last.0));

    let resumed = read_events(&app, id, Some(3)).await;
    assert_eq!(resumed.first().unwrap().0, 4);
    assert_eq!(resumed.len(), events.len() - 3);
    expect_problem(
        app.client
            .get(app.url(&format!("/v1/refine-jobs/{id}/events")))
            .header("Last-Event-ID", "yesterday")
            .send()
            .await
            .unwrap(),
        400,
        "invalid_last_event_id",
    )
    .await;
}

async fn result_file_is_written_under_the_output_root(app: TestApp, dirs: Dirs) {
    let mut request = body(&["P1-A1", "P1-A2"]);
    request["output_dir"] = json!("runs/r1");
    let job = app.submit_refine_job(&request).await;
    let job = app.wait_job(job["id"].as_str().unwrap()).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let path = PathBuf::from(job["phase_refined_path"].as_str().unwrap());
    assert!(path.is_absolute());
    assert_eq!(
        path,
        dirs.output
            .canonicalize()
            .unwrap()
            .join("runs/r1/refine_contexts/P1_result.json")
    );
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(written, job["result"]);
}

async fn task_file_is_read_only_inside_the_workspace_root(app: TestApp, dirs: Dirs) {
    std::fs::write(dirs.workspace.join("task.md"), "THE TASK TEXT").unwrap();
    let mut request = body(&["P1-A1"]);
    request.as_object_mut().unwrap().remove("task_text");
    request["context"]["task_file_path"] = json!("task.md");
    request["executor"] = json!("mixed");
    request["context"]["assignments"][0]["id"] = json!("P1-A1-valid");
    let job = app.submit_refine_job(&request).await;
    let job = app.wait_job(job["id"].as_str().unwrap()).await;
    assert_eq!(job["status"], "succeeded");
    let prompt = std::fs::read_to_string(dirs.record.join("P1-A1-valid.prompt")).unwrap();
    let task_path = dirs.workspace.canonicalize().unwrap().join("task.md");
    assert!(
        prompt.contains(&task_path.display().to_string()),
        "the prompt names the task file"
    );
    assert!(
        !prompt.contains("THE TASK TEXT"),
        "the task text is never inlined"
    );

    // Inline task text: the L0 gets a server-side copy's path, not the text.
    let mut inline = body(&["P1-A2-valid"]);
    inline["executor"] = json!("mixed");
    inline["task_text"] = json!("INLINE TASK TEXT");
    let job = app.submit_refine_job(&inline).await;
    app.wait_job(job["id"].as_str().unwrap()).await;
    let prompt = std::fs::read_to_string(dirs.record.join("P1-A2-valid.prompt")).unwrap();
    assert!(!prompt.contains("INLINE TASK TEXT"));
    assert!(prompt.contains("plangate-tasks"), "{prompt}");

    for outside in ["/etc/passwd", "../task.md", "missing.md"] {
        let mut bad = body(&["P1-A1"]);
        bad.as_object_mut().unwrap().remove("task_text");
        bad["context"]["task_file_path"] = json!(outside);
        let problem = app
            .post_problem("/v1/refine-jobs", &bad, 422, "task_file_not_allowed")
            .await;
        assert_eq!(problem["field"], "context.task_file_path");
    }
}

async fn list_filters_and_pages_newest_first(app: TestApp, _dirs: Dirs) {
    let mut created = Vec::new();
    for i in 0..5 {
        let mut request = body(&["P1-A1"]);
        request["project_id"] = json!(if i % 2 == 0 { "alpha" } else { "beta" });
        request["team_pk"] = json!(format!("cycle-{i}"));
        created.push(
            app.submit_refine_job(&request).await["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let path = match &token {
            Some(t) => format!("/v1/refine-jobs?page_size=2&page_token={t}"),
            None => "/v1/refine-jobs?page_size=2".to_owned(),
        };
        let page: Value = app.get_json(&path).await;
        let jobs = page["jobs"].as_array().unwrap();
        assert!(jobs.len() <= 2);
        seen.extend(jobs.iter().map(|j| j["id"].as_str().unwrap().to_owned()));
        match page["next_page_token"].as_str() {
            Some(t) => token = Some(t.to_owned()),
            None => break,
        }
    }
    let mut newest_first = created.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);

    let alpha: Value = app.get_json("/v1/refine-jobs?project_id=alpha").await;
    assert_eq!(alpha["jobs"].as_array().unwrap().len(), 3);
    for j in alpha["jobs"].as_array().unwrap() {
        assert_eq!(j["project_id"], "alpha");
        // Cycle stamping reaches the per-L0 records too.
        let records: Value = app
            .get_json(&format!(
                "/v1/refine-jobs/{}/assignments",
                j["id"].as_str().unwrap()
            ))
            .await;
        assert_eq!(records[0]["project_id"], "alpha");
        assert_eq!(records[0]["team_pk"], j["team_pk"]);
    }
    let one: Value = app
        .get_json("/v1/refine-jobs?project_id=beta&team_pk=cycle-3")
        .await;
    assert_eq!(one["jobs"].as_array().unwrap().len(), 1);
    for id in &created {
        app.wait_job(id).await;
    }
    let done: Value = app
        .get_json("/v1/refine-jobs?status=succeeded&phase_id=P1&page_size=100")
        .await;
    assert_eq!(done["jobs"].as_array().unwrap().len(), 5);
    let none: Value = app.get_json("/v1/refine-jobs?status=queued").await;
    assert!(none["jobs"].as_array().unwrap().is_empty());
    for bad in [
        "?status=done",
        "?page_size=0",
        "?page_size=101",
        "?page_token=xyz",
        "?run_id=7",
    ] {
        app.get_problem(&format!("/v1/refine-jobs{bad}"), 400, "invalid_query")
            .await;
    }
}

async fn bad_submissions_are_refused_and_create_nothing(app: TestApp, _dirs: Dirs) {
    let good = body(&["P1-A1", "P1-A2"]);
    let run_id = uuid::Uuid::now_v7().to_string();
    // (the field changed, as a JSON pointer; its new value, or None to remove it;
    // the code; a word the detail mentions). One case per line, read across.
    #[rustfmt::skip]
    let cases: [(&str, Option<Value>, &str, &str); 13] = [
        ("/context/assignments", None, "invalid_context", "assignments"),
        ("/context/assignments", Some(json!([])), "invalid_context", "assignments"),
        ("/context/assignments/1/id", None, "invalid_context", "id"),
        ("/context/assignments/1/id", Some(json!("P1-A1")), "invalid_context", "P1-A1"),
        ("/context/assignments/0/id", Some(json!("P1 A1")), "invalid_context", "id"),
        ("/context/phase_id", Some(json!("../x")), "invalid_context", "phase_id"),
        ("/refined_plan", None, "invalid_context", "refined_plan"),
        ("/executor", Some(json!("nope")), "unknown_executor", "nope"),
        ("/output_dir", Some(json!("../escape")), "output_not_allowed", ".."),
        ("/output_dir", Some(json!("/tmp")), "output_not_allowed", "outside"),
        ("/surprise", Some(json!(1)), "invalid_context", "surprise"),
        ("/project_id", Some(json!("")), "invalid_field", "project_id"),
        ("/run_id", Some(json!(run_id)), "unknown_run", "run_id"),
    ];
    for (pointer, value, code, mention) in cases {
        let mut request = good.clone();
        let (parent, last) = pointer.rsplit_once('/').unwrap();
        let parent = request.pointer_mut(parent).unwrap();
        match value {
            Some(value) => parent[last] = value,
            None => assert!(parent.as_object_mut().unwrap().remove(last).is_some()),
        }
        let problem = app
            .post_problem("/v1/refine-jobs", &request, 422, code)
            .await;
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            detail.contains(mention),
            "{code}: {detail:?} should mention {mention}"
        );
        if code == "invalid_context" {
            assert!(
                detail.starts_with("FATAL: failed to parse request body: "),
                "{detail}"
            );
        }
    }
    let malformed = app
        .post_body("/v1/refine-jobs", "application/json", "{\"context\": [")
        .await;
    crate::common::expect_unparsed_body(malformed, "invalid_context").await;
    let text = app
        .post_body("/v1/refine-jobs", "text/plain", good.to_string())
        .await;
    expect_problem(text, 415, "unsupported_media_type").await;
    // A 20 MB context is over the 16 MiB body limit: answered from the headers,
    // before the body is sent (a client still writing would see the close).
    crate::common::refused_from_headers(&app, "POST", "/v1/refine-jobs", 20 * 1024 * 1024).await;

    let page: Value = app.get_json("/v1/refine-jobs").await;
    assert!(
        page["jobs"].as_array().unwrap().is_empty(),
        "no job was created: {page}"
    );
}

/// The commit that ends a worker's job also claims its next one (one WAL flush per
/// job instead of two, docs/jobs.md): the next job starts at the very instant the
/// first ended. A draining worker (no claim asked) and a worker whose lease is gone
/// claim nothing.
/// Creates that arrive together are stored together (docs/jobs.md, "Group
/// commit"), each whole: its row, its L0 records and its `queued` event; a key sent
/// several times at once still makes one job, created once and replayed after.
async fn creates_arriving_together_are_each_stored_whole(backend: Backend) {
    use crate::refine_runs::rows_of_job;
    use std::collections::HashSet;
    // No workers: every job stays as its create stored it.
    let app = spawn_app_with(backend, |s| s.workers = 0).await;
    let request = body(&["P1-A1", "P1-A2", "P1-A3"]);
    let send = |key: Option<&'static str>| {
        let (app, request) = (&app, request.clone());
        async move {
            let mut post = app.client.post(app.url("/v1/refine-jobs")).json(&request);
            if let Some(key) = key {
                post = post.header("Idempotency-Key", key);
            }
            let response = post.send().await.unwrap();
            assert_eq!(response.status(), 202);
            let replayed = response.headers().get("idempotent-replayed").is_some();
            let job: Value = response.json().await.unwrap();
            (job["id"].as_str().unwrap().to_owned(), replayed)
        }
    };
    let plain = futures::future::join_all((0..40).map(|_| send(None)));
    let keyed = futures::future::join_all((0..8).map(|_| send(Some("together"))));
    let (plain, keyed) = tokio::join!(plain, keyed);

    let plain_ids: HashSet<&String> = plain.iter().map(|(id, _)| id).collect();
    assert_eq!(plain_ids.len(), 40, "a job each");
    assert!(plain.iter().all(|(_, replayed)| !replayed));
    let keyed_ids: HashSet<&String> = keyed.iter().map(|(id, _)| id).collect();
    assert_eq!(keyed_ids.len(), 1, "one job for one key");
    let created = keyed.iter().filter(|(_, replayed)| !replayed).count();
    assert_eq!(created, 1, "created once, replayed after: {keyed:?}");

    for id in plain_ids.iter().chain(&keyed_ids) {
        let records: Vec<Value> = app
            .get_json(&format!("/v1/refine-jobs/{id}/assignments"))
            .await;
        let statuses: Vec<&str> = records
            .iter()
            .map(|r| r["status"].as_str().unwrap())
            .collect();
        assert_eq!(statuses, ["pending"; 3], "{id}");
        assert_eq!(
            rows_of_job(&app, "refine_job_events", id).await,
            1,
            "{id}: its queued event"
        );
    }
    let page: Value = app.get_json("/v1/refine-jobs?page_size=100").await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 41);
    app.shutdown().await;
}

/// Eight creates race with one key, half of them with another body: one job is
/// created; the creates with its body get it (once created, replayed after), the
/// others `idempotency_key_reused`, whichever body won.
async fn racing_creates_with_one_key_and_two_bodies_make_one_job(backend: Backend) {
    use std::collections::HashSet;
    let app = spawn_app_with(backend, |s| s.workers = 0).await;
    let mine = body(&["P1-A1", "P1-A2"]);
    let mut theirs = mine.clone();
    theirs["task_text"] = json!("another task");
    let send = |request: Value| {
        let app = &app;
        async move {
            let response = app
                .client
                .post(app.url("/v1/refine-jobs"))
                .header("Idempotency-Key", "raced")
                .json(&request)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let replayed = response.headers().get("idempotent-replayed").is_some();
            let answer: Value = response.json().await.unwrap();
            (status, replayed, answer)
        }
    };
    let answers = futures::future::join_all((0..8).map(|i| {
        send(if i % 2 == 0 {
            mine.clone()
        } else {
            theirs.clone()
        })
    }))
    .await;

    let accepted: Vec<&(u16, bool, Value)> = answers.iter().filter(|a| a.0 == 202).collect();
    assert_eq!(accepted.len(), 4, "one body's creates: {answers:?}");
    let ids: HashSet<&str> = accepted
        .iter()
        .map(|a| a.2["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 1, "one job for one key");
    assert_eq!(accepted.iter().filter(|a| !a.1).count(), 1, "created once");
    for (status, _, problem) in answers.iter().filter(|a| a.0 != 202) {
        assert_eq!(*status, 422, "{problem}");
        assert_eq!(problem["code"], "idempotency_key_reused", "{problem}");
    }
    let page: Value = app.get_json("/v1/refine-jobs").await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 1);
    app.shutdown().await;
}

/// One job whose insert fails does not fail the jobs stored with it: the group is
/// stored again one job at a time, and only the culprit gets the error. A key sent
/// twice in one group makes one job.
async fn a_failing_job_in_a_group_fails_alone(backend: Backend) {
    use plangate::db::refine_jobs::{NewRefineJob, store_group};
    let app = spawn_app_with(backend, |s| s.workers = 0).await;
    let taken = app.submit_refine_job(&body(&["P1-A1"])).await["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let job = |id: uuid::Uuid, key: Option<&str>| NewRefineJob {
        id,
        phase_id: "P1".into(),
        run_id: None,
        project_id: None,
        team_pk: None,
        executor: "builtin".into(),
        executor_kind: ExecutorKind::Builtin,
        request: json!({}),
        idempotency_key: key.map(str::to_owned),
        request_hash: None,
        max_attempts: 3,
        l0s: vec![("P1-A1".into(), 0)],
        budget: Default::default(),
        retry_of: None,
        trace_parent: None,
    };
    // Twelve jobs in one group; the sixth reuses a stored job's id, so the group's
    // transaction fails.
    let mut group: Vec<NewRefineJob> = (0..12).map(|_| job(uuid::Uuid::now_v7(), None)).collect();
    group[5] = job(taken, None);
    let outcomes = store_group(&app.db, group.clone()).await;
    assert_eq!(outcomes.len(), 12);
    for (i, (stored, outcome)) in outcomes.iter().enumerate() {
        assert_eq!(stored.id, group[i].id, "outcomes in the order given");
        match (i, outcome) {
            (5, Err(_)) => {}
            (5, Ok(_)) => panic!("a second job with a stored job's id was accepted"),
            (_, Ok((true, _))) => {}
            (_, other) => panic!("job {i}: {other:?}"),
        }
    }
    let page: Value = app.get_json("/v1/refine-jobs?page_size=100").await;
    assert_eq!(
        page["jobs"].as_array().unwrap().len(),
        12,
        "the first job and 11 of the group"
    );

    // One key twice in one group (and a job without a key between them).
    let pair = vec![
        job(uuid::Uuid::now_v7(), Some("twice")),
        job(uuid::Uuid::now_v7(), None),
        job(uuid::Uuid::now_v7(), Some("twice")),
    ];
    let inserted: Vec<bool> = store_group(&app.db, pair)
        .await
        .into_iter()
        .map(|(_, outcome)| outcome.unwrap().0)
        .collect();
    assert_eq!(inserted, [true, true, false], "the key's first job only");
    app.shutdown().await;
}

async fn a_job_end_claims_the_workers_next_job(backend: Backend) {
    use plangate::db::refine_jobs::{ClaimFor, Finish, JobEnd, JobLease, PendingProgress};
    use plangate::domain::job::JobStatus;
    // No workers: the test plays the worker.
    let app = spawn_app_with(backend, |s| s.workers = 0).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            app.submit_refine_job(&body(&["P1-A1"])).await["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let worker = ClaimFor {
        worker_id: uuid::Uuid::new_v4(),
        lease_until: chrono::Utc::now() + chrono::Duration::seconds(60),
    };
    let first = app.db.claim_refine_job(worker).await.unwrap().unwrap();
    assert_eq!(first.lease.job_id.to_string(), ids[0]);
    let result = json!({"refined": true});
    let done = Finish::Succeeded {
        result: &result,
        phase_refined_path: None,
    };
    let none = PendingProgress::default();
    let end = |how| JobEnd {
        how,
        pending: &none,
        log: &[],
        new_lines: &[],
        l0s_running: false,
    };
    let (status, next) = app
        .db
        .finish_refine_job(first.lease, end(&done), Some(worker))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, JobStatus::Succeeded);
    let next = next.expect("the end claimed the next job");
    assert_eq!(next.lease.job_id.to_string(), ids[1]);
    assert_eq!(next.attempt, 1);
    let job = async |id: &str| -> Value {
        let response = app.get(&format!("/v1/refine-jobs/{id}")).await;
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    };
    let ended = job(&ids[0]).await;
    let started = job(&ids[1]).await;
    assert_eq!(ended["status"], "succeeded");
    assert_eq!(started["status"], "running");
    assert_eq!(
        started["started_at"], ended["finished_at"],
        "{started}\n{ended}"
    );

    // A worker whose lease is gone writes nothing and claims nothing.
    let stranger = JobLease {
        job_id: next.lease.job_id,
        token: uuid::Uuid::new_v4(),
    };
    let lost = app
        .db
        .finish_refine_job(stranger, end(&Finish::Cancelled), Some(worker))
        .await
        .unwrap();
    assert!(lost.is_err());
    assert_eq!(job(&ids[2]).await["status"], "queued");
    // A draining worker ends its job without claiming.
    let (_, claimed) = app
        .db
        .finish_refine_job(next.lease, end(&done), None)
        .await
        .unwrap()
        .unwrap();
    assert!(claimed.is_none());
    assert_eq!(job(&ids[2]).await["status"], "queued");
    app.shutdown().await;
}

/// `POST /v1/refine-jobs/{id}/retry` (docs/api.md, "Retry"): only an ended job that
/// did not succeed, once; the new job and the old one name each other.
async fn retry_makes_one_linked_job_from_the_same_request(app: TestApp, dirs: Dirs) {
    // A retry the job refuses: 409 `job_not_retryable`, the problem returned.
    let not_retryable = |id: &str| {
        let path = format!("/v1/refine-jobs/{id}/retry");
        let app = &app;
        async move {
            let response = app.post_json(&path, &json!({})).await;
            expect_problem(response, 409, "job_not_retryable").await
        }
    };
    let mut request = body(&["P1-A1"]);
    request["executor"] = json!("hang");
    request["project_id"] = json!("proj-r");
    let job = app.submit_refine_job(&request).await;
    let id = job["id"].as_str().unwrap().to_owned();

    // Not ended yet: refused, saying what to do.
    let p = not_retryable(&id).await;
    assert!(
        ["queued", "running"].contains(&p["job_status"].as_str().unwrap()),
        "{p}"
    );
    assert!(p["detail"].as_str().unwrap().contains("cancel it"), "{p}");

    let deadline = Instant::now() + Duration::from_secs(20);
    while !dirs.record.join("P1-A1.pid").exists() {
        assert!(Instant::now() < deadline, "the L0 never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    app.post_json(&format!("/v1/refine-jobs/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(app.wait_job(&id).await["status"], "cancelled");

    // Cancelled: retried as a new job from the same request.
    let response = app
        .post_json(&format!("/v1/refine-jobs/{id}/retry"), &json!({}))
        .await;
    assert_eq!(response.status(), 201);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let retry: Value = response.json().await.unwrap();
    let retry_id = retry["id"].as_str().unwrap().to_owned();
    assert_ne!(retry_id, id);
    assert_eq!(location, format!("/v1/refine-jobs/{retry_id}"));
    assert_eq!(retry["retry_of"], json!(id), "{retry}");
    assert_eq!(retry["retried_by"], Value::Null);
    assert_eq!(retry["executor"], "hang");
    assert_eq!(retry["phase_id"], "P1");
    assert_eq!(retry["project_id"], "proj-r");
    assert_eq!(retry["progress"]["l0_total"], 1);
    let original: Value = app.get_json(&format!("/v1/refine-jobs/{id}")).await;
    assert_eq!(original["retried_by"], json!(retry_id), "{original}");
    assert_eq!(original["retry_of"], Value::Null);
    let read: Value = app.get_json(&format!("/v1/refine-jobs/{retry_id}")).await;
    assert_eq!(read["retry_of"], json!(id), "{read}");

    // One retry per job: the second names the first.
    let p = not_retryable(&id).await;
    assert!(p["detail"].as_str().unwrap().contains(&retry_id), "{p}");
    app.post_json(&format!("/v1/refine-jobs/{retry_id}/cancel"), &json!({}))
        .await;
    app.wait_job(&retry_id).await;

    // A success is not retried.
    let mut request = body(&["P1-A1"]);
    request["executor"] = json!("sleep");
    let done = app.submit_refine_job(&request).await;
    let done_id = done["id"].as_str().unwrap().to_owned();
    assert_eq!(app.wait_job(&done_id).await["status"], "succeeded");
    let p = not_retryable(&done_id).await;
    assert_eq!(p["job_status"], "succeeded");

    // Bad and unknown ids.
    let bad = app
        .post_json("/v1/refine-jobs/not-a-uuid/retry", &json!({}))
        .await;
    assert_eq!(bad.status(), 400);
    app.post_problem(
        &format!("/v1/refine-jobs/{}/retry", uuid::Uuid::now_v7()),
        &json!({}),
        404,
        "not_found",
    )
    .await;
}

/// The job counts of `filter`, from the counter rows (the filter as given) and from
/// a count of the jobs (the same filter with a `created_from` before them all):
/// they must agree.
pub(crate) async fn job_counts(app: &TestApp, filter: JobListFilter) -> Vec<(JobState, i64)> {
    let counted = app.db.job_state_counts(&filter).await.unwrap();
    let scanned = JobListFilter {
        created_from: Some(chrono::DateTime::UNIX_EPOCH),
        ..filter.clone()
    };
    let scanned = app.db.job_state_counts(&scanned).await.unwrap();
    assert_eq!(counted, scanned, "counters against a count of {filter:?}");
    counted
}

/// The dashboard's job counts are counter rows the jobs' writes keep (migration
/// 0026). Jobs of every state on two projects and none, submitted to two servers at
/// once on Postgres (each claims and ends jobs), then cancels and retention's
/// deletes: the counters always say what a count of the jobs says.
async fn job_counters_follow_every_write(app: TestApp, dirs: Dirs) {
    let replica = match app.backend {
        Backend::Postgres => Some(app.spawn_replica(fixtures(&dirs)).await),
        Backend::Sqlite => None,
    };
    let servers: Vec<&TestApp> = std::iter::once(&app).chain(replica.as_ref()).collect();
    let job = |ids: &[&str], executor: &str, project: Option<&str>| {
        let mut request = body(ids);
        request["executor"] = json!(executor);
        if let Some(project) = project {
            request["project_id"] = json!(project);
        }
        request
    };
    let mut requests = Vec::new();
    for _ in 0..6 {
        requests.push(job(&["P1-A1-valid"], "mixed", Some("alpha")));
    }
    for _ in 0..4 {
        requests.push(job(&["P1-A1-valid", "P1-A2-fail"], "mixed", Some("alpha")));
    }
    for _ in 0..3 {
        requests.push(job(&["P1-A1"], "hang", Some("beta")));
    }
    for _ in 0..2 {
        requests.push(job(&["P1-A1-valid"], "mixed", None));
    }
    let jobs: Vec<Value> = futures::future::join_all(
        requests
            .iter()
            .enumerate()
            .map(|(i, r)| servers[i % servers.len()].submit_refine_job(r)),
    )
    .await;
    let ids: Vec<String> = jobs
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    let (done, hanging) = ids.split_at(10);
    let (hanging, unowned) = hanging.split_at(3);
    for id in done.iter().chain(unowned) {
        app.wait_job(id).await;
    }
    for id in hanging {
        let deadline = Instant::now() + Duration::from_secs(60);
        while app
            .get_json::<Value>(&format!("/v1/refine-jobs/{id}"))
            .await["status"]
            != "running"
        {
            assert!(Instant::now() < deadline, "{id} never ran");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for id in &hanging[..2] {
        app.post_json(&format!("/v1/refine-jobs/{id}/cancel"), &json!({}))
            .await;
        app.wait_job(id).await;
    }

    let all = job_counts(&app, JobListFilter::default()).await;
    assert_eq!(
        all,
        [
            (JobState::Cancelled, 2),
            (JobState::Degraded, 4),
            (JobState::Running, 1),
            (JobState::Succeeded, 8),
        ]
    );
    // The `refine_jobs` gauge reads the same rows by status: degraded is succeeded.
    let mut by_status = app.db.refine_jobs_by_status().await.unwrap();
    by_status.sort_by_key(|(status, _)| status.as_str());
    assert_eq!(
        by_status,
        [
            (JobStatus::Cancelled, 2),
            (JobStatus::Running, 1),
            (JobStatus::Succeeded, 12),
        ]
    );
    let project = |p: &str| JobListFilter {
        project_id: Some(p.into()),
        ..JobListFilter::default()
    };
    assert_eq!(
        job_counts(&app, project("alpha")).await,
        [(JobState::Degraded, 4), (JobState::Succeeded, 6)]
    );
    let allowed = |projects: &[&str]| JobListFilter {
        allowed_projects: Some(projects.iter().map(|p| (*p).to_owned()).collect()),
        ..JobListFilter::default()
    };
    assert_eq!(
        job_counts(&app, allowed(&["beta"])).await,
        [(JobState::Cancelled, 2), (JobState::Running, 1)]
    );
    assert!(job_counts(&app, allowed(&[])).await.is_empty());

    // The last one cancelled, then everything ended is deleted: nothing is left.
    app.post_json(
        &format!("/v1/refine-jobs/{}/cancel", hanging[2]),
        &json!({}),
    )
    .await;
    app.wait_job(&hanging[2]).await;
    let future = chrono::Utc::now() + chrono::Duration::hours(1);
    let deleted = app
        .db
        .delete_refine_jobs_finished_before(future)
        .await
        .unwrap();
    assert_eq!(deleted, 15);
    assert!(job_counts(&app, JobListFilter::default()).await.is_empty());
    if let Some(replica) = replica {
        replica.shutdown().await;
    }
    app.shutdown().await;
}

/// Two busy servers on one Postgres, each worker ending a job and claiming its next
/// in one transaction: 200 quick jobs of four projects, all submitted at once. Each
/// transaction writes the counter rows of its own connection's stripe only, so no
/// two wait on each other in a cycle (a deadlock would fail a job's end): every
/// job succeeds, and the counters say what a count of the jobs says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_counters_stay_true_under_two_busy_servers() {
    let dirs = Dirs::new();
    let busy = |s: &mut Settings| s.workers = 8;
    let app = spawn_app_with(Backend::Postgres, |s| {
        fixtures(&dirs)(s);
        busy(s);
    })
    .await;
    let replica = app
        .spawn_replica(|s| {
            fixtures(&dirs)(s);
            busy(s);
        })
        .await;
    let servers = [&app, &replica];
    const JOBS: usize = 200;
    let requests: Vec<Value> = (0..JOBS)
        .map(|i| {
            let mut request = body(&["P1-A1", "P1-A2"]);
            request["project_id"] = json!(format!("p{}", i % 4));
            request
        })
        .collect();
    let jobs = futures::stream::iter(requests.iter().enumerate())
        .map(|(i, r)| servers[i % 2].submit_refine_job(r))
        .buffer_unordered(32)
        .collect::<Vec<Value>>()
        .await;
    for job in &jobs {
        let ended = app.wait_job(job["id"].as_str().unwrap()).await;
        assert_eq!(ended["status"], "succeeded", "{ended}");
    }
    assert_eq!(
        job_counts(&app, JobListFilter::default()).await,
        [(JobState::Succeeded, JOBS as i64)]
    );
    for p in 0..4 {
        let filter = JobListFilter {
            project_id: Some(format!("p{p}")),
            ..JobListFilter::default()
        };
        assert_eq!(
            job_counts(&app, filter).await,
            [(JobState::Succeeded, (JOBS / 4) as i64)]
        );
    }
    replica.shutdown().await;
    app.shutdown().await;
}
