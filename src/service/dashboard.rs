//! What the dashboard reads: overviews, one task list with its waves, refine jobs
//! and runs, tracks. Every read takes the [`Caller`] and checks its projects before
//! returning anything of a project, exactly as the REST API does for a token.

use chrono::{DateTime, NaiveDate, Utc};
use uuid::Uuid;

use crate::db::dashboard::{JobListFilter, ListCounts, LiveTable};
use crate::db::refine_jobs::JobFilter;
use crate::db::task_lists::dispatch_view;
use crate::domain::dispatch::{self, AbandonCategory, ReadyMode, TaskStatus};
use crate::domain::job::{JobState, JobStatus, JobSummary, RunSummary};
use crate::domain::natural::natural_cmp;
use crate::domain::track_state::Metadata;
use crate::service::tracks::StoredTrackEvent;
use crate::service::{Caller, Service, ServiceError};

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
    pub job_counts: Vec<(JobState, i64)>,
    pub run_counts: Vec<(JobStatus, i64)>,
    /// The live marker this overview was drawn from
    /// ([`Service::dashboard_live_marker`]).
    pub since: String,
}

pub struct ProjectSummary {
    pub project_id: String,
    pub cycles: Vec<CycleSummary>,
}

pub struct CycleSummary {
    pub team_pk: Option<String>,
    pub lists: Vec<TaskListSummary>,
}

/// One task list of a cycle and how many of its tasks are in each status.
pub struct TaskListSummary {
    pub id: Uuid,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    /// `(status, count)`.
    pub counts: Vec<(TaskStatus, i64)>,
}

impl From<ListCounts> for TaskListSummary {
    fn from(list: ListCounts) -> Self {
        TaskListSummary {
            id: list.id,
            created_by: list.created_by,
            created_at: list.created_at,
            counts: list.counts,
        }
    }
}

impl Service {
    /// The overview, with the live marker it was drawn from: the jobs' and runs'
    /// parts read before their counts, the lists' digested from the lists drawn
    /// (one read for both).
    pub async fn dashboard_overview(&self, caller: &Caller) -> Result<Overview, ServiceError> {
        let mut since = self.live_table_parts(caller, LivePage::Overview).await?;
        let lists = self
            .db
            .task_list_counts(caller.allowed_projects(), OVERVIEW_LISTS)
            .await?;
        since.push(lists_digest(&lists));
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
            let team_pk = list.team_pk.clone();
            let list = TaskListSummary::from(list);
            match project.cycles.iter_mut().find(|c| c.team_pk == team_pk) {
                Some(cycle) => cycle.lists.push(list),
                None => project.cycles.push(CycleSummary {
                    team_pk,
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
                .job_state_counts(&JobListFilter {
                    allowed_projects: caller.allowed_projects().map(<[String]>::to_vec),
                    ..JobListFilter::default()
                })
                .await?,
            run_counts: self.db.run_state_counts(caller.allowed_projects()).await?,
            since: since.join("-"),
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

/// Lists of up to this many tasks are read and drawn whole, one node per task;
/// a larger one is summarised per wave and its tasks shown a page at a time
/// (docs/architecture.md, "The dashboard's task-list page").
pub const DRAWN_WHOLE_TASKS: u64 = 300;
/// Tasks a page of a large list shows.
pub const DASHBOARD_PAGE_TASKS: u32 = 200;

/// One wave's tasks counted by status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaveSummary {
    pub wave: i64,
    /// `(status, count)` in [`TaskStatus`] order, statuses with none left out.
    pub counts: Vec<(TaskStatus, i64)>,
}

impl WaveSummary {
    pub fn total(&self) -> i64 {
        self.counts.iter().map(|(_, n)| n).sum()
    }

    pub fn count(&self, status: TaskStatus) -> i64 {
        self.counts
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n)
    }
}

/// A large list: its waves counted, one page of its tasks.
pub struct TaskListPageView {
    /// The list with the page's tasks only; `next_cursor` when more follow.
    pub list: StoredTaskList,
    /// The page's `?cursor=` (`None` on the first page).
    pub cursor: Option<String>,
    pub total: i64,
    pub waves: Vec<WaveSummary>,
    pub active_wave: Option<i64>,
    /// Planner ids of the page's tasks' upstream tasks (a cascade's cause).
    pub names: Vec<(Uuid, String)>,
    /// The wave opened (`?wave=`) and the status its tasks are filtered by
    /// (`&status=`): the page lists that wave's tasks only.
    pub wave: Option<(i64, Option<TaskStatus>)>,
}

/// The task-list page's data: a small list (or one wave opened) whole, a
/// large one summarised and paged.
pub enum TaskListShown {
    Whole(TaskListView),
    Paged(TaskListPageView),
}

/// Waves of a whole list, counted from its tasks.
pub fn wave_summaries(list: &StoredTaskList) -> Vec<WaveSummary> {
    let mut by_wave: std::collections::BTreeMap<i64, Vec<TaskStatus>> = Default::default();
    for t in &list.tasks {
        by_wave.entry(t.parallel_group).or_default().push(t.status);
    }
    by_wave
        .into_iter()
        .map(|(wave, statuses)| WaveSummary {
            wave,
            counts: TaskStatus::ALL
                .into_iter()
                .map(|s| (s, statuses.iter().filter(|&&t| t == s).count() as i64))
                .filter(|(_, n)| *n > 0)
                .collect(),
        })
        .collect()
}

impl Service {
    /// The whole list with its graph (a list of up to [`DRAWN_WHOLE_TASKS`],
    /// `wave` opened or not), or, for a larger one, the waves counted by an
    /// aggregate over an index, the active wave from the claims' indexes and the
    /// page of [`DASHBOARD_PAGE_TASKS`] after `cursor` — of wave `wave` only (in
    /// `status`, if given) when one is opened — never every task.
    pub async fn dashboard_task_list(
        &self,
        caller: &Caller,
        id: Uuid,
        wave: Option<i64>,
        status: Option<TaskStatus>,
        cursor: Option<&str>,
    ) -> Result<TaskListShown, ServiceError> {
        self.check_list_visible(caller, id).await?;
        let total = self.db.task_count(id).await?;
        if total > DRAWN_WHOLE_TASKS || (wave.is_none() && cursor.is_some()) {
            let wave = wave.map(|w| (w, status));
            return Ok(TaskListShown::Paged(
                self.dashboard_task_list_page(caller, id, total, wave, cursor)
                    .await?,
            ));
        }
        Ok(TaskListShown::Whole(
            self.dashboard_task_list_whole(caller, id).await?,
        ))
    }

    /// The tasks a large list's page shows: [`DASHBOARD_PAGE_TASKS`] after
    /// `cursor`, of the whole list or of wave `wave` (in its status, if given).
    async fn dashboard_page_tasks(
        &self,
        caller: &Caller,
        id: Uuid,
        wave: Option<(i64, Option<TaskStatus>)>,
        cursor: Option<&str>,
    ) -> Result<StoredTaskList, ServiceError> {
        match wave {
            None => {
                self.task_list_page(caller, id, Some(DASHBOARD_PAGE_TASKS), cursor)
                    .await
            }
            Some(wave) => {
                let after = super::task_lists::page_cursor(cursor)?;
                self.task_page(caller, id, Some(wave), after, DASHBOARD_PAGE_TASKS)
                    .await
            }
        }
    }

    async fn dashboard_task_list_page(
        &self,
        caller: &Caller,
        id: Uuid,
        total: u64,
        wave: Option<(i64, Option<TaskStatus>)>,
        cursor: Option<&str>,
    ) -> Result<TaskListPageView, ServiceError> {
        let list = self.dashboard_page_tasks(caller, id, wave, cursor).await?;
        let mut waves: Vec<WaveSummary> = Vec::new();
        for (wave, status, n) in self.db.task_list_wave_counts(id).await? {
            match waves.last_mut() {
                Some(w) if w.wave == wave => w.counts.push((status, n)),
                _ => waves.push(WaveSummary {
                    wave,
                    counts: vec![(status, n)],
                }),
            }
        }
        for w in &mut waves {
            w.counts
                .sort_by_key(|(s, _)| TaskStatus::ALL.iter().position(|a| a == s));
        }
        let active_wave = self.db.task_list_active_wave(id).await?;
        let mut upstream: Vec<Uuid> = list
            .tasks
            .iter()
            .filter_map(|t| t.upstream_task_id)
            .filter(|up| !list.tasks.iter().any(|t| t.id == *up))
            .collect();
        upstream.sort_unstable();
        upstream.dedup();
        let mut names = self.db.task_names(&upstream).await?;
        names.extend(list.tasks.iter().map(|t| (t.id, t.task_id.clone())));
        Ok(TaskListPageView {
            list,
            cursor: cursor.map(str::to_owned),
            total: total as i64,
            waves,
            active_wave,
            names,
            wave,
        })
    }

    async fn dashboard_task_list_whole(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<TaskListView, ServiceError> {
        let list = self.visible_list(caller, id).await?;
        let view = dispatch_view(&list.tasks);
        let active_wave = dispatch::ready(ReadyMode::Barrier, &view).wave;
        let depends_on = view.into_iter().map(|t| t.depends_on).collect();
        Ok(TaskListView {
            list,
            depends_on,
            active_wave,
        })
    }
}

pub use crate::db::dashboard::TaskListMarker;

impl Service {
    /// A cheap marker that changes whenever a task of the list changes status
    /// (from the list's counters, see [`crate::db::Database::task_list_marker`]).
    pub async fn dashboard_task_list_marker(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<TaskListMarker, ServiceError> {
        self.check_list_visible(caller, id).await?;
        Ok(self.db.task_list_marker(id).await?)
    }
}

/// One task's live state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskState {
    pub task_id: String,
    pub status: TaskStatus,
    pub abandon_category: Option<AbandonCategory>,
}

impl Service {
    /// Current statuses of the tasks a task-list page shows plus the active wave,
    /// for live pages: every task of a small list; of a large one (or with a
    /// `cursor`), the page's tasks — of wave `wave` only, in its status if given,
    /// when one is opened — as [`Service::dashboard_task_list`] shows them.
    pub async fn dashboard_task_states(
        &self,
        caller: &Caller,
        id: Uuid,
        wave: Option<(i64, Option<TaskStatus>)>,
        cursor: Option<&str>,
    ) -> Result<(Vec<TaskState>, Option<i64>), ServiceError> {
        self.check_list_visible(caller, id).await?;
        let paged = (wave.is_none() && cursor.is_some())
            || self.db.task_count(id).await? > DRAWN_WHOLE_TASKS;
        let (tasks, wave) = if paged {
            let page = self.dashboard_page_tasks(caller, id, wave, cursor).await?;
            let wave = self.db.task_list_active_wave(id).await?;
            let tasks = page
                .tasks
                .into_iter()
                .map(|t| (t.task_id, t.status, t.abandon_category))
                .collect::<Vec<_>>();
            (tasks, wave)
        } else {
            let list = self.visible_list(caller, id).await?;
            let view = dispatch_view(&list.tasks);
            let wave = dispatch::ready(ReadyMode::Barrier, &view).wave;
            let tasks = list
                .tasks
                .into_iter()
                .map(|t| (t.task_id, t.status, t.abandon_category))
                .collect();
            (tasks, wave)
        };
        let states = tasks
            .into_iter()
            .map(|(task_id, status, category)| TaskState {
                task_id,
                status,
                abandon_category: category,
            })
            .collect();
        Ok((states, wave))
    }
}

/// The job list's query, as parsed from a form.
#[derive(Debug, Default, Clone)]
pub struct JobQuery {
    /// A status, or `degraded` (a success with failed L0 calls; `succeeded`
    /// then means a clean one).
    pub status: Option<JobState>,
    /// An id, or a piece of a phase or project id.
    pub search: Option<String>,
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
    ) -> Result<JobList, ServiceError> {
        let day = query
            .date
            .map(|d| d.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc());
        let filter = JobListFilter {
            status: query.status,
            search: query.search.clone(),
            project_id: query.project_id.clone(),
            created_from: day,
            created_before: day.map(|d| d + chrono::Duration::days(1)),
            allowed_projects: caller.allowed_projects().map(<[String]>::to_vec),
        };
        let rows = self
            .db
            .job_rows(&filter, JOB_PAGE + 1, query.before)
            .await?;
        let page = Page::cut(rows, |r| r.id);
        let ids: Vec<Uuid> = page.rows.iter().map(|r| r.id).collect();
        let usage = self.db.job_usage(&ids).await?.into_iter().collect();
        let counts = self.db.job_state_counts(&filter).await?;
        Ok(JobList {
            page,
            usage,
            counts,
        })
    }
}

/// A page of the job list, with what each row cost and the state counts of
/// every job the query matches (whatever its status filter).
pub struct JobList {
    pub page: Page<JobSummary>,
    pub usage: std::collections::HashMap<Uuid, crate::domain::usage::UsageTotals>,
    pub counts: Vec<(JobState, i64)>,
}

pub struct JobView {
    pub job: StoredJob,
    pub l0s: Vec<StoredL0>,
    /// The log with when each line was written (`None` for a line no event
    /// carries, such as the final log's reordered lines: the job's end then).
    pub log: Vec<(DateTime<Utc>, String)>,
    /// Its L0 calls waiting for room on their executor's rate limit.
    pub waiting: Vec<crate::service::rate_limits::WaitingCall>,
}

/// The stored log's lines with their times: each line takes the time of the
/// first unused `log` event with its text; a line no event carries was written
/// with the job's final log, at `ended`.
fn timed_log(
    log: &[String],
    mut events: Vec<(String, DateTime<Utc>)>,
    ended: DateTime<Utc>,
) -> Vec<(DateTime<Utc>, String)> {
    log.iter()
        .map(|line| {
            let at = match events.iter().position(|(l, _)| l == line) {
                Some(i) => events.remove(i).1,
                None => ended,
            };
            (at, line.clone())
        })
        .collect()
}

impl Service {
    pub async fn dashboard_job(&self, caller: &Caller, id: Uuid) -> Result<JobView, ServiceError> {
        let job = self.load_job(caller, id).await?;
        let l0s = self.db.refine_job_l0s(id).await?;
        let events = self.db.refine_job_log_times(id).await?;
        let log = timed_log(&job.log, events, job.finished_at.unwrap_or(job.updated_at));
        // Only a job in flight has calls asking for room (docs/jobs.md, "Rate limits").
        let waiting = if job.status.is_terminal() {
            Vec::new()
        } else {
            self.waiting_calls_of_job(id).await?
        };
        Ok(JobView {
            job,
            l0s,
            log,
            waiting,
        })
    }
}

impl Service {
    pub async fn dashboard_runs(
        &self,
        caller: &Caller,
        before: Option<Uuid>,
    ) -> Result<Page<RunSummary>, ServiceError> {
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
        let run = self.load_run(caller, id).await?;
        let filter = JobFilter {
            run_id: Some(id),
            ..JobFilter::default()
        };
        let mut jobs = self.db.refine_jobs(&filter, 1000, None).await?;
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
            history,
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
        let list = self.visible_list(caller, list_id).await?;
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
            .map(|(_, events)| events)
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

/// What a live page watches: it reloads its list when any of these change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LivePage {
    Overview,
    Jobs,
    Runs,
    Tracks,
}

impl LivePage {
    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "overview" => LivePage::Overview,
            "jobs" => LivePage::Jobs,
            "runs" => LivePage::Runs,
            "tracks" => LivePage::Tracks,
            _ => return None,
        })
    }

    /// The tables whose rows the page shows (the overview's task lists aside).
    fn tables(self) -> &'static [LiveTable] {
        match self {
            LivePage::Overview => &[LiveTable::Jobs, LiveTable::Runs],
            LivePage::Jobs => &[LiveTable::Jobs],
            LivePage::Runs => &[LiveTable::Runs],
            LivePage::Tracks => &[LiveTable::Tracks],
        }
    }
}

impl Service {
    /// A change marker of what a live page shows, in the caller's projects: each
    /// watched table's latest change (nanoseconds) and, for the overview, a digest
    /// of its task lists and their counts, joined by `-`. Every part is a bounded
    /// read (an index's last entry per project, the overview's counter rows), since
    /// each open page asks twice a second (docs/architecture.md, "Live pages"). The
    /// page carries the marker it was drawn from, so its stream can tell a change
    /// made before the stream began (`ui/live.rs`).
    pub async fn dashboard_live_marker(
        &self,
        caller: &Caller,
        page: LivePage,
    ) -> Result<String, ServiceError> {
        let mut marker = self.live_table_parts(caller, page).await?;
        if page == LivePage::Overview {
            let lists = self
                .db
                .task_list_counts(caller.allowed_projects(), OVERVIEW_LISTS)
                .await?;
            marker.push(lists_digest(&lists));
        }
        Ok(marker.join("-"))
    }

    /// The marker's parts for the tables the page watches: each one's latest
    /// change in the caller's projects, in nanoseconds.
    async fn live_table_parts(
        &self,
        caller: &Caller,
        page: LivePage,
    ) -> Result<Vec<String>, ServiceError> {
        let mut parts = Vec::new();
        for table in page.tables() {
            let changed = self
                .db
                .latest_change(*table, caller.allowed_projects())
                .await?;
            let nanos = changed.and_then(|at| at.timestamp_nanos_opt()).unwrap_or(0);
            parts.push(nanos.to_string());
        }
        Ok(parts)
    }
}

/// The overview's task lists and their counts as 16 hex digits: it changes when a
/// list is added or a count moves, which is all the overview shows of them.
fn lists_digest(lists: &[ListCounts]) -> String {
    use sha2::Digest as _;
    let mut hash = sha2::Sha256::new();
    for list in lists {
        hash.update(list.id.as_bytes());
        for (status, n) in &list.counts {
            hash.update([status.index() as u8]);
            hash.update(n.to_le_bytes());
        }
    }
    hash.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A bulk action on the job or run list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkAction {
    Cancel,
    Retry,
}

impl BulkAction {
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "cancel" => Some(BulkAction::Cancel),
            "retry" => Some(BulkAction::Retry),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Cancel => "cancel",
            BulkAction::Retry => "retry",
        }
    }
}

/// What a bulk action acts on: refine jobs (cancel, retry) or refine runs (cancel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkKind {
    Jobs,
    Runs,
}

impl BulkKind {
    /// The actions it offers.
    pub fn actions(self) -> &'static [BulkAction] {
        match self {
            BulkKind::Jobs => &[BulkAction::Cancel, BulkAction::Retry],
            BulkKind::Runs => &[BulkAction::Cancel],
        }
    }

    /// One of them, as a person reads it ("job", "run").
    pub fn noun(self) -> &'static str {
        match self {
            BulkKind::Jobs => "job",
            BulkKind::Runs => "run",
        }
    }
}

/// The job or run a bulk item names, as the page shows it.
#[derive(Clone)]
pub struct BulkSubject {
    pub id: Uuid,
    pub status: JobStatus,
    /// A job's phase; a run's project.
    pub what: Option<String>,
}

impl From<&StoredJob> for BulkSubject {
    fn from(job: &StoredJob) -> Self {
        BulkSubject {
            id: job.id,
            status: job.status,
            what: Some(job.phase_id.clone()),
        }
    }
}

impl From<&StoredRun> for BulkSubject {
    fn from(run: &StoredRun) -> Self {
        BulkSubject {
            id: run.id,
            status: run.status,
            what: run.project_id.clone(),
        }
    }
}

/// What a bulk action does (or would do) to one job or run.
pub struct BulkItem {
    pub id: String,
    /// The job or run, when the caller may see it.
    pub subject: Option<BulkSubject>,
    /// Done (or, before the action, going to be done).
    pub ok: bool,
    /// What happens or happened, or why it is refused.
    pub note: String,
    /// A retry's new job.
    pub new_job: Option<Uuid>,
}

impl Service {
    /// Each job or run's row: refused as `action` would refuse it, else what it
    /// would do (`act` false: the confirmation page, nothing changes) or what it
    /// did, through the same use cases as REST (`cancel_refine_job`,
    /// `retry_refine_job`, `cancel_refine_run`), each checked on its own.
    pub async fn dashboard_bulk(
        &self,
        caller: &Caller,
        kind: BulkKind,
        action: BulkAction,
        ids: &[String],
        act: bool,
    ) -> Vec<BulkItem> {
        let mut items = Vec::with_capacity(ids.len());
        for raw in ids {
            items.push(match self.bulk_subject(caller, kind, action, raw).await {
                Err(e) => BulkItem::refused(raw, None, refusal_text(e)),
                Ok((_, subject, Some(why))) => BulkItem::refused(raw, Some(subject), why),
                Ok((id, before, None)) if act => {
                    self.bulk_act(caller, kind, action, raw, id, before).await
                }
                Ok((_, subject, None)) => BulkItem::done(
                    raw,
                    subject,
                    match action {
                        BulkAction::Cancel => "will be cancelled".to_owned(),
                        BulkAction::Retry => {
                            "will be retried as a new job from the same request".to_owned()
                        }
                    },
                    None,
                ),
            });
        }
        items
    }

    /// Does `action` to one job or run the action does not refuse.
    async fn bulk_act(
        &self,
        caller: &Caller,
        kind: BulkKind,
        action: BulkAction,
        raw: &str,
        id: Uuid,
        before: BulkSubject,
    ) -> BulkItem {
        let done = match (kind, action) {
            (BulkKind::Jobs, BulkAction::Cancel) => self
                .cancel_refine_job(caller, id)
                .await
                .map(|job| (BulkSubject::from(&job), None)),
            (BulkKind::Runs, _) => self
                .cancel_refine_run(caller, id)
                .await
                .map(|run| (BulkSubject::from(&run), None)),
            (BulkKind::Jobs, BulkAction::Retry) => self
                .retry_refine_job(caller, id)
                .await
                .map(|new| (before.clone(), Some(new.id))),
        };
        match done {
            Ok((subject, Some(new))) => {
                BulkItem::done(raw, subject, format!("retried as job {new}"), Some(new))
            }
            Ok((subject, None)) => {
                let note = format!("cancel requested: now {}", subject.status.as_str());
                BulkItem::done(raw, subject, note, None)
            }
            Err(e) => BulkItem::refused(raw, Some(before), refusal_text(e)),
        }
    }

    /// The job or run `raw` names (its id parsed: a form's ids are raw text, and a
    /// bad one is refused on its own row), and why `action` would be refused, if it
    /// would.
    async fn bulk_subject(
        &self,
        caller: &Caller,
        kind: BulkKind,
        action: BulkAction,
        raw: &str,
    ) -> Result<(Uuid, BulkSubject, Option<String>), ServiceError> {
        let id = super::parse_id(
            raw,
            match kind {
                BulkKind::Jobs => "job",
                BulkKind::Runs => "run",
            },
        )?;
        let (subject, retried_by) = match kind {
            BulkKind::Jobs => {
                let job = self.refine_job(caller, id, None).await?;
                (BulkSubject::from(&job), job.retried_by)
            }
            BulkKind::Runs => {
                let run = self.refine_run(caller, id, None).await?;
                (BulkSubject::from(&run), None)
            }
        };
        let refusal = match action {
            BulkAction::Cancel => subject.status.is_terminal().then(|| {
                format!(
                    "it has ended ({}); nothing to cancel",
                    subject.status.as_str()
                )
            }),
            BulkAction::Retry if kind == BulkKind::Runs => {
                Some("a run is not retried as a whole; retry its phase jobs".to_owned())
            }
            BulkAction::Retry => crate::domain::job::retry_refusal(subject.status)
                .or_else(|| retried_by.map(|r| format!("it was retried already by job {r}"))),
        };
        Ok((id, subject, refusal))
    }
}

/// Why a bulk item was refused, for the page: a project refusal names no
/// project (as the other dashboard pages say it).
fn refusal_text(e: ServiceError) -> String {
    match e.kind {
        crate::service::ErrorKind::Forbidden => {
            "not yours: your token may not act on this project".to_owned()
        }
        _ => e.detail,
    }
}

impl BulkItem {
    fn refused(id: &str, subject: Option<BulkSubject>, why: String) -> Self {
        BulkItem {
            id: id.to_owned(),
            subject,
            ok: false,
            note: why,
            new_job: None,
        }
    }

    fn done(id: &str, subject: BulkSubject, note: String, new_job: Option<Uuid>) -> Self {
        BulkItem {
            id: id.to_owned(),
            subject: Some(subject),
            ok: true,
            note,
            new_job,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::timed_log;

    #[test]
    fn log_lines_take_their_events_times_and_the_rest_the_end() {
        let t = |s: i64| chrono::DateTime::from_timestamp(s, 0).unwrap();
        let log = vec!["a".to_owned(), "b".to_owned(), "a".to_owned()];
        let events = vec![("a".to_owned(), t(1)), ("a".to_owned(), t(2))];
        let timed = timed_log(&log, events, t(9));
        let times: Vec<_> = timed.iter().map(|(at, _)| at.timestamp()).collect();
        assert_eq!(times, [1, 9, 2]);
    }
}
