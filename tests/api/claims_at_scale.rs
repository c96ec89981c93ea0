//! Claims at scale, tested the way they break (docs/architecture.md, "Claims at
//! scale"): 64 claimers over a 10,000-task list, two replicas of the real `plangate`
//! binary on Postgres (one SIGKILLed mid-run), one on SQLite (SIGKILLed and
//! restarted on its file), some claimers dropping their leases and some completing
//! after their lease ran out. Every task is completed exactly once, none is lost,
//! and every late completion is refused with 409.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::process::Child;
use tokio::sync::RwLock;

use crate::common::process::plangate_command;
use crate::common::{Backend, FreshDatabase};

const TASKS: usize = 10_000;
const WAVES: usize = 10;
const CLAIMERS: usize = 64;
/// The kill comes once this many tasks are done.
const KILL_AFTER: usize = TASKS / 3;
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// For the whole run: a guard against a hang, not a speed check (the speed is
/// `benches/claims_load.rs`'s figure). A debug build on SQLite takes about 250 s
/// on a quiet 2-core machine, and CI builds the release binary and the image
/// beside it.
const RUN_TIMEOUT: Duration = Duration::from_secs(900);

/// A `plangate serve` process logging to a file in `dir`.
struct Server {
    child: Option<Child>,
    base: String,
    log: std::path::PathBuf,
}

impl Server {
    async fn start(name: &str, url: &str, dir: &std::path::Path) -> Server {
        let log = dir.join(format!(
            "server-{name}-{}.log",
            uuid::Uuid::new_v4().simple()
        ));
        let child = plangate_command(url, &log)
            .env("PLANGATE_BODY_LIMIT_BYTES", "67108864")
            .spawn()
            .expect("spawn plangate");
        let mut server = Server {
            child: Some(child),
            base: String::new(),
            log,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        while server.base.is_empty() {
            for line in std::fs::read_to_string(&server.log)
                .unwrap_or_default()
                .lines()
            {
                if let Ok(v) = serde_json::from_str::<Value>(line)
                    && v["message"] == "plangate listening"
                {
                    server.base = format!("http://{}", v["address"].as_str().unwrap());
                }
            }
            assert!(
                Instant::now() < deadline,
                "server {name} did not start:\n{}",
                std::fs::read_to_string(&server.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let client = reqwest::Client::new();
        while !client
            .get(format!("{}/readyz", server.base))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            assert!(Instant::now() < deadline, "server {name} never ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server
    }

    /// SIGKILL, then reap.
    async fn sigkill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.start_kill().expect("SIGKILL");
        child.wait().await.expect("reap");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

/// 10 waves; each task after the first depends on one task of the wave before.
fn list_body() -> Value {
    let per = TASKS / WAVES;
    let tasks: Vec<Value> = (0..TASKS)
        .map(|p| {
            let wave = p / per + 1;
            let deps: Vec<String> = if wave == 1 {
                vec![]
            } else {
                vec![format!("t{}", p - per)]
            };
            json!({
                "task_id": format!("t{p}"), "assigned_persona": if p % 2 == 0 { "dev" } else { "qa" },
                "parallel_group": wave, "depends_on": deps, "reads": [],
                "writes": [format!("src/t{p}.rs")], "description": format!("do {p}"),
            })
        })
        .collect();
    json!({"project_id": "scale", "created_by": "pm", "tasks": tasks})
}

/// What one claimer did.
#[derive(Default)]
struct Tally {
    completed: Vec<String>,
    dropped: usize,
    late_refused: usize,
}

/// The bases claimers may use; a killed replica's is replaced.
type Bases = Arc<RwLock<Vec<String>>>;

async fn send(
    client: &reqwest::Client,
    bases: &Bases,
    me: usize,
    build: impl Fn(&reqwest::Client, &str) -> reqwest::RequestBuilder,
) -> (u16, Value) {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let base = {
            let bases = bases.read().await;
            bases[me % bases.len()].clone()
        };
        let last = match build(client, &base).send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                let body = response.json().await.unwrap_or(Value::Null);
                if status != 503 {
                    return (status, body);
                }
                body.to_string()
            }
            // The replica died under the request (or is restarting): ask again
            // (docs/api.md: every write here is safe to repeat).
            Err(e) => e.to_string(),
        };
        assert!(
            Instant::now() < deadline,
            "no replica answered for a minute; last: {last}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn claimer(me: usize, list_id: String, bases: Bases, done_count: Arc<AtomicUsize>) -> Tally {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let holder = format!("agent-{me}");
    let mut tally = Tally::default();
    let started = Instant::now();
    for round in 0usize.. {
        assert!(
            started.elapsed() < RUN_TIMEOUT,
            "{holder}: the list never finished"
        );
        // Claimers 0-3 hold short leases and sometimes come back too late.
        let lease_s = if me < 4 { 1 } else { 5 };
        let (status, answer) = send(&client, &bases, me, |c, base| {
            c.post(format!("{base}/v1/task-lists/{list_id}/claim"))
                .json(&json!({"holder": holder, "lease_s": lease_s}))
        })
        .await;
        assert_eq!(status, 200, "{holder}: claim: {answer}");
        match answer["next"].as_str().unwrap() {
            "done" => break,
            "wait" => {
                // A claim that finds nothing is cheap (counters, no list read):
                // ask again soon rather than long-poll `ready`, which reads the
                // whole list each time it looks.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            "dispatch" => {}
            other => panic!("{holder}: next {other}: {answer}"),
        }
        let id = answer["task"]["id"].as_str().unwrap().to_owned();
        if me < 4 && round % 25 == 7 {
            // Dies without a word: the lease runs out and the task goes back.
            tally.dropped += 1;
            continue;
        }
        let late = me < 4 && round % 25 == 19;
        if late {
            tokio::time::sleep(Duration::from_millis(2100)).await;
        }
        let (status, body) = send(&client, &bases, me, |c, base| {
            c.patch(format!("{base}/v1/tasks/{id}"))
                .json(&json!({"status": "done", "holder": holder}))
        })
        .await;
        match (status, late) {
            (200, false) => {
                tally.completed.push(id);
                done_count.fetch_add(1, Ordering::Relaxed);
            }
            (409, true) => tally.late_refused += 1,
            // A completion sent when its lease had just run out under load.
            (409, false) => tally.late_refused += 1,
            (s, _) => panic!("{holder}: PATCH {s} (late: {late}): {body}"),
        }
    }
    tally
}

async fn sixty_four_claimers_survive_a_kill(backend: Backend) {
    let db = FreshDatabase::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let mut a = Server::start("A", &db.url, dir.path()).await;
    // SQLite is single-node (docs/deployment.md): a second replica only on Postgres.
    let b = match backend {
        Backend::Postgres => Some(Server::start("B", &db.url, dir.path()).await),
        Backend::Sqlite => None,
    };
    let client = reqwest::Client::new();
    let created = client
        .post(format!("{}/v1/task-lists", a.base))
        .json(&list_body())
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let list: Value = created.json().await.unwrap();
    let list_id = list["id"].as_str().unwrap().to_owned();

    let mut bases = vec![a.base.clone()];
    bases.extend(b.as_ref().map(|b| b.base.clone()));
    let bases: Bases = Arc::new(RwLock::new(bases));
    let done_count = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let agents: Vec<_> = (0..CLAIMERS)
        .map(|me| {
            tokio::spawn(claimer(
                me,
                list_id.clone(),
                bases.clone(),
                done_count.clone(),
            ))
        })
        .collect();

    while done_count.load(Ordering::Relaxed) < KILL_AFTER {
        assert!(started.elapsed() < RUN_TIMEOUT, "never reached the kill");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.sigkill().await;
    let killed_at = started.elapsed();
    eprintln!(
        "{backend:?}: replica A killed after {killed_at:?}, {} tasks done",
        done_count.load(Ordering::Relaxed)
    );
    let survivor = match b {
        // The claimers of A move to B.
        Some(b) => {
            *bases.write().await = vec![b.base.clone()];
            b
        }
        // The same file, a new process.
        None => {
            let restarted = Server::start("A2", &db.url, dir.path()).await;
            *bases.write().await = vec![restarted.base.clone()];
            restarted
        }
    };

    let mut tally = Tally::default();
    for agent in agents {
        let t = agent.await.unwrap();
        tally.completed.extend(t.completed);
        tally.dropped += t.dropped;
        tally.late_refused += t.late_refused;
    }
    let elapsed = started.elapsed();

    // Every task completed once by a 200, none twice, none lost.
    let distinct: HashSet<&String> = tally.completed.iter().collect();
    assert_eq!(
        distinct.len(),
        tally.completed.len(),
        "a task completed twice"
    );
    assert_eq!(distinct.len(), TASKS, "tasks lost");
    assert!(tally.dropped > 0 && tally.late_refused > 0);
    // The history agrees: one `done` per task.
    let history: Vec<(i64, i64)> = match backend {
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
            sqlx::query_as(
                "SELECT COUNT(DISTINCT task_id), COUNT(*) FROM task_events WHERE to_status = 'done'",
            )
            .fetch_all(&pool)
            .await
            .unwrap()
        }
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&db.url).await.unwrap();
            sqlx::query_as(
                "SELECT COUNT(DISTINCT task_id), COUNT(*) FROM task_events WHERE to_status = 'done'",
            )
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(history, vec![(TASKS as i64, TASKS as i64)]);
    let ready: Value = client
        .get(format!("{}/v1/task-lists/{list_id}/ready", survivor.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["next"], "done", "{ready}");
    assert_eq!(ready["remaining"]["done"], TASKS, "{ready}");
    // Every wave's unfinished count came down to 0 (db::readiness), through
    // claims on two replicas, the kill and the lapsed leases.
    let unfinished: i64 = {
        let sql = "SELECT COALESCE(SUM(ABS(unfinished)), 0) FROM task_wave_counts";
        match backend {
            Backend::Postgres => {
                let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
                sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap()
            }
            Backend::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&db.url).await.unwrap();
                sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap()
            }
        }
    };
    assert_eq!(
        unfinished, 0,
        "task_wave_counts still counts unfinished tasks"
    );
    eprintln!(
        "{backend:?}: {TASKS} tasks, {CLAIMERS} claimers, killed at {killed_at:?}, {} dropped, \
         {} late completions refused, {elapsed:?} ({:.0} tasks/s)",
        tally.dropped,
        tally.late_refused,
        TASKS as f64 / elapsed.as_secs_f64()
    );
}

both_backends!(sixty_four_claimers_survive_a_kill);
