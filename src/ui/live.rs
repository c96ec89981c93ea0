//! The live pages' event streams: `changed` for a list page (overview, jobs, runs,
//! tracks), and what the task-list and job pages share with it.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt as _};
use serde::Deserialize;

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

/// Where a live page's stream starts: the marker its page was drawn from
/// (`?since=`), or after a reconnect the last one the browser saw (`Last-Event-ID`).
#[derive(Deserialize)]
pub struct Since {
    since: Option<String>,
}

/// `changed` events for a live list page: sent whenever what the page shows
/// changes, for it to fetch itself again. The first event, `ready`, says the
/// stream is up; a `changed` follows at once when the marker moved between the
/// page's render (or the last event seen) and the stream's first look, which no
/// later comparison would catch. Each event's id is the marker it was sent at.
pub async fn events(
    Viewer { state, caller }: Viewer,
    Path(page): Path<String>,
    Query(Since { since }): Query<Since>,
    headers: HeaderMap,
) -> PageResult<impl IntoResponse> {
    let page = LivePage::parse(&page)
        .ok_or_else(|| invalid("page", "one of overview, jobs, runs, tracks"))?;
    let seen = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or(since);
    let first = state.service.dashboard_live_marker(&caller, page).await?;
    let mut opening = vec![Event::default().event("ready").id(&first).data("{}")];
    if seen.is_some_and(|seen| seen != first) {
        opening.push(Event::default().event("changed").id(&first).data("{}"));
    }
    let watch = futures::stream::unfold(
        (state, caller, first),
        move |(state, caller, seen)| async move {
            loop {
                tokio::time::sleep(LIVE_POLL).await;
                if state.is_shutting_down() {
                    return None;
                }
                // On a failed read the stream ends and the browser reconnects with
                // the last id it saw, so nothing is missed.
                let marker = match state.service.dashboard_live_marker(&caller, page).await {
                    Ok(marker) => marker,
                    Err(e) => {
                        tracing::warn!(error = %e.detail, "a live page's change marker could not be read");
                        return None;
                    }
                };
                if marker != seen {
                    let event = Event::default().event("changed").id(&marker).data("{}");
                    return Some((Ok(event), (state, caller, marker)));
                }
            }
        },
    );
    let stream = futures::stream::iter(opening.into_iter().map(Ok)).chain(watch);
    Ok(sse(stream))
}
