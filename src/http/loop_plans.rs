//! `/v1/loop-plans`: generate a loop plan (JSON or plan.md) and parse a plan.md back.

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::AppState;
use super::extract::Json;
use crate::domain::loop_plan::{
    self, Dag, LoopPlan, LoopPlanRequest, PlanError, PlanErrorKind, Progress,
};
use crate::error::{ApiError, JsonBodyRejections, Problem};

const MARKDOWN: &str = "text/markdown; charset=utf-8";

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(generate))
        .routes(routes!(parse))
}

fn plan_error(err: PlanError) -> ApiError {
    let code = match err.kind {
        PlanErrorKind::InvalidRequest => "invalid_body",
        PlanErrorKind::InvalidPlanMarkdown => "invalid_plan_markdown",
        PlanErrorKind::InvalidTracksMarkdown => "invalid_tracks_md",
    };
    let problem = ApiError::unprocessable(code, err.message);
    match err.line {
        Some(line) => problem.with("line", line),
        None => problem,
    }
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
fn read_request(headers: &HeaderMap, body: &Bytes) -> Result<LoopPlanRequest, ApiError> {
    let kind = content_type(headers);
    if ["application/yaml", "application/x-yaml", "text/yaml"]
        .iter()
        .any(|yaml| kind.starts_with(yaml))
    {
        let text = std::str::from_utf8(body).map_err(|e| {
            ApiError::bad_request("invalid_utf8", format!("the body is not UTF-8: {e}"))
        })?;
        return loop_plan::parse_request_yaml(text).map_err(plan_error);
    }
    if !kind.starts_with("application/json") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
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
#[utoipa::path(post, path = "/v1/loop-plans/generate", operation_id = "generate_loop_plan", tag = "loop-plans",
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
async fn generate(headers: HeaderMap, body: Bytes) -> Result<Response, ApiError> {
    let request = read_request(&headers, &body)?;
    let plan = loop_plan::plan(&request);
    if !plan.is_valid() {
        let first = plan
            .errors
            .first()
            .map(|e| e.message.clone())
            .unwrap_or_default();
        return Err(ApiError::unprocessable(
            "dag_invalid",
            format!("the task DAG is invalid: {first}"),
        )
        .with(
            "errors",
            serde_json::to_value(&plan.errors).unwrap_or_default(),
        ));
    }
    if wants_markdown(&headers) {
        let text = loop_plan::render_markdown(&plan);
        return Ok(([(header::CONTENT_TYPE, MARKDOWN)], text).into_response());
    }
    Ok(Json(plan).into_response())
}

/// The JSON form of a parse request, for clients that send JSON only.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ParsePlanRequest {
    /// The plan.md text.
    pub markdown: String,
}

#[derive(Serialize, ToSchema)]
pub struct ParsedPlanResponse {
    pub dag: Dag,
    pub progress: Progress,
}

/// Read a plan.md back: its YAML DAG block and the task markers `[ ]`, `[~]`,
/// `[x]`, `[!]`.
#[utoipa::path(post, path = "/v1/loop-plans/parse", operation_id = "parse_loop_plan", tag = "loop-plans",
    request_body(description = "A plan.md: the text itself, or `{\"markdown\": text}` as JSON",
        content(
            (ParsePlanRequest = "application/json"),
            (String = "text/markdown"),
        )),
    responses(
        (status = 200, description = "The DAG and the progress", body = ParsedPlanResponse),
        (status = 400, description = "Not UTF-8, or malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not text/markdown, text/plain or application/json", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a readable plan.md (`line` says where)", body = Problem, content_type = "application/problem+json"),
    ))]
async fn parse(headers: HeaderMap, body: Bytes) -> Result<Json<ParsedPlanResponse>, ApiError> {
    let kind = content_type(&headers);
    let json_request;
    let text = if kind.starts_with("application/json") {
        let axum::Json(request) = axum::Json::<ParsePlanRequest>::from_bytes(&body)?;
        json_request = request;
        json_request.markdown.as_str()
    } else if kind.starts_with("text/markdown") || kind.starts_with("text/plain") {
        std::str::from_utf8(&body).map_err(|e| {
            ApiError::bad_request("invalid_utf8", format!("the body is not UTF-8: {e}"))
        })?
    } else {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the plan.md as text/markdown, or as {\"markdown\": text} in application/json",
        ));
    };
    let parsed = loop_plan::parse_markdown(text).map_err(plan_error)?;
    Ok(Json(ParsedPlanResponse {
        dag: parsed.dag,
        progress: parsed.progress,
    }))
}
