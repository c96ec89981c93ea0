//! Bounded memory for gating (docs/api.md, "Bounded gating answers"): a task list is
//! held whole while it is parsed and gated, and a 12 MB list costs several times its
//! size; 40 of them at once once held 2 GiB. So a large body of a route that gates
//! (`POST /v1/task-lists`, `/v1/task-lists/validate`, the MCP endpoints) first takes
//! its size from the gating memory, a count of bytes (`PLANGATE_GATING_BUDGET_BYTES`),
//! before a byte of it is read, and gives it back when the answer is ready. A request
//! that finds the gating memory taken waits for its turn (it holds no memory meanwhile) up to
//! [`MAX_WAIT`], then answers 503 `server_busy` with `Retry-After`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use crate::config::Settings;
use crate::http::problem::ApiError;
use crate::service::{ProblemCode, ProblemDetails};

/// Bodies smaller than this never wait: they cost little, and the gating memory is
/// for the few large lists that can exhaust memory.
pub const SMALL_BODY_BYTES: u64 = 256 * 1024;
/// How long a large body waits for gating memory before the 503.
pub const MAX_WAIT: Duration = Duration::from_secs(5);
/// The gating memory counts kibibytes: a semaphore holds at most `u32::MAX >> 3` permits.
const UNIT: u64 = 1024;

/// The bytes of gating bodies that may be in memory at once, shared by every
/// request of one server.
#[derive(Clone)]
pub struct GatingMemory {
    units: Arc<Semaphore>,
    total_units: u32,
    /// What a body without `Content-Length` (chunked) is charged: the most it can be.
    body_limit: u64,
}

impl GatingMemory {
    pub fn new(settings: &Settings) -> Self {
        let total_units = u32::try_from(settings.gating_memory_bytes.div_ceil(UNIT))
            .unwrap_or(u32::MAX)
            .min(Semaphore::MAX_PERMITS as u32);
        GatingMemory {
            units: Arc::new(Semaphore::new(total_units as usize)),
            total_units,
            body_limit: settings.body_limit as u64,
        }
    }
}

/// Whether the route gates a task list it is sent (the MCP endpoints may: their
/// `validate_task_list` and `create_task_list` tools do).
fn gates(method: &Method, path: &str) -> bool {
    *method == Method::POST
        && matches!(
            path,
            "/v1/task-lists" | "/v1/task-lists/validate" | "/mcp" | "/mcp/readonly"
        )
}

/// The middleware: charges a large gating body to the gating memory for the whole
/// request.
pub async fn charge_large_bodies(
    State(memory): State<GatingMemory>,
    request: Request,
    next: Next,
) -> Response {
    if !gates(request.method(), request.uri().path()) {
        return next.run(request).await;
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .unwrap_or(memory.body_limit);
    if declared < SMALL_BODY_BYTES {
        return next.run(request).await;
    }
    // A body larger than the whole gating memory runs alone rather than never.
    let units = u32::try_from(declared.div_ceil(UNIT))
        .unwrap_or(u32::MAX)
        .min(memory.total_units);
    let waiting = memory.units.clone().acquire_many_owned(units);
    match tokio::time::timeout(MAX_WAIT, waiting).await {
        Ok(Ok(_held_until_answered)) => next.run(request).await,
        // Timed out (or the semaphore closed, which it never is).
        _ => {
            metrics::counter!("gating_budget_refusals_total").increment(1);
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ProblemCode::ServerBusy,
                format!(
                    "too many large task lists are being gated at once ({declared} bytes \
                     asked, PLANGATE_GATING_BUDGET_BYTES in flight); retry after the \
                     Retry-After delay"
                ),
            )
            .with_details(ProblemDetails::RetryAfter(1))
            .into_response()
        }
    }
}
