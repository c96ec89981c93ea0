//! The use cases, transport-neutral: the one place that orchestrates `domain`,
//! `db` and `jobs`. HTTP (`http/`), MCP (`mcp/`) and the dashboard (`ui/`) are thin
//! adapters over these functions and never touch `db/` themselves.
//!
//! # Contract
//! - Every use case is a method of [`Service`] (cheap to clone; build one per
//!   process with [`Service::new`]) that takes the [`Caller`] first, then its input,
//!   and returns typed output or one [`ServiceError`]. Three exceptions, each for a
//!   reason: the sessions use cases *make* a caller (from a token or a cookie);
//!   `render_plan_markdown` reads nothing (it formats a plan it is given); and the
//!   submissions `create_refine_job`, `create_refine_run` and `create_task_list`
//!   also take the body as sent (bytes), so that an idempotent retry is compared by
//!   the hash of what the transport received and every parse failure names its
//!   field the same way on each transport.
//! - Ids are typed: a use case takes a [`uuid::Uuid`], a
//!   [`crate::domain::track_state::TrackId`] or a [`task_refs::TaskRef`] its
//!   transport parsed in the adapter, with [`parse_id`] or [`tracks::parse_track_id`]
//!   for the ids a person types, so a bad one is the same `invalid_path` (or
//!   `invalid_track_id`) problem on REST, MCP and the CLI. The dashboard's bulk
//!   actions take the form's ids as text, so that each bad one is refused on its
//!   own row.
//! - Authorization is checked here, once, *before* anything is read or changed
//!   beyond what is needed to learn which project a resource belongs to: a caller
//!   limited to other projects gets `ErrorKind::Forbidden` /
//!   `ProblemCode::ForbiddenProject`.
//! - [`ServiceError`] carries an [`ErrorKind`] (the transport picks its status from
//!   it), a [`ProblemCode`] (the stable `code`), a `detail` for people and typed
//!   [`ProblemDetails`] (`field`, `errors`, …) to pass on unchanged.
//!
//! # Use cases
//! - task lists and dispatch ([`task_lists`]): `validate_task_list`,
//!   `create_task_list` (a gate rejection is a 422 with the retry verdict),
//!   `task_list`, `task_list_page` (paged), `ready_tasks`, `task_graph`,
//!   `update_task` (a task named by its server id or by its planner id within its
//!   list: [`task_refs`]).
//! - a list's event stream ([`task_list_events`]): `task_list_events`.
//! - claims ([`task_claims`]): `claim_task`, `heartbeat_task`, `task_history`.
//! - projects ([`projects`]): `project_status`, `project_usage`, `create_team`,
//!   `teams`.
//! - loop plans ([`loop_plans`]): `generate_loop_plan`, `render_plan_markdown`,
//!   `parse_loop_plan_yaml`, `parse_plan_markdown`.
//! - tracks ([`tracks`]): `track`, `track_history`, `import_track`, `step_track`
//!   (start or complete a step: a [`tracks::StepWrite`]).
//! - refine jobs ([`refine_jobs`]): `create_refine_job`, `refine_job` (with
//!   long-poll `wait`), `refine_jobs` (list), `refine_job_result`,
//!   `refine_job_assignments`, `refine_job_events` (a stream), `retry_refine_job`,
//!   `cancel_refine_job`.
//! - refine runs ([`refine_runs`]): `create_refine_run`, `refine_run` (with
//!   `wait`), `refine_run_result`, `cancel_refine_run`.
//! - the dashboard's reads and bulk actions ([`dashboard`]): `dashboard_overview`,
//!   `dashboard_task_list`, `dashboard_task_list_marker`, `dashboard_task_states`,
//!   `dashboard_task`, `dashboard_jobs`, `dashboard_job`, `dashboard_runs`,
//!   `dashboard_run`, `dashboard_tracks`, `dashboard_track`, `dashboard_live_marker`,
//!   `dashboard_bulk` (its preview too).
//! - rate limits ([`rate_limits`]): `rate_limits`, `set_rate_limit`,
//!   `dashboard_rate_limits` (the limits page).
//! - dashboard sessions ([`sessions`]): `sign_in`, `session_caller`, `sign_out`.
//! - webhooks ([`webhooks`]): `create_webhook`, `webhooks`, `webhook`,
//!   `delete_webhook`, `rotate_webhook_secret`, `webhook_deliveries`,
//!   `replay_delivery`, `webhooks_overview`.
//! - operations: [`Service::check_ready`], [`Service::begin_shutdown`].

mod caller;
pub mod dashboard;
mod error;
pub mod loop_plans;
pub mod projects;
pub mod rate_limits;
pub mod refine_jobs;
pub mod refine_runs;
pub mod sessions;
mod submission;
pub mod task_claims;
pub mod task_list_events;
pub mod task_lists;
pub mod task_refs;
pub mod tracks;
pub mod webhooks;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use uuid::Uuid;

pub use caller::Caller;
pub use error::{ErrorKind, GateRejection, ProblemCode, ProblemDetails, ServiceError};
pub use submission::{Accepted, MAX_WAIT_SECS, SubmissionOptions, canonical_hash, parse_id};

use crate::agents::Executors;
use crate::config::Settings;
use crate::db::refine_jobs::SubmitQueue;
use crate::db::{Database, DbError};
use crate::jobs::JobsHub;

/// Connect to the configured database and apply its migrations.
pub async fn open_database(settings: &Settings) -> Result<Database, DbError> {
    let db = Database::connect_with(&settings.database_url, settings.sqlite_synchronous).await?;
    db.migrate().await?;
    Ok(db)
}

/// What every use case needs: storage, settings, executors and this process's job
/// hub. Cheap to clone.
#[derive(Clone)]
pub struct Service {
    db: Database,
    settings: Arc<Settings>,
    /// Shared: `Service` is cloned for every request (axum's `State`), and copying
    /// the executor table allocated each time.
    executors: Arc<Executors>,
    /// Wake-ups and kill switches shared with this process's job workers.
    hub: Arc<JobsHub>,
    shutting_down: Arc<AtomicBool>,
    /// Submitted jobs are stored in groups (docs/jobs.md, "Group commit").
    submits: SubmitQueue,
    /// Each task list's project, once read ([`Service::list_project`]).
    list_projects: Arc<ListProjects>,
}

/// Task lists' projects as read (a list never changes project nor goes away), at
/// most [`ListProjects::CAPACITY`]: when full it starts again empty, a read each
/// for the lists still in use.
#[derive(Default)]
struct ListProjects(std::sync::Mutex<std::collections::HashMap<Uuid, Arc<str>>>);

impl ListProjects {
    const CAPACITY: usize = 65_536;

    fn get(&self, id: Uuid) -> Option<Arc<str>> {
        self.0.lock().ok()?.get(&id).cloned()
    }

    fn put(&self, id: Uuid, project: Arc<str>) {
        if let Ok(mut known) = self.0.lock() {
            if known.len() >= Self::CAPACITY {
                known.clear();
            }
            known.insert(id, project);
        }
    }
}

impl Service {
    pub fn new(db: Database, settings: Arc<Settings>, executors: Executors) -> Self {
        Service {
            submits: SubmitQueue::new(db.clone()),
            db,
            settings,
            executors: Arc::new(executors),
            hub: Arc::new(JobsHub::default()),
            shutting_down: Arc::new(AtomicBool::new(false)),
            list_projects: Arc::default(),
        }
    }

    pub fn settings(&self) -> &Arc<Settings> {
        &self.settings
    }

    /// The hub this process's job workers must share (see `jobs::start`).
    pub fn hub(&self) -> &Arc<JobsHub> {
        &self.hub
    }

    /// From now on long-polls and event streams end early and readiness fails.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Whether the database answers and its migrations are applied.
    pub async fn check_ready(&self) -> Result<(), DbError> {
        self.db.check_ready().await
    }

    /// A job was queued: wake this process's workers now and the other
    /// replicas' through NOTIFY (a hint; they poll anyway).
    fn wake_workers(&self) {
        self.hub.job_queued(&self.db);
    }
}
