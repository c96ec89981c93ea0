//! Crash tests of the durable refine jobs (Postgres only, but for the L0 process
//! tests at the end, which run on both back-ends; docs/spec/jobs.md "Queue design").
//!
//! These are multi-process tests: every server is the real `plangate` binary, started
//! on a loopback port of its own (`PLANGATE_BIND=127.0.0.1:0`; the address is read
//! from its `plangate listening` log line, so no port can be raced for) against one
//! fresh Postgres database, with short leases (3 s lease, 1 s heartbeat, 1 s reaper).
//! L0s are `tests/fixtures/l0/l0.sh --record DIR …`, which appends `start`/`end`
//! lines to `DIR/events`; assignment ids are unique per test so the lines can be
//! counted per L0. Servers are SIGKILLed / SIGTERMed on purpose and killed on drop.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::process::ServerProcess;
use crate::common::{Backend, FreshDatabase};
use serde_json::{Value, json};
use sqlx::PgPool;

/// Long enough for a debug binary on a loaded 2-core machine.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const FINISH_TIMEOUT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------
// The fixture: a temp dir with the config file and the L0 record directory.

struct Fixture {
    dir: tempfile::TempDir,
    record: PathBuf,
    config: PathBuf,
}

impl Fixture {
    /// A config whose default executor `fixture` runs `l0.sh --record DIR <mode…>`.
    fn new(mode: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let record = dir.path().join("record");
        std::fs::create_dir(&record).expect("record dir");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/l0/l0.sh");
        let mut argv = vec![
            script.display().to_string(),
            "--record".to_owned(),
            record.display().to_string(),
        ];
        argv.extend(mode.iter().map(|s| (*s).to_owned()));
        let argv: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
        let config = dir.path().join("plangate.toml");
        std::fs::write(
            &config,
            format!(
                "default_executor = \"fixture\"\n\n[executors.fixture]\nkind = \"command\"\n\
                 argv = [{}]\ntimeout_secs = 120\n",
                argv.join(", ")
            ),
        )
        .expect("write config");
        Fixture {
            dir,
            record,
            config,
        }
    }

    /// The fixture's `start`/`end` lines, in file order.
    fn events(&self) -> Vec<L0Event> {
        let text = std::fs::read_to_string(self.record.join("events")).unwrap_or_default();
        text.lines()
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                let kind = parts.next()?;
                let id = parts.next()?.to_owned();
                let ns: u128 = parts.next()?.parse().ok()?;
                Some(L0Event {
                    start: kind == "start",
                    id,
                    ns,
                })
            })
            .collect()
    }

    /// The pid `l0.sh` recorded for an assignment (its latest run).
    fn l0_pid(&self, assignment_id: &str) -> Option<i32> {
        std::fs::read_to_string(self.record.join(format!("{assignment_id}.l0pid")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

#[derive(Debug, Clone)]
struct L0Event {
    start: bool,
    id: String,
    ns: u128,
}

/// `(starts, ends)` per assignment id, optionally only those before / after `ns`.
fn tally(events: &[L0Event], keep: impl Fn(u128) -> bool) -> HashMap<String, (u32, u32)> {
    let mut map: HashMap<String, (u32, u32)> = HashMap::new();
    for e in events.iter().filter(|e| keep(e.ns)) {
        let entry = map.entry(e.id.clone()).or_default();
        if e.start {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }
    map
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos()
}

/// A process is gone once it no longer exists or is a zombie nobody reaped yet.
fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            // `pid (comm) S …`: the state follows the last `)`.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or("?");
            state != "Z" && state != "X"
        }
    }
}

// ---------------------------------------------------------------------------
// A server process.

/// A server process and its job workers' id.
struct Server {
    process: ServerProcess,
    worker_id: String,
}

impl Server {
    async fn start(name: &str, db_url: &str, fixture: &Fixture, extra: &[(&str, &str)]) -> Server {
        let log = fixture.dir.path().join(format!("server-{name}.log"));
        let mut process = ServerProcess::start(name, db_url, &fixture.config, log, extra).await;
        let workers = process.wait_for_log("job workers starting").await;
        let worker_id = workers["worker_id"].as_str().expect("worker_id").to_owned();
        let server = Server { process, worker_id };
        server.wait_ready().await;
        server
    }

    async fn wait_ready(&self) {
        let client = client();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(r) = client.get(format!("{}/readyz", self.base)).send().await
                && r.status() == 200
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "server {} never ready",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl std::ops::Deref for Server {
    type Target = ServerProcess;

    fn deref(&self) -> &ServerProcess {
        &self.process
    }
}

impl std::ops::DerefMut for Server {
    fn deref_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

async fn get_json(base: &str, path: &str) -> Value {
    let response = client()
        .get(format!("{base}{path}"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert_eq!(response.status(), 200, "GET {path}");
    response.json().await.expect("json body")
}

async fn post_json(base: &str, path: &str, body: &Value) -> Value {
    let response = client()
        .post(format!("{base}{path}"))
        .json(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    let status = response.status();
    let body: Value = response.json().await.expect("json body");
    assert_eq!(status, 202, "POST {path}: {body}");
    body
}

/// Polls `check` every 100 ms until it returns `Some`, or panics after `limit`.
async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------
// Requests.

fn assignment(id: &str, phase: &str, file: &str) -> Value {
    json!({
        "id": id,
        "phase_id": phase,
        "name": format!("assignment {id}"),
        "goal": "a goal",
        "technical_approach": "an approach",
        "proposed_work_packages": [
            {"id_suffix": "WP1", "name": "wp", "estimated_files": [file]}
        ],
        "dependency_notes": "",
        "overlap_notes": ""
    })
}

/// One phase job with `n` assignments `J{job}-A1..An` (ids unique per test).
fn job_body(job: usize, n: usize) -> Value {
    let assignments: Vec<Value> = (1..=n)
        .map(|i| {
            assignment(
                &format!("J{job}-A{i}"),
                "P1",
                &format!("src/j{job}_a{i}.rs"),
            )
        })
        .collect();
    json!({
        "context": {"phase_id": "P1", "assignments": assignments, "peer_summaries": []},
        "refined_plan": {"phases": [{"id": "P1", "name": "phase one", "goal": "g"}]},
        "task_text": "crash test task"
    })
}

async fn submit_jobs(server: &Server, first: usize, count: usize, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for job in first..first + count {
        let created = post_json(&server.base, "/v1/refine-jobs", &job_body(job, n)).await;
        ids.push(created["id"].as_str().expect("job id").to_owned());
    }
    ids
}

/// A plan of `phases` phases with `per_phase` assignments each (`R{run}-P{p}-A{i}`).
fn run_body(run: usize, phases: usize, per_phase: usize) -> Value {
    let phase_list: Vec<Value> = (1..=phases)
        .map(|p| json!({"id": format!("P{p}"), "name": format!("phase {p}"), "goal": "g"}))
        .collect();
    let mut assignments = Vec::new();
    for p in 1..=phases {
        for i in 1..=per_phase {
            assignments.push(assignment(
                &format!("R{run}-P{p}-A{i}"),
                &format!("P{p}"),
                &format!("src/r{run}/p{p}_a{i}.rs"),
            ));
        }
    }
    json!({
        "plan": {"task": "merge race task", "phases": phase_list, "assignments": assignments}
    })
}

// ---------------------------------------------------------------------------
// SQL views.

async fn pool(db: &FreshDatabase) -> PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&db.url)
        .await
        .expect("connect to the test database")
}

/// `(seq, data)` of a job's `state` events, in order.
async fn state_events(pool: &PgPool, job_id: &str) -> Vec<(i64, Value)> {
    let id: uuid::Uuid = job_id.parse().expect("uuid");
    let rows: Vec<(i64, sqlx::types::Json<Value>)> = sqlx::query_as(
        "SELECT seq, data FROM refine_job_events WHERE job_id = $1 AND event = 'state' ORDER BY seq",
    )
    .bind(id)
    .fetch_all(pool)
    .await
    .expect("state events");
    rows.into_iter().map(|(s, d)| (s, d.0)).collect()
}

fn statuses(events: &[(i64, Value)]) -> Vec<String> {
    events
        .iter()
        .map(|(_, d)| d["status"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn is_terminal(status: &str) -> bool {
    matches!(status, "succeeded" | "failed" | "cancelled")
}

/// Every event seq of a job is 1..=version without a gap (the PK forbids repeats).
async fn assert_event_seqs_contiguous(pool: &PgPool, job_id: &str) {
    let id: uuid::Uuid = job_id.parse().expect("uuid");
    let (count, max, version): (i64, Option<i64>, i64) = sqlx::query_as(
        "SELECT COUNT(*), MAX(e.seq), (SELECT version FROM refine_jobs WHERE id = $1) \
         FROM refine_job_events e WHERE e.job_id = $1",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .expect("event seqs");
    assert_eq!(Some(count), max, "job {job_id}: event seqs have gaps");
    assert_eq!(
        max,
        Some(version),
        "job {job_id}: last event seq != version"
    );
}

/// `(assignment_id, starts, status, has_outcome, attempt)` of a job's L0 rows.
async fn l0_rows(pool: &PgPool, job_id: &str) -> Vec<(String, i32, String, bool, i32)> {
    let id: uuid::Uuid = job_id.parse().expect("uuid");
    sqlx::query_as(
        "SELECT assignment_id, starts, status, outcome IS NOT NULL, attempt FROM refine_l0_runs \
         WHERE job_id = $1 ORDER BY position",
    )
    .bind(id)
    .fetch_all(pool)
    .await
    .expect("l0 rows")
}

async fn wait_all_succeeded(base: &str, ids: &[String]) -> Vec<Value> {
    let mut done = Vec::new();
    for id in ids {
        let job = wait_for(&format!("job {id} to end"), FINISH_TIMEOUT, || async {
            let job = get_json(base, &format!("/v1/refine-jobs/{id}")).await;
            let status = job["status"].as_str().unwrap_or_default().to_owned();
            is_terminal(&status).then_some(job)
        })
        .await;
        assert_eq!(job["status"], "succeeded", "job {id}: {job}");
        done.push(job);
    }
    done
}

fn result_ids(job: &Value) -> Vec<String> {
    job["result"]["assignments"]
        .as_array()
        .expect("result assignments")
        .iter()
        .map(|a| a["id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

// ---------------------------------------------------------------------------
// The tests.

/// A server process is SIGKILLed while its L0s run; a second process on the same
/// Postgres finishes every job once its lease expires, and L0s that had finished
/// are not run again. The killed server's L0 processes die with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_server_jobs_resume_on_another_without_rerunning_finished_l0s() {
    let db = FreshDatabase::new(Backend::Postgres).await;
    let fixture = Fixture::new(&["sleep", "2"]);
    let mut a = Server::start("A", &db.url, &fixture, &[("PLANGATE_WORKERS", "4")]).await;
    const JOBS: usize = 3;
    const N: usize = 8; // two batches: 6 + 2
    let ids = submit_jobs(&a, 1, JOBS, N).await;

    // Kill A once every job has its first batch stored and its second batch running.
    wait_for("batch 2 running on every job", FINISH_TIMEOUT, || async {
        let mut all = true;
        for id in &ids {
            let records = get_json(&a.base, &format!("/v1/refine-jobs/{id}/assignments")).await;
            let records = records.as_array().expect("records").clone();
            let finished = records.iter().filter(|r| r["status"] == "valid").count();
            let running: Vec<&str> = records
                .iter()
                .filter(|r| r["status"] == "running")
                .filter_map(|r| r["assignment_id"].as_str())
                .collect();
            // …and their processes have started (the row goes `running` within the
            // worker's 2 ms write-behind of the spawn).
            let started = tally(&fixture.events(), |_| true);
            all &= finished == 6
                && running.len() == 2
                && running.iter().all(|id| started.contains_key(*id));
        }
        all.then_some(())
    })
    .await;
    a.sigkill().await;
    let killed_at = now_ns();

    // What was stored when A died: A writes nothing any more.
    let pg = pool(&db).await;
    let mut stored: HashSet<String> = HashSet::new();
    // Assignment → record `starts` at the kill, for those without an outcome.
    let mut unfinished: HashMap<String, i32> = HashMap::new();
    for id in &ids {
        let job = get_job_row(&pg, id).await;
        assert_eq!(job.0, "running", "job {id} was claimed by A");
        assert_eq!(job.1, 1, "job {id}: first attempt");
        for (assignment, starts, _, has_outcome, _) in l0_rows(&pg, id).await {
            if has_outcome {
                assert_eq!(starts, 1);
                stored.insert(assignment);
            } else {
                unfinished.insert(assignment, starts);
            }
        }
    }
    assert!(
        !stored.is_empty(),
        "some L0 outcomes were stored before the kill"
    );
    assert!(
        unfinished.values().any(|s| *s > 0),
        "some L0s ran when A was killed"
    );

    // A's L0 processes died with A (their guardians): every L0 that had started
    // but not ended at the kill is gone, and never writes its `end` line.
    let before = tally(&fixture.events(), |ns| ns <= killed_at);
    let alive_at_kill: Vec<String> = before
        .iter()
        .filter(|(_, (s, e))| s > e)
        .map(|(id, _)| id.clone())
        .collect();
    assert!(!alive_at_kill.is_empty(), "L0 processes ran at the kill");
    let pids: Vec<(String, i32)> = alive_at_kill
        .iter()
        .map(|id| (id.clone(), fixture.l0_pid(id).expect("l0pid file")))
        .collect();
    wait_for(
        "A's L0 processes to die with A",
        Duration::from_secs(5),
        || async {
            pids.iter()
                .all(|(_, pid)| !process_alive(*pid))
                .then_some(())
        },
    )
    .await;

    let b = Server::start("B", &db.url, &fixture, &[]).await;
    let jobs = wait_all_succeeded(&b.base, &ids).await;

    let events = fixture.events();
    let total = tally(&events, |_| true);
    let after = tally(&events, |ns| ns > killed_at);
    for (job_no, (id, job)) in ids.iter().zip(&jobs).enumerate() {
        assert_eq!(job["attempt"], 2, "job {id}: one crash, one resume: {job}");
        let expected: Vec<String> = (1..=N).map(|i| format!("J{}-A{i}", job_no + 1)).collect();
        assert_eq!(
            result_ids(job),
            expected,
            "job {id}: the result has every assignment"
        );
        assert_eq!(job["progress"]["l0_succeeded"], N);
        for (assignment, starts, status, has_outcome, attempt) in l0_rows(&pg, id).await {
            assert_eq!(status, "valid");
            assert!(has_outcome);
            let ran = total.get(&assignment).map_or(0, |t| t.0);
            if stored.contains(&assignment) {
                assert_eq!(starts, 1, "{assignment} had finished: not run again");
                assert_eq!(ran, 1, "{assignment} had finished: started once (fixture)");
                assert_eq!(attempt, 1, "{assignment} was run by the first attempt");
            } else {
                // Interrupted (or never started): run again exactly once, by B.
                let at_kill = unfinished[&assignment];
                assert_eq!(starts, at_kill + 1, "{assignment}: run once more");
                assert_eq!(after.get(&assignment).map(|t| t.0), Some(1), "{assignment}");
                let before_kill = before.get(&assignment).map_or(0, |t| t.0);
                assert!(
                    before_kill <= at_kill as u32,
                    "{assignment}: started unrecorded"
                );
                assert_eq!(attempt, 2);
            }
        }
        // Exactly one terminal state; the claim history is A, expiry, B.
        let states = state_events(&pg, id).await;
        assert_eq!(
            statuses(&states),
            ["queued", "running", "queued", "running", "succeeded"],
            "job {id}: {states:?}"
        );
        assert_eq!(states[1].1["worker_id"], a.worker_id.as_str());
        assert_eq!(states[2].1["reason"], "lease expired");
        assert_eq!(states[3].1["worker_id"], b.worker_id.as_str());
        assert_event_seqs_contiguous(&pg, id).await;
    }
    // No `end` of an A process after the kill: every end after it is B's.
    for (assignment, (starts, ends)) in &after {
        assert_eq!(
            starts, ends,
            "{assignment}: an L0 of the killed server ended after the kill"
        );
    }
    for id in &alive_at_kill {
        assert_eq!(after.get(id).map(|t| t.0), Some(1), "{id} re-run by B");
    }
    assert_counters_true(&pg).await;
}

/// The counters of jobs and runs (`refine_counts`, kept by their writes) against a
/// count of the rows, of every one ('') and by project, by state: equal, whatever
/// crashed.
async fn assert_counters_true(pool: &PgPool) {
    for (kind, table, state) in [
        (
            "job",
            "refine_jobs",
            "CASE WHEN degraded THEN 'degraded' ELSE status END",
        ),
        ("run", "refine_runs", "status"),
    ] {
        let kept: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT scope, state, CAST(SUM(n) AS BIGINT) FROM refine_counts WHERE kind = $1 \
             GROUP BY scope, state HAVING SUM(n) <> 0 ORDER BY 1, 2",
        )
        .bind(kind)
        .fetch_all(pool)
        .await
        .expect("counters");
        let counted: Vec<(String, String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT s.scope, {state}, COUNT(*) \
             FROM {table}, LATERAL (VALUES (''), (project_id)) AS s (scope) \
             WHERE s.scope IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2"
        )))
        .fetch_all(pool)
        .await
        .expect("rows");
        assert_eq!(kept, counted, "{kind} counters against {table}");
    }
}

/// `(status, attempt)` straight from the table.
async fn get_job_row(pool: &PgPool, job_id: &str) -> (String, i32) {
    let id: uuid::Uuid = job_id.parse().expect("uuid");
    sqlx::query_as("SELECT status, attempt FROM refine_jobs WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("job row")
}

/// SIGTERM while L0s run: after the shutdown grace the L0s are killed and the jobs
/// handed back at once (queued, the attempt not charged); another process resumes
/// them without waiting for a lease to expire and re-runs only the killed L0s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_jobs_back_uncharged_and_another_server_finishes_them() {
    let db = FreshDatabase::new(Backend::Postgres).await;
    let fixture = Fixture::new(&["sleep", "4"]);
    let two_workers = ("PLANGATE_WORKERS", "2");
    let mut a = Server::start(
        "A",
        &db.url,
        &fixture,
        &[("PLANGATE_SHUTDOWN_GRACE_SECS", "1"), two_workers],
    )
    .await;
    const JOBS: usize = 2;
    const N: usize = 8;
    let ids = submit_jobs(&a, 101, JOBS, N).await;
    let pg = pool(&db).await;
    wait_for("A to claim both jobs", FINISH_TIMEOUT, || async {
        let mut all = true;
        for id in &ids {
            all &= get_job_row(&pg, id).await.0 == "running";
        }
        all.then_some(())
    })
    .await;
    // A backlog queued behind them, which A's two busy workers leave alone.
    let backlog = submit_jobs(&a, 111, 2, 1).await;

    // SIGTERM once batch 2 runs (batch 1 stored) on every job.
    wait_for("batch 2 running on every job", FINISH_TIMEOUT, || async {
        let mut all = true;
        for id in &ids {
            let records = get_json(&a.base, &format!("/v1/refine-jobs/{id}/assignments")).await;
            let records = records.as_array().expect("records").clone();
            let valid = records.iter().filter(|r| r["status"] == "valid").count();
            let running = records.iter().filter(|r| r["status"] == "running").count();
            all &= valid == 6 && running == 2;
        }
        all.then_some(())
    })
    .await;
    let termed_at = now_ns();
    let took = a.sigterm(Duration::from_secs(10)).await;
    let exited_at = now_ns();
    // Grace 1 s, then the L0s (4 s each) are killed and the jobs handed back.
    assert!(took < Duration::from_secs(4), "A took {took:?} to exit");

    for id in &backlog {
        assert_eq!(get_job_row(&pg, id).await, ("queued".to_owned(), 0));
    }
    for id in &ids {
        assert_eq!(
            get_job_row(&pg, id).await,
            ("queued".to_owned(), 0),
            "job {id} handed back, attempt not charged"
        );
        let states = state_events(&pg, id).await;
        let last = &states.last().expect("state events").1;
        assert_eq!(last["reason"], "handed back at shutdown", "{states:?}");
        for (assignment, _, status, has_outcome, _) in l0_rows(&pg, id).await {
            assert!(
                (status == "valid" && has_outcome) || (status == "pending" && !has_outcome),
                "{assignment}: {status}"
            );
        }
    }
    // The killed L0s never ended on their own.
    let during = tally(&fixture.events(), |ns| ns > termed_at && ns <= exited_at);
    assert!(
        during.values().all(|(_, ends)| *ends == 0),
        "no L0 ended between SIGTERM and exit: {during:?}"
    );

    let b = Server::start("B", &db.url, &fixture, &[two_workers]).await;
    let jobs = wait_all_succeeded(&b.base, &ids).await;
    wait_all_succeeded(&b.base, &backlog).await;
    // The handed-back jobs resumed at once: B's first two claims, ahead of the
    // backlog that was queued before the hand-back.
    let b_worker: uuid::Uuid = b.worker_id.parse().expect("worker uuid");
    let claims: Vec<uuid::Uuid> = sqlx::query_scalar(
        "SELECT job_id FROM refine_job_events WHERE event = 'state' \
         AND data->>'status' = 'running' AND data->>'worker_id' = $1 ORDER BY created_at, seq",
    )
    .bind(b_worker.to_string())
    .fetch_all(&pg)
    .await
    .expect("B's claims");
    let first_two: HashSet<String> = claims.iter().take(2).map(ToString::to_string).collect();
    assert_eq!(
        first_two,
        ids.iter().cloned().collect::<HashSet<_>>(),
        "B resumed the handed-back jobs first: {claims:?}"
    );
    let total = tally(&fixture.events(), |_| true);
    for (job_no, (id, job)) in ids.iter().zip(&jobs).enumerate() {
        // Claimed by A (1), handed back (0), claimed by B (1).
        assert_eq!(job["attempt"], 1, "job {id}: the hand-back is not charged");
        let expected: Vec<String> = (1..=N).map(|i| format!("J{}-A{i}", job_no + 101)).collect();
        assert_eq!(result_ids(job), expected);
        for (assignment, starts, _, _, _) in l0_rows(&pg, id).await {
            let batch_one = expected[..6].contains(&assignment);
            let want = if batch_one { 1 } else { 2 };
            assert_eq!(starts, want, "{assignment}: record starts");
            assert_eq!(
                total[&assignment].0, want as u32,
                "{assignment}: fixture starts"
            );
            assert_eq!(total[&assignment].1, 1, "{assignment}: one run ended");
        }
        let states = state_events(&pg, id).await;
        assert_eq!(
            statuses(&states),
            ["queued", "running", "queued", "running", "succeeded"],
            "job {id}: {states:?}"
        );
        let attempts: Vec<i64> = states
            .iter()
            .map(|(_, d)| d["attempt"].as_i64().unwrap_or(-1))
            .collect();
        assert_eq!(attempts, [0, 1, 0, 1, 1]);
        assert_eq!(states[3].1["worker_id"], b.worker_id.as_str());
        assert_event_seqs_contiguous(&pg, id).await;
    }
}

/// Two servers on one database share one queue: every job runs on exactly one of
/// them, once, and no L0 runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_one_queue_without_duplicate_runs() {
    let db = FreshDatabase::new(Backend::Postgres).await;
    let fixture = Fixture::new(&["sleep", "0.3"]);
    let a = Server::start("A", &db.url, &fixture, &[]).await;
    let b = Server::start("B", &db.url, &fixture, &[]).await;
    const JOBS: usize = 20;
    const N: usize = 7;
    let mut ids = Vec::new();
    let mut streams = Vec::new();
    for job in 1..=JOBS {
        let (server, other) = if job % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let id = submit_jobs(server, 200 + job, 1, N).await.remove(0);
        // Follow it live on the server that did not take the request.
        let (base, job_id) = (other.base.clone(), id.clone());
        streams.push(tokio::spawn(
            async move { sse_events(&base, &job_id).await },
        ));
        ids.push(id);
    }
    let jobs = wait_all_succeeded(&a.base, &ids).await;
    for (id, stream) in ids.iter().zip(streams) {
        let events = stream.await.expect("stream task");
        let seqs: Vec<i64> = events.iter().map(|e| e.0).collect();
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "job {id}: SSE seqs increase"
        );
        let terminal: Vec<usize> = events
            .iter()
            .enumerate()
            .filter(|(_, e)| e.1 == "state" && is_terminal(e.2["status"].as_str().unwrap_or("")))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(
            terminal,
            [events.len() - 1],
            "job {id}: one terminal event, the stream's last"
        );
        assert_eq!(events[events.len() - 1].2["status"], "succeeded");
    }
    let pg = pool(&db).await;
    let mut claimed_by: BTreeMap<String, usize> = BTreeMap::new();
    for (id, job) in ids.iter().zip(&jobs) {
        assert_eq!(job["attempt"], 1, "job {id}");
        assert_eq!(result_ids(job).len(), N);
        let states = state_events(&pg, id).await;
        assert_eq!(
            statuses(&states),
            ["queued", "running", "succeeded"],
            "job {id}: one claim, one terminal state"
        );
        *claimed_by
            .entry(
                states[1].1["worker_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
            .or_default() += 1;
        for (assignment, starts, status, _, _) in l0_rows(&pg, id).await {
            assert_eq!((starts, status.as_str()), (1, "valid"), "{assignment}");
        }
        assert_event_seqs_contiguous(&pg, id).await;
    }
    let workers: HashSet<&str> = [a.worker_id.as_str(), b.worker_id.as_str()].into();
    assert!(
        claimed_by.keys().all(|w| workers.contains(w.as_str())),
        "{claimed_by:?}"
    );
    assert_eq!(claimed_by.len(), 2, "both servers worked: {claimed_by:?}");
    let events = fixture.events();
    let starts = events.iter().filter(|e| e.start).count();
    assert_eq!(starts, JOBS * N, "total L0 starts == total assignments");
    let per_id = tally(&events, |_| true);
    assert_eq!(per_id.len(), JOBS * N);
    assert!(per_id.values().all(|t| *t == (1, 1)), "{per_id:?}");
    assert_counters_true(&pg).await;
}

/// The whole SSE stream of a job's events, read until the server ends it (after
/// the terminal `state` event): `(seq, event, data)`.
async fn sse_events(base: &str, job_id: &str) -> Vec<(i64, String, Value)> {
    let response = client()
        .get(format!("{base}/v1/refine-jobs/{job_id}/events"))
        .timeout(FINISH_TIMEOUT)
        .send()
        .await
        .expect("GET events");
    assert_eq!(response.status(), 200);
    let text = response.text().await.expect("the stream ends");
    let mut events = Vec::new();
    for block in text.split("\n\n") {
        let (mut seq, mut event, mut data) = (None, None, None);
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id:") {
                seq = v.trim().parse::<i64>().ok();
            } else if let Some(v) = line.strip_prefix("event:") {
                event = Some(v.trim().to_owned());
            } else if let Some(v) = line.strip_prefix("data:") {
                data = serde_json::from_str::<Value>(v.trim()).ok();
            }
        }
        if let (Some(seq), Some(event), Some(data)) = (seq, event, data) {
            events.push((seq, event, data));
        }
    }
    events
}

/// Waits for a run to end; returns it.
async fn wait_run(base: &str, run_id: &str) -> Value {
    wait_for(&format!("run {run_id} to end"), FINISH_TIMEOUT, || async {
        let run = get_json(base, &format!("/v1/refine-runs/{run_id}?wait=5")).await;
        let status = run["status"].as_str().unwrap_or_default().to_owned();
        is_terminal(&status).then_some(run)
    })
    .await
}

async fn merge_count(pool: &PgPool, run_id: &str) -> i32 {
    let id: uuid::Uuid = run_id.parse().expect("uuid");
    sqlx::query_scalar("SELECT merge_count FROM refine_runs WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("merge_count")
}

fn assert_run_complete(run: &Value, run_no: usize, phases: usize, per_phase: usize) {
    assert_eq!(run["status"], "succeeded", "{run}");
    let result = &run["result"];
    let ids: HashSet<&str> = result["assignments"]
        .as_array()
        .expect("merged assignments")
        .iter()
        .filter_map(|a| a["id"].as_str())
        .collect();
    assert_eq!(ids.len(), phases * per_phase, "{result}");
    for p in 1..=phases {
        for i in 1..=per_phase {
            assert!(ids.contains(format!("R{run_no}-P{p}-A{i}").as_str()));
        }
        assert_eq!(
            result["phases"][format!("P{p}")]["status"],
            "succeeded",
            "{result}"
        );
    }
}

/// docs/jobs.md, "Claiming, leases and crashes": runs whose merge races between two server processes on one Postgres
/// are merged exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_merge_racing_between_two_servers_happens_once() {
    let db = FreshDatabase::new(Backend::Postgres).await;
    let fixture = Fixture::new(&["sleep", "0.2"]);
    let a = Server::start("A", &db.url, &fixture, &[]).await;
    let b = Server::start("B", &db.url, &fixture, &[]).await;
    const RUNS: usize = 3;
    const PHASES: usize = 12;
    let mut runs = Vec::new();
    for run in 1..=RUNS {
        let server = if run % 2 == 0 { &a } else { &b };
        let created = post_json(&server.base, "/v1/refine-runs", &run_body(run, PHASES, 1)).await;
        runs.push(created["id"].as_str().expect("run id").to_owned());
    }
    let pg = pool(&db).await;
    let mut workers: HashSet<String> = HashSet::new();
    for (i, run_id) in runs.iter().enumerate() {
        let run = wait_run(&b.base, run_id).await;
        assert_run_complete(&run, i + 1, PHASES, 1);
        assert_eq!(
            merge_count(&pg, run_id).await,
            1,
            "run {run_id} merged once"
        );
        for phase in run["phases"].as_object().expect("phases").values() {
            let job = phase["job_id"].as_str().expect("job id");
            let states = state_events(&pg, job).await;
            assert_eq!(statuses(&states), ["queued", "running", "succeeded"]);
            workers.insert(states[1].1["worker_id"].as_str().unwrap_or("").to_owned());
        }
    }
    assert_eq!(
        workers,
        [a.worker_id.clone(), b.worker_id.clone()].into(),
        "both servers worked the phase jobs"
    );
    // Nothing merges again later (the reaper of either server looks for due runs).
    tokio::time::sleep(Duration::from_secs(2)).await;
    for run_id in &runs {
        assert_eq!(merge_count(&pg, run_id).await, 1);
    }
}

/// A server is SIGKILLed in the middle of a run; a new one joins; the run still
/// completes, merged exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_survives_a_server_killed_mid_run_and_merges_once() {
    let db = FreshDatabase::new(Backend::Postgres).await;
    let fixture = Fixture::new(&["sleep", "1"]);
    let mut a = Server::start("A", &db.url, &fixture, &[]).await;
    let b = Server::start("B", &db.url, &fixture, &[]).await;
    const PHASES: usize = 12;
    const PER_PHASE: usize = 2;
    let created = post_json(&a.base, "/v1/refine-runs", &run_body(1, PHASES, PER_PHASE)).await;
    let run_id = created["id"].as_str().expect("run id").to_owned();
    let pg = pool(&db).await;

    // Kill A while it holds phase jobs and some phases have already ended.
    let a_worker = a.worker_id.clone();
    wait_for(
        "A working a phase while others ended",
        FINISH_TIMEOUT,
        || async {
            let run_uuid: uuid::Uuid = run_id.parse().expect("uuid");
            let (done, on_a): (i64, i64) = sqlx::query_as(
                "SELECT COUNT(*) FILTER (WHERE status = 'succeeded'), \
                    COUNT(*) FILTER (WHERE status = 'running' AND worker_id = $2) \
             FROM refine_jobs WHERE run_id = $1",
            )
            .bind(run_uuid)
            .bind(a_worker.parse::<uuid::Uuid>().expect("worker uuid"))
            .fetch_one(&pg)
            .await
            .expect("phase counts");
            (done >= 1 && on_a >= 1).then_some(())
        },
    )
    .await;
    a.sigkill().await;
    let c = Server::start("C", &db.url, &fixture, &[]).await;

    let run = wait_run(&c.base, &run_id).await;
    assert_run_complete(&run, 1, PHASES, PER_PHASE);
    assert_eq!(merge_count(&pg, &run_id).await, 1, "merged once");
    let mut resumed = 0;
    for phase in run["phases"].as_object().expect("phases").values() {
        let job = phase["job_id"].as_str().expect("job id");
        let states = state_events(&pg, job).await;
        let statuses = statuses(&states);
        assert_eq!(
            statuses.iter().filter(|s| is_terminal(s)).count(),
            1,
            "{job}: {states:?}"
        );
        assert_eq!(statuses.last().map(String::as_str), Some("succeeded"));
        if statuses.len() > 3 {
            resumed += 1;
        }
        for (assignment, _, status, has_outcome, _) in l0_rows(&pg, job).await {
            assert!(status == "valid" && has_outcome, "{assignment}");
        }
        assert_event_seqs_contiguous(&pg, job).await;
    }
    assert!(resumed >= 1, "a phase job of A was resumed elsewhere");
    drop(b);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(merge_count(&pg, &run_id).await, 1);
    assert_counters_true(&pg).await;
}

// ---------------------------------------------------------------------------
// docs/jobs.md, "Shutdown": no L0 process outlives a killed server (both back-ends).

/// Gone: no `/proc` entry, or a zombie whose parent is init (nobody of ours can
/// still be holding it; a zombie of a living guardian is not gone yet).
fn process_gone(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // `pid (comm) S ppid …`: the state and the parent follow the last `)`.
    let mut rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace())
        .into_iter()
        .flatten();
    let state = rest.next().unwrap_or("?");
    let ppid = rest.next().unwrap_or("0");
    (state == "Z" || state == "X") && ppid == "1"
}

/// The processes an `l0.sh escape` L0 recorded (the script, its `sleep` in the
/// group and its `setsid sleep` out of it); the survivors are SIGKILLed on drop,
/// so a failing test leaves nothing running.
struct L0Tree(Vec<(&'static str, i32)>);

impl L0Tree {
    async fn wait(fixture: &Fixture, assignment_id: &str, files: &[&'static str]) -> L0Tree {
        let mut tree = Vec::new();
        for what in files {
            let path = fixture.record.join(format!("{assignment_id}.{what}"));
            let pid = wait_for(&format!("{}", path.display()), FINISH_TIMEOUT, || async {
                std::fs::read_to_string(&path)
                    .ok()?
                    .trim()
                    .parse::<i32>()
                    .ok()
            })
            .await;
            tree.push((*what, pid));
        }
        L0Tree(tree)
    }

    /// The processes still there after polling for `limit`.
    async fn survivors_after(&self, limit: Duration) -> Vec<(&'static str, i32)> {
        let deadline = Instant::now() + limit;
        loop {
            let alive: Vec<_> = self
                .0
                .iter()
                .copied()
                .filter(|(_, pid)| !process_gone(*pid))
                .collect();
            if alive.is_empty() || Instant::now() >= deadline {
                return alive;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for L0Tree {
    fn drop(&mut self) {
        for (_, pid) in &self.0 {
            if !process_gone(*pid) {
                // SAFETY: kill(2) of a pid this test's L0 recorded; no memory involved.
                unsafe {
                    libc::kill(*pid, libc::SIGKILL);
                }
            }
        }
    }
}

/// `kill -9` of a server running a wrapper L0 (`l0.sh escape`: a shell whose child
/// `sleep` stays in its process group and whose other child left it with `setsid`)
/// leaves none of the L0's processes running: they would spend on while another
/// replica, once the lease expires, runs the same call again (docs/jobs.md,
/// "Shutdown").
async fn sigkilled_server_leaves_no_l0_process_behind(backend: Backend) {
    let db = FreshDatabase::new(backend).await;
    let fixture = Fixture::new(&["escape"]);
    let mut server = Server::start("A", &db.url, &fixture, &[]).await;
    submit_jobs(&server, 1, 1, 1).await;
    let tree = L0Tree::wait(&fixture, "J1-A1", &["l0pid", "pid", "escaped"]).await;
    server.sigkill().await;
    let left = tree.survivors_after(Duration::from_secs(5)).await;
    assert!(
        left.is_empty(),
        "L0 processes outlived the SIGKILLed server: {left:?} (of {:?})",
        tree.0
    );
}

/// SIGTERM with a short grace: the L0s still running when it ends are killed,
/// every process of their group with them, before the server exits.
async fn sigterm_kills_every_l0_process_in_the_group(backend: Backend) {
    let db = FreshDatabase::new(backend).await;
    let fixture = Fixture::new(&["hang"]);
    let mut server = Server::start(
        "A",
        &db.url,
        &fixture,
        &[("PLANGATE_SHUTDOWN_GRACE_SECS", "1")],
    )
    .await;
    submit_jobs(&server, 1, 1, 1).await;
    let tree = L0Tree::wait(&fixture, "J1-A1", &["l0pid", "pid"]).await;
    server.sigterm(Duration::from_secs(30)).await;
    let left = tree.survivors_after(Duration::from_secs(5)).await;
    assert!(
        left.is_empty(),
        "L0 processes outlived the server's shutdown: {left:?} (of {:?})",
        tree.0
    );
}

both_backends!(
    sigkilled_server_leaves_no_l0_process_behind,
    sigterm_kills_every_l0_process_in_the_group
);
