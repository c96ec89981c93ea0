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
        argv: vec![
            crate::common::l0_script(),
            "--record".into(),
            record.display().to_string(),
            mode.into(),
        ],
        timeout_secs: Some(60),
        ..crate::common::executor_profile(ExecutorKind::Command)
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
    app.wait_job(&id).await
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

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// A task directory of the server's user with group and other bits is made 0700
/// at start, and the copies go to this server's own subdirectory in it.
async fn own_task_dir_open_to_others_is_made_private(backend: Backend) {
    use std::os::unix::fs::PermissionsExt as _;
    let tmp = tempfile::tempdir().unwrap();
    let record = tmp.path().join("record");
    std::fs::create_dir(&record).unwrap();
    let tasks = tmp.path().join("tasks");
    std::fs::create_dir(&tasks).unwrap();
    std::fs::set_permissions(&tasks, std::fs::Permissions::from_mode(0o777)).unwrap();
    let app = spawn_app_with(backend, |s| {
        s.task_dir = tasks.clone();
        s.executors.insert("stat".into(), l0(&record, "task-file"));
    })
    .await;
    // The listener is bound before the server starts: an answer means it started.
    assert_eq!(app.get("/readyz").await.status(), 200);
    assert_eq!(mode_of(&tasks), 0o700, "{}", tasks.display());
    let job = run_job(&app, "the task").await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let seen = seen_by_the_l0(&record);
    assert_eq!(seen[0].0, "600");
    assert_eq!(seen[1].0, "700");
    assert_eq!(
        seen[1].2.parent(),
        Some(tasks.as_path()),
        "the copy is in this server's subdirectory"
    );
    app.shutdown().await;
    // A clean stop leaves nothing behind.
    let left: Vec<_> = std::fs::read_dir(&tasks)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `plangate serve` with `PLANGATE_TASK_DIR` naming a directory of another user, a
/// symlink or a file stops at start, naming the directory, what is wrong and what
/// to do.
async fn task_dir_not_ours_stops_the_server(backend: Backend) {
    let db = crate::common::FreshDatabase::new(backend).await;
    let tmp = tempfile::tempdir().unwrap();
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    let nobody = 65534;
    std::os::unix::fs::chown(&foreign, Some(nobody), Some(nobody)).unwrap();
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let cases = [
        (
            &foreign,
            format!("is owned by uid {nobody}, not by this server's user"),
        ),
        (&link, format!("is a symlink (to {})", elsewhere.display())),
        (&file, "is not a directory".to_owned()),
    ];
    for (dir, why) in cases {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_plangate"))
            .arg("serve")
            .env_clear()
            .env("DATABASE_URL", &db.url)
            .env("PLANGATE_BIND", "127.0.0.1:0")
            .env("PLANGATE_LOG_FORMAT", "json")
            .env("PLANGATE_TASK_DIR", dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "plangate serve with PLANGATE_TASK_DIR={} did not stop",
                    dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.code(), Some(1), "{stderr}");
        let shown = dir.display().to_string();
        assert!(
            stderr.contains("PLANGATE_TASK_DIR")
                && stderr.contains(&shown)
                && stderr.contains(&why)
                && stderr.contains("set PLANGATE_TASK_DIR to a directory of this user"),
            "{stderr}"
        );
    }
    // Nothing was written through the symlink.
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

/// At start a server removes what SIGKILLed servers left in the shared task
/// directory (a subdirectory whose lock nobody holds, one without a lock, a stray
/// file) and keeps what a living server holds; two servers share the directory.
async fn task_files_of_dead_servers_are_swept_and_live_ones_kept(backend: Backend) {
    use std::os::fd::AsRawFd as _;
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    std::fs::create_dir(&tasks).unwrap();
    let server_dir = |name: &str| {
        let dir = tasks.join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("job.md"), "left").unwrap();
        dir
    };
    let dead = server_dir("11111111-1111-4111-8111-111111111111");
    std::fs::write(dead.with_extension("lock"), "").unwrap();
    let lockless = server_dir("22222222-2222-4222-8222-222222222222");
    let stray = tasks.join("stray.md");
    std::fs::write(&stray, "left").unwrap();
    // A living server: this test holds its lock.
    let live = server_dir("33333333-3333-4333-8333-333333333333");
    let live_lock = std::fs::File::create(live.with_extension("lock")).unwrap();
    // SAFETY: flock on a file this test owns.
    let locked = unsafe { libc::flock(live_lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(locked, 0);

    let first = spawn_app_with(backend, |s| s.task_dir = tasks.clone()).await;
    // The listener is bound before the server starts: an answer means it started.
    assert_eq!(first.get("/readyz").await.status(), 200);
    assert!(!dead.exists() && !dead.with_extension("lock").exists());
    assert!(!lockless.exists());
    assert!(!stray.exists());
    assert!(live.join("job.md").exists() && live.with_extension("lock").exists());
    let mine = |tasks: &Path| -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(tasks)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir() && *p != live)
            .collect();
        dirs.sort();
        dirs
    };
    let first_dirs = mine(&tasks);
    assert_eq!(first_dirs.len(), 1, "{first_dirs:?}");
    assert_eq!(mode_of(&first_dirs[0]), 0o700);

    // A second server on the same directory keeps the first one's.
    let second_db = crate::common::FreshDatabase::new(backend).await;
    let second =
        crate::common::spawn_app_on(second_db, backend, |s| s.task_dir = tasks.clone()).await;
    assert_eq!(second.get("/readyz").await.status(), 200);
    let both = mine(&tasks);
    assert_eq!(both.len(), 2, "{both:?}");
    assert!(live.join("job.md").exists());
    second.shutdown().await;
    first.shutdown().await;
    assert_eq!(mine(&tasks), Vec::<PathBuf>::new());
    drop(live_lock);
}

both_backends!(
    own_task_dir_open_to_others_is_made_private,
    task_dir_not_ours_stops_the_server,
    task_files_of_dead_servers_are_swept_and_live_ones_kept,
);
