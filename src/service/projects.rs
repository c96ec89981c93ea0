//! Projects: per-cycle status snapshots and teams (cycles).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{Caller, ErrorKind, ProblemCode, Service, ServiceError};
use crate::db::DbError;
use crate::db::task_lists::StatusRows;
use crate::domain::dispatch::{StatusScope, WaveCounts, snapshot};
use crate::domain::ids::Ident;

pub use crate::domain::dispatch::Team;

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

use crate::db::usage::UsageFilter;
pub use crate::domain::usage::UsageGroup;
use crate::domain::usage::UsageTotals;

/// The window and cycle of a usage report.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// Calls that ended at or after this instant (RFC 3339).
    pub since: Option<DateTime<Utc>>,
    /// Calls that ended before this instant (RFC 3339).
    pub until: Option<DateTime<Utc>>,
    /// Only the calls of this cycle.
    #[param(value_type = Option<Ident>, nullable = false)]
    pub team_pk: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct ProjectUsage {
    pub project_id: String,
    pub team_pk: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    /// All the project's L0 calls in the window.
    pub usage: UsageTotals,
    /// The same, by executor profile and model (ordered by executor, then model).
    pub by_executor_model: Vec<UsageGroup>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTeam {
    #[schema(value_type = Ident)]
    pub team_pk: String,
    #[schema(value_type = Option<Ident>)]
    pub lead_role: Option<String>,
}

impl Service {
    /// Status snapshot of a project, or of one of its cycles. An unknown project
    /// (no task list, no team) or cycle (no team, no list stamped with it) is a 404
    /// naming which, never zeros or the project's counts: an agent must notice a typo.
    pub async fn project_status(
        &self,
        caller: &Caller,
        project: Ident,
        team_pk: Option<String>,
    ) -> Result<ProjectStatus, ServiceError> {
        caller.check_project(project.as_str())?;
        let project_id = project.to_string();
        let team = Ident::parse_optional("team_pk", team_pk.as_deref())?;
        let (scope, rows) = match self
            .db
            .status_rows(project.as_str(), team.as_ref().map(Ident::as_str))
            .await?
        {
            StatusRows::Rows(scope, rows) => (scope, rows),
            StatusRows::UnknownProject => {
                return Err(ServiceError::new(
                    ErrorKind::NotFound,
                    ProblemCode::ProjectNotFound,
                    format!(
                        "project {project_id:?} has no task list and no team: check the \
                         project_id, or create a task list for it first"
                    ),
                )
                .field("project_id"));
            }
            StatusRows::UnknownCycle => {
                let team_pk = team_pk.unwrap_or_default();
                return Err(ServiceError::new(
                    ErrorKind::NotFound,
                    ProblemCode::TeamNotFound,
                    format!(
                        "project {project_id:?} has no cycle {team_pk:?} (no team registered \
                         and no task list with that team_pk): check the team_pk, or omit it \
                         for the whole project"
                    ),
                )
                .field("team_pk"));
            }
        };
        let snap = snapshot(rows);
        Ok(ProjectStatus {
            project_id,
            team_pk,
            scope,
            counts: snap.counts,
            active_wave: snap.active_wave,
            in_flight: snap.in_flight,
            waves: snap.waves,
        })
    }

    /// What a project's L0 calls cost over `[since, until)`: totals and sums by
    /// executor and model.
    pub async fn project_usage(
        &self,
        caller: &Caller,
        project: Ident,
        query: UsageQuery,
    ) -> Result<ProjectUsage, ServiceError> {
        caller.check_project(project.as_str())?;
        let project_id = project.to_string();
        let team = Ident::parse_optional("team_pk", query.team_pk.as_deref())?;
        if let (Some(since), Some(until)) = (query.since, query.until)
            && since > until
        {
            return Err(ServiceError::bad_request(
                ProblemCode::InvalidQuery,
                "since must not be after until",
            )
            .field("since"));
        }
        let filter = UsageFilter {
            since: query.since,
            until: query.until,
            team_pk: team.as_ref().map(|t| t.as_str().to_owned()),
        };
        let (usage, by_executor_model) = self.db.project_usage(project.as_str(), &filter).await?;
        Ok(ProjectUsage {
            project_id,
            team_pk: query.team_pk,
            since: query.since,
            until: query.until,
            usage,
            by_executor_model,
        })
    }

    /// Register a cycle (team) of a project; `team_exists` when it already is.
    pub async fn create_team(
        &self,
        caller: &Caller,
        project: &Ident,
        team: NewTeam,
    ) -> Result<Team, ServiceError> {
        caller.check_project(project.as_str())?;
        let team_pk = Ident::parse("team_pk", &team.team_pk)?;
        let lead_role = Ident::parse_optional("lead_role", team.lead_role.as_deref())?;
        match self
            .db
            .create_team(
                project.as_str(),
                team_pk.as_str(),
                lead_role.as_ref().map(Ident::as_str),
            )
            .await
        {
            Ok(team) => Ok(team),
            Err(DbError::Conflict(detail)) => {
                Err(ServiceError::conflict(ProblemCode::TeamExists, detail))
            }
            Err(other) => Err(other.into()),
        }
    }

    /// The teams registered for a project, oldest first.
    pub async fn teams(&self, caller: &Caller, project: &Ident) -> Result<Vec<Team>, ServiceError> {
        caller.check_project(project.as_str())?;
        Ok(self.db.teams(project.as_str()).await?)
    }
}
