//! What a list offers now (`GET /v1/task-lists/{id}/ready`), read from the
//! indexes and counters kept by every write (docs/architecture.md, "Claims at
//! scale"): the active wave's pending tasks or the unblocked candidates, the
//! counters and the earliest lease — never the whole list.

use chrono::{DateTime, Utc};
use sqlx::QueryBuilder;
use uuid::Uuid;

use super::{EDGE_ROWS_PER_INSERT, StoredTask, TASK_COLUMNS, TaskRow, with_depends};
use crate::db::{Database, DbResult};
use crate::domain::dispatch::{ReadyMode, Remaining};

/// The ready answer's facts, as read.
pub struct ReadyRead {
    pub project_id: String,
    /// Barrier: the active wave; pipeline: the lowest wave offered.
    pub wave: Option<i64>,
    /// Offered tasks: barrier in list order, pipeline in `(wave, list)` order.
    pub tasks: Vec<StoredTask>,
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
                        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT {}", self.active_wave())))
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
                    let mut rows: Vec<TaskRow> = Vec::new();
                    pipeline_walk!(
                        pool,
                        id,
                        &[],
                        &Default::default(),
                        TaskRow,
                        TASK_COLUMNS,
                        |row| {
                            rows.push(row);
                            false
                        }
                    );
                    (rows.iter().map(|r| r.parallel_group).min(), rows)
                }
            };
            // The offered tasks' dependencies, named by a primary-key lookup each.
            let mut edges: Vec<(Uuid, String)> = Vec::new();
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
                edges.extend(read.build_query_as::<(Uuid, String)>().fetch_all(pool).await?);
            }
            let tasks = with_depends(rows, edges)?;
            let remaining = read_counts!(pool, id);
            let earliest_lease = earliest_lease!(pool, id);
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
