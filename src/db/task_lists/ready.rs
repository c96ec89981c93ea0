//! What a list offers now (`GET /v1/task-lists/{id}/ready`), read from the
//! indexes and counters kept by every write (docs/architecture.md, "Claims at
//! scale"): the active wave's pending tasks or the unblocked candidates, the
//! counters and the earliest lease — never the whole list.

use chrono::{DateTime, Utc};
use sqlx::QueryBuilder;
use sqlx::types::Json;
use uuid::Uuid;

use super::{EDGE_ROWS_PER_INSERT, TASK_COLUMNS, TaskRecord, TaskRow};
use crate::db::task_claims::ACTIVE_WAVE;
use crate::db::{Database, DbResult};
use crate::domain::dispatch::{self, ReadyMode, Remaining};

/// The ready answer's facts, as read.
pub struct ReadyRead {
    pub project_id: String,
    /// Barrier: the active wave; pipeline: the lowest wave offered.
    pub wave: Option<i64>,
    /// Offered tasks: barrier in list order, pipeline in `(wave, list)` order.
    pub tasks: Vec<TaskRecord>,
    pub remaining: Remaining,
    /// The soonest lease of a running task to run out.
    pub earliest_lease: Option<DateTime<Utc>>,
}

impl Database {
    /// What list `id` offers under `mode`, by indexed reads (`None`: no such list).
    /// Work in proportion to what is offered and running, not to the list.
    pub async fn ready_read(&self, id: Uuid, mode: ReadyMode) -> DbResult<Option<ReadyRead>> {
        on_pool!(self, pool => {
            let Some(project_id) =
                sqlx::query_scalar::<_, String>("SELECT project_id FROM task_lists WHERE id = $1")
                    .bind(id)
                    .fetch_optional(pool)
                    .await?
            else {
                return Ok(None);
            };
            let (wave, rows) = match mode {
                ReadyMode::Barrier => {
                    let wave: Option<i64> =
                        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT {ACTIVE_WAVE}")))
                            .bind(id)
                            .fetch_one(pool)
                            .await?;
                    let rows = match wave {
                        None => Vec::new(),
                        Some(wave) => sqlx::query_as::<_, TaskRow>(sqlx::AssertSqlSafe(format!(
                            "SELECT {TASK_COLUMNS} FROM tasks WHERE task_list_id = $1 \
                             AND status = 'pending' AND parallel_group = $2 ORDER BY position"
                        )))
                        .bind(id)
                        .bind(wave)
                        .fetch_all(pool)
                        .await?,
                    };
                    (wave, rows)
                }
                ReadyMode::Pipeline => {
                    // As `dispatch::ready` walks them: the unblocked candidates in
                    // `(wave, list)` order, passing over a task whose writes race a
                    // running task's or an earlier offered task's.
                    let running: Vec<Json<Vec<String>>> = sqlx::query_scalar(
                        "SELECT writes FROM tasks WHERE task_list_id = $1 AND status = 'running'",
                    )
                    .bind(id)
                    .fetch_all(pool)
                    .await?;
                    let mut claimed: std::collections::HashSet<String> = running
                        .iter()
                        .flat_map(|w| w.0.iter())
                        .map(|p| dispatch::normalize_path(p).to_owned())
                        .collect();
                    let candidates = sqlx::query_as::<_, TaskRow>(sqlx::AssertSqlSafe(format!(
                        "SELECT {TASK_COLUMNS} FROM tasks WHERE task_list_id = $1 \
                         AND status = 'pending' AND unmet_deps = 0 \
                         ORDER BY parallel_group, position"
                    )))
                    .bind(id)
                    .fetch_all(pool)
                    .await?;
                    let rows: Vec<TaskRow> = candidates
                        .into_iter()
                        .filter(|row| dispatch::offer_writes(&mut claimed, &row.writes.0))
                        .collect();
                    (rows.iter().map(|r| r.parallel_group).min(), rows)
                }
            };
            // The offered tasks' dependencies, named by a primary-key lookup each.
            let mut depends: std::collections::HashMap<Uuid, Vec<String>> = Default::default();
            for chunk in rows.chunks(EDGE_ROWS_PER_INSERT) {
                let mut read = QueryBuilder::new(
                    "SELECT d.task_id, (SELECT p.task_id FROM tasks p WHERE p.id = d.depends_on) \
                     FROM task_dependencies d WHERE d.task_id IN (",
                );
                let mut ids = read.separated(", ");
                for row in chunk {
                    ids.push_bind(row.id);
                }
                read.push(") ORDER BY d.task_id, d.position");
                let edges: Vec<(Uuid, String)> = read.build_query_as().fetch_all(pool).await?;
                for (task, dep) in edges {
                    depends.entry(task).or_default().push(dep);
                }
            }
            let tasks = rows
                .into_iter()
                .map(|row| {
                    let deps = depends.remove(&row.id).unwrap_or_default();
                    row.into_task(deps)
                })
                .collect::<DbResult<Vec<_>>>()?;
            let remaining = read_counts!(pool, id);
            let earliest_lease: Option<DateTime<Utc>> = sqlx::query_scalar(
                "SELECT lease_expires_at FROM tasks WHERE task_list_id = $1 \
                 AND status = 'running' AND lease_expires_at IS NOT NULL \
                 ORDER BY lease_expires_at LIMIT 1",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?;
            Ok::<_, crate::db::DbError>(Some(ReadyRead {
                project_id,
                wave,
                tasks,
                remaining,
                earliest_lease,
            }))
        })
    }
}
