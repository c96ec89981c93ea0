//! Tracks: the list, and one track with its history.

use axum::extract::Path;

use super::error::PageResult;
use super::extract::Viewer;
use super::pages::tracks::{track_page, tracks_page};
use crate::service::dashboard::LivePage;

pub async fn list(viewer: Viewer) -> PageResult {
    let since = viewer.live_since(LivePage::Tracks).await?;
    let tracks = viewer.service().dashboard_tracks(&viewer.caller).await?;
    Ok(tracks_page(&tracks, &since, viewer.chrome()))
}

pub async fn track(viewer: Viewer, Path(track_id): Path<String>) -> PageResult {
    let view = viewer
        .service()
        .dashboard_track(&viewer.caller, &track_id)
        .await?;
    Ok(track_page(&view, viewer.chrome()))
}
