//! Private copies of inline task text (docs/jobs.md, "Task files"): a real server,
//! a real `command` L0 (`tests/fixtures/l0/l0.sh task-file`) that reports the
//! modes of the file it is pointed at.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use plangate::config::{ExecutorKind, ExecutorProfile};
use serde_json::{Value, json};

use crate::common::{Backend, TestApp, spawn_app_with};

fn l0(record: &Path, mode: &str) -> ExecutorProfile {
    ExecutorProfile {
        kind: ExecutorKind::Command,
        argv: vec![
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/l0/l0.sh")
                .display()
                .to_string(),
            "--record".into(),
            record.display().to_string(),
            mode.into(),
        ],
        base_url: None,
        model: None,
        api_key_env: None,
        timeout_secs: Some(60),
        max_output_bytes: None,
        env_allow: vec![],
        output: Default::default(),
    }
}

fn job_body(task_text: &str) -> Value {
    json!({
        "context": {"phase_id": "P1", "peer_summaries": [], "assignments": [{
            "id": "P1-A1", "phase_id": "P1", "name": "one", "goal": "g",
            "technical_approach": "t", "dependency_notes": "", "overlap_notes": "",
            "proposed_work_packages": [{"id_suffix": "WP1", "name": "w", "estimated_files": ["src/a.rs"]}]
        }]},
        "refined_plan": {"phases": [{"id": "P1", "name": "One", "goal": "g"}]},
        "task_text": task_text,
        "executor": "stat",
    })
}

async fn run_job(app: &TestApp, task_text: &str) -> Value {
    let response = app.post_json("/v1/refine-jobs", &job_body(task_text)).await;
    assert_eq!(response.status(), 202, "{:?}", response.text().await);
    let id = response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let job: Value = app
            .get(&format!("/v1/refine-jobs/{id}?wait=5"))
            .await
            .json()
            .await
            .unwrap();
        let status = job["status"].as_str().unwrap_or_default().to_owned();
        if ["succeeded", "failed", "cancelled"].contains(&status.as_str()) {
            return job;
        }
        assert!(Instant::now() < deadline, "job {id} still {status}");
    }
}

/// `(mode, uid, path)` of the task file and of its directory, as the L0 saw them.
fn seen_by_the_l0(record: &Path) -> Vec<(String, u32, PathBuf)> {
    std::fs::read_to_string(record.join("P1-A1.taskfile"))
        .expect("the L0 recorded its task file")
        .lines()
        .map(|line| {
            let mut parts = line.splitn(3, ' ');
            let mode = parts.next().unwrap().to_owned();
            let uid = parts.next().unwrap().parse().unwrap();
            (mode, uid, PathBuf::from(parts.next().unwrap()))
        })
        .collect()
}

/// The task text an L0 reads is in a file only the server's user can read, in a
/// directory only it can enter; the file is gone once the job ends.
async fn task_text_copies_are_private(backend: Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let record = tmp.path().join("record");
    std::fs::create_dir(&record).unwrap();
    let app = spawn_app_with(backend, |s| {
        s.executors.insert("stat".into(), l0(&record, "task-file"));
    })
    .await;
    let job = run_job(&app, "the secret task").await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(
        std::fs::read_to_string(record.join("P1-A1.task")).unwrap(),
        "the secret task"
    );
    let seen = seen_by_the_l0(&record);
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let (file_mode, file_uid, file) = &seen[0];
    let (dir_mode, dir_uid, dir) = &seen[1];
    assert_eq!(
        (file_mode.as_str(), *file_uid),
        ("600", me),
        "task file {}",
        file.display()
    );
    assert_eq!(
        (dir_mode.as_str(), *dir_uid),
        ("700", me),
        "task file directory {}",
        dir.display()
    );
    assert!(!file.exists(), "{} outlived its job", file.display());
    app.shutdown().await;
}

both_backends!(task_text_copies_are_private);
