//! `/v1/task-lists`: gate (dry run), persist, read, ready tasks, graph, events.

use std::convert::Infallible;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use super::AppState;
use super::auth::ApiCall;
use super::extract::{Json, Path, Query, StorableJsonAsSent};
use super::responses::{BadIdOrJson, DatabaseUnavailable, NoSuchList};
use crate::domain::dispatch::{GraphFormat, ReadyMode};
use crate::domain::gating::ValidationReport;
use crate::http::problem::{ApiError, GatingProblem, Problem};
use crate::http::responses::{ForbiddenProject, JsonBodyRejections};
use crate::service::task_claims::{ClaimRequest, ClaimResponse};
use crate::service::task_lists::{
    CreateTaskListRequest, ReadyResponse, StoredTaskList, ValidateRequest,
};
use crate::service::{MAX_WAIT_SECS, ProblemCode, ServiceError};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(validate_task_list))
        .routes(routes!(create_task_list))
        .routes(routes!(get_task_list))
        .routes(routes!(ready))
        .routes(routes!(claim))
        .routes(routes!(graph))
        .routes(routes!(task_list_events))
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
    ApiCall { service, caller }: ApiCall,
    Json(request): Json<ValidateRequest>,
) -> Result<Json<ValidationReport>, ApiError> {
    Ok(Json(service.validate_task_list(&caller, request)?))
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
        DatabaseUnavailable,
    ))]
async fn create_task_list(
    ApiCall { service, caller }: ApiCall,
    headers: HeaderMap,
    StorableJsonAsSent(request, body): StorableJsonAsSent<CreateTaskListRequest>,
) -> Result<Response, ApiError> {
    let key = headers.get("idempotency-key").map(HeaderValue::as_bytes);
    let created = service
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

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TaskListQuery {
    /// Tasks per page (1 to 1,000). Without `limit` and `cursor` a list of up to
    /// 10,000 tasks answers whole, a larger one its first 1,000 tasks.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    #[param(pattern = "^p[0-9]{1,9}$")]
    pub cursor: Option<String>,
}

/// The list as created, with current task statuses.
///
/// Large lists come in pages, in submission order: a page that is not the last
/// says `next_cursor`; ask again with `?cursor=` (and `limit`) for the next one.
#[utoipa::path(get, path = "/v1/task-lists/{id}", tag = "task-lists",
    params(("id" = Uuid, Path, description = "Server id of the list"), TaskListQuery),
    responses(
        (status = 200, description = "The list, or one page of its tasks", body = StoredTaskList),
        (status = 400, description = "Not a UUID, `limit` out of range, or not a cursor of this API", body = Problem, content_type = "application/problem+json"),
        NoSuchList,
    ))]
async fn get_task_list(
    ApiCall { service, caller }: ApiCall,
    Path(id): Path<Uuid>,
    Query(query): Query<TaskListQuery>,
) -> Result<Json<StoredTaskList>, ApiError> {
    Ok(Json(
        service
            .task_list_page(&caller, id, query.limit, query.cursor.as_deref())
            .await?,
    ))
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
    /// Long-poll: when the answer would be `next: wait`, hold it until a task
    /// becomes ready or the list finishes, or this many seconds (at most 30) pass.
    #[param(minimum = 0, maximum = 30)]
    pub wait: Option<u64>,
    /// Most tasks to list (1 to 1,000); `more_ready: true` says more are ready.
    /// Without `limit` up to 10,000 ready tasks answer whole, more their first
    /// 1,000.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// Tasks ready to dispatch now, and what to do `next`.
///
/// `next` is `dispatch` (tasks are ready), `wait` (nothing ready, tasks running;
/// `retry_after_s`, or long-poll with `?wait=`), `done` (every task terminal) or
/// `blocked` (nothing will run any more: `blocked` names the tasks and why).
/// A large ready set is listed in part (`limit`, `more_ready`): claim or start
/// those tasks and ask again.
#[utoipa::path(get, path = "/v1/task-lists/{id}/ready", operation_id = "ready_tasks", tag = "task-lists",
    params(("id" = Uuid, Path, description = "Server id of the list"), ReadyQuery),
    responses(
        (status = 200, description = "Ready tasks and `next`", body = ReadyResponse),
        (status = 400, description = "Not a UUID, unknown mode, `wait` over 30, or `limit` out of range", body = Problem, content_type = "application/problem+json"),
        NoSuchList,
    ))]
async fn ready(
    ApiCall { service, caller }: ApiCall,
    Path(id): Path<Uuid>,
    Query(query): Query<ReadyQuery>,
) -> Result<Json<ReadyResponse>, ApiError> {
    let mode = query.mode.unwrap_or_default();
    if query.wait.is_some_and(|w| w > MAX_WAIT_SECS) {
        return Err(ServiceError::bad_request(
            ProblemCode::InvalidQuery,
            format!("wait may be at most {MAX_WAIT_SECS} seconds; ask again for longer"),
        )
        .into());
    }
    Ok(Json(
        service
            .ready_tasks(&caller, id, mode, query.limit, query.wait)
            .await?,
    ))
}

/// Claim one ready task: it moves to `running`, held by `holder` until its lease
/// runs out.
///
/// Exactly one of concurrent claimers gets a task. The task is the first ready
/// one under `mode` (as `GET …/ready` offers them), or the first assigned to
/// `persona`. Renew with `POST /v1/tasks/{id}/heartbeat`; finish with `PATCH
/// /v1/tasks/{id}` naming `holder`. When none is ready, `task` is null and `next`
/// says what to do.
#[utoipa::path(post, path = "/v1/task-lists/{id}/claim", operation_id = "claim_task", tag = "task-lists",
    params(("id" = Uuid, Path, description = "Server id of the list")),
    request_body = ClaimRequest,
    responses(
        JsonBodyRejections,
        (status = 200, description = "The claimed task (or null) and `next`", body = ClaimResponse),
        BadIdOrJson,
        NoSuchList,
        (status = 422, description = "`invalid_field` (`holder`, `persona`, `lease_s`) or `invalid_body`", body = Problem, content_type = "application/problem+json"),
    ))]
async fn claim(
    ApiCall { service, caller }: ApiCall,
    Path(id): Path<Uuid>,
    Json(request): Json<ClaimRequest>,
) -> Result<Json<ClaimResponse>, ApiError> {
    Ok(Json(service.claim_task(&caller, id, request).await?))
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
///
/// A list of more than 10,000 tasks is drawn summarised: one node per wave (the
/// first 400, then one for the later waves) with its tasks counted by status,
/// edges joining consecutive waves; a comment on the second line says so. Page
/// its tasks with `GET /v1/task-lists/{id}?limit=`.
#[utoipa::path(get, path = "/v1/task-lists/{id}/graph", operation_id = "task_list_graph", tag = "task-lists",
    params(("id" = Uuid, Path, description = "Server id of the list"), GraphQuery),
    responses(
        (status = 200, description = "The graph: task by task, or for a list of more than 10,000 tasks wave by wave", body = String, content_type = "text/plain"),
        (status = 400, description = "Not a UUID or unknown format", body = Problem, content_type = "application/problem+json"),
        NoSuchList,
    ))]
async fn graph(
    ApiCall { service, caller }: ApiCall,
    Path(id): Path<Uuid>,
    Query(query): Query<GraphQuery>,
) -> Result<Response, ApiError> {
    let format = query.format.unwrap_or_default();
    let text = service.task_graph(&caller, id, format).await?;
    Ok(([(header::CONTENT_TYPE, format.content_type())], text).into_response())
}

/// Server-Sent Events: a `task` event for every claim, renewal, lease expiry and
/// status change of the list's tasks, as it is committed, on any replica.
///
/// Each event's `id` is the event's; reconnect with `Last-Event-ID` to resume
/// after it. Without it the stream starts with the events of the last two
/// seconds. Delivery is at least once (a reconnect may repeat an event) and in
/// commit order, which may differ from id order. A `to_status` of `done` says a
/// dependency finished: ask `GET /v1/task-lists/{id}/ready` or claim.
#[utoipa::path(get, path = "/v1/task-lists/{id}/events", operation_id = "task_list_events", tag = "task-lists",
    params(
        ("id" = Uuid, Path, description = "Server id of the list"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id"),
    ),
    responses(
        (status = 200, description = "`text/event-stream` of `task` events, each's data a `ListEvent`", content_type = "text/event-stream", body = String),
        (status = 400, description = "Not a UUID, or a Last-Event-ID that is not an event id", body = Problem, content_type = "application/problem+json"),
        NoSuchList,
    ))]
async fn task_list_events(
    ApiCall { service, caller }: ApiCall,
    Path(id): Path<Uuid>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let last_event_id = headers.get("last-event-id").map(HeaderValue::as_bytes);
    let events = service.task_list_events(&caller, id, last_event_id).await?;
    let stream = events.map(|e| {
        let data = serde_json::to_string(&e).unwrap_or_else(|_| "{}".to_owned());
        Ok(Event::default()
            .id(e.id.to_string())
            .event("task")
            .data(data))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
