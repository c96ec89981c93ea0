//! Who may reach the server from a browser (docs/configuration.md, "Perimeter").
//!
//! A web page the user visits can send requests to `http://127.0.0.1:PORT` (its
//! `Origin` is the page's) or, by DNS rebinding, to its own host name resolved to
//! 127.0.0.1 (`Host` is then that name). Without tokens either would let any site
//! create task lists or start paid refine jobs, so:
//! - a request whose `Origin` is not one of the server's own origins or a
//!   configured one is refused (the MCP transport spec requires servers to check
//!   `Origin`); requests without `Origin` (curl, SDKs) are not browsers' and pass;
//! - on a loopback bind, a `Host` that is not a loopback name or a configured host
//!   is refused: a loopback server has no other legitimate name.
//!
//! Probes (`/healthz`, `/readyz`, `/metrics`) are exempt: kubelets and load
//! balancers call them by whatever address they have.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::config::{AllowedHost, HostPort, Settings, WebOrigin};
use crate::http::problem::ApiError;
use crate::service::ProblemCode;

/// The origins and hosts one server accepts, fixed at start.
#[derive(Debug, Clone)]
pub struct PerimeterPolicy {
    origins: Vec<WebOrigin>,
    /// `Some` on a loopback bind: the configured hosts besides the loopback names.
    hosts: Option<Vec<AllowedHost>>,
    /// How a refusal under `/ui` is rendered for a person (an HTML page); the
    /// dashboard supplies it so this module needs no part of `ui`.
    page_refusal: Option<PageRefusal>,
}

/// Renders an HTML error page: status, title, detail.
pub type PageRefusal = fn(StatusCode, &str, &str) -> Response;

impl PerimeterPolicy {
    /// The server's own origins on the port it listens on (`settings.bind` is the
    /// bound address by the time the app is built), plus the configured ones.
    pub fn new(settings: &Settings) -> Self {
        let bind: SocketAddr = settings.bind;
        let port = bind.port();
        let mut origins = vec![
            WebOrigin::http("127.0.0.1", port),
            WebOrigin::http("localhost", port),
            WebOrigin::http("[::1]", port),
        ];
        let ip = bind.ip();
        if !ip.is_unspecified() && !ip.is_loopback() {
            let host = match ip {
                std::net::IpAddr::V4(v4) => v4.to_string(),
                std::net::IpAddr::V6(v6) => format!("[{v6}]"),
            };
            origins.push(WebOrigin::http(&host, port));
        }
        origins.extend(settings.perimeter.allowed_origins.iter().cloned());
        let hosts = ip
            .is_loopback()
            .then(|| settings.perimeter.allowed_hosts.clone());
        PerimeterPolicy {
            origins,
            hosts,
            page_refusal: None,
        }
    }

    /// Refusals of `/ui` paths are rendered by `render` rather than as problem+json.
    pub fn with_page_refusal(mut self, render: PageRefusal) -> Self {
        self.page_refusal = Some(render);
        self
    }

    fn host_allowed(&self, authority: &str) -> bool {
        let Some(allowed) = &self.hosts else {
            return true;
        };
        match HostPort::split(authority) {
            Some((host, port)) => {
                HostPort::is_loopback(&host) || allowed.iter().any(|a| a.matches(&host, port))
            }
            None => false,
        }
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        WebOrigin::parse(origin).is_some_and(|o| self.origins.contains(&o))
    }
}

/// Paths a probe calls by address: never refused here.
fn is_probe(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics")
}

/// Refuses, before anything else runs, a request from a web page this server did
/// not serve (see the module comment).
pub async fn refuse_foreign_pages(
    State(policy): State<Arc<PerimeterPolicy>>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    if is_probe(path) {
        return next.run(request).await;
    }
    let headers = request.headers();
    // HTTP/1.1 sends `Host`; HTTP/2 the URI's authority. A request with neither
    // came from no browser.
    let host = headers
        .get(header::HOST)
        .map(|v| v.to_str().unwrap_or("\u{fffd}"))
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    if let Some(host) = host
        && !policy.host_allowed(host)
    {
        return policy.refusal(
            path,
            ProblemCode::HostNotAllowed,
            "this server listens on loopback and answers only to localhost, 127.0.0.1 and \
             [::1]; a page under another name (DNS rebinding) may not use it. Reach it by \
             one of those names, or add the name to PLANGATE_ALLOWED_HOSTS",
        );
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let allowed = origin.to_str().is_ok_and(|o| policy.origin_allowed(o));
        if !allowed {
            return policy.refusal(
                path,
                ProblemCode::OriginNotAllowed,
                "requests from web pages of other origins are refused; send no Origin \
                 (as curl and SDKs do), use the server's own pages, or add the page's \
                 origin (e.g. https://plangate.example.com) to PLANGATE_ALLOWED_ORIGINS",
            );
        }
    }
    next.run(request).await
}

impl PerimeterPolicy {
    fn refusal(&self, path: &str, code: ProblemCode, detail: &str) -> Response {
        // The dashboard answers people with HTML pages; everything else problem+json.
        if let Some(render) = self.page_refusal
            && (path == "/ui" || path.starts_with("/ui/"))
        {
            return render(
                StatusCode::FORBIDDEN,
                "Refused",
                &format!("This request came from another site or host name. {detail}."),
            );
        }
        ApiError::new(StatusCode::FORBIDDEN, code, detail).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{FileConfig, ServeArgs};

    fn policy(bind: &str, origins: &str, hosts: &str) -> PerimeterPolicy {
        let args = ServeArgs {
            bind: Some(bind.into()),
            allowed_origins: Some(origins.into()),
            allowed_hosts: Some(hosts.into()),
            ..Default::default()
        };
        PerimeterPolicy::new(&Settings::merge(&args, FileConfig::default()).unwrap())
    }

    #[test]
    fn a_loopback_server_knows_its_own_origins_and_names() {
        let p = policy("127.0.0.1:8080", "https://plangate.example", "box.lan");
        for origin in [
            "http://127.0.0.1:8080",
            "http://LOCALHOST:8080",
            "http://[::1]:8080",
            "https://plangate.example",
            "https://plangate.example:443",
        ] {
            assert!(p.origin_allowed(origin), "{origin}");
        }
        for origin in [
            "http://127.0.0.1:8081",
            "https://127.0.0.1:8080",
            "http://plangate.example",
            "null",
            "http://evil.example",
        ] {
            assert!(!p.origin_allowed(origin), "{origin}");
        }
        for host in [
            "127.0.0.1:8080",
            "localhost",
            "[::1]:8080",
            "box.lan:1",
            "BOX.LAN",
        ] {
            assert!(p.host_allowed(host), "{host}");
        }
        for host in ["rebind.attacker.example:8080", "box.lan.evil", "", "a b"] {
            assert!(!p.host_allowed(host), "{host}");
        }
    }

    #[test]
    fn a_public_bind_takes_any_host_but_still_checks_origins() {
        let p = policy("0.0.0.0:8080", "", "");
        assert!(p.host_allowed("plangate.svc.cluster.local:8080"));
        assert!(p.host_allowed("10.1.2.3:8080"));
        assert!(!p.origin_allowed("http://plangate.svc.cluster.local:8080"));
        let p = policy("10.1.2.3:8080", "", "");
        assert!(p.origin_allowed("http://10.1.2.3:8080"));
    }
}
