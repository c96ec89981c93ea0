//! `PATCH /v1/tasks/{id}`: legal status transitions, with cascade-abandon;
//! heartbeats of claimed tasks and the task history (docs/api.md "Claims").

use axum::extract::State;
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use super::AppState;
use super::auth::Caller;
use super::extract::{Json, Path, StoredJson};
use crate::http::problem::{ApiError, ForbiddenProject, JsonBodyRejections, Problem};
use crate::service::task_claims::{HeartbeatRequest, TaskHistory};
use crate::service::task_lists::{StoredTask, TaskUpdate, TaskUpdated};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(update_task))
        .routes(routes!(heartbeat))
        .routes(routes!(history))
}

/// Change a task's status.
///
/// `failed` or `abandoned` abandons every non-terminal transitive dependent with
/// category `blocked` and `upstream_task_id` set, in the same transaction.
/// Repeating the current status is a no-op (200, nothing cascades). While the
/// task is claimed, the change must name the claim's `holder` (or `force`).
#[utoipa::path(patch, path = "/v1/tasks/{id}", tag = "task-lists",
    params(("id" = Uuid, Path, description = "Server id of the task")),
    request_body = TaskUpdate,
    responses(
        JsonBodyRejections,
        (status = 200, description = "The task after the change", body = TaskUpdated),
        (status = 400, description = "Not a UUID or malformed JSON", body = Problem, content_type = "application/problem+json"),
        ForbiddenProject,
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`illegal_transition` (`allowed` lists the legal targets), or `task_claimed` (`holder` names who holds the task)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Unknown status or category, a category without `abandoned`, or a bad `holder`", body = Problem, content_type = "application/problem+json"),
    ))]
async fn update_task(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
    StoredJson(update): StoredJson<TaskUpdate>,
) -> Result<Json<TaskUpdated>, ApiError> {
    Ok(Json(state.service.update_task(&caller, id, update).await?))
}

/// Renew a claim's lease (the holder's heartbeat).
#[utoipa::path(post, path = "/v1/tasks/{id}/heartbeat", operation_id = "heartbeat_task", tag = "task-lists",
    params(("id" = Uuid, Path, description = "Server id of the task")),
    request_body = HeartbeatRequest,
    responses(
        JsonBodyRejections,
        (status = 200, description = "The task with its renewed `claim`", body = StoredTask),
        (status = 400, description = "Not a UUID or malformed JSON", body = Problem, content_type = "application/problem+json"),
        ForbiddenProject,
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`task_claimed` (another `holder` holds it) or `task_not_claimed` (no live claim: its lease ran out, or it finished)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_field` (`holder`, `lease_s`)", body = Problem, content_type = "application/problem+json"),
    ))]
async fn heartbeat(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
    Json(request): Json<HeartbeatRequest>,
) -> Result<Json<StoredTask>, ApiError> {
    Ok(Json(
        state.service.heartbeat_task(&caller, id, request).await?,
    ))
}

/// A task's history, oldest first: claims, renewals, lease expiries and status
/// changes, with time and holder.
#[utoipa::path(get, path = "/v1/tasks/{id}/history", operation_id = "task_history", tag = "task-lists",
    params(("id" = Uuid, Path, description = "Server id of the task")),
    responses(
        (status = 200, description = "The history", body = TaskHistory),
        (status = 400, description = "Not a UUID", body = Problem, content_type = "application/problem+json"),
        ForbiddenProject,
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
    ))]
async fn history(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
) -> Result<Json<TaskHistory>, ApiError> {
    Ok(Json(state.service.task_history(&caller, id).await?))
}
