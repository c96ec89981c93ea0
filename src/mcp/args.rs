//! The tools' arguments. Doc comments become the input schemas' descriptions;
//! fields that are not `Option` (and have no default) are `required`.
//!
//! An `Option` field with a schema function needs `#[serde(default)]` to be
//! optional in the schema; `skip_serializing_if` (unused: these types are only
//! read) keeps schemars from adding a `"default": null` that the schema does not
//! admit.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use crate::domain::dispatch::{AbandonCategory, ReadyMode, TaskStatus};
use crate::domain::loop_plan::TaskType;
use crate::domain::track_state::{Step, StepOutcome};
use crate::service::tracks::StepAction;

/// The gating task list (docs/spec/gating.md §1): an item schema of exactly the
/// fields `domain::gating` reads, so an agent needs no prose to write one. It never
/// refuses what the gate accepts (unknown fields are kept, so they stay allowed);
/// the gate still checks what a schema cannot (ids exist, waves, files). The gate's
/// rules are told once, on `validate_task_list`'s fields (the tool budget).
fn tasks_schema(rules: bool) -> Schema {
    let rule = |schema: Value, text: &str| match (schema, rules) {
        (Value::Object(mut object), true) => {
            object.insert("description".into(), text.into());
            Value::Object(object)
        }
        (schema, _) => schema,
    };
    let names = serde_json::json!({"type": "array", "items": {"type": "string"}});
    json_schema!({
        "type": "array",
        "minItems": 1,
        "description": if rules { "Or planner_output." } else { "Or planner_output; as validate_task_list's." },
        "items": {
            "type": "object",
            "required": ["task_id", "assigned_persona", "parallel_group", "description"],
            "properties": {
                "task_id": {"type": "string"},
                "assigned_persona": {"type": "string"},
                "parallel_group": rule(serde_json::json!({"type": "integer", "minimum": 1}), "Wave, after its depends_on's."),
                "depends_on": names,
                "reads": rule(names.clone(), "From an earlier wave or existing_files."),
                "writes": rule(names.clone(), "One writer per file and wave."),
                "description": {"type": "string"},
                "reviews": rule(serde_json::json!({"type": ["string", "null"]}), "A task_id: other persona, earlier wave.")
            }
        }
    })
}

fn task_array(_: &mut SchemaGenerator) -> Schema {
    tasks_schema(true)
}

fn task_array_bare(_: &mut SchemaGenerator) -> Schema {
    tasks_schema(false)
}

fn strings(description: &str) -> Value {
    serde_json::json!({"type": "array", "items": {"type": "string"}, "description": description})
}

fn enum_schema(values: &[&str], description: &str) -> Schema {
    json_schema!({"type": "string", "enum": values, "description": description})
}

/// The `schema_with` functions of the enum arguments: every wire name (`ALL`,
/// `as_str`) and a description.
macro_rules! enum_schemas {
    ($($name:ident: $kind:ty, $description:literal;)+) => {$(
        fn $name(_: &mut SchemaGenerator) -> Schema {
            let values: Vec<&str> = <$kind>::ALL.iter().map(|v| v.as_str()).collect();
            enum_schema(&values, $description)
        }
    )+};
}

enum_schemas! {
    task_status_schema: TaskStatus, "The new status.";
    abandon_category_schema: AbandonCategory, "With (and only with) abandoned.";
    ready_mode_schema: ReadyMode, "barrier (default): by wave; pipeline: as deps finish.";
    outcome_schema: StepOutcome, "With (and only with) complete.";
    action_schema: StepAction, "start: IN_PROGRESS.";
    format_schema: PlanAnswerFormat, "Default json.";
    step_schema: Step, "The loop step.";
}

/// An id argument as sent, any JSON: the tool parses it, so a malformed one is a
/// tool error naming its field and which id to pass, not serde's text
/// (docs/mcp.md, "The tools").
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "task_array")]
    pub tasks: Option<Value>,
    /// Planner text with a ```json block.
    pub planner_output: Option<String>,
    /// Paths that exist already.
    pub existing_files: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    /// The project.
    pub project_id: String,
    /// The planning cycle.
    pub team_pk: Option<String>,
    /// Who submits it.
    pub created_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "task_array_bare")]
    pub tasks: Option<Value>,
    /// Planner text with a ```json block.
    pub planner_output: Option<String>,
    /// Paths that exist already.
    pub existing_files: Option<Vec<String>>,
    /// Makes a retry safe.
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadyArgs {
    /// create_task_list's task_list_id.
    #[schemars(with = "Uuid")]
    pub task_list_id: RawId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "ready_mode_schema")]
    pub mode: Option<ReadyMode>,
    /// Long-poll.
    #[schemars(range(max = 30))]
    pub wait_seconds: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimArgs {
    /// create_task_list's task_list_id.
    #[schemars(with = "Uuid")]
    pub task_list_id: RawId,
    /// Your agent id.
    pub holder: String,
    /// Only its tasks.
    pub persona: Option<String>,
    /// Default 300.
    #[schemars(range(min = 1, max = 86400))]
    pub lease_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "ready_mode_schema")]
    pub mode: Option<ReadyMode>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatArgs {
    /// Planner id (with task_list_id) or server id.
    #[schemars(with = "String")]
    pub task_id: RawId,
    /// For a planner task_id.
    #[serde(default)]
    #[schemars(with = "Option<Uuid>")]
    pub task_list_id: Option<RawId>,
    /// The claim's holder.
    pub holder: String,
    /// Default 300.
    #[schemars(range(min = 1, max = 86400))]
    pub lease_s: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetStatusArgs {
    /// Planner id (with task_list_id) or server id.
    #[schemars(with = "String")]
    pub task_id: RawId,
    /// For a planner task_id.
    #[serde(default)]
    #[schemars(with = "Option<Uuid>")]
    pub task_list_id: Option<RawId>,
    #[schemars(schema_with = "task_status_schema")]
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "abandon_category_schema")]
    pub abandon_category: Option<AbandonCategory>,
    /// For people.
    pub notes: Option<String>,
    /// Required while claimed.
    pub holder: Option<String>,
    /// Override another's claim.
    #[serde(default)]
    pub force: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectStatusArgs {
    /// The project.
    pub project_id: String,
    /// Only this cycle.
    pub team_pk: Option<String>,
}

/// Answer format of plan_loop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanAnswerFormat {
    #[default]
    Json,
    Markdown,
}

crate::domain::wire_strings!(PlanAnswerFormat {
    Json => "json",
    Markdown => "markdown",
});

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanLoopArgs {
    #[schemars(schema_with = "track_schema")]
    pub track: Value,
    #[schemars(schema_with = "phases_schema")]
    pub phases: Value,
    #[schemars(schema_with = "plan_tasks_schema")]
    pub tasks: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "completed_tracks_schema")]
    pub completed_tracks: Option<Value>,
    /// tracks.md instead of completed_tracks.
    pub tracks_md: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "format_schema")]
    pub format: Option<PlanAnswerFormat>,
}

// plan_loop's inputs as `domain::loop_plan` reads them (`LoopPlanRequest` and
// its `read_task`). Task fields other than id, name and phase may be null there
// (read as absent), so their schemas admit null.

fn track_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "required": ["id", "name"],
        "description": "The track planned.",
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "spec": {"type": "string", "description": "One line."},
            "dependencies": strings("Track ids.")
        }
    })
}

fn phases_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "description": "Its phases.",
        "items": {
            "type": "object",
            "required": ["number", "name"],
            "properties": {
                "number": {"type": "integer", "minimum": 0},
                "name": {"type": "string"}
            }
        }
    })
}

fn plan_tasks_schema(_: &mut SchemaGenerator) -> Schema {
    let mut types: Vec<Value> = TaskType::ALL
        .iter()
        .map(|t| Value::from(t.as_str()))
        .collect();
    types.push(Value::Null);
    let nullable = |kind: &str| serde_json::json!({"type": [kind, "null"]});
    let nullable_strings =
        serde_json::json!({"type": ["array", "null"], "items": {"type": "string"}});
    json_schema!({
        "type": "array",
        "description": "Its tasks.",
        "items": {
            "type": "object",
            "required": ["id", "name", "phase"],
            "properties": {
                "id": {"type": "string", "description": "e.g. \"1.2\""},
                "name": {"type": "string"},
                "phase": {"type": "integer", "minimum": 1},
                "description": nullable("string"),
                "files": nullable_strings,
                "depends_on": nullable_strings,
                "acceptance": nullable("string"),
                "estimated_duration": {"type": ["string", "null"], "description": "e.g. \"1h30m\""},
                "type": {"enum": types, "description": "Default: from files."}
            }
        }
    })
}

fn completed_tracks_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "description": "Done tracks, for overlap.",
        "items": {
            "type": "object",
            "required": ["id"],
            "properties": {
                "id": {"type": "string"},
                "name": {"type": ["string", "null"]},
                "deliverables": strings("Paths, features.")
            }
        }
    })
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportTrackArgs {
    /// The track.
    pub track_id: String,
    #[schemars(schema_with = "metadata_schema")]
    pub metadata: Value,
    /// Kept on replace if absent.
    pub project_id: Option<String>,
    /// Replace only this revision.
    pub if_match: Option<i64>,
}

fn metadata_schema(generator: &mut SchemaGenerator) -> Schema {
    any_object("metadata.json (v1 upgraded; {} starts a track).")(generator)
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrackStepArgs {
    /// The track.
    pub track_id: String,
    #[schemars(schema_with = "step_schema")]
    pub step: String,
    #[schemars(schema_with = "action_schema")]
    pub action: StepAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "outcome_schema")]
    pub outcome: Option<StepOutcome>,
    /// With (and only with) start.
    pub agent: Option<String>,
    /// Pin this revision.
    pub if_match: Option<i64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRefineArgs {
    #[schemars(schema_with = "context_schema")]
    pub context: Value,
    #[schemars(schema_with = "plan_schema")]
    pub refined_plan: Value,
    /// The task inline.
    pub task_text: Option<String>,
    /// Executor profile.
    pub executor: Option<String>,
    /// For limited tokens.
    pub project_id: Option<String>,
    /// The planning cycle.
    pub team_pk: Option<String>,
    /// Makes a retry safe.
    pub idempotency_key: Option<String>,
}

fn context_schema(generator: &mut SchemaGenerator) -> Schema {
    any_object("context_{phase_id}.json.")(generator)
}

fn plan_schema(generator: &mut SchemaGenerator) -> Schema {
    any_object("The PlanDocument.")(generator)
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RefineStatusArgs {
    /// start_refine's job_id.
    #[schemars(with = "Uuid")]
    pub job_id: RawId,
    /// Long-poll.
    #[schemars(range(min = 0, max = 60))]
    pub wait_seconds: Option<u64>,
}

/// A refine job: `cancel_refine`, `retry_refine_job`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobArgs {
    /// start_refine's job_id.
    #[schemars(with = "Uuid")]
    pub job_id: RawId,
}

/// `track_history`: the track.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrackHistoryArgs {
    /// The track.
    pub track_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schemas' enum values are the ones serde reads, variant by variant.
    #[test]
    fn enum_names_are_the_wire_names() {
        fn reads<T: serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(name: &str, v: T) {
            assert_eq!(
                serde_json::from_value::<T>(Value::from(name)).ok(),
                Some(v),
                "{name}"
            );
        }
        for f in PlanAnswerFormat::ALL {
            reads(f.as_str(), f);
        }
        for a in StepAction::ALL {
            reads(a.as_str(), a);
        }
        for o in StepOutcome::ALL {
            reads(o.as_str(), o);
        }
        for s in Step::ALL {
            reads(s.as_str(), s);
        }
    }
}
