//! The Streamable HTTP endpoints: `/mcp` and `/mcp/readonly`, stateless with JSON
//! responses, mounted behind the same bearer auth and middleware stack as `/v1`.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ErrorCode};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

use super::{PlangateMcp, Surface, Transport};
use crate::config::Settings;
use crate::service::Service;

/// Both surfaces. The caller of each request is the one the auth middleware put on
/// it, so the routes must sit behind that middleware (as `/v1` does).
pub fn router<S: Clone + Send + Sync + 'static>(
    service: &Service,
    settings: &Arc<Settings>,
) -> Router<S> {
    Router::new()
        .route_service("/mcp", endpoint(service, Surface::Full, settings))
        .route_service(
            "/mcp/readonly",
            endpoint(service, Surface::ReadOnly, settings),
        )
        .layer(axum::middleware::from_fn(reject_malformed_jsonrpc))
}

fn endpoint(
    service: &Service,
    surface: Surface,
    settings: &Arc<Settings>,
) -> StreamableHttpService<PlangateMcp, NeverSessionManager> {
    let server = PlangateMcp::new(service.clone(), surface, Transport::Http, settings);
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(settings.body_limit)
        // `Host` and `Origin` are checked for every route, this one included, by
        // `http::perimeter` (configurable, and exempting nothing the SDK would need).
        .disable_allowed_hosts();
    StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// The SDK answers a body it cannot read as a JSON-RPC message with a bare 415;
/// clients were promised JSON-RPC errors: -32700 for text that is not JSON, -32600
/// for JSON that is not a request, -32602 for a known method with unusable params.
/// The body is read once here (the stack's limit still applies: 413) and handed on.
async fn reject_malformed_jsonrpc(request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        // The only read error here is the stack's body limit.
        Err(_) => return StatusCode::PAYLOAD_TOO_LARGE.into_response(),
    };
    if let Some(rejection) = malformed(&bytes) {
        return rejection;
    }
    let mut parts = parts;
    // The SDK may run the tool in a task of its own: the request span's context
    // travels with the request, for the tool call's span (docs/observability.md).
    if let Some(traceparent) = crate::telemetry::current_traceparent() {
        parts.extensions.insert(super::RequestTrace(traceparent));
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The methods plangate's server answers (tools only; no prompts or resources).
const SERVED_METHODS: [&str; 5] = [
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
];

fn malformed(bytes: &Bytes) -> Option<Response> {
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(value) => value,
        Err(e) => {
            return Some(jsonrpc_error(
                Value::Null,
                ErrorCode::PARSE_ERROR,
                format!("Parse error: {e}"),
            ));
        }
    };
    let error = match serde_json::from_value::<ClientJsonRpcMessage>(value.clone()) {
        // The SDK reads a served method whose params do not fit as a custom request,
        // which it would answer "method not found": they are invalid params.
        Ok(ClientJsonRpcMessage::Request(request)) => match &request.request {
            ClientRequest::CustomRequest(custom)
                if SERVED_METHODS.contains(&custom.method.as_str()) =>
            {
                format!("the params do not fit {}", custom.method)
            }
            _ => return None,
        },
        Ok(_) => return None,
        Err(error) => error.to_string(),
    };
    let id = value
        .get("id")
        .filter(|id| id.is_string() || id.is_number())
        .cloned()
        .unwrap_or(Value::Null);
    let is_request = value.get("jsonrpc") == Some(&json!("2.0"))
        && value.get("method").is_some_and(Value::is_string);
    Some(if is_request {
        jsonrpc_error(
            id,
            ErrorCode::INVALID_PARAMS,
            format!("Invalid params: {error}"),
        )
    } else {
        jsonrpc_error(
            id,
            ErrorCode::INVALID_REQUEST,
            "Invalid Request: expected one JSON-RPC 2.0 message {jsonrpc: \"2.0\", method, \
             params?, id?}"
                .to_owned(),
        )
    })
}

/// HTTP 400 with a JSON-RPC error body, as the reference SDKs answer what they
/// cannot dispatch.
fn jsonrpc_error(id: Value, code: ErrorCode, message: String) -> Response {
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code.0, "message": message},
    });
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
