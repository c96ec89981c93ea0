//! The service layer's one error type, and the one list of problem codes.
//!
//! Every use case answers `Result<_, ServiceError>`. A transport maps it once: HTTP
//! turns [`ErrorKind`] into a status and the rest into an RFC 9457 problem document
//! (`http/problem.rs`); MCP into a tool error. Storage errors convert with `?`.

use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::db::DbError;
use crate::domain::ids::IdError;

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
            WriteContention => "write_contention",
        }
    }
}

impl std::fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A use case's refusal: its kind, a stable code, a sentence for people, and extra
/// members (`field`, `errors`, `attempt`, …) that the transport passes on as they are.
#[derive(Debug, Clone)]
pub struct ServiceError {
    pub kind: ErrorKind,
    pub code: ProblemCode,
    pub detail: String,
    pub extra: Map<String, Value>,
}

impl ServiceError {
    pub fn new(kind: ErrorKind, code: ProblemCode, detail: impl Into<String>) -> Self {
        ServiceError {
            kind,
            code,
            detail: detail.into(),
            extra: Map::new(),
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

    /// Adds a member to the problem (`field`, `errors`, …).
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
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
        ServiceError::unprocessable(ProblemCode::InvalidField, err.to_string())
            .with("field", err.field)
    }
}

/// Storage errors: unavailable (retry), a refused write, or a bug (logged, no detail
/// leaked to the client).
impl From<DbError> for ServiceError {
    fn from(err: DbError) -> Self {
        match err {
            DbError::Unavailable(e) => {
                tracing::warn!(error = %e, "database unavailable");
                ServiceError::new(
                    ErrorKind::Unavailable,
                    ProblemCode::DatabaseUnavailable,
                    "the database is not reachable; retry shortly",
                )
                .with("retry_after_secs", 1)
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
