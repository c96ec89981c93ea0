//! Operations routes (no auth): health, readiness, metrics, docs.

use std::sync::OnceLock;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};
use utoipa_swagger_ui::{Config, SwaggerUi};

use super::AppState;
use super::extract::Json;
use crate::http::problem::ApiError;
use crate::service::ProblemCode;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
}

/// Swagger UI from the vendored assets: renders with no network. It reads the
/// document from `/openapi.json`, which the route table serves itself.
pub fn docs_router() -> Router<AppState> {
    let config = Config::new(["/openapi.json"])
        // The default validator badge would call validator.swagger.io.
        .validator_url("none")
        .try_it_out_enabled(true);
    SwaggerUi::new("/docs").config(config).into()
}

#[derive(Serialize, ToSchema)]
pub struct Health {
    /// `ok` while the process runs.
    #[schema(example = "ok")]
    status: &'static str,
}

/// Liveness: 200 while the process runs.
#[utoipa::path(get, path = "/healthz", tag = "operations", security(()),
    responses((status = 200, description = "The process runs", body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Readiness: the database answers, migrations are applied, not shutting down.
#[utoipa::path(get, path = "/readyz", tag = "operations", security(()),
    responses(
        (status = 200, description = "Ready to serve", body = Health),
        (status = 503, description = "Database unreachable, migrations missing, or shutting down",
         body = crate::http::problem::Problem, content_type = "application/problem+json"),
    ))]
async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    let unavailable = |detail: String| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ProblemCode::NotReady,
            detail,
        )
    };
    if state.is_shutting_down() {
        return Err(unavailable("shutting down".into()));
    }
    // A database that hangs must not hang the probe; and while it restarts, the
    // pool would wait for it to come back and answer 200 late — a replica whose
    // database cannot answer a trivial query within half a second is not ready.
    match tokio::time::timeout(Duration::from_millis(500), state.service.check_ready()).await {
        Ok(Ok(())) => Ok(Json(Health { status: "ok" })),
        Ok(Err(e)) => Err(unavailable(format!("database not ready: {e}"))),
        Err(_) => Err(unavailable("database did not answer within 0.5 s".into())),
    }
}

/// Prometheus metrics in the text exposition format.
#[utoipa::path(get, path = "/metrics", tag = "operations", security(()),
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")))]
async fn metrics() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics_handle().render(),
    )
}

/// Histogram samples pile up in the recorder until they are drained. `/metrics`
/// drains them, but a server nobody scrapes would grow by every request
/// (`bench/README.md`, memory), so drain them as often as the exporter's own
/// `install` does. Runs until dropped.
pub async fn drain_metrics_periodically() {
    let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        metrics_handle().run_upkeep();
    }
}

/// The process-wide recorder; installed once even when tests start many servers.
pub fn metrics_handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let buckets = [
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ];
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)
            .map(PrometheusBuilder::build_recorder)
            .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
        let handle = recorder.handle();
        // Fails only if another recorder is installed; ours then stays unused.
        let _ = metrics::set_global_recorder(recorder);
        handle
    })
}
