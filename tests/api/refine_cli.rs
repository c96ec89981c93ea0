//! `plangate refine` and `plangate refine-run` as real child processes: the refine
//! engine in-process, no server, no database.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::l0_script;
use serde_json::{Value, json};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// The binary with an environment that cannot leak configuration into the test.
fn plangate() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_plangate"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PLANGATE_") || key == "DATABASE_URL" {
            command.env_remove(key);
        }
    }
    // The example context names its task file relative to its own directory.
    command.current_dir(examples());
    command
}

/// `plangate refine` on the example P2 context and plan into `run_dir`, with
/// `--config config` if given and `--executor executor`.
fn refine_p2(run_dir: &Path, config: Option<&Path>, executor: &str) -> Command {
    let mut command = plangate();
    command.args([
        "refine".as_ref(),
        examples().join("context_P2.json").as_os_str(),
        examples().join("refined_plan.json").as_os_str(),
        run_dir.as_os_str(),
    ]);
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    command.args(["--executor", executor]);
    command
}

fn run(command: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().expect("run plangate");
    (
        status.code().expect("exit code"),
        String::from_utf8(stdout).expect("utf-8 stdout"),
        String::from_utf8(stderr).expect("utf-8 stderr"),
    )
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

use crate::common::ids;

/// The last line must be `phase_refined_path = <abs path>`; returns the path.
fn refined_path(stdout: &str) -> PathBuf {
    let last = stdout.lines().last().expect("some output");
    let path = last
        .strip_prefix("phase_refined_path = ")
        .unwrap_or_else(|| panic!("last line is not phase_refined_path: {last:?}\n{stdout}"));
    let path = PathBuf::from(path);
    assert!(path.is_absolute(), "{}", path.display());
    path
}

fn config(dir: &Path, extra: &str) -> PathBuf {
    let l0 = l0_script();
    let text = format!(
        r#"{extra}
[executors.fake]
kind = "command"
argv = ["{l0}", "valid"]
timeout_secs = 30

[executors.failing]
kind = "command"
argv = ["{l0}", "fail"]
timeout_secs = 30

[executors.slow]
kind = "command"
argv = ["{l0}", "sleep", "1"]
timeout_secs = 30
"#
    );
    let path = dir.join("plangate.toml");
    std::fs::write(&path, text).unwrap();
    path
}

// ---------------------------------------------------------------------------
// plangate refine

#[test]
fn refine_with_the_builtin_executor() {
    let run_dir = tempfile::tempdir().unwrap();
    let context = examples().join("context_P2.json");
    let before = std::fs::read(&context).unwrap();
    let (code, stdout, stderr) = run(plangate().args([
        "refine".as_ref(),
        context.as_os_str(),
        examples().join("refined_plan.json").as_os_str(),
        run_dir.path().as_os_str(),
    ]));
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");

    // The WP ownership conflicts of the example, verbatim (docs/spec/refine.md §4).
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines.contains(&"WP CONFLICT: P2-A1 vs P2-A10 — src/auth/cache.py assigned to P2-A1"),
        "{stdout}"
    );
    assert!(
        lines.contains(&"WP CONFLICT: P2-A1 vs P2-A2 — src/http/client.py assigned to P2-A1"),
        "{stdout}"
    );

    let path = refined_path(&stdout);
    let expected = run_dir
        .path()
        .canonicalize()
        .unwrap()
        .join("refine_contexts/P2_result.json");
    assert_eq!(path, expected);
    let result = read_json(&path);
    assert_eq!(result["schema_version"], 1);
    assert_eq!(
        ids(&result["assignments"]),
        ["P2-A1", "P2-A2", "P2-A10"],
        "input order"
    );
    assert_eq!(
        result.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["schema_version", "assignments"]
    );
    // P2-A10 lost the WP that shares src/auth/cache.py with P2-A1.
    let a10 = &result["assignments"][2];
    let wps = a10["proposed_work_packages"].as_array().unwrap();
    assert!(
        wps.iter().all(|wp| !wp["estimated_files"]
            .as_array()
            .unwrap()
            .contains(&json!("src/auth/cache.py"))),
        "{a10}"
    );
    // The builtin reviewer: P2-A2 mentions P2-A1 without depending on it.
    let a2 = &result["assignments"][1];
    assert!(
        a2["dependency_notes"].as_str().unwrap().contains("P2-A1"),
        "{a2}"
    );
    assert_eq!(
        a2["proposed_work_packages"],
        json!([]),
        "its WP lost src/http/client.py"
    );
    // One progress line per L0 on stderr.
    let progress = stderr.lines().filter(|l| l.contains("] L0 P2-A")).count();
    assert_eq!(progress, 3, "{stderr}");
    assert_eq!(
        std::fs::read(&context).unwrap(),
        before,
        "the context file is not touched"
    );
}

#[test]
fn refine_with_a_command_executor_from_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let run_dir = dir.path().join("run");
    let (code, stdout, stderr) = run(&mut refine_p2(&run_dir, Some(&cfg), "fake"));
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    for id in ["P2-A1", "P2-A2", "P2-A10"] {
        let progress: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains(&format!("] L0 {id} valid in ")))
            .collect();
        assert_eq!(progress.len(), 1, "one progress line for {id}:\n{stderr}");
        assert!(progress[0].starts_with('['), "{}", progress[0]);
    }
    assert!(
        stderr.lines().any(|l| l.starts_with("[3/3] L0 ")),
        "{stderr}"
    );
    assert!(stdout.contains("WP CONFLICT: P2-A1 vs P2-A10"), "{stdout}");
    let result = read_json(&refined_path(&stdout));
    // l0.sh's answer adds a dependency correction to every assignment.
    for a in result["assignments"].as_array().unwrap() {
        let notes = a["dependency_notes"].as_str().unwrap();
        assert!(notes.contains('X'), "{a}");
    }

    // Every L0 failing: CRITICAL lines on stdout, the job still finishes.
    let run_dir = dir.path().join("run-failing");
    let (code, stdout, stderr) = run(&mut refine_p2(&run_dir, Some(&cfg), "failing"));
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    for id in ["P2-A1", "P2-A2", "P2-A10"] {
        let line = format!("CRITICAL: L0 for {id} failed — proceeding with N-1 suggestions");
        assert!(stdout.lines().any(|l| l == line), "{line}\n{stdout}");
        assert!(
            stderr
                .lines()
                .any(|l| l.contains(&format!("] L0 {id} failed in "))),
            "{stderr}"
        );
    }
    let result = read_json(&refined_path(&stdout));
    assert_eq!(ids(&result["assignments"]), ["P2-A1", "P2-A2", "P2-A10"]);
}

/// Log and progress lines are printed while the L0s run, not at the end.
#[test]
fn refine_prints_as_it_goes() {
    let dir = tempfile::tempdir().unwrap();
    // One L0 at a time: three batches of one 1-second L0.
    let cfg = config(dir.path(), "l0_concurrency = 1");
    let mut child = refine_p2(&dir.path().join("run"), Some(&cfg), "slow")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let (tx, rx) = mpsc::channel::<(bool, String, Duration)>();
    let readers: Vec<_> = [
        (
            true,
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        ),
        (false, Box::new(child.stderr.take().unwrap())),
    ]
    .into_iter()
    .map(|(is_stdout, pipe)| {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let _ = tx.send((is_stdout, line.unwrap(), started.elapsed()));
            }
        })
    })
    .collect();
    drop(tx);
    let status = child.wait().unwrap();
    let ended = started.elapsed();
    for r in readers {
        r.join().unwrap();
    }
    let lines: Vec<(bool, String, Duration)> = rx.iter().collect();
    assert!(status.success(), "{lines:?}");
    let first_progress = lines
        .iter()
        .find(|(out, l, _)| !out && l.starts_with("[1/3] L0 "))
        .expect("a first progress line");
    assert!(
        ended.saturating_sub(first_progress.2) >= Duration::from_millis(1500),
        "the first progress line came at {:?}, the process ended at {ended:?}",
        first_progress.2
    );
    let next_batch: Vec<&Duration> = lines
        .iter()
        .filter(|(out, l, _)| *out && l == "--- next batch ---")
        .map(|(_, _, at)| at)
        .collect();
    assert_eq!(next_batch.len(), 2, "{lines:?}");
    assert!(
        ended.saturating_sub(*next_batch[0]) >= Duration::from_millis(1500),
        "log lines are printed as they happen: {lines:?}"
    );
    assert!(lines.last().is_some());
    let last_stdout = lines.iter().rev().find(|(out, _, _)| *out).unwrap();
    assert!(last_stdout.1.starts_with("phase_refined_path = "));
}

#[test]
fn refine_rejects_a_bad_context() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("malformed.json", r#"{"phase_id": "P2", "assignments": ["#),
        ("no_assignments.json", r#"{"phase_id": "P2"}"#),
        ("empty.json", r#"{"phase_id": "P2", "assignments": []}"#),
        (
            "dup.json",
            r#"{"phase_id": "P2", "assignments": [{"id": "A"}, {"id": "A"}]}"#,
        ),
        (
            "bad_id.json",
            r#"{"phase_id": "P2", "assignments": [{"id": "../x"}]}"#,
        ),
    ];
    for (name, text) in cases {
        let context = dir.path().join(name);
        std::fs::write(&context, text).unwrap();
        let run_dir = dir.path().join(format!("run-{name}"));
        let (code, stdout, stderr) = run(plangate().args([
            "refine".as_ref(),
            context.as_os_str(),
            examples().join("refined_plan.json").as_os_str(),
            run_dir.as_os_str(),
        ]));
        assert_eq!(code, 2, "{name}: stdout {stdout} stderr {stderr}");
        let prefix = format!("FATAL: failed to parse {}: ", context.display());
        assert!(stderr.starts_with(&prefix), "{name}: {stderr}");
        assert!(!stdout.contains("phase_refined_path"), "{stdout}");
        assert!(!run_dir.exists(), "{name}: nothing written");
    }
    // A missing file is a usage error too.
    let (code, _, stderr) = run(plangate().args([
        "refine".as_ref(),
        dir.path().join("missing.json").as_os_str(),
        examples().join("refined_plan.json").as_os_str(),
        dir.path().join("run").as_os_str(),
    ]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("missing.json"), "{stderr}");
}

#[test]
fn refine_rejects_an_unknown_executor() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let run_dir = dir.path().join("run");
    for config in [None, Some(cfg.as_path())] {
        let (code, stdout, stderr) = run(&mut refine_p2(&run_dir, config, "nope"));
        assert_eq!(code, 2, "stdout {stdout} stderr {stderr}");
        assert!(stderr.contains("unknown executor \"nope\""), "{stderr}");
        assert!(!run_dir.exists(), "nothing written");
    }
}

// ---------------------------------------------------------------------------
// plangate refine-run

/// 12 phases (listed lexicographically) × 3 assignments; P2-A1 and P10-A1 share
/// src/shared.rs.
fn twelve_phase_plan() -> Value {
    let mut phase_ids: Vec<String> = (1..=12).map(|p| format!("P{p}")).collect();
    phase_ids.sort();
    let phases: Vec<Value> = phase_ids
        .iter()
        .map(|p| json!({"id": p, "name": format!("Phase {p}"), "goal": "g", "scope": [], "ordering": 1}))
        .collect();
    let mut assignments = Vec::new();
    for p in &phase_ids {
        for a in [10, 2, 1] {
            let id = format!("{p}-A{a}");
            let mut files = vec![format!("src/{}/a{a}.rs", p.to_lowercase())];
            if a == 1 && (p == "P2" || p == "P10") {
                files.push("src/shared.rs".into());
            }
            assignments.push(json!({
                "id": id,
                "phase_id": p,
                "name": format!("Name {id}"),
                "goal": format!("Goal {id}."),
                "technical_approach": "t",
                "proposed_work_packages": [
                    {"id_suffix": "WP1", "name": "Work", "estimated_files": files}
                ],
                "dependency_notes": "",
                "overlap_notes": ""
            }));
        }
    }
    json!({"task": "Do the twelve phases.", "phases": phases, "assignments": assignments})
}

#[test]
fn refine_run_writes_contexts_results_and_the_merge() {
    let dir = tempfile::tempdir().unwrap();
    let plan_file = dir.path().join("plan.json");
    std::fs::write(&plan_file, twelve_phase_plan().to_string()).unwrap();
    let run_dir = dir.path().join("run");
    let (code, stdout, stderr) = run(plangate().args([
        "refine-run".as_ref(),
        plan_file.as_os_str(),
        run_dir.as_os_str(),
    ]));
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");

    let contexts = run_dir.join("refine_contexts");
    for p in 1..=12 {
        let context = read_json(&contexts.join(format!("context_P{p}.json")));
        assert_eq!(context["phase_id"], format!("P{p}"));
        assert_eq!(
            ids(&context["assignments"]),
            [format!("P{p}-A10"), format!("P{p}-A2"), format!("P{p}-A1")],
            "own assignments in input order"
        );
        let peers = context["peer_summaries"].as_array().unwrap();
        assert_eq!(peers.len(), 33, "every assignment of every other phase");
        assert!(peers.iter().all(|peer| {
            !peer["id"].as_str().unwrap().starts_with(&format!("P{p}-"))
                && peer.as_object().unwrap().len() == 3
        }));
        let task_file = context["task_file_path"].as_str().expect("task file");
        assert_eq!(
            std::fs::read_to_string(task_file).unwrap(),
            "Do the twelve phases."
        );

        let result = read_json(&contexts.join(format!("P{p}_result.json")));
        assert_eq!(result["schema_version"], 1);
        assert_eq!(result["assignments"].as_array().unwrap().len(), 3);
        // One progress line per phase.
        let done: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with(&format!("phase P{p} done (")))
            .collect();
        assert_eq!(done.len(), 1, "{stderr}");
    }
    for n in 1..=12 {
        assert!(
            stderr.contains(&format!(" ({n}/12 phases)")),
            "progress across phases: {stderr}"
        );
    }
    // Per-L0 progress, prefixed by its phase.
    assert!(
        stderr.lines().any(|l| l.starts_with("[P10] [3/3] L0 ")),
        "{stderr}"
    );

    let merged = read_json(&run_dir.join("refined_assignments.json"));
    assert_eq!(merged["schema_version"], 1);
    let expected: Vec<String> = (1..=12)
        .flat_map(|p| [10, 2, 1].map(|a| format!("P{p}-A{a}")))
        .collect();
    assert_eq!(ids(&merged["assignments"]), expected, "natural phase order");
    assert_eq!(merged["conflict_count"], 1);
    let p10 = merged["assignments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "P10-A1")
        .unwrap();
    assert_eq!(
        p10["proposed_work_packages"][0]["estimated_files"],
        json!(["src/p10/a1.rs"])
    );
    assert!(
        stdout
            .lines()
            .any(|l| l == "FILE CONFLICT: src/shared.rs kept by P2-A1 — stripped from P10-A1"),
        "{stdout}"
    );
    let abs = run_dir
        .canonicalize()
        .unwrap()
        .join("refined_assignments.json");
    assert_eq!(
        stdout.lines().last().unwrap(),
        format!("refined_assignments_path = {}", abs.display())
    );
}

#[test]
fn refine_run_rejects_a_bad_plan() {
    let dir = tempfile::tempdir().unwrap();
    let mut no_assignments = twelve_phase_plan();
    no_assignments
        .as_object_mut()
        .unwrap()
        .remove("assignments");
    let mut dup_phase = twelve_phase_plan();
    dup_phase["phases"][1]["id"] = dup_phase["phases"][0]["id"].clone();
    let cases = [
        ("malformed.json", "{\"phases\": [".to_owned()),
        ("no_assignments.json", no_assignments.to_string()),
        ("dup_phase.json", dup_phase.to_string()),
    ];
    for (name, text) in cases {
        let plan_file = dir.path().join(name);
        std::fs::write(&plan_file, text).unwrap();
        let run_dir = dir.path().join(format!("run-{name}"));
        let (code, _, stderr) = run(plangate().args([
            "refine-run".as_ref(),
            plan_file.as_os_str(),
            run_dir.as_os_str(),
        ]));
        assert_eq!(code, 2, "{name}: {stderr}");
        assert!(
            stderr.starts_with(&format!("FATAL: failed to parse {}: ", plan_file.display())),
            "{name}: {stderr}"
        );
        assert!(!run_dir.exists(), "{name}: nothing written");
    }
}
