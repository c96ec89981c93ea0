//! `PATCH /v1/tasks/{id}`: legal status transitions, with cascade-abandon.

use axum::extract::State;
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use super::AppState;
use super::auth::Caller;
use super::extract::{Json, Path};
use crate::http::problem::{ApiError, ForbiddenProject, JsonBodyRejections, Problem};
use crate::service::task_lists::{TaskUpdate, TaskUpdated};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(update_task))
}

/// Change a task's status.
///
/// `failed` or `abandoned` abandons every non-terminal transitive dependent with
/// category `blocked` and `upstream_task_id` set, in the same transaction.
/// Repeating the current status is a no-op (200, nothing cascades).
#[utoipa::path(patch, path = "/v1/tasks/{id}", tag = "task-lists",
    params(("id" = Uuid, Path, description = "Server id of the task")),
    request_body = TaskUpdate,
    responses(
        JsonBodyRejections,
        (status = 200, description = "The task after the change", body = TaskUpdated),
        (status = 400, description = "Not a UUID or malformed JSON", body = Problem, content_type = "application/problem+json"),
        ForbiddenProject,
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Illegal transition; `allowed` lists the legal targets", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Unknown status or category, or a category without `abandoned`", body = Problem, content_type = "application/problem+json"),
    ))]
async fn update_task(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
    Json(update): Json<TaskUpdate>,
) -> Result<Json<TaskUpdated>, ApiError> {
    Ok(Json(state.service.update_task(&caller, id, update).await?))
}
