//! `/v1/loop-plans`: generate a loop plan (JSON or plan.md) and parse a plan.md back.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::AppState;
use super::auth::{ApiCall, Caller};
use super::extract::Json;
use crate::domain::loop_plan::{LoopPlan, LoopPlanRequest};
use crate::http::problem::{ApiError, Problem};
use crate::http::responses::JsonBodyRejections;
use crate::service::loop_plans::ParsedPlanResponse;
use crate::service::{ProblemCode, Service, ServiceError};

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
    service: &Service,
    caller: &Caller,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<LoopPlanRequest, ApiError> {
    let kind = content_type(headers);
    if ["application/yaml", "application/x-yaml", "text/yaml"]
        .iter()
        .any(|yaml| kind.starts_with(yaml))
    {
        return Ok(service.parse_loop_plan_yaml(caller, utf8(body)?)?);
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
async fn generate(
    ApiCall { service, caller }: ApiCall,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request = read_request(&service, &caller, &headers, &body)?;
    let plan = service.generate_loop_plan(&caller, &request)?;
    if wants_markdown(&headers) {
        let text = service.render_plan_markdown(&plan);
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
async fn parse(
    ApiCall { service, caller }: ApiCall,
    PlanText(text): PlanText,
) -> Result<Json<ParsedPlanResponse>, ApiError> {
    Ok(Json(service.parse_plan_markdown(&caller, &text)?))
}

/// The plan.md of a parse request: the body itself (`text/markdown`, `text/plain`)
/// or its `markdown` member (`application/json`).
pub struct PlanText(String);

impl<S: Send + Sync> FromRequest<S> for PlanText {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let kind = content_type(request.headers()).to_owned();
        let body = Bytes::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        plan_text(&kind, &body)
            .map(PlanText)
            .map_err(IntoResponse::into_response)
    }
}

fn plan_text(kind: &str, body: &[u8]) -> Result<String, ApiError> {
    if kind.starts_with("application/json") {
        let axum::Json(request) = axum::Json::<ParsePlanRequest>::from_bytes(body)?;
        Ok(request.markdown)
    } else if kind.starts_with("text/markdown") || kind.starts_with("text/plain") {
        Ok(utf8(body)?.to_owned())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ProblemCode::UnsupportedMediaType,
            "send the plan.md as text/markdown, or as {\"markdown\": text} in application/json",
        ))
    }
}

fn utf8(body: &[u8]) -> Result<&str, ApiError> {
    std::str::from_utf8(body).map_err(|e| {
        ServiceError::bad_request(
            ProblemCode::InvalidUtf8,
            format!("the body is not UTF-8: {e}"),
        )
        .into()
    })
}
