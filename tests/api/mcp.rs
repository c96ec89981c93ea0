//! The MCP endpoint over real HTTP on both databases (docs/mcp.md): bearer auth as
//! for `/v1`, project limits on tool calls, the read-only surface, what malformed
//! JSON-RPC and oversized requests get, and the tools' input schemas. The whole
//! flow is driven by the official Python SDK (`.ci/mcp.sh`).

use crate::common::{self, Backend, TestApp, expect_problem};
use plangate::config::ApiToken;
use serde_json::{Value, json};

use crate::common::{ADMIN, LIMITED};

async fn spawn(backend: Backend) -> TestApp {
    common::spawn_app_with_tokens(backend).await
}

/// POST one raw body to an MCP endpoint, as a Streamable HTTP client does.
async fn post_raw(
    app: &TestApp,
    path: &str,
    token: Option<&str>,
    body: String,
) -> reqwest::Response {
    let mut request = app
        .client
        .post(app.url(path))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("POST /mcp")
}

/// A JSON-RPC request as `token`: the response object.
async fn rpc(app: &TestApp, path: &str, token: &str, method: &str, params: Value) -> Value {
    app.mcp_rpc(path, Some(token), method, params).await
}

/// Call a tool as `token`; answers (is_error, the JSON its text carries).
async fn call_tool(
    app: &TestApp,
    path: &str,
    token: &str,
    name: &str,
    arguments: Value,
) -> (bool, Value) {
    app.call_tool_as(path, Some(token), name, arguments).await
}

/// [`call_tool`] on `/mcp`.
async fn call_mcp(app: &TestApp, token: &str, name: &str, arguments: Value) -> (bool, Value) {
    call_tool(app, "/mcp", token, name, arguments).await
}

fn tool_names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|tool| tool["name"].as_str().expect("name").to_owned())
        .collect();
    names.sort();
    names
}

fn two_tasks() -> Value {
    json!([
        {"task_id": "t-1", "assigned_persona": "dev", "parallel_group": 1, "writes": ["a.py"], "description": "x"},
        {"task_id": "t-2", "assigned_persona": "rev", "parallel_group": 2, "depends_on": ["t-1"], "reads": ["a.py"], "description": "y"},
    ])
}

async fn tokens_are_checked_as_on_v1(app: TestApp) {
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    for path in ["/mcp", "/mcp/readonly"] {
        for (token, reason) in [
            (None, "no bearer token"),
            (Some("not-a-token"), "the bearer token is not valid"),
        ] {
            let response = post_raw(&app, path, token, list.clone()).await;
            // The reason, where clients that drop a 401's body still see it (RFC 6750).
            let challenge = crate::common::header(&response, "www-authenticate");
            assert!(
                challenge.starts_with("Bearer realm=\"plangate\""),
                "{challenge}"
            );
            assert!(
                challenge.contains(&format!("error_description=\"{reason}")),
                "{challenge}"
            );
            assert_eq!(
                challenge.contains("error=\"invalid_token\""),
                token.is_some(),
                "{challenge}"
            );
            // The body: the problem's members, and a JSON-RPC error the MCP SDK shows.
            assert_eq!(response.status(), 401);
            assert_eq!(response.headers()["content-type"], "application/json");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["code"], "unauthorized", "{body}");
            assert_eq!(body["status"], 401, "{body}");
            assert!(
                body["detail"].as_str().unwrap().starts_with(reason),
                "{body}"
            );
            assert_eq!(body["jsonrpc"], "2.0", "{body}");
            assert!(body["id"].is_null(), "{body}");
            assert!(
                body["error"]["message"].as_str().unwrap().contains(reason),
                "{body}"
            );
        }
    }
    // No OAuth metadata is published: clients then use the static header.
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-authorization-server",
    ] {
        app.get_problem(path, 404, "route_not_found").await;
    }
    // The same tokens as /v1 pass.
    for token in [ADMIN, LIMITED] {
        let answer = rpc(&app, "/mcp", token, "tools/list", json!({})).await;
        assert_eq!(tool_names(&answer).len(), 15, "{answer}");
    }
    app.shutdown().await;
}

async fn limited_tokens_stay_in_their_projects(app: TestApp) {
    // A project-limited token sees the same tools...
    let admin_tools = tool_names(&rpc(&app, "/mcp", ADMIN, "tools/list", json!({})).await);
    let limited_tools = tool_names(&rpc(&app, "/mcp", LIMITED, "tools/list", json!({})).await);
    assert_eq!(admin_tools, limited_tools);

    // ...and its calls are limited as on REST.
    let create =
        |project: &str| json!({"project_id": project, "created_by": "pm", "tasks": two_tasks()});
    let (error, own) = call_mcp(&app, LIMITED, "create_task_list", create("proj-a")).await;
    assert!(!error, "{own}");
    let (error, other) = call_mcp(&app, ADMIN, "create_task_list", create("proj-b")).await;
    assert!(!error, "{other}");
    let other_list = other["task_list_id"].clone();
    let other_task = other["tasks"][0]["id"].clone();

    let (error, refused) = call_mcp(&app, LIMITED, "create_task_list", create("proj-b")).await;
    assert!(error, "{refused}");
    assert_eq!(refused["code"], "forbidden_project", "{refused}");
    for (path, tool, arguments) in [
        ("/mcp", "ready_tasks", json!({"task_list_id": other_list})),
        (
            "/mcp/readonly",
            "ready_tasks",
            json!({"task_list_id": other_list}),
        ),
        ("/mcp", "project_status", json!({"project_id": "proj-b"})),
        (
            "/mcp",
            "set_task_status",
            json!({"task_id": other_task, "status": "running"}),
        ),
    ] {
        let (error, refused) = call_tool(&app, path, LIMITED, tool, arguments).await;
        assert!(error, "{tool}: {refused}");
        assert_eq!(refused["code"], "forbidden_project", "{tool}: {refused}");
    }
    // The refused status change changed nothing.
    let (error, ready) = call_mcp(
        &app,
        ADMIN,
        "ready_tasks",
        json!({"task_list_id": other_list}),
    )
    .await;
    assert!(!error, "{ready}");
    assert_eq!(ready["tasks"][0]["id"], other_task, "{ready}");
    let (_, status) = call_mcp(
        &app,
        ADMIN,
        "project_status",
        json!({"project_id": "proj-b"}),
    )
    .await;
    assert_eq!(status["counts"]["running"], 0, "{status}");
    app.shutdown().await;
}

async fn the_read_only_surface_changes_nothing(app: TestApp) {
    let names = tool_names(&rpc(&app, "/mcp/readonly", ADMIN, "tools/list", json!({})).await);
    assert_eq!(
        names,
        [
            "plan_loop",
            "project_status",
            "ready_tasks",
            "refine_status",
            "track_history",
            "validate_task_list"
        ]
    );
    let answer = rpc(
        &app,
        "/mcp/readonly",
        ADMIN,
        "tools/call",
        json!({"name": "create_task_list", "arguments": {"project_id": "proj-a", "created_by": "pm", "tasks": two_tasks()}}),
    )
    .await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    // The refusal says why, and where writes go.
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("read-only endpoint") && message.contains("call create_task_list on /mcp"),
        "{message}"
    );
    assert_eq!(answer["error"]["data"]["writes_go_to"], "/mcp", "{answer}");
    // A tool that exists nowhere is still just unknown.
    let unknown = rpc(
        &app,
        "/mcp/readonly",
        ADMIN,
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {}}),
    )
    .await;
    assert_eq!(unknown["error"]["message"], "unknown tool: no_such_tool");
    // Nothing was created: the project is still unknown.
    let (error, status) = call_mcp(
        &app,
        ADMIN,
        "project_status",
        json!({"project_id": "proj-a"}),
    )
    .await;
    assert!(error, "{status}");
    assert_eq!(status["code"], "project_not_found", "{status}");
    app.shutdown().await;
}

async fn malformed_jsonrpc_gets_jsonrpc_errors(app: TestApp) {
    // Not JSON: a parse error.
    let response = post_raw(
        &app,
        "/mcp",
        Some(ADMIN),
        "{\"jsonrpc\": \"2.0\", ".to_owned(),
    )
    .await;
    assert_eq!(response.status(), 400);
    let message: Value = response.json().await.expect("JSON-RPC error");
    assert_eq!(message["error"]["code"], -32700, "{message}");
    assert_eq!(message["id"], Value::Null);
    // JSON that is no JSON-RPC message: an invalid request.
    for body in [json!([1, 2]), json!({"hello": "world"}), json!("text")] {
        let response = post_raw(&app, "/mcp", Some(ADMIN), body.to_string()).await;
        assert_eq!(response.status(), 400, "{body}");
        let message: Value = response.json().await.expect("JSON-RPC error");
        assert_eq!(message["error"]["code"], -32600, "{body}: {message}");
    }
    // An unknown method: method not found.
    let answer = rpc(&app, "/mcp", ADMIN, "tasks/explode", json!({})).await;
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    // A known method with unusable params: invalid params.
    for params in [
        json!("x"),
        json!({"name": 5}),
        json!({"name": "ready_tasks", "arguments": [1]}),
    ] {
        let answer = rpc(&app, "/mcp", ADMIN, "tools/call", params.clone()).await;
        assert_eq!(answer["error"]["code"], -32602, "{params}: {answer}");
    }
    // An unknown tool: invalid params (the MCP spec's answer).
    let answer = rpc(
        &app,
        "/mcp",
        ADMIN,
        "tools/call",
        json!({"name": "drop_tables", "arguments": {}}),
    )
    .await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    // A malformed id: invalid_field naming it (more in tasks_are_named_by_planner_or_server_id).
    for arguments in [
        json!({"task_list_id": "not-a-uuid"}),
        json!({"task_list_id": 5}),
    ] {
        let (error, problem) = call_mcp(&app, ADMIN, "ready_tasks", arguments.clone()).await;
        assert!(error, "{arguments}: {problem}");
        assert_eq!(problem["code"], "invalid_field", "{arguments}: {problem}");
        assert_eq!(problem["field"], "task_list_id", "{arguments}: {problem}");
    }
    // Arguments of the wrong type: a tool error with the REST code.
    for (tool, arguments) in [
        (
            "set_task_status",
            json!({"task_id": "0190c2b4-0000-7000-8000-000000000000", "status": "finished"}),
        ),
        (
            "validate_task_list",
            json!({"tasks": two_tasks(), "bogus": true}),
        ),
        (
            "refine_status",
            json!({"job_id": "0190c2b4-0000-7000-8000-000000000000", "wait_seconds": -1}),
        ),
        (
            "track_step",
            json!({"track_id": "t", "step": "PLAN", "action": "jump"}),
        ),
    ] {
        let (error, problem) = call_mcp(&app, ADMIN, tool, arguments.clone()).await;
        assert!(error, "{tool} {arguments}: {problem}");
        assert_eq!(
            problem["code"], "invalid_body",
            "{tool} {arguments}: {problem}"
        );
    }
    // Refusals of the service carry the REST code.
    let (error, problem) = call_mcp(&app, ADMIN, "validate_task_list", json!({})).await;
    assert!(error);
    assert_eq!(problem["code"], "invalid_body", "{problem}");
    let missing = json!({"task_list_id": "0190c2b4-0000-7000-8000-000000000000"});
    let (error, problem) = call_mcp(&app, ADMIN, "ready_tasks", missing).await;
    assert!(error);
    assert_eq!(problem["code"], "not_found", "{problem}");
    // The server still answers after all of it.
    let (error, _) = call_mcp(
        &app,
        ADMIN,
        "validate_task_list",
        json!({"tasks": two_tasks()}),
    )
    .await;
    assert!(!error);
    app.shutdown().await;
}

async fn every_schema_says_what_is_required(app: TestApp) {
    let list = rpc(&app, "/mcp", ADMIN, "tools/list", json!({})).await;
    let required_by_tool = [
        ("validate_task_list", vec![]),
        ("create_task_list", vec!["created_by", "project_id"]),
        ("ready_tasks", vec!["task_list_id"]),
        ("set_task_status", vec!["status", "task_id"]),
        ("project_status", vec!["project_id"]),
        ("plan_loop", vec!["phases", "tasks", "track"]),
        ("import_track", vec!["metadata", "track_id"]),
        ("track_step", vec!["action", "step", "track_id"]),
        ("start_refine", vec!["context", "refined_plan"]),
        ("refine_status", vec!["job_id"]),
        ("cancel_refine", vec!["job_id"]),
        ("retry_refine_job", vec!["job_id"]),
        ("track_history", vec!["track_id"]),
        ("claim_task", vec!["holder", "task_list_id"]),
        ("heartbeat_task", vec!["holder", "task_id"]),
    ];
    let tools = list["result"]["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), required_by_tool.len());
    for (name, required) in required_by_tool {
        let tool = tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no tool {name}"));
        assert!(
            tool["description"].as_str().is_some_and(|d| d.len() > 20),
            "{tool}"
        );
        let schema = &tool["inputSchema"];
        assert_eq!(schema["type"], "object", "{name}");
        let mut listed: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        listed.sort();
        assert_eq!(listed, required, "{name}: {schema}");
        let properties = schema["properties"].as_object().expect("properties");
        for (field, property) in properties {
            assert!(
                property["description"]
                    .as_str()
                    .is_some_and(|d| !d.is_empty()),
                "{name}.{field} has no description: {property}"
            );
        }
        let read_only = tool["annotations"]["readOnlyHint"] == true;
        let expected = matches!(
            name,
            "validate_task_list"
                | "ready_tasks"
                | "project_status"
                | "plan_loop"
                | "refine_status"
                | "track_history"
        );
        assert_eq!(read_only, expected, "{name}");
    }
    app.shutdown().await;
}

async fn oversized_requests_are_413(app: TestApp) {
    let big = "x".repeat(8 * 1024);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "validate_task_list", "arguments": {"planner_output": big}}});
    let response = post_raw(&app, "/mcp", Some(ADMIN), body.to_string()).await;
    expect_problem(response, 413, "body_too_large").await;
    // Chunked (no Content-Length): the same status.
    let chunks = vec![Ok::<_, std::io::Error>(body.to_string().into_bytes())];
    let response = app
        .client
        .post(app.url("/mcp"))
        .bearer_auth(ADMIN)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await;
    // The body may be lost to a reset once the server has answered; the status is
    // the contract.
    if let Ok(response) = response {
        assert_eq!(response.status(), 413);
    }
    // A request under the limit still works.
    let answer = rpc(&app, "/mcp", ADMIN, "tools/list", json!({})).await;
    assert_eq!(tool_names(&answer).len(), 15);
    app.shutdown().await;
}

async fn small_limit(backend: Backend) -> TestApp {
    common::spawn_app_with(backend, |s| {
        s.api_tokens = vec![ApiToken::unrestricted(ADMIN)];
        s.body_limit = 4096;
    })
    .await
}

/// Naming a task (docs/mcp.md, "The tools"): `set_task_status` and `heartbeat_task` take the planner's
/// `task_id` with `task_list_id`, or the server id alone; every malformed id is a
/// tool error naming its field and which id to pass.
async fn tasks_are_named_by_planner_or_server_id(app: TestApp) {
    let (error, created) = call_mcp(
        &app,
        ADMIN,
        "create_task_list",
        json!({"project_id": "proj-a", "created_by": "pm", "tasks": two_tasks()}),
    )
    .await;
    assert!(!error, "{created}");
    let list = created["task_list_id"].as_str().unwrap().to_owned();
    let t2 = created["tasks"][1]["id"].as_str().unwrap().to_owned();
    let call = |tool: &'static str, arguments: Value| {
        let app = &app;
        async move { call_mcp(app, ADMIN, tool, arguments).await }
    };

    // Claim t-1, renew it and finish it by its planner id.
    let (error, claimed) = call(
        "claim_task",
        json!({"task_list_id": list, "holder": "agent-1"}),
    )
    .await;
    assert!(!error, "{claimed}");
    assert_eq!(claimed["task"]["task_id"], "t-1", "{claimed}");
    let (error, renewed) = call(
        "heartbeat_task",
        json!({"task_id": "t-1", "task_list_id": list, "holder": "agent-1"}),
    )
    .await;
    assert!(!error, "{renewed}");
    assert_eq!(renewed["claim"]["holder"], "agent-1", "{renewed}");
    let (error, done) = call(
        "set_task_status",
        json!({"task_id": "t-1", "task_list_id": list, "status": "done", "holder": "agent-1"}),
    )
    .await;
    assert!(!error, "{done}");
    assert_eq!(done["task"]["task_id"], "t-1");
    assert_eq!(done["task"]["status"], "done");
    // The server id alone still works, and with its list too.
    let (error, running) = call(
        "set_task_status",
        json!({"task_id": t2, "status": "running"}),
    )
    .await;
    assert!(!error, "{running}");
    assert_eq!(running["task"]["task_id"], "t-2");
    let (error, failed) = call(
        "set_task_status",
        json!({"task_id": t2, "task_list_id": list, "status": "failed"}),
    )
    .await;
    assert!(!error, "{failed}");
    assert_eq!(failed["task"]["status"], "failed");

    // Refusals: (code, field, a phrase of the detail) and the (tool, arguments)
    // refused so.
    let unknown_list = uuid::Uuid::now_v7().to_string();
    let refusals = [
        (
            ("invalid_field", "task_list_id", "create_task_list"),
            vec![
                // A planner id without its list: say to pass task_list_id, and where it is.
                (
                    "set_task_status",
                    json!({"task_id": "t-1", "status": "running"}),
                ),
                (
                    "heartbeat_task",
                    json!({"task_id": "t-1", "holder": "agent-1"}),
                ),
                // A task_list_id that is no UUID.
                (
                    "set_task_status",
                    json!({"task_id": "t-1", "task_list_id": "t-1", "status": "running"}),
                ),
                // Every other id argument.
                ("ready_tasks", json!({"task_list_id": "t-1"})),
                ("ready_tasks", json!({"task_list_id": 5})),
                (
                    "claim_task",
                    json!({"task_list_id": "x", "holder": "agent-1"}),
                ),
            ],
        ),
        // A task_list_id that is no list.
        (
            ("not_found", "task_list_id", "does not exist"),
            vec![
                (
                    "set_task_status",
                    json!({"task_id": "t-1", "task_list_id": unknown_list, "status": "running"}),
                ),
                (
                    "heartbeat_task",
                    json!({"task_id": "t-1", "task_list_id": unknown_list, "holder": "agent-1"}),
                ),
            ],
        ),
        // A planner id the list does not hold; a task_id that is no string.
        (
            ("not_found", "task_id", "t-9"),
            vec![(
                "set_task_status",
                json!({"task_id": "t-9", "task_list_id": list, "status": "running"}),
            )],
        ),
        (
            ("invalid_field", "task_id", "planner"),
            vec![(
                "set_task_status",
                json!({"task_id": 1, "task_list_id": list, "status": "running"}),
            )],
        ),
        (
            ("invalid_field", "job_id", "start_refine"),
            vec![
                ("refine_status", json!({"job_id": "job-1"})),
                ("cancel_refine", json!({"job_id": {"id": 1}})),
                ("retry_refine_job", json!({"job_id": 7})),
            ],
        ),
    ];
    for ((code, field, phrase), calls) in refusals {
        for (tool, arguments) in calls {
            let (error, refused) = call(tool, arguments.clone()).await;
            assert!(error, "{tool} {arguments}: {refused}");
            assert_eq!(refused["code"], code, "{tool} {arguments}: {refused}");
            assert_eq!(refused["field"], field, "{tool} {arguments}: {refused}");
            let detail = refused["detail"].as_str().unwrap();
            assert!(detail.contains(phrase), "{tool} {arguments}: {detail}");
            assert!(!detail.contains("UUID parsing failed"), "{detail}");
        }
    }
    // The refusals changed nothing: t-2 is still failed, t-1 done.
    let (_, status) = call("project_status", json!({"project_id": "proj-a"})).await;
    assert_eq!(status["counts"]["done"], 1, "{status}");
    assert_eq!(status["counts"]["failed"], 1, "{status}");
    assert_eq!(status["counts"]["running"], 0, "{status}");
    app.shutdown().await;
}

/// No workers: a submitted job stays queued until the test moves it.
async fn spawn_without_workers(backend: Backend) -> TestApp {
    common::spawn_app_with(backend, |s| {
        s.api_tokens = vec![ApiToken::unrestricted(ADMIN)];
        s.workers = 0;
    })
    .await
}

/// `retry_refine_job` is `POST /v1/refine-jobs/{id}/retry` as a tool: an ended job
/// that did not succeed is retried once, as a new job naming it in `retry_of`.
async fn retry_refine_job_retries_an_ended_job_once(app: TestApp) {
    let call = |tool: &'static str, arguments: Value| {
        let app = &app;
        async move { call_mcp(app, ADMIN, tool, arguments).await }
    };
    let body = crate::refine_jobs::body(&["P1-A1"]);
    let (error, started) = call(
        "start_refine",
        json!({"context": body["context"], "refined_plan": body["refined_plan"]}),
    )
    .await;
    assert!(!error, "{started}");
    let job_id = started["job_id"].as_str().expect("job_id").to_owned();
    // Not ended yet: refused, naming its status.
    let (error, refused) = call("retry_refine_job", json!({"job_id": job_id})).await;
    assert!(error, "{refused}");
    assert_eq!(
        (&refused["code"], &refused["job_status"]),
        (&json!("job_not_retryable"), &json!("queued")),
        "{refused}"
    );
    let (error, cancelled) = call("cancel_refine", json!({"job_id": job_id})).await;
    assert!(!error && cancelled["status"] == "cancelled", "{cancelled}");

    let (error, retried) = call("retry_refine_job", json!({"job_id": job_id})).await;
    assert!(!error, "{retried}");
    assert_eq!(retried["status"], "queued", "{retried}");
    let new_id = retried["job_id"].as_str().expect("the new job's id");
    assert_ne!(new_id, job_id);
    let job: Value = app
        .client
        .get(app.url(&format!("/v1/refine-jobs/{new_id}")))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("GET job")
        .json()
        .await
        .expect("JSON");
    assert_eq!(job["retry_of"], job_id.as_str(), "{job}");
    // Once only.
    let (error, again) = call("retry_refine_job", json!({"job_id": job_id})).await;
    assert!(error, "{again}");
    assert_eq!(again["code"], "job_not_retryable", "{again}");
    assert!(
        again["detail"].as_str().is_some_and(|d| d.contains(new_id)),
        "{again}"
    );
    app.shutdown().await;
}

/// docs/mcp.md, `project_status`: project_status names an unknown project or cycle.
async fn project_status_names_what_is_unknown(app: TestApp) {
    for path in ["/mcp", "/mcp/readonly"] {
        let (error, refused) = call_tool(
            &app,
            path,
            ADMIN,
            "project_status",
            json!({"project_id": "ghost"}),
        )
        .await;
        assert!(error, "{refused}");
        assert_eq!(refused["code"], "project_not_found", "{refused}");
        assert_eq!(refused["field"], "project_id", "{refused}");
    }
    let (error, _) = call_mcp(&app, ADMIN, "create_task_list",
        json!({"project_id": "proj-a", "team_pk": "cycle-1", "created_by": "pm", "tasks": two_tasks()}),
    )
    .await;
    assert!(!error);
    let (error, refused) = call_mcp(
        &app,
        ADMIN,
        "project_status",
        json!({"project_id": "proj-a", "team_pk": "cycle-2"}),
    )
    .await;
    assert!(error, "{refused}");
    assert_eq!(refused["code"], "team_not_found", "{refused}");
    assert_eq!(refused["field"], "team_pk", "{refused}");
    let (error, status) = call_mcp(
        &app,
        ADMIN,
        "project_status",
        json!({"project_id": "proj-a", "team_pk": "cycle-1"}),
    )
    .await;
    assert!(!error, "{status}");
    assert_eq!(status["scope"], "cycle");
    assert_eq!(status["counts"]["pending"], 2, "{status}");
    // The limited token learns nothing of other projects, known or not.
    let (_, refused) = call_mcp(
        &app,
        LIMITED,
        "project_status",
        json!({"project_id": "ghost"}),
    )
    .await;
    assert_eq!(refused["code"], "forbidden_project", "{refused}");
    app.shutdown().await;
}

macro_rules! on_both {
    ($($name:ident => $spawn:expr),+ $(,)?) => {$(
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name($spawn(Backend::Sqlite).await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name($spawn(Backend::Postgres).await).await;
            }
        }
    )+};
}

/// Tracks belong to projects on MCP as on REST (docs/mcp.md).
async fn limited_tokens_step_only_their_tracks(app: TestApp) {
    for (id, project) in [("mcp-a", "proj-a"), ("mcp-b", "proj-b")] {
        let doc = json!({"track_id": id, "type": "feature", "status": "new",
                         "created_at": "2026-11-30T09:00:00Z", "updated_at": "2026-11-30T09:00:00Z"});
        let response = app
            .client
            .put(app.url(&format!("/v1/tracks/{id}?project_id={project}")))
            .bearer_auth(ADMIN)
            .json(&doc)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
    }
    let start =
        |id: &str| json!({"track_id": id, "step": "PLAN", "action": "start", "agent": "a1"});
    let (error, refused) = call_mcp(&app, LIMITED, "track_step", start("mcp-b")).await;
    assert!(error, "{refused}");
    assert_eq!(refused["code"], "forbidden_project", "{refused}");
    let (error, own) = call_mcp(&app, LIMITED, "track_step", start("mcp-a")).await;
    assert!(!error, "{own}");
    assert_eq!(own["step_status"], "IN_PROGRESS", "{own}");
    // The refused step changed nothing.
    let (error, other) = call_mcp(&app, ADMIN, "track_step", start("mcp-b")).await;
    assert!(!error, "{other}");
    assert_eq!(other["revision"], 2, "{other}");
    app.shutdown().await;
}

/// `create_task_list` with `idempotency_key`: a repeated call answers the first
/// list (with `replayed: true`) and stores nothing more; the key is the token's.
async fn create_task_list_replays_by_key(app: TestApp) {
    let args = json!({"project_id": "proj-a", "created_by": "pm", "tasks": two_tasks(),
                      "idempotency_key": "mcp-key-1"});
    let (error, first) = call_mcp(&app, LIMITED, "create_task_list", args.clone()).await;
    assert!(!error, "{first}");
    assert!(first.get("replayed").is_none(), "{first}");
    let (error, again) = call_mcp(&app, LIMITED, "create_task_list", args.clone()).await;
    assert!(!error, "{again}");
    assert_eq!(again["task_list_id"], first["task_list_id"], "{again}");
    assert_eq!(again["replayed"], true, "{again}");
    let (_, status) = call_mcp(
        &app,
        LIMITED,
        "project_status",
        json!({"project_id": "proj-a"}),
    )
    .await;
    assert_eq!(status["counts"]["pending"], 2, "{status}");
    // The same key and arguments from another token are that token's own create.
    let (error, admins) = call_mcp(&app, ADMIN, "create_task_list", args.clone()).await;
    assert!(!error, "{admins}");
    assert_ne!(admins["task_list_id"], first["task_list_id"], "{admins}");
    // Other arguments with the key: refused, naming the code.
    let mut other = args;
    other["created_by"] = json!("someone-else");
    let (error, reused) = call_mcp(&app, LIMITED, "create_task_list", other).await;
    assert!(error, "{reused}");
    assert_eq!(reused["code"], "idempotency_key_reused", "{reused}");
    app.shutdown().await;
}

/// The gate's tools answer like the REST routes: the first 100 errors, with the
/// count of all of them by code (docs/mcp.md).
async fn gating_tools_answer_the_first_errors_and_the_counts(app: TestApp) {
    let orphans: Vec<Value> = (0..150)
        .map(|i| {
            json!({"task_id": format!("t{i}"), "assigned_persona": "p", "parallel_group": 1,
                   "depends_on": [format!("ghost{i}")], "reads": [], "writes": [],
                   "description": "d"})
        })
        .collect();
    let (error, report) =
        call_mcp(&app, ADMIN, "validate_task_list", json!({"tasks": orphans})).await;
    assert!(!error, "{report}");
    assert_eq!(report["errors"].as_array().unwrap().len(), 100, "{report}");
    assert_eq!(
        (report["error_count"].clone(), report["truncated"].clone()),
        (json!(150), json!(true))
    );
    assert_eq!(report["error_counts"], json!({"orphan_dependency": 150}));
    let (error, refused) = call_mcp(
        &app,
        ADMIN,
        "create_task_list",
        json!({"project_id": "proj-a", "created_by": "pm", "tasks": orphans}),
    )
    .await;
    assert!(error, "{refused}");
    assert_eq!(refused["code"], "dag_invalid");
    assert_eq!(refused["errors"].as_array().unwrap().len(), 100);
    assert_eq!(refused["error_count"], 150);
    let reprompt = refused["reprompt"].as_str().unwrap();
    assert_eq!(reprompt.lines().count(), 101, "{reprompt}");
    assert!(reprompt.contains("50 more errors"), "{reprompt}");
    app.shutdown().await;
}

on_both! {
    limited_tokens_step_only_their_tracks => spawn,
    create_task_list_replays_by_key => spawn,
    gating_tools_answer_the_first_errors_and_the_counts => spawn,
    tokens_are_checked_as_on_v1 => spawn,
    limited_tokens_stay_in_their_projects => spawn,
    the_read_only_surface_changes_nothing => spawn,
    malformed_jsonrpc_gets_jsonrpc_errors => spawn,
    every_schema_says_what_is_required => spawn,
    oversized_requests_are_413 => small_limit,
    tasks_are_named_by_planner_or_server_id => spawn,
    project_status_names_what_is_unknown => spawn,
    retry_refine_job_retries_an_ended_job_once => spawn_without_workers,
}
