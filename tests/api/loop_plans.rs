//! Loop plans over HTTP on both databases: JSON and plan.md generation, the parse
//! round trip, and invalid DAGs / documents.

use crate::common::{TestApp, expect_problem};
use serde_json::{Value, json};

/// `examples/loop_plan_request.json`: a track, phases, tasks and a completed track.
fn example() -> Value {
    serde_json::from_str(include_str!("../../examples/loop_plan_request.json")).unwrap()
}

async fn generate_groups_every_level_in_natural_order(app: TestApp) {
    let plan: Value = app
        .post_for_json("/v1/loop-plans/generate", &example())
        .await;
    let groups = plan["dag"]["parallel_groups"].as_array().unwrap();
    let tasks: Vec<Value> = groups.iter().map(|g| g["tasks"].clone()).collect();
    assert_eq!(
        tasks,
        [
            json!(["1.1", "1.2"]),
            json!(["1.3", "1.10"]),
            json!(["2.1", "2.2"])
        ]
    );
    assert_eq!(groups[0]["id"], "pg-1");
    assert!(groups.iter().all(|g| g["conflict_free"] == true));
    assert_eq!(plan["execution_mode"], "PARALLEL");
    let types: Vec<(String, String)> = plan["dag"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["id"].as_str().unwrap().to_owned(),
                n["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(types.contains(&("1.10".into(), "test".into())));
    assert!(types.contains(&("2.1".into(), "docs".into())));
    assert!(types.contains(&("2.2".into(), "integration".into())));
    assert_eq!(plan["summary"]["total_tasks"], 6);
    assert_eq!(plan["summary"]["parallel_groups"], 3);
    assert_eq!(plan["summary"]["max_concurrency"], 2);

    // A chain gets a group per single-task level and runs sequentially; a file shared
    // within a level is coordinated.
    let chain = json!({
        "track": {"id": "t", "name": "T", "spec": "s", "dependencies": []},
        "phases": [{"number": 1, "name": "P"}],
        "tasks": [
            {"id": "1.1", "name": "a", "description": "", "files": ["src/x.rs"], "depends_on": [], "phase": 1},
            {"id": "1.2", "name": "b", "description": "", "files": ["src/y.rs"], "depends_on": ["1.1"], "phase": 1},
        ],
        "completed_tracks": [{"id": "old-track", "deliverables": ["src/y.rs"]}],
    });
    let plan: Value = app.post_for_json("/v1/loop-plans/generate", &chain).await;
    assert_eq!(plan["dag"]["parallel_groups"].as_array().unwrap().len(), 2);
    assert_eq!(plan["execution_mode"], "SEQUENTIAL");
    assert_eq!(plan["overlap"][0]["task_id"], "1.2");
    assert_eq!(
        plan["overlap"][0]["reason"],
        "SKIP — already done in old-track"
    );
    let mut shared = chain.clone();
    shared["tasks"][1]["depends_on"] = json!([]);
    shared["tasks"][1]["files"] = json!(["src/x.rs"]);
    let plan: Value = app.post_for_json("/v1/loop-plans/generate", &shared).await;
    let group = &plan["dag"]["parallel_groups"][0];
    assert_eq!(group["conflict_free"], false);
    assert_eq!(group["shared_resources"], json!(["src/x.rs"]));
    assert_eq!(group["coordination_strategy"], "file_lock");
    app.shutdown().await;
}

async fn yaml_requests_plan_like_json(app: TestApp) {
    let from_json: Value = app
        .post_for_json("/v1/loop-plans/generate", &example())
        .await;
    // The same request as YAML (ids quoted: an unquoted 1.10 is the number 1.1).
    let mut yaml = String::new();
    yaml.push_str("track: {id: auth-cache_20261130, name: Per-tenant token cache, spec: Cache tokens per tenant and retry idempotent calls, dependencies: [tenancy_20261120]}\n");
    yaml.push_str("phases: [{number: 1, name: Core}, {number: 2, name: Polish}]\ntasks:\n");
    for task in example()["tasks"].as_array().unwrap() {
        yaml.push_str(&format!("  - {}\n", serde_json::to_string(task).unwrap()));
    }
    yaml.push_str("completed_tracks: [{id: tenancy_20261120, name: Tenancy, deliverables: [src/tenancy/model.py]}]\n");
    let response = app
        .post_body("/v1/loop-plans/generate", "application/yaml", yaml)
        .await;
    assert_eq!(response.status(), 200);
    let from_yaml: Value = response.json().await.unwrap();
    assert_eq!(from_yaml["dag"], from_json["dag"]);
    app.shutdown().await;
}

async fn markdown_round_trips_through_parse(app: TestApp) {
    let json_plan: Value = app
        .post_for_json("/v1/loop-plans/generate", &example())
        .await;
    let response = app
        .client
        .post(app.url("/v1/loop-plans/generate"))
        .header("accept", "text/markdown")
        .json(&example())
        .send()
        .await
        .unwrap();
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/markdown")
    );
    let markdown = response.text().await.unwrap();
    for needle in [
        "## Context",
        "```yaml",
        "```mermaid",
        "- [ ] Task 1.1",
        "## Discovered Work",
    ] {
        assert!(markdown.contains(needle), "{needle} in {markdown}");
    }
    // Mark progress, then parse it back.
    let marked = markdown
        .replace("- [ ] Task 1.1:", "- [x] Task 1.1:")
        .replace("- [ ] Task 1.3:", "- [~] Task 1.3:");
    let parsed = app
        .post_body("/v1/loop-plans/parse", "text/markdown", marked)
        .await;
    assert_eq!(parsed.status(), 200);
    let parsed: Value = parsed.json().await.unwrap();
    assert_eq!(
        parsed["dag"], json_plan["dag"],
        "the DAG survives the round trip"
    );
    assert_eq!(parsed["progress"]["counts"]["done"], 1);
    assert_eq!(parsed["progress"]["counts"]["in_progress"], 1);
    app.shutdown().await;
}

async fn invalid_dags_and_documents_are_4xx(app: TestApp) {
    let mut cyclic = example();
    cyclic["tasks"][0]["depends_on"] = json!(["1.3"]);
    let problem = app
        .post_problem("/v1/loop-plans/generate", &cyclic, 422, "dag_invalid")
        .await;
    let cycle = problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["code"] == "cycle")
        .expect("a cycle error");
    assert_eq!(cycle["cycle"], json!(["1.1", "1.3"]), "{cycle}");
    let mut orphan = example();
    orphan["tasks"][1]["depends_on"] = json!(["9.9"]);
    let problem = app
        .post_problem("/v1/loop-plans/generate", &orphan, 422, "dag_invalid")
        .await;
    assert_eq!(problem["errors"][0]["code"], "orphan_dependency");
    let mut duplicate = example();
    duplicate["tasks"][1]["id"] = json!("1.1");
    let problem = app
        .post_problem("/v1/loop-plans/generate", &duplicate, 422, "dag_invalid")
        .await;
    assert_eq!(problem["errors"][0]["code"], "duplicate_task_id");
    let mut missing = example();
    missing["tasks"][2].as_object_mut().unwrap().remove("name");
    let problem = app
        .post_problem("/v1/loop-plans/generate", &missing, 422, "dag_invalid")
        .await;
    assert_eq!(problem["errors"][0]["code"], "missing_field");
    app.post_problem(
        "/v1/loop-plans/generate",
        &json!({"phases": [], "tasks": []}),
        422,
        "invalid_body",
    )
    .await;

    let garbage = app
        .post_body(
            "/v1/loop-plans/parse",
            "text/markdown",
            "# plan\n```yaml\ndag: [unclosed\n```\n",
        )
        .await;
    expect_problem(garbage, 422, "invalid_plan_markdown").await;
    // The JSON form takes `{"markdown": text}` and nothing else.
    app.post_problem(
        "/v1/loop-plans/parse",
        &json!({"dag": {}}),
        422,
        "invalid_body",
    )
    .await;
    app.post_problem(
        "/v1/loop-plans/parse",
        &json!({"markdown": "# plan\n```yaml\ndag: [unclosed\n```\n"}),
        422,
        "invalid_plan_markdown",
    )
    .await;
    let as_xml = app
        .post_body("/v1/loop-plans/parse", "application/xml", "<plan/>")
        .await;
    expect_problem(as_xml, 415, "unsupported_media_type").await;
    let not_utf8 = app
        .post_body(
            "/v1/loop-plans/parse",
            "text/markdown",
            vec![0xff, 0xfe, 0x00],
        )
        .await;
    expect_problem(not_utf8, 400, "invalid_utf8").await;
    app.shutdown().await;
}

both_backends!(
    generate_groups_every_level_in_natural_order,
    yaml_requests_plan_like_json,
    markdown_round_trips_through_parse,
    invalid_dags_and_documents_are_4xx,
);

#[test]
fn plan_command_prints_markdown_and_json() {
    let bin = env!("CARGO_BIN_EXE_plangate");
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/loop_plan_request.json"
    );
    let md = std::process::Command::new(bin)
        .args(["plan", file])
        .output()
        .unwrap();
    assert!(md.status.success());
    assert!(String::from_utf8_lossy(&md.stdout).contains("- [ ] Task 1.10:"));
    let json = std::process::Command::new(bin)
        .args(["plan", file, "--format", "json"])
        .output()
        .unwrap();
    let plan: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(plan["dag"]["parallel_groups"].as_array().unwrap().len(), 3);
    let dir = tempfile::tempdir().unwrap();
    let cyclic = dir.path().join("cyclic.yaml");
    std::fs::write(&cyclic, "track: {id: t, name: T, spec: s, dependencies: []}\nphases: [{number: 1, name: P}]\ntasks:\n  - {id: '1.1', name: a, description: '', files: [], depends_on: ['1.1'], phase: 1}\n").unwrap();
    let bad = std::process::Command::new(bin)
        .arg("plan")
        .arg(&cyclic)
        .output()
        .unwrap();
    assert_eq!(
        bad.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cycle"));
    let missing = std::process::Command::new(bin)
        .args(["plan", "/nonexistent.json"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
}
