//! Bearer-token auth for `/v1` routes when `PLANGATE_API_TOKENS` is set. Ops routes
//! and docs stay open so probes and people browsing the API need no token.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::error::ApiError;

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
    request: Request,
    next: Next,
) -> Response {
    let tokens = &state.settings.api_tokens;
    if tokens.is_empty() || !request.uri().path().starts_with("/v1/") {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(presented) = presented else {
        return unauthorized("send `Authorization: Bearer <token>`");
    };
    let matched = tokens.iter().fold(false, |found, t| {
        constant_time_eq(t.as_bytes(), presented.as_bytes()) | found
    });
    if matched {
        next.run(request).await
    } else {
        unauthorized("the bearer token is not valid")
    }
}

fn unauthorized(detail: &str) -> Response {
    let mut response =
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", detail).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn compares_whole_tokens() {
        assert!(constant_time_eq(b"abcdefgh", b"abcdefgh"));
        assert!(!constant_time_eq(b"abcdefgh", b"abcdefgX"));
        assert!(!constant_time_eq(b"abcdefgh", b"abcdefg"));
    }
}
