//! The service layer's one error type, and the one list of problem codes.
//!
//! Every use case answers `Result<_, ServiceError>`. A transport maps it once: HTTP
//! turns [`ErrorKind`] into a status and the rest into an RFC 9457 problem document
//! (`http/problem.rs`); MCP into a tool error. Storage errors convert with `?`.

use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::db::DbError;
use crate::domain::dispatch::IllegalTransition;
use crate::domain::dispatch::TaskStatus;
use crate::domain::gating::ValidationReport;
use crate::domain::ids::IdError;
use crate::domain::job::JobStatus;
use crate::domain::loop_plan::PlanViolation;
use crate::domain::retry::RetryVerdict;
use crate::domain::track_state::{CheckpointStatus, CurrentStep};
use crate::domain::usage::DailyLimitSpent;

/// What kind of failure, independent of any transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed (HTTP 400).
    BadRequest,
    /// The caller may not act on the resource's project (403).
    Forbidden,
    /// No such resource (404).
    NotFound,
    /// The resource's state refuses the change (409).
    Conflict,
    /// The caller pinned a version that is not the current one (412).
    PreconditionFailed,
    /// The request is well-formed but unusable (422).
    Unprocessable,
    /// A limit is spent; `retry_after_secs` says when to come back (429).
    TooManyRequests,
    /// The database did not answer; retry shortly (503).
    Unavailable,
    /// A bug; details are in the server log only (500).
    Internal,
}

impl ErrorKind {
    /// The HTTP status code of this kind: the one map REST's problem documents and
    /// the dashboard's error pages both answer with (docs/api.md, "Conventions").
    /// A plain number, so that this layer names no transport's types.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::BadRequest => 400,
            ErrorKind::Forbidden => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::Conflict => 409,
            ErrorKind::PreconditionFailed => 412,
            ErrorKind::Unprocessable => 422,
            ErrorKind::TooManyRequests => 429,
            ErrorKind::Unavailable => 503,
            ErrorKind::Internal => 500,
        }
    }
}

/// Every `code` a problem document can carry: clients switch on these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProblemCode {
    BodyTooLarge,
    BudgetExhausted,
    Conflict,
    DagInvalid,
    DatabaseUnavailable,
    Error,
    ForbiddenProject,
    HostNotAllowed,
    IdempotencyKeyReused,
    IllegalTransition,
    Internal,
    InvalidBody,
    InvalidContext,
    InvalidField,
    InvalidIdempotencyKey,
    InvalidLastEventId,
    InvalidMetadata,
    InvalidPath,
    InvalidPlan,
    InvalidPlanMarkdown,
    InvalidQuery,
    InvalidTrackId,
    InvalidTracksMd,
    InvalidUtf8,
    JobNotSucceeded,
    JobNotRetryable,
    MalformedJson,
    MethodNotAllowed,
    NotFound,
    NotReady,
    OriginNotAllowed,
    OutputNotAllowed,
    ProjectNotFound,
    RouteNotFound,
    RunNotFinished,
    ServerBusy,
    StaleEtag,
    SynthesisFailure,
    TaskClaimed,
    TaskFileNotAllowed,
    TaskNotClaimed,
    TeamExists,
    TeamNotFound,
    Timeout,
    TrackClosed,
    TrackIdMismatch,
    Unauthorized,
    UnknownExecutor,
    UnknownRun,
    UnknownStep,
    UnsupportedMediaType,
    UnsupportedVersion,
    WebhookUrlNotAllowed,
    WriteContention,
}

impl ProblemCode {
    /// The code as clients see it (`snake_case`).
    pub fn as_str(self) -> &'static str {
        use ProblemCode::*;
        match self {
            BodyTooLarge => "body_too_large",
            BudgetExhausted => "budget_exhausted",
            Conflict => "conflict",
            DagInvalid => "dag_invalid",
            DatabaseUnavailable => "database_unavailable",
            Error => "error",
            ForbiddenProject => "forbidden_project",
            HostNotAllowed => "host_not_allowed",
            IdempotencyKeyReused => "idempotency_key_reused",
            IllegalTransition => "illegal_transition",
            Internal => "internal",
            InvalidBody => "invalid_body",
            InvalidContext => "invalid_context",
            InvalidField => "invalid_field",
            InvalidIdempotencyKey => "invalid_idempotency_key",
            InvalidLastEventId => "invalid_last_event_id",
            InvalidMetadata => "invalid_metadata",
            InvalidPath => "invalid_path",
            InvalidPlan => "invalid_plan",
            InvalidPlanMarkdown => "invalid_plan_markdown",
            InvalidQuery => "invalid_query",
            InvalidTrackId => "invalid_track_id",
            InvalidTracksMd => "invalid_tracks_md",
            InvalidUtf8 => "invalid_utf8",
            JobNotSucceeded => "job_not_succeeded",
            JobNotRetryable => "job_not_retryable",
            MalformedJson => "malformed_json",
            MethodNotAllowed => "method_not_allowed",
            NotFound => "not_found",
            NotReady => "not_ready",
            OriginNotAllowed => "origin_not_allowed",
            OutputNotAllowed => "output_not_allowed",
            ProjectNotFound => "project_not_found",
            RouteNotFound => "route_not_found",
            RunNotFinished => "run_not_finished",
            ServerBusy => "server_busy",
            StaleEtag => "stale_etag",
            SynthesisFailure => "synthesis_failure",
            TaskClaimed => "task_claimed",
            TaskFileNotAllowed => "task_file_not_allowed",
            TaskNotClaimed => "task_not_claimed",
            TeamExists => "team_exists",
            TeamNotFound => "team_not_found",
            Timeout => "timeout",
            TrackClosed => "track_closed",
            TrackIdMismatch => "track_id_mismatch",
            Unauthorized => "unauthorized",
            UnknownExecutor => "unknown_executor",
            UnknownRun => "unknown_run",
            UnknownStep => "unknown_step",
            UnsupportedMediaType => "unsupported_media_type",
            UnsupportedVersion => "unsupported_version",
            WebhookUrlNotAllowed => "webhook_url_not_allowed",
            WriteContention => "write_contention",
        }
    }
}

impl std::fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A use case's refusal: its kind, a stable code, a sentence for people, and the
/// members that say more ([`ProblemDetails`]), which every transport passes on as
/// [`ServiceError::members`] gives them.
#[derive(Debug, Clone)]
pub struct ServiceError {
    pub kind: ErrorKind,
    pub code: ProblemCode,
    pub detail: String,
    pub details: ProblemDetails,
}

/// What a refusal says beyond its code and detail: one shape per kind of refusal, each
/// becoming the same problem members clients have always read (docs/api.md).
#[derive(Debug, Clone, Default)]
pub enum ProblemDetails {
    #[default]
    None,
    /// `field`: the request member (a name, a dotted path or a JSON pointer) at fault.
    Field(String),
    /// `parameter`: the path parameter that did not parse.
    Parameter(String),
    /// `line`: the line of a Markdown document at fault.
    Line(usize),
    /// The gate's refusal of a task list: its violations, counts, retry verdict and
    /// the text to re-prompt the planner with.
    Gate(Box<GateRejection>),
    /// `errors`: a loop plan's violations.
    PlanViolations(Vec<PlanViolation>),
    /// `holder`: the agent whose claim holds the task.
    Holder(String),
    /// `from`, `to`, `allowed`: a task transition the dispatch rules refuse.
    TaskTransition(IllegalTransition),
    /// `current_step`, `step_status`, `legal`: a track step the loop refuses.
    StepTransition {
        current_step: CurrentStep,
        step_status: CheckpointStatus,
        legal: Vec<String>,
    },
    /// `job_status`: the state of the job that refuses the request.
    JobStatus(JobStatus),
    /// `task_status`: the state of the task that refuses the request.
    TaskStatus(TaskStatus),
    /// `run_status`: the state of the run that refuses the request.
    RunStatus(JobStatus),
    /// `limit_usd`, `spent_usd`, `retry_after_secs`: a project's spent daily limit.
    BudgetSpent(DailyLimitSpent),
    /// `retry_after_secs`: when to come back.
    RetryAfter(u64),
}

/// A task list the gate refused (the 422 of `POST /v1/task-lists`).
#[derive(Debug, Clone)]
pub struct GateRejection {
    /// The violations and counts, capped at `max_gating_errors`.
    pub report: ValidationReport,
    pub verdict: RetryVerdict,
    pub reprompt: String,
    /// True when the answer replays the stored refusal of an idempotent retry.
    pub replayed: bool,
}

fn json<T: Serialize + ?Sized>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or_default()
}

impl ProblemDetails {
    /// The problem members, in the order clients have always received them.
    pub fn members(&self) -> Map<String, Value> {
        let mut members = Map::new();
        let mut put = |key: &str, value: Value| {
            members.insert(key.to_owned(), value);
        };
        match self {
            ProblemDetails::None => {}
            ProblemDetails::Field(field) => put("field", field.as_str().into()),
            ProblemDetails::Parameter(name) => put("parameter", name.as_str().into()),
            ProblemDetails::Line(line) => put("line", (*line).into()),
            ProblemDetails::Gate(gate) => {
                let GateRejection {
                    report,
                    verdict,
                    reprompt,
                    replayed,
                } = gate.as_ref();
                put("errors", json(&report.errors));
                put("warnings", json(&report.warnings));
                put("error_count", report.error_count.into());
                put("warning_count", report.warning_count.into());
                put("error_counts", json(&report.error_counts));
                put("truncated", report.truncated.into());
                put("attempt", verdict.attempt.into());
                put("escalate", verdict.escalate.into());
                put("escalation", json(&verdict.escalation));
                put("reprompt", reprompt.as_str().into());
                if *replayed {
                    put("replayed", true.into());
                }
            }
            ProblemDetails::PlanViolations(errors) => put("errors", json(errors)),
            ProblemDetails::Holder(holder) => put("holder", holder.as_str().into()),
            ProblemDetails::TaskTransition(illegal) => {
                put("from", illegal.from.as_str().into());
                put("to", illegal.to.as_str().into());
                let allowed: Vec<&str> = illegal.allowed.iter().map(|s| s.as_str()).collect();
                put("allowed", allowed.into());
            }
            ProblemDetails::StepTransition {
                current_step,
                step_status,
                legal,
            } => {
                put("current_step", current_step.as_str().into());
                put("step_status", step_status.as_str().into());
                put("legal", json(legal));
            }
            ProblemDetails::JobStatus(status) => put("job_status", status.as_str().into()),
            ProblemDetails::TaskStatus(status) => put("task_status", status.as_str().into()),
            ProblemDetails::RunStatus(status) => put("run_status", status.as_str().into()),
            ProblemDetails::BudgetSpent(spent) => {
                put("limit_usd", spent.limit_usd.into());
                put("spent_usd", spent.spent_usd.into());
                put("retry_after_secs", spent.retry_after_secs.into());
            }
            ProblemDetails::RetryAfter(secs) => put("retry_after_secs", (*secs).into()),
        }
        members
    }

    /// Seconds until the client may retry, when the refusal says so.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            ProblemDetails::BudgetSpent(spent) => Some(spent.retry_after_secs),
            ProblemDetails::RetryAfter(secs) => Some(*secs),
            _ => None,
        }
    }

    /// The request member at fault, when the refusal names one.
    pub fn field(&self) -> Option<&str> {
        match self {
            ProblemDetails::Field(field) => Some(field),
            _ => None,
        }
    }
}

impl ServiceError {
    pub fn new(kind: ErrorKind, code: ProblemCode, detail: impl Into<String>) -> Self {
        ServiceError {
            kind,
            code,
            detail: detail.into(),
            details: ProblemDetails::None,
        }
    }

    pub fn bad_request(code: ProblemCode, detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadRequest, code, detail)
    }

    pub fn unprocessable(code: ProblemCode, detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unprocessable, code, detail)
    }

    pub fn conflict(code: ProblemCode, detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, code, detail)
    }

    pub fn not_found(what: &str, id: &str) -> Self {
        Self::new(
            ErrorKind::NotFound,
            ProblemCode::NotFound,
            format!("{what} {id:?} does not exist"),
        )
    }

    /// 422 `invalid_field` naming `field`.
    pub fn invalid_field(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::unprocessable(ProblemCode::InvalidField, detail).field(field)
    }

    /// 503 `database_unavailable`, retry in a second.
    pub fn unavailable() -> Self {
        Self::new(
            ErrorKind::Unavailable,
            ProblemCode::DatabaseUnavailable,
            "the database is not reachable; retry shortly",
        )
        .retry_after(1)
    }

    /// The same refusal with `details`.
    pub fn with_details(mut self, details: ProblemDetails) -> Self {
        self.details = details;
        self
    }

    /// Names the request member at fault (`field`).
    pub fn field(self, field: impl Into<String>) -> Self {
        self.with_details(ProblemDetails::Field(field.into()))
    }

    /// Names the Markdown line at fault (`line`).
    pub fn line(self, line: usize) -> Self {
        self.with_details(ProblemDetails::Line(line))
    }

    /// Names the agent holding the task's claim (`holder`).
    pub fn holder(self, holder: impl Into<String>) -> Self {
        self.with_details(ProblemDetails::Holder(holder.into()))
    }

    /// Says when to come back (`retry_after_secs`, and `Retry-After` over HTTP).
    pub fn retry_after(self, secs: u64) -> Self {
        self.with_details(ProblemDetails::RetryAfter(secs))
    }

    /// Marks a gate refusal as the replay of a stored one (`replayed`).
    pub fn replayed(mut self) -> Self {
        if let ProblemDetails::Gate(gate) = &mut self.details {
            gate.replayed = true;
        }
        self
    }

    /// The members a transport adds to `code` and `detail`.
    pub fn members(&self) -> Map<String, Value> {
        self.details.members()
    }
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.detail)
    }
}

impl std::error::Error for ServiceError {}

/// A client-sent identifier that does not parse: 422 naming the field.
impl From<IdError> for ServiceError {
    fn from(err: IdError) -> Self {
        ServiceError::invalid_field(err.field, err.to_string())
    }
}

/// Storage errors: unavailable (retry), a refused write, or a bug (logged, no detail
/// leaked to the client).
impl From<DbError> for ServiceError {
    fn from(err: DbError) -> Self {
        match err {
            DbError::Unavailable(e) => {
                tracing::warn!(error = %e, "database unavailable");
                ServiceError::unavailable()
            }
            DbError::Conflict(detail) => ServiceError::conflict(ProblemCode::Conflict, detail),
            other => {
                tracing::error!(error = %other, "storage error");
                ServiceError::new(
                    ErrorKind::Internal,
                    ProblemCode::Internal,
                    "internal storage error; see the server log",
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialise_as_their_names() {
        for code in [
            ProblemCode::DagInvalid,
            ProblemCode::InvalidTracksMd,
            ProblemCode::InvalidUtf8,
            ProblemCode::StaleEtag,
        ] {
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                Value::String(code.as_str().to_owned())
            );
        }
    }
}
