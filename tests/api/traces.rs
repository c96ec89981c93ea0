//! Traces over OTLP/HTTP (docs/observability.md), read back by a receiver in this
//! test: a tiny axum server taking `POST /v1/traces` and decoding the
//! `ExportTraceServiceRequest` protobuf, as any OpenTelemetry collector does.
//! Servers are the real `plangate` binary with the `OTEL_*` variables pointed at
//! the receiver; each is stopped with SIGTERM, which flushes its last spans. L0s
//! are `tests/fixtures/l0/l0.sh --record DIR …`, which writes the `TRACEPARENT` it
//! was given to `DIR/<assignment_id>.traceparent`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use serde_json::{Value, json};
use tokio::process::Command;

use crate::common::process::ServerProcess;
use crate::common::{Backend, FreshDatabase};

const FINISH_TIMEOUT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------
// The receiver.

/// One span as received, with its resource's attributes.
#[derive(Debug, Clone)]
struct SeenSpan {
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    attributes: BTreeMap<String, Value>,
    error: bool,
    resource: BTreeMap<String, Value>,
}

impl SeenSpan {
    fn attr(&self, key: &str) -> &Value {
        self.attributes.get(key).unwrap_or(&Value::Null)
    }
}

struct Receiver {
    base: String,
    spans: Arc<Mutex<Vec<SeenSpan>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn any_value(value: Option<&AnyValue>) -> Value {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::DoubleValue(d)) => json!(d),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        _ => Value::Null,
    }
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, Value> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), any_value(kv.value.as_ref())))
        .collect()
}

async fn export(
    State(spans): State<Arc<Mutex<Vec<SeenSpan>>>>,
    body: Bytes,
) -> axum::response::Response {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (
            axum::http::StatusCode::BAD_REQUEST,
            "not an ExportTraceServiceRequest",
        )
            .into_response();
    };
    let mut seen = spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                seen.push(SeenSpan {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: attributes(&span.attributes),
                    // opentelemetry.proto.trace.v1.Status.StatusCode: 2 is ERROR.
                    error: span.status.is_some_and(|s| s.code == 2),
                    resource: resource.clone(),
                });
            }
        }
    }
    (
        [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}

impl Receiver {
    async fn start() -> Receiver {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(export))
            .with_state(spans.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver {
            base,
            spans,
            server,
        }
    }

    fn spans(&self) -> Vec<SeenSpan> {
        self.spans.lock().unwrap().clone()
    }
}

/// The one span named `name` in `spans` that `keep` accepts.
fn one<'a>(spans: &'a [SeenSpan], name: &str, keep: impl Fn(&SeenSpan) -> bool) -> &'a SeenSpan {
    let found: Vec<&SeenSpan> = spans.iter().filter(|s| s.name == name && keep(s)).collect();
    assert_eq!(
        found.len(),
        1,
        "expected one span {name:?}, found {}; all spans: {:#?}",
        found.len(),
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    found[0]
}

/// A caller's trace: its trace id and the span id plangate's spans hang from.
struct CallerTrace {
    trace_id: String,
    span_id: String,
}

impl CallerTrace {
    fn new() -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let span = uuid::Uuid::new_v4().simple().to_string();
        CallerTrace {
            trace_id: id,
            span_id: span[..16].to_owned(),
        }
    }

    fn header(&self) -> String {
        format!("00-{}-{}-01", self.trace_id, self.span_id)
    }
}

// ---------------------------------------------------------------------------
// The L0 fixture and a server process.

struct Fixture {
    dir: tempfile::TempDir,
    record: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let record = dir.path().join("record");
        std::fs::create_dir(&record).expect("record dir");
        Fixture { dir, record }
    }

    /// A config whose default executor `fixture` runs `l0.sh --record DIR <mode…>`
    /// and reads its stdout as a `claude -p --output-format json` envelope.
    fn config(&self, name: &str, mode: &[&str]) -> PathBuf {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/l0/l0.sh");
        let mut argv = vec![
            script.display().to_string(),
            "--record".to_owned(),
            self.record.display().to_string(),
        ];
        argv.extend(mode.iter().map(|s| (*s).to_owned()));
        let argv: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
        let path = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &path,
            format!(
                "default_executor = \"fixture\"\n\n[executors.fixture]\nkind = \"command\"\n\
                 argv = [{}]\noutput = \"claude-json\"\nmodel = \"claude-fake\"\ntimeout_secs = 120\n",
                argv.join(", ")
            ),
        )
        .expect("write config");
        path
    }

    fn traceparent_seen_by(&self, assignment_id: &str) -> Option<String> {
        std::fs::read_to_string(self.record.join(format!("{assignment_id}.traceparent")))
            .ok()
            .map(|s| s.trim().to_owned())
    }
}

/// A server process, asked over HTTP.
struct Server(ServerProcess);

impl std::ops::Deref for Server {
    type Target = ServerProcess;

    fn deref(&self) -> &ServerProcess {
        &self.0
    }
}

impl Server {
    async fn start(name: &str, db_url: &str, config: &Path, env: &[(&str, &str)]) -> Server {
        let log = config.with_file_name(format!("server-{name}.log"));
        let mut env = env.to_vec();
        env.insert(0, ("PLANGATE_SHUTDOWN_GRACE_SECS", "1"));
        Server(ServerProcess::start(name, db_url, config, log, &env).await)
    }

    /// SIGTERM, and wait for the exit (the last spans are flushed before it).
    async fn stop(&mut self) {
        self.0.sigterm(Duration::from_secs(60)).await;
    }

    async fn post(
        &self,
        path: &str,
        body: &Value,
        trace: Option<&CallerTrace>,
    ) -> reqwest::Response {
        let mut request = reqwest::Client::new()
            .post(format!("{}{path}", self.base))
            .header("accept", "application/json, text/event-stream")
            .json(body);
        if let Some(trace) = trace {
            request = request.header("traceparent", trace.header());
        }
        request.send().await.expect("POST")
    }

    async fn get(&self, path: &str) -> Value {
        reqwest::get(format!("{}{path}", self.base))
            .await
            .expect("GET")
            .json()
            .await
            .expect("JSON")
    }

    /// Polls the job until it reaches `status`.
    async fn wait_job(&self, id: &str, status: &str) -> Value {
        let deadline = Instant::now() + FINISH_TIMEOUT;
        loop {
            let job = self.get(&format!("/v1/refine-jobs/{id}")).await;
            if job["status"] == status {
                return job;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} never {status}: {job}\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn assignment(id: &str) -> Value {
    json!({
        "id": id, "phase_id": "P1", "name": format!("assignment {id}"), "goal": "a goal",
        "technical_approach": "an approach", "dependency_notes": "", "overlap_notes": "",
        "proposed_work_packages": [{"id_suffix": "WP1", "name": "wp", "estimated_files": [format!("src/{id}.rs")]}]
    })
}

fn job_body(ids: &[&str]) -> Value {
    json!({
        "context": {"phase_id": "P1", "assignments": ids.iter().map(|id| assignment(id)).collect::<Vec<_>>(), "peer_summaries": []},
        "refined_plan": {"phases": [{"id": "P1", "name": "phase one", "goal": "g"}]},
        "task_text": "a secret task text",
        "project_id": "proj-t"
    })
}

fn two_tasks() -> Value {
    json!([
        {"task_id": "t-1", "assigned_persona": "dev", "parallel_group": 1, "writes": ["a.py"], "description": "x"},
        {"task_id": "t-2", "assigned_persona": "rev", "parallel_group": 2, "depends_on": ["t-1"], "reads": ["a.py"], "description": "y"},
    ])
}

async fn create_job(server: &Server, ids: &[&str], trace: &CallerTrace) -> String {
    let response = server
        .post("/v1/refine-jobs", &job_body(ids), Some(trace))
        .await;
    assert_eq!(response.status(), 202, "{:?}", response.text().await);
    let job: Value = response.json().await.unwrap();
    job["id"].as_str().unwrap().to_owned()
}

// ---------------------------------------------------------------------------
// The tests.

/// A caller's `traceparent` makes the request, gating, job and L0 spans one trace:
/// request → gate, request → job → L0 (`chat claude-fake`, GenAI and OpenInference
/// attributes with the tokens and cost the job reports); the command L0 got its
/// span's `TRACEPARENT`; log lines carry the trace and span ids; nothing of the
/// task text or bodies is on any span.
async fn request_job_and_l0_spans_share_the_callers_trace(backend: Backend) {
    let db = FreshDatabase::new(backend).await;
    let receiver = Receiver::start().await;
    let fixture = Fixture::new();
    let config = fixture.config("claude", &["claude-json", "0.25", "1000", "200"]);
    let mut server = Server::start(
        "A",
        &db.url,
        &config,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.base)],
    )
    .await;
    let caller = CallerTrace::new();

    let list = json!({"project_id": "proj-t", "created_by": "tester", "tasks": two_tasks()});
    let created = server.post("/v1/task-lists", &list, Some(&caller)).await;
    assert_eq!(created.status(), 201, "{:?}", created.text().await);
    // A rejected list: its violations by code, as the gate's own answer counts them.
    let bad = json!({"tasks": [
        {"task_id": "a", "assigned_persona": "dev", "parallel_group": 1, "depends_on": ["b"], "description": "x"},
        {"task_id": "b", "assigned_persona": "dev", "parallel_group": 1, "depends_on": ["a"], "description": "y"},
    ]});
    let report: Value = server
        .post("/v1/task-lists/validate", &bad, Some(&caller))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(report["valid"], false, "{report}");

    let ids = ["T1-A1", "T1-A2"];
    let job_id = create_job(&server, &ids, &caller).await;
    let job = server.wait_job(&job_id, "succeeded").await;
    let l0s = server
        .get(&format!("/v1/refine-jobs/{job_id}/assignments"))
        .await;
    server.stop().await;
    let spans = receiver.spans();

    // Every span of this test is in the caller's trace.
    let ours: Vec<SeenSpan> = spans
        .iter()
        .filter(|s| s.trace_id == caller.trace_id)
        .cloned()
        .collect();
    let create_list = one(&ours, "POST /v1/task-lists", |_| true);
    assert_eq!(create_list.parent_span_id, caller.span_id);
    assert_eq!(create_list.attr("http.request.method"), "POST");
    assert_eq!(create_list.attr("http.route"), "/v1/task-lists");
    assert_eq!(create_list.attr("http.response.status_code"), 201);
    assert_eq!(create_list.attr("plangate.project_id"), "proj-t");
    assert_eq!(create_list.resource["service.name"], "plangate");
    let gate = one(&ours, "gate task list", |s| {
        s.parent_span_id == create_list.span_id
    });
    assert_eq!(gate.attr("plangate.tasks"), 2);
    assert_eq!(gate.attr("plangate.waves"), 2);
    assert_eq!(gate.attr("plangate.violations"), 0);

    let validate = one(&ours, "POST /v1/task-lists/validate", |_| true);
    let rejected = one(&ours, "gate task list", |s| {
        s.parent_span_id == validate.span_id
    });
    assert_eq!(rejected.attr("plangate.violations"), &report["error_count"]);
    let counts = report["error_counts"].as_object().unwrap();
    assert!(!counts.is_empty(), "{report}");
    for (code, n) in counts {
        assert_eq!(
            rejected.attr(&format!("plangate.violations.{code}")),
            n,
            "{code}"
        );
    }

    let create_job = one(&ours, "POST /v1/refine-jobs", |_| true);
    assert_eq!(create_job.parent_span_id, caller.span_id);
    assert_eq!(create_job.attr("http.response.status_code"), 202);
    let job_span = one(&ours, "refine job", |_| true);
    assert_eq!(job_span.parent_span_id, create_job.span_id, "job → request");
    assert_eq!(job_span.attr("plangate.job_id"), job_id.as_str());
    assert_eq!(job_span.attr("plangate.phase_id"), "P1");
    assert_eq!(job_span.attr("plangate.project_id"), "proj-t");
    assert_eq!(job_span.attr("plangate.job.state"), "succeeded");
    assert!(!job_span.error);

    let reported: BTreeMap<String, &Value> = l0s
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["assignment_id"].as_str().unwrap().to_owned(), a))
        .collect();
    let l0_spans: Vec<&SeenSpan> = ours
        .iter()
        .filter(|s| s.name == "chat claude-fake")
        .collect();
    assert_eq!(l0_spans.len(), ids.len(), "one L0 span per call");
    let mut input_total = 0;
    for span in &l0_spans {
        assert_eq!(span.parent_span_id, job_span.span_id, "L0 → job");
        let id = span.attr("assignment_id").as_str().unwrap().to_owned();
        let usage = &reported[&id]["usage"];
        assert_eq!(span.attr("gen_ai.operation.name"), "chat");
        assert_eq!(span.attr("gen_ai.provider.name"), "command");
        assert_eq!(span.attr("gen_ai.system"), "command");
        assert_eq!(span.attr("gen_ai.request.model"), "claude-fake");
        assert_eq!(span.attr("gen_ai.response.model"), "claude-fake");
        assert_eq!(
            span.attr("gen_ai.usage.input_tokens"),
            &usage["input_tokens"]
        );
        assert_eq!(
            span.attr("gen_ai.usage.output_tokens"),
            &usage["output_tokens"]
        );
        assert_eq!(span.attr("plangate.cost_usd"), &usage["cost_usd"]);
        assert_eq!(span.attr("plangate.attempt"), 1);
        assert_eq!(span.attr("plangate.l0.outcome"), "valid");
        assert_eq!(span.attr("plangate.l0.exit_code"), 0);
        assert_eq!(span.attr("openinference.span.kind"), "LLM");
        assert_eq!(span.attr("llm.model_name"), "claude-fake");
        assert_eq!(span.attr("llm.token_count.prompt"), &usage["input_tokens"]);
        assert_eq!(
            span.attr("llm.token_count.completion"),
            &usage["output_tokens"]
        );
        assert_eq!(span.attr("llm.token_count.total"), 1200);
        input_total += span.attr("gen_ai.usage.input_tokens").as_i64().unwrap();
        // The command L0 ran with its own span's context.
        assert_eq!(
            fixture.traceparent_seen_by(&id),
            Some(format!("00-{}-{}-01", caller.trace_id, span.span_id)),
            "TRACEPARENT of {id}"
        );
    }
    assert_eq!(json!(input_total), job["usage"]["input_tokens"], "{job}");

    // No body, task text or token on any span.
    for span in &spans {
        for value in span.attributes.values() {
            let text = value.to_string();
            assert!(
                !text.contains("secret task text") && !text.contains("t-1"),
                "{} carries {text}",
                span.name
            );
        }
    }
    // Log lines written in a traced span name it.
    let lines = server.log_lines();
    assert!(
        lines
            .iter()
            .any(|l| l["trace_id"] == caller.trace_id.as_str()
                && l["span_id"].as_str().is_some_and(|s| s.len() == 16)),
        "no log line carries the caller's trace id"
    );
}

/// A job whose server stops mid-L0 (SIGTERM: the L0 is killed, the job handed
/// back) is finished by another server; that server's job span still continues
/// the caller's request, which the first server served.
async fn a_job_handed_to_another_server_stays_in_the_callers_trace(backend: Backend) {
    let db = FreshDatabase::new(backend).await;
    let receiver = Receiver::start().await;
    let fixture = Fixture::new();
    let hangs = fixture.config("hang", &["hang"]);
    let answers = fixture.config("claude", &["claude-json", "0.25", "1000", "200"]);
    let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.base.as_str());
    let mut a = Server::start(
        "A",
        &db.url,
        &hangs,
        &[
            endpoint,
            ("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=A"),
        ],
    )
    .await;
    let caller = CallerTrace::new();
    let job_id = create_job(&a, &["H1-A1"], &caller).await;
    let deadline = Instant::now() + FINISH_TIMEOUT;
    while !fixture.record.join("H1-A1.l0pid").exists() {
        assert!(Instant::now() < deadline, "the L0 never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.stop().await;

    let mut b = Server::start(
        "B",
        &db.url,
        &answers,
        &[
            endpoint,
            ("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=B"),
        ],
    )
    .await;
    let job = b.wait_job(&job_id, "succeeded").await;
    b.stop().await;
    let spans = receiver.spans();

    let request = one(&spans, "POST /v1/refine-jobs", |_| true);
    assert_eq!(request.trace_id, caller.trace_id);
    assert_eq!(request.resource["service.instance.id"], "A");
    let on =
        |instance: &'static str| move |s: &SeenSpan| s.resource["service.instance.id"] == instance;
    let first = one(&spans, "refine job", on("A"));
    assert_eq!(first.parent_span_id, request.span_id);
    assert_eq!(first.attr("plangate.job.state"), "queued", "handed back");
    let second = one(&spans, "refine job", on("B"));
    assert_eq!(
        second.trace_id, caller.trace_id,
        "B's job span is in the caller's trace"
    );
    assert_eq!(
        second.parent_span_id, request.span_id,
        "child of A's request span"
    );
    assert_eq!(second.attr("plangate.job.state"), "succeeded");
    // A hand-back at shutdown is not charged: the job reports its attempt.
    assert_eq!(second.attr("plangate.attempt"), &job["attempt"]);
    let l0 = one(&spans, "chat claude-fake", on("B"));
    assert_eq!(l0.parent_span_id, second.span_id);
    assert_eq!(l0.attr("plangate.attempt"), &job["attempt"]);
    assert_eq!(
        fixture.traceparent_seen_by("H1-A1"),
        Some(format!("00-{}-{}-01", caller.trace_id, l0.span_id))
    );
}

/// A refine run is a span under the request that created it, and each of its
/// phase jobs a child of the run's span.
async fn a_runs_phase_jobs_are_children_of_the_run(backend: Backend) {
    let db = FreshDatabase::new(backend).await;
    let receiver = Receiver::start().await;
    let fixture = Fixture::new();
    let config = fixture.config("claude", &["claude-json"]);
    let mut server = Server::start(
        "A",
        &db.url,
        &config,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.base)],
    )
    .await;
    let caller = CallerTrace::new();
    let mut assignments = Vec::new();
    for phase in ["P1", "P2"] {
        let mut a = assignment(&format!("R-{phase}-A1"));
        a["phase_id"] = json!(phase);
        assignments.push(a);
    }
    let body = json!({"plan": {"task": "run task", "assignments": assignments, "phases": [
        {"id": "P1", "name": "one", "goal": "g"}, {"id": "P2", "name": "two", "goal": "g"}]}});
    let response = server.post("/v1/refine-runs", &body, Some(&caller)).await;
    assert_eq!(response.status(), 202, "{:?}", response.text().await);
    let run: Value = response.json().await.unwrap();
    let run_id = run["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + FINISH_TIMEOUT;
    loop {
        let now = server.get(&format!("/v1/refine-runs/{run_id}")).await;
        if now["status"] == "succeeded" {
            break;
        }
        assert!(Instant::now() < deadline, "run never succeeded: {now}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.stop().await;
    let spans = receiver.spans();

    let request = one(&spans, "POST /v1/refine-runs", |_| true);
    assert_eq!(request.parent_span_id, caller.span_id);
    let run_span = one(&spans, "refine run", |_| true);
    assert_eq!(run_span.parent_span_id, request.span_id, "run → request");
    assert_eq!(run_span.attr("plangate.run_id"), run_id.as_str());
    let jobs: Vec<&SeenSpan> = spans.iter().filter(|s| s.name == "refine job").collect();
    assert_eq!(jobs.len(), 2, "one span per phase job");
    for job in jobs {
        assert_eq!(job.trace_id, caller.trace_id);
        assert_eq!(job.parent_span_id, run_span.span_id, "phase job → run");
        assert_eq!(job.attr("plangate.job.state"), "succeeded");
    }
}

/// An MCP tool call is a span of its own under the `/mcp` request's: its tool,
/// method and project, and an error status when the tool answers an error.
async fn mcp_tool_calls_are_spans_under_the_mcp_request(backend: Backend) {
    let db = FreshDatabase::new(backend).await;
    let receiver = Receiver::start().await;
    let fixture = Fixture::new();
    let config = fixture.config("claude", &["claude-json"]);
    let mut server = Server::start(
        "A",
        &db.url,
        &config,
        &[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            &format!("{}/v1/traces", receiver.base),
        )],
    )
    .await;
    let caller = CallerTrace::new();
    let call = |name: &str, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": name, "arguments": arguments}})
    };
    let ok: Value = server
        .post(
            "/mcp",
            &call(
                "create_task_list",
                json!({"project_id": "proj-m", "created_by": "agent", "tasks": two_tasks()}),
            ),
            Some(&caller),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(ok["result"]["isError"], false, "{ok}");
    let failed: Value = server
        .post(
            "/mcp",
            &call(
                "ready_tasks",
                json!({"task_list_id": uuid::Uuid::new_v4().to_string()}),
            ),
            Some(&caller),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    server.stop().await;
    let spans = receiver.spans();

    let requests: Vec<&SeenSpan> = spans.iter().filter(|s| s.name == "POST /mcp").collect();
    assert_eq!(requests.len(), 2, "{spans:#?}");
    for request in &requests {
        assert_eq!(request.trace_id, caller.trace_id);
        assert_eq!(request.parent_span_id, caller.span_id);
        assert_eq!(request.attr("http.route"), "/mcp");
    }
    let create = one(&spans, "tools/call create_task_list", |_| true);
    assert!(
        requests.iter().any(|r| r.span_id == create.parent_span_id),
        "tool → request"
    );
    assert_eq!(create.trace_id, caller.trace_id);
    assert_eq!(create.attr("gen_ai.tool.name"), "create_task_list");
    assert_eq!(create.attr("mcp.method.name"), "tools/call");
    assert_eq!(create.attr("plangate.project_id"), "proj-m");
    assert!(!create.error);
    one(&spans, "gate task list", |s| {
        s.parent_span_id == create.span_id
    });
    let ready = one(&spans, "tools/call ready_tasks", |_| true);
    assert!(ready.error, "a tool error is an error status");
    assert_eq!(ready.attr("gen_ai.tool.name"), "ready_tasks");
}

/// Without an endpoint nothing is traced: no trace ids in the logs, no
/// `TRACEPARENT` for an L0, although the caller sent a `traceparent`. With an
/// endpoint but `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`, the
/// receiver gets nothing either.
async fn no_endpoint_no_traces(backend: Backend) {
    let db = FreshDatabase::new(backend).await;
    let receiver = Receiver::start().await;
    let fixture = Fixture::new();
    let config = fixture.config("claude", &["claude-json"]);
    let caller = CallerTrace::new();
    let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.base.as_str());
    let variants: [(&str, Vec<(&str, &str)>); 3] = [
        ("plain", vec![("OTEL_SERVICE_NAME", "nothing-to-name")]),
        ("disabled", vec![endpoint, ("OTEL_SDK_DISABLED", "true")]),
        ("none", vec![endpoint, ("OTEL_TRACES_EXPORTER", "none")]),
    ];
    for (i, (name, env)) in variants.iter().enumerate() {
        let mut server = Server::start(name, &db.url, &config, env).await;
        let id = format!("N{i}-A1");
        let job_id = create_job(&server, &[&id], &caller).await;
        server.wait_job(&job_id, "succeeded").await;
        server.stop().await;
        assert_eq!(
            fixture.traceparent_seen_by(&id),
            None,
            "{name}: TRACEPARENT"
        );
        let lines = server.log_lines();
        assert!(!lines.is_empty());
        assert!(
            lines.iter().all(|l| l.get("trace_id").is_none()),
            "{name}: a log line carries a trace id"
        );
    }
    assert!(receiver.spans().is_empty(), "{:#?}", receiver.spans());
}

both_backends!(
    request_job_and_l0_spans_share_the_callers_trace,
    a_job_handed_to_another_server_stays_in_the_callers_trace,
    a_runs_phase_jobs_are_children_of_the_run,
    mcp_tool_calls_are_spans_under_the_mcp_request,
    no_endpoint_no_traces,
);

/// A protocol other than OTLP/HTTP protobuf stops the server at start, naming the
/// variable and what to set instead.
#[tokio::test]
async fn an_unsupported_protocol_stops_the_server_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_plangate"))
        .arg("serve")
        .env_clear()
        .env(
            "DATABASE_URL",
            format!("sqlite://{}", dir.path().join("t.db").display()),
        )
        .env("PLANGATE_BIND", "127.0.0.1:0")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL=\"grpc\" is not supported")
            && stderr.contains("http/protobuf"),
        "{stderr}"
    );
}
