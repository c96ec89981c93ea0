//! `/v1/tracks/{track_id}`: metadata.json v2 per track, and its loop-state steps.
//!
//! Every write is a compare-and-set on the stored revision (the `ETag`). With
//! `If-Match` a stale tag answers 412; without it the change is re-applied to the
//! newest document (re-checking the transition), so no concurrent write is lost.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::AppState;
use super::extract::{Json, Path, StoredJson};
use crate::db::DbError;
use crate::db::task_lists::now;
use crate::db::tracks::{StoredTrack, WriteOutcome};
use crate::domain::track_state::{
    self, Completion, Metadata, Step, StepStart, TrackError, TrackErrorCode, TrackId,
    TransitionCode, TransitionError,
};
use crate::error::{ApiError, JsonBodyRejections, Problem};

/// Compare-and-set retries for writers that sent no `If-Match`.
const MAX_WRITE_RETRIES: usize = 8;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(put_track, get_track))
        .routes(routes!(start_step))
        .routes(routes!(complete_step))
}

fn track_id(raw: &str) -> Result<TrackId, ApiError> {
    TrackId::parse(raw).map_err(|e| ApiError::bad_request("invalid_track_id", e.message))
}

fn track_error(err: TrackError) -> ApiError {
    let code = match err.code {
        TrackErrorCode::InvalidTrackId => "invalid_track_id",
        TrackErrorCode::InvalidMetadata => "invalid_metadata",
        TrackErrorCode::UnsupportedVersion => "unsupported_version",
        TrackErrorCode::TrackIdMismatch => "track_id_mismatch",
    };
    ApiError::unprocessable(code, err.message)
}

fn transition_error(err: TransitionError) -> ApiError {
    let (status, code) = match err.code {
        TransitionCode::IllegalTransition => (StatusCode::CONFLICT, "illegal_transition"),
        TransitionCode::UnknownStep => (StatusCode::CONFLICT, "unknown_step"),
        TransitionCode::TrackClosed => (StatusCode::CONFLICT, "track_closed"),
        TransitionCode::InvalidInput => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field"),
    };
    ApiError::new(status, code, err.message)
        .with("current_step", err.current_step)
        .with("step_status", err.step_status)
        .with("legal", err.legal)
}

/// `If-Match` as a revision: `None` when absent or `*`; a tag that is not one of
/// ours can never match, so it is kept as an impossible revision.
fn if_match(headers: &HeaderMap) -> Option<i64> {
    let value = headers
        .get(header::IF_MATCH)?
        .to_str()
        .unwrap_or("\"invalid\"")
        .trim();
    // An empty list of tags (RFC 9110 `#entity-tag` allows it) sets no condition.
    if value == "*" || value.is_empty() {
        return None;
    }
    let tag = value.trim_start_matches("W/").trim_matches('"');
    Some(tag.parse::<i64>().unwrap_or(-1))
}

fn precondition_failed(current: Option<i64>) -> ApiError {
    let detail = match current {
        Some(revision) => format!(
            "If-Match does not name the current version (ETag \"{revision}\"); read the track again and retry"
        ),
        None => "the track does not exist".to_owned(),
    };
    ApiError::new(StatusCode::PRECONDITION_FAILED, "stale_etag", detail)
}

fn respond(status: StatusCode, metadata: &Metadata, revision: i64) -> Response {
    let mut response = (status, Json(metadata)).into_response();
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{revision}\"")) {
        response.headers_mut().insert(header::ETAG, etag);
    }
    response
}

fn decode(track: &StoredTrack) -> Result<Metadata, ApiError> {
    serde_json::from_value(track.metadata.clone()).map_err(|e| {
        ApiError::from(DbError::Corrupt(format!(
            "stored track metadata does not parse: {e}"
        )))
    })
}

fn encode(metadata: &Metadata) -> Result<Value, ApiError> {
    serde_json::to_value(metadata).map_err(|e| {
        ApiError::from(DbError::Corrupt(format!(
            "metadata does not serialise: {e}"
        )))
    })
}

/// Import (create or replace) a track's metadata; v1 documents are upgraded to v2.
/// Re-importing re-opens a `blocked` or `complete` track.
#[utoipa::path(put, path = "/v1/tracks/{track_id}", tag = "tracks",
    params(
        ("track_id" = TrackId, Path, description = "Letters, digits, `.`, `_`, `-`"),
        ("If-Match" = Option<String>, Header, nullable = false, description = "Replace only this version (ETag)"),
    ),
    request_body(content = Object, description = "metadata.json v1 or v2"),
    responses(
        JsonBodyRejections,
        (status = 200, description = "Replaced", body = Metadata, headers(("ETag" = String))),
        (status = 201, description = "Created", body = Metadata, headers(("ETag" = String))),
        (status = 400, description = "Invalid track id or malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 412, description = "Stale If-Match", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not a usable metadata document", body = Problem, content_type = "application/problem+json"),
    ))]
async fn put_track(
    State(state): State<AppState>,
    Path(raw_id): Path<String>,
    headers: HeaderMap,
    StoredJson(document): StoredJson<Value>,
) -> Result<Response, ApiError> {
    let id = track_id(&raw_id)?;
    let metadata = track_state::import_for_track(&id, document, now()).map_err(track_error)?;
    let conditional = headers
        .get(header::IF_MATCH)
        .is_some_and(|v| !v.as_bytes().iter().all(u8::is_ascii_whitespace));
    let expected = match (conditional, if_match(&headers)) {
        (false, _) => None,
        (true, Some(revision)) => Some(Some(revision)),
        // `If-Match: *` (RFC 9110): replace only a track that exists, whatever its
        // version — so pin the one stored now.
        (true, None) => match state.db.track(id.as_str()).await? {
            Some(track) => Some(Some(track.revision)),
            None => return Err(precondition_failed(None)),
        },
    };
    match state
        .db
        .put_track(id.as_str(), &encode(&metadata)?, expected)
        .await?
    {
        WriteOutcome::Written { revision, created } => {
            let status = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(respond(status, &metadata, revision))
        }
        WriteOutcome::Stale { current } => Err(precondition_failed(current)),
    }
}

/// A track's metadata v2, with its version as `ETag`.
#[utoipa::path(get, path = "/v1/tracks/{track_id}", tag = "tracks",
    params(("track_id" = TrackId, Path, description = "The track")),
    responses(
        (status = 200, description = "The metadata", body = Metadata, headers(("ETag" = String))),
        (status = 400, description = "Invalid track id", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such track", body = Problem, content_type = "application/problem+json"),
    ))]
async fn get_track(
    State(state): State<AppState>,
    Path(raw_id): Path<String>,
) -> Result<Response, ApiError> {
    let id = track_id(&raw_id)?;
    let track = state
        .db
        .track(id.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found("track", id.as_str()))?;
    Ok(respond(StatusCode::OK, &decode(&track)?, track.revision))
}

/// Read, apply a pure transition, compare-and-set; re-read and re-apply when
/// another writer got in between (unless the client pinned a version).
async fn apply_step(
    state: &AppState,
    raw_id: &str,
    raw_step: &str,
    headers: &HeaderMap,
    transition: impl Fn(&Metadata, Step) -> Result<Metadata, TransitionError>,
) -> Result<Response, ApiError> {
    let id = track_id(raw_id)?;
    let pinned = if_match(headers);
    for _ in 0..MAX_WRITE_RETRIES {
        let track = state
            .db
            .track(id.as_str())
            .await?
            .ok_or_else(|| ApiError::not_found("track", id.as_str()))?;
        if let Some(expected) = pinned
            && expected != track.revision
        {
            return Err(precondition_failed(Some(track.revision)));
        }
        let current = decode(&track)?;
        let step = Step::parse(raw_step)
            .ok_or_else(|| transition_error(track_state::unknown_step(&current, raw_step)))?;
        let next = transition(&current, step).map_err(transition_error)?;
        match state
            .db
            .update_track(id.as_str(), &encode(&next)?, track.revision)
            .await?
        {
            WriteOutcome::Written { revision, .. } => {
                return Ok(respond(StatusCode::OK, &next, revision));
            }
            WriteOutcome::Stale { current } if pinned.is_some() => {
                return Err(precondition_failed(current));
            }
            WriteOutcome::Stale { .. } => continue,
        }
    }
    Err(ApiError::conflict(
        "write_contention",
        "the track changed under every retry; try again",
    ))
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
        (status = 404, description = "No such track", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Unknown step, illegal transition or closed track; `legal` lists what may be done", body = Problem, content_type = "application/problem+json"),
        (status = 412, description = "Stale If-Match", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid body", body = Problem, content_type = "application/problem+json"),
    ))]
async fn start_step(
    State(state): State<AppState>,
    Path((raw_id, raw_step)): Path<(String, String)>,
    headers: HeaderMap,
    StoredJson(body): StoredJson<StepStart>,
) -> Result<Response, ApiError> {
    apply_step(&state, &raw_id, &raw_step, &headers, |meta, step| {
        track_state::start_step(meta, step, &body.agent, now())
    })
    .await
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
        (status = 404, description = "No such track", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Unknown step, illegal transition or closed track; `legal` lists what may be done", body = Problem, content_type = "application/problem+json"),
        (status = 412, description = "Stale If-Match", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid body", body = Problem, content_type = "application/problem+json"),
    ))]
async fn complete_step(
    State(state): State<AppState>,
    Path((raw_id, raw_step)): Path<(String, String)>,
    headers: HeaderMap,
    StoredJson(body): StoredJson<Completion>,
) -> Result<Response, ApiError> {
    apply_step(&state, &raw_id, &raw_step, &headers, |meta, step| {
        track_state::complete_step(meta, step, &body, now())
    })
    .await
}
