//! `plangate mcp`: the tools over stdio for a local agent, in-process on the
//! configured database, with the refine workers running here too so a job
//! started over stdio finishes with no server. stdout carries JSON-RPC only; every
//! log line goes to stderr (`telemetry::init` writes there).

use std::sync::Arc;

use rmcp::ServiceExt;

use super::{PlangateMcp, Surface, Transport};
use crate::config::Settings;
use crate::db::Database;
use crate::service::Service;

/// Serve until the client closes stdin (or SIGTERM/SIGINT), then stop the workers
/// (running L0s get the shutdown grace) and close the database.
pub async fn run_stdio(
    settings: Settings,
    db: Database,
    surface: Surface,
) -> Result<(), crate::StartError> {
    let settings = Arc::new(settings);
    let executors = crate::agents::Executors::from_settings(&settings)?;
    let service = Service::new(db.clone(), settings.clone(), executors.clone());
    let stop_workers = tokio_util::sync::CancellationToken::new();
    let workers = crate::jobs::start(
        db.clone(),
        settings.clone(),
        executors,
        service.hub().clone(),
        stop_workers.clone(),
    );
    let server = PlangateMcp::new(service.clone(), surface, Transport::Stdio, &settings);
    tracing::info!(database = ?db.kind(), ?surface, "plangate mcp serving on stdio");
    let outcome = match server.serve(rmcp::transport::stdio()).await {
        Ok(running) => {
            tokio::select! {
                ended = running.waiting() => ended.map(|_| ()).map_err(|e| e.to_string()),
                _ = crate::shutdown_signal() => Ok(()),
            }
        }
        Err(e) => Err(e.to_string()),
    };
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
    outcome.map_err(|e| crate::StartError::Io(std::io::Error::other(e)))
}
