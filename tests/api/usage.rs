//! What L0 calls cost (docs/jobs.md, "Usage, cost and budgets"), end to end: real
//! child processes printing `claude -p --output-format json` envelopes
//! (`tests/fixtures/l0/l0.sh claude-json`), real local HTTP servers speaking the
//! Anthropic and OpenAI APIs, the real server on both back-ends, and the CLI.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::{Api, Backend, TestApp, expect_problem, l0_script, spawn_app_with};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use plangate::agents::{Executor, L0Request, L0Run};
use plangate::config::{ExecutorKind, ExecutorProfile, Settings};
use plangate::domain::refine::L0Outcome;
use plangate::domain::usage::{Price, UsageSource};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

// ------------------------------------------------------------------ helpers

fn profile(kind: ExecutorKind) -> ExecutorProfile {
    ExecutorProfile {
        timeout_secs: Some(60),
        ..crate::common::executor_profile(kind)
    }
}

/// `l0.sh [--record DIR] ARGS…`, reading its stdout as `output`.
fn command(record: Option<&Path>, args: &[&str], claude_json: bool) -> ExecutorProfile {
    let mut p = profile(ExecutorKind::Command);
    p.argv = vec![l0_script()];
    if let Some(dir) = record {
        p.argv.push("--record".into());
        p.argv.push(dir.display().to_string());
    }
    p.argv.extend(args.iter().map(|a| a.to_string()));
    if claude_json {
        p.output = plangate::config::StdoutFormat::ClaudeJson;
    }
    p
}

fn prices() -> Arc<plangate::domain::usage::Prices> {
    Arc::new(
        [(
            "claude-fake".to_owned(),
            Price {
                input_per_mtok: 3.0,
                output_per_mtok: 15.0,
                cache_read_per_mtok: 0.3,
                cache_write_per_mtok: 3.75,
            },
        )]
        .into(),
    )
}

fn request(assignment_id: &str) -> L0Request {
    crate::common::l0_request(7, assignment_id, "Review it.", None)
}

async fn run_l0(e: &Executor, id: &str) -> L0Run {
    e.run(&request(id), &CancellationToken::new())
        .await
        .expect("not cancelled")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

// ------------------------------------------------------------- executors

#[tokio::test]
async fn claude_json_envelope_with_cost_is_reported() {
    let e = Executor::from_profile(
        "cj",
        &command(None, &["claude-json", "0.0123", "1000", "200"], true),
    )
    .unwrap()
    .with_prices(prices());
    let run = run_l0(&e, "P1-A1").await;
    let L0Outcome::Answer(text) = &run.outcome else {
        panic!("{run:?}")
    };
    assert!(text.starts_with("I reviewed assignment P1-A1"), "{text}");
    assert!(
        text.contains("{\"missing_dep\": \"X\""),
        "the result string is unescaped"
    );
    let u = &run.usage;
    assert_eq!(u.source, UsageSource::Reported);
    assert_eq!(
        u.cost_usd,
        Some(0.0123),
        "a reported cost is kept, not re-priced"
    );
    assert_eq!(
        (
            u.input_tokens,
            u.output_tokens,
            u.cache_read_input_tokens,
            u.cache_creation_input_tokens
        ),
        (Some(1000), Some(200), Some(5), Some(7))
    );
    assert_eq!(u.model.as_deref(), Some("claude-fake"));
}

#[tokio::test]
async fn claude_json_without_cost_is_priced_from_the_table_or_stays_unknown() {
    let p = command(None, &["claude-json", "none", "1000000", "100000"], true);
    let priced = Executor::from_profile("cj", &p)
        .unwrap()
        .with_prices(prices());
    let run = run_l0(&priced, "P1-A1").await;
    assert_eq!(run.usage.source, UsageSource::Priced);
    // 1M input × $3 + 100k output × $15 + 5 cache reads × $0.3 + 7 writes × $3.75 per MTok.
    let expected = 3.0 + 1.5 + 5.0 * 0.3 / 1e6 + 7.0 * 3.75 / 1e6;
    assert!(
        close(run.usage.cost_usd.unwrap(), expected),
        "{:?}",
        run.usage
    );

    let unpriced = Executor::from_profile("cj", &p).unwrap();
    let run = run_l0(&unpriced, "P1-A1").await;
    assert_eq!(run.usage.cost_usd, None, "no built-in prices");
    assert_eq!(
        run.usage.output_tokens,
        Some(100_000),
        "tokens are still known"
    );
}

#[tokio::test]
async fn claude_json_garbage_and_is_error_fail_the_l0() {
    let garbage = Executor::from_profile("cj", &command(None, &["garbage"], true)).unwrap();
    let run = run_l0(&garbage, "P1-A1").await;
    let L0Outcome::Failed(reason) = &run.outcome else {
        panic!("garbage must fail: {run:?}")
    };
    assert!(
        reason.contains("claude-json") && reason.contains("Lorem ipsum"),
        "{reason}"
    );
    assert_eq!(run.usage.source, UsageSource::Unknown);
    assert_eq!(run.usage.cost_usd, None);

    let error = Executor::from_profile("cj", &command(None, &["claude-json-error"], true)).unwrap();
    let run = run_l0(&error, "P1-A1").await;
    let L0Outcome::Failed(reason) = &run.outcome else {
        panic!("is_error must fail: {run:?}")
    };
    assert!(
        reason.contains("is_error") && reason.contains("the model refused"),
        "{reason}"
    );
    assert_eq!(
        run.usage.cost_usd,
        Some(0.002),
        "a failed call's cost still counts"
    );

    // Plain text stays the default: the same envelope is an answer as it is.
    let text = Executor::from_profile("t", &command(None, &["claude-json", "0.5"], false)).unwrap();
    let run = run_l0(&text, "P1-A1").await;
    assert!(matches!(&run.outcome, L0Outcome::Answer(a) if a.starts_with('{')));
    assert_eq!(run.usage.source, UsageSource::Unknown);

    // `output` is for commands only.
    let mut api = profile(ExecutorKind::Openai);
    api.model = Some("m".into());
    api.output = plangate::config::StdoutFormat::ClaudeJson;
    assert!(Executor::from_profile("x", &api).is_err());
}

struct FakeApi {
    api: Api,
    hits: AtomicUsize,
    /// Fail the first try with a 500 that still reports usage.
    fail_first: bool,
}

fn answer(id: &str) -> String {
    format!(
        "assignment_id = {id}\nchanges = []\ndependency_corrections = []\nwp_proposal_adjustments = []\n"
    )
}

async fn fake_handle(State(fake): State<Arc<FakeApi>>, body: Bytes) -> Response {
    let n = fake.hits.fetch_add(1, Ordering::SeqCst);
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let prompt = body["messages"][0]["content"].as_str().unwrap_or("");
    // The assignment id is in the rendered prompt.
    let id = prompt
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .find(|w| w.starts_with("P1-A"))
        .unwrap_or("P1-A1")
        .to_owned();
    let usage = match fake.api {
        Api::Anthropic => json!({"input_tokens": 1000, "output_tokens": 100,
            "cache_creation_input_tokens": 10, "cache_read_input_tokens": 20}),
        Api::Openai => json!({"prompt_tokens": 1000, "completion_tokens": 100,
            "prompt_tokens_details": {"cached_tokens": 200}}),
    };
    if fake.fail_first && n == 0 {
        let error = json!({"type": "error", "error": {"type": "overloaded_error"}, "usage": usage});
        return (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(error)).into_response();
    }
    let reply = match fake.api {
        Api::Anthropic => json!({"id": "msg", "type": "message", "model": "claude-fake",
            "content": [{"type": "text", "text": answer(&id)}], "usage": usage}),
        Api::Openai => json!({"id": "c", "model": "gpt-fake",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer(&id)}}],
            "usage": usage}),
    };
    axum::Json(reply).into_response()
}

async fn fake_api(api: Api, fail_first: bool) -> (String, Arc<FakeApi>) {
    let fake = Arc::new(FakeApi {
        api,
        hits: AtomicUsize::new(0),
        fail_first,
    });
    let app = axum::Router::new()
        .fallback(fake_handle)
        .with_state(fake.clone());
    (crate::common::serve_provider(api, app, "/v1").await, fake)
}

fn api_profile(api: Api, base: &str) -> ExecutorProfile {
    let mut p = profile(match api {
        Api::Openai => ExecutorKind::Openai,
        Api::Anthropic => ExecutorKind::Anthropic,
    });
    p.base_url = Some(base.to_owned());
    p.model = Some(match api {
        Api::Openai => "gpt-fake".into(),
        Api::Anthropic => "claude-fake".into(),
    });
    p
}

#[tokio::test]
async fn api_usage_is_read_and_failed_tries_still_count() {
    for api in [Api::Anthropic, Api::Openai] {
        let (base, fake) = fake_api(api, true).await;
        let e = Executor::from_profile("api", &api_profile(api, &base))
            .unwrap()
            .with_backoff(Duration::from_millis(1), Duration::from_millis(5))
            .with_prices(prices());
        let run = run_l0(&e, "P1-A1").await;
        assert!(
            matches!(run.outcome, L0Outcome::Answer(_)),
            "{api:?}: {run:?}"
        );
        assert_eq!(run.tries, 2);
        assert_eq!(fake.hits.load(Ordering::SeqCst), 2);
        let u = &run.usage;
        match api {
            Api::Anthropic => {
                // Both tries: the failed one reported usage too.
                assert_eq!(
                    (
                        u.input_tokens,
                        u.output_tokens,
                        u.cache_creation_input_tokens,
                        u.cache_read_input_tokens
                    ),
                    (Some(2000), Some(200), Some(20), Some(40))
                );
                assert_eq!(u.source, UsageSource::Priced);
                let expected = (2000.0 * 3.0 + 200.0 * 15.0 + 40.0 * 0.3 + 20.0 * 3.75) / 1e6;
                assert!(close(u.cost_usd.unwrap(), expected), "{u:?}");
                assert_eq!(u.model.as_deref(), Some("claude-fake"));
            }
            Api::Openai => {
                // prompt_tokens include the cached ones: input = 1000 - 200 per try.
                assert_eq!(
                    (
                        u.input_tokens,
                        u.output_tokens,
                        u.cache_read_input_tokens,
                        u.cache_creation_input_tokens
                    ),
                    (Some(1600), Some(200), Some(400), None)
                );
                assert_eq!(u.model.as_deref(), Some("gpt-fake"));
                assert_eq!(u.cost_usd, None, "gpt-fake has no price");
                assert_eq!(u.source, UsageSource::Reported);
            }
        }
    }
}

// ---------------------------------------------------------------- server

struct Dirs {
    _tmp: tempfile::TempDir,
    record: PathBuf,
}

impl Dirs {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let record = tmp.path().join("record");
        std::fs::create_dir_all(&record).unwrap();
        Dirs { _tmp: tmp, record }
    }

    /// Assignment ids whose fixture started, in start order.
    fn started(&self) -> Vec<String> {
        std::fs::read_to_string(self.record.join("events"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("start "))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_owned)
            .collect()
    }
}

/// The usage tests' server: [`configure`]'s executors recording to the returned
/// [`Dirs`], then `tweak`.
async fn usage_app(backend: Backend, tweak: impl FnOnce(&mut Settings, &Dirs)) -> (TestApp, Dirs) {
    let dirs = Dirs::new();
    let app = spawn_app_with(backend, |s| {
        configure(s, &dirs, None);
        tweak(s, &dirs);
    })
    .await;
    (app, dirs)
}

/// Executors: `cj` (claude-json, $0.01 per call), `cj-unpriced` (claude-json with
/// no cost, model not in the table), `cj-priced` (no cost, priced), `plain` (text),
/// `anthropic` (the fake API server at `fake_base`).
fn configure(s: &mut Settings, dirs: &Dirs, fake_base: Option<&str>) {
    let rec = Some(dirs.record.as_path());
    s.executors.insert(
        "cj".into(),
        command(rec, &["claude-json", "0.01", "1000", "200"], true),
    );
    s.executors.insert(
        "cj-unpriced".into(),
        command(
            rec,
            &["claude-json", "none", "1000", "200", "claude-unpriced"],
            true,
        ),
    );
    s.executors.insert(
        "cj-priced".into(),
        command(rec, &["claude-json", "none", "1000000", "0"], true),
    );
    s.executors
        .insert("plain".into(), command(rec, &["valid"], false));
    // Calls of $0.40 each, as in the budget measurements of docs/jobs.md.
    s.executors.insert(
        "cj-40".into(),
        command(rec, &["claude-json", "0.40", "1000", "200"], true),
    );
    if let Some(base) = fake_base {
        s.executors
            .insert("anthropic".into(), api_profile(Api::Anthropic, base));
    }
    s.prices = (*prices()).clone();
}

fn assignment(id: &str) -> Value {
    json!({
        "id": id, "phase_id": "P1", "name": format!("Assignment {id}"),
        "goal": "Do one thing.", "technical_approach": "Small steps.",
        "dependency_notes": "", "overlap_notes": "",
        "proposed_work_packages": [{"id_suffix": "WP1", "name": "w", "estimated_files": [format!("src/{id}.rs")]}]
    })
}

fn plan() -> Value {
    json!({"phases": [{"id": "P1", "name": "One", "goal": "g", "scope": "s",
        "technical_approach": "t", "relationship_notes": "", "ordering": 1}]})
}

pub(crate) fn job_body(ids: &[&str], executor: &str, extra: Value) -> Value {
    let assignments: Vec<Value> = ids.iter().map(|id| assignment(id)).collect();
    let mut body = json!({
        "context": {"schema_version": 1, "phase_id": "P1", "assignments": assignments, "peer_summaries": []},
        "refined_plan": plan(),
        "task_text": "The task.",
        "executor": executor,
    });
    if let (Some(b), Value::Object(more)) = (body.as_object_mut(), extra) {
        b.extend(more);
    }
    body
}

async fn submit(app: &TestApp, body: &Value) -> String {
    let job = app.submit_refine_job(body).await;
    job["id"].as_str().unwrap().to_owned()
}

fn cost(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a cost: {v}"))
}

/// The text of a job's Cost cell in the dashboard's job list.
fn list_cost(page: &str, job_id: &str) -> String {
    let row = page
        .split(&format!("data-job=\"{job_id}\""))
        .nth(1)
        .and_then(|rest| rest.split("</tr>").next())
        .unwrap_or_else(|| panic!("no row for job {job_id} in the job list"));
    let cell = row
        .split("class=\"num cost\">")
        .nth(1)
        .and_then(|rest| rest.split("</td>").next())
        .unwrap_or_else(|| panic!("no Cost cell in the row of job {job_id}: {row}"));
    // Drop the markup (`<span class="unknown">`), keep the text.
    let mut text = String::new();
    let mut in_tag = false;
    for c in cell.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.trim().to_owned()
}

both_backends!(
    assignments_jobs_and_projects_show_usage,
    budget_hit_mid_batch_starts_no_further_l0,
    budget_kill_stops_running_l0s,
    run_budget_spans_its_phases_and_merges_what_finished,
    daily_limit_refuses_with_429_until_the_next_utc_day,
    resumed_job_counts_each_l0_once,
    prompt_size_does_not_grow_with_the_task_text,
    job_budget_caps_spend_within_one_call,
    run_budget_caps_spend_across_two_replicas,
    daily_limit_caps_concurrent_jobs_across_two_replicas,
    job_overrun_by_its_calls_ends_budget_exceeded,
    a_lost_lease_releases_its_reservations,
    metrics_label_unconfigured_models_as_other,
);

async fn assignments_jobs_and_projects_show_usage(backend: Backend) {
    let dirs = Dirs::new();
    let (base, _fake) = fake_api(Api::Anthropic, false).await;
    let app = spawn_app_with(backend, |s| configure(s, &dirs, Some(&base))).await;

    let ids = ["P1-A1", "P1-A2", "P1-A3"];
    let project = json!({"project_id": "alpha", "team_pk": "t1"});
    let reported = submit(&app, &job_body(&ids, "cj", project.clone())).await;
    let unpriced = submit(&app, &job_body(&ids[..2], "cj-unpriced", project.clone())).await;
    let priced = submit(
        &app,
        &job_body(
            &ids[..1],
            "cj-priced",
            json!({"project_id": "alpha", "team_pk": "t2"}),
        ),
    )
    .await;
    let api = submit(&app, &job_body(&ids[..2], "anthropic", project.clone())).await;
    let other = submit(
        &app,
        &job_body(&ids[..1], "cj", json!({"project_id": "beta"})),
    )
    .await;
    for id in [&reported, &unpriced, &priced, &api, &other] {
        let job = app.wait_job(id).await;
        assert_eq!(job["status"], "succeeded", "{job}");
    }

    // Per L0: the envelope's numbers.
    let rows = app.refine_job_assignments(&reported).await;
    assert_eq!(rows.len(), 3);
    for row in &rows {
        assert_eq!(row["status"], "valid", "{row}");
        let u = &row["usage"];
        assert_eq!(u["source"], "reported");
        assert!(close(cost(&u["cost_usd"]), 0.01));
        assert_eq!(u["input_tokens"], 1000);
        assert_eq!(u["output_tokens"], 200);
        assert_eq!(u["cache_read_input_tokens"], 5);
        assert_eq!(u["cache_creation_input_tokens"], 7);
        assert_eq!(u["model"], "claude-fake");
        assert!(row["prompt_bytes"].as_i64().unwrap() > 100, "{row}");
    }
    let job = app.wait_job(&reported).await;
    let t = &job["usage"];
    assert_eq!(t["calls"], 3);
    assert!(close(cost(&t["cost_usd"]), 0.03), "{t}");
    assert_eq!(
        (t["input_tokens"].as_i64(), t["output_tokens"].as_i64()),
        (Some(3000), Some(600))
    );
    assert_eq!(t["unpriced_calls"], 0);
    assert_eq!(job["budget"], Value::Null);

    // Unknown costs are null, never guessed; totals say how many.
    let rows = app.refine_job_assignments(&unpriced).await;
    assert_eq!(rows[0]["usage"]["cost_usd"], Value::Null);
    assert_eq!(rows[0]["usage"]["source"], "reported");
    let job = app.wait_job(&unpriced).await;
    assert_eq!(job["usage"]["cost_usd"], Value::Null);
    assert_eq!(job["usage"]["unpriced_calls"], 2);
    assert_eq!(job["usage"]["output_tokens"], 400);

    // Priced from the table: 1M input tokens at $3/MTok (+ the cache tokens).
    let rows = app.refine_job_assignments(&priced).await;
    assert_eq!(rows[0]["usage"]["source"], "priced");
    let expected_priced = 3.0 + (5.0 * 0.3 + 7.0 * 3.75) / 1e6;
    assert!(close(cost(&rows[0]["usage"]["cost_usd"]), expected_priced));

    // The Anthropic API through a local fake server.
    let rows = app.refine_job_assignments(&api).await;
    assert_eq!(rows[0]["usage"]["input_tokens"], 1000);
    assert_eq!(rows[0]["usage"]["source"], "priced");
    let api_call = (1000.0 * 3.0 + 100.0 * 15.0 + 20.0 * 0.3 + 10.0 * 3.75) / 1e6;
    assert!(close(cost(&rows[0]["usage"]["cost_usd"]), api_call));

    // The dashboard's job list: its Cost column prices a `command` executor's calls
    // from the table as it does an API executor's (docs/configuration.md, "Prices
    // and budgets"), and says "unknown" where nothing priced them.
    let list = app.get("/ui/jobs").await.text().await.unwrap();
    for (job, shown) in [
        (&reported, "$0.03"),
        (&priced, "$3.000028"),
        (&unpriced, "unknown"),
        (&api, "$0.009087"),
    ] {
        assert_eq!(list_cost(&list, job), shown, "job {job}'s Cost cell");
    }

    // The project: by executor and model, and overall.
    let usage: Value = app.get_json("/v1/projects/alpha/usage").await;
    assert_eq!(usage["usage"]["calls"], 3 + 2 + 1 + 2, "{usage}");
    assert_eq!(
        usage["usage"]["cost_usd"],
        Value::Null,
        "two calls are unpriced"
    );
    assert_eq!(usage["usage"]["unpriced_calls"], 2);
    let known = 0.03 + expected_priced + 2.0 * api_call;
    assert!(
        close(cost(&usage["usage"]["known_cost_usd"]), known),
        "{usage}"
    );
    let groups = usage["by_executor_model"].as_array().unwrap();
    let group = |executor: &str| {
        groups
            .iter()
            .find(|g| g["executor"] == executor)
            .unwrap_or_else(|| panic!("no {executor} in {usage}"))
    };
    assert_eq!(group("cj")["usage"]["calls"], 3);
    assert_eq!(group("cj")["model"], "claude-fake");
    assert_eq!(group("cj")["executor_kind"], "command");
    assert_eq!(group("cj-unpriced")["usage"]["cost_usd"], Value::Null);
    assert_eq!(group("cj-unpriced")["model"], "claude-unpriced");
    assert_eq!(group("anthropic")["executor_kind"], "anthropic");
    assert!(close(
        cost(&group("anthropic")["usage"]["cost_usd"]),
        2.0 * api_call
    ));
    assert_eq!(groups.len(), 4);

    // Filters: the cycle, and the time window.
    let t2: Value = app.get_json("/v1/projects/alpha/usage?team_pk=t2").await;
    assert_eq!(t2["usage"]["calls"], 1);
    assert!(close(cost(&t2["usage"]["cost_usd"]), expected_priced));
    let future: Value = app
        .get_json("/v1/projects/alpha/usage?since=2999-01-01T00:00:00Z")
        .await;
    assert_eq!(future["usage"]["calls"], 0);
    assert!(close(cost(&future["usage"]["cost_usd"]), 0.0));
    let past: Value = app
        .get_json("/v1/projects/alpha/usage?since=2000-01-01T00:00:00Z&until=2999-01-01T00:00:00Z")
        .await;
    assert_eq!(past["usage"]["calls"], 8);
    let beta: Value = app.get_json("/v1/projects/beta/usage").await;
    assert!(close(cost(&beta["usage"]["cost_usd"]), 0.01));

    // Bad queries are clear 4xx.
    for query in [
        "since=yesterday",
        "since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z",
        "bogus=1",
    ] {
        let path = format!("/v1/projects/alpha/usage?{query}");
        app.get_problem(&path, 400, "invalid_query").await;
    }
    app.get_problem("/v1/projects/%20/usage", 422, "invalid_field")
        .await;

    // Prometheus.
    let metrics = app.get("/metrics").await.text().await.unwrap();
    let tokens = metrics
        .lines()
        .find(|l| {
            l.starts_with("l0_tokens_total{")
                && l.contains("executor=\"command\"")
                && l.contains("model=\"claude-fake\"")
                && l.contains("kind=\"output\"")
        })
        .unwrap_or_else(|| panic!("no l0_tokens_total:\n{metrics}"));
    assert!(
        tokens.rsplit(' ').next().unwrap().parse::<f64>().unwrap() >= 600.0,
        "{tokens}"
    );
    assert!(
        metrics.lines().any(|l| l.starts_with("l0_cost_usd_total{")
            && l.contains("executor=\"anthropic\"")
            && l.contains("model=\"claude-fake\"")),
        "{metrics}"
    );
    app.shutdown().await;
}

async fn budget_hit_mid_batch_starts_no_further_l0(backend: Backend) {
    let (app, dirs) = usage_app(backend, |s, _| {
        s.l0_concurrency = 2;
    })
    .await;
    // Batches of 2, but each start passes the gate: the first call's cost is
    // unknown, so it runs alone; after it ($0.01) a second one, expected to cost
    // as much, would not fit the $0.015 budget.
    let ids = ["P1-A1", "P1-A2", "P1-A3", "P1-A4", "P1-A5"];
    let id = submit(&app, &job_body(&ids, "cj", json!({"max_cost_usd": 0.015}))).await;
    let job = app.wait_job(&id).await;
    assert_eq!(job["status"], "failed", "{job}");
    assert_eq!(job["error"]["code"], "budget_exceeded", "{job}");
    assert!(
        job["error"]["message"].as_str().unwrap().contains("$0.015"),
        "{job}"
    );
    assert_eq!(job["budget"]["max_cost_usd"], 0.015);
    assert_eq!(job["budget"]["budget_action"], "finish");
    assert_eq!(job["usage"]["calls"], 1);
    assert!(close(cost(&job["usage"]["cost_usd"]), 0.01));

    assert_eq!(
        dirs.started(),
        ["P1-A1"],
        "the L0s not yet started never start"
    );
    let rows = app.refine_job_assignments(&id).await;
    let statuses: Vec<&str> = rows.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(
        statuses,
        ["valid", "pending", "pending", "pending", "pending"]
    );
    // The L0s the budget stop kept from starting are said to be not started,
    // never "failed" (docs/jobs.md, "Lifecycle").
    let message = job["error"]["message"].as_str().unwrap();
    let log: Vec<&str> = job["log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        log.contains(
            &format!(
                "NOT STARTED: L0 for P1-A2 was not started: {message} — proceeding without its \
             suggestions"
            )
            .as_str()
        ),
        "{log:?}"
    );
    assert!(
        !log.iter().any(|l| l.contains("failed — proceeding")),
        "{log:?}"
    );
    // The finished outcomes are kept: the partial result has every assignment,
    // the reviewed ones refined, the others unchanged.
    let result = &job["result"];
    assert_eq!(result["assignments"].as_array().unwrap().len(), 5, "{job}");

    // Output tokens too: 200 per call, a budget of 100 stops after the first batch
    // (a token budget reserves nothing: docs/jobs.md, "Budgets").
    let id = submit(
        &app,
        &job_body(&ids[..3], "cj", json!({"max_output_tokens": 100})),
    )
    .await;
    let job = app.wait_job(&id).await;
    assert_eq!(job["error"]["code"], "budget_exceeded");
    assert_eq!(job["usage"]["output_tokens"], 400);

    // Bad budgets are refused, naming the field, and nothing is queued.
    for (extra, field) in [
        (json!({"max_cost_usd": 0}), "max_cost_usd"),
        (json!({"max_cost_usd": "1"}), "max_cost_usd"),
        (json!({"max_output_tokens": 1.5}), "max_output_tokens"),
        (json!({"budget_action": "kill"}), "budget_action"),
        (
            json!({"max_cost_usd": 1, "budget_action": "stop"}),
            "budget_action",
        ),
    ] {
        let p = app
            .post_problem(
                "/v1/refine-jobs",
                &job_body(&ids[..1], "cj", extra),
                422,
                "invalid_context",
            )
            .await;
        assert_eq!(p["field"], field, "{p}");
    }
    app.shutdown().await;
}

async fn budget_kill_stops_running_l0s(backend: Backend) {
    // A declared ceiling of $0.001 a call lets both start together under the
    // $0.005 budget; the first then reports $0.01.
    let (app, dirs) = usage_app(backend, |s, _| {
        s.budgets.max_call_cost_usd.insert("cj".into(), 0.001);
    })
    .await;
    let started = Instant::now();
    let body = job_body(
        // P1-A1-waits spends the budget only once P1-A2-slow runs its child `sleep`.
        &["P1-A1-waits", "P1-A2-slow"],
        "cj",
        json!({"max_cost_usd": 0.005, "budget_action": "kill"}),
    );
    let id = submit(&app, &body).await;
    let job = app.wait_job(&id).await;
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the slow L0 was not killed"
    );
    assert_eq!(job["error"]["code"], "budget_exceeded", "{job}");
    // One "the" (it once read "the job's the budget of $0.005 is spent").
    assert_eq!(
        job["error"]["message"], "the job's budget of $0.005 is spent ($0.010000 so far)",
        "{job}"
    );
    assert_eq!(job["budget"]["budget_action"], "kill");
    let rows = app.refine_job_assignments(&id).await;
    assert_eq!(rows[0]["status"], "valid");
    assert_eq!(rows[1]["status"], "failed", "{rows:?}");
    // The killed call was started: it counts, with nothing known of it
    // (docs/jobs.md, "Totals").
    assert_eq!(rows[1]["usage"]["source"], "unknown", "{rows:?}");
    assert_eq!(rows[1]["usage"]["cost_usd"], Value::Null, "{rows:?}");
    assert_eq!(job["usage"]["calls"], 2, "the killed call counts: {job}");
    assert_eq!(job["usage"]["untracked_calls"], 1, "{job}");
    assert_eq!(job["usage"]["unpriced_calls"], 1, "{job}");
    assert_eq!(
        job["usage"]["cost_usd"],
        Value::Null,
        "one cost is unknown: {job}"
    );
    assert!(close(known_cost(&job["usage"]), 0.01), "{job}");
    // Its process group is gone: the script and its child `sleep`.
    for file in ["P1-A2-slow.l0pid", "P1-A2-slow.pid"] {
        let pid: i32 = std::fs::read_to_string(dirs.record.join(file))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let mut gone = false;
        for _ in 0..60 {
            // SAFETY: signal 0 only checks the process exists.
            if unsafe { libc::kill(pid, 0) } != 0 {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(gone, "the slow L0's {file} process survived");
    }
    app.shutdown().await;
}

async fn run_budget_spans_its_phases_and_merges_what_finished(backend: Backend) {
    // One worker, one L0 at a time: P1-A1 spends $0.01; a second call, expected to
    // cost as much, would not fit the run's $0.015, in P1 or in P2.
    let (app, dirs) = usage_app(backend, |s, _| {
        s.workers = 1;
        s.l0_concurrency = 1;
    })
    .await;
    let phase = |id: &str, n: i64| {
        json!({"id": id, "name": id, "goal": "g", "scope": "s", "technical_approach": "t",
               "relationship_notes": "", "ordering": n})
    };
    let a = |id: &str, phase: &str| {
        let mut v = assignment(id);
        v["phase_id"] = json!(phase);
        v
    };
    let body = json!({
        "plan": {"phases": [phase("P1", 1), phase("P2", 2)],
                 "assignments": [a("P1-A1", "P1"), a("P1-A2", "P1"), a("P2-A1", "P2"), a("P2-A2", "P2")]},
        "executor": "cj",
        "max_cost_usd": 0.015,
        "project_id": "alpha",
    });
    let response = app.post_json("/v1/refine-runs", &body).await;
    assert_eq!(response.status(), 202, "{:?}", response.text().await);
    let run: Value = response.json().await.unwrap();
    let run_id = run["id"].as_str().unwrap().to_owned();
    assert_eq!(run["budget"]["max_cost_usd"], 0.015);
    let deadline = Instant::now() + Duration::from_secs(60);
    let run = loop {
        let run: Value = app
            .get_json(&format!("/v1/refine-runs/{run_id}?wait=5"))
            .await;
        if run["result"].is_object() {
            break run;
        }
        assert!(Instant::now() < deadline, "{run}");
    };
    assert_eq!(run["status"], "failed", "{run}");
    let result = &run["result"];
    assert_eq!(
        result["budget_exceeded_phases"].as_array().unwrap().len(),
        2,
        "{result}"
    );
    assert_eq!(
        result["assignments"].as_array().unwrap().len(),
        4,
        "{result}"
    );
    assert_eq!(run["usage"]["calls"], 1);
    assert!(close(cost(&run["usage"]["cost_usd"]), 0.01));
    let phases = result["phases"].as_object().unwrap();
    let over: Vec<&Value> = phases
        .values()
        .filter(|p| p["error_code"] == "budget_exceeded")
        .collect();
    assert_eq!(over.len(), 2, "{result}");
    assert_eq!(dirs.started().len(), 1);
    app.shutdown().await;
}

async fn daily_limit_refuses_with_429_until_the_next_utc_day(backend: Backend) {
    let (app, _dirs) = usage_app(backend, |s, _| {
        s.budgets.project_daily_cost_usd = Some(0.01);
        s.budgets.projects.insert("generous".into(), 100.0);
    })
    .await;
    let ids = ["P1-A1", "P1-A2"];
    // Under the limit when it starts; its first call spends it ($0.01).
    let keyed = job_body(
        &ids,
        "cj",
        json!({"project_id": "alpha", "idempotency_key": "k1"}),
    );
    let first = submit(&app, &keyed).await;
    app.wait_job(&first).await;
    // A retry of that create still replays it.
    let replay = app.post_json("/v1/refine-jobs", &keyed).await;
    assert_eq!(replay.status(), 202);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");

    let before = chrono::Utc::now();
    let response = app
        .post_json(
            "/v1/refine-jobs",
            &job_body(&ids, "cj", json!({"project_id": "alpha"})),
        )
        .await;
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let p = expect_problem(response, 429, "budget_exhausted").await;
    let midnight = (before + chrono::Duration::days(1))
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc();
    let expected = (midnight - before).num_seconds() as u64;
    assert!(
        retry_after.abs_diff(expected) <= 5,
        "{retry_after} vs {expected}"
    );
    assert_eq!(p["retry_after_secs"], retry_after);
    assert_eq!(p["limit_usd"], 0.01);
    assert!(close(cost(&p["spent_usd"]), 0.01));

    // Runs too; nothing was created.
    let run = json!({"plan": {"phases": [{"id": "P1", "name": "One", "goal": "g", "scope": "s",
        "technical_approach": "t", "relationship_notes": "", "ordering": 1}],
        "assignments": [assignment("P1-A1")]}, "executor": "cj", "project_id": "alpha"});
    app.post_problem("/v1/refine-runs", &run, 429, "budget_exhausted")
        .await;
    let jobs: Value = app.get_json("/v1/refine-jobs?project_id=alpha").await;
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1);

    // Another project, a project with its own limit, and no project: unaffected.
    submit(&app, &job_body(&ids, "cj", json!({"project_id": "beta"}))).await;
    submit(
        &app,
        &job_body(&ids, "cj", json!({"project_id": "generous"})),
    )
    .await;
    submit(&app, &job_body(&ids, "cj", json!({}))).await;
    app.shutdown().await;
}

async fn resumed_job_counts_each_l0_once(backend: Backend) {
    use plangate::db::refine_jobs::{ClaimFor, L0Ended, PendingProgress};
    use plangate::domain::usage::L0Usage;

    // No workers: the test plays the worker that crashes.
    let (app, dirs) = usage_app(backend, |s, _| {
        s.workers = 0;
    })
    .await;
    let id = submit(
        &app,
        &job_body(&["P1-A1", "P1-A2"], "cj", json!({"project_id": "alpha"})),
    )
    .await;
    let job_id: Uuid = id.parse().unwrap();
    let lease_until = chrono::Utc::now() + chrono::Duration::milliseconds(200);
    let claimed = app
        .db
        .claim_refine_job(ClaimFor {
            worker_id: Uuid::new_v4(),
            lease_until,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.lease.job_id, job_id);
    let both = ["P1-A1".to_owned(), "P1-A2".to_owned()];
    let mut pending = PendingProgress::default();
    let progress = pending.start(&both, claimed.attempt, claimed.progress);
    assert_eq!((progress.l0_total, progress.l0_running), (2, 2));
    // P1-A1 ends and is stored with its cost; then the worker dies mid P1-A2.
    let usage = L0Usage {
        input_tokens: Some(10),
        output_tokens: Some(5),
        cache_read_input_tokens: None,
        cache_creation_input_tokens: None,
        cost_usd: Some(0.5),
        model: Some("claude-fake".into()),
        source: UsageSource::Reported,
    };
    let outcome = json!({"answer": "assignment_id = P1-A1\nchanges = []\ndependency_corrections = []\nwp_proposal_adjustments = []\n"});
    let done = L0Ended {
        assignment_id: "P1-A1".into(),
        status: plangate::domain::refine::L0Status::Valid,
        tries: 1,
        exit_code: Some(0),
        error: None,
        error_code: None,
        output_excerpt: None,
        outcome,
        usage,
        prompt_bytes: 123,
    };
    let progress = pending.end(vec![done], &[], &[], progress);
    assert_eq!((progress.l0_running, progress.l0_succeeded), (1, 1));
    // The start of both and the end of P1-A1, stored in one write.
    app.db
        .write_progress(claimed.lease, &pending)
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reaped = app
        .db
        .reap_expired_refine_jobs(|_| Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(reaped.requeued, 1);

    // Another server resumes it: only P1-A2 runs again.
    let replica = app.spawn_replica(|s| configure(s, &dirs, None)).await;
    let job = replica.wait_job(&id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(dirs.started(), ["P1-A2"], "the stored L0 did not run again");
    assert_eq!(job["usage"]["calls"], 2);
    assert!(close(cost(&job["usage"]["cost_usd"]), 0.51), "{job}");
    let usage = replica.project_usage("alpha").await;
    assert!(close(cost(&usage["usage"]["cost_usd"]), 0.51), "{usage}");
    replica.shutdown().await;
    app.shutdown().await;
}

async fn prompt_size_does_not_grow_with_the_task_text(backend: Backend) {
    let (app, dirs) = usage_app(backend, |_, _| {}).await;
    let small = "Ship it.".to_owned();
    let large = "The task, in great detail. ".repeat(40_000); // ~1 MiB
    let mut sizes = Vec::new();
    for text in [&small, &large] {
        let mut body = job_body(&["P1-A1"], "plain", json!({}));
        body["task_text"] = json!(text);
        let id = submit(&app, &body).await;
        app.wait_job(&id).await;
        let rows = app.refine_job_assignments(&id).await;
        sizes.push(rows[0]["prompt_bytes"].as_i64().unwrap());
        let prompt = std::fs::read_to_string(dirs.record.join("P1-A1.prompt")).unwrap();
        assert!(
            !prompt.contains("great detail"),
            "the prompt inlines the task"
        );
        assert_eq!(
            prompt.len() as i64,
            rows[0]["prompt_bytes"].as_i64().unwrap()
        );
    }
    assert_eq!(sizes[0], sizes[1], "prompt size grew with the task text");
    assert!(
        sizes[1] < 16 * 1024,
        "{sizes:?} for a {} byte task",
        large.len()
    );
    app.shutdown().await;
}

// -------------------------------------------------------------------- CLI

#[test]
fn cli_refine_prints_the_totals() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("plangate.toml");
    std::fs::write(
        &config,
        format!(
            "[executors.cj]\nkind = \"command\"\nargv = [\"{}\", \"claude-json\", \"0.25\", \"100\", \"20\"]\noutput = \"claude-json\"\ntimeout_secs = 30\n\n[prices.\"claude-fake\"]\ninput_per_mtok = 1.0\noutput_per_mtok = 2.0\n",
            l0_script()
        ),
    )
    .unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_plangate"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PLANGATE_") || key == "DATABASE_URL" {
            command.env_remove(key);
        }
    }
    let output = command
        .current_dir(&fixtures)
        .arg("refine")
        .arg(fixtures.join("context_P2.json"))
        .arg(fixtures.join("refined_plan.json"))
        .arg(dir.path().join("run"))
        .arg("--executor")
        .arg("cj")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout
            .lines()
            .last()
            .unwrap()
            .starts_with("phase_refined_path = "),
        "{stdout}"
    );
    // The example phase has three assignments, $0.25 each.
    let line = stderr
        .lines()
        .find(|l| l.starts_with("usage: "))
        .unwrap_or_else(|| panic!("no usage line:\n{stderr}"));
    assert_eq!(
        line,
        "usage: 3 L0 calls, 300 input + 60 output tokens (15 cache read, 21 cache write), cost $0.7500"
    );
}

// ------------------------------------------- budgets are a cap (docs/jobs.md, "Budgets")

/// One call of the `cj-40` executor.
const CALL_USD: f64 = 0.40;

fn known_cost(usage: &Value) -> f64 {
    cost(&usage["known_cost_usd"])
}

/// `refine_status` over MCP (no tokens configured: the endpoint is open), as an
/// orchestrator reads the job: `(isError, the answer's JSON)`.
/// The job as REST, MCP and the dashboard show it: stopped by its budget, never
/// plain success.
async fn assert_budget_exceeded_everywhere(app: &TestApp, job_id: &str) {
    let job: Value = app.get_json(&format!("/v1/refine-jobs/{job_id}")).await;
    assert_eq!(job["status"], "failed", "REST: {job}");
    assert_eq!(job["error"]["code"], "budget_exceeded", "REST: {job}");
    let (is_error, answer) = app
        .call_tool("refine_status", json!({"job_id": job_id}))
        .await;
    assert!(!is_error, "{answer}");
    assert_eq!(answer["status"], "failed", "MCP: {answer}");
    assert_eq!(answer["error"]["code"], "budget_exceeded", "MCP: {answer}");
    assert_eq!(
        answer["error"]["message"], job["error"]["message"],
        "the same text on REST and MCP"
    );
    let page = app
        .get(&format!("/ui/jobs/{job_id}"))
        .await
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("budget_exceeded"),
        "the dashboard's job page: {page}"
    );
}

/// Budgets are a cap (docs/jobs.md, "Budgets"): `max_cost_usd: 0.10` and six
/// $0.40 calls once spent $2.40 and ended
/// `succeeded` with `error: null`. The cap: at most one call over the budget.
async fn job_budget_caps_spend_within_one_call(backend: Backend) {
    let (app, dirs) = usage_app(backend, |_, _| {}).await;
    let ids = ["P1-A1", "P1-A2", "P1-A3", "P1-A4", "P1-A5", "P1-A6"];
    let id = submit(
        &app,
        &job_body(&ids, "cj-40", json!({"max_cost_usd": 0.10})),
    )
    .await;
    let job = app.wait_job(&id).await;
    let spent = known_cost(&job["usage"]);
    eprintln!(
        "FIGURE {backend:?} job budget $0.10: spent ${spent:.2} in {} calls",
        job["usage"]["calls"]
    );
    assert!(
        spent <= 0.10 + CALL_USD + 1e-9,
        "spent ${spent} of a $0.10 budget, more than one $0.40 call over: {job}"
    );
    assert_eq!(dirs.started().len(), 1, "only the first call fits: {job}");
    assert_budget_exceeded_everywhere(&app, &id).await;
    app.shutdown().await;
}

/// A three-phase plan, six assignments per phase.
fn three_phase_run(executor: &str, extra: Value) -> Value {
    let phase = |n: i64| {
        json!({"id": format!("P{n}"), "name": format!("P{n}"), "goal": "g", "scope": "s",
               "technical_approach": "t", "relationship_notes": "", "ordering": n})
    };
    let mut assignments = Vec::new();
    for p in 1..=3 {
        for a in 1..=6 {
            let mut v = assignment(&format!("P{p}-A{a}"));
            v["phase_id"] = json!(format!("P{p}"));
            assignments.push(v);
        }
    }
    let mut body = json!({
        "plan": {"phases": [phase(1), phase(2), phase(3)], "assignments": assignments},
        "executor": executor,
    });
    if let (Some(b), Value::Object(more)) = (body.as_object_mut(), extra) {
        b.extend(more);
    }
    body
}

/// docs/jobs.md, "Budgets": a three-phase run at $0.50 once spent $7.20. Its phase jobs run in
/// parallel on two servers sharing the database; the run's budget holds across
/// them.
async fn run_budget_caps_spend_across_two_replicas(backend: Backend) {
    let (app, dirs) = usage_app(backend, |_, _| {}).await;
    let other = app.spawn_replica(|s| configure(s, &dirs, None)).await;
    let response = app
        .post_json(
            "/v1/refine-runs",
            &three_phase_run("cj-40", json!({"max_cost_usd": 0.50})),
        )
        .await;
    assert_eq!(response.status(), 202, "{:?}", response.text().await);
    let run: Value = response.json().await.unwrap();
    let run_id = run["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(120);
    let run = loop {
        let run: Value = app
            .get_json(&format!("/v1/refine-runs/{run_id}?wait=5"))
            .await;
        if run["result"].is_object() {
            break run;
        }
        assert!(Instant::now() < deadline, "{run}");
    };
    let spent = known_cost(&run["usage"]);
    eprintln!(
        "FIGURE {backend:?} run budget $0.50: spent ${spent:.2} in {} calls",
        run["usage"]["calls"]
    );
    assert!(
        spent <= 0.50 + CALL_USD + 1e-9,
        "spent ${spent} of a $0.50 run budget, more than one $0.40 call over: {run}"
    );
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        !run["result"]["budget_exceeded_phases"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{run}"
    );
    // Each phase job shows why, on either replica.
    let phases = run["phases"].as_object().unwrap();
    assert_eq!(phases.len(), 3, "{run}");
    for phase in phases.values() {
        let job = other.wait_job(phase["job_id"].as_str().unwrap()).await;
        if job["status"] != "succeeded" {
            assert_eq!(job["error"]["code"], "budget_exceeded", "{job}");
        }
    }
    other.shutdown().await;
    app.shutdown().await;
}

/// docs/jobs.md, "Per-project daily limit": a project with a $1.00 daily limit once spent $9.60 after 20 concurrent
/// job creates. The limit is held in the database: 20 creates split over two
/// servers on one database spend at most one call over it.
async fn daily_limit_caps_concurrent_jobs_across_two_replicas(backend: Backend) {
    let dirs = Dirs::new();
    let limit = |s: &mut Settings| {
        configure(s, &dirs, None);
        s.budgets.project_daily_cost_usd = Some(1.0);
    };
    let app = spawn_app_with(backend, limit).await;
    let other = app.spawn_replica(limit).await;
    let body = job_body(
        &["P1-A1", "P1-A2", "P1-A3"],
        "cj-40",
        json!({"project_id": "alpha"}),
    );
    let creates = (0..20).map(|i| {
        let base = if i % 2 == 0 {
            app.base.clone()
        } else {
            other.base.clone()
        };
        let body = body.clone();
        async move {
            let response = reqwest::Client::new()
                .post(format!("{base}/v1/refine-jobs"))
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let answer: Value = response.json().await.unwrap();
            assert!(status == 202 || status == 429, "{status} {answer}");
            (status == 202).then(|| answer["id"].as_str().unwrap().to_owned())
        }
    });
    let ids: Vec<String> = futures::future::join_all(creates)
        .await
        .into_iter()
        .flatten()
        .collect();
    let mut stopped = Vec::new();
    for id in &ids {
        let job = other.wait_job(id).await;
        if job["status"] != "succeeded" {
            assert_eq!(job["error"]["code"], "budget_exceeded", "{job}");
            stopped.push(id.clone());
        }
    }
    let usage: Value = app.get_json("/v1/projects/alpha/usage").await;
    let spent = known_cost(&usage["usage"]);
    eprintln!(
        "FIGURE {backend:?} daily limit $1.00, {} jobs created of 20: spent ${spent:.2} in {} calls",
        ids.len(),
        usage["usage"]["calls"]
    );
    assert!(
        spent <= 1.0 + CALL_USD + 1e-9,
        "the project spent ${spent} of a $1.00 daily limit, more than one $0.40 call over"
    );
    assert!(!stopped.is_empty(), "some job must have been stopped");
    assert_budget_exceeded_everywhere(&app, &stopped[0]).await;
    other.shutdown().await;
    app.shutdown().await;
}

/// A ceiling declared too low lets both calls start together under a $0.50
/// budget; they spend $0.80. All assignments ran, but the job must not read
/// plain success.
async fn job_overrun_by_its_calls_ends_budget_exceeded(backend: Backend) {
    let (app, dirs) = usage_app(backend, |s, _| {
        s.budgets.max_call_cost_usd.insert("cj-40".into(), 0.01);
    })
    .await;
    let body = job_body(&["P1-A1", "P1-A2"], "cj-40", json!({"max_cost_usd": 0.50}));
    let id = submit(&app, &body).await;
    let job = app.wait_job(&id).await;
    assert_eq!(dirs.started().len(), 2, "{job}");
    assert!(close(known_cost(&job["usage"]), 0.80), "{job}");
    assert!(
        job["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("overrun"),
        "{job}"
    );
    assert_eq!(
        job["result"]["assignments"].as_array().map(Vec::len),
        Some(2),
        "the result of every call is kept: {job}"
    );
    assert_budget_exceeded_everywhere(&app, &id).await;
    app.shutdown().await;
}

/// A worker that dies holding a reservation (its lease expires) does not hold it
/// forever: the reaper's re-queue releases it, and the job resumed on another
/// server starts its calls again.
async fn a_lost_lease_releases_its_reservations(backend: Backend) {
    use plangate::db::refine_jobs::{BudgetScopes, ClaimFor, Gated};
    use plangate::domain::usage::{ScopeLimit, utc_day_start};

    let dirs = Dirs::new();
    let limited = |s: &mut Settings| {
        configure(s, &dirs, None);
        s.budgets.project_daily_cost_usd = Some(1.0);
        s.budgets.max_call_cost_usd.insert("cj-40".into(), 0.90);
    };
    // No workers: the test plays the worker that dies.
    let app = spawn_app_with(backend, |s| {
        limited(s);
        s.workers = 0;
    })
    .await;
    let body = job_body(&["P1-A1", "P1-A2"], "cj-40", json!({"project_id": "alpha"}));
    let id = submit(&app, &body).await;
    let claimed = app
        .db
        .claim_refine_job(ClaimFor {
            worker_id: Uuid::new_v4(),
            lease_until: chrono::Utc::now() + chrono::Duration::milliseconds(300),
        })
        .await
        .unwrap()
        .unwrap();
    let scopes = BudgetScopes {
        request: None,
        run_id: None,
        project_day: Some((
            "alpha".into(),
            ScopeLimit {
                name: "project alpha's daily limit".into(),
                max_cost_usd: Some(1.0),
                max_output_tokens: None,
            },
            utc_day_start(chrono::Utc::now()),
        )),
        call_ceiling_usd: Some(0.90),
    };
    let gate = |assignment: &'static str, progress| {
        let (db, scopes, lease, attempt) = (
            app.db.clone(),
            scopes.clone(),
            claimed.lease,
            claimed.attempt,
        );
        async move {
            db.gate_l0_start(lease, attempt, assignment, progress, &scopes, None)
                .await
                .unwrap()
                .unwrap()
        }
    };
    let Gated::Started(progress) = gate("P1-A1", claimed.progress).await else {
        panic!("the first call fits the $1.00 limit");
    };
    // $0.90 is reserved: a second $0.90 call waits for the first to end.
    assert_eq!(gate("P1-A2", progress).await, Gated::Wait(None));

    // The worker dies: its lease expires and the reaper re-queues the job.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let reaped = app
        .db
        .reap_expired_refine_jobs(|_| Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(reaped.requeued, 1);

    let replica = app.spawn_replica(limited).await;
    let job = replica.wait_job(&id).await;
    // P1-A1 runs ($0.40); P1-A2's $0.90 would not fit what is left.
    assert_eq!(dirs.started(), ["P1-A1"], "{job}");
    assert_eq!(job["usage"]["calls"], 1, "{job}");
    assert_eq!(job["error"]["code"], "budget_exceeded", "{job}");
    replica.shutdown().await;
    app.shutdown().await;
}

/// docs/observability.md: `/metrics` labels only the models the configuration names (the
/// profiles' `model`, the `[prices]` keys). An agent that reports a new model
/// name on every call adds no series but `model="other"`.
async fn metrics_label_unconfigured_models_as_other(backend: Backend) {
    let (app, _dirs) = usage_app(backend, |s, dirs| {
        s.executors.insert(
            "cj-random".into(),
            command(
                Some(&dirs.record),
                &["claude-json", "0.01", "1000", "200", "random"],
                true,
            ),
        );
    })
    .await;
    let ids: Vec<String> = (1..=30).map(|i| format!("P1-A{i}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let job = submit(&app, &job_body(&ids, "cj-random", json!({}))).await;
    assert_eq!(app.wait_job(&job).await["status"], "succeeded");
    // The records keep what the agent said.
    let records = app.refine_job_assignments(&job).await;
    assert!(
        records
            .iter()
            .all(|r| r["usage"]["model"].as_str().unwrap().starts_with("model-")),
        "{records:?}"
    );

    let metrics = app.get("/metrics").await.text().await.unwrap();
    let usage_lines: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("l0_tokens_total{") || l.starts_with("l0_cost_usd_total{"))
        .collect();
    let labels: std::collections::BTreeSet<&str> = usage_lines
        .iter()
        .filter_map(|l| l.split("model=\"").nth(1)?.split('"').next())
        .collect();
    let allowed: std::collections::BTreeSet<&str> =
        ["claude-fake", "other", "unknown"].into_iter().collect();
    assert!(
        labels.is_subset(&allowed),
        "model labels {labels:?} beyond the configured ones:\n{}",
        usage_lines.join("\n")
    );
    let other_output = usage_lines
        .iter()
        .find(|l| {
            l.starts_with("l0_tokens_total{")
                && l.contains("model=\"other\"")
                && l.contains("kind=\"output\"")
        })
        .unwrap_or_else(|| panic!("no model=\"other\" series:\n{metrics}"));
    assert!(
        other_output
            .rsplit(' ')
            .next()
            .unwrap()
            .parse::<f64>()
            .unwrap()
            >= 30.0 * 200.0,
        "{other_output}"
    );
    app.shutdown().await;
}
