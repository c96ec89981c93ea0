//! What the dashboard reads: overviews, one task list with its waves, refine jobs
//! and runs, tracks. Every read takes the [`Caller`] and checks its projects before
//! returning anything of a project, exactly as the REST API does for a token.

use chrono::{DateTime, NaiveDate, Utc};
use uuid::Uuid;

use crate::db::overview::JobListFilter;
use crate::db::refine_jobs::JobFilter;
use crate::db::task_lists::dispatch_view;
use crate::domain::dispatch::{self, ReadyMode, TaskStatus};
use crate::domain::job::JobStatus;
use crate::domain::natural::natural_cmp;
use crate::domain::track_state::Metadata;
use crate::service::{Caller, Service, ServiceError};
use crate::service::tracks::StoredTrackEvent;

pub use crate::db::overview::{JobRow, ListCounts, RunRow};
pub use crate::service::refine_jobs::{StoredJob, StoredL0};
pub use crate::service::refine_runs::StoredRun;
pub use crate::service::task_claims::StoredTaskEvent;
pub use crate::service::task_lists::{StoredTask, StoredTaskList};

fn not_found(what: &'static str, id: impl ToString) -> ServiceError {
    ServiceError::not_found(what, &id.to_string())
}

/// How many task lists the overview shows (newest first).
pub const OVERVIEW_LISTS: u32 = 200;

pub struct Overview {
    /// Projects in natural order, each with its cycles (`None` = project-wide).
    pub projects: Vec<ProjectSummary>,
    pub job_counts: Vec<(String, i64)>,
    pub run_counts: Vec<(String, i64)>,
}

pub struct ProjectSummary {
    pub project_id: String,
    pub cycles: Vec<CycleSummary>,
}

pub struct CycleSummary {
    pub team_pk: Option<String>,
    pub lists: Vec<ListCounts>,
}

impl Service {
    pub async fn dashboard_overview(&self, caller: &Caller) -> Result<Overview, ServiceError> {
        let lists = self
            .db
            .task_list_counts(caller.allowed_projects(), OVERVIEW_LISTS)
            .await?;
        let mut projects: Vec<ProjectSummary> = Vec::new();
        for list in lists {
            let project = match projects
                .iter_mut()
                .position(|p| p.project_id == list.project_id)
            {
                Some(i) => &mut projects[i],
                None => {
                    projects.push(ProjectSummary {
                        project_id: list.project_id.clone(),
                        cycles: Vec::new(),
                    });
                    projects.last_mut().expect("just pushed")
                }
            };
            match project
                .cycles
                .iter_mut()
                .find(|c| c.team_pk == list.team_pk)
            {
                Some(cycle) => cycle.lists.push(list),
                None => project.cycles.push(CycleSummary {
                    team_pk: list.team_pk.clone(),
                    lists: vec![list],
                }),
            }
        }
        projects.sort_by(|a, b| natural_cmp(&a.project_id, &b.project_id));
        for p in &mut projects {
            p.cycles.sort_by(|a, b| {
                natural_cmp(
                    a.team_pk.as_deref().unwrap_or(""),
                    b.team_pk.as_deref().unwrap_or(""),
                )
            });
        }
        Ok(Overview {
            projects,
            job_counts: self
                .db
                .status_counts(false, caller.allowed_projects())
                .await?,
            run_counts: self
                .db
                .status_counts(true, caller.allowed_projects())
                .await?,
        })
    }
}

/// One task list as the dashboard draws it.
pub struct TaskListView {
    pub list: StoredTaskList,
    /// For each task (same order), the indices of the tasks it depends on.
    pub depends_on: Vec<Vec<usize>>,
    /// The barrier wave with unfinished work; `None` when nothing is left to do.
    pub active_wave: Option<i64>,
}

impl Service {
    pub async fn dashboard_task_list(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<TaskListView, ServiceError> {
        let list = self
            .db
            .task_list(id)
            .await?
            .ok_or_else(|| not_found("task list", id))?;
        caller.check_optional_project(Some(&list.project_id))?;
        let view = dispatch_view(&list.tasks);
        let active_wave = dispatch::ready(ReadyMode::Barrier, &view).wave;
        let depends_on = view.into_iter().map(|t| t.depends_on).collect();
        Ok(TaskListView {
            list: StoredTaskList::from(list),
            depends_on,
            active_wave,
        })
    }
}

impl Service {
    /// A cheap marker that changes whenever a task of the list changes.
    pub async fn dashboard_task_list_marker(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<(i64, Option<DateTime<Utc>>), ServiceError> {
        self.dashboard_list_project_check(caller, id).await?;
        Ok(self.db.task_list_marker(id).await?)
    }
}

impl Service {
    async fn dashboard_list_project_check(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<(), ServiceError> {
        let project = self
            .db
            .task_list_project(id)
            .await?
            .ok_or_else(|| not_found("task list", id))?;
        caller.check_optional_project(Some(&project))
    }
}

/// One task's live state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskState {
    pub task_id: String,
    pub status: TaskStatus,
    pub abandon_category: Option<String>,
}

impl Service {
    /// Current statuses of a list's tasks plus the active wave, for live pages.
    pub async fn dashboard_task_states(
        &self,
        id: Uuid,
    ) -> Result<(Vec<TaskState>, Option<i64>), ServiceError> {
        // Callers checked the project with `dashboard_task_list_marker` first.
        let list = self
            .db
            .task_list(id)
            .await?
            .ok_or_else(|| not_found("task list", id))?;
        let view = dispatch_view(&list.tasks);
        let wave = dispatch::ready(ReadyMode::Barrier, &view).wave;
        let states = list
            .tasks
            .into_iter()
            .map(|t| TaskState {
                task_id: t.task_id,
                status: t.status,
                abandon_category: t.abandon_category.map(|c| c.as_str().to_owned()),
            })
            .collect();
        Ok((states, wave))
    }
}

/// The job list's query, as parsed from a form.
#[derive(Debug, Default, Clone)]
pub struct JobQuery {
    pub status: Option<JobStatus>,
    pub project_id: Option<String>,
    /// Jobs created on this UTC day.
    pub date: Option<NaiveDate>,
    /// The last id of the previous page.
    pub before: Option<Uuid>,
}

pub const JOB_PAGE: u32 = 50;

pub struct Page<T> {
    pub rows: Vec<T>,
    /// The cursor of the next page, if there is one.
    pub next: Option<Uuid>,
}

impl<T> Page<T> {
    /// The first [`JOB_PAGE`] of `rows`, read with a limit of one more: that extra
    /// row only says that a next page exists, after the last row kept.
    fn cut(mut rows: Vec<T>, id: impl Fn(&T) -> Uuid) -> Self {
        let next = if rows.len() > JOB_PAGE as usize {
            rows.truncate(JOB_PAGE as usize);
            rows.last().map(id)
        } else {
            None
        };
        Page { rows, next }
    }
}

impl Service {
    pub async fn dashboard_jobs(
        &self,
        caller: &Caller,
        query: &JobQuery,
    ) -> Result<Page<JobRow>, ServiceError> {
        let day = query
            .date
            .map(|d| d.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc());
        let filter = JobListFilter {
            status: query.status.map(|s| s.as_str().to_owned()),
            project_id: query.project_id.clone(),
            created_from: day,
            created_before: day.map(|d| d + chrono::Duration::days(1)),
            allowed_projects: caller.allowed_projects().map(<[String]>::to_vec),
        };
        let rows = self
            .db
            .job_rows(&filter, JOB_PAGE + 1, query.before)
            .await?;
        Ok(Page::cut(rows, |r| r.id))
    }
}

pub struct JobView {
    pub job: StoredJob,
    pub l0s: Vec<StoredL0>,
}

impl Service {
    pub async fn dashboard_job(&self, caller: &Caller, id: Uuid) -> Result<JobView, ServiceError> {
        let job = self
            .db
            .refine_job(id)
            .await?
            .map(StoredJob::from)
            .ok_or_else(|| not_found("refine job", id))?;
        caller.check_optional_project(job.project_id.as_deref())?;
        let l0s = self.db.refine_job_l0s(id).await?;
        let l0s = l0s.into_iter().map(StoredL0::from).collect();
        Ok(JobView { job, l0s })
    }
}

impl Service {
    pub async fn dashboard_runs(
        &self,
        caller: &Caller,
        before: Option<Uuid>,
    ) -> Result<Page<RunRow>, ServiceError> {
        let rows = self
            .db
            .run_rows(caller.allowed_projects(), JOB_PAGE + 1, before)
            .await?;
        Ok(Page::cut(rows, |r| r.id))
    }
}

pub struct RunView {
    pub run: StoredRun,
    /// Its phase jobs in natural phase order.
    pub jobs: Vec<StoredJob>,
}

impl Service {
    pub async fn dashboard_run(&self, caller: &Caller, id: Uuid) -> Result<RunView, ServiceError> {
        let run = self
            .db
            .refine_run(id)
            .await?
            .map(StoredRun::from)
            .ok_or_else(|| not_found("refine run", id))?;
        caller.check_optional_project(run.project_id.as_deref())?;
        let filter = JobFilter {
            run_id: Some(id),
            ..JobFilter::default()
        };
        let mut jobs: Vec<StoredJob> = self
            .db
            .refine_jobs(&filter, 1000, None)
            .await?
            .into_iter()
            .map(StoredJob::from)
            .collect();
        jobs.sort_by(|a, b| natural_cmp(&a.phase_id, &b.phase_id));
        Ok(RunView { run, jobs })
    }
}

/// A track as the list shows it.
pub struct TrackListEntry {
    pub track_id: String,
    pub revision: i64,
    /// `None` when the stored document does not read as metadata v2.
    pub metadata: Option<Metadata>,
}

pub const TRACK_LIMIT: u32 = 500;

impl Service {
    /// The tracks of the viewer's projects (all, for an unrestricted viewer).
    pub async fn dashboard_tracks(
        &self,
        caller: &Caller,
    ) -> Result<Vec<TrackListEntry>, ServiceError> {
        Ok(self
            .db
            .track_rows(caller.allowed_projects(), TRACK_LIMIT)
            .await?
            .into_iter()
            .map(|row| TrackListEntry {
                track_id: row.track_id,
                revision: row.revision,
                metadata: serde_json::from_value(row.metadata).ok(),
            })
            .collect())
    }
}

pub struct TrackView {
    pub track_id: String,
    pub revision: i64,
    pub metadata: Option<Metadata>,
    pub raw: serde_json::Value,
    /// Every write of the document, oldest first (docs/api.md, "Tracks").
    pub history: Vec<StoredTrackEvent>,
}

impl Service {
    pub async fn dashboard_track(
        &self,
        caller: &Caller,
        track_id: &str,
    ) -> Result<TrackView, ServiceError> {
        let stored = self
            .db
            .track(track_id)
            .await?
            .ok_or_else(|| not_found("track", track_id))?;
        caller.check_optional_project(stored.project_id.as_deref())?;
        let history = self.db.track_history(track_id).await?;
        Ok(TrackView {
            track_id: track_id.to_owned(),
            revision: stored.revision,
            metadata: serde_json::from_value(stored.metadata.clone()).ok(),
            raw: stored.metadata,
            history: history.into_iter().map(StoredTrackEvent::from).collect(),
        })
    }
}

/// One task as the dashboard's task page shows it: why it ended as it did and
/// what happened to it (docs/api.md "Claims").
pub struct TaskDetailView {
    pub list_id: Uuid,
    pub project_id: String,
    pub task: StoredTask,
    /// For a cascade-abandoned task: the task whose failure caused it.
    pub upstream: Option<StoredTask>,
    /// The tasks this one's failure abandoned, in list order.
    pub abandoned_by_it: Vec<StoredTask>,
    /// Oldest first.
    pub history: Vec<StoredTaskEvent>,
}

impl Service {
    /// Task `task_id` (the planner's id) of list `list_id`.
    pub async fn dashboard_task(
        &self,
        caller: &Caller,
        list_id: Uuid,
        task_id: &str,
    ) -> Result<TaskDetailView, ServiceError> {
        let list = self
            .db
            .task_list(list_id)
            .await?
            .ok_or_else(|| not_found("task list", list_id))?;
        caller.check_optional_project(Some(&list.project_id))?;
        let list = StoredTaskList::from(list);
        let task = list
            .tasks
            .iter()
            .find(|t| t.task_id == task_id)
            .cloned()
            .ok_or_else(|| not_found("task", task_id))?;
        let upstream = task
            .upstream_task_id
            .and_then(|up| list.tasks.iter().find(|t| t.id == up).cloned());
        let abandoned_by_it = list
            .tasks
            .iter()
            .filter(|t| t.upstream_task_id == Some(task.id))
            .cloned()
            .collect();
        let history = self
            .db
            .task_history(task.id)
            .await?
            .map(|(_, events)| events.into_iter().map(StoredTaskEvent::from).collect())
            .unwrap_or_default();
        Ok(TaskDetailView {
            list_id,
            project_id: list.project_id,
            task,
            upstream,
            abandoned_by_it,
            history,
        })
    }
}
