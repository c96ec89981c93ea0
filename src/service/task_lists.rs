//! Task lists and dispatch: gate (dry run), persist with the retry verdict, read,
//! ready tasks, graph, task status changes with cascade-abandon.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::submission::{Accepted, ScopedKey, idempotency_key, key_reused};
use super::{Caller, GateRejection, ProblemCode, ProblemDetails, Service, ServiceError};
use crate::db::task_lists::{
    Keyed, KeyedOutcome, NewTaskList, ReadyTake, StoredTaskListKey, TaskChange, TaskListKey,
    TransitionOutcome, dispatch_view, now,
};
use crate::domain::dispatch::{
    self, AbandonCategory, GraphFormat, GraphNode, MAX_SUMMARY_WAVES, Next, ReadyMode, TaskStatus,
    WAIT_RETRY_SECS, WaveSummaryGraph, WaveTally, render_graph, render_wave_summary,
};
use crate::domain::gating::{
    self, Outcome, ParsedTaskList, TaskListSource, Validation, ValidationReport, Violation,
};
use crate::domain::ids::Ident;
use crate::domain::retry;
use crate::telemetry;

use super::task_claims::{NextAnswer, STALE_READ_RETRIES, held_by_other, next_answer};
use super::task_refs::TaskRef;
pub use crate::domain::dispatch::{StoredTask, StoredTaskList};

/// Notes are free text for people; the bound keeps rows small. Characters (what
/// JSON Schema's `maxLength` counts), so the OpenAPI document states it exactly.
pub const MAX_NOTES_CHARS: usize = 64 * 1024;

/// Most tasks a page holds (`?limit=`).
pub const MAX_PAGE_TASKS: u32 = 1000;
/// Lists of up to this many tasks answer whole when no page is asked for (as
/// before paging existed); larger ones answer their first page.
pub const WHOLE_LIST_TASKS: u64 = 10_000;

/// A dry-run gate: nothing is stored, no retry is counted.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidateRequest {
    /// The task list as a JSON array of task objects. Give this or `planner_output`.
    /// Entries that are not task objects are gate violations (`synthesis_failure`),
    /// not malformed requests.
    #[schema(value_type = Object, required = false)]
    pub tasks: Option<ParsedTaskList>,
    /// The planner's raw text; the last ```json (or untagged) fence wins.
    #[schema(value_type = String, required = false)]
    pub planner_output: Option<String>,
    /// Repository paths that pre-exist (satisfy reads).
    #[serde(default)]
    pub existing_files: Vec<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTaskListRequest {
    #[schema(value_type = Ident)]
    pub project_id: String,
    /// The orchestrator's id of this planning cycle; omit for the project-wide flow.
    #[schema(value_type = Option<Ident>)]
    pub team_pk: Option<String>,
    #[schema(value_type = Ident)]
    pub created_by: String,
    /// The task list as a JSON array of task objects. Give this or `planner_output`.
    /// Entries that are not task objects are gate violations (`synthesis_failure`),
    /// not malformed requests.
    #[schema(value_type = Object, required = false)]
    pub tasks: Option<ParsedTaskList>,
    /// The planner's raw text; the last ```json (or untagged) fence wins.
    #[schema(value_type = String, required = false)]
    pub planner_output: Option<String>,
    #[serde(default)]
    pub existing_files: Vec<String>,
    /// Same as the `Idempotency-Key` header: a retry with the same key and body
    /// answers the first create's answer again (docs/api.md, "Idempotency").
    pub idempotency_key: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct ReadyResponse {
    pub mode: ReadyMode,
    /// Barrier: the active wave; pipeline: the lowest wave offered. Null when no
    /// task is offered in pipeline mode, or every task is terminal: read `next`
    /// for what to do.
    pub wave: Option<i64>,
    /// Barrier: in list order; pipeline: in `(wave, list)` order. The first
    /// `limit` of them, or all while at most 10,000 are ready (else the first
    /// 1,000) without `limit`.
    pub tasks: Vec<StoredTask>,
    /// `true` when more tasks are ready than `tasks` lists: claim (or start) these
    /// and ask again for the next ones. Absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more_ready: bool,
    #[serde(flatten)]
    pub next: NextAnswer,
}

/// A status change of one task.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskUpdate {
    /// Target status: pending → running → done | failed; any non-terminal → abandoned.
    pub status: TaskStatus,
    /// Required with `abandoned`, refused otherwise.
    pub abandon_category: Option<AbandonCategory>,
    pub notes: Option<String>,
    /// Who makes the change. Required (the holder) while the task is claimed.
    pub holder: Option<String>,
    /// Change a task claimed by someone else (recorded in its history).
    #[serde(default)]
    pub force: bool,
}

/// The schema states the pairing rule the handler enforces: `abandon_category` is
/// required with `abandoned` and absent (or null) otherwise — so that every body the
/// schema allows passes the handler's checks, and the other way round.
impl utoipa::PartialSchema for TaskUpdate {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{
            AdditionalProperties, ObjectBuilder, OneOfBuilder, SchemaType, Type,
        };
        let status = |targets: &[TaskStatus]| {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(targets.iter().map(|s| s.as_str())))
        };
        let notes = ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
            .max_length(Some(MAX_NOTES_CHARS))
            .description(Some("Free text for people, at most 65536 characters."))
            .build();
        let closed = || Some(AdditionalProperties::FreeForm(false));
        let holder = ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
            .description(Some(
                "Who makes the change (letters, digits, `.`, `_`, `-`). While the task is \
                 claimed it must be the claim's holder, or the change is 409 `task_claimed`.",
            ))
            .build();
        let force = ObjectBuilder::new()
            .schema_type(Type::Boolean)
            .description(Some(
                "Override another holder's claim (an orchestrator taking over); recorded in \
                 the task's history.",
            ))
            .build();
        let abandon = ObjectBuilder::new()
            .title(Some("abandon"))
            .property("status", status(&[TaskStatus::Abandoned]))
            .property(
                "abandon_category",
                <AbandonCategory as utoipa::PartialSchema>::schema(),
            )
            .property("notes", notes.clone())
            .property("holder", holder.clone())
            .property("force", force.clone())
            .required("status")
            .required("abandon_category")
            .additional_properties(closed());
        let others: Vec<TaskStatus> = TaskStatus::ALL
            .into_iter()
            .filter(|s| *s != TaskStatus::Abandoned)
            .collect();
        let move_on = ObjectBuilder::new()
            .title(Some("transition"))
            .property("status", status(&others))
            .property(
                "abandon_category",
                ObjectBuilder::new().schema_type(Type::Null),
            )
            .property("notes", notes)
            .property("holder", holder)
            .property("force", force)
            .required("status")
            .additional_properties(closed());
        OneOfBuilder::new()
            .description(Some(
                "Target status: pending → running → done | failed; any non-terminal → \
                 abandoned. `abandon_category` is required with `abandoned` and refused \
                 otherwise.",
            ))
            .item(abandon)
            .item(move_on)
            .into()
    }
}

impl ToSchema for TaskUpdate {}

#[derive(Serialize, ToSchema)]
pub struct TaskUpdated {
    #[serde(flatten)]
    pub task: StoredTask,
    /// Server ids of the dependents this change abandoned (category `blocked`).
    pub cascaded: Vec<Uuid>,
}

/// Read straight into tasks while the body is parsed (no intermediate JSON tree):
/// the gate's answer must cost little more than reading the request.
fn source(
    tasks: Option<ParsedTaskList>,
    planner_output: &Option<String>,
) -> Result<TaskListSource<'_>, ServiceError> {
    match (tasks, planner_output) {
        (Some(tasks), None) => Ok(TaskListSource::Parsed(tasks)),
        (None, Some(text)) => Ok(TaskListSource::PlannerOutput(text)),
        (Some(_), Some(_)) => Err(ServiceError::unprocessable(
            ProblemCode::InvalidBody,
            "give either `tasks` or `planner_output`, not both",
        )),
        (None, None) => Err(ServiceError::unprocessable(
            ProblemCode::InvalidBody,
            "missing field `tasks` (a JSON array) or `planner_output` (the planner's text)",
        )),
    }
}

/// The idempotency hash of a create: the body as sent, without its
/// `idempotency_key`, keys sorted (a retry that reorders members is the same body).
fn sent_body_hash(body: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(map)) => super::submission::body_hash(&map),
        Ok(other) => super::submission::canonical_hash(&other),
        // Not reached: the transports parse the body before the use case runs.
        Err(_) => super::submission::canonical_hash(&serde_json::Value::from(
            String::from_utf8_lossy(body).into_owned(),
        )),
    }
}

/// The span of one gating (docs/observability.md): only when traces are on, so
/// the gate's hot path pays nothing more without them.
fn gate_span() -> tracing::Span {
    if !telemetry::traces_on() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        "gate_task_list",
        otel.name = "gate task list",
        plangate.tasks = tracing::field::Empty,
        plangate.waves = tracing::field::Empty,
        plangate.violations = tracing::field::Empty,
    )
}

/// The gating's counts on its span: tasks, waves, and violations in all and by code.
fn record_gate<'a, C: std::fmt::Display + 'a>(
    span: &tracing::Span,
    tasks: usize,
    waves: usize,
    errors_by_code: impl Iterator<Item = (&'a C, &'a usize)>,
) {
    if !telemetry::traces_on() {
        return;
    }
    // i64: the exporter's integer type (an unsigned field would be sent as text).
    span.record("plangate.tasks", tasks as i64);
    span.record("plangate.waves", waves as i64);
    let mut total = 0;
    for (code, n) in errors_by_code {
        total += n;
        telemetry::set_attribute(span, format!("plangate.violations.{code}"), *n as i64);
    }
    span.record("plangate.violations", total as i64);
}

fn count_outcome(outcome: Outcome, errors: &[Violation], route: &'static str) {
    let outcome = match outcome {
        Outcome::Valid => "valid",
        Outcome::SynthesisFailure => "synthesis_failure",
        Outcome::DagInvalid => "dag_invalid",
    };
    metrics::counter!("gating_outcomes_total", "route" => route, "outcome" => outcome).increment(1);
    for error in errors {
        metrics::counter!("gating_violations_total", "code" => error.code.to_string()).increment(1);
    }
}

/// The 422 of a rejected list: the first `max_errors` violations with the counts of
/// all, the retry verdict and the re-prompt.
fn rejection(validation: &Validation, rejections: u32, max_errors: usize) -> ServiceError {
    let synthesis_failure = matches!(validation.outcome, Outcome::SynthesisFailure);
    let verdict = retry::verdict(synthesis_failure, rejections);
    let (code, detail) = if synthesis_failure {
        (
            ProblemCode::SynthesisFailure,
            "the planner output could not be read as a task list",
        )
    } else {
        (
            ProblemCode::DagInvalid,
            "the task list violates the DAG gates",
        )
    };
    let first = validation
        .errors
        .first()
        .map(|e| e.message.as_str())
        .unwrap_or("");
    ServiceError::unprocessable(code, format!("{detail}: {first}")).with_details(
        ProblemDetails::Gate(Box::new(GateRejection {
            report: validation.report_within(max_errors),
            verdict,
            reprompt: validation.reprompt_within(max_errors),
            replayed: false,
        })),
    )
}

impl Service {
    /// Gate a task list without storing it. Touches no project, so any caller may.
    pub fn validate_task_list(
        &self,
        _caller: &Caller,
        request: ValidateRequest,
    ) -> Result<ValidationReport, ServiceError> {
        let source = source(request.tasks, &request.planner_output)?;
        let span = gate_span();
        let (outcome, report) =
            span.in_scope(|| gating::validate_report(source, &request.existing_files));
        let tasks = report.waves.iter().map(Vec::len).sum();
        record_gate(&span, tasks, report.waves.len(), report.error_counts.iter());
        count_outcome(outcome, &report.errors, "validate");
        Ok(report.capped(self.settings().max_gating_errors))
    }

    /// Gate a task list and, if it passes, store it all or nothing. A rejection is
    /// counted per `(project_id, team_pk)` and answered with the retry verdict.
    ///
    /// With an idempotency key (`key_header`, raw, or the body's field) the create
    /// is safe to retry: a retry with the same body answers what the first create
    /// answered — the same list (`replayed`), or the same rejection with the same
    /// retry count (a replay counts nothing and resets nothing) — and another body
    /// is `idempotency_key_reused`. `body` is the request as sent, hashed only when
    /// a key came with it.
    pub async fn create_task_list(
        &self,
        caller: &Caller,
        request: CreateTaskListRequest,
        key_header: Option<&[u8]>,
        body: &[u8],
    ) -> Result<Accepted<StoredTaskList>, ServiceError> {
        let project_id = Ident::parse("project_id", &request.project_id)?;
        // Before the gate: a refused caller must not move the project's retry count.
        caller.check_project(project_id.as_str())?;
        let team_pk = Ident::parse_optional("team_pk", request.team_pk.as_deref())?;
        let created_by = Ident::parse("created_by", &request.created_by)?;
        let key = idempotency_key(key_header, request.idempotency_key.as_deref())?
            .map(|key| ScopedKey::new(Some(project_id.as_str()), caller, &key));
        let request_hash = key.as_ref().map(|_| sent_body_hash(body));
        let keyed = key
            .as_ref()
            .zip(request_hash.as_deref())
            .map(|(key, request_hash)| TaskListKey {
                key: key.as_stored(),
                request_hash,
            });
        let first = match keyed {
            Some(keyed) => self.db.task_list_key(keyed.key).await?,
            None => None,
        };
        let source = source(request.tasks, &request.planner_output)?;
        let span = gate_span();
        let validation = span.in_scope(|| gating::validate(source, &request.existing_files));
        if telemetry::traces_on() {
            let mut by_code: std::collections::BTreeMap<String, usize> = Default::default();
            for error in &validation.errors {
                *by_code.entry(error.code.to_string()).or_default() += 1;
            }
            record_gate(
                &span,
                validation.tasks.len(),
                validation.waves.len(),
                by_code.iter(),
            );
        }
        drop(span);
        if let Some(first) = first {
            return self
                .replay_task_list(caller, first, request_hash.as_deref(), &validation)
                .await;
        }
        count_outcome(validation.outcome, &validation.errors, "create");

        let team = team_pk.as_ref().map(Ident::as_str);
        if !validation.is_valid() {
            return match self
                .db
                .record_rejection(project_id.as_str(), team, keyed)
                .await?
            {
                Keyed::Done(rejections) => Err(rejection(
                    &validation,
                    rejections,
                    self.settings().max_gating_errors,
                )),
                Keyed::Taken(first) => {
                    self.replay_task_list(caller, first, request_hash.as_deref(), &validation)
                        .await
                }
            };
        }
        let new = NewTaskList {
            project_id: project_id.as_str(),
            team_pk: team,
            created_by: created_by.as_str(),
            tasks: &validation.tasks,
        };
        match self.db.create_task_list(new, keyed).await? {
            Keyed::Done(list) => Ok(Accepted {
                value: list,
                replayed: false,
            }),
            Keyed::Taken(first) => {
                self.replay_task_list(caller, first, request_hash.as_deref(), &validation)
                    .await
            }
        }
    }

    /// The answer of a create whose key was taken first: that create's answer again
    /// (its list, or its rejection with the retry count it showed: `validation` is
    /// this body's, which is that body, as the hashes match), or
    /// `idempotency_key_reused` for another body.
    async fn replay_task_list(
        &self,
        caller: &Caller,
        first: StoredTaskListKey,
        request_hash: Option<&str>,
        validation: &Validation,
    ) -> Result<Accepted<StoredTaskList>, ServiceError> {
        if request_hash != Some(first.request_hash.as_str()) {
            return Err(key_reused());
        }
        match first.outcome {
            KeyedOutcome::Accepted(id) => Ok(Accepted {
                value: self.load_list(caller, id).await?,
                replayed: true,
            }),
            KeyedOutcome::Rejected(rejections) => {
                Err(rejection(validation, rejections, self.settings().max_gating_errors).replayed())
            }
        }
    }

    /// The list as created, with current task statuses.
    pub async fn task_list(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<StoredTaskList, ServiceError> {
        self.load_list(caller, id).await
    }

    /// `GET /v1/task-lists/{id}`: the whole list, or a page of it (docs/api.md,
    /// "Large lists"). A page reads only its tasks (and their edges), through the
    /// `(task_list_id, position)` index; the cursor is the position after which the
    /// next page starts.
    pub async fn task_list_page(
        &self,
        caller: &Caller,
        id: Uuid,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<StoredTaskList, ServiceError> {
        let limit = page_limit(limit)?;
        let after = page_cursor(cursor)?;
        if limit.is_none() && cursor.is_none() {
            self.check_list_visible(caller, id).await?;
            if self.db.task_count(id).await? <= WHOLE_LIST_TASKS {
                return self.task_list(caller, id).await;
            }
        }
        self.task_page(caller, id, None, after, limit.unwrap_or(MAX_PAGE_TASKS))
            .await
    }

    /// The `limit` tasks after position `after` of list `id` (of one wave, in
    /// one status if given, with `wave`), a lapsed lease among them expired
    /// first; `next_cursor` set when more follow.
    pub(super) async fn task_page(
        &self,
        caller: &Caller,
        id: Uuid,
        wave: Option<(i64, Option<TaskStatus>)>,
        after: i32,
        limit: u32,
    ) -> Result<StoredTaskList, ServiceError> {
        let mut page = self.read_page(id, wave, after, limit).await?;
        caller.check_project(&page.list.project_id)?;
        let at = crate::db::task_lists::now();
        let lapsed = dispatch::expired_claims(
            page.list.tasks.iter().map(|t| (t.status, t.claim.as_ref())),
            at,
        );
        if !lapsed.is_empty() {
            if self.db.expire_claims(id).await? > 0 {
                self.hub.task_list_changed(&self.db, id);
            }
            page = self.read_page(id, wave, after, limit).await?;
        }
        let mut answer = page.list;
        answer.next_cursor = page
            .last_position
            .filter(|_| page.more)
            .map(|p| format!("p{p}"));
        Ok(answer)
    }

    async fn read_page(
        &self,
        id: Uuid,
        wave: Option<(i64, Option<TaskStatus>)>,
        after: i32,
        limit: u32,
    ) -> Result<crate::db::task_lists::TaskPage, ServiceError> {
        let page = match wave {
            None => self.db.task_list_page(id, after, limit).await?,
            Some((wave, status)) => {
                self.db
                    .task_list_wave_page(id, wave, status, after, limit)
                    .await?
            }
        };
        page.ok_or_else(|| ServiceError::not_found("task list", &id.to_string()))
    }

    /// 404 unless list `id` exists, then 403 unless the caller may act on its
    /// project: what every use case of one list checks first (an indexed read of
    /// the list's row, never its tasks).
    pub(super) async fn check_list_visible(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<(), ServiceError> {
        let project_id = self.list_project(id).await?;
        caller.check_project(&project_id)
    }

    /// The project of list `id`, or 404. Remembered once read: a list is never
    /// deleted nor moved to another project, so a claim or a status change on a
    /// known list spends no round trip on it (docs/architecture.md, "Claims at
    /// scale").
    pub(super) async fn list_project(&self, id: Uuid) -> Result<Arc<str>, ServiceError> {
        if let Some(project) = self.list_projects.get(id) {
            return Ok(project);
        }
        let project: Arc<str> = self
            .db
            .task_list_project(id)
            .await?
            .ok_or_else(|| ServiceError::not_found("task list", &id.to_string()))?
            .into();
        self.list_projects.put(id, project.clone());
        Ok(project)
    }

    /// The stored list, if the caller may see its project.
    ///
    /// A lease seen lapsed is expired first (docs/api.md "Claims": lazily, in a
    /// locked transaction, exactly once) and the list read again, so no answer
    /// shows a task held by a holder whose lease ran out.
    pub(super) async fn load_list(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<StoredTaskList, ServiceError> {
        let list = self.visible_list(caller, id).await?;
        let lapsed = dispatch::expired_claims(
            list.tasks.iter().map(|t| (t.status, t.claim.as_ref())),
            crate::db::task_lists::now(),
        );
        if lapsed.is_empty() {
            return Ok(list);
        }
        if self.db.expire_claims(id).await? > 0 {
            self.hub.task_list_changed(&self.db, id);
        }
        self.read_list(id).await
    }

    /// The stored list as read (no lapsed lease expired), if the caller may see
    /// its project.
    pub(super) async fn visible_list(
        &self,
        caller: &Caller,
        id: Uuid,
    ) -> Result<StoredTaskList, ServiceError> {
        let list = self.read_list(id).await?;
        caller.check_project(&list.project_id)?;
        Ok(list)
    }

    async fn read_list(&self, id: Uuid) -> Result<StoredTaskList, ServiceError> {
        self.db
            .task_list(id)
            .await?
            .ok_or_else(|| ServiceError::not_found("task list", &id.to_string()))
    }

    /// Tasks ready to dispatch now, and what to do `next`. With `wait` seconds
    /// (at most 30) a `wait` answer is held until a task becomes ready or the list
    /// finishes (or the seconds pass): local changes wake it at once, changes of
    /// other replicas and lapsed leases are seen by polling.
    pub async fn ready_tasks(
        &self,
        caller: &Caller,
        id: Uuid,
        mode: ReadyMode,
        limit: Option<u32>,
        wait: Option<u64>,
    ) -> Result<ReadyResponse, ServiceError> {
        let take = ready_take(limit)?;
        let answer = self.ready_now(caller, id, mode, take).await?;
        let wait = wait.unwrap_or(0);
        if wait == 0 || answer.next.next != Next::Wait {
            return Ok(answer);
        }
        self.wait_until_changed(
            std::time::Duration::from_secs(wait),
            |changed| changed == id,
            || async {
                let answer = self.ready_now(caller, id, mode, take).await?;
                Ok::<_, ServiceError>(answer.next.next != Next::Wait)
            },
        )
        .await?;
        self.ready_now(caller, id, mode, take).await
    }

    async fn ready_now(
        &self,
        caller: &Caller,
        id: Uuid,
        mode: ReadyMode,
        take: ReadyTake,
    ) -> Result<ReadyResponse, ServiceError> {
        // Indexed reads and the counters while work is ready or running
        // (docs/architecture.md, "Claims at scale"); a lease seen lapsed is expired
        // first (docs/api.md "Claims") and the list read again.
        let mut read = self.ready_read(caller, id, mode, take).await?;
        if read.earliest_lease.is_some_and(|e| e <= now()) {
            if self.db.expire_claims(id).await? > 0 {
                self.hub.task_list_changed(&self.db, id);
            }
            read = self.ready_read(caller, id, mode, take).await?;
        }
        // Nothing ready on counts that say something must be: the read raced the
        // commit that opened the next wave; read again before the whole list.
        for _ in 0..STALE_READ_RETRIES {
            if !read.tasks.is_empty() || !dispatch::ready_by_counts(read.remaining) {
                break;
            }
            tokio::task::yield_now().await;
            read = self.ready_read(caller, id, mode, take).await?;
        }
        let remaining = read.remaining;
        if !read.tasks.is_empty() || remaining.running > 0 {
            let retry_after_s = read.tasks.is_empty().then(|| {
                let at = now();
                read.earliest_lease
                    .map(|e| u64::try_from((e - at).num_seconds().max(0)).unwrap_or(0) + 1)
                    .unwrap_or(WAIT_RETRY_SECS)
                    .clamp(1, WAIT_RETRY_SECS)
            });
            return Ok(ReadyResponse {
                mode,
                wave: read.wave,
                next: NextAnswer {
                    next: if read.tasks.is_empty() {
                        Next::Wait
                    } else {
                        Next::Dispatch
                    },
                    in_flight: remaining.running,
                    retry_after_s,
                    remaining,
                    blocked: Vec::new(),
                },
                tasks: read.tasks,
                more_ready: read.more,
            });
        }
        // Nothing ready or running: the list is finished or blocked. The counts
        // say `done` when nothing is pending or abandoned (a fleet asks a finished
        // list many times); otherwise saying which (and why) takes the whole list.
        if let Some(next) = NextAnswer::from_counts(remaining) {
            return Ok(ReadyResponse {
                mode,
                wave: None,
                tasks: Vec::new(),
                more_ready: false,
                next,
            });
        }
        let list = self.load_list(caller, id).await?;
        let view = dispatch_view(&list.tasks);
        let ready = dispatch::ready(mode, &view);
        let next = next_answer(&list.tasks, &view, &ready);
        let more_ready = ready.tasks.len() > take.whole as usize;
        let shown = if more_ready { take.page } else { take.whole };
        let tasks = ready
            .tasks
            .iter()
            .take(shown as usize)
            .filter_map(|&i| list.tasks.get(i).cloned())
            .collect();
        Ok(ReadyResponse {
            mode,
            wave: ready.wave,
            tasks,
            more_ready,
            next,
        })
    }

    async fn ready_read(
        &self,
        caller: &Caller,
        id: Uuid,
        mode: ReadyMode,
        take: ReadyTake,
    ) -> Result<crate::db::task_lists::ReadyRead, ServiceError> {
        let read = self
            .db
            .ready_read(id, mode, take)
            .await?
            .ok_or_else(|| ServiceError::not_found("task list", &id.to_string()))?;
        caller.check_project(&read.project_id)?;
        Ok(read)
    }

    /// The DAG as Mermaid or Graphviz text, waves as ranks, statuses as classes.
    pub async fn task_graph(
        &self,
        caller: &Caller,
        id: Uuid,
        format: GraphFormat,
    ) -> Result<String, ServiceError> {
        self.check_list_visible(caller, id).await?;
        let total = self.db.task_count(id).await?;
        if total > WHOLE_LIST_TASKS {
            return self.wave_summary_graph(id, format, total).await;
        }
        let list = self.load_list(caller, id).await?;
        let view = dispatch_view(&list.tasks);
        let nodes: Vec<GraphNode> = list
            .tasks
            .iter()
            .zip(&view)
            .map(|(task, dispatch)| GraphNode {
                task_id: &task.task_id,
                persona: &task.assigned_persona,
                wave: task.parallel_group,
                status: task.status,
                depends_on: &dispatch.depends_on,
            })
            .collect();
        Ok(render_graph(format, &nodes))
    }

    /// The graph of a list too large to draw task by task (docs/api.md, "Large
    /// lists"): its first [`MAX_SUMMARY_WAVES`] waves counted by status from an
    /// aggregate over an index that stops there, the later waves' tasks as the
    /// counters' totals less those — never a task row. A lapsed lease is expired
    /// first, as before any read of the list.
    async fn wave_summary_graph(
        &self,
        id: Uuid,
        format: GraphFormat,
        total: u64,
    ) -> Result<String, ServiceError> {
        if self
            .db
            .earliest_lease(id)
            .await?
            .is_some_and(|e| e <= now())
            && self.db.expire_claims(id).await? > 0
        {
            self.hub.task_list_changed(&self.db, id);
        }
        // At most five statuses a wave: one wave more than drawn tells whether
        // later waves exist, and every drawn wave is read whole.
        let statuses = TaskStatus::ALL.len();
        let rows = self
            .db
            .wave_counts(id, ((MAX_SUMMARY_WAVES + 1) * statuses) as i64)
            .await?;
        let mut waves: Vec<WaveTally> = Vec::new();
        for (wave, status, n) in rows {
            if waves.last().is_none_or(|w| w.wave != wave) {
                waves.push(WaveTally {
                    wave,
                    counts: [0; 5],
                });
            }
            if let Some(last) = waves.last_mut() {
                last.counts[status.index()] = u64::try_from(n).unwrap_or(0);
            }
        }
        // The later waves: the counters' totals less the drawn waves' (read a
        // moment apart, so a change in between may move a task between counts).
        let later = if waves.len() > MAX_SUMMARY_WAVES {
            waves.truncate(MAX_SUMMARY_WAVES);
            let all = self.db.tasks_by_status(id).await?;
            let mut left = [
                all.pending,
                all.running,
                all.done,
                all.failed,
                all.abandoned,
            ];
            for w in &waves {
                for (l, n) in left.iter_mut().zip(w.counts) {
                    *l = l.saturating_sub(n);
                }
            }
            Some(left)
        } else {
            None
        };
        Ok(render_wave_summary(
            format,
            &WaveSummaryGraph {
                total,
                waves: &waves,
                later,
            },
        ))
    }

    /// Change a task's status; `failed` or `abandoned` abandons every non-terminal
    /// transitive dependent in the same transaction.
    pub async fn update_task(
        &self,
        caller: &Caller,
        task: TaskRef,
        update: TaskUpdate,
    ) -> Result<TaskUpdated, ServiceError> {
        match (update.status, update.abandon_category) {
            (TaskStatus::Abandoned, None) => {
                return Err(ServiceError::invalid_field(
                    "abandon_category",
                    "abandon_category is required when status is abandoned",
                ));
            }
            (status, Some(_)) if status != TaskStatus::Abandoned => {
                return Err(ServiceError::invalid_field(
                    "abandon_category",
                    format!("abandon_category only goes with status abandoned, not {status}"),
                ));
            }
            _ => {}
        }
        if update
            .notes
            .as_ref()
            .is_some_and(|n| n.len() > MAX_NOTES_CHARS && n.chars().count() > MAX_NOTES_CHARS)
        {
            return Err(ServiceError::invalid_field(
                "notes",
                format!("notes may hold at most {MAX_NOTES_CHARS} characters"),
            ));
        }
        let id = self.resolve_task(caller, &task).await?;
        // A limited token may change only its projects' tasks: look the project up
        // first (a task never changes project, so nothing can slip in between).
        if caller.allowed_projects().is_some() {
            match self.db.task_project(id).await? {
                Some(project_id) => caller.check_project(&project_id)?,
                None => return Err(ServiceError::not_found("task", &id.to_string())),
            }
        }
        let holder = Ident::parse_optional("holder", update.holder.as_deref())?;
        let change = TaskChange {
            status: update.status,
            abandon_category: update.abandon_category,
            notes: update.notes,
            holder: holder.map(|h| h.as_str().to_owned()),
            force: update.force,
        };
        match self.db.transition_task(id, change).await? {
            TransitionOutcome::Changed { task, cascaded } => {
                self.hub.task_list_changed(&self.db, task.task_list_id);
                Ok(TaskUpdated {
                    task: *task,
                    cascaded,
                })
            }
            TransitionOutcome::HeldByOther(held) => Err(held_by_other(held)),
            TransitionOutcome::NotFound => Err(ServiceError::not_found("task", &id.to_string())),
            TransitionOutcome::Illegal(illegal) => Err(ServiceError::conflict(
                ProblemCode::IllegalTransition,
                illegal.to_string(),
            )
            .with_details(ProblemDetails::TaskTransition(illegal))),
        }
    }
}

/// How many ready tasks an answer lists (docs/api.md, "Large ready sets"): the
/// first `limit` (1 to [`MAX_PAGE_TASKS`]); without it all while at most
/// [`WHOLE_LIST_TASKS`] are ready, as before there was a bound, else the first
/// [`MAX_PAGE_TASKS`].
pub(super) fn ready_take(limit: Option<u32>) -> Result<ReadyTake, ServiceError> {
    Ok(match page_limit(limit)? {
        None => ReadyTake {
            whole: WHOLE_LIST_TASKS as u32,
            page: MAX_PAGE_TASKS,
        },
        Some(limit) => ReadyTake {
            whole: limit,
            page: limit,
        },
    })
}

/// `?limit=` of a paged answer, refused (400 naming `limit`) outside 1 to
/// [`MAX_PAGE_TASKS`].
fn page_limit(limit: Option<u32>) -> Result<Option<u32>, ServiceError> {
    match limit {
        Some(limit) if !(1..=MAX_PAGE_TASKS).contains(&limit) => Err(ServiceError::bad_request(
            ProblemCode::InvalidQuery,
            format!("limit must be between 1 and {MAX_PAGE_TASKS}, not {limit}"),
        )
        .field("limit")),
        limit => Ok(limit),
    }
}

/// The position a page's `cursor` (`p<position>`, a previous page's
/// `next_cursor`) starts after; -1 for the first page.
pub(super) fn page_cursor(cursor: Option<&str>) -> Result<i32, ServiceError> {
    match cursor {
        None => Ok(-1),
        Some(text) => text
            .strip_prefix('p')
            .and_then(|n| n.parse::<i32>().ok())
            .filter(|n| *n >= 0)
            .ok_or_else(|| {
                ServiceError::bad_request(
                    ProblemCode::InvalidQuery,
                    "cursor must be the next_cursor of a previous page",
                )
                .field("cursor")
            }),
    }
}
