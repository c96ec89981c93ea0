//! Refine jobs: submit a phase refine (idempotent with a key), read it (with a
//! long-poll), list, result, per-L0 records, the event stream, cancel. The work
//! itself happens in `jobs/`, on whichever replica claims it.

use futures::StreamExt;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::submission::{
    Accepted, ScopedKey, SubmissionOptions, WAIT_POLL, body_hash, budget_fields, fatal,
    idempotency_key, input_error, l0_rows, opt_str, resume_point, unknown_field, wake_for,
};
use super::{Caller, ErrorKind, ProblemCode, ProblemDetails, Service, ServiceError};
use crate::db::refine_jobs::{Created, JobFilter, NewRefineJob, RetryInsert};
use crate::domain::ids::Ident;
use crate::domain::job::JobStatus;
use crate::domain::refine::{context_from_value, is_valid_id, plan_from_value};
use crate::jobs::request::JobRequest;

pub use crate::domain::refine::{JobError, JobProgress, StoredJob, StoredL0};

const MAX_PAGE_SIZE: u32 = 100;
const DEFAULT_PAGE_SIZE: u32 = 20;
/// Events read from storage per look.
const EVENT_BATCH: i64 = 200;

// The shape for the OpenAPI document: `Service::create_refine_job` reads the raw
// body itself so that every parse failure is a `FATAL: failed to parse request body`.
/// A refine job for one phase: its own members and the shared submission options.
#[derive(ToSchema)]
pub struct CreateRefineJobRequest {
    /// The phase context (`context_{phase_id}.json`): `phase_id`, `assignments`,
    /// `peer_summaries`, optional `task_file_path` (read only inside
    /// `PLANGATE_WORKSPACE_ROOT`) or `task_text`.
    #[schema(value_type = Object)]
    pub context: Value,
    /// The refined plan (PlanDocument) with its `phases`.
    #[schema(value_type = Object)]
    pub refined_plan: Value,
    /// The task inline; the L0s get a server-side copy's path, never the text.
    pub task_text: Option<String>,
    /// Executor profile name; the server's `default_executor` when absent.
    pub executor: Option<String>,
    /// Write `{output_dir}/refine_contexts/{phase_id}_result.json` too (inside
    /// `PLANGATE_OUTPUT_ROOT`).
    pub output_dir: Option<String>,
    /// The refine run this job belongs to.
    pub run_id: Option<Uuid>,
    #[serde(flatten)]
    pub options: SubmissionOptions,
}

/// [`CreateRefineJobRequest`]'s own members.
pub(super) const CREATE_FIELDS: [&str; 6] = [
    "context",
    "refined_plan",
    "task_text",
    "executor",
    "output_dir",
    "run_id",
];

/// List filters and paging.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct JobListQuery {
    pub status: Option<JobStatus>,
    #[param(pattern = "^[A-Za-z0-9_-]+$")]
    pub phase_id: Option<String>,
    pub run_id: Option<Uuid>,
    #[param(value_type = Option<crate::domain::ids::Ident>)]
    pub project_id: Option<String>,
    #[param(value_type = Option<crate::domain::ids::Ident>)]
    pub team_pk: Option<String>,
    /// 1 to 100 (default 20).
    #[param(minimum = 1, maximum = 100)]
    pub page_size: Option<u32>,
    /// `next_page_token` of the previous page.
    #[param(value_type = Option<Uuid>)]
    pub page_token: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct JobPage {
    /// Newest first.
    pub jobs: Vec<StoredJob>,
    /// Pass as `page_token` for the next page; null on the last page.
    pub next_page_token: Option<String>,
}

/// One event of a job's stream: `state`, `progress` or `log`, numbered.
#[derive(Debug, Clone, Serialize)]
pub struct JobStreamEvent {
    /// The job's event number (resume after it).
    pub id: i64,
    pub event: String,
    pub data: Value,
    /// When it was written (the dashboard shows log lines with their time).
    #[serde(skip)]
    pub at: chrono::DateTime<chrono::Utc>,
}

/// A create, parsed once from the body as sent: typed, checked, ready to insert.
struct RefineJobCreate {
    context: crate::domain::refine::PhaseContext,
    request: JobRequest,
    executor: std::sync::Arc<crate::agents::Executor>,
    project_id: Option<Ident>,
    team_pk: Option<Ident>,
    run_id: Option<Uuid>,
    idempotency_key: Option<String>,
    request_hash: String,
    budget: crate::domain::usage::Budget,
}

impl Service {
    /// A job to insert for one phase, run by `executor` with this server's attempts
    /// and L0 batches. Its worker's span continues the trace of the request at hand,
    /// on any replica (docs/observability.md, "Context in and out"). No key, no run,
    /// no retry: the caller sets what applies.
    pub(super) fn new_refine_job(
        &self,
        context: &crate::domain::refine::PhaseContext,
        request: Value,
        executor: &crate::agents::Executor,
        project_id: Option<String>,
        team_pk: Option<String>,
        budget: crate::domain::usage::Budget,
    ) -> NewRefineJob {
        NewRefineJob {
            id: Uuid::now_v7(),
            l0s: l0_rows(context, self.settings.l0_concurrency),
            phase_id: context.phase_id.clone(),
            run_id: None,
            project_id,
            team_pk,
            executor: executor.name().to_owned(),
            executor_kind: executor.kind(),
            request,
            idempotency_key: None,
            request_hash: None,
            max_attempts: self.settings.max_attempts,
            budget,
            retry_of: None,
            trace_parent: crate::telemetry::current_traceparent(),
        }
    }

    /// Parses and checks a create: nothing is queued unless all of it is usable.
    fn parse_create(
        &self,
        body: &[u8],
        key_header: Option<&[u8]>,
    ) -> Result<RefineJobCreate, ServiceError> {
        let value: Value = serde_json::from_slice(body).map_err(fatal)?;
        let Value::Object(body) = value else {
            return Err(fatal("the body must be a JSON object"));
        };
        if let Some((field, error)) = unknown_field(&body, &CREATE_FIELDS) {
            return Err(error.field(field));
        }
        let context_value = body
            .get("context")
            .filter(|v| !v.is_null())
            .ok_or_else(|| fatal("context: missing").field("context"))?;
        let context = context_from_value("request body", context_value)
            .map_err(|e| input_error(e, "context"))?;
        let plan_value = body
            .get("refined_plan")
            .filter(|v| !v.is_null())
            .ok_or_else(|| fatal("refined_plan: missing").field("refined_plan"))?;
        plan_from_value("request body", plan_value).map_err(|e| input_error(e, "refined_plan"))?;

        let executor = self.resolve_executor(opt_str(&body, "executor")?)?;

        let task_text = opt_str(&body, "task_text")?.map(str::to_owned);
        let task_file_path = match context.task_file_path.as_deref() {
            None => None,
            Some(_) if task_text.is_some() => {
                return Err(
                    fatal("give task_text or context.task_file_path, not both").field("task_text")
                );
            }
            Some(path) => Some(self.confine_task_file(path)?),
        };
        let output_dir = self.confine_output_dir(opt_str(&body, "output_dir")?)?;
        let project_id = Ident::parse_optional("project_id", opt_str(&body, "project_id")?)?;
        let team_pk = Ident::parse_optional("team_pk", opt_str(&body, "team_pk")?)?;
        let run_id = match opt_str(&body, "run_id")? {
            None => None,
            Some(text) => Some(
                text.parse::<Uuid>()
                    .map_err(|_| fatal("run_id: must be a UUID").field("run_id"))?,
            ),
        };
        let idempotency_key = idempotency_key(key_header, opt_str(&body, "idempotency_key")?)?;
        let budget = budget_fields(&body)?;

        let request_hash = body_hash(&body);
        Ok(RefineJobCreate {
            request: JobRequest {
                context: context_value.clone(),
                refined_plan: Some(plan_value.clone()),
                task_file_path,
                task_text,
                output_dir,
            },
            context,
            executor,
            project_id,
            team_pk,
            run_id,
            idempotency_key,
            request_hash,
            budget,
        })
    }

    /// The caller may act on the job's project, and on its run's when it joins one
    /// (the job's result is merged into the run).
    async fn authorize_create(
        &self,
        caller: &Caller,
        create: &RefineJobCreate,
    ) -> Result<(), ServiceError> {
        caller.check_optional_project(create.project_id.as_ref().map(Ident::as_str))?;
        if let Some(run_id) = create.run_id {
            let Some(run) = self.db.refine_run(run_id).await? else {
                return Err(ServiceError::unprocessable(
                    ProblemCode::UnknownRun,
                    format!("run_id {run_id} names no refine run"),
                )
                .field("run_id"));
            };
            caller.check_optional_project(run.project_id.as_deref())?;
        }
        Ok(())
    }

    /// Submit a refine job for one phase: the JSON body as sent and the raw
    /// `Idempotency-Key` (a transport header, if any). A retry with the same key and
    /// body answers the original job (`replayed`); another body is
    /// `idempotency_key_reused`. The key is looked up once: a retry of a create that
    /// went through replays it, daily limit or not; a new key is inserted (and a
    /// create racing it with the same key finds the winner's job in the insert).
    pub async fn create_refine_job(
        &self,
        caller: &Caller,
        body: &[u8],
        key_header: Option<&[u8]>,
    ) -> Result<Accepted<StoredJob>, ServiceError> {
        let create = self.parse_create(body, key_header)?;
        self.authorize_create(caller, &create).await?;
        let key = create
            .idempotency_key
            .as_deref()
            .map(|key| ScopedKey::new(create.project_id.as_ref().map(Ident::as_str), caller, key));
        if let Some(key) = &key
            && let Some(first) = self.db.refine_job_by_key(key.as_stored()).await?
        {
            return Accepted::from_created(
                self.db.replay(first, Some(&create.request_hash)).await?,
            );
        }
        self.check_daily_limit(create.project_id.as_ref()).await?;
        let job = self.new_refine_job(
            &create.context,
            create.request.to_value(),
            &create.executor,
            create.project_id.map(|p| p.as_str().to_owned()),
            create.team_pk.map(|t| t.as_str().to_owned()),
            create.budget,
        );
        let created = self
            .submits
            .create(NewRefineJob {
                run_id: create.run_id,
                idempotency_key: key.map(ScopedKey::into_stored),
                request_hash: Some(create.request_hash),
                ..job
            })
            .await?;
        if let Created::New(_) = &created {
            metrics::counter!("refine_jobs_created_total").increment(1);
            self.wake_workers();
        }
        Accepted::from_created(created)
    }

    /// The job, if the caller may see its project.
    pub(super) async fn load_job(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<StoredJob, ServiceError> {
        let job = self.db.refine_job(id).await?;
        caller.visible(job, "refine job", &id.to_string(), |j| {
            j.project_id.as_deref()
        })
    }

    /// A refine job. With `wait` seconds (at most 30) the answer comes as soon as
    /// the job changes state or progresses, or after the wait, unchanged.
    pub async fn refine_job(
        &self,
        caller: &Caller,
        id: Uuid,
        wait: Option<u64>,
    ) -> Result<StoredJob, ServiceError> {
        let job = self.load_job(caller, id).await?;
        self.long_poll(
            (job.version, job.status),
            job,
            wait,
            |j| j == id,
            || self.db.refine_job_version(id),
            || self.load_job(caller, id),
        )
        .await
    }

    /// Refine jobs the caller may see, newest first, filtered, in cursor pages.
    pub async fn refine_jobs(
        &self,
        caller: &Caller,
        query: JobListQuery,
    ) -> Result<JobPage, ServiceError> {
        let page_size = query.page_size.unwrap_or(DEFAULT_PAGE_SIZE);
        if !(1..=MAX_PAGE_SIZE).contains(&page_size) {
            return Err(ServiceError::bad_request(
                ProblemCode::InvalidQuery,
                format!("page_size must be between 1 and {MAX_PAGE_SIZE}"),
            ));
        }
        let after = match query.page_token.as_deref() {
            None => None,
            Some(token) => Some(token.parse::<Uuid>().map_err(|_| {
                ServiceError::bad_request(
                    ProblemCode::InvalidQuery,
                    "page_token is not a token this server issued",
                )
            })?),
        };
        let filter_id = |field: &'static str, value: Option<String>| {
            Ident::parse_optional(field, value.as_deref())
                .map(|id| id.map(|i| i.as_str().to_owned()))
                .map_err(|e| {
                    ServiceError::bad_request(ProblemCode::InvalidQuery, e.to_string()).field(field)
                })
        };
        if let Some(phase) = query.phase_id.as_deref().filter(|p| !is_valid_id(p)) {
            return Err(ServiceError::bad_request(
                ProblemCode::InvalidQuery,
                format!("phase_id {phase:?} is not an id ([A-Za-z0-9_-]+)"),
            )
            .field("phase_id"));
        }
        let filter = JobFilter {
            status: query.status,
            phase_id: query.phase_id,
            run_id: query.run_id,
            project_id: filter_id("project_id", query.project_id)?,
            team_pk: filter_id("team_pk", query.team_pk)?,
            allowed_projects: caller.allowed_projects().map(<[String]>::to_vec),
        };
        let mut jobs = self.db.refine_jobs(&filter, page_size + 1, after).await?;
        let next_page_token = if jobs.len() > page_size as usize {
            jobs.truncate(page_size as usize);
            jobs.last().map(|j| j.id.to_string())
        } else {
            None
        };
        Ok(JobPage {
            jobs,
            next_page_token,
        })
    }

    /// The result document `{schema_version: 1, assignments}` of a succeeded job;
    /// `job_not_succeeded` (with `job_status`) before.
    pub async fn refine_job_result(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<Value, ServiceError> {
        let job = self.load_job(caller, id).await?;
        match (job.status, job.result) {
            (JobStatus::Succeeded, Some(result)) => Ok(result),
            (status, _) => Err(ServiceError::conflict(
                ProblemCode::JobNotSucceeded,
                format!(
                    "the job is {}; a result exists once it has succeeded",
                    status.as_str()
                ),
            )
            .with_details(ProblemDetails::JobStatus(status))),
        }
    }

    /// Per-L0 records, in natural assignment order.
    pub async fn refine_job_assignments(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<Vec<StoredL0>, ServiceError> {
        self.load_job(caller, id).await?;
        let l0s = self.db.refine_job_l0s(id).await?;
        Ok(l0s)
    }

    /// The job's events after `last_event_id` (raw, as a transport received it;
    /// absent = from the start), then new ones as they come; the stream ends after
    /// the terminal `state` event (or when the server shuts down).
    pub async fn refine_job_events(
        &self,
        caller: &Caller,
        id: Uuid,
        last_event_id: Option<&[u8]>,
    ) -> Result<BoxStream<'static, JobStreamEvent>, ServiceError> {
        self.load_job(caller, id).await?;
        let number = |v: &str| v.parse::<i64>().ok().filter(|n| *n >= 0);
        let after = resume_point(
            last_event_id,
            number,
            "Last-Event-ID must be an event number",
        )?
        .unwrap_or(0);
        let stream = futures::stream::unfold(
            (self.clone(), after, false),
            move |(service, mut after, mut done)| async move {
                let mut last_look = false;
                loop {
                    if done {
                        return None;
                    }
                    let events = match service.db.refine_job_events(id, after, EVENT_BATCH).await {
                        Ok(events) => events,
                        Err(e) => {
                            tracing::warn!(error = %e, "event stream: reading events failed");
                            return None;
                        }
                    };
                    if !events.is_empty() {
                        let mut out = Vec::with_capacity(events.len());
                        for e in events {
                            after = e.seq;
                            let terminal = e.event == "state"
                                && e.data
                                    .0
                                    .get("status")
                                    .and_then(Value::as_str)
                                    .and_then(JobStatus::parse)
                                    .is_some_and(JobStatus::is_terminal);
                            done |= terminal;
                            out.push(JobStreamEvent {
                                id: e.seq,
                                event: e.event,
                                data: e.data.0,
                                at: e.created_at,
                            });
                        }
                        return Some((futures::stream::iter(out), (service, after, done)));
                    }
                    if last_look {
                        return None;
                    }
                    match service.db.refine_job_version(id).await {
                        Ok(Some((_, status))) if !status.is_terminal() => {}
                        // Terminal: its last events were committed with the status,
                        // maybe just after the read above, so read once more.
                        Ok(Some(_)) => {
                            last_look = true;
                            continue;
                        }
                        // Deleted or unreadable: end.
                        _ => return None,
                    }
                    if service.is_shutting_down() {
                        return None;
                    }
                    let mut wakeups = service.hub.subscribe();
                    let ours = |j: Uuid| j == id;
                    tokio::select! {
                        _ = wake_for(&mut wakeups, &ours) => {}
                        _ = tokio::time::sleep(WAIT_POLL) => {}
                    }
                }
            },
        );
        Ok(stream.flatten().boxed())
    }

    /// Retry an ended job that did not succeed (failed, budget-stopped or
    /// cancelled): a new job from the same stored request, with the same executor,
    /// project, cycle and budget, that names the original in `retry_of` (the
    /// original shows it as `retried_by`). One retry per job; a run's phase job is
    /// retried on its own, outside the run (the run merged without it already).
    /// `job_not_retryable` (409) says why not and what to do instead.
    pub async fn retry_refine_job(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<StoredJob, ServiceError> {
        // Authorization first: a refused caller learns nothing of the job's state.
        let job = self.load_job(caller, id).await?;
        let not_retryable = |message: String| {
            ServiceError::conflict(ProblemCode::JobNotRetryable, message)
                .with_details(ProblemDetails::JobStatus(job.status))
        };
        if let Some(why) = crate::domain::job::retry_refusal(job.status) {
            return Err(not_retryable(why));
        }
        if let Some(retry) = job.retried_by {
            return Err(not_retryable(format!(
                "the job was retried already by job {retry}: follow that one \
                 (GET /v1/refine-jobs/{retry}), or retry it if it ended without success"
            )));
        }
        let gone = || ServiceError::not_found("refine job", &id.to_string());
        let request = self.db.refine_job_request(id).await?.ok_or_else(gone)?;
        let stored: JobRequest = serde_json::from_value(request.clone()).map_err(|e| {
            ServiceError::new(
                ErrorKind::Internal,
                ProblemCode::Internal,
                format!("job {id}'s stored request does not read: {e}"),
            )
        })?;
        let context = context_from_value("stored request", &stored.context).map_err(|e| {
            ServiceError::new(
                ErrorKind::Internal,
                ProblemCode::Internal,
                format!("job {id}'s stored context does not read: {e}"),
            )
        })?;
        let executor = self
            .resolve_executor(Some(job.executor.as_str()))
            .map_err(|e| {
                not_retryable(format!(
                    "its executor profile {:?} is no longer configured ({}); submit a new job \
                 with another executor",
                    job.executor, e.detail
                ))
            })?;
        let project = job
            .project_id
            .as_deref()
            .map(|p| Ident::parse("project_id", p))
            .transpose()?;
        self.check_daily_limit(project.as_ref()).await?;
        let new = NewRefineJob {
            retry_of: Some(id),
            ..self.new_refine_job(
                &context,
                request,
                &executor,
                job.project_id.clone(),
                job.team_pk.clone(),
                job.budget.unwrap_or_default(),
            )
        };
        match self.db.insert_retry(id, new).await? {
            RetryInsert::Inserted(created) => {
                metrics::counter!("refine_jobs_created_total").increment(1);
                self.wake_workers();
                Ok(*created)
            }
            RetryInsert::AlreadyRetried(retry) => Err(not_retryable(format!(
                "the job was retried already by job {retry}: follow that one \
                 (GET /v1/refine-jobs/{retry})"
            ))),
            RetryInsert::Gone => Err(gone()),
        }
    }

    /// Cancel a job. Idempotent: a terminal job is returned unchanged; a queued one
    /// is cancelled at once; a running one goes `cancelling` while its L0 process
    /// groups are killed, then `cancelled`.
    pub async fn cancel_refine_job(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<StoredJob, ServiceError> {
        // Authorization before the cancel: a refused caller changes nothing.
        self.load_job(caller, id).await?;
        self.cancel_job(id)
            .await?
            .ok_or_else(|| ServiceError::not_found("refine job", &id.to_string()))?;
        self.load_job(caller, id).await
    }

    /// Cancels one job: wakes its worker (here, or on another replica through
    /// NOTIFY), and merges its run when that was the run's last job. `None` for an
    /// unknown job.
    pub(super) async fn cancel_job(&self, id: Uuid) -> Result<Option<JobStatus>, ServiceError> {
        let Some(status) = self.db.cancel_refine_job(id).await? else {
            return Ok(None);
        };
        if status == JobStatus::Cancelling {
            self.hub.cancel_local(id);
            if let Err(e) = self.db.notify_job_cancel(id).await {
                tracing::warn!(error = %e, "cancel notification failed; the worker's heartbeat will see it");
            }
        }
        if status == JobStatus::Cancelled
            && let Some(run_id) = self.db.refine_job(id).await?.and_then(|j| j.run_id)
        {
            crate::jobs::runs::merge_if_due(&self.db, run_id).await?;
        }
        self.hub.job_changed(id);
        Ok(Some(status))
    }
}

#[cfg(test)]
mod tests {
    use super::super::submission::tests::assert_documents_exactly;

    #[test]
    fn the_create_schema_documents_exactly_the_accepted_members() {
        assert_documents_exactly::<super::CreateRefineJobRequest>(&super::CREATE_FIELDS);
    }
}
