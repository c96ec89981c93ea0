//! What a list offers now (`GET /v1/task-lists/{id}/ready`), read from the
//! indexes and counters kept by every write (docs/architecture.md, "Claims at
//! scale"): the active wave's pending tasks or the unblocked candidates, the
//! counters and the earliest lease — never the whole list, and never more offered
//! tasks than the answer holds (docs/api.md, "Large ready sets").

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    EDGE_ROWS_PER_INSERT, StoredTask, TASK_COLUMNS, TaskRow, dependency_names_of, with_depends,
};
use crate::db::{Database, DbResult};
use crate::domain::dispatch::{ReadyMode, Remaining};

/// How many offered tasks a ready read takes: all of them while there are at most
/// `whole`, else the first `page` (with [`ReadyRead::more`] set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyTake {
    pub whole: u32,
    pub page: u32,
}

/// The ready answer's facts, as read.
pub struct ReadyRead {
    pub project_id: String,
    /// Barrier: the active wave; pipeline: the lowest wave offered.
    pub wave: Option<i64>,
    /// Offered tasks: barrier in list order, pipeline in `(wave, list)` order.
    pub tasks: Vec<StoredTask>,
    /// More tasks are offered than `tasks` holds.
    pub more: bool,
    pub remaining: Remaining,
    /// The soonest lease of a running task to run out.
    pub earliest_lease: Option<DateTime<Utc>>,
}

impl Database {
    /// What list `id` offers under `mode`, by indexed reads (`None`: no such list):
    /// at most `take.whole + 1` offers are read (each row by the statement that
    /// finds it), so the work is bounded by the answer, not by the list or the wave.
    pub async fn ready_read(
        &self,
        id: Uuid,
        mode: ReadyMode,
        take: ReadyTake,
    ) -> DbResult<Option<ReadyRead>> {
        let look = i64::from(take.whole) + 1;
        on_pool!(self, pool => {
            let Some(project_id) =
                sqlx::query_scalar::<_, String>("SELECT project_id FROM task_lists WHERE id = $1")
                    .bind(id)
                    .fetch_optional(pool)
                    .await?
            else {
                return Ok(None);
            };
            // The offered rows themselves, read by the index that finds them (a
            // second read by primary key of a thousand ids planned as a scan on a
            // list with no statistics yet): at most `take.whole + 1` rows.
            let (wave, mut rows): (Option<i64>, Vec<TaskRow>) = match mode {
                ReadyMode::Barrier => {
                    let wave: Option<i64> =
                        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT {}", self.active_wave())))
                            .bind(id)
                            .fetch_one(pool)
                            .await?;
                    let offered = match wave {
                        None => Vec::new(),
                        // `tasks_pending_by_wave` in order, stopped by the LIMIT.
                        Some(wave) => sqlx::query_as::<_, TaskRow>(sqlx::AssertSqlSafe(format!(
                            "SELECT {TASK_COLUMNS} FROM tasks WHERE task_list_id = $1 \
                             AND status = 'pending' AND parallel_group = $2 \
                             ORDER BY position LIMIT $3"
                        )))
                        .bind(id)
                        .bind(wave)
                        .bind(look)
                        .fetch_all(pool)
                        .await?,
                    };
                    (wave, offered)
                }
                ReadyMode::Pipeline => {
                    let mut offered: Vec<TaskRow> = Vec::new();
                    let mut wave: Option<i64> = None;
                    let look = look as usize;
                    pipeline_walk!(
                        pool,
                        id,
                        &[],
                        &Default::default(),
                        TaskRow,
                        TASK_COLUMNS,
                        |row| {
                            wave.get_or_insert(row.parallel_group);
                            offered.push(row);
                            offered.len() >= look
                        }
                    );
                    (wave, offered)
                }
            };
            let more = rows.len() > take.whole as usize;
            if more {
                rows.truncate(take.page as usize);
            }
            // The offered tasks' dependencies, named by a primary-key lookup each.
            let mut edges: Vec<(Uuid, String)> = Vec::new();
            for chunk in rows.chunks(EDGE_ROWS_PER_INSERT) {
                let mut read = dependency_names_of(chunk.iter().map(|row| row.id));
                edges.extend(read.build_query_as::<(Uuid, String)>().fetch_all(pool).await?);
            }
            let tasks = with_depends(rows, edges);
            let remaining = read_counts!(pool, id);
            let earliest_lease = earliest_lease!(pool, id);
            Ok::<_, crate::db::DbError>(Some(ReadyRead {
                project_id,
                wave,
                tasks,
                more,
                remaining,
                earliest_lease,
            }))
        })
    }
}
