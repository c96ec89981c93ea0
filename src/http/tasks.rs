//! `PATCH /v1/tasks/{id}`: legal status transitions, with cascade-abandon;
//! heartbeats of claimed tasks and the task history (docs/api.md "Claims").
//! Each also under `/v1/task-lists/{id}/tasks/{task_id}`, naming the task by the
//! planner's id within its list; both call the same use case with a [`TaskRef`].

use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use super::AppState;
use super::auth::ApiCall;
use super::extract::{Json, Path, StorableJson};
use super::responses::{
    BadIdOrJson, BadListIdOrJson, HeartbeatRefusals, NoSuchListTask, NoSuchTask, TaskUpdateRefusals,
};
use crate::http::problem::{ApiError, Problem};
use crate::http::responses::JsonBodyRejections;
use crate::service::task_claims::{HeartbeatRequest, TaskHistory};
use crate::service::task_lists::{StoredTask, TaskUpdate, TaskUpdated};
use crate::service::task_refs::TaskRef;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(update_task))
        .routes(routes!(heartbeat))
        .routes(routes!(history))
        .routes(routes!(update_task_in_list))
        .routes(routes!(heartbeat_in_list))
        .routes(routes!(history_in_list))
}

/// A task named by the planner's id within its list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct InList {
    /// Server id of the task list (`task_list_id`)
    id: Uuid,
    /// The planner's `task_id` of the task (e.g. `t-1`); its server id works too
    task_id: String,
}

impl From<InList> for TaskRef {
    fn from(path: InList) -> Self {
        TaskRef::InList {
            task_list_id: path.id,
            task_id: path.task_id,
        }
    }
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
        BadIdOrJson,
        NoSuchTask,
        TaskUpdateRefusals,
    ))]
async fn update_task(
    ApiCall { service, caller }: ApiCall,
    Path(id): Path<Uuid>,
    StorableJson(update): StorableJson<TaskUpdate>,
) -> Result<Json<TaskUpdated>, ApiError> {
    Ok(Json(service.update_task(&caller, id.into(), update).await?))
}

/// Renew a claim's lease (the holder's heartbeat).
#[utoipa::path(post, path = "/v1/tasks/{id}/heartbeat", operation_id = "heartbeat_task", tag = "task-lists",
    params(("id" = Uuid, Path, description = "Server id of the task")),
    request_body = HeartbeatRequest,
    responses(
        JsonBodyRejections,
        (status = 200, description = "The task with its renewed `claim`", body = StoredTask),
        BadIdOrJson,
        NoSuchTask,
        HeartbeatRefusals,
    ))]
async fn heartbeat(
    ApiCall { service, caller }: ApiCall,
    Path(id): Path<Uuid>,
    Json(request): Json<HeartbeatRequest>,
) -> Result<Json<StoredTask>, ApiError> {
    Ok(Json(
        service.heartbeat_task(&caller, id.into(), request).await?,
    ))
}

/// A task's history, oldest first: claims, renewals, lease expiries and status
/// changes, with time and holder.
#[utoipa::path(get, path = "/v1/tasks/{id}/history", operation_id = "task_history", tag = "task-lists",
    params(("id" = Uuid, Path, description = "Server id of the task")),
    responses(
        (status = 200, description = "The history", body = TaskHistory),
        (status = 400, description = "Not a UUID", body = Problem, content_type = "application/problem+json"),
        NoSuchTask,
    ))]
async fn history(
    ApiCall { service, caller }: ApiCall,
    Path(id): Path<Uuid>,
) -> Result<Json<TaskHistory>, ApiError> {
    Ok(Json(service.task_history(&caller, id.into()).await?))
}

/// Change a task's status, naming it by the planner's id within its list.
///
/// The same change and answer as `PATCH /v1/tasks/{id}`.
#[utoipa::path(patch, path = "/v1/task-lists/{id}/tasks/{task_id}", operation_id = "update_task_in_list", tag = "task-lists",
    params(InList),
    request_body = TaskUpdate,
    responses(
        JsonBodyRejections,
        (status = 200, description = "The task after the change", body = TaskUpdated),
        BadListIdOrJson,
        NoSuchListTask,
        TaskUpdateRefusals,
    ))]
async fn update_task_in_list(
    ApiCall { service, caller }: ApiCall,
    Path(path): Path<InList>,
    StorableJson(update): StorableJson<TaskUpdate>,
) -> Result<Json<TaskUpdated>, ApiError> {
    Ok(Json(
        service.update_task(&caller, path.into(), update).await?,
    ))
}

/// Renew a claim's lease, naming the task by the planner's id within its list.
#[utoipa::path(post, path = "/v1/task-lists/{id}/tasks/{task_id}/heartbeat", operation_id = "heartbeat_task_in_list", tag = "task-lists",
    params(InList),
    request_body = HeartbeatRequest,
    responses(
        JsonBodyRejections,
        (status = 200, description = "The task with its renewed `claim`", body = StoredTask),
        BadListIdOrJson,
        NoSuchListTask,
        HeartbeatRefusals,
    ))]
async fn heartbeat_in_list(
    ApiCall { service, caller }: ApiCall,
    Path(path): Path<InList>,
    Json(request): Json<HeartbeatRequest>,
) -> Result<Json<StoredTask>, ApiError> {
    Ok(Json(
        service
            .heartbeat_task(&caller, path.into(), request)
            .await?,
    ))
}

/// A task's history, naming it by the planner's id within its list.
#[utoipa::path(get, path = "/v1/task-lists/{id}/tasks/{task_id}/history", operation_id = "task_history_in_list", tag = "task-lists",
    params(InList),
    responses(
        (status = 200, description = "The history", body = TaskHistory),
        (status = 400, description = "`id` is not a UUID (`parameter` names it)", body = Problem, content_type = "application/problem+json"),
        NoSuchListTask,
    ))]
async fn history_in_list(
    ApiCall { service, caller }: ApiCall,
    Path(path): Path<InList>,
) -> Result<Json<TaskHistory>, ApiError> {
    Ok(Json(service.task_history(&caller, path.into()).await?))
}
