//! Webhooks: the viewer's webhooks and their failing deliveries.

use super::error::PageResult;
use super::extract::Viewer;
use super::pages::webhooks::webhooks_page;

pub async fn page(viewer: Viewer) -> PageResult {
    let view = viewer.service().webhooks_overview(&viewer.caller).await?;
    Ok(webhooks_page(&view, viewer.chrome()))
}
