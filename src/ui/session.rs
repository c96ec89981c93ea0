//! Dashboard sign-in and request hygiene.
//!
//! - A person signs in once with an API token (a password field); the server sets
//!   an `HttpOnly`, `SameSite=Strict` cookie (`Secure` behind HTTPS) holding a
//!   random session id (`service::sessions`: new at every login, stored hashed,
//!   ended by its expiry or by signing out). The cookie opens `/ui` pages only:
//!   `/v1` and `/mcp` take bearer tokens only (docs/configuration.md, "Dashboard
//!   sessions"), and no page ever contains the token.
//! - Every dashboard response carries a Content-Security-Policy without inline
//!   scripts or styles: assets come from `/ui/assets/` only.
//! - State-changing requests are `POST`s refused unless their `Origin` (or, when a
//!   browser sends none, `Sec-Fetch-Site`) says they come from this site, whether or
//!   not the form carries anything else.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use crate::service::Caller;
use crate::state::AppState;

pub const COOKIE: &str = "plangate_session";

pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                       connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
                       base-uri 'none'";

/// The value of cookie `name`, if the request has one.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// The session cookie the request carries, if any.
pub fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    cookie(headers, COOKIE).filter(|v| !v.is_empty())
}

/// Behind a TLS-terminating proxy (`X-Forwarded-Proto: https`) or on HTTPS itself.
pub fn is_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("https")
        })
}

/// The session cookie, kept by the browser for `max_age_secs` (0 clears it).
pub fn set_cookie(value: &str, https: bool, max_age_secs: u64) -> HeaderValue {
    let secure = if https { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict{secure}; Max-Age={max_age_secs}"
    ))
    .expect("cookie text is ASCII")
}

/// Whether a state-changing request comes from this site. `Origin` decides when
/// present (its host must be the `Host` the request was sent to); a browser that
/// sends none still sends `Sec-Fetch-Site`. A request with neither is refused.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if matches!(site, Some("cross-site" | "same-site")) {
        return false;
    }
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    match headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        Some(origin) => {
            let authority = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"));
            matches!((authority, host), (Some(a), Some(h)) if a.eq_ignore_ascii_case(h))
        }
        None => site == Some("same-origin"),
    }
}

/// Security headers on every dashboard response.
pub async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// Puts the viewer's [`Caller`] on the request, or sends them to the login form;
/// refuses cross-site `POST`s before any handler runs.
pub async fn require_session(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    let open = path == "/ui/login" || path.starts_with("/ui/assets/");
    if request.method() == Method::POST && !same_origin(request.headers()) {
        return super::pages::error_page(
            StatusCode::FORBIDDEN,
            "Refused",
            "This form was sent from another site. Open the dashboard and use its own forms.",
        );
    }
    if state.settings.api_tokens.is_empty() || open {
        request.extensions_mut().insert(Caller::unrestricted());
        return next.run(request).await;
    }
    let caller = match session_cookie(request.headers()) {
        Some(value) => state.service.session_caller(value).await,
        None => Ok(None),
    };
    match caller {
        Ok(Some(caller)) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Ok(None) if request.method() == Method::GET && !path.ends_with("/events") => {
            let target = request
                .uri()
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/ui/");
            let next_param: String = url_encode(target);
            Redirect::to(&format!("/ui/login?next={next_param}")).into_response()
        }
        Ok(None) => super::pages::error_page(
            StatusCode::UNAUTHORIZED,
            "Sign in first",
            "This dashboard needs a token: sign in at /ui/login.",
        ),
        Err(e) => {
            tracing::warn!(error = %e.detail, "cannot read the dashboard session");
            super::pages::error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Unavailable",
                "The database did not answer; try again shortly.",
            )
        }
    }
}

/// Percent-encodes everything but unreserved characters (RFC 3986).
pub fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Where to go after signing in: only a dashboard path of this site.
pub fn safe_next(next: Option<&str>) -> &str {
    match next {
        // Visible ASCII only: it becomes a Location header.
        Some(n)
            if n.starts_with("/ui/")
                && !n.contains('\\')
                && n.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            n
        }
        _ => "/ui/",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn origins_are_checked() {
        assert!(same_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://evil.example")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "null")
        ])));
        assert!(!same_origin(&headers(&[("host", "127.0.0.1:8080")])));
        assert!(same_origin(&headers(&[
            ("host", "a"),
            ("sec-fetch-site", "same-origin")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "a"),
            ("origin", "http://a"),
            ("sec-fetch-site", "cross-site")
        ])));
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let h = headers(&[("cookie", &format!("a=b; {COOKIE}=abc; c=d"))]);
        assert_eq!(session_cookie(&h), Some("abc"));
        let h = headers(&[("cookie", &format!("{COOKIE}="))]);
        assert_eq!(session_cookie(&h), None);
    }

    #[test]
    fn next_stays_on_the_dashboard() {
        assert_eq!(safe_next(Some("/ui/jobs?x=1")), "/ui/jobs?x=1");
        assert_eq!(safe_next(Some("https://evil")), "/ui/");
        assert_eq!(safe_next(Some("//evil/ui/")), "/ui/");
        assert_eq!(safe_next(None), "/ui/");
        assert_eq!(safe_next(Some("/ui/\u{e9}")), "/ui/");
        assert_eq!(safe_next(Some("/ui/a b")), "/ui/");
    }
}
