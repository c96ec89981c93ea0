//! Answers about one list stay bounded however large the list (docs/api.md,
//! "Large lists" and "Large ready sets"), on both databases: `…/ready` lists at
//! most `limit` tasks (up to 10,000 whole without it, else the first 1,000) and
//! says `more_ready`; `…/graph` draws a list of more than 10,000 tasks one node
//! per wave. Below the bounds the answers are as they always were.

use crate::common::{TestApp, server_id, task_ids};
use serde_json::{Value, json};

fn task(id: &str, wave: i64, deps: &[&str], writes: &[&str]) -> Value {
    json!({
        "task_id": id, "assigned_persona": "p", "parallel_group": wave,
        "depends_on": deps, "writes": writes, "description": format!("do {id}"),
    })
}

async fn create(app: &TestApp, tasks: Vec<Value>) -> Value {
    let body = json!({"project_id": "proj", "created_by": "pm", "tasks": tasks});
    let response = app.post_json("/v1/task-lists", &body).await;
    assert_eq!(response.status(), 201);
    response.json().await.unwrap()
}

async fn set_status(app: &TestApp, id: &str, status: &str) {
    let response = app
        .patch_json(&format!("/v1/tasks/{id}"), &json!({"status": status}))
        .await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
}

async fn ready(app: &TestApp, id: &str, query: &str) -> Value {
    let response = app.get(&format!("/v1/task-lists/{id}/ready{query}")).await;
    assert_eq!(response.status(), 200, "{query}");
    response.json().await.unwrap()
}

fn names(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}{i}")).collect()
}

async fn graph(app: &TestApp, id: &str, format: &str) -> String {
    let response = app
        .get(&format!("/v1/task-lists/{id}/graph?format={format}"))
        .await;
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

/// `limit` caps the ready tasks listed, in both modes, counting offered tasks
/// (pipeline passes over a racing write and lists the next one); `more_ready`
/// says more are ready, and is absent when all are listed. A bad `limit` is a
/// 400 naming it. MCP `ready_tasks` answers as REST without `limit`.
async fn ready_answers_take_a_limit(app: TestApp) {
    // Wave 1: t0..t5; wave 2: t6 (writes what t0 writes), t7, t8.
    let tasks: Vec<Value> = (0..9)
        .map(|i| {
            let file = format!("f{}.py", if i == 6 { 0 } else { i });
            task(&format!("t{i}"), if i < 6 { 1 } else { 2 }, &[], &[&file])
        })
        .collect();
    let list = create(&app, tasks).await;
    let id = list["id"].as_str().unwrap();

    let whole = ready(&app, id, "").await;
    assert_eq!(task_ids(&whole), names("t", 0..6));
    assert!(whole.get("more_ready").is_none(), "{whole}");
    let capped = ready(&app, id, "?limit=3").await;
    assert_eq!(task_ids(&capped), names("t", 0..3));
    assert_eq!(capped["more_ready"], true, "{capped}");
    assert_eq!(capped["next"], "dispatch");
    assert_eq!(capped["wave"], 1);
    assert_eq!(capped["remaining"]["pending"], 9, "the counts stay whole");
    let exact = ready(&app, id, "?limit=6").await;
    assert_eq!(task_ids(&exact), names("t", 0..6));
    assert!(exact.get("more_ready").is_none(), "{exact}");

    let pipeline = ready(&app, id, "?mode=pipeline&limit=6").await;
    assert_eq!(task_ids(&pipeline), names("t", 0..6));
    assert_eq!(pipeline["more_ready"], true);
    let pipeline = ready(&app, id, "?mode=pipeline&limit=7").await;
    assert_eq!(
        task_ids(&pipeline),
        ["t0", "t1", "t2", "t3", "t4", "t5", "t7"]
    );
    assert_eq!(pipeline["more_ready"], true);
    let pipeline = ready(&app, id, "?mode=pipeline&limit=8").await;
    assert_eq!(
        task_ids(&pipeline),
        ["t0", "t1", "t2", "t3", "t4", "t5", "t7", "t8"]
    );
    assert!(pipeline.get("more_ready").is_none(), "{pipeline}");

    // Claimed or started, the listed tasks make way for the next ones.
    for t in ["t0", "t1", "t2"] {
        set_status(&app, &server_id(&list, t), "running").await;
    }
    let next = ready(&app, id, "?limit=2").await;
    assert_eq!(task_ids(&next), ["t3", "t4"]);
    assert_eq!(next["more_ready"], true);

    for (query, field) in [
        ("?limit=0", Some("limit")),
        ("?limit=1001", Some("limit")),
        ("?limit=0&wait=5", Some("limit")),
        ("?limit=-1", None),
        ("?limit=ten", None),
        ("?limit=4294967296", None),
        ("?limit=", None),
    ] {
        let problem = app
            .get_problem(
                &format!("/v1/task-lists/{id}/ready{query}"),
                400,
                "invalid_query",
            )
            .await;
        if let Some(field) = field {
            assert_eq!(problem["field"], field, "{query}: {problem}");
        }
    }

    let (error, answer) = app
        .call_tool("ready_tasks", json!({"task_list_id": id}))
        .await;
    assert!(!error, "{answer}");
    assert_eq!(task_ids(&answer), names("t", 3..6));
    assert!(answer.get("more_ready").is_none(), "{answer}");
    app.shutdown().await;
}

/// At 10,000 ready tasks the answer without `limit` is whole and the graph is
/// drawn task by task, as before the bounds; at 10,001 ready the answer is the first
/// 1,000 with `more_ready` and the graph one node per wave: the first 400 waves,
/// then the later ones as one node.
async fn large_lists_answer_in_part_and_draw_waves(app: TestApp) {
    let at_bound: Vec<Value> = (0..10_000)
        .map(|i| task(&format!("a{i}"), 1, &[], &[]))
        .collect();
    let at_bound = create(&app, at_bound).await;
    let id = at_bound["id"].as_str().unwrap();
    for mode in ["barrier", "pipeline"] {
        let answer = ready(&app, id, &format!("?mode={mode}")).await;
        let listed = task_ids(&answer);
        assert_eq!(listed.len(), 10_000, "{mode}");
        assert!(
            listed == names("a", 0..10_000),
            "{mode}: every task in order"
        );
        assert!(answer.get("more_ready").is_none(), "{mode}");
    }
    let drawn = graph(&app, id, "mermaid").await;
    assert!(
        drawn.starts_with("flowchart LR\n  subgraph wave_1 [\"Wave 1\"]\n    n0[\"a0<br/>p\"]"),
        "{}",
        &drawn[..200]
    );

    // 10,003 tasks in wave 1 (10,001 left pending below), then waves 2..=450
    // of one task each after a0.
    let mut tasks: Vec<Value> = (0..10_003)
        .map(|i| task(&format!("a{i}"), 1, &[], &[]))
        .collect();
    tasks.extend((2..=450).map(|w| task(&format!("b{w}"), w, &["a0"], &[])));
    let list = create(&app, tasks).await;
    let id = list["id"].as_str().unwrap();
    let a0 = server_id(&list, "a0");
    let a1 = server_id(&list, "a1");
    set_status(&app, &a0, "running").await;
    set_status(&app, &a1, "running").await;
    set_status(&app, &a1, "done").await;

    let (error, answer) = app
        .call_tool("ready_tasks", json!({"task_list_id": id}))
        .await;
    assert!(!error);
    assert_eq!(answer["tasks"].as_array().unwrap().len(), 1_000);
    assert_eq!(answer["more_ready"], true);
    for mode in ["barrier", "pipeline"] {
        let answer = ready(&app, id, &format!("?mode={mode}")).await;
        let listed = task_ids(&answer);
        assert_eq!(listed.len(), 1_000, "{mode}");
        assert!(
            listed == names("a", 2..1002),
            "{mode}: the first 1,000 in order"
        );
        assert_eq!(answer["more_ready"], true, "{mode}");
        assert_eq!(answer["wave"], 1, "{mode}");
        assert_eq!(answer["remaining"]["pending"], 10_450, "{mode}");
        let answer = ready(&app, id, &format!("?mode={mode}&limit=5")).await;
        assert_eq!(task_ids(&answer), names("a", 2..7), "{mode}");
        assert_eq!(answer["more_ready"], true, "{mode}");
    }

    let mermaid = graph(&app, id, "mermaid").await;
    let lines: Vec<&str> = mermaid.lines().collect();
    assert_eq!(lines[0], "flowchart LR");
    assert!(
        lines[1].starts_with("  %% 10452 tasks in one node per wave"),
        "{}",
        lines[1]
    );
    assert_eq!(
        lines[2],
        "  w_1[\"Wave 1<br/>10003 tasks<br/>pending: 10001, running: 1, done: 1\"]:::st_running"
    );
    assert_eq!(
        lines[3],
        "  w_2[\"Wave 2<br/>1 task<br/>pending: 1\"]:::st_pending"
    );
    assert_eq!(
        lines[402],
        "  w_later[\"After wave 400<br/>50 tasks<br/>pending: 50\"]:::st_pending"
    );
    assert_eq!(
        mermaid.matches("\"]:::st_").count(),
        401,
        "400 waves and the later ones"
    );
    assert_eq!(mermaid.matches(" --> ").count(), 400);
    assert!(mermaid.contains("\n  w_400 --> w_later\n"), "{mermaid}");
    assert!(!mermaid.contains("a0"), "no task is drawn");

    let dot = graph(&app, id, "dot").await;
    assert!(
        dot.starts_with("digraph tasks {\n  // 10452 tasks"),
        "{}",
        &dot[..100]
    );
    assert!(
        dot.contains(
            "\n  w_1 [label=\"Wave 1\\n10003 tasks\\npending: 10001, running: 1, done: 1\", class=\"running\""
        ),
        "{}",
        &dot[..600]
    );
    assert!(
        dot.contains("\n  w_400 -> w_later;\n}\n"),
        "{}",
        &dot[dot.len() - 200..]
    );
    app.shutdown().await;
}

both_backends!(
    ready_answers_take_a_limit,
    large_lists_answer_in_part_and_draw_waves,
);
