//! The tools' arguments. Doc comments become the input schemas' descriptions;
//! fields that are not `Option` (and have no default) are `required`.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use crate::domain::dispatch::{AbandonCategory, ReadyMode, TaskStatus};
use crate::domain::track_state::StepOutcome;

/// A JSON array of task objects (`task_id`, `assigned_persona`, `description`,
/// `depends_on`, `reads`, `writes`, ...).
fn task_array(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {"type": "object"},
        "description": "The task list: an array of task objects (task_id, assigned_persona, \
                        description, depends_on, reads, writes, parallel_group, ...). Give \
                        this or planner_output."
    })
}

fn enum_schema(values: &[&str], description: &str) -> Schema {
    json_schema!({"type": "string", "enum": values, "description": description})
}

fn task_status_schema(_: &mut SchemaGenerator) -> Schema {
    let values: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
    enum_schema(
        &values,
        "Target status: pending -> running -> done | failed; any unfinished -> abandoned.",
    )
}

fn abandon_category_schema(_: &mut SchemaGenerator) -> Schema {
    let values: Vec<&str> = AbandonCategory::ALL.iter().map(|c| c.as_str()).collect();
    enum_schema(
        &values,
        "Why the task is abandoned: required with status abandoned, refused otherwise.",
    )
}

fn ready_mode_schema(_: &mut SchemaGenerator) -> Schema {
    let values: Vec<&str> = ReadyMode::ALL.iter().map(|m| m.as_str()).collect();
    enum_schema(
        &values,
        "barrier (default): the pending tasks of the lowest unfinished wave; pipeline: any \
         pending task whose dependencies are done and whose writes are free.",
    )
}

/// An id argument as sent, any JSON: the tool parses it, so a malformed one is a
/// tool error naming its field and which id to pass, not serde's text (issue 24).
/// Still required where it is not an `Option` (a missing one is serde's `missing
/// field`, which names it).
#[derive(Debug, Deserialize)]
#[serde(transparent)]
pub struct RawId(pub Value);

fn any_object(description: &'static str) -> impl Fn(&mut SchemaGenerator) -> Schema {
    move |_| json_schema!({"type": "object", "description": description})
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidateArgs {
    #[serde(default)]
    #[schemars(schema_with = "task_array")]
    pub tasks: Option<Value>,
    /// The planner's raw text instead of tasks; the last ```json (or untagged) fence wins.
    pub planner_output: Option<String>,
    /// Repository paths that already exist (they satisfy reads).
    pub existing_files: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    /// The project the list belongs to (letters, digits, `.`, `_`, `-`).
    pub project_id: String,
    /// The orchestrator's id of this planning cycle; omit for the project-wide flow.
    pub team_pk: Option<String>,
    /// Who submits the list (an agent or person id).
    pub created_by: String,
    #[serde(default)]
    #[schemars(schema_with = "task_array")]
    pub tasks: Option<Value>,
    /// The planner's raw text instead of tasks; the last ```json (or untagged) fence wins.
    pub planner_output: Option<String>,
    /// Repository paths that already exist (they satisfy reads).
    pub existing_files: Option<Vec<String>>,
    /// Repeat a call safely: the same key and arguments answer the first call's
    /// list (or rejection) again, creating and counting nothing.
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadyArgs {
    /// The server id of the task list (create_task_list's task_list_id).
    #[schemars(with = "Uuid")]
    pub task_list_id: RawId,
    #[serde(default)]
    #[schemars(schema_with = "ready_mode_schema")]
    pub mode: Option<ReadyMode>,
    /// Long-poll: when next would be "wait", hold the answer until a task becomes
    /// ready or the list finishes, or this many seconds (at most 30) pass.
    #[schemars(range(max = 30))]
    pub wait_seconds: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimArgs {
    /// The server id of the task list (create_task_list's task_list_id).
    #[schemars(with = "Uuid")]
    pub task_list_id: RawId,
    /// Who claims: your agent id (letters, digits, `.`, `_`, `-`).
    pub holder: String,
    /// Claim only a task assigned to this persona.
    pub persona: Option<String>,
    /// Lease in seconds (1 to 86400, default 300); renew with heartbeat_task.
    #[schemars(range(min = 1, max = 86400))]
    pub lease_s: Option<u64>,
    #[serde(default)]
    #[schemars(schema_with = "ready_mode_schema")]
    pub mode: Option<ReadyMode>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatArgs {
    /// The claimed task: its planner id (e.g. "t-1") with task_list_id, or its
    /// server id (`id` in claim_task's answer) alone.
    #[schemars(with = "String")]
    pub task_id: RawId,
    /// The server id of the task list (create_task_list's task_list_id); required
    /// when task_id is the planner's id.
    #[serde(default)]
    #[schemars(with = "Option<Uuid>")]
    pub task_list_id: Option<RawId>,
    /// The claim's holder.
    pub holder: String,
    /// New lease from now in seconds (1 to 86400, default 300).
    #[schemars(range(min = 1, max = 86400))]
    pub lease_s: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetStatusArgs {
    /// The task: its planner id (e.g. "t-1") with task_list_id, or its server id
    /// (`id` in create_task_list / ready_tasks / claim_task) alone.
    #[schemars(with = "String")]
    pub task_id: RawId,
    /// The server id of the task list (create_task_list's task_list_id); required
    /// when task_id is the planner's id.
    #[serde(default)]
    #[schemars(with = "Option<Uuid>")]
    pub task_list_id: Option<RawId>,
    #[schemars(schema_with = "task_status_schema")]
    pub status: TaskStatus,
    #[serde(default)]
    #[schemars(schema_with = "abandon_category_schema")]
    pub abandon_category: Option<AbandonCategory>,
    /// Free text for people, at most 65536 characters.
    pub notes: Option<String>,
    /// Who makes the change: required (the claim's holder) while the task is claimed.
    pub holder: Option<String>,
    /// Override another holder's claim (recorded in the task's history).
    #[serde(default)]
    pub force: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectStatusArgs {
    /// The project.
    pub project_id: String,
    /// Scope the snapshot to this cycle; an unknown cycle is an error
    /// `team_not_found` (never the whole project's counts).
    pub team_pk: Option<String>,
}

/// Answer format of plan_loop.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PlanFormat {
    #[default]
    Json,
    Markdown,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanLoopArgs {
    #[schemars(schema_with = "track_schema")]
    pub track: Value,
    #[schemars(schema_with = "phases_schema")]
    pub phases: Value,
    #[schemars(schema_with = "plan_tasks_schema")]
    pub tasks: Value,
    #[serde(default)]
    #[schemars(schema_with = "completed_tracks_schema")]
    pub completed_tracks: Option<Value>,
    /// The text of tracks.md instead of completed_tracks.
    pub tracks_md: Option<String>,
    /// "json" (default): the plan as JSON; "markdown": the plan.md text.
    pub format: Option<PlanFormat>,
}

fn track_schema(generator: &mut SchemaGenerator) -> Schema {
    any_object(
        "The track being planned: {id, name, spec? (one-line summary), dependencies? (track ids)}.",
    )(generator)
}

fn object_array(description: &'static str) -> Schema {
    json_schema!({"type": "array", "items": {"type": "object"}, "description": description})
}

fn phases_schema(_: &mut SchemaGenerator) -> Schema {
    object_array("The track's phases: [{number, name}].")
}

fn plan_tasks_schema(_: &mut SchemaGenerator) -> Schema {
    object_array(
        "The tasks: [{id (e.g. \"1.2\"), name, description?, files?, depends_on?, phase (a phase \
         number), acceptance?, type?, duration?}].",
    )
}

fn completed_tracks_schema(_: &mut SchemaGenerator) -> Schema {
    object_array(
        "Tracks already completed, to report overlap: [{id, name?, deliverables (paths or \
         feature names)}]. Give this or tracks_md (or neither).",
    )
}

/// start or complete.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StepAction {
    Start,
    Complete,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrackStepArgs {
    /// The track (letters, digits, `.`, `_`, `-`); it must have been imported.
    pub track_id: String,
    /// PLAN, EVALUATE_PLAN, EXECUTE, EVALUATE_EXECUTION, FIX or BUSINESS_SYNC.
    pub step: String,
    /// "start" (sets the step IN_PROGRESS) or "complete" (with outcome).
    pub action: StepAction,
    #[serde(default)]
    #[schemars(schema_with = "outcome_schema")]
    pub outcome: Option<StepOutcome>,
    /// With start: who works on the step.
    pub agent: Option<String>,
    /// The `revision` a previous answer returned, as is: the change applies only if
    /// nobody changed the track since (else a `stale_etag` error).
    pub if_match: Option<i64>,
}

fn outcome_schema(_: &mut SchemaGenerator) -> Schema {
    enum_schema(
        &["PASSED", "FAILED", "BLOCKED"],
        "With action complete (required there): how the step ended.",
    )
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRefineArgs {
    /// The phase context (context_{phase_id}.json): phase_id, assignments,
    /// peer_summaries, task_text or task_file_path.
    #[schemars(schema_with = "context_schema")]
    pub context: Value,
    /// The refined plan (PlanDocument) with its phases.
    #[schemars(schema_with = "plan_schema")]
    pub refined_plan: Value,
    /// The task inline (the L0s get a server-side copy's path).
    pub task_text: Option<String>,
    /// Executor profile name (e.g. "builtin"); the server's default when absent.
    pub executor: Option<String>,
    /// The project the job belongs to (required for a project-limited token).
    pub project_id: Option<String>,
    /// The planning cycle.
    pub team_pk: Option<String>,
    /// Repeat a submission safely: the same key and arguments answer the same job.
    pub idempotency_key: Option<String>,
}

fn context_schema(generator: &mut SchemaGenerator) -> Schema {
    any_object(
        "The phase context (context_{phase_id}.json): phase_id, assignments, peer_summaries, \
         task_text or task_file_path.",
    )(generator)
}

fn plan_schema(generator: &mut SchemaGenerator) -> Schema {
    any_object("The refined plan (PlanDocument) with its phases.")(generator)
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RefineStatusArgs {
    /// The job (start_refine's job_id).
    #[schemars(with = "Uuid")]
    pub job_id: RawId,
    /// Wait up to this many seconds (0-60) for the job to change before answering.
    #[schemars(range(min = 0, max = 60))]
    pub wait_seconds: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRefineArgs {
    /// The job (start_refine's job_id).
    #[schemars(with = "Uuid")]
    pub job_id: RawId,
}
