//! The HTTP layer's one error type, mapped once to RFC 9457 problem+json.
//!
//! Handlers return `Result<_, ApiError>`; a [`ServiceError`] converts with `?`, its
//! kind choosing the status (503 when the database is unavailable, 500 for a bug,
//! logged with no detail leaked).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::domain::{gating, retry};
use crate::service::{ProblemCode, ProblemDetails, ServiceError};

pub const PROBLEM_JSON: &str = "application/problem+json";

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    /// Stable machine-readable code clients switch on.
    pub code: ProblemCode,
    pub detail: String,
    /// The members after `code` (`field`, `errors`, `attempt`, …).
    pub details: ProblemDetails,
}

impl ApiError {
    pub fn new(status: StatusCode, code: ProblemCode, detail: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            detail: detail.into(),
            details: ProblemDetails::None,
        }
    }

    /// The same problem with the members after `code` (`parameter`,
    /// `retry_after_secs`, …); problems a use case raises carry theirs already.
    pub fn with_details(mut self, details: ProblemDetails) -> Self {
        self.details = details;
        self
    }

    /// The problem document; `type` is a stable URN per code.
    pub fn body(&self) -> Value {
        let mut body = json!({
            "type": format!("urn:plangate:problem:{}", self.code.as_str()),
            "title": self.status.canonical_reason().unwrap_or("Error"),
            "status": self.status.as_u16(),
            "detail": self.detail,
            "code": self.code.as_str(),
        });
        if let Value::Object(map) = &mut body {
            map.extend(self.details.members());
        }
        body
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status.as_u16(), self.code, self.detail)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let bytes = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut response = (self.status, bytes).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        // A problem that says when to come back says it in the header too.
        if let Some(secs) = self.details.retry_after_secs() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// A use case's refusal, mapped once: its kind chooses the status.
impl From<ServiceError> for ApiError {
    fn from(err: ServiceError) -> Self {
        ApiError {
            // Every kind's code is in 100..=999, so the fallback is never taken.
            status: StatusCode::from_u16(err.kind.status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            code: err.code,
            detail: err.detail,
            details: err.details,
        }
    }
}

/// The problem document, as the OpenAPI schema shows it.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// A stable URN per code, `urn:plangate:problem:{code}`.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    /// What went wrong, for a person.
    pub detail: String,
    /// What went wrong, for a program: switch on this.
    pub code: ProblemCode,
}

/// The 422 answer of `POST /v1/task-lists` (problem+json). A gate rejection
/// (`dag_invalid`, `synthesis_failure`) carries every member; a malformed request
/// (`invalid_field`, `invalid_body`) only the problem members, so the gating members
/// are documented as optional.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct GatingProblem {
    #[serde(flatten)]
    pub problem: Problem,
    /// The first violations (`max_gating_errors`, 100 by default), in gate order.
    #[schema(required = false)]
    pub errors: Vec<gating::Violation>,
    /// The first warnings, cut like `errors`.
    #[schema(required = false)]
    pub warnings: Vec<gating::Violation>,
    /// Every error found, listed or not.
    #[schema(required = false)]
    pub error_count: usize,
    /// Every warning found, listed or not.
    #[schema(required = false)]
    pub warning_count: usize,
    /// Every error found, listed or not, counted by code.
    #[schema(required = false)]
    pub error_counts: std::collections::BTreeMap<gating::Code, usize>,
    /// True when `errors` or `warnings` lists only the first ones: fix every
    /// violation of the kinds `error_counts` names and resubmit the whole list.
    #[schema(required = false)]
    pub truncated: bool,
    /// 1 for the first rejection since the last accepted list of this cycle, 2 after.
    #[schema(required = false)]
    pub attempt: u32,
    /// True when the planner gets no further retry.
    #[schema(required = false)]
    pub escalate: bool,
    #[schema(required = false)]
    pub escalation: Option<retry::Escalation>,
    /// The exact text to re-prompt the planner with: the listed violations, one a
    /// line, then (when some were left out) how many of each kind were not listed.
    #[schema(required = false)]
    pub reprompt: String,
    /// For `invalid_field`: which field.
    #[schema(required = false)]
    pub field: Option<String>,
}
