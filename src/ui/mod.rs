//! The dashboard at `/ui/`: server-rendered HTML (maud) over `service::dashboard`,
//! every asset embedded, live updates over Server-Sent Events. A thin adapter: it
//! parses the request, asks the service layer, renders the answer. The handlers
//! live by resource beside this router; each answers `Result<_, PageError>`.

pub mod assets;
mod bulk;
mod error;
mod extract;
mod jobs;
mod live;
mod overview;
pub mod pages;
mod rate_limits;
mod runs;
pub mod session;
mod sign_in;
mod task_lists;
mod tracks;
mod webhooks;

use axum::http::{HeaderMap, header};
use axum::response::Redirect;
use axum::routing::{get, post};
use axum::{Router, middleware};

use crate::state::AppState;

/// Every dashboard route, one line each.
pub fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(overview::overview))
        .route("/ui/login", get(sign_in::login_form).post(sign_in::login))
        .route("/ui/logout", post(sign_in::logout))
        .route("/ui/task-lists/{id}", get(task_lists::task_list))
        .route("/ui/task-lists/{id}/events", get(task_lists::events))
        .route("/ui/task-lists/{id}/tasks/{task_id}", get(task_lists::task))
        .route("/ui/live/{page}/events", get(live::events))
        .route("/ui/jobs", get(jobs::list))
        .route("/ui/jobs/bulk", get(jobs::bulk_confirm).post(jobs::bulk))
        .route("/ui/jobs/{id}", get(jobs::job))
        .route("/ui/jobs/{id}/events", get(jobs::events))
        .route(
            "/ui/jobs/{id}/cancel",
            get(jobs::cancel_confirm).post(jobs::cancel),
        )
        .route("/ui/jobs/{id}/retry", post(jobs::retry))
        .route("/ui/runs", get(runs::list))
        .route("/ui/runs/bulk", get(runs::bulk_confirm).post(runs::bulk))
        .route("/ui/runs/{id}", get(runs::run))
        .route(
            "/ui/runs/{id}/cancel",
            get(runs::cancel_confirm).post(runs::cancel),
        )
        .route("/ui/tracks", get(tracks::list))
        .route("/ui/tracks/{id}", get(tracks::track))
        .route("/ui/webhooks", get(webhooks::page))
        .route("/ui/rate-limits", get(rate_limits::page))
        .route("/ui/assets/{name}", get(assets::serve))
        .layer(middleware::from_fn_with_state(
            state,
            session::require_session,
        ))
        .layer(middleware::from_fn(session::security_headers))
}

/// Whether the request's `Accept` names `text/html` (what a browser sends when it
/// navigates); `*/*` alone or JSON does not.
pub fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            media.eq_ignore_ascii_case("text/html") && !refused
        })
}
