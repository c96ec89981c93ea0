//! Bearer-token auth for `/v1` and `/mcp` routes when `PLANGATE_API_TOKENS` is set, and the
//! per-project limits of a token. Ops routes and docs stay open so probes and
//! people browsing the API need no token.
//!
//! The middleware puts a [`Caller`] on every request; handlers take it, with the
//! use cases, as the [`ApiCall`] extractor and pass it to the use case, which checks
//! it (`service/`).

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::http::problem::ApiError;
pub use crate::service::Caller;
use crate::service::{ProblemCode, Service};

/// [`ApiCall`] takes the caller from here. The auth middleware always inserts one, so
/// a missing one is a wiring bug: refuse (500) rather than let the request through.
impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            tracing::error!("no Caller on the request: the auth middleware is not installed");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ProblemCode::Internal,
                "internal error; see the server log",
            )
        })
    }
}

/// What a `/v1` handler acts with: the use cases, and the caller they check
/// (`service/` authorizes; the handler only passes it on).
pub struct ApiCall {
    pub service: Service,
    pub caller: Caller,
}

impl FromRequestParts<AppState> for ApiCall {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let service = state.service.clone();
        Ok(ApiCall { service, caller })
    }
}

/// Compare without an early exit, so timing does not reveal how much of a token
/// matched. Every configured token is compared, for the same reason.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub async fn require_token(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let tokens = &state.settings.api_tokens;
    if tokens.is_empty() || !needs_token(request.uri().path()) {
        request.extensions_mut().insert(Caller::unrestricted());
        return next.run(request).await;
    }
    let mcp = is_mcp(request.uri().path());
    let Some(presented) = bearer_credentials(request.headers()) else {
        return unauthorized(
            Refusal::Missing,
            "no bearer token: send `Authorization: Bearer <token>` with a token the server is configured with",
            mcp,
        );
    };
    // A dashboard session cookie is no credential here: it is for `/ui` pages only
    // (docs/configuration.md, "Dashboard sessions"), so a script that rides a
    // signed-in browser cannot use the API.
    let mut matched = None;
    for token in tokens {
        if constant_time_eq(token.secret(), presented.as_bytes()) {
            matched = Some(token);
        }
    }
    let Some(token) = matched else {
        return unauthorized(
            Refusal::Invalid,
            "the bearer token is not valid: it matches none of the server's tokens",
            mcp,
        );
    };
    let caller = Caller::for_token(token);
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// The credentials of `Authorization: Bearer <token>`. The scheme is
/// case-insensitive (RFC 9110 §11.1): SDKs send `bearer` too.
fn bearer_credentials(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, credentials) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credentials.trim())
}

/// `/v1` and the MCP endpoints (docs/mcp.md: same tokens, same project limits).
fn needs_token(path: &str) -> bool {
    path.starts_with("/v1/") || is_mcp(path)
}

fn is_mcp(path: &str) -> bool {
    path == "/mcp" || path.starts_with("/mcp/")
}

/// Why a request is not let in (RFC 6750 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// No credentials: no `error` code, only the challenge and a description.
    Missing,
    /// Credentials that match no token: `error="invalid_token"`.
    Invalid,
}

/// 401 with the reason where clients show it: in the problem's `detail`, and in
/// `WWW-Authenticate`'s `error_description`, since some clients (the MCP Python
/// SDK among them) drop a 401's body. On the MCP endpoints the body is also a
/// JSON-RPC error (`application/json`), the one form the SDK reads off a failed
/// POST and shows; it keeps every problem member.
fn unauthorized(refusal: Refusal, detail: &str, mcp: bool) -> Response {
    let error = ApiError::new(StatusCode::UNAUTHORIZED, ProblemCode::Unauthorized, detail);
    let mut response = if mcp {
        let mut body = error.body();
        body["jsonrpc"] = "2.0".into();
        body["id"] = serde_json::Value::Null;
        body["error"] = serde_json::json!({
            "code": -32001,
            "message": format!("unauthorized: {detail}"),
        });
        (
            StatusCode::UNAUTHORIZED,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    } else {
        error.into_response()
    };
    let challenge = challenge(refusal, detail);
    if let Ok(value) = header::HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// The `WWW-Authenticate` value. RFC 6750 allows no `"` or `\` in a quoted
/// `error_description`: our details hold none, and any would be dropped.
fn challenge(refusal: Refusal, detail: &str) -> String {
    let description: String = detail
        .chars()
        .filter(|c| (' '..='~').contains(c) && *c != '"' && *c != '\\')
        .collect();
    match refusal {
        Refusal::Missing => {
            format!("Bearer realm=\"plangate\", error_description=\"{description}\"")
        }
        Refusal::Invalid => format!(
            "Bearer realm=\"plangate\", error=\"invalid_token\", error_description=\"{description}\""
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_whole_tokens() {
        assert!(constant_time_eq(b"abcdefgh", b"abcdefgh"));
        assert!(!constant_time_eq(b"abcdefgh", b"abcdefgX"));
        assert!(!constant_time_eq(b"abcdefgh", b"abcdefg"));
    }

    #[test]
    fn the_scheme_is_case_insensitive() {
        let with = |value: &'static str| {
            let mut headers = axum::http::HeaderMap::new();
            headers.insert(header::AUTHORIZATION, value.parse().unwrap());
            bearer_credentials(&headers).map(str::to_owned)
        };
        assert_eq!(with("Bearer abc").as_deref(), Some("abc"));
        assert_eq!(with("bearer abc").as_deref(), Some("abc"));
        assert_eq!(with("BEARER  abc ").as_deref(), Some("abc"));
        assert_eq!(with("Basic abc"), None);
        assert_eq!(with("Bearerabc"), None);
    }

    #[test]
    fn challenges_carry_the_reason() {
        assert_eq!(
            challenge(Refusal::Invalid, "not \"valid\"\\ é"),
            "Bearer realm=\"plangate\", error=\"invalid_token\", error_description=\"not valid \""
        );
        assert_eq!(
            challenge(Refusal::Missing, "send it"),
            "Bearer realm=\"plangate\", error_description=\"send it\""
        );
    }
}
