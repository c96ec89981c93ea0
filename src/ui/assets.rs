//! The dashboard's static files, compiled into the binary (nothing from a CDN).
//! Names carry no hash, so they are served `no-cache` with an `ETag`.

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// `(name, content type, bytes)`.
pub const ASSETS: [(&str, &str, &[u8]); 4] = [
    (
        "app.css",
        "text/css; charset=utf-8",
        include_bytes!("assets/app.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/app.js"),
    ),
    (
        "theme.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/theme.js"),
    ),
    (
        "icon.svg",
        "image/svg+xml",
        include_bytes!("assets/icon.svg"),
    ),
];

fn etag(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(bytes);
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

pub async fn serve(Path(name): Path<String>, headers: HeaderMap) -> Response {
    let Some((_, content_type, bytes)) = ASSETS.iter().find(|(n, _, _)| *n == name) else {
        return super::pages::error_page(StatusCode::NOT_FOUND, "Not found", "No such asset.");
    };
    let tag = etag(bytes);
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let mut response = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, *content_type)], *bytes).into_response()
    };
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&tag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
