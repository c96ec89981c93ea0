//! Refine runs over HTTP (docs/spec/refine.md §7, docs/spec/api.md "Refine runs"), on SQLite and on
//! Postgres: a whole plan split into phase jobs that run in parallel on the worker
//! pool and are merged exactly once with cross-phase file ownership.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::{Backend, TestApp, expect_problem, l0_script, max_concurrency, spawn_app_with};
use plangate::config::{ExecutorKind, ExecutorProfile, Settings};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------
// Plans

fn phase(id: &str) -> Value {
    json!({
        "id": id,
        "name": format!("Phase {id}"),
        "goal": format!("Deliver {id}."),
        "scope": ["code"],
        "technical_approach": "Small steps.",
        "relationship_notes": "",
        "ordering": 1
    })
}

/// A WP with `estimated_files` (`touched` = false) or `files_touched` only.
fn wp(suffix: &str, files: &[&str], touched: bool) -> Value {
    let key = if touched {
        "files_touched"
    } else {
        "estimated_files"
    };
    json!({"id_suffix": suffix, "name": format!("Work {suffix}"), "scope": "s", key: files})
}

fn assignment(id: &str, phase_id: &str, wps: Vec<Value>) -> Value {
    json!({
        "id": id,
        "phase_id": phase_id,
        "name": format!("Name {id}"),
        "goal": format!("Goal {id}."),
        "technical_approach": "Plain code.",
        "proposed_work_packages": wps,
        "dependency_notes": "",
        "overlap_notes": "",
        "custom_key": {"kept": true}
    })
}

/// `n` phases `P1..Pn` (listed in lexicographic order, so that only a natural
/// sort puts P2 before P10), `per_phase` assignments each (`Pp-A1, Pp-A2, …,
/// Pp-A10` style ids), every assignment with its own file.
fn grid_plan(n: usize, per_phase: usize) -> Value {
    let mut phase_ids: Vec<String> = (1..=n).map(|p| format!("P{p}")).collect();
    phase_ids.sort();
    let phases: Vec<Value> = phase_ids.iter().map(|p| phase(p)).collect();
    let mut assignments = Vec::new();
    for p in &phase_ids {
        // Listed A10-style ids first too: the phase keeps input order.
        for a in 1..=per_phase {
            let id = format!("{p}-A{a}");
            let file = format!("src/{}/a{a}.rs", p.to_lowercase());
            assignments.push(assignment(&id, p, vec![wp("WP1", &[file.as_str()], false)]));
        }
    }
    json!({
        "task": "Build the thing; nothing else.",
        "source_dir": "/srv/app",
        "phases": phases,
        "assignments": assignments
    })
}

fn natural_phase_ids(n: usize) -> Vec<String> {
    (1..=n).map(|p| format!("P{p}")).collect()
}

// ---------------------------------------------------------------------------
// Harness

fn command_profile(args: &[&str], timeout_secs: u64) -> ExecutorProfile {
    ExecutorProfile {
        kind: ExecutorKind::Command,
        argv: std::iter::once(l0_script())
            .chain(args.iter().map(|s| s.to_string()))
            .collect(),
        base_url: None,
        model: None,
        api_key_env: None,
        timeout_secs: Some(timeout_secs),
        max_output_bytes: None,
        env_allow: vec![],
        output: Default::default(),
    }
}

async fn app(backend: Backend, tweak: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_app_with(backend, tweak).await
}

async fn json_of(response: reqwest::Response) -> Value {
    response.json().await.expect("JSON body")
}

/// POST /v1/refine-runs, expecting 202; returns the run.
async fn submit(app: &TestApp, body: &Value) -> Value {
    let response = app.post_json("/v1/refine-runs", body).await;
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let run = json_of(response).await;
    assert_eq!(status, 202, "submit: {run}");
    let id = run["id"].as_str().expect("run id").to_owned();
    assert_eq!(
        location.as_deref(),
        Some(format!("/v1/refine-runs/{id}").as_str())
    );
    run
}

fn is_terminal(status: &str) -> bool {
    matches!(status, "succeeded" | "failed" | "cancelled")
}

/// Long-polls `GET /v1/refine-runs/{id}?wait=` until the run is terminal.
/// Returns the final run and how many polls it took.
async fn wait_run(app: &TestApp, id: &str, limit: Duration) -> (Value, usize) {
    let started = Instant::now();
    let mut polls = 0;
    loop {
        polls += 1;
        let response = app.get(&format!("/v1/refine-runs/{id}?wait=10")).await;
        assert_eq!(response.status().as_u16(), 200);
        let run = json_of(response).await;
        if is_terminal(run["status"].as_str().unwrap_or_default()) {
            return (run, polls);
        }
        assert!(
            started.elapsed() < limit,
            "run {id} not terminal after {limit:?}: {run}"
        );
    }
}

async fn run_jobs(app: &TestApp, run_id: &str) -> Vec<Value> {
    let response = app
        .get(&format!("/v1/refine-jobs?run_id={run_id}&page_size=100"))
        .await;
    assert_eq!(response.status().as_u16(), 200);
    let page = json_of(response).await;
    page["jobs"].as_array().expect("jobs").clone()
}

async fn all_jobs(app: &TestApp) -> Vec<Value> {
    let response = app.get("/v1/refine-jobs?page_size=100").await;
    assert_eq!(response.status().as_u16(), 200);
    json_of(response).await["jobs"]
        .as_array()
        .expect("jobs")
        .clone()
}

use crate::common::ids;

fn by_id<'a>(assignments: &'a Value, id: &str) -> &'a Value {
    assignments
        .as_array()
        .expect("assignments")
        .iter()
        .find(|a| a["id"] == id)
        .unwrap_or_else(|| panic!("no assignment {id} in {assignments}"))
}

/// Whether `pid` is gone (or a zombie): polls up to 5 s.
async fn process_dies(pid: u32) -> bool {
    for _ in 0..100 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) if stat.split_whitespace().nth(2) == Some("Z") => return true,
            Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    false
}

/// How many times the run was merged (the `merge_count` column): must be 1.
async fn merge_count(app: &TestApp, run_id: &str) -> i64 {
    let id: uuid::Uuid = run_id.parse().unwrap();
    let query = "SELECT CAST(merge_count AS BIGINT) FROM refine_runs WHERE id = $1";
    with_connection!(app, conn => sqlx::query_scalar(query).bind(id).fetch_one(conn).await.unwrap())
}

// ---------------------------------------------------------------------------
// A 12-phase run

async fn twelve_phases_run_in_natural_order(app: TestApp) {
    let plan = grid_plan(12, 3);
    let submitted = submit(&app, &json!({"plan": plan, "project_id": "proj-1"})).await;
    let run_id = submitted["id"].as_str().unwrap().to_owned();
    assert_eq!(submitted["status"], "running");
    let phase_keys: Vec<&String> = submitted["phases"].as_object().unwrap().keys().collect();
    assert_eq!(phase_keys, natural_phase_ids(12).iter().collect::<Vec<_>>());

    let (run, _) = wait_run(&app, &run_id, Duration::from_secs(120)).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["project_id"], "proj-1");
    assert!(run["finished_at"].is_string());

    // The run's phase map: natural order, one succeeded job per phase.
    let phases = run["phases"].as_object().expect("phases");
    let keys: Vec<String> = phases.keys().cloned().collect();
    assert_eq!(keys, natural_phase_ids(12), "P2 sorts before P10");
    for (phase_id, entry) in phases {
        assert_eq!(entry["status"], "succeeded", "{phase_id}: {entry}");
        assert_eq!(
            entry["job_id"], submitted["phases"][phase_id]["job_id"],
            "the phase's job is the one created at submit"
        );
    }

    // The phase jobs are ordinary refine jobs of the run.
    let jobs = run_jobs(&app, &run_id).await;
    assert_eq!(jobs.len(), 12, "one job per phase");
    let mut job_phases: Vec<String> = jobs
        .iter()
        .map(|j| j["phase_id"].as_str().unwrap().to_owned())
        .collect();
    job_phases.sort_by(|a, b| a[1..].parse::<u32>().unwrap().cmp(&b[1..].parse().unwrap()));
    assert_eq!(job_phases, natural_phase_ids(12));
    for job in &jobs {
        assert_eq!(job["run_id"], run_id.as_str(), "{job}");
        assert_eq!(job["kind"], "refine");
        assert_eq!(job["status"], "succeeded");
        assert_eq!(
            job["project_id"], "proj-1",
            "cycle stamping reaches the jobs"
        );
        assert_eq!(job["executor"], "builtin");
        assert_eq!(job["progress"]["l0_total"], 3);
        assert_eq!(job["progress"]["l0_succeeded"], 3);
        let phase_id = job["phase_id"].as_str().unwrap();
        assert_eq!(phases[phase_id]["job_id"], job["id"]);
        assert!(
            job.get("phase_refined_path").is_none(),
            "no output_dir given"
        );
    }
    // Nothing outside the run was created.
    assert_eq!(all_jobs(&app).await.len(), 12);

    // The merged result: every assignment once, phases in natural order.
    let inline = run["result"].clone();
    let response = app.get(&format!("/v1/refine-runs/{run_id}/result")).await;
    assert_eq!(response.status().as_u16(), 200);
    let result = json_of(response).await;
    assert_eq!(result, inline, "GET …/result is the run's result");
    assert_eq!(result["schema_version"], 1);
    assert_eq!(result["conflict_count"], 0);
    let expected: Vec<String> = natural_phase_ids(12)
        .iter()
        .flat_map(|p| (1..=3).map(move |a| format!("{p}-A{a}")))
        .collect();
    assert_eq!(ids(&result["assignments"]), expected);
    let p2 = expected.iter().position(|id| id == "P2-A1").unwrap();
    let p10 = expected.iter().position(|id| id == "P10-A1").unwrap();
    assert!(p2 < p10);
    for a in result["assignments"].as_array().unwrap() {
        assert_eq!(a["custom_key"], json!({"kept": true}), "unknown keys kept");
        assert!(a["proposed_work_packages"].is_array(), "input key kept");
    }
    let skipped = &result["skipped"];
    for key in [
        "unassigned",
        "duplicates",
        "duplicates_in_phase",
        "failed_phases",
        "empty_phases",
    ] {
        assert_eq!(skipped[key], json!([]), "skipped.{key}: {skipped}");
    }
    let result_phases: Vec<&String> = result["phases"].as_object().unwrap().keys().collect();
    assert_eq!(result_phases, keys.iter().collect::<Vec<_>>());

    assert_eq!(merge_count(&app, &run_id).await, 1, "merged exactly once");

    // `?wait=` on a terminal run answers at once with the final state.
    let started = Instant::now();
    let again = json_of(app.get(&format!("/v1/refine-runs/{run_id}?wait=30")).await).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(again["status"], "succeeded");
    assert_eq!(again["result"], result);
}

// ---------------------------------------------------------------------------
// Cross-phase duplicates and file ownership

async fn duplicates_and_cross_phase_file_ownership(app: TestApp) {
    let mut second_copy = assignment("X-A1", "P10", vec![wp("WP1", &["src/dup_b.rs"], false)]);
    second_copy["name"] = json!("second copy");
    let mut first_copy = assignment("X-A1", "P2", vec![wp("WP1", &["src/dup_a.rs"], false)]);
    first_copy["name"] = json!("first copy");
    let plan = json!({
        "phases": [phase("P10"), phase("P2"), phase("P1")],
        // P10 is listed first: only the natural phase order makes P2's copy first.
        "assignments": [
            assignment("P10-A1", "P10", vec![
                wp("WP1", &["src/shared.rs", "src/touched.rs"], false),
                wp("WP2", &["src/p10.rs"], false),
            ]),
            second_copy,
            // src/shared.rs only in files_touched here, in estimated_files elsewhere.
            assignment("P2-A1", "P2", vec![
                wp("WP1", &["src/shared.rs"], true),
                wp("WP2", &["src/p2.rs"], false),
            ]),
            first_copy,
            // files_touched of P1-A1 vs estimated_files of P10-A1.
            assignment("P1-A1", "P1", vec![
                wp("WP1", &["src/shared.rs", "src/p1.rs"], false),
                wp("WP2", &["src/touched.rs"], true),
            ]),
        ]
    });
    let run = submit(&app, &json!({"plan": plan})).await;
    let run_id = run["id"].as_str().unwrap().to_owned();
    let (run, _) = wait_run(&app, &run_id, Duration::from_secs(60)).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let result = &run["result"];

    // Natural phase order, duplicate dropped (the copy of the earlier phase kept).
    assert_eq!(
        ids(&result["assignments"]),
        ["P1-A1", "P2-A1", "X-A1", "P10-A1"]
    );
    assert_eq!(result["skipped"]["duplicates"], json!(["X-A1"]));
    assert_eq!(by_id(&result["assignments"], "X-A1")["name"], "first copy");

    // src/shared.rs: claimed by P1-A1, P2-A1 (files_touched) and P10-A1;
    // src/touched.rs: P1-A1 (files_touched) and P10-A1.
    assert_eq!(result["conflict_count"], 3, "{result}");
    assert_eq!(
        result["conflicts"],
        json!([
            {"file": "src/shared.rs", "owner": "P1-A1", "stripped_from": ["P2-A1", "P10-A1"]},
            {"file": "src/touched.rs", "owner": "P1-A1", "stripped_from": ["P10-A1"]},
        ])
    );
    let assignments = &result["assignments"];
    let p1 = &by_id(assignments, "P1-A1")["proposed_work_packages"];
    assert_eq!(
        p1[0]["estimated_files"],
        json!(["src/shared.rs", "src/p1.rs"])
    );
    assert_eq!(p1[1]["files_touched"], json!(["src/touched.rs"]));
    let p2 = &by_id(assignments, "P2-A1")["proposed_work_packages"];
    assert_eq!(p2[0]["files_touched"], json!([]));
    assert_eq!(p2[1]["estimated_files"], json!(["src/p2.rs"]));
    let p10 = &by_id(assignments, "P10-A1")["proposed_work_packages"];
    assert_eq!(p10[0]["estimated_files"], json!([]));
    assert_eq!(p10[1]["estimated_files"], json!(["src/p10.rs"]));
    assert_eq!(
        result["emptied_work_packages"],
        json!(["P2-A1-WP1", "P10-A1-WP1"])
    );
    let x = &by_id(assignments, "X-A1")["proposed_work_packages"];
    assert_eq!(x[0]["estimated_files"], json!(["src/dup_a.rs"]));

    let phases: Vec<&String> = run["phases"].as_object().unwrap().keys().collect();
    assert_eq!(phases, ["P1", "P2", "P10"]);
    assert_eq!(run_jobs(&app, &run_id).await.len(), 3);
}

// ---------------------------------------------------------------------------
// A phase whose job fails

async fn failed_phase_keeps_its_assignments(backend: Backend) {
    let root = tempfile::tempdir().expect("output root");
    let app = app(backend, |s| s.output_root = Some(root.path().to_path_buf())).await;
    let canonical_root = root.path().canonicalize().unwrap();
    // The result file of P3 cannot be written: a directory stands in its place,
    // so the atomic rename fails.
    let blocked = canonical_root.join("out/refine_contexts/P3_result.json");
    std::fs::create_dir_all(&blocked).unwrap();

    let plan = grid_plan(4, 2);
    let run = submit(&app, &json!({"plan": plan, "output_dir": "out"})).await;
    let run_id = run["id"].as_str().unwrap().to_owned();
    let (run, _) = wait_run(&app, &run_id, Duration::from_secs(60)).await;
    assert_eq!(
        run["status"], "succeeded",
        "the run finishes, saying which phase failed: {run}"
    );
    assert_eq!(run["phases"]["P3"]["status"], "failed");
    for p in ["P1", "P2", "P4"] {
        assert_eq!(run["phases"][p]["status"], "succeeded");
    }
    let result = &run["result"];
    assert_eq!(result["skipped"]["failed_phases"], json!(["P3"]));
    assert_eq!(
        ids(&result["assignments"]),
        [
            "P1-A1", "P1-A2", "P2-A1", "P2-A2", "P3-A1", "P3-A2", "P4-A1", "P4-A2"
        ]
    );
    // P3's assignments are the submitted ones, unchanged.
    for id in ["P3-A1", "P3-A2"] {
        let original = plan["assignments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == id)
            .unwrap();
        assert_eq!(by_id(&result["assignments"], id), original);
    }

    let jobs = run_jobs(&app, &run_id).await;
    assert_eq!(jobs.len(), 4);
    for job in &jobs {
        let phase_id = job["phase_id"].as_str().unwrap();
        if phase_id == "P3" {
            assert_eq!(job["status"], "failed", "{job}");
            assert_eq!(job["error"]["code"], "output_write_failed", "{job}");
            assert!(job.get("phase_refined_path").is_none());
            continue;
        }
        assert_eq!(job["status"], "succeeded", "{job}");
        let path = PathBuf::from(job["phase_refined_path"].as_str().expect("a result path"));
        assert!(path.is_absolute());
        assert_eq!(
            path,
            canonical_root.join(format!("out/refine_contexts/{phase_id}_result.json"))
        );
        assert!(path.starts_with(&canonical_root), "never outside the root");
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(written, job["result"], "the file holds the job's result");
        assert_eq!(written["schema_version"], 1);
    }
    assert!(blocked.is_dir(), "the blocking directory is left alone");
    let leftovers: Vec<_> = std::fs::read_dir(canonical_root.join("out/refine_contexts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temp files removed: {leftovers:?}");
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// Cancelling a run

async fn cancelling_a_run_cancels_its_jobs(backend: Backend) {
    let record = tempfile::tempdir().expect("record dir");
    let record_dir = record.path().display().to_string();
    let app = app(backend, |s| {
        s.executors.insert(
            "hang".into(),
            command_profile(&["--record", &record_dir, "hang"], 600),
        );
    })
    .await;
    // 6 phases on 4 workers: some jobs run (L0s hanging), the rest wait queued.
    let plan = grid_plan(6, 2);
    let run = submit(&app, &json!({"plan": plan, "executor": "hang"})).await;
    let run_id = run["id"].as_str().unwrap().to_owned();

    // Wait until L0 processes are really hanging.
    let started = Instant::now();
    loop {
        let running = run_jobs(&app, &run_id)
            .await
            .iter()
            .filter(|j| j["status"] == "running" && j["progress"]["l0_running"] == 2)
            .count();
        let pids = std::fs::read_dir(record.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".pid"))
            })
            .count();
        if running >= 1 && pids >= 2 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no phase job started"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let response = app.get(&format!("/v1/refine-runs/{run_id}/result")).await;
    let problem = expect_problem(response, 409, "run_not_finished").await;
    assert_eq!(problem["run_status"], "running");

    let response = app
        .client
        .post(app.url(&format!("/v1/refine-runs/{run_id}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let after = json_of(response).await;
    assert!(
        matches!(after["status"].as_str(), Some("cancelling" | "cancelled")),
        "{after}"
    );

    let (run, _) = wait_run(&app, &run_id, Duration::from_secs(30)).await;
    assert_eq!(run["status"], "cancelled", "{run}");
    let jobs = run_jobs(&app, &run_id).await;
    assert_eq!(jobs.len(), 6);
    for job in &jobs {
        assert_eq!(job["status"], "cancelled", "{job}");
    }
    for entry in run["phases"].as_object().unwrap().values() {
        assert_eq!(entry["status"], "cancelled");
    }
    // The hanging L0s (and their child `sleep`s) were killed.
    let mut checked = 0;
    for entry in std::fs::read_dir(record.path()).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".pid") || name.ends_with(".l0pid") {
            let pid: u32 = std::fs::read_to_string(entry.path())
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert!(process_dies(pid).await, "{name}: process {pid} still runs");
            checked += 1;
        }
    }
    assert!(checked >= 4);
    // What was merged: nothing succeeded, so every phase kept its assignments.
    let result = &run["result"];
    assert_eq!(
        result["skipped"]["failed_phases"],
        json!(["P1", "P2", "P3", "P4", "P5", "P6"])
    );
    assert_eq!(result["assignments"].as_array().unwrap().len(), 12);

    assert_eq!(merge_count(&app, &run_id).await, 1, "merged exactly once");

    // Cancel is idempotent.
    let response = app
        .client
        .post(app.url(&format!("/v1/refine-runs/{run_id}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let again = json_of(response).await;
    assert_eq!(again["status"], "cancelled");
    assert_eq!(again["result"], run["result"]);
    assert_eq!(again["finished_at"], run["finished_at"]);
    assert_eq!(
        merge_count(&app, &run_id).await,
        1,
        "a second cancel merges nothing"
    );

    // Unknown run.
    let response = app
        .client
        .post(app.url(&format!("/v1/refine-runs/{}/cancel", uuid::Uuid::now_v7())))
        .send()
        .await
        .unwrap();
    expect_problem(response, 404, "not_found").await;
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// Phases run in parallel, bounded by the worker pool

async fn phases_run_in_parallel_up_to_the_worker_limit(backend: Backend) {
    const WORKERS: u32 = 3;
    let record = tempfile::tempdir().expect("record dir");
    let record_dir = record.path().display().to_string();
    let app = app(backend, |s| {
        s.workers = WORKERS;
        s.executors.insert(
            "slow".into(),
            command_profile(&["--record", &record_dir, "sleep", "2"], 60),
        );
    })
    .await;
    // 6 one-assignment phases of 2 s each on 3 workers: two rounds, ~4 s; run
    // serially it would take 12 s.
    let started = Instant::now();
    let run = submit(&app, &json!({"plan": grid_plan(6, 1), "executor": "slow"})).await;
    let run_id = run["id"].as_str().unwrap().to_owned();
    let (run, _) = wait_run(&app, &run_id, Duration::from_secs(60)).await;
    let elapsed = started.elapsed();
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(
        max_concurrency(record.path()),
        WORKERS as usize,
        "as many phase jobs at once as there are workers, never more"
    );
    assert!(
        elapsed < Duration::from_secs(10),
        "6 × 2 s phases on 3 workers took {elapsed:?}"
    );
    assert_eq!(merge_count(&app, &run_id).await, 1);
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// Every phase failing fails the run (the result is still there)

async fn every_phase_failing_fails_the_run(backend: Backend) {
    let root = tempfile::tempdir().expect("output root");
    let app = app(backend, |s| s.output_root = Some(root.path().to_path_buf())).await;
    // `refine_contexts` is a file: no phase can write its result.
    std::fs::create_dir_all(root.path().join("out")).unwrap();
    std::fs::write(root.path().join("out/refine_contexts"), "not a directory").unwrap();
    let plan = grid_plan(3, 2);
    let run = submit(&app, &json!({"plan": plan, "output_dir": "out"})).await;
    let run_id = run["id"].as_str().unwrap().to_owned();
    let (run, _) = wait_run(&app, &run_id, Duration::from_secs(60)).await;
    assert_eq!(run["status"], "failed", "{run}");
    let result = &run["result"];
    assert_eq!(
        result["skipped"]["failed_phases"],
        json!(["P1", "P2", "P3"])
    );
    assert_eq!(result["assignments"], plan["assignments"], "all unchanged");
    for job in run_jobs(&app, &run_id).await {
        assert_eq!(job["status"], "failed");
        assert_eq!(job["error"]["code"], "output_write_failed");
    }
    let response = app.get(&format!("/v1/refine-runs/{run_id}/result")).await;
    assert_eq!(
        response.status().as_u16(),
        200,
        "a failed run has a result too"
    );
    // The dashboard's run list reads the run's row as it is.
    let list = app.get("/ui/runs").await.text().await.unwrap();
    let row = list
        .split(&format!("data-run=\"{run_id}\""))
        .nth(1)
        .and_then(|rest| rest.split("</tr>").next())
        .unwrap_or_else(|| panic!("no row of run {run_id} in {list}"));
    assert!(
        row.contains("st-failed"),
        "the run's row says failed: {row}"
    );
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// The result while running

async fn result_is_409_while_running(backend: Backend) {
    let app = app(backend, |s| {
        s.executors
            .insert("slow".into(), command_profile(&["sleep", "2"], 60));
    })
    .await;
    let run = submit(&app, &json!({"plan": grid_plan(2, 1), "executor": "slow"})).await;
    let run_id = run["id"].as_str().unwrap().to_owned();
    let response = app.get(&format!("/v1/refine-runs/{run_id}/result")).await;
    let problem = expect_problem(response, 409, "run_not_finished").await;
    assert_eq!(problem["run_status"], "running");
    assert!(
        problem["detail"].as_str().unwrap().contains("running"),
        "{problem}"
    );

    let (run, polls) = wait_run(&app, &run_id, Duration::from_secs(60)).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(polls >= 1);
    let response = app.get(&format!("/v1/refine-runs/{run_id}/result")).await;
    assert_eq!(response.status().as_u16(), 200);
    let result = json_of(response).await;
    assert_eq!(ids(&result["assignments"]), ["P1-A1", "P2-A1"]);
    for job in run_jobs(&app, &run_id).await {
        assert_eq!(job["executor"], "slow");
        assert_eq!(job["executor_kind"], "command");
    }

    // Unknown and malformed run ids.
    let response = app
        .get(&format!("/v1/refine-runs/{}/result", uuid::Uuid::now_v7()))
        .await;
    expect_problem(response, 404, "not_found").await;
    app.get_problem("/v1/refine-runs/not-a-uuid", 400, "invalid_path")
        .await;
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// Idempotency

async fn idempotent_create(app: TestApp) {
    let body = json!({"plan": grid_plan(3, 2), "project_id": "proj-7"});
    let post = |body: Value, key: &'static str| {
        let request = app
            .client
            .post(app.url("/v1/refine-runs"))
            .header("Idempotency-Key", key)
            .json(&body);
        async move { request.send().await.unwrap() }
    };
    let first = post(body.clone(), "run-key-1").await;
    assert_eq!(first.status().as_u16(), 202);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first = json_of(first).await;

    let again = post(body.clone(), "run-key-1").await;
    assert_eq!(again.status().as_u16(), 202);
    assert_eq!(
        again
            .headers()
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    let again = json_of(again).await;
    assert_eq!(again["id"], first["id"], "the same run");
    let first_jobs: BTreeMap<String, Value> = first["phases"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v["job_id"].clone()))
        .collect();
    let again_jobs: BTreeMap<String, Value> = again["phases"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v["job_id"].clone()))
        .collect();
    assert_eq!(first_jobs, again_jobs, "the same phase jobs");

    // The key in the body works like the header.
    let mut with_field = body.clone();
    with_field["idempotency_key"] = json!("run-key-1");
    let response = app.post_json("/v1/refine-runs", &with_field).await;
    assert_eq!(response.status().as_u16(), 202);
    assert_eq!(json_of(response).await["id"], first["id"]);

    // Same key, another body. (Another project would be another scope, where the
    // key is free: tests/api/scoping.rs.)
    let mut other = body.clone();
    other["task_text"] = json!("another task");
    let response = post(other, "run-key-1").await;
    expect_problem(response, 422, "idempotency_key_reused").await;

    // Only one run's jobs exist.
    assert_eq!(all_jobs(&app).await.len(), 3);
    let run_id = first["id"].as_str().unwrap();
    let (run, _) = wait_run(&app, run_id, Duration::from_secs(60)).await;
    assert_eq!(run["status"], "succeeded");

    // Another key: another run.
    let response = post(body.clone(), "run-key-2").await;
    assert_eq!(response.status().as_u16(), 202);
    let second = json_of(response).await;
    assert_ne!(second["id"], first["id"]);
    assert_eq!(all_jobs(&app).await.len(), 6);
}

// ---------------------------------------------------------------------------
// Bad input: 4xx problem+json, nothing created

async fn bad_input_creates_nothing(backend: Backend) {
    let root = tempfile::tempdir().expect("output root");
    let app = app(backend, |s| s.output_root = Some(root.path().to_path_buf())).await;
    let good = grid_plan(2, 2);
    let with_plan = |f: &dyn Fn(&mut Value)| {
        let mut plan = good.clone();
        f(&mut plan);
        json!({"plan": plan})
    };
    // Renames phase `index` (its assignments follow), so only the new id is bad.
    let rename_phase = |p: &mut Value, index: usize, to: &str| {
        let from = p["phases"][index]["id"].clone();
        p["phases"][index]["id"] = json!(to);
        for a in p["assignments"].as_array_mut().unwrap() {
            if a["phase_id"] == from {
                a["phase_id"] = json!(to);
            }
        }
    };
    // Every case is a 422: (what, body) refused as `invalid_plan`, then (what,
    // body, code) for the other codes. One case per line, read across.
    let remove = |p: &mut Value, key: &str| p.as_object_mut().unwrap().remove(key).unwrap();
    #[rustfmt::skip]
    let bad_plans: Vec<(&str, Value)> = vec![
        ("no phases", with_plan(&|p| { remove(p, "phases"); })),
        ("empty phases", with_plan(&|p| p["phases"] = json!([]))),
        ("no assignments key", with_plan(&|p| { remove(p, "assignments"); })),
        ("empty assignments", with_plan(&|p| p["assignments"] = json!([]))),
        ("assignment naming a missing phase",
         with_plan(&|p| p["assignments"][3]["phase_id"] = json!("P9"))),
        ("duplicate phase ids", with_plan(&|p| p["phases"][1]["id"] = json!("P1"))),
        ("phase id with a space", with_plan(&|p| rename_phase(p, 0, "P 1"))),
        ("assignment id ../x", with_plan(&|p| p["assignments"][0]["id"] = json!("../x"))),
        ("phase id ../x", with_plan(&|p| rename_phase(p, 1, "../x"))),
        ("assignment without id", with_plan(&|p| { remove(&mut p["assignments"][1], "id"); })),
        ("plan missing", json!({"executor": "builtin"})),
        ("plan not an object", json!({"plan": []})),
        ("unknown body field", json!({"plan": good.clone(), "colour": "red"})),
    ];
    let with_field = |field: &str, value: &str| {
        let mut body = json!({"plan": good.clone()});
        body[field] = json!(value);
        body
    };
    #[rustfmt::skip]
    let other_codes = [
        ("unknown executor", with_field("executor", "nope"), "unknown_executor"),
        ("output_dir escaping with ..",
         with_field("output_dir", "../elsewhere"), "output_not_allowed"),
        ("output_dir outside the root", with_field("output_dir", "/tmp"), "output_not_allowed"),
        ("blank project_id", with_field("project_id", "  "), "invalid_field"),
    ];
    let cases = bad_plans
        .into_iter()
        .map(|(what, body)| (what, body, "invalid_plan"))
        .chain(other_codes);
    for (what, body, code) in cases {
        let response = app.post_json("/v1/refine-runs", &body).await;
        assert_eq!(response.status().as_u16(), 422, "{what}");
        let problem = expect_problem(response, 422, code).await;
        let detail = problem["detail"].as_str().unwrap();
        if code == "invalid_plan" {
            assert!(
                detail.starts_with("FATAL: failed to parse request body: "),
                "{what}: {detail}"
            );
        }
        assert!(all_jobs(&app).await.is_empty(), "{what}: a job was created");
    }

    // Malformed JSON.
    let response = app
        .post_body(
            "/v1/refine-runs",
            "application/json",
            r#"{"plan": {"phases": ["#,
        )
        .await;
    crate::common::expect_unparsed_body(response, "invalid_plan").await;
    // Not JSON at all.
    let response = app.post_body("/v1/refine-runs", "text/plain", "plan").await;
    let status = response.status().as_u16();
    assert!((400..500).contains(&status));
    expect_problem(response, status, "unsupported_media_type").await;

    assert!(all_jobs(&app).await.is_empty(), "nothing created");
    // And the good plan still goes through on this server.
    let run = submit(&app, &json!({"plan": good, "output_dir": "fine/dir"})).await;
    let (run, _) = wait_run(&app, run["id"].as_str().unwrap(), Duration::from_secs(60)).await;
    assert_eq!(run["status"], "succeeded");
    app.shutdown().await;
}

// ---------------------------------------------------------------------------
// Assignments without a phase are reported, not lost

async fn unassigned_and_empty_phases_are_reported(app: TestApp) {
    let mut plan = grid_plan(3, 1);
    plan["phases"].as_array_mut().unwrap().push(phase("P4"));
    plan["assignments"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "LOOSE-1", "name": "No phase", "goal": "g"}));
    let run = submit(&app, &json!({"plan": plan})).await;
    let (run, _) = wait_run(&app, run["id"].as_str().unwrap(), Duration::from_secs(60)).await;
    assert_eq!(run["status"], "succeeded");
    let skipped = &run["result"]["skipped"];
    assert_eq!(skipped["unassigned"], json!(["LOOSE-1"]));
    assert_eq!(skipped["empty_phases"], json!(["P4"]));
    let phases: Vec<&String> = run["phases"].as_object().unwrap().keys().collect();
    assert_eq!(phases, ["P1", "P2", "P3"], "no job for an empty phase");
}

// ---------------------------------------------------------------------------
// Retention

/// Rows of `table` whose job is `job_id`, read straight from the database.
pub(crate) async fn rows_of_job(app: &TestApp, table: &str, job_id: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM {table} WHERE job_id = $1");
    let id: uuid::Uuid = job_id.parse().unwrap();
    match &app.db {
        plangate::db::Database::Postgres(pool) => sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_one(pool)
            .await
            .unwrap(),
        plangate::db::Database::Sqlite(sqlite) => sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_one(&sqlite.pool)
            .await
            .unwrap(),
    }
}

/// Retention deletes a finished run with its jobs, and a finished standalone job,
/// each with its events and L0 records (on Postgres nothing cascades to those,
/// migration 0007), and leaves everything younger than the cutoff alone.
async fn retention_deletes_finished_runs_and_jobs_with_their_rows(backend: Backend) {
    let app = app(backend, |_| {}).await;
    let run = submit(&app, &json!({"plan": grid_plan(2, 2)})).await;
    let run_id = run["id"].as_str().unwrap().to_owned();
    wait_run(&app, &run_id, Duration::from_secs(60)).await;
    let phase_jobs: Vec<String> = run_jobs(&app, &run_id)
        .await
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(phase_jobs.len(), 2);
    let standalone = app
        .submit_refine_job(&crate::refine_jobs::body(&["P1-A1", "P1-A2"]))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.wait_job(&standalone).await;
    let all: Vec<&String> = phase_jobs.iter().chain([&standalone]).collect();
    for id in &all {
        assert!(rows_of_job(&app, "refine_job_events", id).await > 0);
        assert!(rows_of_job(&app, "refine_l0_runs", id).await > 0);
    }

    // A cutoff before they finished deletes nothing.
    let past = chrono::Utc::now() - chrono::Duration::hours(1);
    assert_eq!(
        app.db
            .delete_refine_jobs_finished_before(past)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        app.get(&format!("/v1/refine-runs/{run_id}"))
            .await
            .status()
            .as_u16(),
        200
    );
    assert!(rows_of_job(&app, "refine_job_events", &standalone).await > 0);

    // The counters (migration 0026) count the run and its two jobs with the
    // standalone one, and nothing once they are deleted.
    let succeeded = vec![(plangate::domain::job::JobStatus::Succeeded, 1)];
    assert_eq!(app.db.run_state_counts(None).await.unwrap(), succeeded);
    let jobs = plangate::db::dashboard::JobListFilter::default;
    let three = vec![(plangate::domain::job::JobState::Succeeded, 3)];
    assert_eq!(crate::refine_jobs::job_counts(&app, jobs()).await, three);
    let future = chrono::Utc::now() + chrono::Duration::hours(1);
    let deleted = app
        .db
        .delete_refine_jobs_finished_before(future)
        .await
        .unwrap();
    assert_eq!(deleted, 2, "the run and the standalone job");
    assert!(app.db.run_state_counts(None).await.unwrap().is_empty());
    assert!(
        crate::refine_jobs::job_counts(&app, jobs())
            .await
            .is_empty()
    );
    assert_eq!(
        app.get(&format!("/v1/refine-runs/{run_id}"))
            .await
            .status()
            .as_u16(),
        404
    );
    for id in &all {
        assert_eq!(
            app.get(&format!("/v1/refine-jobs/{id}"))
                .await
                .status()
                .as_u16(),
            404
        );
        assert_eq!(
            rows_of_job(&app, "refine_job_events", id).await,
            0,
            "events of {id}"
        );
        assert_eq!(
            rows_of_job(&app, "refine_l0_runs", id).await,
            0,
            "L0 records of {id}"
        );
    }
    app.shutdown().await;
}

both_backends!(
    twelve_phases_run_in_natural_order,
    duplicates_and_cross_phase_file_ownership,
    idempotent_create,
    unassigned_and_empty_phases_are_reported,
    failed_phase_keeps_its_assignments,
    every_phase_failing_fails_the_run,
    phases_run_in_parallel_up_to_the_worker_limit,
    cancelling_a_run_cancels_its_jobs,
    result_is_409_while_running,
    bad_input_creates_nothing,
    retention_deletes_finished_runs_and_jobs_with_their_rows,
);
