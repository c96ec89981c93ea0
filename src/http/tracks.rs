//! `/v1/tracks/{track_id}`: metadata.json v2 per track, and its loop-state steps.
//!
//! Every write is a compare-and-set on the stored revision (the `ETag`). With
//! `If-Match` a stale tag answers 412; without it the change is re-applied to the
//! newest document (re-checking the transition), so no concurrent write is lost.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use utoipa::IntoParams;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::AppState;
use super::auth::ApiCall;
use super::extract::{Json, Path, Query, StorableJson, TrackPath};
use super::responses::{StaleIfMatch, StepRefusals, TrackById};
use crate::domain::track_state::{Completion, Metadata, StepStart, TrackId};
use crate::http::problem::{ApiError, Problem};
use crate::http::responses::{ForbiddenProject, JsonBodyRejections};
use crate::service::tracks::{Precondition, StepWrite, TrackHistory, TrackVersion, parse_track_id};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(put_track, get_track))
        .routes(routes!(start_step))
        .routes(routes!(complete_step))
        .routes(routes!(track_history))
}

/// `If-Match` as a precondition: none when absent or blank, `Exists` for `*` (or
/// an empty list of tags, which RFC 9110 `#entity-tag` allows), else the revision;
/// a tag that is not one of ours can never match, so it is an impossible revision.
fn precondition(headers: &HeaderMap) -> Precondition {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Precondition::None;
    };
    if value.as_bytes().iter().all(u8::is_ascii_whitespace) {
        return Precondition::None;
    }
    let value = value.to_str().unwrap_or("\"invalid\"").trim();
    if value == "*" || value.is_empty() {
        return Precondition::Exists;
    }
    let tag = value.trim_start_matches("W/").trim_matches('"');
    Precondition::Revision(tag.parse::<i64>().unwrap_or(-1))
}

fn respond(status: StatusCode, track: &TrackVersion) -> Response {
    let mut response = (status, Json(&track.metadata)).into_response();
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", track.revision)) {
        response.headers_mut().insert(header::ETAG, etag);
    }
    response
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ImportQuery {
    /// The project the track belongs to. Required for a token limited to
    /// projects when creating; a replace without it keeps the stored project.
    #[param(value_type = Option<crate::domain::ids::Ident>, nullable = false)]
    pub project_id: Option<String>,
}

/// Import (create or replace) a track's metadata; v1 documents are upgraded to v2.
/// Re-importing re-opens a `blocked` or `complete` track.
///
/// A track belongs to the project named by `project_id` (or to none: then only
/// unrestricted tokens may read or change it).
#[utoipa::path(put, path = "/v1/tracks/{track_id}", tag = "tracks",
    params(
        ("track_id" = TrackId, Path, description = "Letters, digits, `.`, `_`, `-`"),
        ImportQuery,
        ("If-Match" = Option<String>, Header, nullable = false, description = "Replace only this version (ETag)"),
    ),
    request_body(content = Object, description = "metadata.json v1 or v2"),
    responses(
        JsonBodyRejections,
        ForbiddenProject,
        (status = 200, description = "Replaced", body = Metadata, headers(("ETag" = String))),
        (status = 201, description = "Created", body = Metadata, headers(("ETag" = String))),
        (status = 400, description = "Invalid track id, malformed JSON or an unknown query parameter", body = Problem, content_type = "application/problem+json"),
        StaleIfMatch,
        (status = 422, description = "Not a usable metadata document, or an invalid project_id", body = Problem, content_type = "application/problem+json"),
    ))]
async fn put_track(
    ApiCall { service, caller }: ApiCall,
    TrackPath(id): TrackPath,
    Query(query): Query<ImportQuery>,
    headers: HeaderMap,
    StorableJson(document): StorableJson<Value>,
) -> Result<Response, ApiError> {
    let track = service
        .import_track(
            &caller,
            id,
            query.project_id.as_deref(),
            document,
            precondition(&headers),
        )
        .await?;
    let status = if track.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(respond(status, &track))
}

/// A track's metadata v2, with its version as `ETag`.
#[utoipa::path(get, path = "/v1/tracks/{track_id}", tag = "tracks",
    params(("track_id" = TrackId, Path, description = "The track")),
    responses(
        (status = 200, description = "The metadata", body = Metadata, headers(("ETag" = String))),
        TrackById,
    ))]
async fn get_track(
    ApiCall { service, caller }: ApiCall,
    TrackPath(id): TrackPath,
) -> Result<Response, ApiError> {
    let track = service.track(&caller, id).await?;
    Ok(respond(StatusCode::OK, &track))
}

/// A track's history, oldest first: every import and every step started or
/// completed, with its agent, verdict and notes, and the revision it made. The
/// document keeps only each step's latest checkpoint; this keeps them all.
#[utoipa::path(get, path = "/v1/tracks/{track_id}/history", operation_id = "track_history", tag = "tracks",
    params(("track_id" = TrackId, Path, description = "The track")),
    responses(
        (status = 200, description = "The history", body = TrackHistory),
        TrackById,
    ))]
async fn track_history(
    ApiCall { service, caller }: ApiCall,
    TrackPath(id): TrackPath,
) -> Result<Json<TrackHistory>, ApiError> {
    Ok(Json(service.track_history(&caller, id).await?))
}

/// Start the current step (sets it `IN_PROGRESS` with the agent).
#[utoipa::path(post, path = "/v1/tracks/{track_id}/steps/{step}/start", operation_id = "start_track_step", tag = "tracks",
    params(
        ("track_id" = TrackId, Path, description = "The track"),
        ("step" = String, Path, description = "PLAN, EVALUATE_PLAN, EXECUTE, EVALUATE_EXECUTION, FIX or BUSINESS_SYNC"),
        ("If-Match" = Option<String>, Header, nullable = false, description = "Apply only to this version (ETag)"),
    ),
    request_body = StepStart,
    responses(
        JsonBodyRejections,
        (status = 200, description = "The metadata after the change", body = Metadata, headers(("ETag" = String))),
        StepRefusals,
    ))]
async fn start_step(
    api: ApiCall,
    Path((raw_id, raw_step)): Path<(String, String)>,
    headers: HeaderMap,
    StorableJson(body): StorableJson<StepStart>,
) -> Result<Response, ApiError> {
    let write = StepWrite::Start { agent: &body.agent };
    step(api, &raw_id, &raw_step, write, &headers).await
}

/// Complete the current step with PASSED, FAILED or BLOCKED; the loop moves to the
/// step that outcome leads to (EVALUATE_PLAN FAILED goes back to PLAN,
/// EVALUATE_EXECUTION FAILED on to FIX).
#[utoipa::path(post, path = "/v1/tracks/{track_id}/steps/{step}/complete", operation_id = "complete_track_step", tag = "tracks",
    params(
        ("track_id" = TrackId, Path, description = "The track"),
        ("step" = String, Path, description = "PLAN, EVALUATE_PLAN, EXECUTE, EVALUATE_EXECUTION, FIX or BUSINESS_SYNC"),
        ("If-Match" = Option<String>, Header, nullable = false, description = "Apply only to this version (ETag)"),
    ),
    request_body = Completion,
    responses(
        JsonBodyRejections,
        (status = 200, description = "The metadata after the change", body = Metadata, headers(("ETag" = String))),
        StepRefusals,
    ))]
async fn complete_step(
    api: ApiCall,
    Path((raw_id, raw_step)): Path<(String, String)>,
    headers: HeaderMap,
    StorableJson(body): StorableJson<Completion>,
) -> Result<Response, ApiError> {
    let write = StepWrite::Complete(&body);
    step(api, &raw_id, &raw_step, write, &headers).await
}

/// Starts or completes `raw_step` of the track `raw_id`: the metadata after it.
async fn step(
    ApiCall { service, caller }: ApiCall,
    raw_id: &str,
    raw_step: &str,
    write: StepWrite<'_>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let id = parse_track_id(raw_id)?;
    let track = service
        .step_track(&caller, id, raw_step, write, precondition(headers))
        .await?;
    Ok(respond(StatusCode::OK, &track))
}
