//! Rate limits: each limited executor and the L0 calls waiting for room.

use super::error::PageResult;
use super::extract::Viewer;
use super::pages::rate_limits::rate_limits_page;

pub async fn page(viewer: Viewer) -> PageResult {
    let (limits, waiting) = viewer
        .service()
        .dashboard_rate_limits(&viewer.caller)
        .await?;
    Ok(rate_limits_page(&limits, &waiting, viewer.chrome()))
}
