//! `/v1/refine-jobs`: submit a phase refine (202 + `Location`, idempotent with a
//! key), read it (`?wait=` long-poll), list, result, per-L0 records, SSE events,
//! cancel. The use cases are in `service/refine_jobs.rs`.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::IntoParams;
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use super::AppState;
use super::auth::ApiCall;
use super::extract::{JobPath, Json, Query, refuse_nul};
use super::responses::{
    BudgetExhausted, DatabaseUnavailable, JobById, NoSuchJob, RefineSubmission,
};
use crate::http::problem::{ApiError, Problem};
use crate::http::responses::ForbiddenProject;
use crate::service::refine_jobs::{
    CreateRefineJobRequest, JobListQuery, JobPage, StoredJob, StoredL0,
};
use crate::service::{Accepted, ProblemCode};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_refine_job, list_refine_jobs))
        .routes(routes!(get_refine_job))
        .routes(routes!(refine_job_result))
        .routes(routes!(refine_job_assignments))
        .routes(routes!(refine_job_events))
        .routes(routes!(cancel_refine_job))
        .routes(routes!(retry_refine_job))
}

/// What every create reads before its use case: a body declared JSON with no NUL,
/// and the raw `Idempotency-Key` header (the use case checks it).
pub(crate) struct Submission {
    pub body: Bytes,
    idempotency_key: Option<HeaderValue>,
}

impl Submission {
    pub fn key(&self) -> Option<&[u8]> {
        self.idempotency_key.as_ref().map(HeaderValue::as_bytes)
    }
}

impl<S: Send + Sync> FromRequest<S> for Submission {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let declared_json = require_json(request.headers());
        let idempotency_key = request.headers().get("idempotency-key").cloned();
        // The body is read (413 over the limit) before its type is refused (415).
        let body = Bytes::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        declared_json
            .and_then(|()| refuse_nul(&body))
            .map_err(IntoResponse::into_response)?;
        Ok(Submission {
            body,
            idempotency_key,
        })
    }
}

/// 202 with `Location: {collection}/{id}`, and `Idempotent-Replayed: true` for a
/// replayed create.
pub(crate) fn accepted<T: Serialize>(
    created: &Accepted<T>,
    collection: &str,
    id: Uuid,
) -> Response {
    let mut response = (StatusCode::ACCEPTED, Json(&created.value)).into_response();
    let headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(&format!("{collection}/{id}")) {
        headers.insert(header::LOCATION, location);
    }
    if created.replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}

/// 415 unless the body is declared JSON (a missing header is tolerated, since
/// the body is parsed as JSON anyway, but a different type is refused).
fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let ok = value
        .to_str()
        .ok()
        .and_then(|v| v.split(';').next())
        .map(|v| {
            let v = v.trim().to_ascii_lowercase();
            v == "application/json" || (v.starts_with("application/") && v.ends_with("+json"))
        })
        .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ProblemCode::UnsupportedMediaType,
            "send the body as application/json",
        ))
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// Long-poll: return as soon as the job changes, or after this many seconds
    /// (at most 30).
    #[param(minimum = 0, maximum = 30)]
    pub wait: Option<u64>,
}

/// Submit a refine job for one phase.
///
/// Runs asynchronously: poll `GET /v1/refine-jobs/{id}?wait=30` or follow
/// `/events`. With an `Idempotency-Key`, a retry with the same body returns the
/// original job (header `Idempotent-Replayed: true`); another body with that key
/// is a 422.
#[utoipa::path(post, path = "/v1/refine-jobs", tag = "refine-jobs",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes the create safe to retry")),
    request_body(content = CreateRefineJobRequest, content_type = "application/json"),
    responses(
        ForbiddenProject,
        (status = 202, description = "Queued (or the original job of this Idempotency-Key)", body = StoredJob,
            headers(("Location" = String, description = "The job's URL"))),
        (status = 422, description = "`invalid_context` (FATAL: failed to parse request body: …), `unknown_executor`, \
            `task_file_not_allowed`, `output_not_allowed`, `invalid_field`, `unknown_run`, \
            `invalid_idempotency_key`, `idempotency_key_reused`", body = Problem, content_type = "application/problem+json"),
        RefineSubmission,
        BudgetExhausted,
    ))]
async fn create_refine_job(
    ApiCall { service, caller }: ApiCall,
    sent: Submission,
) -> Result<Response, ApiError> {
    let created = service
        .create_refine_job(&caller, &sent.body, sent.key())
        .await?;
    Ok(accepted(&created, "/v1/refine-jobs", created.value.id))
}

/// A refine job. With `?wait=N` the answer comes as soon as the job changes
/// state or progresses (or after N seconds, unchanged).
#[utoipa::path(get, path = "/v1/refine-jobs/{id}", tag = "refine-jobs",
    params(("id" = Uuid, Path, description = "Job id"), WaitQuery),
    responses(
        (status = 200, description = "The job", body = StoredJob),
        (status = 400, description = "Not a job id, or a bad `wait`", body = Problem, content_type = "application/problem+json"),
        NoSuchJob,
    ))]
async fn get_refine_job(
    ApiCall { service, caller }: ApiCall,
    JobPath(id): JobPath,
    Query(query): Query<WaitQuery>,
) -> Result<Json<StoredJob>, ApiError> {
    Ok(Json(service.refine_job(&caller, id, query.wait).await?))
}

/// Refine jobs, newest first, filtered, in cursor pages.
#[utoipa::path(get, path = "/v1/refine-jobs", tag = "refine-jobs",
    params(JobListQuery),
    responses(
        ForbiddenProject,
        (status = 200, description = "A page of jobs", body = JobPage),
        (status = 400, description = "Bad filter, page size or page token", body = Problem, content_type = "application/problem+json"),
        DatabaseUnavailable,
    ))]
async fn list_refine_jobs(
    ApiCall { service, caller }: ApiCall,
    Query(query): Query<JobListQuery>,
) -> Result<Json<JobPage>, ApiError> {
    Ok(Json(service.refine_jobs(&caller, query).await?))
}

/// The result document `{schema_version: 1, assignments}` of a succeeded job.
#[utoipa::path(get, path = "/v1/refine-jobs/{id}/result", tag = "refine-jobs",
    params(("id" = Uuid, Path, description = "Job id")),
    responses(
        (status = 200, description = "The refined assignments of the phase", body = Object),
        JobById,
        (status = 409, description = "`job_not_succeeded`: the job has not succeeded (yet); the problem carries its `job_status`", body = Problem, content_type = "application/problem+json"),
    ))]
async fn refine_job_result(
    ApiCall { service, caller }: ApiCall,
    JobPath(id): JobPath,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(service.refine_job_result(&caller, id).await?))
}

/// Per-L0 records, in natural assignment order.
#[utoipa::path(get, path = "/v1/refine-jobs/{id}/assignments", tag = "refine-jobs",
    params(("id" = Uuid, Path, description = "Job id")),
    responses(
        (status = 200, description = "One record per assignment", body = Vec<StoredL0>),
        JobById,
    ))]
async fn refine_job_assignments(
    ApiCall { service, caller }: ApiCall,
    JobPath(id): JobPath,
) -> Result<Json<Vec<StoredL0>>, ApiError> {
    Ok(Json(service.refine_job_assignments(&caller, id).await?))
}

/// Server-Sent Events: `state`, `progress` and `log` events, each with the
/// job's event number as `id`. Reconnect with `Last-Event-ID` to resume; the
/// stream ends after the terminal `state` event.
#[utoipa::path(get, path = "/v1/refine-jobs/{id}/events", tag = "refine-jobs",
    params(
        ("id" = Uuid, Path, description = "Job id"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event"),
    ),
    responses(
        (status = 200, description = "`text/event-stream` of `state`, `progress` and `log` events", content_type = "text/event-stream", body = String),
        (status = 400, description = "Not a job id, or a bad Last-Event-ID", body = Problem, content_type = "application/problem+json"),
        NoSuchJob,
    ))]
async fn refine_job_events(
    ApiCall { service, caller }: ApiCall,
    JobPath(id): JobPath,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let last_event_id = headers.get("last-event-id").map(HeaderValue::as_bytes);
    let events = service
        .refine_job_events(&caller, id, last_event_id)
        .await?;
    let stream = events.map(|e| {
        Ok(Event::default()
            .id(e.id.to_string())
            .event(e.event)
            .data(e.data.to_string()))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// Cancel a job. Idempotent: a terminal job is returned unchanged; a queued one
/// is cancelled at once; a running one goes `cancelling` while its L0 process
/// groups are killed, then `cancelled`.
#[utoipa::path(post, path = "/v1/refine-jobs/{id}/cancel", tag = "refine-jobs",
    params(("id" = Uuid, Path, description = "Job id")),
    responses(
        (status = 200, description = "The job after the request", body = StoredJob),
        JobById,
    ))]
async fn cancel_refine_job(
    ApiCall { service, caller }: ApiCall,
    JobPath(id): JobPath,
) -> Result<Json<StoredJob>, ApiError> {
    Ok(Json(service.cancel_refine_job(&caller, id).await?))
}

/// Retry an ended job that did not succeed (failed, budget-stopped or
/// cancelled): a new job made from the same stored request, with the same
/// executor, project, cycle and budget. The new job names the original in
/// `retry_of`; the original shows it as `retried_by`. One retry per job. A run's
/// phase job is retried on its own, outside its run.
#[utoipa::path(post, path = "/v1/refine-jobs/{id}/retry", tag = "refine-jobs",
    params(("id" = Uuid, Path, description = "Id of the job to retry")),
    responses(
        (status = 201, description = "The new job, queued; `Location` is its URL", body = StoredJob,
            headers(("Location" = String, description = "/v1/refine-jobs/{new id}"))),
        JobById,
        (status = 409, description = "`job_not_retryable`: the job has not ended, succeeded, or was retried already (the detail names its retry); the problem carries its `job_status`", body = Problem, content_type = "application/problem+json"),
        BudgetExhausted,
    ))]
async fn retry_refine_job(
    ApiCall { service, caller }: ApiCall,
    JobPath(id): JobPath,
) -> Result<Response, ApiError> {
    let job = service.retry_refine_job(&caller, id).await?;
    let mut response = (StatusCode::CREATED, Json(&job)).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/refine-jobs/{}", job.id)) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}
