//! `plangate mcp`: the tools over stdio for a local agent. stdout carries JSON-RPC
//! only; every log line goes to stderr (`telemetry::init` writes there). The
//! process around it (database, refine workers) is assembled by
//! `app::serve_mcp_stdio`.

use std::future::Future;
use std::sync::Arc;

use rmcp::ServiceExt;

use super::{PlangateMcp, Surface, Transport};
use crate::config::Settings;
use crate::service::Service;

/// Serve until the client closes stdin or `shutdown` resolves (SIGTERM/SIGINT).
pub async fn run_stdio(
    service: Service,
    surface: Surface,
    settings: &Arc<Settings>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), std::io::Error> {
    let server = PlangateMcp::new(service, surface, Transport::Stdio, settings);
    tracing::info!(?surface, "plangate mcp serving on stdio");
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(std::io::Error::other)?;
    tokio::select! {
        ended = running.waiting() => ended.map(|_| ()).map_err(std::io::Error::other),
        _ = shutdown => Ok(()),
    }
}
