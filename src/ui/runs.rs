//! Refine runs: the list (cursor pages, bulk cancel), one run with its phases,
//! and its cancel.

use axum::extract::{Path, Query, RawQuery};
use axum::response::Redirect;
use serde::Deserialize;

use super::bulk;
use super::error::{PageError, PageResult};
use super::extract::{Viewer, parse_id, parse_present};
use super::pages::jobs as page;
use crate::service::dashboard::{BulkKind, LivePage};

#[derive(Deserialize)]
pub struct RunsForm {
    before: Option<String>,
}

pub async fn list(viewer: Viewer, Query(form): Query<RunsForm>) -> PageResult {
    let before = parse_present(&form.before, |b| parse_id(b, "before"))?;
    let since = viewer.live_since(LivePage::Runs).await?;
    let runs = viewer
        .service()
        .dashboard_runs(&viewer.caller, before)
        .await?;
    Ok(page::runs_page(&runs, before, &since, viewer.chrome()))
}

pub async fn run(viewer: Viewer, Path(raw): Path<String>) -> PageResult {
    let id = parse_id(&raw, "run id")?;
    let view = viewer.service().dashboard_run(&viewer.caller, id).await?;
    Ok(page::run_page(&view, viewer.chrome()))
}

/// As for a job: the confirmation first, then the cancel.
pub async fn cancel_confirm(viewer: Viewer, Path(raw): Path<String>) -> PageResult {
    let id = parse_id(&raw, "run id")?;
    let view = viewer.service().dashboard_run(&viewer.caller, id).await?;
    Ok(page::cancel_run_page(&view, viewer.chrome()))
}

pub async fn cancel(viewer: Viewer, Path(raw): Path<String>) -> PageResult<Redirect> {
    let id = parse_id(&raw, "run id")?;
    viewer
        .service()
        .cancel_refine_run(&viewer.caller, id)
        .await
        .map_err(PageError::refused("Cancel refused"))?;
    Ok(Redirect::to(&format!("/ui/runs/{id}")))
}

/// Bulk cancel of the selected runs: first what it will do, then the cancel.
pub async fn bulk_confirm(viewer: Viewer, RawQuery(query): RawQuery) -> PageResult {
    bulk::confirm(&viewer, BulkKind::Runs, query.as_deref().unwrap_or("")).await
}

pub async fn bulk(viewer: Viewer, body: String) -> PageResult {
    bulk::act(&viewer, BulkKind::Runs, &body).await
}
