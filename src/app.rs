//! The composition root: builds the service, the job workers and the transports
//! from the settings, and runs them until shutdown. The only module that names every
//! layer; no layer names it (docs/architecture.md).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use tokio::net::TcpListener;

use crate::config::Settings;
use crate::db::{Database, DbError};
use crate::state::AppState;
use crate::{agents, http, jobs, mcp, service, ui};

/// The whole application: the API's routes, the MCP endpoint and the dashboard,
/// their fallbacks, and one middleware stack around them all.
pub fn router(state: AppState) -> Router {
    let router = http::routes()
        // MCP (docs/mcp.md): behind the same auth and stack as `/v1`.
        .merge(mcp::router(&state.service, &state.settings))
        .merge(ui::router(state.clone()))
        .route("/", axum::routing::get(root))
        .fallback(http::middleware::not_found)
        .method_not_allowed_fallback(http::middleware::method_not_allowed);
    // Inside auth: a refused caller takes nothing from the gating memory.
    let router = router
        .layer(axum::middleware::from_fn_with_state(
            http::gating_memory::GatingMemory::new(&state.settings),
            http::gating_memory::charge_large_bodies,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            http::auth::require_token,
        ))
        // Outside auth: a foreign page is refused whatever it presents; under `/ui`
        // with the dashboard's error page.
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(
                http::perimeter::PerimeterPolicy::new(&state.settings)
                    .with_page_refusal(ui::pages::error_page),
            ),
            http::perimeter::refuse_foreign_pages,
        ));
    http::middleware::stack(router, &state.settings).with_state(state)
}

/// `GET /`: a browser goes to the dashboard; any other client gets the API's 404
/// problem, as for every unknown path.
async fn root(headers: axum::http::HeaderMap, uri: axum::http::Uri) -> axum::response::Response {
    use axum::response::IntoResponse;
    if ui::wants_html(&headers) {
        axum::response::Redirect::to("/ui/").into_response()
    } else {
        http::middleware::not_found(uri).await.into_response()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open the database: {0}")]
    Database(#[from] DbError),
    #[error("cannot serve: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("invalid PLANGATE_TASK_DIR: {0}")]
    TaskDir(String),
}

/// Serve on `listener` and run the job workers until `shutdown` resolves, then
/// drain: `/readyz` turns 503, no new connections are accepted, workers stop
/// claiming, in-flight requests and running L0s get `shutdown_grace` to finish
/// (then L0s are killed and their jobs handed back), and the pool closes. Tests
/// call this with a `127.0.0.1:0` listener.
pub async fn serve(
    listener: TcpListener,
    settings: Settings,
    db: Database,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let started = Instant::now();
    let mut settings = settings;
    // The address actually bound (port 0 picks one): the server's own origins
    // carry its port (docs/configuration.md, "Perimeter").
    settings.bind = listener.local_addr()?;
    let settings = Arc::new(settings);
    if settings.api_tokens.is_empty() {
        tracing::warn!("PLANGATE_API_TOKENS is empty: /v1 routes accept requests without a token");
    }
    // Install the recorder before the first request so no request goes uncounted.
    http::ops::metrics_handle();
    let metrics_upkeep = tokio::spawn(http::ops::drain_metrics_periodically());
    let Started {
        service,
        workers,
        stop_workers,
    } = start(&settings, &db)?;
    let state = AppState::new(service.clone());
    let app = router(state.clone());

    let drain = Arc::new(tokio::sync::Notify::new());
    let on_signal = {
        let state = state.clone();
        let drain = drain.clone();
        let stop_workers = stop_workers.clone();
        async move {
            shutdown.await;
            tracing::info!("shutdown requested: draining");
            state.begin_shutdown();
            stop_workers.cancel();
            drain.notify_one();
        }
    };
    tracing::info!(
        address = %listener.local_addr()?,
        database = ?db.kind(),
        startup_ms = started.elapsed().as_millis() as u64,
        "plangate listening"
    );
    // Our own accept loop, not `axum::serve`: header-read and idle timeouts and a
    // connection cap (`http::connections`).
    let limits = http::connections::ConnectionLimits::from_settings(&settings);
    let server = http::connections::serve(listener, app, limits, on_signal);
    let grace = settings.shutdown_grace;
    tokio::select! {
        result = server => result?,
        _ = async { drain.notified().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(grace_secs = grace.as_secs(), "in-flight requests outlived the shutdown grace; closing");
        }
    }
    // The server can also end on its own (an I/O error): stop the workers then too.
    stop_workers.cancel();
    if workers.await.is_err() {
        tracing::error!("the job workers panicked");
    }
    metrics_upkeep.abort();
    db.close().await;
    tracing::info!("plangate stopped");
    Ok(())
}

/// `plangate mcp`: the MCP tools over stdio (docs/mcp.md), in-process on `db` with
/// the refine workers running here too, so a job started over stdio finishes with
/// no server. Ends when the client closes stdin; running L0s then get the shutdown
/// grace, as at a server's shutdown.
pub async fn serve_mcp_stdio(
    settings: Settings,
    db: Database,
    surface: mcp::Surface,
) -> Result<(), StartError> {
    let settings = Arc::new(settings);
    let Started {
        service,
        workers,
        stop_workers,
    } = start(&settings, &db)?;
    tracing::info!(database = ?db.kind(), "plangate mcp starting");
    let outcome = mcp::run_stdio(service.clone(), surface, &settings, shutdown_signal()).await;
    if let Err(e) = &outcome {
        tracing::error!(error = %e, "the MCP session ended with an error");
    }
    service.begin_shutdown();
    stop_workers.cancel();
    if workers.await.is_err() {
        tracing::error!("the job workers panicked");
    }
    db.close().await;
    tracing::info!("plangate mcp stopped");
    Ok(outcome?)
}

/// The use cases and the refine workers, as both processes (`serve`, `plangate mcp`)
/// run them: one set of executors shared by the service and the workers.
struct Started {
    service: service::Service,
    workers: tokio::task::JoinHandle<()>,
    stop_workers: tokio_util::sync::CancellationToken,
}

fn start(settings: &Arc<Settings>, db: &Database) -> Result<Started, StartError> {
    let executors = agents::Executors::from_settings(settings)?;
    let service = service::Service::new(db.clone(), settings.clone(), executors.clone());
    let stop_workers = tokio_util::sync::CancellationToken::new();
    let workers = jobs::start(
        db.clone(),
        settings.clone(),
        executors,
        service.hub().clone(),
        stop_workers.clone(),
    )
    .map_err(StartError::TaskDir)?;
    Ok(Started {
        service,
        workers,
        stop_workers,
    })
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use super::{AppState, router};
    use crate::agents::Executors;
    use crate::config::{FileConfig, ServeArgs, Settings};
    use crate::service::{Service, open_database};

    /// While draining, readiness is 503 although the database is fine. (Over real
    /// HTTP the listener no longer accepts by then, so this drives the router.)
    #[tokio::test]
    async fn readyz_turns_503_when_shutdown_begins() {
        let dir = tempfile::tempdir().unwrap();
        let args = ServeArgs {
            database_url: Some(format!("sqlite://{}", dir.path().join("t.db").display())),
            ..Default::default()
        };
        let settings = Settings::merge(&args, FileConfig::default()).unwrap();
        let settings = Arc::new(settings);
        let db = open_database(&settings).await.unwrap();
        let executors = Executors::from_settings(&settings).unwrap();
        let state = AppState::new(Service::new(db, settings, executors));
        let router = router(state.clone());
        let ready = |router: axum::Router| async move {
            let request = Request::get("/readyz").body(Body::empty()).unwrap();
            router.oneshot(request).await.unwrap().status().as_u16()
        };
        assert_eq!(ready(router.clone()).await, 200);
        state.begin_shutdown();
        assert_eq!(ready(router).await, 503);
    }
}
