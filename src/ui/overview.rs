//! The overview: projects, their cycles and task lists, and jobs and runs by state.

use super::error::PageResult;
use super::extract::Viewer;
use super::pages::overview_page;

pub async fn overview(viewer: Viewer) -> PageResult {
    // The overview carries the live marker it was drawn from.
    let overview = viewer.service().dashboard_overview(&viewer.caller).await?;
    Ok(overview_page(&overview, viewer.chrome()))
}
