//! Reading lists and naming tasks.

use uuid::Uuid;

use super::{EdgeRow, TASK_COLUMNS, TaskRow, assemble, dependency_names_of, with_depends};

/// One page of a list's tasks.
pub struct TaskPage {
    /// The list with the page's tasks only.
    pub list: StoredTaskList,
    /// More tasks follow the page.
    pub more: bool,
    /// The position of the page's last task (the next page's cursor).
    pub last_position: Option<i32>,
}
use crate::db::{Database, DbResult};
use crate::domain::dispatch::{Remaining, StoredTaskList, TaskStatus};
use chrono::{DateTime, Utc};

impl Database {
    /// How many tasks a list holds, from its counters.
    pub async fn task_count(&self, id: Uuid) -> DbResult<u64> {
        let remaining = self.tasks_by_status(id).await?;
        Ok(remaining.pending
            + remaining.running
            + remaining.done
            + remaining.failed
            + remaining.abandoned)
    }

    /// A list's tasks by status, from its counters.
    pub async fn tasks_by_status(&self, id: Uuid) -> DbResult<Remaining> {
        Ok(on_pool!(self, pool => { read_counts!(pool, id) }))
    }

    /// The soonest lease of a list's running tasks to run out, from the
    /// `tasks_running_by_lease` index.
    pub async fn earliest_lease(&self, id: Uuid) -> DbResult<Option<DateTime<Utc>>> {
        Ok(on_pool!(self, pool => { earliest_lease!(pool, id) }))
    }

    /// A list's tasks counted by wave and status, `(wave, status, count)` with
    /// waves ascending, at most `max_rows` of them (the first waves'): an
    /// aggregate over the `tasks_by_list_wave_status` index (an index-only read;
    /// no task row is loaded) that stops at the limit.
    pub async fn wave_counts(
        &self,
        list_id: Uuid,
        max_rows: i64,
    ) -> DbResult<Vec<(i64, TaskStatus, i64)>> {
        Ok(on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT parallel_group, status, COUNT(*) FROM tasks WHERE task_list_id = $1 \
                 GROUP BY parallel_group, status ORDER BY parallel_group, status LIMIT $2",
            )
            .bind(list_id)
            .bind(max_rows)
            .fetch_all(pool)
            .await?
        }))
    }

    /// The list with the `limit` tasks after position `after` (in submission
    /// order), read through the `(task_list_id, position)` index with their edges;
    /// `None` when the list does not exist.
    pub async fn task_list_page(
        &self,
        id: Uuid,
        after: i32,
        limit: u32,
    ) -> DbResult<Option<TaskPage>> {
        self.task_page(id, None, after, limit).await
    }

    /// The list with the `limit` tasks after position `after` (in submission
    /// order) of wave `wave.0` only (in status `wave.1`, if given) or of every
    /// wave, with their edges: one statement for the page's rows over an index
    /// that leads with the list (and the wave), one for the edges of those rows
    /// by their ids. `None` when the list does not exist.
    pub(crate) async fn task_page(
        &self,
        id: Uuid,
        wave: Option<(i64, Option<TaskStatus>)>,
        after: i32,
        limit: u32,
    ) -> DbResult<Option<TaskPage>> {
        let Some(mut list) = self.task_list_head(id).await? else {
            return Ok(None);
        };
        on_pool!(self, pool => {
            let mut q = sqlx::QueryBuilder::new(format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE task_list_id = "
            ));
            q.push_bind(id);
            if let Some((wave, status)) = wave {
                q.push(" AND parallel_group = ").push_bind(wave);
                if let Some(status) = status {
                    q.push(" AND status = ").push_bind(status);
                }
            }
            q.push(" AND position > ").push_bind(after);
            q.push(" ORDER BY position LIMIT ").push_bind(i64::from(limit) + 1);
            let mut rows: Vec<TaskRow> = q.build_query_as().fetch_all(pool).await?;
            let more = rows.len() > limit as usize;
            rows.truncate(limit as usize);
            let last_position = rows.last().map(|r| r.position);
            // The page's edges, named by the dependency's planner id (a dependency
            // may sit on another page).
            let edges: Vec<(uuid::Uuid, String)> = if rows.is_empty() {
                Vec::new()
            } else {
                let mut q = dependency_names_of(rows.iter().map(|r| r.id));
                q.build_query_as().fetch_all(pool).await?
            };
            list.tasks = with_depends(rows, edges);
            Ok(Some(TaskPage {
                list,
                more,
                last_position,
            }))
        })
    }

    /// A list without its tasks; `None` when it does not exist.
    async fn task_list_head(&self, id: Uuid) -> DbResult<Option<StoredTaskList>> {
        let sql =
            "SELECT id, project_id, team_pk, created_by, created_at FROM task_lists WHERE id = $1";
        self.row_by(sql, id).await
    }

    /// The whole list, tasks in submission order.
    pub async fn task_list(&self, id: Uuid) -> DbResult<Option<StoredTaskList>> {
        let Some(mut list) = self.task_list_head(id).await? else {
            return Ok(None);
        };
        on_pool!(self, pool => {
            let rows = sqlx::query_as::<_, TaskRow>(sqlx::AssertSqlSafe(format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE task_list_id = $1 ORDER BY position"
            )))
            .bind(id)
            .fetch_all(pool)
            .await?;
            let edges = sqlx::query_as::<_, EdgeRow>(
                "SELECT d.task_id, d.depends_on FROM task_dependencies d \
                 JOIN tasks t ON t.id = d.task_id WHERE t.task_list_id = $1 \
                 ORDER BY d.task_id, d.position",
            )
            .bind(id)
            .fetch_all(pool)
            .await?;
            list.tasks = assemble(rows, edges);
            Ok(Some(list))
        })
    }

    /// The project of a task (for authorisation before a change); `None` when the
    /// task does not exist.
    pub async fn task_project(&self, id: Uuid) -> DbResult<Option<String>> {
        self.value_by("SELECT project_id FROM tasks WHERE id = $1", id)
            .await
    }

    /// A task named within its list: the list's project and the server id of its
    /// task whose planner `task_id` is `task_id` (or, failing that, whose server id
    /// is `or_id`: a client that passes the server id with its list). `None` when the
    /// list does not exist; `Some((project, None))` when it holds no such task. One
    /// statement over the `(task_list_id, task_id)` unique index.
    pub async fn task_in_list(
        &self,
        list_id: Uuid,
        task_id: &str,
        or_id: Option<Uuid>,
    ) -> DbResult<Option<(String, Option<Uuid>)>> {
        Ok(on_pool!(self, pool => {
            sqlx::query_as::<_, (String, Option<Uuid>)>(
                "SELECT l.project_id, t.id FROM task_lists l \
                 LEFT JOIN tasks t ON t.task_list_id = l.id AND (t.task_id = $2 OR t.id = $3) \
                 WHERE l.id = $1 ORDER BY CASE WHEN t.task_id = $2 THEN 0 ELSE 1 END LIMIT 1",
            )
            .bind(list_id)
            .bind(task_id)
            .bind(or_id)
            .fetch_optional(pool)
            .await?
        }))
    }
}
