//! One task list (its waves, filtered by wave and status), one task, and the
//! list's live task states.

use axum::extract::{Path, Query};
use axum::response::IntoResponse;
use axum::response::sse::Event;
use serde::Deserialize;

use super::error::{PageError, PageResult};
use super::extract::{Viewer, invalid, parse_id, parse_present};
use super::live::{LIVE_POLL, sse};
use super::pages::tasks;
use crate::domain::dispatch::TaskStatus;
use crate::service::dashboard::{TaskListMarker, TaskState};

#[derive(Deserialize)]
pub struct WaveQuery {
    wave: Option<String>,
    status: Option<String>,
    /// A large list's page: the `next_cursor` of the page before.
    cursor: Option<String>,
}

/// What a page's live stream follows: the page's wave, status and cursor.
#[derive(Deserialize)]
pub struct PageQuery {
    wave: Option<String>,
    status: Option<String>,
    cursor: Option<String>,
}

fn parse_wave(raw: &Option<String>) -> Result<Option<i64>, PageError> {
    parse_present(raw, |w| {
        w.parse::<i64>()
            .map_err(|_| invalid("wave", "must be a wave number"))
    })
}

fn parse_status(raw: &Option<String>) -> Result<Option<TaskStatus>, PageError> {
    parse_present(raw, |s| {
        TaskStatus::parse(s).ok_or_else(|| {
            let words = TaskStatus::ALL.map(TaskStatus::as_str);
            invalid("status", &format!("must be one of {}", words.join(", ")))
        })
    })
}

pub async fn task_list(
    viewer: Viewer,
    Path(raw): Path<String>,
    Query(query): Query<WaveQuery>,
) -> PageResult {
    let id = parse_id(&raw, "task list id")?;
    let wave = parse_wave(&query.wave)?;
    let status = parse_status(&query.status)?;
    let cursor = query.cursor.as_deref().filter(|c| !c.is_empty());
    let view = viewer
        .service()
        .dashboard_task_list(&viewer.caller, id, wave, status, cursor)
        .await?;
    Ok(tasks::task_list_page(&view, wave, status, viewer.chrome()))
}

pub async fn task(viewer: Viewer, Path((raw, task_id)): Path<(String, String)>) -> PageResult {
    let id = parse_id(&raw, "task list id")?;
    let view = viewer
        .service()
        .dashboard_task(&viewer.caller, id, &task_id)
        .await?;
    Ok(tasks::task_page(&view, viewer.chrome()))
}

/// `tasks` events: `{"wave": n|null, "tasks": [[task_id, status, category|null], ...]}`,
/// the first with every task the page shows (a large list's: its page's, by
/// `?wave=`, `&status=` and `&cursor=`), later ones with the tasks that changed. Each poll reads the list's
/// counters; the tasks are read only when they moved.
pub async fn events(
    Viewer { state, caller }: Viewer,
    Path(raw): Path<String>,
    Query(query): Query<PageQuery>,
) -> PageResult<impl IntoResponse> {
    let id = parse_id(&raw, "task list id")?;
    let cursor = query.cursor.filter(|c| !c.is_empty());
    let wave = parse_wave(&query.wave)?;
    let status = parse_status(&query.status)?;
    let wave = wave.map(|w| (w, status));
    state
        .service
        .dashboard_task_list_marker(&caller, id)
        .await?;
    struct Seen {
        marker: Option<TaskListMarker>,
        states: Vec<TaskState>,
        wave: Option<Option<i64>>,
        cursor: Option<String>,
    }
    let seen = Seen {
        marker: None,
        states: Vec::new(),
        wave: None,
        cursor,
    };
    let stream = futures::stream::unfold(
        (state, caller, seen),
        move |(state, caller, mut seen)| async move {
            loop {
                if state.is_shutting_down() {
                    return None;
                }
                let marker = match state.service.dashboard_task_list_marker(&caller, id).await {
                    Ok(m) => m,
                    Err(_) => return None,
                };
                if seen.marker != Some(marker) {
                    let (states, wave) = match state
                        .service
                        .dashboard_task_states(&caller, id, wave, seen.cursor.as_deref())
                        .await
                    {
                        Ok(s) => s,
                        Err(_) => return None,
                    };
                    let changed: Vec<&TaskState> =
                        states.iter().filter(|s| !seen.states.contains(s)).collect();
                    if !changed.is_empty() || seen.wave != Some(wave) {
                        let data = serde_json::json!({
                            "wave": wave,
                            "tasks": changed.iter().map(|s| serde_json::json!(
                                [s.task_id, s.status.as_str(), s.abandon_category]
                            )).collect::<Vec<_>>(),
                        });
                        seen.marker = Some(marker);
                        seen.wave = Some(wave);
                        seen.states = states;
                        let event = Event::default().event("tasks").data(data.to_string());
                        return Some((Ok(event), (state, caller, seen)));
                    }
                    seen.marker = Some(marker);
                }
                tokio::time::sleep(LIVE_POLL).await;
            }
        },
    );
    Ok(sse(stream))
}
