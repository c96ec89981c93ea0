//! `PATCH /v1/tasks/{id}`: legal status transitions, with cascade-abandon.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use super::AppState;
use super::auth::Caller;
use super::extract::{Json, Path, StoredJson};
use crate::db::task_lists::{StoredTask, TaskChange, TransitionOutcome};
use crate::domain::dispatch::{AbandonCategory, TaskStatus};
use crate::error::{ApiError, ForbiddenProject, JsonBodyRejections, Problem};

/// Notes are free text for people; the bound keeps rows small. Characters (what
/// JSON Schema's `maxLength` counts), so the OpenAPI document states it exactly.
const MAX_NOTES_CHARS: usize = 64 * 1024;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(update_task))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskUpdate {
    /// Target status: pending → running → done | failed; any non-terminal → abandoned.
    pub status: TaskStatus,
    /// Required with `abandoned`, refused otherwise.
    pub abandon_category: Option<AbandonCategory>,
    pub notes: Option<String>,
}

/// The schema states the pairing rule the handler enforces: `abandon_category` is
/// required with `abandoned` and absent (or null) otherwise — so that every body the
/// schema allows passes the handler's checks, and the other way round.
impl utoipa::PartialSchema for TaskUpdate {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{
            AdditionalProperties, ObjectBuilder, OneOfBuilder, SchemaType, Type,
        };
        let status = |targets: &[TaskStatus]| {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(targets.iter().map(|s| s.as_str())))
        };
        let notes = ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
            .max_length(Some(MAX_NOTES_CHARS))
            .description(Some("Free text for people, at most 65536 characters."))
            .build();
        let closed = || Some(AdditionalProperties::FreeForm(false));
        let abandon = ObjectBuilder::new()
            .title(Some("abandon"))
            .property("status", status(&[TaskStatus::Abandoned]))
            .property(
                "abandon_category",
                <AbandonCategory as utoipa::PartialSchema>::schema(),
            )
            .property("notes", notes.clone())
            .required("status")
            .required("abandon_category")
            .additional_properties(closed());
        let others: Vec<TaskStatus> = TaskStatus::ALL
            .into_iter()
            .filter(|s| *s != TaskStatus::Abandoned)
            .collect();
        let move_on = ObjectBuilder::new()
            .title(Some("transition"))
            .property("status", status(&others))
            .property(
                "abandon_category",
                ObjectBuilder::new().schema_type(Type::Null),
            )
            .property("notes", notes)
            .required("status")
            .additional_properties(closed());
        OneOfBuilder::new()
            .description(Some(
                "Target status: pending → running → done | failed; any non-terminal → \
                 abandoned. `abandon_category` is required with `abandoned` and refused \
                 otherwise.",
            ))
            .item(abandon)
            .item(move_on)
            .into()
    }
}

impl ToSchema for TaskUpdate {}

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
        ForbiddenProject,
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Illegal transition; `allowed` lists the legal targets", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Unknown status or category, or a category without `abandoned`", body = Problem, content_type = "application/problem+json"),
    ))]
async fn update_task(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
    StoredJson(update): StoredJson<TaskUpdate>,
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
        .is_some_and(|n| n.len() > MAX_NOTES_CHARS && n.chars().count() > MAX_NOTES_CHARS)
    {
        return Err(ApiError::unprocessable(
            "invalid_field",
            format!("notes may hold at most {MAX_NOTES_CHARS} characters"),
        )
        .with("field", "notes"));
    }
    // A limited token may change only its projects' tasks: look the project up
    // first (a task never changes project, so nothing can slip in between).
    if caller.allowed_projects().is_some() {
        match state.db.task_project(id).await? {
            Some(project_id) => caller.check_project(&project_id)?,
            None => return Err(ApiError::not_found("task", &id.to_string())),
        }
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
