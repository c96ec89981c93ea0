//! Storing a gated list (all or nothing, with its idempotency key) and counting
//! rejected submissions.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::QueryBuilder;
use sqlx::types::Json;
use uuid::Uuid;

use super::{
    EDGE_ROWS_PER_INSERT, Keyed, KeyedOutcome, NewTaskList, StoredTask, StoredTaskListKey,
    TASK_ROWS_PER_INSERT, TaskListKey, now,
};
use crate::db::readiness::{initial_counts, initial_wave_counts};
use crate::db::{Database, DbError, DbResult};
use crate::domain::dispatch::{StoredTaskList, TaskStatus};
use crate::domain::gating::Task;

/// Rows per Postgres `UNNEST` insert: parameters are whole columns, so only the
/// size of one message bounds it; chunks keep each array a few megabytes.
const PG_ROWS_PER_INSERT: usize = 10_000;

/// Inserts the key's row with `$column` set to `$value`, first in its write's
/// transaction: true when this write took the key, false when another create or
/// rejection holds it (its primary key decides between concurrent writers).
macro_rules! take_key {
    ($tx:expr, $key:expr, $column:literal, $value:expr, $at:expr) => {
        sqlx::query(concat!(
            "INSERT INTO task_list_keys (idempotency_key, request_hash, ",
            $column,
            ", created_at) VALUES ($1, $2, $3, $4) ON CONFLICT (idempotency_key) DO NOTHING"
        ))
        .bind($key.key)
        .bind($key.request_hash)
        .bind($value)
        .bind($at)
        .execute(&mut *$tx)
        .await?
        .rows_affected()
            == 1
    };
}

impl Database {
    /// Store an accepted list all or nothing: the list, its tasks, their edges; and
    /// reset the retry count of `(project_id, team_pk)`. With a key, the key's row
    /// is inserted first, in the same transaction: its primary key decides between
    /// concurrent creates, and the losers store nothing and read what won.
    pub async fn create_task_list(
        &self,
        new: NewTaskList<'_>,
        key: Option<TaskListKey<'_>>,
    ) -> DbResult<Keyed<StoredTaskList>> {
        let list_id = Uuid::now_v7();
        let created_at = now();
        let ids: Vec<Uuid> = new.tasks.iter().map(|_| Uuid::now_v7()).collect();
        let by_local: HashMap<&str, Uuid> = new
            .tasks
            .iter()
            .zip(&ids)
            .map(|(t, id)| (t.task_id.as_str(), *id))
            .collect();
        // Edges deduplicated in first-seen order (a duplicate is only a warning).
        let mut edges: Vec<(Uuid, Uuid, i32)> = Vec::new();
        for (task, id) in new.tasks.iter().zip(&ids) {
            let mut seen = std::collections::HashSet::new();
            for dep in &task.depends_on {
                if let Some(dep_id) = by_local.get(dep.as_str())
                    && seen.insert(*dep_id)
                {
                    edges.push((*id, *dep_id, seen.len() as i32 - 1));
                }
            }
        }
        // Every dependency of a new list is pending: a task waits for all of its
        // (deduplicated) edges (docs/architecture.md, "Claims at scale").
        let mut unmet: HashMap<Uuid, i32> = HashMap::new();
        for (task, _, _) in &edges {
            *unmet.entry(*task).or_default() += 1;
        }
        let team_scope = new.team_pk.unwrap_or("");
        on_pool!(self, pool => {
            let (_turn, mut tx) = begin_write!(self, pool);
            if let Some(key) = key
                && !take_key!(tx, key, "task_list_id", list_id, created_at)
            {
                tx.rollback().await?;
                return self.taken_key(key.key).await;
            }
            sqlx::query(
                "INSERT INTO task_lists (id, project_id, team_pk, created_by, created_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(list_id)
            .bind(new.project_id)
            .bind(new.team_pk)
            .bind(new.created_by)
            .bind(created_at)
            .execute(&mut *tx)
            .await?;
            let rows = Rows {
                list_id,
                created_at,
                new: &new,
                ids: &ids,
                unmet: &unmet,
                edges: &edges,
            };
            (&mut *tx).insert_rows(&rows).await?;
            let counts = initial_counts(new.tasks.len());
            if !counts.is_empty() {
                let mut insert = QueryBuilder::new(
                    "INSERT INTO task_list_counts (task_list_id, stripe, pending) ",
                );
                insert.push_values(&counts, |mut row, (stripe, pending)| {
                    row.push_bind(list_id).push_bind(*stripe).push_bind(*pending);
                });
                insert.build().execute(&mut *tx).await?;
            }
            let waves = initial_wave_counts(
                new.tasks.iter().enumerate().map(|(position, t)| (t.parallel_group, position as i32)),
            );
            for chunk in waves.chunks(EDGE_ROWS_PER_INSERT) {
                let mut insert = QueryBuilder::new(
                    "INSERT INTO task_wave_counts (task_list_id, parallel_group, stripe, unfinished) ",
                );
                insert.push_values(chunk, |mut row, (wave, stripe, unfinished)| {
                    row.push_bind(list_id).push_bind(*wave).push_bind(*stripe).push_bind(*unfinished);
                });
                insert.build().execute(&mut *tx).await?;
            }
            sqlx::query("DELETE FROM planner_attempts WHERE project_id = $1 AND team_scope = $2")
                .bind(new.project_id)
                .bind(team_scope)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok::<(), DbError>(())
        })?;
        // Everything stored is known here; answering from it saves reading the
        // whole list back (10,000 rows for a big plan).
        let local_of: HashMap<Uuid, &str> = new
            .tasks
            .iter()
            .zip(&ids)
            .map(|(t, id)| (*id, t.task_id.as_str()))
            .collect();
        let mut depends: HashMap<Uuid, Vec<String>> = HashMap::new();
        for (task, dep, _) in &edges {
            if let Some(local) = local_of.get(dep) {
                depends.entry(*task).or_default().push((*local).to_owned());
            }
        }
        let tasks = new
            .tasks
            .iter()
            .zip(ids)
            .map(|(task, id)| StoredTask {
                id,
                task_list_id: list_id,
                task_id: task.task_id.clone(),
                assigned_persona: task.assigned_persona.clone(),
                parallel_group: task.parallel_group,
                status: TaskStatus::Pending,
                depends_on: depends.remove(&id).unwrap_or_default(),
                reads: task.reads.clone(),
                writes: task.writes.clone(),
                reviews: task.reviews.clone(),
                description: task.description.clone(),
                extra: task.extra.clone(),
                abandon_category: None,
                upstream_task_id: None,
                notes: None,
                attempts: 0,
                started_at: None,
                finished_at: None,
                created_at,
                updated_at: created_at,
                claim: None,
                last_holder: None,
            })
            .collect();
        Ok(Keyed::Done(StoredTaskList {
            id: list_id,
            project_id: new.project_id.to_owned(),
            team_pk: new.team_pk.map(str::to_owned),
            created_by: new.created_by.to_owned(),
            created_at,
            tasks,
            next_cursor: None,
        }))
    }

    /// What the first create with this (scoped) key came to, if there was one.
    pub async fn task_list_key(&self, key: &str) -> DbResult<Option<StoredTaskListKey>> {
        let sql = "SELECT request_hash, task_list_id, rejections FROM task_list_keys \
                   WHERE idempotency_key = $1";
        let row: Option<(String, Option<Uuid>, Option<i32>)> = self.row_by(sql, key).await?;
        let Some((request_hash, list, rejections)) = row else {
            return Ok(None);
        };
        let outcome = match (list, rejections) {
            (Some(id), None) => KeyedOutcome::Accepted(id),
            (None, Some(n)) => KeyedOutcome::Rejected(u32::try_from(n).unwrap_or(u32::MAX)),
            _ => {
                return Err(DbError::Corrupt(
                    "a task-list key holds neither or both of a list and a rejection".into(),
                ));
            }
        };
        Ok(Some(StoredTaskListKey {
            request_hash,
            outcome,
        }))
    }

    /// [`Keyed::Taken`] with what the key's first create came to: read after this
    /// create's insert found the key taken, so the row is committed.
    async fn taken_key<T>(&self, key: &str) -> DbResult<Keyed<T>> {
        self.task_list_key(key)
            .await?
            .map(Keyed::Taken)
            .ok_or_else(|| {
                DbError::Conflict("the idempotency key's create did not commit; retry".into())
            })
    }

    /// Count one more rejected submission of `(project_id, team_pk)`; returns the
    /// number of rejections since the last accepted list, this one included. With a
    /// key, the count and the key's row go in one transaction, and a key already
    /// taken counts nothing (its first create was counted).
    pub async fn record_rejection(
        &self,
        project_id: &str,
        team_pk: Option<&str>,
        key: Option<TaskListKey<'_>>,
    ) -> DbResult<Keyed<u32>> {
        let at = now();
        let _turn = self.writer_turn().await;
        let count: i32 = on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            // 0 rejections stand in until the count is known, a statement later.
            if let Some(key) = key
                && !take_key!(tx, key, "rejections", 0_i32, at)
            {
                tx.rollback().await?;
                return self.taken_key(key.key).await;
            }
            let count: i32 = sqlx::query_scalar(
                "INSERT INTO planner_attempts (project_id, team_scope, rejected_count, updated_at) \
                 VALUES ($1, $2, 1, $3) \
                 ON CONFLICT (project_id, team_scope) DO UPDATE \
                 SET rejected_count = planner_attempts.rejected_count + 1, updated_at = excluded.updated_at \
                 RETURNING rejected_count",
            )
            .bind(project_id)
            .bind(team_pk.unwrap_or(""))
            .bind(at)
            .fetch_one(&mut *tx)
            .await?;
            if let Some(key) = key {
                sqlx::query("UPDATE task_list_keys SET rejections = $2 WHERE idempotency_key = $1")
                    .bind(key.key)
                    .bind(count)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            count
        });
        Ok(Keyed::Done(u32::try_from(count).unwrap_or(u32::MAX)))
    }
}

/// What a create stores besides the list's own row: its tasks and their edges.
struct Rows<'a> {
    list_id: Uuid,
    created_at: DateTime<Utc>,
    new: &'a NewTaskList<'a>,
    ids: &'a [Uuid],
    unmet: &'a HashMap<Uuid, i32>,
    edges: &'a [(Uuid, Uuid, i32)],
}

/// Inserting a list's tasks and edges, per back-end: the one place the SQL differs.
/// Postgres takes each column as one array (`UNNEST`): a 100,000-task list is a
/// handful of statements with a few parameters each, where multi-row `VALUES`
/// cost 17,000 parameters a statement to send, bind and plan: a third of a
/// 100,000-task create's time (bench/claims.sh). SQLite has no arrays
/// and binds in process, so it keeps the multi-row `VALUES`.
trait InsertRows {
    async fn insert_rows(self, rows: &Rows<'_>) -> DbResult<()>;
}

impl InsertRows for &mut sqlx::PgConnection {
    async fn insert_rows(self, rows: &Rows<'_>) -> DbResult<()> {
        for (chunk_no, chunk) in rows.new.tasks.chunks(PG_ROWS_PER_INSERT).enumerate() {
            let offset = chunk_no * PG_ROWS_PER_INSERT;
            let ids = &rows.ids[offset..offset + chunk.len()];
            let positions: Vec<i32> = (offset..offset + chunk.len()).map(|p| p as i32).collect();
            let unmet: Vec<i32> = ids
                .iter()
                .map(|id| rows.unmet.get(id).copied().unwrap_or(0))
                .collect();
            let text = |f: fn(&Task) -> &str| chunk.iter().map(f).collect::<Vec<&str>>();
            let paths =
                |f: fn(&Task) -> &Vec<String>| chunk.iter().map(|t| Json(f(t))).collect::<Vec<_>>();
            sqlx::query(
                "INSERT INTO tasks (id, task_list_id, position, project_id, team_pk, task_id, \
                 assigned_persona, parallel_group, description, reads, writes, reviews, extra, \
                 status, created_at, updated_at, unmet_deps) \
                 SELECT t.id, $1, t.position, $2, $3, t.task_id, t.persona, t.wave, \
                 t.description, t.reads, t.writes, t.reviews, t.extra, $4, $5, $5, t.unmet \
                 FROM UNNEST($6::uuid[], $7::int4[], $8::text[], $9::text[], $10::int8[], \
                 $11::text[], $12::jsonb[], $13::jsonb[], $14::text[], $15::jsonb[], \
                 $16::int4[]) \
                 AS t(id, position, task_id, persona, wave, description, reads, writes, \
                 reviews, extra, unmet)",
            )
            .bind(rows.list_id)
            .bind(rows.new.project_id)
            .bind(rows.new.team_pk)
            .bind(TaskStatus::Pending.as_str())
            .bind(rows.created_at)
            .bind(ids)
            .bind(positions)
            .bind(text(|t| &t.task_id))
            .bind(text(|t| &t.assigned_persona))
            .bind(chunk.iter().map(|t| t.parallel_group).collect::<Vec<i64>>())
            .bind(text(|t| &t.description))
            .bind(paths(|t| &t.reads))
            .bind(paths(|t| &t.writes))
            .bind(
                chunk
                    .iter()
                    .map(|t| t.reviews.as_deref())
                    .collect::<Vec<Option<&str>>>(),
            )
            .bind(chunk.iter().map(|t| Json(&t.extra)).collect::<Vec<_>>())
            .bind(unmet)
            .execute(&mut *self)
            .await?;
        }
        for chunk in rows.edges.chunks(PG_ROWS_PER_INSERT) {
            sqlx::query(
                "INSERT INTO task_dependencies (task_id, depends_on, position) \
                 SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::int4[])",
            )
            .bind(chunk.iter().map(|e| e.0).collect::<Vec<Uuid>>())
            .bind(chunk.iter().map(|e| e.1).collect::<Vec<Uuid>>())
            .bind(chunk.iter().map(|e| e.2).collect::<Vec<i32>>())
            .execute(&mut *self)
            .await?;
        }
        Ok(())
    }
}

impl InsertRows for &mut sqlx::SqliteConnection {
    async fn insert_rows(self, rows: &Rows<'_>) -> DbResult<()> {
        let new = rows.new;
        for (chunk_no, chunk) in new.tasks.chunks(TASK_ROWS_PER_INSERT).enumerate() {
            let offset = chunk_no * TASK_ROWS_PER_INSERT;
            let mut insert = QueryBuilder::new(
                "INSERT INTO tasks (id, task_list_id, position, project_id, team_pk, task_id, \
                 assigned_persona, parallel_group, description, reads, writes, reviews, extra, \
                 status, created_at, updated_at, unmet_deps) ",
            );
            insert.push_values(chunk.iter().enumerate(), |mut row, (i, task)| {
                row.push_bind(rows.ids[offset + i])
                    .push_bind(rows.list_id)
                    .push_bind((offset + i) as i32)
                    .push_bind(new.project_id)
                    .push_bind(new.team_pk)
                    .push_bind(task.task_id.as_str())
                    .push_bind(task.assigned_persona.as_str())
                    .push_bind(task.parallel_group)
                    .push_bind(task.description.as_str())
                    .push_bind(Json(&task.reads))
                    .push_bind(Json(&task.writes))
                    .push_bind(task.reviews.as_deref())
                    .push_bind(Json(&task.extra))
                    .push_bind(TaskStatus::Pending.as_str())
                    .push_bind(rows.created_at)
                    .push_bind(rows.created_at)
                    .push_bind(rows.unmet.get(&rows.ids[offset + i]).copied().unwrap_or(0));
            });
            insert.build().execute(&mut *self).await?;
        }
        for chunk in rows.edges.chunks(EDGE_ROWS_PER_INSERT) {
            let mut insert =
                QueryBuilder::new("INSERT INTO task_dependencies (task_id, depends_on, position) ");
            insert.push_values(chunk, |mut row, (task, dep, position)| {
                row.push_bind(*task).push_bind(*dep).push_bind(*position);
            });
            insert.build().execute(&mut *self).await?;
        }
        Ok(())
    }
}
