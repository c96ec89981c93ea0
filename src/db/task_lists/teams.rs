//! The cycles (teams) registered per project.

use uuid::Uuid;

use super::now;
use crate::db::{Database, DbError, DbResult};
use crate::domain::dispatch::Team;

impl Database {
    /// Register a cycle of a project. `(project_id, team_pk)` is unique; a project
    /// may have many.
    pub async fn create_team(
        &self,
        project_id: &str,
        team_pk: &str,
        lead_role: Option<&str>,
    ) -> DbResult<Team> {
        let team = Team {
            id: Uuid::now_v7(),
            project_id: project_id.to_owned(),
            team_pk: team_pk.to_owned(),
            lead_role: lead_role.map(str::to_owned),
            created_at: now(),
        };
        let turn = self.writer_turn().await;
        let inserted = on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO teams (id, project_id, team_pk, lead_role, created_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (project_id, team_pk) DO NOTHING",
            )
            .bind(team.id)
            .bind(&team.project_id)
            .bind(&team.team_pk)
            .bind(&team.lead_role)
            .bind(team.created_at)
            .execute(pool)
            .await?
            .rows_affected()
        });
        drop(turn);
        if inserted == 0 {
            return Err(DbError::Conflict(format!(
                "team {team_pk:?} is already registered for project {project_id:?}"
            )));
        }
        Ok(team)
    }

    pub async fn teams(&self, project_id: &str) -> DbResult<Vec<Team>> {
        let sql = "SELECT id, project_id, team_pk, lead_role, created_at FROM teams \
                   WHERE project_id = $1 ORDER BY created_at, id";
        self.rows_by(sql, project_id).await
    }
}
