//! `/v1/projects/{project_id}`: per-cycle status snapshots and teams.

use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::AppState;
use super::auth::Caller;
use super::extract::{Json, Path, Query, StoredJson};
use crate::db::DbError;
use crate::db::task_lists::{StatusScope, Team};
use crate::db::usage::{UsageFilter, UsageGroup};
use crate::domain::dispatch::{WaveCounts, snapshot};
use crate::domain::ids::Ident;
use crate::domain::usage::UsageTotals;
use crate::error::{ApiError, ForbiddenProject, JsonBodyRejections, Problem};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(project_status))
        .routes(routes!(project_usage))
        .routes(routes!(create_team, list_teams))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct StatusQuery {
    /// Scope the snapshot to this cycle; falls back to the whole project when the
    /// cycle has no tasks.
    #[param(value_type = Option<Ident>, nullable = false)]
    pub team_pk: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct ProjectStatus {
    pub project_id: String,
    /// The team_pk asked for (null when none was).
    pub team_pk: Option<String>,
    pub scope: StatusScope,
    /// Tasks by status; every status is present.
    pub counts: std::collections::BTreeMap<String, u64>,
    /// Lowest wave with a non-terminal task; null when all are terminal.
    pub active_wave: Option<i64>,
    /// Tasks running now.
    pub in_flight: u64,
    pub waves: Vec<WaveCounts>,
}

/// Status snapshot of a project or of one of its cycles.
#[utoipa::path(get, path = "/v1/projects/{project_id}/status", tag = "projects",
    params(("project_id" = Ident, Path, description = "The project"), StatusQuery),
    responses(
        ForbiddenProject,
        (status = 200, description = "The snapshot", body = ProjectStatus),
        (status = 400, description = "Unknown query parameter", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid project_id or team_pk", body = Problem, content_type = "application/problem+json"),
    ))]
async fn project_status(
    State(state): State<AppState>,
    caller: Caller,
    Path(project_id): Path<String>,
    Query(query): Query<StatusQuery>,
) -> Result<Json<ProjectStatus>, ApiError> {
    let project = Ident::parse("project_id", &project_id)?;
    caller.check_project(project.as_str())?;
    let team = Ident::parse_optional("team_pk", query.team_pk.as_deref())?;
    let (scope, rows) = state
        .db
        .status_rows(project.as_str(), team.as_ref().map(Ident::as_str))
        .await?;
    let snap = snapshot(rows);
    Ok(Json(ProjectStatus {
        project_id,
        team_pk: query.team_pk,
        scope,
        counts: snap.counts,
        active_wave: snap.active_wave,
        in_flight: snap.in_flight,
        waves: snap.waves,
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// Calls that ended at or after this instant (RFC 3339).
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Calls that ended before this instant (RFC 3339).
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// Only the calls of this cycle.
    #[param(value_type = Option<Ident>, nullable = false)]
    pub team_pk: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct ProjectUsage {
    pub project_id: String,
    pub team_pk: Option<String>,
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// All the project's L0 calls in the window.
    pub usage: UsageTotals,
    /// The same, by executor profile and model (ordered by executor, then model).
    pub by_executor_model: Vec<UsageGroup>,
}

/// What a project's L0 calls cost: totals and sums by executor and model, over
/// the calls that ended in `[since, until)`. Jobs deleted by retention no longer
/// count.
#[utoipa::path(get, path = "/v1/projects/{project_id}/usage", tag = "projects",
    params(("project_id" = Ident, Path, description = "The project"), UsageQuery),
    responses(
        ForbiddenProject,
        (status = 200, description = "The project's usage", body = ProjectUsage),
        (status = 400, description = "Unknown query parameter, a bad instant, or `since` after `until`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid project_id or team_pk", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable", body = Problem, content_type = "application/problem+json"),
    ))]
async fn project_usage(
    State(state): State<AppState>,
    caller: Caller,
    Path(project_id): Path<String>,
    Query(query): Query<UsageQuery>,
) -> Result<Json<ProjectUsage>, ApiError> {
    let project = Ident::parse("project_id", &project_id)?;
    caller.check_project(project.as_str())?;
    let team = Ident::parse_optional("team_pk", query.team_pk.as_deref())?;
    if let (Some(since), Some(until)) = (query.since, query.until)
        && since > until
    {
        return Err(
            ApiError::bad_request("invalid_query", "since must not be after until")
                .with("field", "since"),
        );
    }
    let filter = UsageFilter {
        since: query.since,
        until: query.until,
        team_pk: team.as_ref().map(|t| t.as_str().to_owned()),
    };
    let (usage, by_executor_model) = state.db.project_usage(project.as_str(), &filter).await?;
    Ok(Json(ProjectUsage {
        project_id,
        team_pk: query.team_pk,
        since: query.since,
        until: query.until,
        usage,
        by_executor_model,
    }))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTeam {
    #[schema(value_type = Ident)]
    pub team_pk: String,
    #[schema(value_type = Option<Ident>)]
    pub lead_role: Option<String>,
}

/// Register a cycle (team) of a project. A project may host several.
#[utoipa::path(post, path = "/v1/projects/{project_id}/teams", tag = "projects",
    params(("project_id" = Ident, Path, description = "The project")),
    request_body = NewTeam,
    responses(
        JsonBodyRejections,
        ForbiddenProject,
        (status = 201, description = "Registered", body = Team),
        (status = 409, description = "This team_pk is already registered for the project", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid field", body = Problem, content_type = "application/problem+json"),
    ))]
async fn create_team(
    State(state): State<AppState>,
    caller: Caller,
    Path(project_id): Path<String>,
    StoredJson(team): StoredJson<NewTeam>,
) -> Result<(StatusCode, Json<Team>), ApiError> {
    let project = Ident::parse("project_id", &project_id)?;
    caller.check_project(project.as_str())?;
    let team_pk = Ident::parse("team_pk", &team.team_pk)?;
    let lead_role = Ident::parse_optional("lead_role", team.lead_role.as_deref())?;
    match state
        .db
        .create_team(
            project.as_str(),
            team_pk.as_str(),
            lead_role.as_ref().map(Ident::as_str),
        )
        .await
    {
        Ok(team) => Ok((StatusCode::CREATED, Json(team))),
        Err(DbError::Conflict(detail)) => Err(ApiError::conflict("team_exists", detail)),
        Err(other) => Err(other.into()),
    }
}

/// The teams registered for a project, oldest first.
#[utoipa::path(get, path = "/v1/projects/{project_id}/teams", tag = "projects",
    params(("project_id" = Ident, Path, description = "The project")),
    responses(
        ForbiddenProject,
        (status = 200, description = "The teams", body = Vec<Team>),
        (status = 422, description = "Invalid project_id", body = Problem, content_type = "application/problem+json"),
    ))]
async fn list_teams(
    State(state): State<AppState>,
    caller: Caller,
    Path(project_id): Path<String>,
) -> Result<Json<Vec<Team>>, ApiError> {
    let project = Ident::parse("project_id", &project_id)?;
    caller.check_project(project.as_str())?;
    Ok(Json(state.db.teams(project.as_str()).await?))
}
