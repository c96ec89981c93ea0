//! What agents see of the tools (docs/mcp.md, docs/testing.md#tool-snapshots):
//! every tool definition of the live `tools/list` (real HTTP `/mcp`) is compared
//! with its reviewed snapshot in `tests/fixtures/toolsnaps/<tool>.json`, so a change
//! to a name, description or input schema is a diff in review. Accept a change with
//! `UPDATE_TOOLSNAPS=1 cargo nextest run toolsnaps`.
//!
//! Also: the whole answer stays under 10 KB, no field says `"default": null`
//! unless its schema admits null, and the task schemas accept the repository's
//! example lists and refuse what the gate refuses.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::common::TestApp;
use serde_json::{Map, Value, json};

const UPDATE_HINT: &str = "UPDATE_TOOLSNAPS=1 cargo nextest run toolsnaps";

/// The size contract of docs/mcp.md: the compact `tools/list` answer, in bytes.
const TOOLS_LIST_LIMIT: usize = 10 * 1024;

fn snapshot_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/toolsnaps")
}

fn updating() -> bool {
    std::env::var_os("UPDATE_TOOLSNAPS").is_some_and(|v| v == "1")
}

/// The JSON-RPC answer to `tools/list` on `/mcp`, as its raw body and parsed.
async fn tools_list(app: &TestApp) -> (String, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let response = app.mcp_post("/mcp", None, &body).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.expect("tools/list body");
    let message: Value = serde_json::from_str(&text).expect("tools/list JSON");
    (text, message)
}

fn tools(message: &Value) -> &Vec<Value> {
    message["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {message}"))
}

fn tool<'a>(message: &'a Value, name: &str) -> &'a Value {
    tools(message)
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
}

/// Keys sorted at every level, so a snapshot does not depend on generation order.
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(object) => {
            let mut keys: Vec<&String> = object.keys().collect();
            keys.sort();
            let map: Map<String, Value> = keys
                .into_iter()
                .map(|k| (k.clone(), sorted(&object[k])))
                .collect();
            Value::Object(map)
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

fn snapshot_text(tool: &Value) -> String {
    let mut text = serde_json::to_string_pretty(&sorted(tool)).expect("pretty JSON");
    text.push('\n');
    text
}

/// A line diff (longest common subsequence; snapshots are a few hundred lines).
fn diff(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push_str(&format!("- {}\n", a[i]));
            i += 1;
        } else {
            out.push_str(&format!("+ {}\n", b[j]));
            j += 1;
        }
    }
    out
}

/// Write through a temporary file: the SQLite and Postgres runs may update at once.
fn write_snapshot(path: &Path, text: &str) {
    let temp = path.with_extension(format!("json.{}.tmp", std::process::id()));
    std::fs::write(&temp, text).expect("write snapshot");
    std::fs::rename(&temp, path).expect("rename snapshot");
}

fn snapshot_files() -> BTreeSet<String> {
    let Ok(entries) = std::fs::read_dir(snapshot_dir()) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|name| name.strip_suffix(".json").map(str::to_owned))
        .collect()
}

/// With UPDATE_TOOLSNAPS=1: every tool's snapshot written, stale ones removed.
fn update_snapshots(message: &Value) {
    let dir = snapshot_dir();
    std::fs::create_dir_all(&dir).expect("snapshot dir");
    let mut live = BTreeSet::new();
    for tool in tools(message) {
        let name = tool["name"].as_str().expect("tool name");
        live.insert(name.to_owned());
        write_snapshot(&dir.join(format!("{name}.json")), &snapshot_text(tool));
    }
    for stale in snapshot_files().difference(&live) {
        // The other back-end's run may have removed it already.
        let _ = std::fs::remove_file(dir.join(format!("{stale}.json")));
    }
}

async fn tools_match_their_snapshots(app: TestApp) {
    let (_, message) = tools_list(&app).await;
    if updating() {
        update_snapshots(&message);
    }
    let mut failures = String::new();
    for tool in tools(&message) {
        let name = tool["name"].as_str().expect("tool name");
        let path = snapshot_dir().join(format!("{name}.json"));
        let live = snapshot_text(tool);
        match std::fs::read_to_string(&path) {
            Ok(stored) if stored == live => {}
            Ok(stored) => failures.push_str(&format!(
                "\n{name}: the live tool differs from {} (- snapshot, + live):\n{}",
                path.display(),
                diff(&stored, &live)
            )),
            Err(e) => {
                failures.push_str(&format!("\n{name}: no snapshot {}: {e}\n", path.display()))
            }
        }
    }
    assert!(
        failures.is_empty(),
        "tool definitions changed; review the diff, then accept it with `{UPDATE_HINT}`\n{failures}"
    );
    app.shutdown().await;
}

async fn every_tool_has_a_snapshot_and_none_is_stale(app: TestApp) {
    let (_, message) = tools_list(&app).await;
    if updating() {
        update_snapshots(&message);
    }
    let live: BTreeSet<String> = tools(&message)
        .iter()
        .map(|t| t["name"].as_str().expect("tool name").to_owned())
        .collect();
    assert_eq!(live.len(), 15, "{live:?}");
    let stored = snapshot_files();
    let missing: Vec<_> = live.difference(&stored).collect();
    let stale: Vec<_> = stored.difference(&live).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "tools without a snapshot: {missing:?}; snapshots of no tool: {stale:?}; \
         run `{UPDATE_HINT}`"
    );
    app.shutdown().await;
}

/// The size contract: the whole answer as sent, and as compact JSON.
async fn tools_list_stays_under_10_kb(app: TestApp) {
    let (body, message) = tools_list(&app).await;
    let compact = message.to_string().len();
    assert!(
        compact < TOOLS_LIST_LIMIT && body.len() < TOOLS_LIST_LIMIT,
        "tools/list is {compact} bytes compact ({} as sent), over the {TOOLS_LIST_LIMIT}-byte \
         budget: shorten descriptions, move prose to docs/mcp.md",
        body.len()
    );
    app.shutdown().await;
}

/// Whether a schema admits JSON null.
fn admits_null(schema: &Value) -> bool {
    let by_type = match &schema["type"] {
        Value::String(t) => t == "null",
        Value::Array(types) => types.iter().any(|t| t == "null"),
        _ => false,
    };
    let by_enum = schema["enum"]
        .as_array()
        .is_some_and(|values| values.contains(&Value::Null));
    let by_union = ["anyOf", "oneOf"].iter().any(|key| {
        schema[*key]
            .as_array()
            .is_some_and(|options| options.iter().any(admits_null))
    });
    // No type and no enum: any value, null included.
    let unconstrained = schema.get("type").is_none()
        && schema.get("enum").is_none()
        && schema.get("anyOf").is_none()
        && schema.get("oneOf").is_none()
        && schema.get("$ref").is_none();
    by_type || by_enum || by_union || unconstrained
}

/// Every `"default": null` below `schema`, where the schema refuses null.
fn null_defaults(schema: &Value, at: &str, found: &mut Vec<String>) {
    match schema {
        Value::Object(object) => {
            if object.get("default") == Some(&Value::Null) && !admits_null(schema) {
                found.push(format!("{at}: {schema}"));
            }
            for (key, child) in object {
                null_defaults(child, &format!("{at}/{key}"), found);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                null_defaults(child, &format!("{at}/{i}"), found);
            }
        }
        _ => {}
    }
}

async fn no_field_defaults_to_a_null_it_refuses(app: TestApp) {
    let (_, message) = tools_list(&app).await;
    let mut found = Vec::new();
    for tool in tools(&message) {
        null_defaults(
            &tool["inputSchema"],
            tool["name"].as_str().unwrap(),
            &mut found,
        );
    }
    assert!(
        found.is_empty(),
        "\"default\": null on a non-nullable field: {found:#?}"
    );
    // The check itself sees one.
    let mut probe = Vec::new();
    null_defaults(
        &json!({"properties": {"x": {"type": "string", "default": null}}}),
        "probe",
        &mut probe,
    );
    assert_eq!(probe.len(), 1);
    null_defaults(
        &json!({"type": ["string", "null"], "default": null}),
        "probe",
        &mut probe,
    );
    assert_eq!(probe.len(), 1);
    app.shutdown().await;
}

fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::draft202012::new(schema)
        .unwrap_or_else(|e| panic!("not a valid JSON Schema: {e}: {schema}"))
}

fn refusals(validator: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

/// The last ```json block of examples/planner_output.md (the one the gate reads).
fn planner_output_example() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/planner_output.md");
    let text = std::fs::read_to_string(path).expect("examples/planner_output.md");
    let block = text
        .split("```json")
        .last()
        .and_then(|rest| rest.split("```").next())
        .expect("a json block");
    serde_json::from_str(block).expect("the example's task list")
}

/// The gating tools' `tasks` schema takes what the gate passes (the examples, the
/// benchmark generator's lists) and refuses items the gate refuses; the gate is
/// asked too, so schema and parser are compared, not just the schema.
async fn task_lists_follow_the_task_schema(app: TestApp) {
    let (_, message) = tools_list(&app).await;
    for name in ["validate_task_list", "create_task_list"] {
        let schema = &tool(&message, name)["inputSchema"];
        let tasks = validator(&schema["properties"]["tasks"]);
        let item = &schema["properties"]["tasks"]["items"];
        for field in crate::common::TASK_FIELDS {
            assert!(
                item["properties"][field]["type"].is_string()
                    || item["properties"][field]["type"].is_array(),
                "{name}.tasks[].{field}: {item}"
            );
        }
        let arguments = validator(schema);

        let mut examples = vec![("examples/planner_output.md", planner_output_example())];
        for (n, seed) in [(1, 1), (40, 7), (600, 3)] {
            let (list, _) = plangate::domain::gating::generate::generate_task_list(n, seed);
            examples.push(("generate_task_list", list));
        }
        for (source, list) in &examples {
            assert_eq!(
                refusals(&tasks, list),
                Vec::<String>::new(),
                "{name}: {source}"
            );
            let mut args = json!({"tasks": list});
            if name == "create_task_list" {
                args["project_id"] = json!("shop");
                args["created_by"] = json!("pm");
            }
            assert_eq!(
                refusals(&arguments, &args),
                Vec::<String>::new(),
                "{name}: {source}"
            );
        }
        // An unknown field is kept by the gate, so the schema allows it too.
        let mut extra = planner_output_example();
        extra[0]["estimate"] = json!("2h");
        extra[3]["reviews"] = Value::Null;
        assert!(tasks.is_valid(&extra), "{name}");
    }

    // Each bad item is refused by the schema and by the gate.
    let schema = &tool(&message, "validate_task_list")["inputSchema"];
    let tasks = validator(&schema["properties"]["tasks"]);
    let base = || json!({"task_id": "t-1", "assigned_persona": "dev", "parallel_group": 1, "description": "x"});
    let (valid, answer) = app
        .call_tool("validate_task_list", json!({"tasks": [base()]}))
        .await;
    assert!(!valid && answer["valid"] == true, "{answer}");
    assert!(tasks.is_valid(&json!([base()])));
    let bad: [(&str, Value); 7] = [
        ("task_id", Value::Null),
        ("parallel_group", json!(0)),
        ("parallel_group", json!("1")),
        ("depends_on", json!("t-0")),
        ("writes", json!([7])),
        ("description", json!(3)),
        ("reviews", json!(5)),
    ];
    for (field, value) in bad {
        let mut item = base();
        if value.is_null() {
            item.as_object_mut().unwrap().remove(field);
        } else {
            item[field] = value.clone();
        }
        let list = json!([item]);
        assert!(!tasks.is_valid(&list), "the schema takes {field}: {value}");
        let (error, answer) = app
            .call_tool("validate_task_list", json!({"tasks": list}))
            .await;
        assert!(
            !error && answer["valid"] == false,
            "the gate takes {field}: {value}: {answer}"
        );
    }
    assert!(!tasks.is_valid(&json!([])), "an empty list");
    assert!(!tasks.is_valid(&json!(["t-1"])), "a non-object entry");
    app.shutdown().await;
}

/// plan_loop's schema takes the example request and the generator's, with the
/// task `type` values of the domain, and refuses what the planner refuses.
async fn loop_plans_follow_the_plan_loop_schema(app: TestApp) {
    let (_, message) = tools_list(&app).await;
    let schema = &tool(&message, "plan_loop")["inputSchema"];
    let arguments = validator(schema);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/loop_plan_request.json");
    let example: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("example")).expect("JSON");
    assert_eq!(refusals(&arguments, &example), Vec::<String>::new());
    let generated = plangate::domain::loop_plan::generate::generate_request(300, 5);
    let generated = serde_json::to_value(&generated).expect("request JSON");
    assert_eq!(refusals(&arguments, &generated), Vec::<String>::new());

    let types: Vec<Value> = plangate::domain::loop_plan::TaskType::ALL
        .iter()
        .map(|t| json!(t.as_str()))
        .chain([Value::Null])
        .collect();
    assert_eq!(
        schema["properties"]["tasks"]["items"]["properties"]["type"]["enum"],
        json!(types)
    );
    for kind in plangate::domain::loop_plan::TaskType::ALL {
        let mut request = example.clone();
        request["tasks"][0]["type"] = json!(kind.as_str());
        assert!(arguments.is_valid(&request), "{kind}");
        let (error, answer) = app.call_tool("plan_loop", request).await;
        assert!(!error, "{kind}: {answer}");
    }

    let bad: [(&str, Value); 4] = [
        ("type", json!("banana")),
        ("phase", json!(0)),
        ("files", json!("src/a.py")),
        ("name", Value::Null),
    ];
    for (field, value) in bad {
        let mut request = example.clone();
        if value.is_null() {
            request["tasks"][0].as_object_mut().unwrap().remove(field);
        } else {
            request["tasks"][0][field] = value.clone();
        }
        assert!(
            !arguments.is_valid(&request),
            "the schema takes {field}: {value}"
        );
        let (error, answer) = app.call_tool("plan_loop", request).await;
        let refused = error || answer["errors"].as_array().is_some_and(|e| !e.is_empty());
        assert!(refused, "the planner takes {field}: {value}: {answer}");
    }
    app.shutdown().await;
}

both_backends!(
    tools_match_their_snapshots,
    every_tool_has_a_snapshot_and_none_is_stale,
    tools_list_stays_under_10_kb,
    no_field_defaults_to_a_null_it_refuses,
    task_lists_follow_the_task_schema,
    loop_plans_follow_the_plan_loop_schema,
);
