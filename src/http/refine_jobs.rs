//! `/v1/refine-jobs`: submit a phase refine (202 + `Location`, idempotent with a
//! key), read it (`?wait=` long-poll), list, result, per-L0 records, SSE events,
//! cancel. The work itself happens in `jobs/`, on whichever replica claims it.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use super::AppState;
use super::auth::Caller;
use super::extract::{Json, Path, Query, refuse_nul};
use crate::db::refine_jobs::{Created, JobFilter, NewRefineJob, StoredJob, StoredL0};
use crate::domain::ids::Ident;
use crate::domain::job::JobStatus;
use crate::domain::refine::{
    PhaseContext, RefineInputError, batches, context_from_value, is_valid_id, plan_from_value,
};
use crate::domain::usage::Budget;
use crate::error::{ApiError, ForbiddenProject, Problem};
use crate::jobs::request::{StoredRequest, confine};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_refine_job, list_refine_jobs))
        .routes(routes!(get_refine_job))
        .routes(routes!(refine_job_result))
        .routes(routes!(refine_job_assignments))
        .routes(routes!(refine_job_events))
        .routes(routes!(cancel_refine_job))
}

/// Longest `?wait=`, in seconds (docs/spec/jobs.md).
pub const MAX_WAIT_SECS: u64 = 30;
/// How often a waiting request looks at the database when nothing local woke it
/// (the job may be worked by another replica).
const WAIT_POLL: Duration = Duration::from_millis(200);
const MAX_PAGE_SIZE: u32 = 100;
const DEFAULT_PAGE_SIZE: u32 = 20;
const MAX_IDEMPOTENCY_KEY_BYTES: usize = 256;

/// A refine job submission. A body that cannot be read is 422 `invalid_context`
/// with one `FATAL: failed to parse request body: {field}: {reason}` line.
#[allow(dead_code)]
#[derive(Deserialize, ToSchema)]
pub struct CreateRefineJobRequest {
    /// The phase context (`context_{phase_id}.json`): `phase_id`, `assignments`,
    /// `peer_summaries`, optional `task_file_path` (read only inside
    /// `PLANGATE_WORKSPACE_ROOT`) or `task_text`.
    #[schema(value_type = Object)]
    context: Value,
    /// The refined plan (PlanDocument) with its `phases`.
    #[schema(value_type = Object)]
    refined_plan: Value,
    /// The task inline; the L0s get a server-side copy's path, never the text.
    task_text: Option<String>,
    /// Executor profile name; the server's `default_executor` when absent.
    executor: Option<String>,
    /// Write `{output_dir}/refine_contexts/{phase_id}_result.json` too (inside
    /// `PLANGATE_OUTPUT_ROOT`).
    output_dir: Option<String>,
    /// The refine run this job belongs to.
    run_id: Option<Uuid>,
    #[schema(value_type = Option<crate::domain::ids::Ident>)]
    project_id: Option<String>,
    #[schema(value_type = Option<crate::domain::ids::Ident>)]
    team_pk: Option<String>,
    /// Same as the `Idempotency-Key` header.
    idempotency_key: Option<String>,
    /// Start no further L0 once the job's L0 calls have cost this much (US
    /// dollars; calls of unknown cost count 0). The job then ends `failed` with
    /// `budget_exceeded`, keeping the outcomes of the L0s that finished.
    #[schema(exclusive_minimum = 0.0)]
    max_cost_usd: Option<f64>,
    /// Start no further L0 once the job's L0 calls have produced this many
    /// output tokens.
    #[schema(minimum = 1)]
    max_output_tokens: Option<i64>,
    /// What a reached budget does to the L0s still running: let them finish
    /// (default; their cost is committed) or kill them. Only with a limit.
    budget_action: Option<crate::domain::usage::BudgetAction>,
}

const CREATE_FIELDS: [&str; 12] = [
    "context",
    "refined_plan",
    "task_text",
    "executor",
    "output_dir",
    "run_id",
    "project_id",
    "team_pk",
    "idempotency_key",
    "max_cost_usd",
    "max_output_tokens",
    "budget_action",
];

/// `FATAL: failed to parse request body: {detail}` as a 422 `invalid_context`.
pub(crate) fn fatal(detail: impl std::fmt::Display) -> ApiError {
    ApiError::unprocessable(
        "invalid_context",
        format!("FATAL: failed to parse request body: {detail}"),
    )
}

fn input_error(e: RefineInputError, prefix: &str) -> ApiError {
    let path = e.path.as_ref().map(|p| format!("{prefix}.{p}"));
    let detail = match &path {
        Some(p) => format!("{p}: {}", e.reason),
        None => format!("{prefix}: {}", e.reason),
    };
    let err = fatal(detail);
    match path {
        Some(p) => err.with("field", p),
        None => err.with("field", prefix),
    }
}

/// An optional string member; anything else is a FATAL naming the field.
pub(crate) fn opt_str<'a>(
    body: &'a Map<String, Value>,
    field: &str,
) -> Result<Option<&'a str>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(fatal(format!("{field}: must be a string")).with("field", field)),
    }
}

/// A validated submission, ready to insert.
pub struct ValidSubmission {
    pub context: PhaseContext,
    pub request: StoredRequest,
    pub executor: std::sync::Arc<crate::agents::Executor>,
    pub project_id: Option<Ident>,
    pub team_pk: Option<Ident>,
    pub run_id: Option<Uuid>,
    pub idempotency_key: Option<String>,
    pub request_hash: String,
    pub budget: Budget,
}

/// Parses and checks a submission: nothing is queued unless all of it is usable.
pub fn validate_submission(
    state: &AppState,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<ValidSubmission, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(fatal)?;
    let Value::Object(body) = value else {
        return Err(fatal("the body must be a JSON object"));
    };
    if let Some(unknown) = body.keys().find(|k| !CREATE_FIELDS.contains(&k.as_str())) {
        return Err(fatal(format!(
            "unknown field {unknown:?} (expected one of {})",
            CREATE_FIELDS.join(", ")
        ))
        .with("field", unknown.as_str()));
    }
    let context_value = body
        .get("context")
        .filter(|v| !v.is_null())
        .ok_or_else(|| fatal("context: missing").with("field", "context"))?;
    let context =
        context_from_value("request body", context_value).map_err(|e| input_error(e, "context"))?;
    let plan_value = body
        .get("refined_plan")
        .filter(|v| !v.is_null())
        .ok_or_else(|| fatal("refined_plan: missing").with("field", "refined_plan"))?;
    plan_from_value("request body", plan_value).map_err(|e| input_error(e, "refined_plan"))?;

    let executor = resolve_executor(state, opt_str(&body, "executor")?)?;

    let task_text = opt_str(&body, "task_text")?.map(str::to_owned);
    let task_file_path = match context.task_file_path.as_deref() {
        None => None,
        Some(_) if task_text.is_some() => {
            return Err(fatal("give task_text or context.task_file_path, not both")
                .with("field", "task_text"));
        }
        Some(path) => {
            let root = state.settings.workspace_root.as_deref().ok_or_else(|| {
                ApiError::unprocessable(
                    "task_file_not_allowed",
                    "context.task_file_path is set but the server has no PLANGATE_WORKSPACE_ROOT; \
                     send task_text instead",
                )
                .with("field", "context.task_file_path")
            })?;
            let resolved = confine(root, path, true).map_err(|reason| {
                ApiError::unprocessable(
                    "task_file_not_allowed",
                    format!("context.task_file_path: {reason}"),
                )
                .with("field", "context.task_file_path")
            })?;
            Some(resolved.display().to_string())
        }
    };
    let output_dir = confine_output_dir(state, opt_str(&body, "output_dir")?)?;
    let project_id = Ident::parse_optional("project_id", opt_str(&body, "project_id")?)?;
    let team_pk = Ident::parse_optional("team_pk", opt_str(&body, "team_pk")?)?;
    let run_id = match opt_str(&body, "run_id")? {
        None => None,
        Some(text) => Some(
            text.parse::<Uuid>()
                .map_err(|_| fatal("run_id: must be a UUID").with("field", "run_id"))?,
        ),
    };
    let idempotency_key = idempotency_key(headers, opt_str(&body, "idempotency_key")?)?;
    let budget = budget_fields(&body)?;

    let request_hash = body_hash(&body);
    Ok(ValidSubmission {
        request: StoredRequest {
            context: context_value.clone(),
            refined_plan: Some(plan_value.clone()),
            task_file_path,
            task_text,
            output_dir,
        },
        context,
        executor,
        project_id,
        team_pk,
        run_id,
        idempotency_key,
        request_hash,
        budget,
    })
}

/// `max_cost_usd`, `max_output_tokens` and `budget_action` of a body.
pub(crate) fn budget_fields(body: &Map<String, Value>) -> Result<Budget, ApiError> {
    Budget::from_fields(
        body.get("max_cost_usd"),
        body.get("max_output_tokens"),
        body.get("budget_action"),
    )
    .map_err(|e| fatal(&e).with("field", e.field))
}

/// 429 `budget_exhausted` (with `Retry-After` to the next UTC day) when the
/// project's daily limit is already spent.
pub(crate) async fn check_daily_limit(
    state: &AppState,
    project_id: Option<&Ident>,
) -> Result<(), ApiError> {
    let checked = crate::jobs::budget::check_daily_limit(
        &state.db,
        &state.settings,
        project_id.map(Ident::as_str),
    )
    .await?;
    checked.map_err(|spent| {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "budget_exhausted",
            format!(
                "project {}'s daily limit of ${} is spent (${:.6} today, UTC); retry after the next UTC midnight",
                spent.project_id, spent.limit_usd, spent.spent_usd
            ),
        )
        .with("limit_usd", spent.limit_usd)
        .with("spent_usd", spent.spent_usd)
        .with("retry_after_secs", spent.retry_after_secs)
    })
}

/// The executor a submission names (else the default); 422 `unknown_executor`.
pub(crate) fn resolve_executor(
    state: &AppState,
    name: Option<&str>,
) -> Result<std::sync::Arc<crate::agents::Executor>, ApiError> {
    state.executors.resolve(name).ok_or_else(|| {
        ApiError::unprocessable(
            "unknown_executor",
            format!(
                "executor {:?} is not configured (configured: {})",
                name.unwrap_or_default(),
                state.executors.names().collect::<Vec<_>>().join(", ")
            ),
        )
        .with("field", "executor")
    })
}

/// `output_dir` resolved inside `PLANGATE_OUTPUT_ROOT`; 422 `output_not_allowed`
/// when the server has no root or the path leaves it.
pub(crate) fn confine_output_dir(
    state: &AppState,
    dir: Option<&str>,
) -> Result<Option<String>, ApiError> {
    let Some(dir) = dir else { return Ok(None) };
    let not_allowed = |detail: String| {
        ApiError::unprocessable("output_not_allowed", detail).with("field", "output_dir")
    };
    let root = state.settings.output_root.as_deref().ok_or_else(|| {
        not_allowed("output_dir is set but the server has no PLANGATE_OUTPUT_ROOT".into())
    })?;
    let resolved =
        confine(root, dir, false).map_err(|reason| not_allowed(format!("output_dir: {reason}")))?;
    Ok(Some(resolved.display().to_string()))
}

/// The idempotency hash of a submission: the body without its `idempotency_key`.
pub(crate) fn body_hash(body: &Map<String, Value>) -> String {
    let mut hashed = body.clone();
    hashed.remove("idempotency_key");
    canonical_hash(&Value::Object(hashed))
}

/// 202 with `Location`, and `Idempotent-Replayed: true` for a replayed create.
pub(crate) fn accepted(body: &impl Serialize, location: &str, replayed: bool) -> Response {
    let mut response = (StatusCode::ACCEPTED, Json(body)).into_response();
    let headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(location) {
        headers.insert(header::LOCATION, location);
    }
    if replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}

pub(crate) fn key_reused() -> ApiError {
    ApiError::unprocessable(
        "idempotency_key_reused",
        "this Idempotency-Key was used with a different body",
    )
}

/// A path `{id}` that must be a UUID; 400 `invalid_path` naming what it is.
pub(crate) fn parse_id(raw: &str, what: &str) -> Result<Uuid, ApiError> {
    raw.parse().map_err(|_| {
        ApiError::bad_request("invalid_path", format!("{raw:?} is not a {what} id (UUID)"))
    })
}

/// The key from the `Idempotency-Key` header or the body field (equal if both).
pub fn idempotency_key(
    headers: &HeaderMap,
    field: Option<&str>,
) -> Result<Option<String>, ApiError> {
    let header = match headers.get("idempotency-key") {
        None => None,
        Some(v) => Some(v.to_str().map_err(|_| {
            ApiError::bad_request(
                "invalid_idempotency_key",
                "Idempotency-Key must be visible ASCII",
            )
        })?),
    };
    let key = match (header, field) {
        (Some(h), Some(f)) if h != f => {
            return Err(ApiError::unprocessable(
                "invalid_idempotency_key",
                "the Idempotency-Key header and the idempotency_key field differ",
            ));
        }
        (Some(k), _) | (None, Some(k)) => Some(k),
        (None, None) => None,
    };
    match key {
        Some(k)
            if k.trim().is_empty()
                || k.len() > MAX_IDEMPOTENCY_KEY_BYTES
                || k.chars().any(char::is_control) =>
        {
            Err(ApiError::unprocessable(
                "invalid_idempotency_key",
                format!(
                    "an idempotency key is 1 to {MAX_IDEMPOTENCY_KEY_BYTES} bytes without control characters"
                ),
            ))
        }
        other => Ok(other.map(str::to_owned)),
    }
}

/// SHA-256 of the body with object keys sorted, so a retry that reorders keys is
/// still "the same body". Stable across replicas and releases.
pub fn canonical_hash(value: &Value) -> String {
    fn canonical(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), canonical(&m[k])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
            other => other.clone(),
        }
    }
    let bytes = serde_json::to_vec(&canonical(value)).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// `(assignment_id, batch)` in natural order, batches numbered from 1.
pub fn l0_rows(context: &PhaseContext, max_parallel: usize) -> Vec<(String, i32)> {
    let ids: Vec<String> = context.assignments.iter().map(|a| a.id.clone()).collect();
    batches(&ids, max_parallel)
        .into_iter()
        .enumerate()
        .flat_map(|(i, b)| {
            let n = i32::try_from(i + 1).unwrap_or(i32::MAX);
            b.into_iter().map(move |id| (id, n))
        })
        .collect()
}

/// Submit a refine job for one phase.
///
/// Runs asynchronously: poll `GET /v1/refine-jobs/{id}?wait=30` or follow
/// `/events`. With an `Idempotency-Key`, a retry with the same body returns the
/// original job (header `Idempotent-Replayed: true`); another body with that key
/// is a 422.
#[utoipa::path(post, path = "/v1/refine-jobs", tag = "refine-jobs",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes the create safe to retry")),
    request_body(content = CreateRefineJobRequest, content_type = "application/json"),
    responses(
        ForbiddenProject,
        (status = 202, description = "Queued (or the original job of this Idempotency-Key)", body = StoredJob,
            headers(("Location" = String, description = "The job's URL"))),
        (status = 400, description = "Unreadable Idempotency-Key header", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body over the size limit", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_context` (FATAL: failed to parse request body: …), `unknown_executor`, \
            `task_file_not_allowed`, `output_not_allowed`, `invalid_field`, `unknown_run`, \
            `invalid_idempotency_key`, `idempotency_key_reused`", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "`budget_exhausted`: the project's daily limit is spent; the problem carries \
            `limit_usd`, `spent_usd` and `retry_after_secs`", body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Seconds to the next UTC midnight"))),
        (status = 503, description = "Database unavailable", body = Problem, content_type = "application/problem+json"),
    ))]
async fn create_refine_job(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    require_json(&headers)?;
    refuse_nul(&body)?;
    let valid = validate_submission(&state, &headers, &body)?;
    caller.check_optional_project(valid.project_id.as_ref().map(Ident::as_str))?;
    if let Some(run_id) = valid.run_id {
        // The job joins the run (its result is merged into it): the caller must be
        // allowed to act on the run's project too.
        let Some(run) = state.db.refine_run(run_id).await? else {
            return Err(ApiError::unprocessable(
                "unknown_run",
                format!("run_id {run_id} names no refine run"),
            )
            .with("field", "run_id"));
        };
        caller.check_optional_project(run.project_id.as_deref())?;
    }
    // A retry of a create that went through replays it, limit or not.
    let replay = match valid.idempotency_key.as_deref() {
        Some(key) => state.db.refine_job_key_exists(key).await?,
        None => false,
    };
    if !replay {
        check_daily_limit(&state, valid.project_id.as_ref()).await?;
    }
    let request = valid.request.to_value();
    let new = NewRefineJob {
        id: Uuid::now_v7(),
        phase_id: &valid.context.phase_id,
        run_id: valid.run_id,
        project_id: valid.project_id.as_ref().map(Ident::as_str),
        team_pk: valid.team_pk.as_ref().map(Ident::as_str),
        executor: valid.executor.name(),
        executor_kind: valid.executor.kind(),
        request: &request,
        idempotency_key: valid.idempotency_key.as_deref(),
        request_hash: Some(&valid.request_hash),
        max_attempts: state.settings.max_attempts,
        l0s: l0_rows(&valid.context, state.settings.l0_concurrency),
        budget: valid.budget,
    };
    match state.db.create_refine_job(&new).await? {
        Created::New(job) => {
            metrics::counter!("refine_jobs_created_total").increment(1);
            state.wake_workers().await;
            Ok(accepted(
                &job,
                &format!("/v1/refine-jobs/{}", job.id),
                false,
            ))
        }
        Created::Existing(job) => Ok(accepted(&job, &format!("/v1/refine-jobs/{}", job.id), true)),
        Created::KeyReused => Err(key_reused()),
    }
}

/// 415 unless the body is declared JSON (a missing header is tolerated, since
/// the body is parsed as JSON anyway, but a different type is refused).
pub fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let ok = value
        .to_str()
        .ok()
        .and_then(|v| v.split(';').next())
        .map(|v| {
            let v = v.trim().to_ascii_lowercase();
            v == "application/json" || (v.starts_with("application/") && v.ends_with("+json"))
        })
        .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as application/json",
        ))
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// Long-poll: return as soon as the job changes, or after this many seconds
    /// (at most 30).
    #[param(minimum = 0, maximum = 30)]
    pub wait: Option<u64>,
}

/// The job, if the caller may see its project.
async fn load_job(state: &AppState, caller: &Caller, id: Uuid) -> Result<StoredJob, ApiError> {
    let job = state
        .db
        .refine_job(id)
        .await?
        .ok_or_else(|| ApiError::not_found("refine job", &id.to_string()))?;
    caller.check_optional_project(job.project_id.as_deref())?;
    Ok(job)
}

/// Long-poll: returns once `changed()` says so, or after `wait` (capped at 30 s and
/// kept inside the request timeout). Local writes wake it at once; changes made
/// by another replica are seen by polling.
pub(crate) async fn wait_until_changed<F, Fut>(
    state: &AppState,
    wait: Duration,
    concerns: impl Fn(Uuid) -> bool,
    mut changed: F,
) -> Result<(), ApiError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, ApiError>>,
{
    let mut wakeups = state.hub.subscribe();
    let cap = Duration::from_secs(MAX_WAIT_SECS).min(
        state
            .settings
            .request_timeout
            .saturating_sub(Duration::from_secs(1)),
    );
    let deadline = tokio::time::Instant::now() + wait.min(cap);
    loop {
        if changed().await? || state.is_shutting_down() {
            return Ok(());
        }
        tokio::select! {
            _ = wake_for(&mut wakeups, &concerns) => {}
            _ = tokio::time::sleep(WAIT_POLL) => {}
            _ = tokio::time::sleep_until(deadline) => return Ok(()),
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(());
        }
    }
}

/// Resolves when a wake-up concerns us (or some were missed: check again).
async fn wake_for(
    wakeups: &mut tokio::sync::broadcast::Receiver<Uuid>,
    concerns: &impl Fn(Uuid) -> bool,
) {
    loop {
        match wakeups.recv().await {
            Ok(id) if concerns(id) => return,
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return,
            // Closed: never again; the caller's poll and deadline still run.
            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                std::future::pending::<()>().await
            }
        }
    }
}

/// A refine job. With `?wait=N` the answer comes as soon as the job changes
/// state or progresses (or after N seconds, unchanged).
#[utoipa::path(get, path = "/v1/refine-jobs/{id}", tag = "refine-jobs",
    params(("id" = Uuid, Path, description = "Job id"), WaitQuery),
    responses(
        ForbiddenProject,
        (status = 200, description = "The job", body = StoredJob),
        (status = 400, description = "Not a job id, or a bad `wait`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable", body = Problem, content_type = "application/problem+json"),
    ))]
async fn get_refine_job(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw_id): Path<String>,
    Query(query): Query<WaitQuery>,
) -> Result<Json<StoredJob>, ApiError> {
    let id = parse_id(&raw_id, "job")?;
    let job = load_job(&state, &caller, id).await?;
    let wait = query.wait.unwrap_or(0);
    if wait == 0 || job.status.is_terminal() {
        return Ok(Json(job));
    }
    wait_until_changed(
        &state,
        Duration::from_secs(wait),
        |j| j == id,
        || async {
            Ok(state
                .db
                .refine_job_version(id)
                .await?
                .is_none_or(|(v, s)| v != job.version || s.is_terminal()))
        },
    )
    .await?;
    Ok(Json(load_job(&state, &caller, id).await?))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    pub status: Option<JobStatus>,
    #[param(pattern = "^[A-Za-z0-9_-]+$")]
    pub phase_id: Option<String>,
    pub run_id: Option<Uuid>,
    #[param(value_type = Option<crate::domain::ids::Ident>)]
    pub project_id: Option<String>,
    #[param(value_type = Option<crate::domain::ids::Ident>)]
    pub team_pk: Option<String>,
    /// 1 to 100 (default 20).
    #[param(minimum = 1, maximum = 100)]
    pub page_size: Option<u32>,
    /// `next_page_token` of the previous page.
    #[param(value_type = Option<Uuid>)]
    pub page_token: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct JobPage {
    /// Newest first.
    pub jobs: Vec<StoredJob>,
    /// Pass as `page_token` for the next page; null on the last page.
    pub next_page_token: Option<String>,
}

/// Refine jobs, newest first, filtered, in cursor pages.
#[utoipa::path(get, path = "/v1/refine-jobs", tag = "refine-jobs",
    params(ListQuery),
    responses(
        ForbiddenProject,
        (status = 200, description = "A page of jobs", body = JobPage),
        (status = 400, description = "Bad filter, page size or page token", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable", body = Problem, content_type = "application/problem+json"),
    ))]
async fn list_refine_jobs(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<ListQuery>,
) -> Result<Json<JobPage>, ApiError> {
    let page_size = query.page_size.unwrap_or(DEFAULT_PAGE_SIZE);
    if !(1..=MAX_PAGE_SIZE).contains(&page_size) {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("page_size must be between 1 and {MAX_PAGE_SIZE}"),
        ));
    }
    let after = match query.page_token.as_deref() {
        None => None,
        Some(token) => Some(token.parse::<Uuid>().map_err(|_| {
            ApiError::bad_request(
                "invalid_query",
                "page_token is not a token this server issued",
            )
        })?),
    };
    let filter_id = |field: &'static str, value: Option<String>| {
        Ident::parse_optional(field, value.as_deref())
            .map(|id| id.map(|i| i.as_str().to_owned()))
            .map_err(|e| ApiError::bad_request("invalid_query", e.to_string()).with("field", field))
    };
    if let Some(phase) = query.phase_id.as_deref().filter(|p| !is_valid_id(p)) {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("phase_id {phase:?} is not an id ([A-Za-z0-9_-]+)"),
        )
        .with("field", "phase_id"));
    }
    let filter = JobFilter {
        status: query.status,
        phase_id: query.phase_id,
        run_id: query.run_id,
        project_id: filter_id("project_id", query.project_id)?,
        team_pk: filter_id("team_pk", query.team_pk)?,
        allowed_projects: caller.allowed_projects().map(<[String]>::to_vec),
    };
    let mut jobs = state.db.refine_jobs(&filter, page_size + 1, after).await?;
    let next_page_token = if jobs.len() > page_size as usize {
        jobs.truncate(page_size as usize);
        jobs.last().map(|j| j.id.to_string())
    } else {
        None
    };
    Ok(Json(JobPage {
        jobs,
        next_page_token,
    }))
}

/// The result document `{schema_version: 1, assignments}` of a succeeded job.
#[utoipa::path(get, path = "/v1/refine-jobs/{id}/result", tag = "refine-jobs",
    params(("id" = Uuid, Path, description = "Job id")),
    responses(
        ForbiddenProject,
        (status = 200, description = "The refined assignments of the phase", body = Object),
        (status = 400, description = "Not a job id", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`job_not_succeeded`: the job has not succeeded (yet); the problem carries its `job_status`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable", body = Problem, content_type = "application/problem+json"),
    ))]
async fn refine_job_result(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let job = load_job(&state, &caller, parse_id(&raw_id, "job")?).await?;
    match (job.status, job.result) {
        (JobStatus::Succeeded, Some(result)) => Ok(Json(result)),
        (status, _) => Err(ApiError::conflict(
            "job_not_succeeded",
            format!(
                "the job is {}; a result exists once it has succeeded",
                status.as_str()
            ),
        )
        .with("job_status", status.as_str())),
    }
}

/// Per-L0 records, in natural assignment order.
#[utoipa::path(get, path = "/v1/refine-jobs/{id}/assignments", tag = "refine-jobs",
    params(("id" = Uuid, Path, description = "Job id")),
    responses(
        ForbiddenProject,
        (status = 200, description = "One record per assignment", body = Vec<StoredL0>),
        (status = 400, description = "Not a job id", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable", body = Problem, content_type = "application/problem+json"),
    ))]
async fn refine_job_assignments(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw_id): Path<String>,
) -> Result<Json<Vec<StoredL0>>, ApiError> {
    let id = parse_id(&raw_id, "job")?;
    load_job(&state, &caller, id).await?;
    Ok(Json(state.db.refine_job_l0s(id).await?))
}

/// Server-Sent Events: `state`, `progress` and `log` events, each with the
/// job's event number as `id`. Reconnect with `Last-Event-ID` to resume; the
/// stream ends after the terminal `state` event.
#[utoipa::path(get, path = "/v1/refine-jobs/{id}/events", tag = "refine-jobs",
    params(
        ("id" = Uuid, Path, description = "Job id"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event"),
    ),
    responses(
        ForbiddenProject,
        (status = 200, description = "`text/event-stream` of `state`, `progress` and `log` events", content_type = "text/event-stream", body = String),
        (status = 400, description = "Not a job id, or a bad Last-Event-ID", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable", body = Problem, content_type = "application/problem+json"),
    ))]
async fn refine_job_events(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw_id): Path<String>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let id = parse_id(&raw_id, "job")?;
    load_job(&state, &caller, id).await?;
    let after = match headers.get("last-event-id") {
        None => 0,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .filter(|n| *n >= 0)
            .ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_last_event_id",
                    "Last-Event-ID must be an event number",
                )
            })?,
    };
    let stream = futures::stream::unfold(
        (state, after, false),
        move |(state, mut after, mut done)| async move {
            let mut last_look = false;
            loop {
                if done {
                    return None;
                }
                let events = match state.db.refine_job_events(id, after, 200).await {
                    Ok(events) => events,
                    Err(e) => {
                        tracing::warn!(error = %e, "event stream: reading events failed");
                        return None;
                    }
                };
                if !events.is_empty() {
                    let mut out = Vec::with_capacity(events.len());
                    for e in events {
                        after = e.seq;
                        let terminal = e.event == "state"
                            && e.data
                                .0
                                .get("status")
                                .and_then(Value::as_str)
                                .and_then(JobStatus::parse)
                                .is_some_and(JobStatus::is_terminal);
                        done |= terminal;
                        out.push(Ok(Event::default()
                            .id(e.seq.to_string())
                            .event(e.event)
                            .data(e.data.0.to_string())));
                    }
                    return Some((futures::stream::iter(out), (state, after, done)));
                }
                if last_look {
                    return None;
                }
                match state.db.refine_job_version(id).await {
                    Ok(Some((_, status))) if !status.is_terminal() => {}
                    // Terminal: its last events were committed with the status, maybe
                    // just after the read above, so read once more before ending.
                    Ok(Some(_)) => {
                        last_look = true;
                        continue;
                    }
                    // Deleted or unreadable: end.
                    _ => return None,
                }
                if state.is_shutting_down() {
                    return None;
                }
                let mut wakeups = state.hub.subscribe();
                let ours = |j: Uuid| j == id;
                tokio::select! {
                    _ = wake_for(&mut wakeups, &ours) => {}
                    _ = tokio::time::sleep(WAIT_POLL) => {}
                }
            }
        },
    );
    use futures::StreamExt;
    Ok(Sse::new(stream.flatten()).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// Cancel a job. Idempotent: a terminal job is returned unchanged; a queued one
/// is cancelled at once; a running one goes `cancelling` while its L0 process
/// groups are killed, then `cancelled`.
#[utoipa::path(post, path = "/v1/refine-jobs/{id}/cancel", tag = "refine-jobs",
    params(("id" = Uuid, Path, description = "Job id")),
    responses(
        ForbiddenProject,
        (status = 200, description = "The job after the request", body = StoredJob),
        (status = 400, description = "Not a job id", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable", body = Problem, content_type = "application/problem+json"),
    ))]
async fn cancel_refine_job(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw_id): Path<String>,
) -> Result<Json<StoredJob>, ApiError> {
    let id = parse_id(&raw_id, "job")?;
    // Authorise before acting: a token limited to other projects must change nothing.
    load_job(&state, &caller, id).await?;
    cancel_job(&state, id)
        .await?
        .ok_or_else(|| ApiError::not_found("refine job", &id.to_string()))?;
    Ok(Json(load_job(&state, &caller, id).await?))
}

/// Cancels one job: wakes its worker (here, or on another replica through
/// NOTIFY), and merges its run when that was the run's last job. `None` for an
/// unknown job.
pub(crate) async fn cancel_job(state: &AppState, id: Uuid) -> Result<Option<JobStatus>, ApiError> {
    let Some(status) = state.db.cancel_refine_job(id).await? else {
        return Ok(None);
    };
    if status == JobStatus::Cancelling {
        state.hub.cancel_local(id);
        if let Err(e) = state.db.notify_job_cancel(id).await {
            tracing::warn!(error = %e, "cancel notification failed; the worker's heartbeat will see it");
        }
    }
    if status == JobStatus::Cancelled
        && let Some(run_id) = state.db.refine_job(id).await?.and_then(|j| j.run_id)
    {
        crate::jobs::runs::merge_if_due(&state.db, run_id).await?;
    }
    state.hub.job_changed(id);
    Ok(Some(status))
}
