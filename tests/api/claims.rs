//! Agents at work (docs/api.md, "Agents at work"): every ready answer says what to do `next`, ready
//! long-polls, and claims with leases let several agents share one list — on both
//! databases, over real HTTP with concurrent clients, and over MCP.

use std::collections::HashSet;
use std::time::Duration;

use crate::common::{TestApp, expect_problem, server_id, task_ids};
use serde_json::{Value, json};

fn task(id: &str, persona: &str, wave: i64, deps: &[&str]) -> Value {
    json!({
        "task_id": id, "assigned_persona": persona, "parallel_group": wave,
        "depends_on": deps, "reads": [], "writes": [format!("{id}.rs")],
        "description": format!("do {id}"),
    })
}

async fn create(app: &TestApp, tasks: Value) -> Value {
    let body = json!({"project_id": "proj", "created_by": "pm", "tasks": tasks});
    let response = app.post_json("/v1/task-lists", &body).await;
    assert_eq!(response.status(), 201);
    response.json().await.unwrap()
}

async fn ready(app: &TestApp, list: &Value, query: &str) -> Value {
    let response = app
        .get(&format!(
            "/v1/task-lists/{}/ready?{query}",
            list["id"].as_str().unwrap()
        ))
        .await;
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    body
}

async fn patch(app: &TestApp, id: &str, body: Value) -> reqwest::Response {
    app.patch_json(&format!("/v1/tasks/{id}"), &body).await
}

async fn claim(app: &TestApp, list: &Value, body: Value) -> reqwest::Response {
    app.post_json(
        &format!("/v1/task-lists/{}/claim", list["id"].as_str().unwrap()),
        &body,
    )
    .await
}

async fn claim_ok(app: &TestApp, list: &Value, body: Value) -> Value {
    let response = claim(app, list, body).await;
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    body
}

async fn history(app: &TestApp, id: &str) -> Vec<Value> {
    let response = app.get(&format!("/v1/tasks/{id}/history")).await;
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    body["events"].as_array().unwrap().clone()
}

/// t-1 → t-2 → t-3, one per wave: the pipeline case the issue quotes (t-2
/// running, t-3 pending behind it) answered `{"wave": null, "tasks": []}`.
async fn next_goes_dispatch_wait_dispatch_done_through_a_list(app: TestApp) {
    for mode in ["pipeline", "barrier"] {
        let list = create(
            &app,
            json!([
                task("t-1", "dev", 1, &[]),
                task("t-2", "dev", 2, &["t-1"]),
                task("t-3", "dev", 3, &["t-2"])
            ]),
        )
        .await;
        let query = format!("mode={mode}");
        for local in ["t-1", "t-2", "t-3"] {
            let answer = ready(&app, &list, &query).await;
            assert_eq!(answer["next"], "dispatch", "{mode}: {answer}");
            assert_eq!(task_ids(&answer), [local], "{mode}: {answer}");
            let id = server_id(&list, local);
            assert_eq!(
                patch(&app, &id, json!({"status": "running"}))
                    .await
                    .status(),
                200
            );

            let answer = ready(&app, &list, &query).await;
            assert_eq!(answer["next"], "wait", "{mode}: {answer}");
            assert_eq!(answer["tasks"], json!([]), "{answer}");
            assert_eq!(answer["in_flight"], 1, "{answer}");
            assert!(answer["retry_after_s"].as_u64().unwrap() >= 1, "{answer}");
            assert_eq!(answer["remaining"]["running"], 1, "{answer}");
            assert_eq!(
                patch(&app, &id, json!({"status": "done"})).await.status(),
                200
            );
        }
        let answer = ready(&app, &list, &query).await;
        assert_eq!(answer["next"], "done", "{mode}: {answer}");
        assert_eq!(answer["remaining"]["done"], 3, "{answer}");
        assert_eq!(answer["remaining"]["pending"], 0, "{answer}");
    }
}

/// a fails: b and c are cascade-abandoned. Nothing is ready or running, but the
/// list did not finish its work: `blocked`, naming the tasks and the failure.
async fn next_is_blocked_when_a_failure_cascades(app: TestApp) {
    let list = create(
        &app,
        json!([
            task("a", "dev", 1, &[]),
            task("b", "dev", 2, &["a"]),
            task("c", "dev", 3, &["b"]),
            task("x", "dev", 1, &[])
        ]),
    )
    .await;
    let a = server_id(&list, "a");
    let x = server_id(&list, "x");
    for id in [&a, &x] {
        assert_eq!(
            patch(&app, id, json!({"status": "running"})).await.status(),
            200
        );
    }
    assert_eq!(
        patch(&app, &x, json!({"status": "done"})).await.status(),
        200
    );
    assert_eq!(
        patch(&app, &a, json!({"status": "failed"})).await.status(),
        200
    );
    for mode in ["pipeline", "barrier"] {
        let answer = ready(&app, &list, &format!("mode={mode}")).await;
        assert_eq!(answer["next"], "blocked", "{answer}");
        let blocked: Vec<&str> = answer["blocked"]
            .as_array()
            .unwrap_or_else(|| panic!("no blocked list: {answer}"))
            .iter()
            .map(|b| b["task_id"].as_str().unwrap())
            .collect();
        assert_eq!(blocked, ["b", "c"], "{answer}");
        for b in answer["blocked"].as_array().unwrap() {
            assert_eq!(b["because_of"], "a", "{answer}");
            assert!(b["reason"].as_str().unwrap().contains('a'), "{answer}");
        }
        assert_eq!(answer["remaining"]["abandoned"], 2, "{answer}");
        assert_eq!(answer["remaining"]["failed"], 1, "{answer}");
    }
}

/// `?wait=N` answers as soon as a task becomes ready, not after N seconds; with
/// nothing changing it answers `wait` once N is over.
async fn ready_long_polls_until_something_is_ready(app: TestApp) {
    let list = create(
        &app,
        json!([task("t-1", "dev", 1, &[]), task("t-2", "dev", 2, &["t-1"])]),
    )
    .await;
    let first = server_id(&list, "t-1");
    assert_eq!(
        patch(&app, &first, json!({"status": "running"}))
            .await
            .status(),
        200
    );

    let unchanged = ready(&app, &list, "mode=pipeline&wait=1").await;
    assert_eq!(unchanged["next"], "wait", "{unchanged}");

    // The long-poll waits on another replica than the one the change is made on.
    let replica = app.spawn_replica(|_| {}).await;
    let poll = {
        let (client, url) = (
            app.client.clone(),
            format!(
                "{}/v1/task-lists/{}/ready?mode=pipeline&wait=20",
                replica.base,
                list["id"].as_str().unwrap()
            ),
        );
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let body: Value = client.get(url).send().await.unwrap().json().await.unwrap();
            (body, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        patch(&app, &first, json!({"status": "done"}))
            .await
            .status(),
        200
    );
    let (answer, took) = poll.await.unwrap();
    assert_eq!(answer["next"], "dispatch", "{answer}");
    assert_eq!(task_ids(&answer), ["t-2"], "{answer}");
    eprintln!(
        "{:?}: long-poll on replica B answered {took:?} after it started (change made on A at 300 ms)",
        app.backend
    );
    replica.shutdown().await;

    let problem = app
        .get_problem(
            &format!(
                "/v1/task-lists/{}/ready?wait=31",
                list["id"].as_str().unwrap()
            ),
            400,
            "invalid_query",
        )
        .await;
    assert!(
        problem["detail"].as_str().unwrap().contains("wait"),
        "{problem}"
    );
}

/// Four agents claim the only task of a list at once: exactly one gets it.
async fn four_concurrent_claims_of_one_task_give_it_to_one(app: TestApp) {
    let list = create(&app, json!([task("only", "dev", 1, &[])])).await;
    let mut claims = Vec::new();
    for n in 0..4 {
        let (client, url) = (
            app.client.clone(),
            app.url(&format!(
                "/v1/task-lists/{}/claim",
                list["id"].as_str().unwrap()
            )),
        );
        claims.push(tokio::spawn(async move {
            let response = client
                .post(url)
                .json(&json!({"holder": format!("agent-{n}")}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.unwrap()
        }));
    }
    let mut winners = Vec::new();
    for claim in claims {
        let answer = claim.await.unwrap();
        if answer["task"].is_object() {
            assert_eq!(answer["next"], "dispatch", "{answer}");
            winners.push(answer);
        } else {
            assert_eq!(answer["next"], "wait", "{answer}");
            assert_eq!(answer["in_flight"], 1, "{answer}");
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let task = &winners[0]["task"];
    assert_eq!(task["status"], "running");
    assert_eq!(task["attempts"], 1);
    assert!(
        task["claim"]["holder"]
            .as_str()
            .unwrap()
            .starts_with("agent-")
    );
}

/// 16 agents drain a 200-task list (4 waves of 50, barrier rule) at once, half of
/// them through a second replica on the same database. Some claims are dropped
/// without a word (the agent "dies"): their short lease expires and another agent
/// takes the task. Every task is completed exactly once.
async fn sixteen_claimers_share_a_200_task_list(app: TestApp) {
    let mut tasks = Vec::new();
    for wave in 1..=4i64 {
        for n in 0..50 {
            let id = format!("w{wave}-{n}");
            let dep = format!("w{}-{n}", wave - 1);
            let deps: Vec<&str> = if wave > 1 { vec![dep.as_str()] } else { vec![] };
            tasks.push(task(
                &id,
                if n % 2 == 0 { "dev" } else { "qa" },
                wave,
                &deps,
            ));
        }
    }
    let list = create(&app, Value::Array(tasks)).await;
    // SQLite is single-node (docs/deployment): a second replica only on Postgres.
    let replica = match app.backend {
        crate::common::Backend::Postgres => Some(app.spawn_replica(|_| {}).await),
        crate::common::Backend::Sqlite => None,
    };
    let started = std::time::Instant::now();
    let mut agents = Vec::new();
    for agent in 0..16 {
        let base = match &replica {
            Some(replica) if agent % 2 == 1 => replica.base.clone(),
            _ => app.base.clone(),
        };
        let claim_url = format!(
            "{base}/v1/task-lists/{}/claim",
            list["id"].as_str().unwrap()
        );
        let client = app.client.clone();
        agents.push(tokio::spawn(async move {
            let holder = format!("agent-{agent}");
            let (mut completed, mut dropped, mut late) = (Vec::new(), 0, 0);
            for round in 0.. {
                assert!(round < 5000, "{holder}: the list never finished");
                let response = client
                    .post(&claim_url)
                    .json(&json!({"holder": holder, "lease_s": 2}))
                    .send()
                    .await
                    .unwrap();
                let status = response.status();
                let answer: Value = response.json().await.unwrap();
                assert_eq!(status, 200, "{holder}: claim: {answer}");
                match answer["next"].as_str().unwrap() {
                    "done" => break,
                    "wait" => {
                        let s = answer["retry_after_s"].as_u64().unwrap();
                        assert!(s >= 1, "{answer}");
                        // As docs/api.md says: long-poll ready rather than spin.
                        let ready_url = claim_url.replace("/claim", "/ready?wait=2");
                        let _ = client.get(&ready_url).send().await.unwrap();
                        continue;
                    }
                    "dispatch" => {}
                    other => panic!("{holder}: next {other}: {answer}"),
                }
                let id = answer["task"]["id"].as_str().unwrap().to_owned();
                // Agents 0 and 1 drop every fifth claim: they stop renewing it.
                if agent < 2 && (completed.len() + dropped) % 5 == 4 {
                    dropped += 1;
                    continue;
                }
                let response = client
                    .patch(format!("{base}/v1/tasks/{id}"))
                    .json(&json!({"status": "done", "holder": holder}))
                    .send()
                    .await
                    .unwrap();
                match response.status().as_u16() {
                    200 => completed.push(id),
                    // The lease ran out under load before the completion came in.
                    409 => late += 1,
                    s => panic!("{holder}: PATCH {s}: {}", response.text().await.unwrap()),
                }
            }
            (completed, dropped, late)
        }));
    }
    let (mut completed, mut dropped, mut late) = (Vec::new(), 0, 0);
    for agent in agents {
        let (c, d, l) = agent.await.unwrap();
        completed.extend(c);
        dropped += d;
        late += l;
    }
    let elapsed = started.elapsed();
    if let Some(replica) = replica {
        replica.shutdown().await;
    }
    let distinct: HashSet<&String> = completed.iter().collect();
    assert_eq!(completed.len(), 200, "each task completed once");
    assert_eq!(distinct.len(), 200);
    assert!(dropped > 0);
    let mut expiries = 0;
    let mut claims = 0;
    for t in list["tasks"].as_array().unwrap() {
        let events = history(&app, t["id"].as_str().unwrap()).await;
        let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
        let count = |k: &str| kinds.iter().filter(|x| **x == k).count();
        assert_eq!(count("claimed"), count("lease_expired") + 1, "{kinds:?}");
        expiries += count("lease_expired");
        claims += count("claimed");
        let done = events.iter().filter(|e| e["to_status"] == "done").count();
        assert_eq!(done, 1, "{events:?}");
    }
    assert!(expiries >= dropped, "{expiries} < {dropped}");
    eprintln!(
        "{:?}: 200 tasks, 16 agents on {} replica(s), {claims} claims, {dropped} dropped, {expiries} leases expired, {late} late completions refused, {elapsed:?}",
        app.backend,
        if app.backend == crate::common::Backend::Postgres {
            2
        } else {
            1
        }
    );
    let answer = ready(&app, &list, "").await;
    assert_eq!(answer["next"], "done", "{answer}");
}

/// While claimed, a change must name the holder (409 names who holds it); `force`
/// overrides and is recorded; heartbeats renew; an expired lease returns the task.
async fn claims_name_their_holder_and_expire(app: TestApp) {
    let list = create(
        &app,
        json!([task("a", "dev", 1, &[]), task("b", "qa", 1, &[])]),
    )
    .await;
    let a = server_id(&list, "a");
    let b = server_id(&list, "b");

    // The persona picks the task assigned to it, not the first ready one.
    let got = claim_ok(
        &app,
        &list,
        json!({"holder": "agent-q", "persona": "qa", "lease_s": 60}),
    )
    .await;
    assert_eq!(got["task"]["task_id"], "b", "{got}");
    let got = claim_ok(&app, &list, json!({"holder": "agent-d", "lease_s": 1})).await;
    assert_eq!(got["task"]["task_id"], "a", "{got}");
    assert_eq!(got["task"]["claim"]["holder"], "agent-d", "{got}");

    for body in [
        json!({"status": "done"}),
        json!({"status": "done", "holder": "agent-x"}),
    ] {
        let problem = expect_problem(patch(&app, &b, body).await, 409, "task_claimed").await;
        assert_eq!(problem["holder"], "agent-q", "{problem}");
        assert!(
            problem["detail"].as_str().unwrap().contains("agent-q"),
            "{problem}"
        );
    }
    let hb = app
        .post_json(
            &format!("/v1/tasks/{b}/heartbeat"),
            &json!({"holder": "agent-x"}),
        )
        .await;
    let problem = expect_problem(hb, 409, "task_claimed").await;
    assert_eq!(problem["holder"], "agent-q", "{problem}");
    let hb = app
        .post_json(
            &format!("/v1/tasks/{b}/heartbeat"),
            &json!({"holder": "agent-q", "lease_s": 120}),
        )
        .await;
    assert_eq!(hb.status(), 200);
    let renewed: Value = hb.json().await.unwrap();
    assert_eq!(renewed["claim"]["holder"], "agent-q", "{renewed}");

    let forced = patch(&app, &b, json!({"status": "abandoned", "abandon_category": "scope", "holder": "orchestrator", "force": true})).await;
    assert_eq!(forced.status(), 200);
    let events = history(&app, &b).await;
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "status_changed", "{events:?}");
    assert_eq!(last["forced"], true, "{events:?}");
    assert_eq!(last["holder"], "orchestrator", "{events:?}");
    assert_eq!(last["overrode"], "agent-q", "{events:?}");
    assert!(events.iter().any(|e| e["kind"] == "renewed"), "{events:?}");

    // agent-d stops renewing: after its second the task is pending again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let answer = ready(&app, &list, "").await;
    assert_eq!(task_ids(&answer), ["a"], "{answer}");
    let got = claim_ok(&app, &list, json!({"holder": "agent-e"})).await;
    assert_eq!(got["task"]["task_id"], "a", "{got}");
    assert_eq!(got["task"]["attempts"], 2, "{got}");
    let late = patch(&app, &a, json!({"status": "done", "holder": "agent-d"})).await;
    let problem = expect_problem(late, 409, "task_claimed").await;
    assert_eq!(problem["holder"], "agent-e", "{problem}");
    let events = history(&app, &a).await;
    let kinds: Vec<(&str, &str)> = events
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap(),
                e["holder"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("claimed", "agent-d"),
            ("lease_expired", "agent-d"),
            ("claimed", "agent-e")
        ],
        "{events:?}"
    );
    let done = patch(&app, &a, json!({"status": "done", "holder": "agent-e"})).await;
    assert_eq!(done.status(), 200);
    let answer = claim_ok(&app, &list, json!({"holder": "agent-e"})).await;
    assert_eq!(answer["next"], "done", "{answer}");
    assert!(answer["task"].is_null(), "{answer}");
}

async fn bad_claims_name_the_field(app: TestApp) {
    let list = create(&app, json!([task("a", "dev", 1, &[])])).await;
    for (body, field) in [
        (json!({"holder": ""}), "holder"),
        (json!({"holder": "a\u{7}b"}), "holder"),
        (json!({"holder": "x", "lease_s": 0}), "lease_s"),
        (json!({"holder": "x", "lease_s": 86401}), "lease_s"),
        (json!({"holder": "x", "persona": ""}), "persona"),
    ] {
        let problem =
            expect_problem(claim(&app, &list, body.clone()).await, 422, "invalid_field").await;
        assert_eq!(problem["field"], field, "{body}: {problem}");
    }
    let problem = expect_problem(claim(&app, &list, json!({})).await, 422, "invalid_body").await;
    assert!(
        problem["detail"].as_str().unwrap().contains("holder"),
        "{problem}"
    );
    app.post_problem(
        &format!("/v1/task-lists/{}/claim", uuid::Uuid::now_v7()),
        &json!({"holder": "x"}),
        404,
        "not_found",
    )
    .await;
    let a = server_id(&list, "a");
    app.post_problem(
        &format!("/v1/tasks/{a}/heartbeat"),
        &json!({"holder": "x"}),
        409,
        "task_not_claimed",
    )
    .await;
    let problem = expect_problem(
        patch(&app, &a, json!({"status": "running", "force": "yes"})).await,
        422,
        "invalid_body",
    )
    .await;
    assert!(
        problem["detail"].as_str().unwrap().contains("force"),
        "{problem}"
    );
}

/// The same over MCP: ready_tasks says next, claim_task, heartbeat_task, and
/// set_task_status checking the holder.
async fn mcp_agents_claim_and_complete(app: TestApp) {
    let (error, created) = app
        .call_tool(
            "create_task_list",
            json!({"project_id": "proj", "created_by": "pm",
        "tasks": [task("a", "dev", 1, &[]), task("b", "dev", 2, &["a"])]}),
        )
        .await;
    assert!(!error, "{created}");
    let list = created["task_list_id"].clone();
    let (error, answer) = app
        .call_tool("ready_tasks", json!({"task_list_id": list}))
        .await;
    assert!(!error, "{answer}");
    assert_eq!(answer["next"], "dispatch", "{answer}");

    let (error, got) = app
        .call_tool(
            "claim_task",
            json!({"task_list_id": list, "holder": "agent-1", "lease_s": 60}),
        )
        .await;
    assert!(!error, "{got}");
    assert_eq!(got["task"]["task_id"], "a", "{got}");
    let id = got["task"]["id"].clone();
    let (error, other) = app
        .call_tool(
            "claim_task",
            json!({"task_list_id": list, "holder": "agent-2"}),
        )
        .await;
    assert!(!error, "{other}");
    assert_eq!(other["next"], "wait", "{other}");
    assert!(other["task"].is_null(), "{other}");
    let (error, beat) = app
        .call_tool(
            "heartbeat_task",
            json!({"task_id": id, "holder": "agent-1"}),
        )
        .await;
    assert!(!error, "{beat}");
    let (error, refused) = app
        .call_tool(
            "set_task_status",
            json!({"task_id": id, "status": "done", "holder": "agent-2"}),
        )
        .await;
    assert!(error, "{refused}");
    assert_eq!(refused["code"], "task_claimed", "{refused}");
    assert_eq!(refused["holder"], "agent-1", "{refused}");
    let (error, done) = app
        .call_tool(
            "set_task_status",
            json!({"task_id": id, "status": "done", "holder": "agent-1"}),
        )
        .await;
    assert!(!error, "{done}");
    let (error, answer) = app
        .call_tool(
            "ready_tasks",
            json!({"task_list_id": list, "wait_seconds": 1}),
        )
        .await;
    assert!(!error, "{answer}");
    assert_eq!(answer["next"], "dispatch", "{answer}");
    assert_eq!(answer["remaining"]["done"], 1, "{answer}");
}

/// Rows of `task_wave_counts` that disagree with the tasks they count (its
/// unfinished tasks by wave and stripe), or tasks no row counts: 0 when the
/// counters every write keeps (db::readiness) are true.
async fn wave_counts_off(app: &TestApp) -> i64 {
    let sql = "SELECT (SELECT COUNT(*) FROM task_wave_counts w WHERE w.unfinished <> \
                 (SELECT COUNT(*) FROM tasks t WHERE t.task_list_id = w.task_list_id \
                  AND t.parallel_group = w.parallel_group AND t.position % 16 = w.stripe \
                  AND t.status IN ('pending', 'running'))) \
             + (SELECT COUNT(*) FROM tasks t WHERE NOT EXISTS (SELECT 1 FROM task_wave_counts w \
                  WHERE w.task_list_id = t.task_list_id AND w.parallel_group = t.parallel_group \
                  AND w.stripe = t.position % 16))";
    match &app.db {
        plangate::db::Database::Postgres(pool) => {
            sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
        }
        plangate::db::Database::Sqlite(sqlite) => sqlx::query_scalar(sql)
            .fetch_one(&sqlite.pool)
            .await
            .unwrap(),
    }
}

/// Sets the task `claimed` (a claim answer) holds to `status`, as its `holder`.
async fn finish_claimed(app: &TestApp, claimed: &Value, status: &str, holder: &str) {
    let id = claimed["task"]["id"].as_str().unwrap();
    let response = patch(app, id, json!({"status": status, "holder": holder})).await;
    assert_eq!(response.status(), 200, "{status} {claimed}");
}

/// The barrier's active wave is kept as data (docs/architecture.md, "Claims at
/// scale"): it moves past a wave a cascade emptied, holds while a lapsed lease puts
/// a task back, and every kind of write (claim, one-statement and transactional
/// `done`, failure, cascade, lease expiry) keeps the counters true.
async fn the_barrier_passes_a_wave_a_cascade_emptied(app: TestApp) {
    let list = create(
        &app,
        json!([
            task("a", "dev", 1, &[]),
            task("x", "dev", 1, &[]),
            task("b", "dev", 2, &["a"]),
            task("c", "dev", 2, &["a"]),
            task("z", "dev", 3, &["x"])
        ]),
    )
    .await;
    let barrier = json!({"holder": "h", "mode": "barrier"});
    let a = claim_ok(&app, &list, barrier.clone()).await;
    assert_eq!(a["task"]["task_id"], "a", "{a}");
    let x = claim_ok(&app, &list, barrier.clone()).await;
    assert_eq!(x["task"]["task_id"], "x", "{x}");
    finish_claimed(&app, &a, "failed", "h").await;
    assert_eq!(wave_counts_off(&app).await, 0);
    let answer = ready(&app, &list, "mode=barrier").await;
    assert_eq!(answer["next"], "wait", "x still runs in wave 1: {answer}");
    finish_claimed(&app, &x, "done", "h").await;
    let answer = ready(&app, &list, "mode=barrier").await;
    assert_eq!(answer["next"], "dispatch", "{answer}");
    assert_eq!(
        answer["wave"], 3,
        "wave 2 was emptied by the cascade: {answer}"
    );
    assert_eq!(task_ids(&answer), ["z"], "{answer}");

    // A lapsed lease puts z back in wave 3, which stays the active wave.
    let z = claim_ok(&app, &list, json!({"holder": "h", "lease_s": 1})).await;
    assert_eq!(z["task"]["task_id"], "z", "{z}");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let answer = ready(&app, &list, "mode=barrier").await;
    assert_eq!(answer["wave"], 3, "{answer}");
    assert_eq!(task_ids(&answer), ["z"], "{answer}");
    let z = claim_ok(&app, &list, json!({"holder": "k"})).await;
    assert_eq!(z["task"]["task_id"], "z", "{z}");
    assert_eq!(wave_counts_off(&app).await, 0);
    finish_claimed(&app, &z, "done", "k").await;
    let answer = ready(&app, &list, "mode=barrier").await;
    assert_eq!(answer["next"], "blocked", "{answer}");
    assert_eq!(wave_counts_off(&app).await, 0);
}

both_backends!(
    the_barrier_passes_a_wave_a_cascade_emptied,
    next_goes_dispatch_wait_dispatch_done_through_a_list,
    next_is_blocked_when_a_failure_cascades,
    ready_long_polls_until_something_is_ready,
    four_concurrent_claims_of_one_task_give_it_to_one,
    sixteen_claimers_share_a_200_task_list,
    claims_name_their_holder_and_expire,
    bad_claims_name_the_field,
    mcp_agents_claim_and_complete,
);

/// History entries are stamped once the list is locked, not before the wait for the
/// lock: a claim that queued behind another writer is dated after that writer let
/// go, so the history (ordered by `at`) follows the order the writes took, and its
/// lease runs from when it was granted. (16 `plangate mcp` processes on one SQLite
/// file, tests/mcp_client/agents.py, once showed a claim listed before the expiry
/// that had freed its task.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_waited_for_the_lock_is_dated_when_it_got_it() {
    let app = crate::common::spawn_app_with(crate::common::Backend::Sqlite, |s| {
        s.request_timeout = Duration::from_secs(120);
    })
    .await;
    let list = create(&app, json!([task("a", "dev", 1, &[])])).await;
    // Another process holds SQLite's write lock for a while (under busy_timeout).
    let mut other = crate::common::hold_sqlite_write_lock(&app).await;
    let claiming = claim_ok(&app, &list, json!({"holder": "queued", "lease_s": 60}));
    let releasing = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let released = chrono::Utc::now();
        sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
        released
    };
    let (answer, released) = tokio::join!(claiming, releasing);
    let task = answer["task"]["id"].as_str().unwrap().to_owned();
    let entries = history(&app, &task).await;
    assert_eq!(entries.len(), 1, "{entries:?}");
    let at = |v: &Value| chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap()).unwrap();
    let claimed = at(&entries[0]["at"]);
    assert!(
        claimed >= released,
        "claimed at {claimed}, before the lock was released at {released}"
    );
    let lease = at(&entries[0]["lease_expires_at"]) - claimed;
    assert_eq!(lease.num_seconds(), 60, "{entries:?}");
    app.shutdown().await;
}
