//! The tools: their names, descriptions and input schemas (from the argument
//! types, so the two cannot drift), and the thin call into the service with a
//! compact answer (ids, counts, the next action; not whole documents).

use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::common::schema_for_input;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::args::{
    ClaimArgs, CreateArgs, HeartbeatArgs, ImportTrackArgs, JobArgs, PlanAnswerFormat, PlanLoopArgs,
    ProjectStatusArgs, RawId, ReadyArgs, RefineStatusArgs, SetStatusArgs, StartRefineArgs,
    TrackHistoryArgs, TrackStepArgs, ValidateArgs,
};
use crate::domain::gating::ParsedTaskList;
use crate::domain::loop_plan::LoopPlanRequest;
use crate::domain::track_state::Completion;
use crate::service::task_claims::{ClaimRequest, HeartbeatRequest, NextAnswer};
use crate::service::task_lists::{
    CreateTaskListRequest, StoredTask, StoredTaskList, TaskUpdate, ValidateRequest,
};
use crate::service::task_refs::{TASK_ID_HINT, TASK_LIST_ID_HINT, TaskRef, invalid_id, parse_uuid};
use crate::service::tracks::{Precondition, StepWrite, parse_track_id};
use crate::service::{Caller, ProblemCode, Service, ServiceError};

/// Longest `refine_status` wait (docs/mcp.md: `wait_seconds` 0-60).
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// What a tool may do, for `tools/list`'s annotations and the read-only surface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Changes nothing: offered on the read-only surface.
    Read,
    /// Adds or moves on.
    Write,
    /// Replaces what is stored (a re-import starts a track's loop over).
    Replace,
}

/// One row per tool: its variant and name, what it may do, its argument type (the
/// input schema is derived from it, so the two cannot drift), its handler and its
/// description. Descriptions are terse on purpose: every agent reads them on each
/// `tools/list`, under a 10 KB budget; the prose is in docs/mcp.md.
macro_rules! tools {
    ($($variant:ident $name:literal $access:ident $args:ty => $handler:ident, $description:literal;)+) => {
        /// Every tool plangate offers over MCP.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ToolName {
            $($variant),+
        }

        crate::domain::wire_strings!(ToolName, parse { $($variant => $name),+ });

        impl ToolName {
            fn access(self) -> Access {
                match self {
                    $(ToolName::$variant => Access::$access),+
                }
            }

            fn description(self) -> &'static str {
                match self {
                    $(ToolName::$variant => $description),+
                }
            }

            fn raw_schema(self) -> Result<Arc<JsonObject>, String> {
                match self {
                    $(ToolName::$variant => schema_for_input::<$args>().map_err(|e| e.to_string())),+
                }
            }
        }

        /// Its arguments parsed (a refusal before the tool runs), then the tool.
        async fn dispatch(
            tool: ToolName,
            call: &Call<'_>,
            arguments: JsonObject,
        ) -> Result<Answer, ServiceError> {
            match tool {
                $(ToolName::$variant => $handler(call, parse::<$args>(Value::Object(arguments))?).await),+
            }
        }
    };
}

tools! {
    ValidateTaskList "validate_task_list" Read ValidateArgs => validate_task_list,
        "Gate a task list without storing it.";
    CreateTaskList "create_task_list" Write CreateArgs => create_task_list,
        "Gate and store a task list; a refusal carries the planner's reprompt.";
    ReadyTasks "ready_tasks" Read ReadyArgs => ready_tasks,
        "Tasks to dispatch now; next: dispatch, wait (call again), done or blocked (stop).";
    SetTaskStatus "set_task_status" Write SetStatusArgs => set_task_status,
        "Move a task: pending -> running -> done | failed; unfinished -> abandoned \
         (failed/abandoned cascade).";
    ProjectStatus "project_status" Read ProjectStatusArgs => project_status,
        "A project's or cycle's counts by status, active wave, in flight.";
    PlanLoop "plan_loop" Read PlanLoopArgs => plan_loop,
        "Plan a track's tasks: levels, parallel groups, file conflicts, overlap with \
         done tracks.";
    ImportTrack "import_track" Replace ImportTrackArgs => import_track,
        "Create or replace a track; then track_step.";
    TrackStep "track_step" Write TrackStepArgs => track_step,
        "Start or complete a track's loop step.";
    TrackHistory "track_history" Read TrackHistoryArgs => track_history,
        "A track's history, oldest first.";
    StartRefine "start_refine" Write StartRefineArgs => start_refine,
        "Queue a refine job for one phase; then refine_status.";
    RefineStatus "refine_status" Read RefineStatusArgs => refine_status,
        "A refine job's status, progress and result; long-polls.";
    CancelRefine "cancel_refine" Write JobArgs => cancel_refine,
        "Cancel a refine job and its L0s.";
    RetryRefineJob "retry_refine_job" Write JobArgs => retry_refine_job,
        "Retry a failed or cancelled job as a new one.";
    ClaimTask "claim_task" Write ClaimArgs => claim_task,
        "Claim a ready task (renew: heartbeat_task; end: set_task_status with holder).";
    HeartbeatTask "heartbeat_task" Write HeartbeatArgs => heartbeat_task,
        "Renew your claim's lease.";
}

impl ToolName {
    /// Changes nothing: offered on the read-only surface.
    pub fn is_read_only(self) -> bool {
        self.access() == Access::Read
    }

    fn input_schema(self) -> Arc<JsonObject> {
        // Every argument type is a struct, so the schema is an object: a failure
        // here is a programming error caught by the tests, not by a client.
        let schema = self.raw_schema().unwrap_or_else(|e| {
            tracing::error!(tool = self.as_str(), error = %e, "tool input schema is not an object");
            Arc::new(JsonObject::new())
        });
        Arc::new(trimmed(&schema))
    }

    /// The tool as `tools/list` shows it.
    pub fn describe(self) -> Tool {
        // readOnlyHint false is the default; destructiveHint true is, so say what is
        // true: a re-import replaces a track's loop state, the others add or move on.
        let annotations = match self.access() {
            Access::Read => ToolAnnotations::new().read_only(true),
            access => ToolAnnotations::new().destructive(access == Access::Replace),
        };
        Tool::new(self.as_str(), self.description(), self.input_schema()).annotate(annotations)
    }
}

/// The schema less what costs bytes and tells an agent nothing: `$schema` (MCP's
/// default dialect is 2020-12 already), `additionalProperties` (an unknown argument
/// is refused by name anyway), `format`s (Rust's `uint64` is no JSON Schema format
/// and the bounds say it; the descriptions say which id a `uuid` is), and `null` in
/// the arguments' types: an optional argument is omitted (null reads as absent).
fn trimmed(schema: &JsonObject) -> JsonObject {
    fn drop_formats(value: &mut Value) {
        match value {
            Value::Object(object) => {
                if object.get("format").is_some_and(Value::is_string) {
                    object.remove("format");
                }
                object.values_mut().for_each(drop_formats);
            }
            Value::Array(items) => items.iter_mut().for_each(drop_formats),
            _ => {}
        }
    }
    let mut schema = schema.clone();
    schema.remove("$schema");
    schema.remove("additionalProperties");
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        for property in properties.values_mut() {
            if let Some(Value::Array(types)) = property.get_mut("type") {
                types.retain(|t| t != "null");
                if let [only] = types.as_slice() {
                    let only = only.clone();
                    property["type"] = only;
                }
            }
        }
    }
    let mut value = Value::Object(schema);
    drop_formats(&mut value);
    match value {
        Value::Object(object) => object,
        _ => JsonObject::new(),
    }
}

// ---------------------------------------------------------------------------
// Calls.

/// Run one tool; every refusal is a tool error carrying the REST problem's `code`.
pub async fn call(
    service: &Service,
    caller: &Caller,
    tool: ToolName,
    arguments: JsonObject,
    max_wait: Duration,
) -> CallToolResult {
    let started = std::time::Instant::now();
    let context = Call {
        service,
        caller,
        max_wait,
    };
    let outcome = dispatch(tool, &context, arguments).await;
    let outcome_label = if outcome.is_ok() { "ok" } else { "error" };
    metrics::counter!("mcp_tool_calls_total", "tool" => tool.as_str(), "outcome" => outcome_label)
        .increment(1);
    tracing::info!(
        tool = tool.as_str(),
        outcome = outcome_label,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "mcp tool call"
    );
    match outcome {
        Ok(Answer::Json(value)) => {
            CallToolResult::success(vec![ContentBlock::text(value.to_string())])
        }
        Ok(Answer::Text(text)) => CallToolResult::success(vec![ContentBlock::text(text)]),
        Err(error) => tool_error(&error),
    }
}

/// What every handler gets besides its arguments.
struct Call<'a> {
    service: &'a Service,
    caller: &'a Caller,
    /// Longest `refine_status` wait on this transport.
    max_wait: Duration,
}

enum Answer {
    Json(Value),
    Text(String),
}

/// Arguments of the wrong shape: `invalid_body`, as a JSON body of the wrong shape
/// is on REST; serde's message names the field.
fn parse<T: DeserializeOwned>(arguments: Value) -> Result<T, ServiceError> {
    serde_json::from_value(arguments).map_err(invalid_arguments)
}

fn invalid_arguments(e: serde_json::Error) -> ServiceError {
    ServiceError::unprocessable(ProblemCode::InvalidBody, format!("invalid arguments: {e}"))
}

/// Which id a `job_id` is.
const JOB_ID_HINT: &str = "job_id is the id start_refine answered";

/// A UUID argument: anything but a UUID string is `invalid_field` naming `field`
/// and saying which id to pass.
fn uuid_arg(field: &str, raw: &RawId, hint: &str) -> Result<uuid::Uuid, ServiceError> {
    match &raw.0 {
        Value::String(text) => parse_uuid(field, text, hint),
        other => Err(invalid_id(field, &other.to_string(), hint)),
    }
}

/// The task `task_id` (and `task_list_id`) name: see [`TaskRef::from_args`].
fn task_arg(task_id: &RawId, task_list_id: Option<&RawId>) -> Result<TaskRef, ServiceError> {
    let Value::String(task_id) = &task_id.0 else {
        return Err(ServiceError::invalid_field(
            "task_id",
            format!(
                "task_id must be a string, not {}: {TASK_ID_HINT}",
                task_id.0
            ),
        ));
    };
    match task_list_id {
        None => TaskRef::from_args(task_id, None),
        Some(list) => Ok(TaskRef::InList {
            task_list_id: uuid_arg("task_list_id", list, TASK_LIST_ID_HINT)?,
            task_id: task_id.clone(),
        }),
    }
}

/// `{code, detail, ...members}`: the REST problem without its HTTP members.
fn tool_error(error: &ServiceError) -> CallToolResult {
    let mut body = serde_json::Map::new();
    body.insert("code".into(), Value::from(error.code.as_str()));
    body.insert("detail".into(), Value::from(error.detail.clone()));
    body.extend(error.members());
    CallToolResult::error(vec![ContentBlock::text(Value::Object(body).to_string())])
}

/// `tasks` as the gate reads it (entries that are not task objects are gate
/// violations, not malformed arguments).
fn task_list(tasks: Option<Value>) -> Result<Option<ParsedTaskList>, ServiceError> {
    tasks
        .map(|value| {
            serde_json::from_value(value).map_err(|e| {
                ServiceError::unprocessable(ProblemCode::InvalidBody, format!("tasks: {e}"))
                    .field("tasks")
            })
        })
        .transpose()
}

async fn validate_task_list(call: &Call<'_>, args: ValidateArgs) -> Result<Answer, ServiceError> {
    let (service, caller) = (call.service, call.caller);
    let report = service.validate_task_list(
        caller,
        ValidateRequest {
            tasks: task_list(args.tasks)?,
            planner_output: args.planner_output,
            existing_files: args.existing_files.unwrap_or_default(),
        },
    )?;
    // The whole report, counts included: the same answer as the REST route.
    Ok(Answer::Json(json!(report)))
}

/// Task ids per wave, in wave order then submission order.
fn waves(list: &StoredTaskList) -> Vec<Vec<&str>> {
    let mut by_wave: std::collections::BTreeMap<i64, Vec<&str>> = Default::default();
    for task in &list.tasks {
        by_wave
            .entry(task.parallel_group)
            .or_default()
            .push(&task.task_id);
    }
    by_wave.into_values().collect()
}

/// The `POST /v1/task-lists` body these arguments stand for (without the key).
fn rest_body(args: &CreateArgs) -> Result<Vec<u8>, ServiceError> {
    let mut body = serde_json::Map::new();
    body.insert("project_id".into(), Value::from(args.project_id.as_str()));
    body.insert("created_by".into(), Value::from(args.created_by.as_str()));
    let optional = [
        ("team_pk", args.team_pk.as_deref().map(Value::from)),
        ("tasks", args.tasks.clone()),
        (
            "planner_output",
            args.planner_output.as_deref().map(Value::from),
        ),
        (
            "existing_files",
            args.existing_files.clone().map(Value::from),
        ),
    ];
    for (field, value) in optional {
        if let Some(value) = value {
            body.insert(field.into(), value);
        }
    }
    serde_json::to_vec(&Value::Object(body)).map_err(invalid_arguments)
}

async fn create_task_list(call: &Call<'_>, args: CreateArgs) -> Result<Answer, ServiceError> {
    let (service, caller) = (call.service, call.caller);
    // With a key, the REST body, so a retry is compared (hashed) the same way
    // whichever transport brought it; without one nothing reads it.
    let body = match args.idempotency_key {
        Some(_) => rest_body(&args)?,
        None => Vec::new(),
    };
    let created = service
        .create_task_list(
            caller,
            CreateTaskListRequest {
                project_id: args.project_id,
                team_pk: args.team_pk,
                created_by: args.created_by,
                tasks: task_list(args.tasks)?,
                planner_output: args.planner_output,
                existing_files: args.existing_files.unwrap_or_default(),
                idempotency_key: args.idempotency_key,
            },
            None,
            &body,
        )
        .await?;
    let list = created.value;
    let tasks: Vec<Value> = list
        .tasks
        .iter()
        .map(|task| json!({"id": task.id, "task_id": task.task_id}))
        .collect();
    let mut answer = json!({
        "task_list_id": list.id,
        "waves": waves(&list),
        "tasks": tasks,
    });
    if created.replayed {
        answer["replayed"] = Value::Bool(true);
    }
    Ok(Answer::Json(answer))
}

async fn ready_tasks(call: &Call<'_>, args: ReadyArgs) -> Result<Answer, ServiceError> {
    let (service, caller) = (call.service, call.caller);
    let ready = service
        .ready_tasks(
            caller,
            uuid_arg("task_list_id", &args.task_list_id, TASK_LIST_ID_HINT)?,
            args.mode.unwrap_or_default(),
            // No `limit` argument: it does not fit the 10 KB tools/list budget
            // (docs/mcp.md); the default bound applies.
            None,
            args.wait_seconds
                .map(|w| w.min(crate::service::MAX_WAIT_SECS)),
        )
        .await?;
    let tasks: Vec<Value> = ready.tasks.iter().map(compact_task).collect();
    let mut answer = with_next(&ready.next);
    answer["wave"] = json!(ready.wave);
    answer["tasks"] = json!(tasks);
    if ready.more_ready {
        answer["more_ready"] = Value::Bool(true);
    }
    Ok(Answer::Json(answer))
}

/// What an agent needs to work on a task.
fn compact_task(task: &StoredTask) -> Value {
    let mut compact = json!({
        "id": task.id,
        "task_id": task.task_id,
        "assigned_persona": task.assigned_persona,
        "description": task.description,
        "writes": task.writes,
        "reads": task.reads,
    });
    if let Some(claim) = &task.claim {
        compact["claim"] = json!(claim);
    }
    compact
}

/// `{next, in_flight, retry_after_s?, remaining, blocked?}`.
fn with_next(next: &NextAnswer) -> Value {
    serde_json::to_value(next).unwrap_or_else(|_| json!({"next": next.next}))
}

async fn claim_task(call: &Call<'_>, args: ClaimArgs) -> Result<Answer, ServiceError> {
    let (service, caller) = (call.service, call.caller);
    let claimed = service
        .claim_task(
            caller,
            uuid_arg("task_list_id", &args.task_list_id, TASK_LIST_ID_HINT)?,
            ClaimRequest {
                holder: args.holder,
                persona: args.persona,
                // Past u32 is past the 86,400 s bound: refused there, naming the field.
                lease_s: args.lease_s.map(|s| u32::try_from(s).unwrap_or(u32::MAX)),
                mode: args.mode,
            },
        )
        .await?;
    let mut answer = with_next(&claimed.next);
    answer["task"] = claimed.task.as_ref().map_or(Value::Null, compact_task);
    Ok(Answer::Json(answer))
}

async fn heartbeat_task(call: &Call<'_>, args: HeartbeatArgs) -> Result<Answer, ServiceError> {
    let (service, caller) = (call.service, call.caller);
    let task = service
        .heartbeat_task(
            caller,
            task_arg(&args.task_id, args.task_list_id.as_ref())?,
            HeartbeatRequest {
                holder: args.holder,
                // Past u32 is past the 86,400 s bound: refused there, naming the field.
                lease_s: args.lease_s.map(|s| u32::try_from(s).unwrap_or(u32::MAX)),
            },
        )
        .await?;
    Ok(Answer::Json(
        json!({"id": task.id, "status": task.status, "claim": task.claim}),
    ))
}

async fn set_task_status(call: &Call<'_>, args: SetStatusArgs) -> Result<Answer, ServiceError> {
    let (service, caller) = (call.service, call.caller);
    let updated = service
        .update_task(
            caller,
            task_arg(&args.task_id, args.task_list_id.as_ref())?,
            TaskUpdate {
                status: args.status,
                abandon_category: args.abandon_category,
                notes: args.notes,
                holder: args.holder,
                force: args.force,
            },
        )
        .await?;
    let task = &updated.task;
    let mut compact = json!({
        "id": task.id,
        "task_id": task.task_id,
        "status": task.status,
    });
    if let Some(category) = task.abandon_category {
        compact["abandon_category"] = json!(category);
    }
    Ok(Answer::Json(
        json!({"task": compact, "cascaded": updated.cascaded}),
    ))
}

async fn project_status(call: &Call<'_>, args: ProjectStatusArgs) -> Result<Answer, ServiceError> {
    let (service, caller) = (call.service, call.caller);
    let project = crate::domain::ids::Ident::parse("project_id", &args.project_id)?;
    let status = service
        .project_status(caller, project, args.team_pk)
        .await?;
    Ok(Answer::Json(json!(status)))
}

async fn plan_loop(call: &Call<'_>, args: PlanLoopArgs) -> Result<Answer, ServiceError> {
    let (service, caller) = (call.service, call.caller);
    let request = json!({
        "track": args.track,
        "phases": args.phases,
        "tasks": args.tasks,
        "completed_tracks": args.completed_tracks,
        "tracks_md": args.tracks_md,
    });
    let request: LoopPlanRequest = parse(request)?;
    let plan = service.generate_loop_plan(caller, &request)?;
    Ok(match args.format.unwrap_or_default() {
        PlanAnswerFormat::Json => Answer::Json(json!(plan)),
        PlanAnswerFormat::Markdown => Answer::Text(service.render_plan_markdown(&plan)),
    })
}

/// A revision to pin, if the caller gave one.
fn pinned(if_match: Option<i64>) -> Precondition {
    if_match.map_or(Precondition::None, Precondition::Revision)
}

async fn import_track(call: &Call<'_>, args: ImportTrackArgs) -> Result<Answer, ServiceError> {
    let (service, caller) = (call.service, call.caller);
    let version = service
        .import_track(
            caller,
            parse_track_id(&args.track_id)?,
            args.project_id.as_deref(),
            args.metadata,
            pinned(args.if_match),
        )
        .await?;
    let mut answer = json!(version.summary());
    answer["created"] = Value::Bool(version.created);
    Ok(Answer::Json(answer))
}

async fn track_step(call: &Call<'_>, args: TrackStepArgs) -> Result<Answer, ServiceError> {
    let completion = args.outcome.map(Completion::new);
    let write = StepWrite::from_action(args.action, args.agent.as_deref(), completion.as_ref())?;
    let version = call
        .service
        .step_track(
            call.caller,
            parse_track_id(&args.track_id)?,
            &args.step,
            write,
            pinned(args.if_match),
        )
        .await?;
    Ok(Answer::Json(json!(version.summary())))
}

async fn track_history(call: &Call<'_>, args: TrackHistoryArgs) -> Result<Answer, ServiceError> {
    let history = call
        .service
        .track_history(call.caller, parse_track_id(&args.track_id)?)
        .await?;
    Ok(Answer::Json(json!(history.events)))
}

async fn start_refine(call: &Call<'_>, args: StartRefineArgs) -> Result<Answer, ServiceError> {
    let (service, caller) = (call.service, call.caller);
    // The REST body, so the submission is checked (and hashed for idempotency) the
    // same way whichever transport brought it.
    let mut body = serde_json::Map::new();
    body.insert("context".into(), args.context);
    body.insert("refined_plan".into(), args.refined_plan);
    let optional = [
        ("task_text", args.task_text),
        ("executor", args.executor),
        ("project_id", args.project_id),
        ("team_pk", args.team_pk),
        ("idempotency_key", args.idempotency_key),
    ];
    for (field, value) in optional {
        if let Some(value) = value {
            body.insert(field.into(), Value::String(value));
        }
    }
    let bytes = serde_json::to_vec(&Value::Object(body)).map_err(invalid_arguments)?;
    let accepted = service.create_refine_job(caller, &bytes, None).await?;
    Ok(Answer::Json(json!({
        "job_id": accepted.value.id,
        "status": accepted.value.status,
    })))
}

async fn refine_status(call: &Call<'_>, args: RefineStatusArgs) -> Result<Answer, ServiceError> {
    let &Call {
        service,
        caller,
        max_wait,
    } = call;
    let id = uuid_arg("job_id", &args.job_id, JOB_ID_HINT)?;
    let wait = Duration::from_secs(args.wait_seconds.unwrap_or(0)).min(max_wait);
    let mut job = service.refine_job(caller, id, None).await?;
    // The service's long-poll is bounded (docs/jobs.md); wait in its steps until the
    // job changes or the caller's wait is over.
    let deadline = tokio::time::Instant::now() + wait;
    let first_version = job.version;
    while !job.status.is_terminal() && job.version == first_version {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            break;
        }
        let step = left.as_secs().clamp(1, crate::service::MAX_WAIT_SECS);
        job = service.refine_job(caller, id, Some(step)).await?;
    }
    let mut answer = json!({"status": job.status, "progress": job.progress});
    if let Some(result) = job
        .result
        .filter(|_| job.status == crate::domain::job::JobStatus::Succeeded)
    {
        answer["result"] = result;
    }
    if let Some(error) = job.error {
        answer["error"] = json!(error);
    }
    Ok(Answer::Json(answer))
}

async fn cancel_refine(call: &Call<'_>, args: JobArgs) -> Result<Answer, ServiceError> {
    let id = uuid_arg("job_id", &args.job_id, JOB_ID_HINT)?;
    let job = call.service.cancel_refine_job(call.caller, id).await?;
    Ok(Answer::Json(json!({"status": job.status})))
}

async fn retry_refine_job(call: &Call<'_>, args: JobArgs) -> Result<Answer, ServiceError> {
    let id = uuid_arg("job_id", &args.job_id, JOB_ID_HINT)?;
    let job = call.service.retry_refine_job(call.caller, id).await?;
    Ok(Answer::Json(
        json!({"job_id": job.id, "status": job.status}),
    ))
}
