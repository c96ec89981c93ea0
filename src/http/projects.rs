//! `/v1/projects/{project_id}`: per-cycle status snapshots and teams.

use axum::http::StatusCode;
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::AppState;
use super::auth::ApiCall;
use super::extract::{Json, Path, Query, StorableJson};
use super::responses::{DatabaseUnavailable, InvalidProjectOrCycle};
use crate::domain::ids::Ident;
use crate::http::problem::{ApiError, Problem};
use crate::http::responses::{ForbiddenProject, JsonBodyRejections};
use crate::service::projects::{NewTeam, ProjectStatus, ProjectUsage, Team, UsageQuery};

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
    /// Scope the snapshot to this cycle; an unknown cycle (no team registered, no
    /// task list stamped with it) is 404 `team_not_found`.
    #[param(value_type = Option<Ident>, nullable = false)]
    pub team_pk: Option<String>,
}

/// Status snapshot of a project or of one of its cycles.
///
/// A project is known once it has a task list or a team; a cycle once it is a
/// registered team or a task list carries its `team_pk`. Anything else is a 404,
/// never zeros or the whole project's counts.
#[utoipa::path(get, path = "/v1/projects/{project_id}/status", tag = "projects",
    params(("project_id" = Ident, Path, description = "The project"), StatusQuery),
    responses(
        ForbiddenProject,
        (status = 200, description = "The snapshot", body = ProjectStatus),
        (status = 400, description = "Unknown query parameter", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`project_not_found` (no task list or team of the project) or `team_not_found` (no such cycle in it); `field` names which", body = Problem, content_type = "application/problem+json"),
        InvalidProjectOrCycle,
    ))]
async fn project_status(
    ApiCall { service, caller }: ApiCall,
    Path(project_id): Path<String>,
    Query(query): Query<StatusQuery>,
) -> Result<Json<ProjectStatus>, ApiError> {
    Ok(Json(
        service
            .project_status(&caller, project(&project_id)?, query.team_pk)
            .await?,
    ))
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
        InvalidProjectOrCycle,
        DatabaseUnavailable,
    ))]
async fn project_usage(
    ApiCall { service, caller }: ApiCall,
    Path(project_id): Path<String>,
    Query(query): Query<UsageQuery>,
) -> Result<Json<ProjectUsage>, ApiError> {
    Ok(Json(
        service
            .project_usage(&caller, project(&project_id)?, query)
            .await?,
    ))
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
    ApiCall { service, caller }: ApiCall,
    Path(project_id): Path<String>,
    StorableJson(team): StorableJson<NewTeam>,
) -> Result<(StatusCode, Json<Team>), ApiError> {
    let team = service
        .create_team(&caller, &project(&project_id)?, team)
        .await?;
    Ok((StatusCode::CREATED, Json(team)))
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
    ApiCall { service, caller }: ApiCall,
    Path(project_id): Path<String>,
) -> Result<Json<Vec<Team>>, ApiError> {
    Ok(Json(service.teams(&caller, &project(&project_id)?).await?))
}

/// The `{project_id}` path segment, checked in the adapter (422 naming `project_id`),
/// after the request's other parts as before: the use cases take an [`Ident`].
fn project(raw: &str) -> Result<Ident, ApiError> {
    Ok(Ident::parse("project_id", raw).map_err(crate::service::ServiceError::from)?)
}
