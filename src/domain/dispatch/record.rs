//! A task, its history, a task list and a team as stored and as shown (REST, MCP and the
//! dashboard): one type each, which `db/` builds from its rows and the API
//! serializes as it is.

use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{AbandonCategory, TaskClaim, TaskEventKind, TaskStatus};

/// A task as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StoredTask {
    /// Server-assigned id (use it with `PATCH /v1/tasks/{id}`).
    pub id: Uuid,
    pub task_list_id: Uuid,
    /// The synthesis-local id the planner gave.
    pub task_id: String,
    pub assigned_persona: String,
    /// The wave.
    pub parallel_group: i64,
    pub status: TaskStatus,
    /// Synthesis-local ids of the tasks this one depends on (duplicates removed).
    pub depends_on: Vec<String>,
    pub reads: Vec<String>,
    pub writes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reviews: Option<String>,
    pub description: String,
    /// Fields of the submitted task that plangate does not interpret, as given.
    #[schema(value_type = Object)]
    pub extra: serde_json::Map<String, serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abandon_category: Option<AbandonCategory>,
    /// For a cascade-abandoned task: the server id of the task whose failure caused it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_task_id: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// `running` transitions so far.
    pub attempts: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Who holds this running task and until when (docs/api.md "Claims"); absent
    /// when nobody claimed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim: Option<TaskClaim>,
    // Whose claim the task had when it finished (kept after the claim ends), so a
    // late holder cannot take another holder's completion for its own. Not shown.
    #[serde(skip)]
    pub last_holder: Option<String>,
}

/// A task list as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema, sqlx::FromRow)]
pub struct StoredTaskList {
    /// Server-assigned id of the list.
    pub id: Uuid,
    pub project_id: String,
    /// The planning cycle; null = the project-wide fallback.
    pub team_pk: Option<String>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    /// In submission order (one page of them when `next_cursor` is set).
    #[sqlx(skip)]
    pub tasks: Vec<StoredTask>,
    /// More tasks follow: pass this as `?cursor=` for the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[sqlx(skip)]
    pub next_cursor: Option<String>,
}

/// A registered cycle (team) of a project.
#[derive(Debug, Clone, Serialize, ToSchema, sqlx::FromRow)]
pub struct Team {
    pub id: Uuid,
    pub project_id: String,
    pub team_pk: String,
    pub lead_role: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// One entry of a task's history.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StoredTaskEvent {
    pub at: DateTime<Utc>,
    pub kind: TaskEventKind,
    /// The claim's holder, or who made the status change (when it said).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    pub from_status: TaskStatus,
    pub to_status: TaskStatus,
    /// The task's attempts at that moment.
    pub attempt: i32,
    /// A status change that overrode another holder's claim.
    pub forced: bool,
    /// With `forced`: whose claim was overridden.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overrode: Option<String>,
    /// Claims and renewals: the lease given; expiries: the lease that lapsed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_expires_at: Option<DateTime<Utc>>,
}

/// One event of a list's stream (`data` of the SSE `task` event).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ListEvent {
    /// The event's id (also the SSE `id`): resume after it with `Last-Event-ID`.
    pub id: Uuid,
    /// The task's server id (`PATCH /v1/tasks/{id}`).
    pub task: Uuid,
    /// The planner's id of the task.
    pub task_id: String,
    #[serde(flatten)]
    pub event: StoredTaskEvent,
}
