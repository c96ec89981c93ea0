//! `/v1/loop-plans`: generate a loop plan (JSON or plan.md) and parse a plan.md back.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::AppState;
use super::auth::Caller;
use super::extract::Json;
use crate::domain::loop_plan::{LoopPlan, LoopPlanRequest};
use crate::http::problem::{ApiError, JsonBodyRejections, Problem};
use crate::service::ProblemCode;
use crate::service::loop_plans::ParsedPlanResponse;

const MARKDOWN: &str = "text/markdown; charset=utf-8";

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(generate))
        .routes(routes!(parse))
}

fn wants_markdown(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/markdown"))
}

fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// The request as JSON (the default) or YAML (`application/yaml`, `text/yaml`), the
/// two forms `plangate plan` reads too.
fn read_request(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<LoopPlanRequest, ApiError> {
    let kind = content_type(headers);
    if ["application/yaml", "application/x-yaml", "text/yaml"]
        .iter()
        .any(|yaml| kind.starts_with(yaml))
    {
        let text = std::str::from_utf8(body).map_err(|e| {
            ApiError::bad_request(
                ProblemCode::InvalidUtf8,
                format!("the body is not UTF-8: {e}"),
            )
        })?;
        return Ok(state.service.parse_loop_plan_yaml(caller, text)?);
    }
    if !kind.starts_with("application/json") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ProblemCode::UnsupportedMediaType,
            "send the request as application/json or application/yaml",
        ));
    }
    // The same parser and rejections as every other JSON route.
    axum::Json::<LoopPlanRequest>::from_bytes(body)
        .map(|axum::Json(request)| request)
        .map_err(ApiError::from)
}

/// Build the task DAG: topological levels, one parallel group per level with file
/// conflicts, types, durations, overlap with completed tracks.
///
/// With `Accept: text/markdown` the answer is the plan.md text.
#[utoipa::path(post, path = "/v1/loop-plans/generate", tag = "loop-plans",
    request_body(content(
        (LoopPlanRequest = "application/json"),
        (LoopPlanRequest = "application/yaml"),
    )),
    responses(
        JsonBodyRejections,
        (status = 200, description = "The plan (JSON, or plan.md with Accept: text/markdown)",
         content((LoopPlan = "application/json"), (String = "text/markdown"))),
        (status = 422, description = "Invalid DAG or unreadable tracks_md (`dag_invalid`, with `errors`)", body = Problem, content_type = "application/problem+json"),
    ))]
async fn generate(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request = read_request(&state, &caller, &headers, &body)?;
    let plan = state.service.generate_loop_plan(&caller, &request)?;
    if wants_markdown(&headers) {
        let text = state.service.render_plan_markdown(&plan);
        return Ok(([(header::CONTENT_TYPE, MARKDOWN)], text).into_response());
    }
    Ok(Json(plan).into_response())
}

/// Read a plan.md back: its YAML DAG block and the task markers `[ ]`, `[~]`,
/// `[x]`, `[!]`.
#[utoipa::path(post, path = "/v1/loop-plans/parse", tag = "loop-plans",
    request_body(content = String, content_type = "text/markdown", description = "A plan.md"),
    responses(
        (status = 200, description = "The DAG and the progress", body = ParsedPlanResponse),
        (status = 400, description = "Not UTF-8", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not text/markdown or text/plain", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a readable plan.md (`line` says where)", body = Problem, content_type = "application/problem+json"),
    ))]
async fn parse(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<ParsedPlanResponse>, ApiError> {
    let kind = content_type(&headers);
    if !(kind.starts_with("text/markdown") || kind.starts_with("text/plain")) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ProblemCode::UnsupportedMediaType,
            "send the plan.md as text/markdown",
        ));
    }
    let text = std::str::from_utf8(&body).map_err(|e| {
        ApiError::bad_request(
            ProblemCode::InvalidUtf8,
            format!("the body is not UTF-8: {e}"),
        )
    })?;
    Ok(Json(state.service.parse_plan_markdown(&caller, text)?))
}
