//! Scoping at the edges (docs/api.md, "Idempotency" and "Tokens"), on both databases: idempotency keys are
//! per project and per token, so one project's creates neither replay nor block
//! another's; task-list creates with a key are safe to retry (one list, one
//! counted rejection), also when the retries race.

use crate::common::{self, ADMIN, Backend, TOKEN_A, TOKEN_B, TestApp, one_phase_plan};
use serde_json::{Value, json};

async fn spawn(backend: Backend) -> TestApp {
    // No workers: jobs stay queued; only their creation is under test.
    common::spawn_app_with_project_tokens(backend, |s| s.workers = 0).await
}

fn job(project: &str, task_text: &str) -> Value {
    json!({
        "context": {"schema_version": 1, "phase_id": "P1", "assignments": [one_phase_plan()["assignments"][0].clone()]},
        "refined_plan": one_phase_plan(),
        "task_text": task_text,
        "project_id": project,
    })
}

fn run(project: &str) -> Value {
    json!({"plan": one_phase_plan(), "project_id": project})
}

/// POST `body` with a bearer token and an `Idempotency-Key`; answers (status,
/// replayed header, body).
async fn post_keyed(
    app: &TestApp,
    path: &str,
    token: Option<&str>,
    key: &str,
    body: &Value,
) -> (u16, bool, Value) {
    let mut request = app
        .client
        .post(app.url(path))
        .header("Idempotency-Key", key)
        .json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("POST");
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    (status, replayed, response.json().await.expect("JSON body"))
}

async fn idempotency_keys_are_scoped_by_project_and_token(backend: Backend) {
    let app = spawn(backend).await;
    let jobs = "/v1/refine-jobs";
    let (status, replayed, first_a) =
        post_keyed(&app, jobs, Some(TOKEN_A), "shared", &job("proj-a", "A")).await;
    assert_eq!((status, replayed), (202, false), "{first_a}");

    // Project B's create with the same key is its own, whatever its body.
    let (status, replayed, first_b) =
        post_keyed(&app, jobs, Some(TOKEN_B), "shared", &job("proj-b", "B")).await;
    assert_eq!((status, replayed), (202, false), "{first_b}");
    assert_ne!(first_b["id"], first_a["id"]);
    assert_eq!(first_b["project_id"], "proj-b");

    // Within A, the key still replays A's job, and still refuses another body.
    let (status, replayed, again) =
        post_keyed(&app, jobs, Some(TOKEN_A), "shared", &job("proj-a", "A")).await;
    assert_eq!((status, replayed), (202, true), "{again}");
    assert_eq!(again["id"], first_a["id"]);
    let (status, _, reused) =
        post_keyed(&app, jobs, Some(TOKEN_A), "shared", &job("proj-a", "other")).await;
    assert_eq!(status, 422, "{reused}");
    assert_eq!(reused["code"], "idempotency_key_reused", "{reused}");

    // Another token on the same project does not replay A's job: keys are per
    // token too (docs/api.md, "Idempotency"); its own retries replay its own.
    let (status, replayed, admins) =
        post_keyed(&app, jobs, Some(ADMIN), "shared", &job("proj-a", "A")).await;
    assert_eq!((status, replayed), (202, false), "{admins}");
    assert_ne!(admins["id"], first_a["id"]);
    let (status, replayed, admins_again) =
        post_keyed(&app, jobs, Some(ADMIN), "shared", &job("proj-a", "A")).await;
    assert_eq!((status, replayed), (202, true), "{admins_again}");
    assert_eq!(admins_again["id"], admins["id"]);

    // Refine runs likewise.
    let runs = "/v1/refine-runs";
    let (status, replayed, run_a) =
        post_keyed(&app, runs, Some(TOKEN_A), "run-key", &run("proj-a")).await;
    assert_eq!((status, replayed), (202, false), "{run_a}");
    let (status, replayed, run_b) =
        post_keyed(&app, runs, Some(TOKEN_B), "run-key", &run("proj-b")).await;
    assert_eq!((status, replayed), (202, false), "{run_b}");
    assert_ne!(run_b["id"], run_a["id"]);
    let (status, replayed, run_a_again) =
        post_keyed(&app, runs, Some(TOKEN_A), "run-key", &run("proj-a")).await;
    assert_eq!((status, replayed), (202, true), "{run_a_again}");
    assert_eq!(run_a_again["id"], run_a["id"]);
    app.shutdown().await;
}

fn diamond() -> Value {
    json!([
        {"task_id": "a", "assigned_persona": "p1", "parallel_group": 1, "writes": ["a.py"], "description": "a"},
        {"task_id": "b", "assigned_persona": "p2", "parallel_group": 2, "depends_on": ["a"], "reads": ["a.py"], "writes": ["b.py"], "description": "b"},
        {"task_id": "c", "assigned_persona": "p3", "parallel_group": 2, "depends_on": ["a"], "reads": ["a.py"], "writes": ["c.py"], "description": "c"},
        {"task_id": "d", "assigned_persona": "p4", "parallel_group": 3, "depends_on": ["b", "c"], "reads": ["b.py", "c.py"], "description": "d"},
    ])
}

fn list_body(project: &str, tasks: Value) -> Value {
    json!({"project_id": project, "team_pk": "c1", "created_by": "pm", "tasks": tasks})
}

/// A list the gate rejects (`dag_invalid`: a task depends on itself).
fn cyclic() -> Value {
    json!([{"task_id": "a", "assigned_persona": "p", "parallel_group": 1, "depends_on": ["a"], "description": "a"}])
}

async fn pending_tasks(app: &TestApp, project: &str) -> Value {
    let status: Value = app
        .get_json(&format!("/v1/projects/{project}/status"))
        .await;
    status["counts"]["pending"].clone()
}

async fn task_list_creates_replay_by_key(app: TestApp) {
    let lists = "/v1/task-lists";
    let body = list_body("proj", diamond());
    let (status, replayed, first) = post_keyed(&app, lists, None, "list-1", &body).await;
    assert_eq!((status, replayed), (201, false), "{first}");

    // The same call again answers the first list, as first answered (201).
    let (status, replayed, again) = post_keyed(&app, lists, None, "list-1", &body).await;
    assert_eq!((status, replayed), (201, true), "{again}");
    assert_eq!(again, first);
    // The key may come in the body instead (as for refine jobs).
    let mut with_field = body.clone();
    with_field["idempotency_key"] = json!("list-1");
    let response = app.post_json(lists, &with_field).await;
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    assert_eq!(response.json::<Value>().await.unwrap()["id"], first["id"]);
    // One list: project_status counts its tasks once.
    assert_eq!(pending_tasks(&app, "proj").await, 4);

    // Another body with the key is refused, and stores nothing.
    let other = list_body("proj", json!([diamond()[0].clone()]));
    let (status, _, reused) = post_keyed(&app, lists, None, "list-1", &other).await;
    assert_eq!(status, 422, "{reused}");
    assert_eq!(reused["code"], "idempotency_key_reused", "{reused}");
    assert_eq!(pending_tasks(&app, "proj").await, 4);

    // The key is the project's: another project's create with it is its own.
    let (status, replayed, elsewhere) =
        post_keyed(&app, lists, None, "list-1", &list_body("proj-2", diamond())).await;
    assert_eq!((status, replayed), (201, false), "{elsewhere}");
    assert_ne!(elsewhere["id"], first["id"]);

    // Bad keys are refused, naming what to do.
    let (status, _, blank) = post_keyed(&app, lists, None, " ", &body).await;
    assert_eq!(status, 422, "{blank}");
    assert_eq!(blank["code"], "invalid_idempotency_key", "{blank}");
    let mut differ = body.clone();
    differ["idempotency_key"] = json!("list-2");
    let (status, _, differ) = post_keyed(&app, lists, None, "list-1", &differ).await;
    assert_eq!(status, 422, "{differ}");
    assert_eq!(differ["code"], "invalid_idempotency_key", "{differ}");
    app.shutdown().await;
}

async fn task_list_replays_count_no_retry(app: TestApp) {
    let lists = "/v1/task-lists";
    let bad = list_body("proj", cyclic());
    let (status, _, first) = post_keyed(&app, lists, None, "bad-1", &bad).await;
    assert_eq!(status, 422, "{first}");
    assert_eq!(first["code"], "dag_invalid");
    assert_eq!(
        (&first["attempt"], &first["escalate"]),
        (&json!(1), &json!(false))
    );

    // A retry of that call gets the same answer: not a second rejection.
    let (status, _, replay) = post_keyed(&app, lists, None, "bad-1", &bad).await;
    assert_eq!(status, 422, "{replay}");
    assert_eq!(replay["code"], "dag_invalid");
    assert_eq!(
        (&replay["attempt"], &replay["escalate"]),
        (&json!(1), &json!(false))
    );
    assert_eq!(replay["replayed"], true, "{replay}");
    assert_eq!(replay["reprompt"], first["reprompt"]);
    // The next real rejection is the second.
    let second = app.post_problem(lists, &bad, 422, "dag_invalid").await;
    assert_eq!(second["attempt"], 2, "{second}");

    // An accepted list resets the count; replaying it does not reset it again.
    let good = list_body("proj", diamond());
    let (status, _, accepted) = post_keyed(&app, lists, None, "good-1", &good).await;
    assert_eq!(status, 201, "{accepted}");
    let after = app.post_problem(lists, &bad, 422, "dag_invalid").await;
    assert_eq!(after["attempt"], 1, "{after}");
    let (status, replayed, _) = post_keyed(&app, lists, None, "good-1", &good).await;
    assert_eq!((status, replayed), (201, true));
    let next = app.post_problem(lists, &bad, 422, "dag_invalid").await;
    assert_eq!(next["attempt"], 2, "the replay reset the count: {next}");
    assert_eq!(pending_tasks(&app, "proj").await, 4);
    app.shutdown().await;
}

async fn racing_keyed_creates_make_one_list(app: TestApp) {
    let body = list_body("proj", diamond());
    let answers = futures::future::join_all(
        (0..8).map(|_| post_keyed(&app, "/v1/task-lists", None, "race-1", &body)),
    )
    .await;
    for (status, _, list) in &answers {
        assert_eq!(*status, 201, "{list}");
        assert_eq!(
            list["id"], answers[0].2["id"],
            "every answer is the one list"
        );
    }
    let firsts = answers.iter().filter(|(_, replayed, _)| !replayed).count();
    assert_eq!(firsts, 1, "exactly one create is not a replay");
    assert_eq!(pending_tasks(&app, "proj").await, 4);

    // Racing rejections with one key count once.
    let bad = list_body("proj", cyclic());
    let answers = futures::future::join_all(
        (0..8).map(|_| post_keyed(&app, "/v1/task-lists", None, "race-bad", &bad)),
    )
    .await;
    for (status, _, problem) in &answers {
        assert_eq!(*status, 422, "{problem}");
        assert_eq!(problem["attempt"], 1, "{problem}");
    }
    let next = app
        .post_problem("/v1/task-lists", &bad, 422, "dag_invalid")
        .await;
    assert_eq!(next["attempt"], 2, "{next}");
    app.shutdown().await;
}

/// The `UPDATE` statements of migration 0009 for the app's back-end (the key
/// rewrite), run on its database as they run at upgrade.
async fn rewrite_keys_as_0009_does(app: &TestApp) {
    let dir = match app.backend {
        Backend::Postgres => "postgres",
        Backend::Sqlite => "sqlite",
    };
    let path = format!(
        "{}/migrations/{dir}/0009_scoped_idempotency_and_track_projects.sql",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).expect("migration 0009");
    let code: String = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    let updates: Vec<String> = code
        .split(';')
        .map(str::trim)
        .filter(|s| s.starts_with("UPDATE"))
        .map(str::to_owned)
        .collect();
    assert_eq!(updates.len(), 2, "{updates:?}");
    for update in updates {
        with_connection!(app, conn => {
            sqlx::query(sqlx::AssertSqlSafe(update))
                .execute(conn)
                .await
                .unwrap();
        });
    }
}

/// Keys stored before the scoping are rewritten by migration 0009 into the form
/// a caller with auth off sends, so a retry across the upgrade still replays
/// (also for keys holding `"` and `\`, which JSON escapes).
async fn keys_stored_before_the_scoping_still_replay(app: TestApp) {
    let key = r#"legacy "key" \ 1"#;
    let mut created = Vec::new();
    for body in [job("proj-a", "A"), {
        let mut loose = job("proj-a", "A");
        loose.as_object_mut().unwrap().remove("project_id");
        loose
    }] {
        let (status, _, job) = post_keyed(&app, "/v1/refine-jobs", None, key, &body).await;
        assert_eq!(status, 202, "{job}");
        created.push((body, job["id"].clone()));
    }
    // As stored before migration 0009: the bare key.
    let unscoped = "UPDATE refine_jobs SET idempotency_key = $1 WHERE id = $2";
    for (n, (_, id)) in created.iter().enumerate() {
        let id = uuid::Uuid::parse_str(id.as_str().unwrap()).unwrap();
        let bare = format!("{key}{n}");
        with_connection!(app, conn => {
            sqlx::query(unscoped)
                .bind(&bare)
                .bind(id)
                .execute(conn)
                .await
                .unwrap();
        });
    }
    rewrite_keys_as_0009_does(&app).await;
    for (n, (body, id)) in created.iter().enumerate() {
        let bare = format!("{key}{n}");
        let (status, replayed, again) =
            post_keyed(&app, "/v1/refine-jobs", None, &bare, body).await;
        assert_eq!((status, replayed), (202, true), "{again}");
        assert_eq!(&again["id"], id);
    }
    app.shutdown().await;
}

both_backends!(
    keys_stored_before_the_scoping_still_replay,
    idempotency_keys_are_scoped_by_project_and_token,
    task_list_creates_replay_by_key,
    task_list_replays_count_no_retry,
    racing_keyed_creates_make_one_list,
);
