//! `/v1/task-lists`: gate (dry run), persist, read, ready tasks, graph.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use super::AppState;
use super::auth::Caller;
use super::extract::{Json, Path, Query, StoredJson};
use crate::db::task_lists::{NewTaskList, StoredTask, StoredTaskList, ready_tasks};
use crate::domain::dispatch::{GraphFormat, GraphNode, ReadyMode, render_graph};
use crate::domain::gating::{
    self, Outcome, ParsedTaskList, TaskListSource, Validation, ValidationReport,
};
use crate::domain::ids::Ident;
use crate::domain::retry;
use crate::error::{ApiError, ForbiddenProject, JsonBodyRejections, Problem};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(validate_task_list))
        .routes(routes!(create_task_list))
        .routes(routes!(get_task_list))
        .routes(routes!(ready))
        .routes(routes!(graph))
}

/// A dry-run gate: nothing is stored, no retry is counted.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidateRequest {
    /// The task list as a JSON array of task objects. Give this or `planner_output`.
    /// Entries that are not task objects are gate violations (`synthesis_failure`),
    /// not malformed requests.
    #[schema(value_type = Object, required = false)]
    pub tasks: Option<ParsedTaskList>,
    /// The planner's raw text; the last ```json (or untagged) fence wins.
    #[schema(value_type = String, required = false)]
    pub planner_output: Option<String>,
    /// Repository paths that pre-exist (satisfy reads).
    #[serde(default)]
    pub existing_files: Vec<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTaskListRequest {
    #[schema(value_type = Ident)]
    pub project_id: String,
    /// The orchestrator's id of this planning cycle; omit for the project-wide flow.
    #[schema(value_type = Option<Ident>)]
    pub team_pk: Option<String>,
    #[schema(value_type = Ident)]
    pub created_by: String,
    /// The task list as a JSON array of task objects. Give this or `planner_output`.
    /// Entries that are not task objects are gate violations (`synthesis_failure`),
    /// not malformed requests.
    #[schema(value_type = Object, required = false)]
    pub tasks: Option<ParsedTaskList>,
    /// The planner's raw text; the last ```json (or untagged) fence wins.
    #[schema(value_type = String, required = false)]
    pub planner_output: Option<String>,
    #[serde(default)]
    pub existing_files: Vec<String>,
}

/// The 422 answer of `POST /v1/task-lists` (problem+json). A gate rejection
/// (`dag_invalid`, `synthesis_failure`) carries every member; a malformed request
/// (`invalid_field`, `invalid_body`) only the problem members, so the gating members
/// are documented as optional.
#[derive(Serialize, ToSchema)]
pub struct GatingProblem {
    #[serde(flatten)]
    pub problem: Problem,
    #[schema(required = false)]
    pub errors: Vec<gating::Violation>,
    #[schema(required = false)]
    pub warnings: Vec<gating::Violation>,
    /// 1 for the first rejection since the last accepted list of this cycle, 2 after.
    #[schema(required = false)]
    pub attempt: u32,
    /// True when the planner gets no further retry.
    #[schema(required = false)]
    pub escalate: bool,
    #[schema(required = false)]
    pub escalation: Option<retry::Escalation>,
    /// The exact text to re-prompt the planner with: every violation, one a line.
    #[schema(required = false)]
    pub reprompt: String,
    /// For `invalid_field`: which field.
    #[schema(required = false)]
    pub field: Option<String>,
}

/// Read straight into tasks while the body is parsed (no intermediate JSON tree):
/// the gate's answer must cost little more than reading the request.
fn source(
    tasks: Option<ParsedTaskList>,
    planner_output: &Option<String>,
) -> Result<TaskListSource<'_>, ApiError> {
    match (tasks, planner_output) {
        (Some(tasks), None) => Ok(TaskListSource::Parsed(tasks)),
        (None, Some(text)) => Ok(TaskListSource::PlannerOutput(text)),
        (Some(_), Some(_)) => Err(ApiError::unprocessable(
            "invalid_body",
            "give either `tasks` or `planner_output`, not both",
        )),
        (None, None) => Err(ApiError::unprocessable(
            "invalid_body",
            "missing field `tasks` (a JSON array) or `planner_output` (the planner's text)",
        )),
    }
}

fn count_outcome(validation: &Validation, route: &'static str) {
    let outcome = match validation.outcome {
        Outcome::Valid => "valid",
        Outcome::SynthesisFailure => "synthesis_failure",
        Outcome::DagInvalid => "dag_invalid",
    };
    metrics::counter!("gating_outcomes_total", "route" => route, "outcome" => outcome).increment(1);
    for error in &validation.errors {
        metrics::counter!("gating_violations_total", "code" => error.code.to_string()).increment(1);
    }
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
    Json(request): Json<ValidateRequest>,
) -> Result<Json<ValidationReport>, ApiError> {
    let source = source(request.tasks, &request.planner_output)?;
    let validation = gating::validate(source, &request.existing_files);
    count_outcome(&validation, "validate");
    Ok(Json(validation.report()))
}

/// Gate a task list and, if it passes, store it all or nothing.
///
/// A rejection is counted per `(project_id, team_pk)`: the first DAG-INVALID gets
/// one retry (`escalate: false`), the second escalates; a synthesis failure
/// escalates at once. An accepted list resets the count.
#[utoipa::path(post, path = "/v1/task-lists", tag = "task-lists",
    request_body = CreateTaskListRequest,
    responses(
        JsonBodyRejections,
        ForbiddenProject,
        (status = 201, description = "Stored; `Location` names the list", body = StoredTaskList,
         headers(("Location" = String, description = "/v1/task-lists/{id}"))),
        (status = 422, description = "Rejected by the gate (`dag_invalid`, `synthesis_failure`) or a malformed request", body = GatingProblem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable", body = Problem, content_type = "application/problem+json"),
    ))]
async fn create_task_list(
    State(state): State<AppState>,
    caller: Caller,
    StoredJson(request): StoredJson<CreateTaskListRequest>,
) -> Result<Response, ApiError> {
    let project_id = Ident::parse("project_id", &request.project_id)?;
    // Before the gate: a refused caller must not move the project's retry count.
    caller.check_project(project_id.as_str())?;
    let team_pk = Ident::parse_optional("team_pk", request.team_pk.as_deref())?;
    let created_by = Ident::parse("created_by", &request.created_by)?;
    let source = source(request.tasks, &request.planner_output)?;
    let validation = gating::validate(source, &request.existing_files);
    count_outcome(&validation, "create");

    let team = team_pk.as_ref().map(Ident::as_str);
    if !validation.is_valid() {
        let synthesis_failure = matches!(validation.outcome, Outcome::SynthesisFailure);
        let rejections = state.db.record_rejection(project_id.as_str(), team).await?;
        let verdict = retry::verdict(synthesis_failure, rejections);
        let (code, detail) = if synthesis_failure {
            (
                "synthesis_failure",
                "the planner output could not be read as a task list",
            )
        } else {
            ("dag_invalid", "the task list violates the DAG gates")
        };
        let report = validation.report();
        return Err(ApiError::unprocessable(
            code,
            format!(
                "{detail}: {}",
                validation
                    .errors
                    .first()
                    .map(|e| e.message.as_str())
                    .unwrap_or("")
            ),
        )
        .with(
            "errors",
            serde_json::to_value(&report.errors).unwrap_or_default(),
        )
        .with(
            "warnings",
            serde_json::to_value(&report.warnings).unwrap_or_default(),
        )
        .with("attempt", verdict.attempt)
        .with("escalate", verdict.escalate)
        .with(
            "escalation",
            serde_json::to_value(verdict.escalation).unwrap_or_default(),
        )
        .with("reprompt", validation.reprompt()));
    }

    let list = state
        .db
        .create_task_list(NewTaskList {
            project_id: project_id.as_str(),
            team_pk: team,
            created_by: created_by.as_str(),
            tasks: &validation.tasks,
        })
        .await?;
    let mut headers = HeaderMap::new();
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/task-lists/{}", list.id)) {
        headers.insert(header::LOCATION, location);
    }
    Ok((StatusCode::CREATED, headers, Json(list)).into_response())
}

/// The list, if the caller may see its project.
async fn load(state: &AppState, caller: &Caller, id: Uuid) -> Result<StoredTaskList, ApiError> {
    let list = state
        .db
        .task_list(id)
        .await?
        .ok_or_else(|| ApiError::not_found("task list", &id.to_string()))?;
    caller.check_project(&list.project_id)?;
    Ok(list)
}

/// The list as created, with current task statuses.
#[utoipa::path(get, path = "/v1/task-lists/{id}", tag = "task-lists",
    params(("id" = Uuid, Path, description = "Server id of the list")),
    responses(
        (status = 200, description = "The list", body = StoredTaskList),
        (status = 400, description = "Not a UUID", body = Problem, content_type = "application/problem+json"),
        ForbiddenProject,
        (status = 404, description = "No such list", body = Problem, content_type = "application/problem+json"),
    ))]
async fn get_task_list(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
) -> Result<Json<StoredTaskList>, ApiError> {
    Ok(Json(load(&state, &caller, id).await?))
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
}

#[derive(Serialize, ToSchema)]
pub struct ReadyResponse {
    pub mode: ReadyMode,
    /// Barrier: the active wave; pipeline: the lowest wave offered. Null when
    /// nothing is left to do.
    pub wave: Option<i64>,
    pub tasks: Vec<StoredTask>,
}

/// Tasks ready to dispatch now.
#[utoipa::path(get, path = "/v1/task-lists/{id}/ready", operation_id = "ready_tasks", tag = "task-lists",
    params(("id" = Uuid, Path, description = "Server id of the list"), ReadyQuery),
    responses(
        (status = 200, description = "Ready tasks", body = ReadyResponse),
        (status = 400, description = "Not a UUID or unknown mode", body = Problem, content_type = "application/problem+json"),
        ForbiddenProject,
        (status = 404, description = "No such list", body = Problem, content_type = "application/problem+json"),
    ))]
async fn ready(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
    Query(query): Query<ReadyQuery>,
) -> Result<Json<ReadyResponse>, ApiError> {
    let mode = query.mode.unwrap_or_default();
    let list = load(&state, &caller, id).await?;
    let (wave, tasks) = ready_tasks(&list, mode);
    Ok(Json(ReadyResponse { mode, wave, tasks }))
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
#[utoipa::path(get, path = "/v1/task-lists/{id}/graph", operation_id = "task_list_graph", tag = "task-lists",
    params(("id" = Uuid, Path, description = "Server id of the list"), GraphQuery),
    responses(
        (status = 200, description = "The graph", body = String, content_type = "text/plain"),
        (status = 400, description = "Not a UUID or unknown format", body = Problem, content_type = "application/problem+json"),
        ForbiddenProject,
        (status = 404, description = "No such list", body = Problem, content_type = "application/problem+json"),
    ))]
async fn graph(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
    Query(query): Query<GraphQuery>,
) -> Result<Response, ApiError> {
    let format = query.format.unwrap_or_default();
    let list = load(&state, &caller, id).await?;
    let view = crate::db::task_lists::dispatch_view(&list.tasks);
    let nodes: Vec<GraphNode> = list
        .tasks
        .iter()
        .zip(&view)
        .map(|(task, dispatch)| GraphNode {
            task_id: &task.task_id,
            persona: &task.assigned_persona,
            wave: task.parallel_group,
            status: task.status,
            depends_on: &dispatch.depends_on,
        })
        .collect();
    let text = render_graph(format, &nodes);
    Ok(([(header::CONTENT_TYPE, format.content_type())], text).into_response())
}
