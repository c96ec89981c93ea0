//! `/v1/task-lists`: gate (dry run), persist, read, ready tasks, graph.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use super::AppState;
use super::auth::Caller;
use super::extract::{Json, Path, Query, StoredJsonAsSent};
use crate::domain::dispatch::{GraphFormat, ReadyMode};
use crate::domain::gating::ValidationReport;
use crate::http::problem::{
    ApiError, ForbiddenProject, GatingProblem, JsonBodyRejections, Problem,
};
use crate::service::task_lists::{
    CreateTaskListRequest, ReadyResponse, StoredTaskList, ValidateRequest,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(validate_task_list))
        .routes(routes!(create_task_list))
        .routes(routes!(get_task_list))
        .routes(routes!(ready))
        .routes(routes!(graph))
}

/// Gate a task list without storing it.
///
/// Every violation is reported, in gate order then task order. A list that cannot
/// be parsed answers 200 with `valid: false` and one `synthesis_failure` error.
#[utoipa::path(post, path = "/v1/task-lists/validate", tag = "task-lists",
    request_body = ValidateRequest,
    responses(
        JsonBodyRejections,
        (status = 200, description = "The gate's verdict, also on a `tasks` value that is not a list of task objects (`valid: false` with `synthesis_failure`, or `dag_invalid` for entries of the wrong shape)", body = ValidationReport),
        (status = 422, description = "Neither or both of tasks/planner_output, or a field of the wrong type", body = Problem, content_type = "application/problem+json"),
    ))]
async fn validate_task_list(
    State(state): State<AppState>,
    caller: Caller,
    Json(request): Json<ValidateRequest>,
) -> Result<Json<ValidationReport>, ApiError> {
    Ok(Json(state.service.validate_task_list(&caller, request)?))
}

/// Gate a task list and, if it passes, store it all or nothing.
///
/// A rejection is counted per `(project_id, team_pk)`: the first DAG-INVALID gets
/// one retry (`escalate: false`), the second escalates; a synthesis failure
/// escalates at once. An accepted list resets the count.
///
/// With an `Idempotency-Key`, a retry with the same body answers what the first
/// create answered: the same list (201, header `Idempotent-Replayed: true`), or
/// the same rejection with the same `attempt` (and `replayed: true`), counting
/// nothing; another body with that key is a 422 `idempotency_key_reused`.
#[utoipa::path(post, path = "/v1/task-lists", tag = "task-lists",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes the create safe to retry (scoped to the project and the token)")),
    request_body = CreateTaskListRequest,
    responses(
        JsonBodyRejections,
        ForbiddenProject,
        (status = 201, description = "Stored (or, with `Idempotent-Replayed: true`, stored by the first create with this key); `Location` names the list", body = StoredTaskList,
         headers(
            ("Location" = String, description = "/v1/task-lists/{id}"),
            ("Idempotent-Replayed" = Option<String>, description = "`true` when the answer is the first create's with this key"),
         )),
        (status = 400, description = "Malformed JSON, or an `Idempotency-Key` that is not visible ASCII (`invalid_idempotency_key`)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Rejected by the gate (`dag_invalid`, `synthesis_failure`), a malformed request, `invalid_idempotency_key` or `idempotency_key_reused`", body = GatingProblem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable", body = Problem, content_type = "application/problem+json"),
    ))]
async fn create_task_list(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    StoredJsonAsSent(request, body): StoredJsonAsSent<CreateTaskListRequest>,
) -> Result<Response, ApiError> {
    let key = headers.get("idempotency-key").map(HeaderValue::as_bytes);
    let created = state
        .service
        .create_task_list(&caller, request, key, &body)
        .await?;
    let mut headers = HeaderMap::new();
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/task-lists/{}", created.value.id)) {
        headers.insert(header::LOCATION, location);
    }
    if created.replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok((StatusCode::CREATED, headers, Json(created.value)).into_response())
}

/// The list as created, with current task statuses.
#[utoipa::path(get, path = "/v1/task-lists/{id}", tag = "task-lists",
    params(("id" = Uuid, Path, description = "Server id of the list")),
    responses(
        (status = 200, description = "The list", body = StoredTaskList),
        (status = 400, description = "Not a UUID", body = Problem, content_type = "application/problem+json"),
        ForbiddenProject,
        (status = 404, description = "No such list", body = Problem, content_type = "application/problem+json"),
    ))]
async fn get_task_list(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
) -> Result<Json<StoredTaskList>, ApiError> {
    Ok(Json(state.service.task_list(&caller, id).await?))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ReadyQuery {
    /// `barrier` (default): pending tasks of the lowest wave with unfinished work;
    /// `pipeline`: any pending task whose dependencies are done and whose writes
    /// are free.
    #[param(value_type = Option<ReadyMode>)]
    pub mode: Option<ReadyMode>,
}

/// Tasks ready to dispatch now.
#[utoipa::path(get, path = "/v1/task-lists/{id}/ready", operation_id = "ready_tasks", tag = "task-lists",
    params(("id" = Uuid, Path, description = "Server id of the list"), ReadyQuery),
    responses(
        (status = 200, description = "Ready tasks", body = ReadyResponse),
        (status = 400, description = "Not a UUID or unknown mode", body = Problem, content_type = "application/problem+json"),
        ForbiddenProject,
        (status = 404, description = "No such list", body = Problem, content_type = "application/problem+json"),
    ))]
async fn ready(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
    Query(query): Query<ReadyQuery>,
) -> Result<Json<ReadyResponse>, ApiError> {
    let mode = query.mode.unwrap_or_default();
    Ok(Json(state.service.ready_tasks(&caller, id, mode).await?))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct GraphQuery {
    /// `mermaid` (default) or `dot`.
    #[param(value_type = Option<GraphFormat>)]
    pub format: Option<GraphFormat>,
}

/// The DAG as Mermaid or Graphviz text, waves as ranks, statuses as classes.
#[utoipa::path(get, path = "/v1/task-lists/{id}/graph", operation_id = "task_list_graph", tag = "task-lists",
    params(("id" = Uuid, Path, description = "Server id of the list"), GraphQuery),
    responses(
        (status = 200, description = "The graph", body = String, content_type = "text/plain"),
        (status = 400, description = "Not a UUID or unknown format", body = Problem, content_type = "application/problem+json"),
        ForbiddenProject,
        (status = 404, description = "No such list", body = Problem, content_type = "application/problem+json"),
    ))]
async fn graph(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
    Query(query): Query<GraphQuery>,
) -> Result<Response, ApiError> {
    let format = query.format.unwrap_or_default();
    let text = state.service.task_graph(&caller, id, format).await?;
    Ok(([(header::CONTENT_TYPE, format.content_type())], text).into_response())
}
