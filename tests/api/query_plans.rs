//! Every hot query uses an index (no hot path works in proportion to a table): on a
//! Postgres database seeded with a
//! history (bench/seed_postgres.sql, scaled down for CI but ANALYZEd, so the planner
//! weighs real statistics), the server runs its endpoints and the workers' queries
//! while Postgres' `auto_explain` sends the plan of every statement it executes —
//! with the real parameters, nested statements (foreign-key checks, cascades)
//! included — back as a NOTICE. sqlx logs notices through `tracing`; this test
//! collects them and fails on any sequential scan over a large table.
//!
//! The plans are of the statements the code really issues, not of copies of its SQL,
//! so a new query is checked as soon as an exercised endpoint runs it.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use crate::common::{Backend, FreshDatabase, TestApp, spawn_app_on, sse};
use chrono::Utc;
use plangate::db::dashboard::LiveTable;
use plangate::db::refine_jobs::{ClaimFor, JobLease};
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use uuid::Uuid;

const SEED: &str = include_str!("../../bench/seed_postgres.sql");

/// CI size: big enough that a sequential scan costs more than an index for every
/// selective query (checked below), small enough to seed in seconds.
const SEED_SIZE: &[(&str, u32)] = &[
    ("seed.projects", 20),
    ("seed.lists", 1000),
    ("seed.tasks_per_list", 50),
    ("seed.jobs", 10_000),
    ("seed.tracks", 1000),
    ("seed.run_every", 8),
];

/// A table with at least this many rows must never be read by a sequential scan.
const LARGE_TABLE_ROWS: f64 = 1000.0;

/// Tables that a long-running cluster fills; the seed must make each of them large,
/// or the test would prove nothing about them.
const HISTORY_TABLES: &[&str] = &[
    "task_lists",
    "tasks",
    "task_dependencies",
    "tracks",
    "refine_runs",
    "refine_jobs",
    "refine_l0_runs",
    "refine_job_events",
];

/// A statement this test runs itself to prove that a sequential scan is caught.
const SELF_CHECK: &str = "/* plan-check self-test */";

/// Statements (a fragment of their SQL) the exercise below must have seen planned:
/// the hot paths of the issue. A rewrite that changes one of these fragments fails
/// here, so the list is kept in step with the code.
const EXPECTED: &[(&str, &str)] = &[
    ("claim", "FOR UPDATE SKIP LOCKED"),
    ("heartbeat", "SET lease_expires_at = $3"),
    ("reaper", "lease_expires_at < $1"),
    (
        "retention of jobs",
        "DELETE FROM refine_jobs WHERE run_id IS NULL",
    ),
    (
        "retention of runs",
        "DELETE FROM refine_runs WHERE status IN",
    ),
    (
        "retention of events",
        "DELETE FROM refine_job_events WHERE job_id IN",
    ),
    (
        "retention of L0 records",
        "DELETE FROM refine_l0_runs WHERE job_id IN",
    ),
    (
        "gauge of jobs",
        "FROM refine_counts WHERE kind = 'job' AND scope = ''",
    ),
    (
        "job counts of a project",
        "FROM refine_counts WHERE kind = $1 AND scope IN",
    ),
    ("degraded jobs", "AND degraded"),
    (
        "runs due for a merge",
        "NOT EXISTS (SELECT 1 FROM refine_jobs j",
    ),
    (
        "task list / ready",
        "FROM tasks WHERE task_list_id = $1 ORDER BY position",
    ),
    (
        "task edges",
        "JOIN tasks t ON t.id = d.task_id WHERE t.task_list_id = $1",
    ),
    (
        "status by cycle",
        "WHERE l.project_id = $1 AND l.team_pk = $2",
    ),
    ("status by project", "WHERE l.project_id = $1 GROUP BY"),
    (
        "cycle known",
        "SELECT 1 FROM teams WHERE project_id = $1 AND team_pk = $2",
    ),
    (
        "task by planner id",
        "LEFT JOIN tasks t ON t.task_list_id = l.id AND (t.task_id = $2",
    ),
    ("task change", "UPDATE tasks SET status = $2"),
    ("cascade", "UPDATE tasks SET status = $1, abandon_category"),
    ("list pages", "FROM refine_jobs WHERE TRUE"),
    ("job get", "FROM refine_jobs WHERE id = $1"),
    (
        "job progress",
        "FROM refine_l0_runs WHERE job_id = $1 GROUP BY status",
    ),
    ("job events", "FROM refine_job_events WHERE job_id = $1"),
    ("run get", "FROM refine_runs WHERE id = $1"),
    ("run phases", "FROM refine_jobs WHERE run_id = $1"),
    ("track read", "FROM tracks WHERE track_id = $1"),
    ("track step", "UPDATE tracks SET metadata = $2"),
    (
        "live page marker",
        "SELECT MAX(updated_at) AS at FROM refine_jobs",
    ),
    (
        "live page marker by project",
        "SELECT MAX(at) FROM (SELECT MAX(updated_at) AS at FROM tracks WHERE project_id = $1",
    ),
    (
        "overview counts",
        "FROM task_list_counts c WHERE c.task_list_id = task_lists.id",
    ),
];

/// The notices sqlx logged (auto_explain's plans among them).
static NOTICES: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct NoticeCollector;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for NoticeCollector {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != "sqlx::postgres::notice" {
            return;
        }
        struct Message(Option<String>);
        impl tracing::field::Visit for Message {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "message" {
                    self.0 = Some(value.to_owned());
                }
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" && self.0.is_none() {
                    self.0 = Some(format!("{value:?}"));
                }
            }
        }
        let mut message = Message(None);
        event.record(&mut message);
        if let Some(text) = message.0 {
            NOTICES.lock().unwrap().push(text);
        }
    }
}

/// The process-wide subscriber, interested in Postgres notices only (other tests of
/// this binary may share the process; nothing else of theirs is recorded).
fn install_notice_collector() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let only_notices = tracing_subscriber::filter::filter_fn(|metadata| {
            metadata.target() == "sqlx::postgres::notice"
        });
        tracing::subscriber::set_global_default(
            tracing_subscriber::registry().with(NoticeCollector.with_filter(only_notices)),
        )
        .expect("no other global subscriber in the test binary");
    });
}

/// One executed statement and its plan tree.
struct Plan {
    query: String,
    root: Value,
}

/// auto_explain's message: `duration: … ms  plan:\n{json}`.
fn parse_plan(notice: &str) -> Option<Plan> {
    let (_, json) = notice.split_once("plan:\n")?;
    let doc: Value = serde_json::from_str(json).ok()?;
    Some(Plan {
        query: doc["Query Text"].as_str().unwrap_or_default().to_owned(),
        root: doc["Plan"].clone(),
    })
}

/// Relations read by a `Seq Scan` anywhere in the tree.
fn seq_scanned(node: &Value, found: &mut Vec<String>) {
    if node["Node Type"] == "Seq Scan" {
        found.push(node["Relation Name"].as_str().unwrap_or("?").to_owned());
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        seq_scanned(child, found);
    }
}

fn collected_plans() -> Vec<Plan> {
    NOTICES
        .lock()
        .unwrap()
        .iter()
        .filter_map(|n| parse_plan(n))
        .collect()
}

async fn ok_json(response: reqwest::Response, what: &str) -> Value {
    let status = response.status();
    let body = response.text().await.unwrap();
    assert!(status.is_success(), "{what}: {status} {body}");
    serde_json::from_str(&body).unwrap_or(Value::Null)
}

async fn get(app: &TestApp, path: &str) -> Value {
    let response = app.get(path).await;
    ok_json(response, path).await
}

/// Ids of seeded rows the exercise uses, read before plans are collected.
struct Seeded {
    /// The newest list (in progress): a wave done, one running, the rest pending.
    list: Uuid,
    /// A running task of it, with pending dependents (the cascade).
    running_task: Uuid,
    /// A pending task of it.
    pending_task: Uuid,
    job: Uuid,
    run: Uuid,
    middle_job: Uuid,
    large: HashSet<String>,
    rows: BTreeMap<String, f64>,
}

async fn seed(url: &str) -> Seeded {
    let mut conn = PgConnection::connect(url).await.expect("connect to seed");
    for (name, value) in SEED_SIZE {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("SET {name} = {value}")))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let started = Instant::now();
    sqlx::raw_sql(SEED).execute(&mut conn).await.expect("seed");
    sqlx::raw_sql("VACUUM ANALYZE")
        .execute(&mut conn)
        .await
        .unwrap();
    eprintln!("seeded in {:.1} s", started.elapsed().as_secs_f64());
    let rows: Vec<(String, f32)> = sqlx::query_as(
        "SELECT c.relname::text, c.reltuples FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = 'public' AND c.relkind = 'r'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let rows: BTreeMap<String, f64> = rows.into_iter().map(|(t, n)| (t, f64::from(n))).collect();
    let large = rows
        .iter()
        .filter(|(_, n)| **n >= LARGE_TABLE_ROWS)
        .map(|(t, _)| t.clone())
        .collect();
    let list: Uuid =
        sqlx::query_scalar("SELECT id FROM task_lists ORDER BY created_at DESC LIMIT 1")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    let task = |status: &'static str| {
        sqlx::query_scalar::<_, Uuid>(
            "SELECT t.id FROM tasks t WHERE t.task_list_id = $1 AND t.status = $2 \
             AND EXISTS (SELECT 1 FROM task_dependencies d WHERE d.depends_on = t.id) \
             ORDER BY t.position LIMIT 1",
        )
        .bind(list)
        .bind(status)
    };
    let running_task = task("running").fetch_one(&mut conn).await.unwrap();
    let pending_task = task("pending").fetch_one(&mut conn).await.unwrap();
    let job: Uuid = sqlx::query_scalar(
        "SELECT id FROM refine_jobs WHERE run_id IS NULL ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    let middle_job: Uuid = sqlx::query_scalar(
        "SELECT id FROM refine_jobs WHERE status = 'succeeded' ORDER BY id OFFSET 4000 LIMIT 1",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    let run: Uuid =
        sqlx::query_scalar("SELECT id FROM refine_runs ORDER BY created_at DESC LIMIT 1")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    Seeded {
        list,
        running_task,
        pending_task,
        job,
        run,
        middle_job,
        large,
        rows,
    }
}

/// Every plan auto_explain reports for this database from now on, as a NOTICE to
/// the client that ran the statement (new sessions only).
async fn enable_auto_explain(url: &str, name: &str) {
    let mut conn = PgConnection::connect(url).await.unwrap();
    for setting in [
        "session_preload_libraries = 'auto_explain'",
        "auto_explain.log_min_duration = 0",
        "auto_explain.log_level = 'notice'",
        "auto_explain.log_format = 'json'",
        "auto_explain.log_nested_statements = on",
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "ALTER DATABASE {name} SET {setting}"
        )))
        .execute(&mut conn)
        .await
        .unwrap();
    }
}

fn refine_job_body() -> Value {
    let assignments: Vec<Value> = (1..=4)
        .map(|i| {
            json!({
                "id": format!("P1-A{i}"), "phase_id": "P1", "name": format!("Assignment {i}"),
                "goal": "Refine one part.", "technical_approach": format!("Touch src/mod{i}.rs."),
                "dependency_notes": "", "overlap_notes": "",
                "proposed_work_packages": [{"id_suffix": "WP1", "name": "code",
                    "estimated_files": [format!("src/mod{i}.rs")]}]
            })
        })
        .collect();
    json!({
        "context": {"phase_id": "P1", "assignments": assignments, "peer_summaries": []},
        "refined_plan": {"phases": [{"id": "P1", "name": "Phase", "goal": "g"}]},
        "task_text": "Plan check."
    })
}

fn refine_run_body() -> Value {
    let phase = |id: &str| {
        json!({"id": id, "name": format!("Phase {id}"), "goal": "g", "scope": ["code"],
               "technical_approach": "Small steps.", "relationship_notes": "", "ordering": 1})
    };
    let assignment = |id: &str, phase_id: &str| {
        json!({"id": id, "phase_id": phase_id, "name": id, "goal": "g",
               "technical_approach": "Plain code.", "dependency_notes": "", "overlap_notes": "",
               "proposed_work_packages": [{"id_suffix": "WP1", "name": "w", "scope": "s",
                   "estimated_files": [format!("src/{id}.rs")]}]})
    };
    json!({"plan": {
        "task": "Build the thing.", "source_dir": "/srv/app",
        "phases": [phase("P1"), phase("P2")],
        "assignments": [assignment("P1-A1", "P1"), assignment("P2-A1", "P2")]
    }})
}

async fn wait_terminal(app: &TestApp, path: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let body = get(app, &format!("{path}?wait=5")).await;
        if matches!(
            body["status"].as_str(),
            Some("succeeded" | "failed" | "cancelled")
        ) {
            return body;
        }
        assert!(Instant::now() < deadline, "{path} did not finish: {body}");
    }
}

/// The endpoints of the issue and the workers' statements, each a few times (sqlx
/// prepares statements; Postgres may switch to a generic plan after five runs).
async fn exercise(app: &TestApp, seeded: &Seeded) {
    let list = seeded.list;
    for _ in 0..2 {
        get(app, &format!("/v1/task-lists/{list}")).await;
        get(app, &format!("/v1/task-lists/{list}/ready")).await;
        get(app, &format!("/v1/task-lists/{list}/ready?mode=pipeline")).await;
        get(app, &format!("/v1/task-lists/{list}/graph")).await;
        get(app, "/v1/projects/project-3/status").await;
        get(app, "/v1/projects/project-3/status?team_pk=cycle-2").await;
        // An unknown cycle: 404, after asking whether the project knows it.
        let unknown = app
            .get("/v1/projects/project-3/status?team_pk=no-such-cycle")
            .await;
        assert_eq!(unknown.status(), 404, "an unknown cycle is not the project");
        // A task by the planner's id within its list (none is named so: 404).
        let by_planner_id = app
            .get(&format!("/v1/task-lists/{list}/tasks/no-such-task/history"))
            .await;
        assert_eq!(by_planner_id.status(), 404, "no task no-such-task");
        get(app, "/v1/projects/project-3/teams").await;
    }
    // A task starts; another fails and cascade-abandons its dependents.
    let patched = app
        .patch_json(
            &format!("/v1/tasks/{}", seeded.pending_task),
            &json!({"status": "running"}),
        )
        .await;
    assert!(
        patched.status().as_u16() < 500,
        "PATCH running: {}",
        patched.status()
    );
    let failed = app
        .patch_json(
            &format!("/v1/tasks/{}", seeded.running_task),
            &json!({"status": "failed", "notes": "plan check"}),
        )
        .await;
    let failed = ok_json(failed, "PATCH failed").await;
    assert!(
        !failed["cascaded"].as_array().is_none_or(Vec::is_empty),
        "the failure cascaded: {failed}"
    );
    // A new list next to the seeded ones.
    let tasks: Vec<Value> = (1..=20)
        .map(|i| {
            json!({"task_id": format!("T{i}"), "assigned_persona": "dev",
                   "parallel_group": (i - 1) / 5 + 1,
                   "depends_on": if i > 5 { vec![format!("T{}", i - 5)] } else { vec![] },
                   "reads": [], "writes": [format!("src/f{i}.rs")], "description": "x"})
        })
        .collect();
    let created = app
        .post_json(
            "/v1/task-lists",
            &json!({"project_id": "project-3", "team_pk": "cycle-2", "created_by": "pm", "tasks": tasks}),
        )
        .await;
    ok_json(created, "POST /v1/task-lists").await;

    // Jobs and runs: reads of seeded history, list pages with every filter.
    let (job, middle, run) = (seeded.job, seeded.middle_job, seeded.run);
    for _ in 0..2 {
        get(app, &format!("/v1/refine-jobs/{job}")).await;
        get(app, &format!("/v1/refine-jobs/{job}/assignments")).await;
        get(app, &format!("/v1/refine-jobs/{job}/events")).await;
        get(app, &format!("/v1/refine-jobs/{middle}/result")).await;
        get(app, &format!("/v1/refine-runs/{run}")).await;
        get(app, &format!("/v1/refine-runs/{run}/result")).await;
        let page = get(app, "/v1/refine-jobs?page_size=50").await;
        let token = page["next_page_token"].as_str().expect("a second page");
        get(
            app,
            &format!("/v1/refine-jobs?page_size=50&page_token={token}"),
        )
        .await;
        get(
            app,
            &format!("/v1/refine-jobs?page_size=50&page_token={middle}"),
        )
        .await;
        for filter in [
            "status=failed",
            "status=queued",
            "status=running",
            "project_id=project-3",
            "project_id=project-3&team_pk=cycle-3",
            "phase_id=phase-2",
            &format!("run_id={run}"),
        ] {
            get(app, &format!("/v1/refine-jobs?page_size=20&{filter}")).await;
        }
    }
    // Tracks: read and step.
    get(app, "/v1/tracks/track-7").await;
    for (action, step, body) in [
        ("start", "PLAN", json!({"agent": "planner"})),
        ("complete", "PLAN", json!({"outcome": "PASSED"})),
    ] {
        let response = app
            .client
            .post(app.url(&format!("/v1/tracks/track-7/steps/{step}/{action}")))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(
            response.status().as_u16() < 500,
            "track step: {}",
            response.status()
        );
    }

    // New work through the real workers: claim, L0 records, events, finish, merge.
    let created = app.post_json("/v1/refine-jobs", &refine_job_body()).await;
    let created = ok_json(created, "POST /v1/refine-jobs").await;
    let id = created["id"].as_str().unwrap().to_owned();
    let done = wait_terminal(app, &format!("/v1/refine-jobs/{id}")).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let created = app.post_json("/v1/refine-runs", &refine_run_body()).await;
    let created = ok_json(created, "POST /v1/refine-runs").await;
    let run_id = created["id"].as_str().unwrap().to_owned();
    wait_terminal(app, &format!("/v1/refine-runs/{run_id}")).await;
    let cancel = app
        .post_json(&format!("/v1/refine-jobs/{job}/cancel"), &json!({}))
        .await;
    assert!(
        cancel.status().as_u16() < 500,
        "cancel: {}",
        cancel.status()
    );

    // The workers' periodic statements, called as the reaper calls them (its own
    // loop runs every few seconds; the sweeps hourly).
    let db = &app.db;
    for _ in 0..2 {
        db.reap_expired_refine_jobs(|_| Duration::from_secs(1))
            .await
            .unwrap();
        db.refine_jobs_by_status().await.unwrap();
        db.delete_refine_jobs_finished_before(Utc::now() - chrono::Duration::days(30))
            .await
            .unwrap();
        db.refine_runs_due_for_merge().await.unwrap();
        let lost = db
            .heartbeat_refine_job(
                JobLease {
                    job_id: seeded.job,
                    token: Uuid::new_v4(),
                },
                Utc::now(),
            )
            .await
            .unwrap();
        assert!(lost.is_err(), "a stranger's token holds no lease");
        assert!(
            db.claim_refine_job(ClaimFor {
                worker_id: Uuid::new_v4(),
                lease_until: Utc::now(),
            })
            .await
            .unwrap()
            .is_none(),
            "nothing is queued"
        );
    }
    // The live list pages' markers, which every open page reads twice a second:
    // the last entry of a change index, for all projects or per allowed project,
    // and the overview's counter rows.
    for page in ["overview", "jobs", "runs", "tracks"] {
        let ready = sse::frames(app, &format!("/ui/live/{page}/events"), None, 1).await;
        assert_eq!(sse::field(&ready[0], "event").as_deref(), Some("ready"));
    }
    // A draw of the overview and of the job list, which a live page repeats each
    // time its marker moves: the job counts are counter rows.
    for path in [
        "/ui/",
        "/ui/jobs",
        "/ui/jobs?project=project-3",
        "/ui/jobs?status=degraded",
    ] {
        assert_eq!(app.get(path).await.status(), 200, "{path}");
    }
    let projects = ["project-3".to_owned(), "project-4".to_owned()];
    for table in [LiveTable::Jobs, LiveTable::Runs, LiveTable::Tracks] {
        app.db.latest_change(table, Some(&projects)).await.unwrap();
    }
    get(app, "/readyz").await;
    let metrics = app.get("/metrics").await;
    assert_eq!(metrics.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_queries_use_indexes_on_a_seeded_postgres() {
    install_notice_collector();

    // 1. A migrated database (a first server), the template track, the history.
    let app = spawn_app_on(
        FreshDatabase::new(Backend::Postgres).await,
        Backend::Postgres,
        |_| {},
    )
    .await;
    let template = json!({"track_id": "seed-template", "type": "feature", "status": "new",
        "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z",
        "description": "Seed template"});
    let put = app
        .client
        .put(app.url("/v1/tracks/seed-template"))
        .json(&template)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201);
    let database = app.stop_keeping_database().await;
    let url = database.url.clone();
    let name = url.rsplit('/').next().unwrap().to_owned();
    let seeded = seed(&url).await;
    for table in HISTORY_TABLES {
        assert!(
            seeded.large.contains(*table),
            "the seed leaves {table} small: {:?}",
            seeded.rows
        );
    }

    // 2. A new server whose sessions explain every statement.
    enable_auto_explain(&url, &name).await;
    let app = spawn_app_on(database, Backend::Postgres, |_| {}).await;

    // The check can fail: a query that must scan is caught.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM tasks WHERE description LIKE '%nowhere%' {SELF_CHECK}"
    )))
    .execute(&plangate_pg_pool(&app))
    .await
    .unwrap();
    let self_check = collected_plans()
        .into_iter()
        .find(|p| p.query.contains(SELF_CHECK))
        .expect("auto_explain reports plans as notices");
    let mut scans = Vec::new();
    seq_scanned(&self_check.root, &mut scans);
    assert_eq!(scans, ["tasks"], "the self-check's seq scan is seen");

    exercise(&app, &seeded).await;
    app.shutdown().await;

    let plans = collected_plans();
    // Statement text → what it scans (each statement runs several times).
    let mut offenders = BTreeMap::new();
    for plan in &plans {
        if plan.query.contains(SELF_CHECK) {
            continue;
        }
        let mut scans = Vec::new();
        seq_scanned(&plan.root, &mut scans);
        let large: Vec<&String> = scans.iter().filter(|t| seeded.large.contains(*t)).collect();
        if !large.is_empty() {
            let query = plan.query.split_whitespace().collect::<Vec<_>>().join(" ");
            let report = format!(
                "Seq Scan on {large:?} in:\n  {query}\n  plan: {}",
                serde_json::to_string(&plan.root).unwrap()
            );
            offenders.entry(query).or_insert(report);
        }
    }
    let missing: Vec<&str> = EXPECTED
        .iter()
        .filter(|(_, fragment)| !plans.iter().any(|p| p.query.contains(fragment)))
        .map(|(what, _)| *what)
        .collect();
    eprintln!(
        "{} statements planned; large tables: {:?}",
        plans.len(),
        seeded.rows
    );
    assert!(
        missing.is_empty(),
        "no plan seen for {missing:?} (a query was rewritten? update EXPECTED)"
    );
    assert!(
        offenders.is_empty(),
        "{} statement(s) scan a large table sequentially:\n{}",
        offenders.len(),
        offenders.into_values().collect::<Vec<_>>().join("\n")
    );
}

/// The server's own Postgres pool (its sessions have auto_explain loaded).
fn plangate_pg_pool(app: &TestApp) -> sqlx::PgPool {
    match &app.db {
        plangate::db::Database::Postgres(pool) => pool.clone(),
        plangate::db::Database::Sqlite(_) => unreachable!("a Postgres test"),
    }
}

/// Plan nodes of one kind anywhere in the tree.
fn nodes_of<'a>(node: &'a Value, kind: &str, found: &mut Vec<&'a Value>) {
    if node["Node Type"] == kind {
        found.push(node);
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        nodes_of(child, kind, found);
    }
}

/// With thousands of jobs queued, a claim reads the queue in its order from an
/// index and locks the first job, instead of reading and sorting the whole backlog
/// (which cost each claim milliseconds and most of the queue's database time,
/// bench/README.md "queue.sh"). The seeded history above has nothing queued, so
/// this test queues its own backlog, on a server without workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_takes_the_first_of_a_large_backlog_without_sorting_it() {
    install_notice_collector();
    let database = FreshDatabase::new(Backend::Postgres).await;
    let app = spawn_app_on(database, Backend::Postgres, |s| s.workers = 0).await;
    let database = app.stop_keeping_database().await;
    let url = database.url.clone();
    let name = url.rsplit('/').next().unwrap().to_owned();
    let mut conn = PgConnection::connect(&url).await.unwrap();
    // 5,000 queued jobs, a tenth of them resumed (they come first), then ANALYZE.
    sqlx::raw_sql(
        "INSERT INTO refine_jobs (id, status, phase_id, executor, executor_kind, request, \
           max_attempts, run_after, started_at, l0_total, version, created_at, updated_at, \
           budget_action) \
         SELECT gen_random_uuid(), 'queued', 'P1', 'builtin', 'builtin', '{}'::jsonb, 3, \
           now() - make_interval(secs => i), CASE WHEN i % 10 = 0 THEN now() END, 4, 1, \
           now(), now(), 'finish' \
         FROM generate_series(1, 5000) AS i; \
         ANALYZE refine_jobs",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let first: Uuid = sqlx::query_scalar(
        "SELECT id FROM refine_jobs WHERE status = 'queued' \
         ORDER BY started_at IS NULL, run_after, id LIMIT 1",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    enable_auto_explain(&url, &name).await;
    let app = spawn_app_on(database, Backend::Postgres, |s| s.workers = 0).await;

    let claimed = app
        .db
        .claim_refine_job(ClaimFor {
            worker_id: Uuid::new_v4(),
            lease_until: Utc::now() + chrono::Duration::seconds(60),
        })
        .await
        .unwrap()
        .expect("a job is claimed");
    assert_eq!(
        claimed.lease.job_id, first,
        "the queue's first job is claimed"
    );
    app.shutdown().await;

    let plans = collected_plans();
    let claim = plans
        .iter()
        .find(|p| p.query.contains("FOR UPDATE SKIP LOCKED"))
        .expect("the claim's plan is seen");
    let (mut sorts, mut scans) = (Vec::new(), Vec::new());
    nodes_of(&claim.root, "Sort", &mut sorts);
    seq_scanned(&claim.root, &mut scans);
    assert!(
        sorts.is_empty() && scans.is_empty(),
        "the claim sorts or scans the backlog: {}",
        serde_json::to_string(&claim.root).unwrap()
    );
}

/// A list just created has no statistics until it is analysed (autovacuum may be
/// minutes away, or off): the claim, heartbeat, completion, cascade and `ready`
/// statements must still find their rows by index, not by a join the planner turns
/// into a scan of `tasks` (docs/architecture.md, "Claims at scale"). A 30,000-task
/// list, never analysed, exercised under auto_explain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_writes_do_not_scan_a_list_not_yet_analysed() {
    install_notice_collector();
    let database = FreshDatabase::new(Backend::Postgres).await;
    let app = spawn_app_on(database, Backend::Postgres, |s| s.workers = 0).await;
    // Ten waves; each task after the first depends on two of the wave before. Large
    // enough that a planner without statistics still finds a scan of `tasks` dearer
    // than the index for a few dozen keys (on a few thousand it rightly scans).
    let per = 3000;
    let tasks: Vec<Value> = (0..10 * per)
        .map(|p| {
            let wave = p / per + 1;
            let deps: Vec<String> = if wave == 1 {
                Vec::new()
            } else {
                (0..2)
                    .map(|k| format!("T{}", (wave - 2) * per + (p + k) % per))
                    .collect()
            };
            json!({"task_id": format!("T{p}"), "assigned_persona": "dev",
                "parallel_group": wave, "depends_on": deps, "reads": [],
                "writes": [format!("src/part{p}.rs")], "description": "part"})
        })
        .collect();
    let created = ok_json(
        app.post_json(
            "/v1/task-lists",
            &json!({"project_id": "plans", "created_by": "test", "tasks": tasks}),
        )
        .await,
        "create",
    )
    .await;
    let list = created["id"].as_str().unwrap().to_owned();
    let database = app.stop_keeping_database().await;
    let url = database.url.clone();
    let name = url.rsplit('/').next().unwrap().to_owned();
    enable_auto_explain(&url, &name).await;
    let app = spawn_app_on(database, Backend::Postgres, |s| s.workers = 0).await;

    let claim = |mode: &'static str, holder: &'static str| {
        let (app, list) = (&app, &list);
        async move {
            let answer = ok_json(
                app.post_json(
                    &format!("/v1/task-lists/{list}/claim"),
                    &json!({"holder": holder, "mode": mode}),
                )
                .await,
                "claim",
            )
            .await;
            answer["task"]["id"].as_str().unwrap().to_owned()
        }
    };
    let first = claim("barrier", "a").await;
    let second = claim("pipeline", "b").await;
    ok_json(
        app.post_json(
            &format!("/v1/tasks/{second}/heartbeat"),
            &json!({"holder": "b"}),
        )
        .await,
        "heartbeat",
    )
    .await;
    ok_json(
        app.patch_json(
            &format!("/v1/tasks/{first}"),
            &json!({"status": "done", "holder": "a"}),
        )
        .await,
        "done",
    )
    .await;
    // A cascade over the descendants of a first-wave task.
    ok_json(
        app.patch_json(
            &format!("/v1/task-lists/{list}/tasks/T500"),
            &json!({"status": "abandoned", "abandon_category": "scope", "force": true}),
        )
        .await,
        "cascade",
    )
    .await;
    for mode in ["barrier", "pipeline"] {
        let ready = get(&app, &format!("/v1/task-lists/{list}/ready?mode={mode}")).await;
        assert_eq!(ready["next"], "dispatch", "{mode}: {ready}");
    }
    // The dashboard's page of one wave of the list, and of that wave's pending tasks.
    for query in ["wave=2", "wave=2&status=pending&cursor=p10000"] {
        let page = app.get(&format!("/ui/task-lists/{list}?{query}")).await;
        assert_eq!(page.status(), 200, "{query}");
    }
    // The list's event stream, from its first event.
    let mut events = app
        .client
        .get(app.url(&format!("/v1/task-lists/{list}/events")))
        .header("last-event-id", uuid::Uuid::nil().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    let first = events.chunk().await.unwrap().expect("an event");
    assert!(String::from_utf8_lossy(&first).contains("event: task"));
    drop(events);
    app.shutdown().await;

    let plans = collected_plans();
    assert!(
        plans.iter().any(|p| p.query.contains("task_dependencies")),
        "the task statements' plans are seen"
    );
    assert!(
        plans.iter().any(|p| p.query.contains("FROM task_events e")),
        "the event stream's plan is seen"
    );
    // The barrier claim and the holder's `done` above took the one-statement paths
    // (docs/architecture.md, "Claims at scale"), checked below like the rest.
    for cte in ["WITH lapsed AS", "WITH changed AS"] {
        assert!(
            plans.iter().any(|p| p.query.contains(cte)),
            "the one-statement plan `{cte}` is seen"
        );
    }
    // The active wave is read from its counters' partial index, whatever the
    // planner knows (db::readiness): one entry, not a walk past finished tasks.
    let wave_reads: Vec<&Value> = plans
        .iter()
        .filter(|p| p.query.contains("FROM task_wave_counts"))
        .map(|p| &p.root)
        .collect();
    assert!(!wave_reads.is_empty(), "the active wave's reads are seen");
    for root in wave_reads {
        assert!(
            serde_json::to_string(root)
                .unwrap()
                .contains("\"task_waves_unfinished\""),
            "the active wave is read from task_waves_unfinished: {root}"
        );
    }
    let offenders: Vec<String> = plans
        .iter()
        .filter_map(|plan| {
            let mut scans = Vec::new();
            seq_scanned(&plan.root, &mut scans);
            scans
                .iter()
                .any(|t| {
                    [
                        "tasks",
                        "task_dependencies",
                        "task_events",
                        "task_wave_counts",
                    ]
                    .contains(&t.as_str())
                })
                .then(|| {
                    let query = plan.query.split_whitespace().collect::<Vec<_>>().join(" ");
                    format!(
                        "{query}\n  plan: {}",
                        serde_json::to_string(&plan.root).unwrap()
                    )
                })
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "statements scan tasks or their edges: {offenders:#?}"
    );
}
