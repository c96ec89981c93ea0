//! Read-only summaries for the dashboard: lists with status counts, jobs and runs
//! by status, track summaries, and the cheap status reads a live page polls. Rows
//! of projects outside `allowed` (a project-limited token) are never read.

use chrono::{DateTime, Utc};
use sqlx::QueryBuilder;
use sqlx::types::Json;
use uuid::Uuid;

use super::{Database, DbResult, allowed_rows, push_allowed, push_bound_list, push_newest_first};
use crate::domain::dispatch::TaskStatus;
use crate::domain::job::{JobState, JobStatus, JobSummary, RunSummary};

/// One task list and how many of its tasks are in each status.
#[derive(Debug, Clone)]
pub struct ListCounts {
    pub id: Uuid,
    pub project_id: String,
    pub team_pk: Option<String>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    /// `(status, count)`.
    pub counts: Vec<(TaskStatus, i64)>,
}

/// What a live task-list page polls: see [`Database::task_list_marker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskListMarker {
    pub counts: [i64; 5],
    pub latest_lease: Option<DateTime<Utc>>,
}

/// Ids one [`Database::task_names`] statement binds at most, well under SQLite's
/// bind-parameter limit.
const NAMES_PER_READ: usize = 500;

/// A job's L0s without a valid answer, as a column of a `refine_jobs` row.
const NOT_VALID: &str = "(SELECT COUNT(*) FROM refine_l0_runs l \
     WHERE l.job_id = refine_jobs.id AND l.status <> 'valid')";

/// The state a person reads (`domain::job::JobState::of`), as SQL: `degraded` is
/// set on a success with an L0 without a valid answer when it ends (migration 0026).
const STATE: &str = "CASE WHEN degraded THEN 'degraded' ELSE status END";

/// Filters of the dashboard's job list.
#[derive(Debug, Default, Clone)]
pub struct JobListFilter {
    /// A state: a status, or `degraded`; `succeeded` then means succeeded and not degraded.
    pub status: Option<JobState>,
    /// An id (the job's, or its run's) or a piece of a phase or project id.
    pub search: Option<String>,
    pub project_id: Option<String>,
    pub created_from: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
    pub allowed_projects: Option<Vec<String>>,
}

#[derive(Debug, Clone)]
pub struct TrackRow {
    pub track_id: String,
    pub metadata: serde_json::Value,
    pub revision: i64,
}

/// A table a live list page watches for changes (`Database::latest_change`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveTable {
    Jobs,
    Runs,
    Tracks,
}

/// The job list's filters as `AND`s on `refine_jobs` (`$status`: whether the
/// status filter applies; the state counts take every status).
macro_rules! push_job_filter {
    ($q:ident, $filter:expr, $status:expr) => {{
        let filter: &JobListFilter = $filter;
        if $status {
            match filter.status {
                None => {}
                Some(JobState::Degraded) => {
                    $q.push(" AND degraded");
                }
                Some(JobState::Succeeded) => {
                    $q.push(" AND status = 'succeeded' AND NOT degraded");
                }
                Some(s) => {
                    $q.push(" AND status = ").push_bind(s);
                }
            }
        }
        if let Some(search) = &filter.search {
            match search.parse::<Uuid>() {
                Ok(id) => {
                    $q.push(" AND (id = ").push_bind(id);
                    $q.push(" OR run_id = ").push_bind(id);
                    $q.push(")");
                }
                Err(_) => {
                    let pattern = format!("%{}%", like_escape(&search.to_lowercase()));
                    $q.push(" AND (LOWER(phase_id) LIKE ")
                        .push_bind(pattern.clone());
                    $q.push(" ESCAPE '\\' OR LOWER(project_id) LIKE ")
                        .push_bind(pattern);
                    $q.push(" ESCAPE '\\')");
                }
            }
        }
        if let Some(p) = &filter.project_id {
            $q.push(" AND project_id = ").push_bind(p.clone());
        }
        if let Some(from) = filter.created_from {
            $q.push(" AND created_at >= ").push_bind(from);
        }
        if let Some(to) = filter.created_before {
            $q.push(" AND created_at < ").push_bind(to);
        }
        push_allowed(&mut $q, "project_id", filter.allowed_projects.as_deref());
    }};
}

/// `text` for a `LIKE … ESCAPE '\'` pattern: its `%`, `_` and `\` match themselves.
fn like_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl Database {
    /// The newest `limit` task lists with per-status task counts: each list's 16
    /// counter rows summed (`task_list_counts`, kept by every status change), never
    /// its tasks. The overview and its live marker (twice a second) read this, so
    /// the sums come from one correlated subquery per list, an index probe each: a
    /// join or an `IN` list of 200 lists lets Postgres choose to scan the whole
    /// counter table, which grows with every list ever made. The subquery answers
    /// the five sums as one text (`pending running done failed abandoned`) because a
    /// scalar subquery answers one value.
    pub async fn task_list_counts(
        &self,
        allowed: Option<&[String]>,
        limit: u32,
    ) -> DbResult<Vec<ListCounts>> {
        type Row = (Uuid, String, Option<String>, String, DateTime<Utc>, String);
        let rows: Vec<Row> = on_pool!(self, pool => {
            let sql = "SELECT id, project_id, team_pk, created_by, created_at, \
                 (SELECT CAST(COALESCE(SUM(pending), 0) AS TEXT) || ' ' || \
                  CAST(COALESCE(SUM(running), 0) AS TEXT) || ' ' || \
                  CAST(COALESCE(SUM(done), 0) AS TEXT) || ' ' || \
                  CAST(COALESCE(SUM(failed), 0) AS TEXT) || ' ' || \
                  CAST(COALESCE(SUM(abandoned), 0) AS TEXT) \
                  FROM task_list_counts c WHERE c.task_list_id = task_lists.id) \
                 FROM task_lists WHERE TRUE";
            let mut q = allowed_rows(sql, "project_id", allowed);
            push_newest_first(&mut q, None, limit);
            q.build_query_as().fetch_all(pool).await?
        });
        Ok(rows
            .into_iter()
            .map(
                |(id, project_id, team_pk, created_by, created_at, sums)| ListCounts {
                    counts: TaskStatus::ALL
                        .into_iter()
                        .zip(sums.split(' ').map(|n| n.parse::<i64>().unwrap_or(0)))
                        .filter(|(_, n)| *n > 0)
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

    pub async fn task_list_project(&self, list_id: Uuid) -> DbResult<Option<String>> {
        self.value_by("SELECT project_id FROM task_lists WHERE id = $1", list_id)
            .await
    }

    /// A cheap change marker of a list's tasks: its counters' sums by status
    /// (pending, running, done, failed, abandoned) and the latest lease of its
    /// running tasks. Every status change moves a counter; a claim also sets the
    /// newest lease, so a claim and a lapsed lease between two polls (counts back
    /// where they were) still change it. Reads the 16 counter rows and the end of
    /// the `tasks_running_by_lease` index, never the list's tasks
    /// (docs/architecture.md, "Claims at scale").
    pub async fn task_list_marker(&self, list_id: Uuid) -> DbResult<TaskListMarker> {
        Ok(on_pool!(self, pool => {
            let counts = read_count_sums!(pool, list_id);
            let lease: Option<DateTime<Utc>> = sqlx::query_scalar(
                "SELECT lease_expires_at FROM tasks WHERE task_list_id = $1 \
                 AND status = 'running' ORDER BY lease_expires_at DESC LIMIT 1",
            )
            .bind(list_id)
            .fetch_optional(pool)
            .await?
            .flatten();
            TaskListMarker {
                counts: [counts.0, counts.1, counts.2, counts.3, counts.4],
                latest_lease: lease,
            }
        }))
    }

    /// A list's tasks counted by wave and status: `(wave, status, count)`, waves
    /// ascending, every wave ([`Database::wave_counts`] without a bound): an
    /// aggregate over the `tasks_by_list_wave_status` index (index-only).
    pub async fn task_list_wave_counts(
        &self,
        list_id: Uuid,
    ) -> DbResult<Vec<(i64, TaskStatus, i64)>> {
        self.wave_counts(list_id, i64::MAX).await
    }

    /// The `limit` tasks of wave `wave` of a list (in status `status`, if given)
    /// after position `after`, in list order, with their edges: a range of the
    /// `tasks_by_list_wave_status` index, never the whole list (docs/architecture.md,
    /// "The dashboard's task-list page"); without a status, Postgres orders the
    /// wave's entries (the index keeps positions in order per status). `None` when
    /// the list does not exist.
    pub async fn task_list_wave_page(
        &self,
        list_id: Uuid,
        wave: i64,
        status: Option<TaskStatus>,
        after: i32,
        limit: u32,
    ) -> DbResult<Option<crate::db::task_lists::TaskPage>> {
        self.task_page(list_id, Some((wave, status)), after, limit)
            .await
    }

    /// The barrier's active wave of a list (the lowest wave holding a pending or
    /// running task) from the claims' indexes; `None` when nothing is left.
    pub async fn task_list_active_wave(&self, list_id: Uuid) -> DbResult<Option<i64>> {
        let sql = format!("SELECT {}", self.active_wave());
        let wave: Option<Option<i64>> = self.value_by(&sql, list_id).await?;
        Ok(wave.flatten())
    }

    /// The planner ids of tasks `ids`, in the order of `ids` (ids of no task left
    /// out), for naming the tasks a page's rows refer to that sit on other pages.
    /// One statement per [`NAMES_PER_READ`] ids, each by primary key.
    pub async fn task_names(&self, ids: &[Uuid]) -> DbResult<Vec<(Uuid, String)>> {
        let mut found: std::collections::HashMap<Uuid, String> = Default::default();
        for chunk in ids.chunks(NAMES_PER_READ) {
            let rows: Vec<(Uuid, String)> = on_pool!(self, pool => {
                let mut q = QueryBuilder::new("SELECT id, task_id FROM tasks WHERE id IN ");
                push_bound_list(&mut q, chunk.iter().copied());
                q.build_query_as().fetch_all(pool).await?
            });
            found.extend(rows);
        }
        Ok(ids
            .iter()
            .filter_map(|id| Some((*id, found.get(id)?.clone())))
            .collect())
    }

    /// Jobs newest first (v7 ids are time-ordered); `before` = the last id of the
    /// previous page.
    pub async fn job_rows(
        &self,
        filter: &JobListFilter,
        limit: u32,
        before: Option<Uuid>,
    ) -> DbResult<Vec<JobSummary>> {
        Ok(on_pool!(self, pool => {
            let mut q = QueryBuilder::new(format!(
                "SELECT id, status, phase_id, project_id, team_pk, executor, attempt, \
                 max_attempts, created_at, started_at, finished_at, error_code, error_message, \
                 CAST(l0_total AS BIGINT) AS l0_total, {NOT_VALID} AS l0_not_valid \
                 FROM refine_jobs WHERE TRUE",
            ));
            push_job_filter!(q, filter, true);
            push_newest_first(&mut q, before, limit);
            q.build_query_as().fetch_all(pool).await?
        }))
    }

    /// `(state, count)` of the jobs `filter` matches, whatever its status: a
    /// success with failed L0 calls counts as `degraded` (docs/jobs.md, "Lifecycle").
    /// By project alone, the sum of the counter rows the jobs' writes keep
    /// (`refine_counts`, migration 0026): 16 rows a state for every project or for
    /// each project asked, however many jobs. A search or a day counts the jobs it
    /// matches.
    pub async fn job_state_counts(&self, filter: &JobListFilter) -> DbResult<Vec<(JobState, i64)>> {
        if filter.search.is_none()
            && filter.created_from.is_none()
            && filter.created_before.is_none()
        {
            let projects: Option<Vec<String>> = match (&filter.project_id, &filter.allowed_projects)
            {
                (Some(p), Some(allowed)) => {
                    Some(allowed.iter().filter(|a| *a == p).cloned().collect())
                }
                (Some(p), None) => Some(vec![p.clone()]),
                (None, allowed) => allowed.clone(),
            };
            return self.counter_sums("job", projects.as_deref()).await;
        }
        Ok(on_pool!(self, pool => {
            let mut q = QueryBuilder::new(format!(
                "SELECT state, COUNT(*) FROM (SELECT {STATE} AS state FROM refine_jobs WHERE TRUE",
            ));
            push_job_filter!(q, filter, false);
            q.push(") s GROUP BY state ORDER BY state");
            q.build_query_as().fetch_all(pool).await?
        }))
    }

    /// `(status, count)` of the runs in `allowed`, from their counter rows
    /// (`refine_counts`, migration 0026).
    pub async fn run_state_counts(
        &self,
        allowed: Option<&[String]>,
    ) -> DbResult<Vec<(JobStatus, i64)>> {
        self.counter_sums("run", allowed).await
    }

    /// `(state, count)` of `kind` (`job` or `run`) from the counter rows of
    /// migration 0026, for every project (`projects` `None`: its scope '') or for
    /// each of `projects`; no zero counts.
    async fn counter_sums<S>(
        &self,
        kind: &'static str,
        projects: Option<&[String]>,
    ) -> DbResult<Vec<(S, i64)>>
    where
        S: Send
            + Unpin
            + for<'r> sqlx::Decode<'r, sqlx::Postgres>
            + sqlx::Type<sqlx::Postgres>
            + for<'r> sqlx::Decode<'r, sqlx::Sqlite>
            + sqlx::Type<sqlx::Sqlite>,
    {
        Ok(on_pool!(self, pool => {
            let mut q = QueryBuilder::new(
                "SELECT state, CAST(SUM(n) AS BIGINT) FROM refine_counts WHERE kind = ",
            );
            q.push_bind(kind).push(" AND ");
            // No project id is empty: scope '' counts every row, never a project's.
            match projects.map(|p| p.iter().filter(|p| !p.is_empty()).collect::<Vec<_>>()) {
                None => {
                    q.push("scope = ''");
                }
                Some(projects) if projects.is_empty() => {
                    q.push("FALSE");
                }
                Some(projects) => {
                    q.push("scope IN ");
                    push_bound_list(&mut q, projects.into_iter().cloned());
                }
            }
            q.push(" GROUP BY state HAVING SUM(n) <> 0 ORDER BY state");
            q.build_query_as().fetch_all(pool).await?
        }))
    }

    /// When a row of `table` the reader may see last changed (`allowed`: `None` for
    /// every project, tracks without one included). Each read is the last entry of
    /// the table's change index, once for all projects or once per allowed project
    /// (migration 0025), never a scan: a live page asks twice a second.
    pub async fn latest_change(
        &self,
        table: LiveTable,
        allowed: Option<&[String]>,
    ) -> DbResult<Option<DateTime<Utc>>> {
        let from = match table {
            LiveTable::Jobs => "refine_jobs",
            LiveTable::Runs => "refine_runs",
            LiveTable::Tracks => "tracks",
        };
        let newest = format!("SELECT MAX(updated_at) AS at FROM {from}");
        let Some(projects) = allowed else {
            return Ok(on_pool!(self, pool => {
                // `from` is one of three table names above, never input.
                sqlx::query_scalar(sqlx::AssertSqlSafe(newest.as_str())).fetch_one(pool).await?
            }));
        };
        if projects.is_empty() {
            return Ok(None);
        }
        Ok(on_pool!(self, pool => {
            let mut q = QueryBuilder::new("SELECT MAX(at) FROM (");
            for (i, project) in projects.iter().enumerate() {
                if i > 0 {
                    q.push(" UNION ALL ");
                }
                q.push(format!("{newest} WHERE project_id = ")).push_bind(project.clone());
            }
            q.push(") newest");
            q.build_query_scalar().fetch_one(pool).await?
        }))
    }

    /// Runs newest first.
    pub async fn run_rows(
        &self,
        allowed: Option<&[String]>,
        limit: u32,
        before: Option<Uuid>,
    ) -> DbResult<Vec<RunSummary>> {
        Ok(on_pool!(self, pool => {
            let sql = "SELECT id, status, project_id, team_pk, executor, created_at, finished_at \
                       FROM refine_runs WHERE TRUE";
            let mut q = allowed_rows(sql, "project_id", allowed);
            push_newest_first(&mut q, before, limit);
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
            let sql = "SELECT track_id, metadata, revision FROM tracks WHERE TRUE";
            let mut q = allowed_rows(sql, "project_id", allowed);
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
