//! Refine jobs: the list (filters, cursor pages, bulk cancel and retry), one job
//! with its live log, and its cancel and retry.

use axum::extract::{Path, Query, RawQuery};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::IntoResponse;
use axum::response::Redirect;
use axum::response::sse::Event;
use chrono::NaiveDate;
use serde::Deserialize;

use super::bulk;
use super::error::{PageError, PageResult};
use super::extract::{Viewer, invalid, parse_id, parse_present, present};
use super::live::sse;
use super::pages::jobs as page;
use crate::domain::job::JobState;
use crate::service::dashboard::{BulkKind, JobQuery, LivePage};

#[derive(Deserialize)]
pub struct JobsForm {
    status: Option<String>,
    q: Option<String>,
    project: Option<String>,
    date: Option<String>,
    before: Option<String>,
}

impl JobsForm {
    fn query(&self) -> PageResult<JobQuery> {
        Ok(JobQuery {
            status: parse_present(&self.status, |s| {
                JobState::parse(s).ok_or_else(|| {
                    let words = JobState::ALL.map(JobState::as_str);
                    invalid("status", &format!("one of {}", words.join(", ")))
                })
            })?,
            search: present(&self.q).map(str::to_owned),
            project_id: present(&self.project).map(str::to_owned),
            date: parse_present(&self.date, |d| {
                NaiveDate::parse_from_str(d, "%Y-%m-%d")
                    .map_err(|_| invalid("date", "a day as YYYY-MM-DD"))
            })?,
            before: parse_present(&self.before, |b| parse_id(b, "before"))?,
        })
    }
}

pub async fn list(viewer: Viewer, Query(form): Query<JobsForm>) -> PageResult {
    let query = form.query()?;
    let since = viewer.live_since(LivePage::Jobs).await?;
    let list = viewer
        .service()
        .dashboard_jobs(&viewer.caller, &query)
        .await?;
    Ok(page::jobs_page(&query, &list, &since, viewer.chrome()))
}

pub async fn job(viewer: Viewer, Path(raw): Path<String>) -> PageResult {
    let id = parse_id(&raw, "job id")?;
    let view = viewer.service().dashboard_job(&viewer.caller, id).await?;
    Ok(page::job_page(&view, viewer.chrome()))
}

/// The job page's live log: the events of `GET /v1/refine-jobs/{id}/events`, for
/// the signed-in viewer (an `EventSource` sends the session cookie, and `/v1`
/// takes no cookie).
pub async fn events(
    viewer: Viewer,
    Path(raw): Path<String>,
    headers: HeaderMap,
) -> PageResult<impl IntoResponse> {
    let id = parse_id(&raw, "job id")?;
    let last_event_id = headers.get("last-event-id").map(HeaderValue::as_bytes);
    let events = viewer
        .service()
        .refine_job_events(&viewer.caller, id, last_event_id)
        .await?;
    // Log lines carry their time here, for the page to show.
    let stream = futures::StreamExt::map(events, |mut e| {
        if e.event == "log"
            && let Some(data) = e.data.as_object_mut()
        {
            data.insert("at".into(), serde_json::json!(e.at.to_rfc3339()));
        }
        Ok(Event::default()
            .id(e.id.to_string())
            .event(e.event)
            .data(e.data.to_string()))
    });
    Ok(sse(stream))
}

/// Cancel asks first: this page says what will happen and posts the cancel
/// (no script needed).
pub async fn cancel_confirm(viewer: Viewer, Path(raw): Path<String>) -> PageResult {
    let id = parse_id(&raw, "job id")?;
    let view = viewer.service().dashboard_job(&viewer.caller, id).await?;
    Ok(page::cancel_job_page(&view.job, viewer.chrome()))
}

pub async fn cancel(viewer: Viewer, Path(raw): Path<String>) -> PageResult<Redirect> {
    let id = parse_id(&raw, "job id")?;
    // The service checks the caller's project before it changes anything.
    viewer
        .service()
        .cancel_refine_job(&viewer.caller, id)
        .await
        .map_err(PageError::refused("Cancel refused"))?;
    Ok(Redirect::to(&format!("/ui/jobs/{id}")))
}

/// Retry: the same use case as `POST /v1/refine-jobs/{id}/retry`; on to the new job.
pub async fn retry(viewer: Viewer, Path(raw): Path<String>) -> PageResult<Redirect> {
    let id = parse_id(&raw, "job id")?;
    let new = viewer
        .service()
        .retry_refine_job(&viewer.caller, id)
        .await
        .map_err(PageError::refused("Retry refused"))?;
    Ok(Redirect::to(&format!("/ui/jobs/{}", new.id)))
}

/// Bulk cancel or retry of the selected jobs: first what it will do, then the action.
pub async fn bulk_confirm(viewer: Viewer, RawQuery(query): RawQuery) -> PageResult {
    bulk::confirm(&viewer, BulkKind::Jobs, query.as_deref().unwrap_or("")).await
}

pub async fn bulk(viewer: Viewer, body: String) -> PageResult {
    bulk::act(&viewer, BulkKind::Jobs, &body).await
}
