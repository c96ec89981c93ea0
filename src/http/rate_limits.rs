//! `/v1/rate-limits`: the providers' limits every replica shares, and runtime
//! changes of them (docs/jobs.md, "Rate limits").

use serde_json::Value;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::AppState;
use super::auth::ApiCall;
use super::extract::{Json, Path, StorableJson};
use crate::http::problem::{ApiError, Problem};
use crate::http::responses::{ForbiddenProject, JsonBodyRejections};
use crate::service::rate_limits::{RateLimitEntry, RateLimits};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(rate_limits))
        .routes(routes!(set_rate_limit))
}

/// Every executor a rate limit applies to (configured in `[rate_limits.*]`, or an
/// `openai`/`anthropic` profile whose provider's headers are learned): its limits,
/// what the provider said, the pause, the calls waiting and each project's share.
/// A token limited to projects sees only its projects under `projects`.
#[utoipa::path(get, path = "/v1/rate-limits", tag = "rate-limits",
    responses(
        (status = 200, description = "The executors' limits and state", body = RateLimits),
    ))]
async fn rate_limits(ApiCall { service, caller }: ApiCall) -> Result<Json<RateLimits>, ApiError> {
    Ok(Json(service.rate_limits(&caller).await?))
}

/// Change an executor's limits at runtime: any subset of `requests_per_minute`,
/// `input_tokens_per_minute`, `output_tokens_per_minute`, `max_wait_secs` (positive
/// integers) and `shares` (`{"project_id": weight}`), over the configured ones.
/// Every replica's next admission uses them (within 1 s); no restart. Takes a
/// token that is not limited to projects.
#[utoipa::path(put, path = "/v1/rate-limits/{executor}", tag = "rate-limits",
    params(("executor" = String, Path, description = "An executor profile")),
    request_body(content = Object, description = "Any subset of the limits, max_wait_secs and shares"),
    responses(
        JsonBodyRejections,
        ForbiddenProject,
        (status = 200, description = "The executor's entry, changed", body = RateLimitEntry),
        (status = 404, description = "No such executor, or one no rate limit applies to", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A negative or non-integer value, or an unknown member; `field` names it", body = Problem, content_type = "application/problem+json"),
    ))]
async fn set_rate_limit(
    ApiCall { service, caller }: ApiCall,
    Path(executor): Path<String>,
    StorableJson(body): StorableJson<Value>,
) -> Result<Json<RateLimitEntry>, ApiError> {
    Ok(Json(
        service.set_rate_limit(&caller, &executor, &body).await?,
    ))
}
