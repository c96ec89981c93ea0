//! `PATCH /v1/tasks/{id}`: legal status transitions, with cascade-abandon.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use super::AppState;
use super::extract::{Json, Path};
use crate::db::task_lists::{StoredTask, TaskChange, TransitionOutcome};
use crate::domain::dispatch::{AbandonCategory, TaskStatus};
use crate::error::{ApiError, JsonBodyRejections, Problem};

/// Notes are free text for people; the bound keeps rows small.
const MAX_NOTES_BYTES: usize = 64 * 1024;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(update_task))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskUpdate {
    /// Target status: pending → running → done | failed; any non-terminal → abandoned.
    pub status: TaskStatus,
    /// Required with `abandoned`, refused otherwise.
    pub abandon_category: Option<AbandonCategory>,
    pub notes: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct TaskUpdated {
    #[serde(flatten)]
    pub task: StoredTask,
    /// Server ids of the dependents this change abandoned (category `blocked`).
    pub cascaded: Vec<Uuid>,
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
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Illegal transition; `allowed` lists the legal targets", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Unknown status or category, or a category without `abandoned`", body = Problem, content_type = "application/problem+json"),
    ))]
async fn update_task(
    State(state): State<AppState>,
    Path(id): Path<Uuid>,
    Json(update): Json<TaskUpdate>,
) -> Result<Json<TaskUpdated>, ApiError> {
    match (update.status, update.abandon_category) {
        (TaskStatus::Abandoned, None) => {
            return Err(ApiError::unprocessable(
                "invalid_field",
                "abandon_category is required when status is abandoned",
            )
            .with("field", "abandon_category"));
        }
        (status, Some(_)) if status != TaskStatus::Abandoned => {
            return Err(ApiError::unprocessable(
                "invalid_field",
                format!("abandon_category only goes with status abandoned, not {status}"),
            )
            .with("field", "abandon_category"));
        }
        _ => {}
    }
    if update
        .notes
        .as_ref()
        .is_some_and(|n| n.len() > MAX_NOTES_BYTES)
    {
        return Err(ApiError::unprocessable(
            "invalid_field",
            format!("notes may hold at most {MAX_NOTES_BYTES} bytes"),
        )
        .with("field", "notes"));
    }
    let change = TaskChange {
        status: update.status,
        abandon_category: update.abandon_category,
        notes: update.notes,
    };
    match state.db.transition_task(id, change).await? {
        TransitionOutcome::Changed { task, cascaded } => Ok(Json(TaskUpdated {
            task: *task,
            cascaded,
        })),
        TransitionOutcome::NotFound => Err(ApiError::not_found("task", &id.to_string())),
        TransitionOutcome::Illegal(illegal) => Err(ApiError::conflict(
            "illegal_transition",
            illegal.to_string(),
        )
        .with("from", illegal.from.as_str())
        .with("to", illegal.to.as_str())
        .with(
            "allowed",
            illegal
                .allowed
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>(),
        )),
    }
}
