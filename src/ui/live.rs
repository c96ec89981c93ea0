//! The live pages' event streams: `changed` for a list page (overview, jobs, runs,
//! tracks), and what the task-list and job pages share with it.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::Path;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;

use super::error::PageResult;
use super::extract::{Viewer, invalid};
use crate::service::dashboard::LivePage;

/// How often a live page looks for changes.
pub const LIVE_POLL: Duration = Duration::from_millis(500);

/// A page's event stream, with a comment every 15 s so that proxies keep it open.
pub fn sse<S>(stream: S) -> impl IntoResponse
where
    S: Stream<Item = Result<Event, Infallible>> + Send + 'static,
{
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// `changed` events for a live list page: sent whenever what the page shows
/// changes, for it to fetch itself again. The first event, `ready`, says the
/// stream is up.
pub async fn events(
    Viewer { state, caller }: Viewer,
    Path(page): Path<String>,
) -> PageResult<impl IntoResponse> {
    let page = LivePage::parse(&page)
        .ok_or_else(|| invalid("page", "one of overview, jobs, runs, tracks"))?;
    let first = state.service.dashboard_live_marker(&caller, page).await?;
    let stream = futures::stream::unfold(
        (state, caller, first, true),
        move |(state, caller, seen, ready)| async move {
            if ready {
                let event = Event::default().event("ready").data("{}");
                return Some((Ok(event), (state, caller, seen, false)));
            }
            loop {
                tokio::time::sleep(LIVE_POLL).await;
                if state.is_shutting_down() {
                    return None;
                }
                // On a failed read the stream ends and the browser reconnects; its
                // `ready` makes the page fetch itself, so nothing is missed.
                let marker = match state.service.dashboard_live_marker(&caller, page).await {
                    Ok(marker) => marker,
                    Err(e) => {
                        tracing::warn!(error = %e.detail, "a live page's change marker could not be read");
                        return None;
                    }
                };
                if marker != seen {
                    let event = Event::default().event("changed").data("{}");
                    return Some((Ok(event), (state, caller, marker, false)));
                }
            }
        },
    );
    Ok(sse(stream))
}
