//! HTTP transport: the router, its one middleware stack, and one module per resource.
//! Handlers are thin: extract (typed, with problem+json rejections), call one
//! use case of [`Service`], map the answer. Nothing here touches storage.

pub mod auth;
pub mod connections;
mod doc;
pub mod extract;
pub mod gating_memory;
pub mod loop_plans;
pub mod middleware;
pub mod ops;
pub mod perimeter;
pub mod problem;
pub mod projects;
pub mod rate_limits;
pub mod refine_jobs;
pub mod refine_runs;
mod responses;
pub mod task_lists;
pub mod tasks;
pub mod tracks;
pub mod webhooks;

use std::sync::Arc;

use axum::Router;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

pub use crate::state::AppState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "plangate",
        description = "Deterministic, durable planning for LLM-agent orchestrators: task-list \
                       gating, wave dispatch, per-cycle status. Errors are RFC 9457 \
                       `application/problem+json` with a stable `code`.",
        license(name = "MIT")
    ),
    // Enums named only by query parameters, and the data of SSE events, must
    // still be in the components.
    components(schemas(
        crate::domain::dispatch::ReadyMode,
        crate::domain::dispatch::GraphFormat,
        crate::service::task_list_events::ListEvent,
    )),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "operations", description = "Health, readiness, metrics, docs"),
        (name = "task-lists", description = "Gate, persist and dispatch planner task lists"),
        (name = "projects", description = "Per-cycle status and teams"),
        (name = "loop-plans", description = "Task DAG levels, parallel groups and plan.md"),
        (name = "tracks", description = "Track loop state: metadata.json v2 and its steps"),
        (name = "refine-runs", description = "Whole-plan refine runs: split by phase, run in parallel, merge once"),
        (name = "refine-jobs", description = "Durable per-phase refine jobs: L0 fan-out, validation, WP ownership"),
        (name = "webhooks", description = "Signed Standard Webhooks deliveries of what ended, from a transactional outbox"),
        (name = "rate-limits", description = "Provider rate limits shared by every replica: state and runtime changes"),
    )
)]
struct ApiDoc;

/// Declares the bearer scheme so `/docs` offers "Authorize". It applies to `/v1`
/// routes when `PLANGATE_API_TOKENS` is set; ops routes override it with none.
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Every documented route, with its OpenAPI description.
fn api_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(ops::router())
        .merge(task_lists::router())
        .merge(tasks::router())
        .merge(projects::router())
        .merge(loop_plans::router())
        .merge(tracks::router())
        .merge(refine_jobs::router())
        .merge(refine_runs::router())
        .merge(webhooks::router())
        .merge(rate_limits::router())
}

/// The OpenAPI document the server serves (and `openapi/openapi.json` holds).
pub fn openapi() -> utoipa::openapi::OpenApi {
    doc::finish(api_router().split_for_parts().1)
}

/// The API's routes, its OpenAPI document at `/openapi.json` and the Swagger UI;
/// `app::router` merges the other adapters' routes and adds the middleware stack.
pub fn routes() -> Router<AppState> {
    let (router, api) = api_router().split_for_parts();
    let api = Arc::new(doc::finish(api));
    router
        .route(
            "/openapi.json",
            axum::routing::get(move || {
                let api = api.clone();
                async move { axum::Json((*api).clone()) }
            }),
        )
        .merge(ops::docs_router())
}
