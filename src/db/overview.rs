//! Read-only summaries for the dashboard: lists with status counts, jobs and runs
//! by status, track summaries, and the cheap status reads a live page polls. Rows
//! of projects outside `allowed` (a project-limited token) are never read.

use chrono::{DateTime, Utc};
use sqlx::QueryBuilder;
use sqlx::types::Json;
use uuid::Uuid;

use super::{Database, DbResult};

/// One task list and how many of its tasks are in each status.
#[derive(Debug, Clone)]
pub struct ListCounts {
    pub id: Uuid,
    pub project_id: String,
    pub team_pk: Option<String>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    /// `(status, count)`.
    pub counts: Vec<(String, i64)>,
}

/// A refine job as a list row shows it (no log, request or result).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JobRow {
    pub id: Uuid,
    pub status: String,
    pub phase_id: String,
    pub run_id: Option<Uuid>,
    pub project_id: Option<String>,
    pub team_pk: Option<String>,
    pub executor: String,
    pub attempt: i32,
    pub max_attempts: i32,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// Filters of the dashboard's job list.
#[derive(Debug, Default, Clone)]
pub struct JobListFilter {
    pub status: Option<String>,
    pub project_id: Option<String>,
    pub created_from: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
    pub allowed_projects: Option<Vec<String>>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunRow {
    pub id: Uuid,
    pub status: String,
    pub project_id: Option<String>,
    pub team_pk: Option<String>,
    pub executor: String,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone)]
pub struct TrackRow {
    pub track_id: String,
    pub metadata: serde_json::Value,
    pub revision: i64,
}

/// `AND <column> IN (...)` for a project-limited reader; rows with no project are
/// for unrestricted readers only.
fn push_allowed<DB: sqlx::Database>(
    q: &mut QueryBuilder<DB>,
    column: &str,
    allowed: Option<&[String]>,
) where
    for<'e> String: sqlx::Encode<'e, DB> + sqlx::Type<DB>,
{
    let Some(allowed) = allowed else { return };
    if allowed.is_empty() {
        q.push(" AND FALSE");
        return;
    }
    q.push(format!(" AND {column} IN ("));
    let mut sep = q.separated(", ");
    for p in allowed {
        sep.push_bind(p.clone());
    }
    q.push(")");
}

impl Database {
    /// The newest `limit` task lists with per-status task counts.
    pub async fn task_list_counts(
        &self,
        allowed: Option<&[String]>,
        limit: u32,
    ) -> DbResult<Vec<ListCounts>> {
        type Row = (Uuid, String, Option<String>, String, DateTime<Utc>);
        let lists: Vec<Row> = on_pool!(self, pool => {
            let mut q = QueryBuilder::new(
                "SELECT id, project_id, team_pk, created_by, created_at FROM task_lists WHERE TRUE",
            );
            push_allowed(&mut q, "project_id", allowed);
            q.push(" ORDER BY id DESC LIMIT ")
                .push_bind(i64::from(limit));
            q.build_query_as().fetch_all(pool).await?
        });
        if lists.is_empty() {
            return Ok(Vec::new());
        }
        let counts: Vec<(Uuid, String, i64)> = on_pool!(self, pool => {
            let mut q = QueryBuilder::new(
                "SELECT task_list_id, status, COUNT(*) FROM tasks WHERE task_list_id IN (",
            );
            let mut sep = q.separated(", ");
            for l in &lists {
                sep.push_bind(l.0);
            }
            q.push(") GROUP BY task_list_id, status");
            q.build_query_as().fetch_all(pool).await?
        });
        Ok(lists
            .into_iter()
            .map(
                |(id, project_id, team_pk, created_by, created_at)| ListCounts {
                    counts: counts
                        .iter()
                        .filter(|(list, _, _)| *list == id)
                        .map(|(_, s, n)| (s.clone(), *n))
                        .collect(),
                    id,
                    project_id,
                    team_pk,
                    created_by,
                    created_at,
                },
            )
            .collect())
    }

    /// `(status, count)` of refine jobs (`runs = false`) or runs (`true`).
    pub async fn status_counts(
        &self,
        runs: bool,
        allowed: Option<&[String]>,
    ) -> DbResult<Vec<(String, i64)>> {
        let table = if runs { "refine_runs" } else { "refine_jobs" };
        Ok(on_pool!(self, pool => {
            let mut q =
                QueryBuilder::new(format!("SELECT status, COUNT(*) FROM {table} WHERE TRUE"));
            push_allowed(&mut q, "project_id", allowed);
            q.push(" GROUP BY status ORDER BY status");
            q.build_query_as().fetch_all(pool).await?
        }))
    }

    pub async fn task_list_project(&self, list_id: Uuid) -> DbResult<Option<String>> {
        Ok(on_pool!(self, pool => {
            sqlx::query_scalar("SELECT project_id FROM task_lists WHERE id = $1")
                .bind(list_id)
                .fetch_optional(pool)
                .await?
        }))
    }

    /// A cheap change marker of a list's tasks: `(count, latest updated_at)`.
    pub async fn task_list_marker(&self, list_id: Uuid) -> DbResult<(i64, Option<DateTime<Utc>>)> {
        Ok(on_pool!(self, pool => {
            sqlx::query_as("SELECT COUNT(*), MAX(updated_at) FROM tasks WHERE task_list_id = $1")
                .bind(list_id)
                .fetch_one(pool)
                .await?
        }))
    }

    /// Jobs newest first (v7 ids are time-ordered); `before` = the last id of the
    /// previous page.
    pub async fn job_rows(
        &self,
        filter: &JobListFilter,
        limit: u32,
        before: Option<Uuid>,
    ) -> DbResult<Vec<JobRow>> {
        Ok(on_pool!(self, pool => {
            let mut q = QueryBuilder::new(
                "SELECT id, status, phase_id, run_id, project_id, team_pk, executor, attempt, \
                 max_attempts, created_at, finished_at FROM refine_jobs WHERE TRUE",
            );
            if let Some(s) = &filter.status {
                q.push(" AND status = ").push_bind(s.clone());
            }
            if let Some(p) = &filter.project_id {
                q.push(" AND project_id = ").push_bind(p.clone());
            }
            if let Some(from) = filter.created_from {
                q.push(" AND created_at >= ").push_bind(from);
            }
            if let Some(to) = filter.created_before {
                q.push(" AND created_at < ").push_bind(to);
            }
            push_allowed(&mut q, "project_id", filter.allowed_projects.as_deref());
            if let Some(before) = before {
                q.push(" AND id < ").push_bind(before);
            }
            q.push(" ORDER BY id DESC LIMIT ")
                .push_bind(i64::from(limit));
            q.build_query_as().fetch_all(pool).await?
        }))
    }

    /// Runs newest first.
    pub async fn run_rows(
        &self,
        allowed: Option<&[String]>,
        limit: u32,
        before: Option<Uuid>,
    ) -> DbResult<Vec<RunRow>> {
        Ok(on_pool!(self, pool => {
            let mut q = QueryBuilder::new(
                "SELECT id, status, project_id, team_pk, executor, created_at, finished_at \
                 FROM refine_runs WHERE TRUE",
            );
            push_allowed(&mut q, "project_id", allowed);
            if let Some(before) = before {
                q.push(" AND id < ").push_bind(before);
            }
            q.push(" ORDER BY id DESC LIMIT ")
                .push_bind(i64::from(limit));
            q.build_query_as().fetch_all(pool).await?
        }))
    }

    /// Tracks by most recent change, of the `allowed` projects only (`None`: all;
    /// tracks without a project are then included, else never).
    pub async fn track_rows(
        &self,
        allowed: Option<&[String]>,
        limit: u32,
    ) -> DbResult<Vec<TrackRow>> {
        let rows: Vec<(String, Json<serde_json::Value>, i64)> = on_pool!(self, pool => {
            let mut q = QueryBuilder::new(
                "SELECT track_id, metadata, revision FROM tracks WHERE TRUE",
            );
            push_allowed(&mut q, "project_id", allowed);
            q.push(" ORDER BY updated_at DESC, track_id LIMIT ")
                .push_bind(i64::from(limit));
            q.build_query_as().fetch_all(pool).await?
        });
        Ok(rows
            .into_iter()
            .map(|(track_id, metadata, revision)| TrackRow {
                track_id,
                metadata: metadata.0,
                revision,
            })
            .collect())
    }
}
