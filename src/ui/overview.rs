//! The overview: projects, their cycles and task lists, and jobs and runs by state.

use super::error::PageResult;
use super::extract::Viewer;
use super::pages::overview_page;
use crate::service::dashboard::LivePage;

pub async fn overview(viewer: Viewer) -> PageResult {
    let since = viewer.live_since(LivePage::Overview).await?;
    let overview = viewer.service().dashboard_overview(&viewer.caller).await?;
    Ok(overview_page(&overview, &since, viewer.chrome()))
}
