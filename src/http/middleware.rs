//! The one middleware stack every route goes through, and the fallbacks.

use std::any::Any;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::{HeaderName, Method, StatusCode, Uri, header};
use axum::middleware::{self as axum_mw, Next};
use axum::response::{IntoResponse, Response};
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::compression::CompressionLayer;
use tower_http::compression::predicate::{NotForContentType, Predicate, SizeAbove};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::{DefaultOnResponse, OnResponse, TraceLayer};
use tracing::Level;

use super::AppState;
use crate::config::Settings;
use crate::http::problem::{ApiError, PROBLEM_JSON};
use crate::service::ProblemCode;
use crate::telemetry;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Outermost first: request id → trace span → id echoed back → metrics → gzip →
/// problem mapping → catch-panic → timeout → body limit → the route.
pub fn stack(router: Router<AppState>, settings: &Settings) -> Router<AppState> {
    router.layer(
        ServiceBuilder::new()
            .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
            .layer(
                TraceLayer::new_for_http()
                    .make_span_with(request_span)
                    .on_response(on_response),
            )
            .layer(PropagateRequestIdLayer::new(REQUEST_ID))
            .layer(axum_mw::from_fn(record_metrics))
            .layer(
                CompressionLayer::new()
                    .gzip(true)
                    .compress_when(worth_compressing()),
            )
            .layer(axum_mw::from_fn(problem_for_bare_errors))
            .layer(CatchPanicLayer::custom(panic_to_problem))
            .layer(TimeoutLayer::with_status_code(
                StatusCode::REQUEST_TIMEOUT,
                settings.request_timeout,
            ))
            // The layer answers early from Content-Length; DefaultBodyLimit makes
            // the body extractors stop at the same size for chunked bodies.
            .layer(RequestBodyLimitLayer::new(settings.body_limit))
            .layer(DefaultBodyLimit::max(settings.body_limit)),
    )
}

/// Bodies of 1 KiB or more, as tower-http's default otherwise (no gRPC, images or
/// event streams). A smaller body fits in one packet with its headers, so gzip
/// saves no round trip — and each gzip stream costs a fresh ~300 KB deflate state:
/// a sixth of the server's CPU per submitted job when every client asks for gzip
/// (bench/README.md, "queue.sh").
fn worth_compressing() -> impl Predicate {
    SizeAbove::new(1024)
        .and(NotForContentType::GRPC)
        .and(NotForContentType::IMAGES)
        .and(NotForContentType::SSE)
}

fn request_span(request: &Request) -> tracing::Span {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str)
        .unwrap_or("unmatched");
    let request_id = request
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        route,
        request_id,
        // Recorded only when traces are on (docs/observability.md, the span table).
        otel.name = tracing::field::Empty,
        otel.kind = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        http.request.method = tracing::field::Empty,
        http.route = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
        plangate.project_id = tracing::field::Empty,
    );
    if telemetry::traces_on() {
        let method = request.method().as_str();
        span.record("otel.name", format!("{method} {route}"));
        span.record("otel.kind", "server");
        span.record("http.request.method", method);
        span.record("http.route", route);
        // A caller's W3C trace context makes this span a child of its own.
        let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
        telemetry::follow(&span, header("traceparent"), header("tracestate"));
    }
    span
}

/// The access log line, and the answer's status on the trace span.
fn on_response(response: &Response, latency: std::time::Duration, span: &tracing::Span) {
    DefaultOnResponse::new()
        .level(Level::INFO)
        .on_response(response, latency, span);
    if telemetry::traces_on() {
        let status = response.status();
        span.record("http.response.status_code", i64::from(status.as_u16()));
        if status.is_server_error() {
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// Requests by matched route (never the raw path: ids would explode cardinality).
async fn record_metrics(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let method = request.method().to_string();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    let labels = [("method", method), ("route", route), ("status", status)];
    metrics::counter!("http_requests_total", &labels).increment(1);
    metrics::histogram!("http_request_duration_seconds", &labels[..2])
        .record(started.elapsed().as_secs_f64());
    response
}

/// Layers below the handlers (body limit, timeout) answer with bare status codes;
/// clients were promised problem+json for every error, so dress them here, once.
async fn problem_for_bare_errors(request: Request, next: Next) -> Response {
    let is_mcp = request.uri().path().starts_with("/mcp");
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let content_type = response.headers().get(header::CONTENT_TYPE);
    let is_problem =
        content_type.is_some_and(|v| v.as_bytes().starts_with(PROBLEM_JSON.as_bytes()));
    // MCP answers what it cannot dispatch with a JSON-RPC error body: keep it.
    let is_jsonrpc =
        is_mcp && content_type.is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    // The dashboard answers its errors as HTML pages meant for people: keep them.
    let is_html = content_type.is_some_and(|v| v.as_bytes().starts_with(b"text/html"));
    if is_problem || is_jsonrpc || is_html {
        return response;
    }
    let (code, detail) = match status {
        StatusCode::PAYLOAD_TOO_LARGE => (
            ProblemCode::BodyTooLarge,
            "the request body exceeds the configured limit",
        ),
        StatusCode::REQUEST_TIMEOUT => (
            ProblemCode::Timeout,
            "the request took longer than the configured timeout",
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (
            ProblemCode::UnsupportedMediaType,
            "send the body as application/json",
        ),
        _ => (ProblemCode::Error, "the request failed"),
    };
    let mut problem = ApiError::new(status, code, detail).into_response();
    // Keep headers such as Allow or Retry-After that the inner layer set.
    for (name, value) in response.headers() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            problem.headers_mut().insert(name.clone(), value.clone());
        }
    }
    problem
}

fn panic_to_problem(payload: Box<dyn Any + Send + 'static>) -> Response<Body> {
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    tracing::error!(panic = message, "handler panicked");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        ProblemCode::Internal,
        "internal error; see the server log",
    )
    .into_response()
}

pub async fn not_found(uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ProblemCode::RouteNotFound,
        format!("no route for {}; see /docs for the API", uri.path()),
    )
}

pub async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        ProblemCode::MethodNotAllowed,
        format!("{method} is not allowed on {}", uri.path()),
    )
}
