//! `/v1/refine-runs`: split a whole plan into one refine job per phase, run them in
//! parallel on the worker pool (any replica), merge once when the last one ends.
//! The use cases are in `service/refine_runs.rs`.

use axum::response::Response;
use serde_json::Value;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::AppState;
use super::auth::ApiCall;
use super::extract::{Json, Query, RunPath};
use super::refine_jobs::{Submission, WaitQuery, accepted};
use super::responses::{BudgetExhausted, NoSuchRun, RefineSubmission, RunById};
use crate::http::problem::{ApiError, Problem};
use crate::http::responses::ForbiddenProject;
use crate::service::refine_runs::{CreateRefineRunRequest, StoredRun};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_refine_run))
        .routes(routes!(get_refine_run))
        .routes(routes!(refine_run_result))
        .routes(routes!(cancel_refine_run))
}

/// Submit a whole plan: one refine job per phase (natural order, each with
/// `peer_summaries` of every other phase's assignments), run in parallel; the
/// merge resolves cross-phase file ownership over `estimated_files ∪
/// files_touched`, naturally-earliest assignment first.
#[utoipa::path(post, path = "/v1/refine-runs", tag = "refine-runs",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes the create safe to retry")),
    request_body(content = CreateRefineRunRequest, content_type = "application/json"),
    responses(
        ForbiddenProject,
        (status = 202, description = "Queued (or the original run of this Idempotency-Key)", body = StoredRun,
            headers(("Location" = String, description = "The run's URL"))),
        (status = 422, description = "`invalid_plan` (FATAL: failed to parse request body: …), `unknown_executor`, \
            `output_not_allowed`, `invalid_field`, `invalid_idempotency_key`, `idempotency_key_reused`",
            body = Problem, content_type = "application/problem+json"),
        RefineSubmission,
        BudgetExhausted,
    ))]
async fn create_refine_run(
    ApiCall { service, caller }: ApiCall,
    sent: Submission,
) -> Result<Response, ApiError> {
    let created = service
        .create_refine_run(&caller, &sent.body, sent.key())
        .await?;
    Ok(accepted(&created, "/v1/refine-runs", created.value.id))
}

/// A refine run: its phase jobs and, once merged, its result. With `?wait=N`
/// the answer comes as soon as the run or one of its jobs changes.
#[utoipa::path(get, path = "/v1/refine-runs/{id}", tag = "refine-runs",
    params(("id" = Uuid, Path, description = "Run id"), WaitQuery),
    responses(
        (status = 200, description = "The run", body = StoredRun),
        (status = 400, description = "Not a run id, or a bad `wait`", body = Problem, content_type = "application/problem+json"),
        NoSuchRun,
    ))]
async fn get_refine_run(
    ApiCall { service, caller }: ApiCall,
    RunPath(id): RunPath,
    Query(query): Query<WaitQuery>,
) -> Result<Json<StoredRun>, ApiError> {
    Ok(Json(service.refine_run(&caller, id, query.wait).await?))
}

/// The merged result `{schema_version: 1, assignments, conflict_count, skipped,
/// phases, conflicts, emptied_work_packages}`.
#[utoipa::path(get, path = "/v1/refine-runs/{id}/result", tag = "refine-runs",
    params(("id" = Uuid, Path, description = "Run id")),
    responses(
        (status = 200, description = "The merged assignments", body = Object),
        RunById,
        (status = 409, description = "`run_not_finished`: not merged yet; the problem carries its `run_status`", body = Problem, content_type = "application/problem+json"),
    ))]
async fn refine_run_result(
    ApiCall { service, caller }: ApiCall,
    RunPath(id): RunPath,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(service.refine_run_result(&caller, id).await?))
}

/// Cancel a run: every phase job not yet ended is cancelled; the run ends
/// `cancelled` (with what finished merged) once they have. Idempotent.
#[utoipa::path(post, path = "/v1/refine-runs/{id}/cancel", tag = "refine-runs",
    params(("id" = Uuid, Path, description = "Run id")),
    responses(
        (status = 200, description = "The run after the request", body = StoredRun),
        RunById,
    ))]
async fn cancel_refine_run(
    ApiCall { service, caller }: ApiCall,
    RunPath(id): RunPath,
) -> Result<Json<StoredRun>, ApiError> {
    Ok(Json(service.cancel_refine_run(&caller, id).await?))
}
