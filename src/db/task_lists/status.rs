//! Status snapshots of a project or a cycle, counted in the database.

use super::StatusRows;
use crate::db::{Database, DbResult};
use crate::domain::dispatch::{StatusScope, TaskStatus};

impl Database {
    /// `(wave, status)` of the tasks a snapshot covers, and which scope that is; or
    /// that the project or the cycle is unknown (never a wider scope than asked: an
    /// agent that names a cycle must not read the project's counts as its own).
    ///
    /// Counted in the database (a project can hold a year of lists): one row per
    /// `(wave, status)`, expanded here, instead of one row per task. The project's
    /// lists come from `task_lists_by_project` and each list's tasks from an
    /// index-only read of `tasks_by_list_wave_status`
    /// (migration 0023: `tasks` keeps no index by project, one fewer entry per
    /// task write). Only an empty
    /// answer asks whether the project (a task list or a team) or the cycle (a team
    /// or a task list stamped with it) exists.
    pub async fn status_rows(
        &self,
        project_id: &str,
        team_pk: Option<&str>,
    ) -> DbResult<StatusRows> {
        let (counts, project_known, cycle_known): (Vec<(i64, TaskStatus, i64)>, bool, bool) = on_pool!(self, pool => {
            let counts: Vec<(i64, TaskStatus, i64)> = match team_pk {
                Some(team) => sqlx::query_as(
                    "SELECT t.parallel_group, t.status, COUNT(*) FROM task_lists l \
                     JOIN tasks t ON t.task_list_id = l.id \
                     WHERE l.project_id = $1 AND l.team_pk = $2 GROUP BY t.parallel_group, t.status",
                )
                .bind(project_id)
                .bind(team)
                .fetch_all(pool)
                .await?,
                None => sqlx::query_as(
                    "SELECT t.parallel_group, t.status, COUNT(*) FROM task_lists l \
                     JOIN tasks t ON t.task_list_id = l.id \
                     WHERE l.project_id = $1 GROUP BY t.parallel_group, t.status",
                )
                .bind(project_id)
                .fetch_all(pool)
                .await?,
            };
            if !counts.is_empty() {
                (counts, true, true)
            } else {
                let cycle_known = match team_pk {
                    Some(team) => sqlx::query_scalar::<_, i32>(
                        "SELECT 1 FROM teams WHERE project_id = $1 AND team_pk = $2 \
                         UNION ALL SELECT 1 FROM task_lists WHERE project_id = $1 AND team_pk = $2 \
                         LIMIT 1",
                    )
                    .bind(project_id)
                    .bind(team)
                    .fetch_optional(pool)
                    .await?
                    .is_some(),
                    None => true,
                };
                let project_known = cycle_known && team_pk.is_some()
                    || sqlx::query_scalar::<_, i32>(
                        "SELECT 1 FROM teams WHERE project_id = $1 \
                         UNION ALL SELECT 1 FROM task_lists WHERE project_id = $1 LIMIT 1",
                    )
                    .bind(project_id)
                    .fetch_optional(pool)
                    .await?
                    .is_some();
                (counts, project_known, cycle_known)
            }
        });
        if !project_known {
            return Ok(StatusRows::UnknownProject);
        }
        if !cycle_known {
            return Ok(StatusRows::UnknownCycle);
        }
        let scope = if team_pk.is_some() {
            StatusScope::Cycle
        } else {
            StatusScope::Project
        };
        let mut rows = Vec::new();
        for (wave, status, n) in counts {
            rows.extend(std::iter::repeat_n(
                (wave, status),
                usize::try_from(n).unwrap_or(0),
            ));
        }
        Ok(StatusRows::Rows(scope, rows))
    }
}
