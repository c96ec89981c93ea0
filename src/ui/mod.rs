//! The dashboard at `/ui/`: server-rendered HTML (maud) over `service::dashboard`,
//! every asset embedded, live updates over Server-Sent Events. A thin adapter: it
//! parses the request, asks the service layer, renders the answer.

pub mod assets;
pub mod pages;
pub mod session;

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Extension, Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Router, middleware};
use chrono::NaiveDate;
use futures::Stream;
use serde::Deserialize;
use uuid::Uuid;

use crate::service::dashboard::{BulkAction, JOB_STATES, JobQuery, LivePage, TaskState};
use crate::service::{Caller, ErrorKind, ProblemCode, ServiceError};
use crate::web::AppState;
use pages::{Chrome, error_page, respond};

/// How often a live task list looks for changes.
const LIVE_POLL: Duration = Duration::from_millis(500);

pub fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(overview))
        .route("/ui/login", get(login_form).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/task-lists/{id}", get(task_list))
        .route("/ui/task-lists/{id}/events", get(task_list_events))
        .route("/ui/task-lists/{id}/tasks/{task_id}", get(task_page))
        .route("/ui/live/{page}/events", get(live_events))
        .route("/ui/jobs", get(jobs))
        .route("/ui/jobs/bulk", get(bulk_confirm).post(bulk_action))
        .route("/ui/jobs/{id}", get(job))
        .route("/ui/jobs/{id}/events", get(job_events))
        .route(
            "/ui/jobs/{id}/cancel",
            get(cancel_job_confirm).post(cancel_job),
        )
        .route("/ui/jobs/{id}/retry", post(retry_job))
        .route("/ui/runs", get(runs))
        .route("/ui/runs/{id}", get(run))
        .route(
            "/ui/runs/{id}/cancel",
            get(cancel_run_confirm).post(cancel_run),
        )
        .route("/ui/rate-limits", get(pages::rate_limits::page))
        .route("/ui/tracks", get(tracks))
        .route("/ui/tracks/{id}", get(track))
        .route("/ui/assets/{name}", get(assets::serve))
        .layer(middleware::from_fn_with_state(
            state,
            session::require_session,
        ))
        .layer(middleware::from_fn(session::security_headers))
}

/// Whether the request's `Accept` names `text/html` (what a browser sends when it
/// navigates); `*/*` alone or JSON does not.
pub fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            media.eq_ignore_ascii_case("text/html") && !refused
        })
}

fn chrome(state: &AppState) -> Chrome {
    Chrome {
        signed_in: !state.settings.api_tokens.is_empty(),
    }
}

/// The service's refusal as a page: the same kinds as REST's statuses, and the
/// detail for the person (a storage fault's detail stays in the log).
fn failure(err: ServiceError) -> Response {
    let (status, title) = match err.kind {
        ErrorKind::NotFound => (StatusCode::NOT_FOUND, "Not found"),
        ErrorKind::Forbidden => (StatusCode::FORBIDDEN, "Not yours"),
        ErrorKind::BadRequest | ErrorKind::Unprocessable => {
            (StatusCode::BAD_REQUEST, "Bad request")
        }
        ErrorKind::Unavailable | ErrorKind::TooManyRequests => {
            (StatusCode::SERVICE_UNAVAILABLE, "Unavailable")
        }
        ErrorKind::Conflict | ErrorKind::PreconditionFailed => (StatusCode::CONFLICT, "Conflict"),
        ErrorKind::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "Something broke"),
    };
    let detail = match err.kind {
        ErrorKind::Forbidden => "Your token may not see this project.".to_owned(),
        ErrorKind::Unavailable => "The database did not answer; try again shortly.".to_owned(),
        ErrorKind::Internal => "The server log has the details.".to_owned(),
        _ => match err.details.field() {
            Some(field) if !err.detail.starts_with(field) => format!("{field}: {}", err.detail),
            _ => err.detail,
        },
    };
    error_page(status, title, &detail)
}

/// A form or path value the page cannot use (400, naming it).
fn invalid(field: &'static str, message: &str) -> ServiceError {
    ServiceError::bad_request(ProblemCode::InvalidQuery, message).field(field)
}

fn parse_id(raw: &str, what: &'static str) -> Result<Uuid, ServiceError> {
    Uuid::parse_str(raw).map_err(|_| invalid(what, "not an id (a UUID)"))
}

/// A form field left empty means "no filter".
fn present(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

type PageResult = Result<Response, Response>;

async fn overview(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> PageResult {
    let overview = state
        .service
        .dashboard_overview(&caller)
        .await
        .map_err(failure)?;
    Ok(respond(
        StatusCode::OK,
        pages::overview_page(&overview, chrome(&state)),
    ))
}

#[derive(Deserialize)]
struct WaveQuery {
    wave: Option<String>,
    status: Option<String>,
}

async fn task_list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(raw): Path<String>,
    Query(query): Query<WaveQuery>,
) -> PageResult {
    let id = parse_id(&raw, "task list id").map_err(failure)?;
    let wave = match present(&query.wave) {
        None => None,
        Some(w) => Some(
            w.parse::<i64>()
                .map_err(|_| failure(invalid("wave", "must be a wave number")))?,
        ),
    };
    let status = match present(&query.status) {
        None => None,
        Some(s) => Some(
            pages::TASK_ORDER
                .into_iter()
                .find(|word| *word == s)
                .ok_or_else(|| {
                    failure(invalid(
                        "status",
                        "must be one of pending, running, done, failed, abandoned",
                    ))
                })?,
        ),
    };
    let view = state
        .service
        .dashboard_task_list(&caller, id)
        .await
        .map_err(failure)?;
    Ok(respond(
        StatusCode::OK,
        pages::tasks::task_list_page(&view, wave, status, chrome(&state)),
    ))
}

async fn task_page(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((raw, task_id)): Path<(String, String)>,
) -> PageResult {
    let id = parse_id(&raw, "task list id").map_err(failure)?;
    let view = state
        .service
        .dashboard_task(&caller, id, &task_id)
        .await
        .map_err(failure)?;
    Ok(respond(
        StatusCode::OK,
        pages::tasks::task_page(&view, chrome(&state)),
    ))
}

/// `tasks` events: `{"wave": n|null, "tasks": [[task_id, status, category|null], ...]}`,
/// the first with every task, later ones with the tasks that changed.
async fn task_list_events(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(raw): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Response> {
    let id = parse_id(&raw, "task list id").map_err(failure)?;
    state
        .service
        .dashboard_task_list_marker(&caller, id)
        .await
        .map_err(failure)?;
    struct Seen {
        marker: Option<(i64, Option<chrono::DateTime<chrono::Utc>>)>,
        states: Vec<TaskState>,
        wave: Option<Option<i64>>,
    }
    let seen = Seen {
        marker: None,
        states: Vec::new(),
        wave: None,
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
                    let (states, wave) = match state.service.dashboard_task_states(id).await {
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
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

#[derive(Deserialize)]
struct JobsForm {
    status: Option<String>,
    q: Option<String>,
    project: Option<String>,
    date: Option<String>,
    before: Option<String>,
}

fn job_query(form: &JobsForm) -> Result<JobQuery, ServiceError> {
    let status = match present(&form.status) {
        None => None,
        Some(s) => Some(
            JOB_STATES
                .into_iter()
                .find(|state| *state == s)
                .ok_or_else(|| invalid("status", &format!("one of {}", JOB_STATES.join(", "))))?,
        ),
    };
    let date = match present(&form.date) {
        None => None,
        Some(d) => Some(
            NaiveDate::parse_from_str(d, "%Y-%m-%d")
                .map_err(|_| invalid("date", "a day as YYYY-MM-DD"))?,
        ),
    };
    let before = present(&form.before)
        .map(|b| parse_id(b, "before"))
        .transpose()?;
    Ok(JobQuery {
        status,
        search: present(&form.q).map(str::to_owned),
        project_id: present(&form.project).map(str::to_owned),
        date,
        before,
    })
}

async fn jobs(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(form): Query<JobsForm>,
) -> PageResult {
    let query = job_query(&form).map_err(failure)?;
    let list = state
        .service
        .dashboard_jobs(&caller, &query)
        .await
        .map_err(failure)?;
    Ok(respond(
        StatusCode::OK,
        pages::jobs::jobs_page(&query, &list, chrome(&state)),
    ))
}

async fn job(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(raw): Path<String>,
) -> PageResult {
    let id = parse_id(&raw, "job id").map_err(failure)?;
    let view = state
        .service
        .dashboard_job(&caller, id)
        .await
        .map_err(failure)?;
    Ok(respond(
        StatusCode::OK,
        pages::jobs::job_page(&view, chrome(&state)),
    ))
}

/// The job page's live log: the events of `GET /v1/refine-jobs/{id}/events`, for
/// the signed-in viewer (an `EventSource` sends the session cookie, and `/v1`
/// takes no cookie).
async fn job_events(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(raw): Path<String>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Response> {
    let last_event_id = headers
        .get("last-event-id")
        .map(axum::http::HeaderValue::as_bytes);
    let events = state
        .service
        .refine_job_events(&caller, &raw, last_event_id)
        .await
        .map_err(failure)?;
    // Log lines carry their time here, for the page to show (issue 27, item 2).
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
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// An action's refusal as a page, titled by what was refused.
fn refused(title: &'static str) -> impl Fn(ServiceError) -> Response {
    move |e: ServiceError| {
        let status = match e.kind {
            ErrorKind::Forbidden => StatusCode::FORBIDDEN,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
            ErrorKind::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::Internal => return failure(e),
            _ => StatusCode::CONFLICT,
        };
        error_page(status, title, &e.detail)
    }
}

/// Cancel asks first: this page says what will happen and posts the cancel
/// (no script needed).
async fn cancel_job_confirm(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(raw): Path<String>,
) -> PageResult {
    let id = parse_id(&raw, "job id").map_err(failure)?;
    let view = state
        .service
        .dashboard_job(&caller, id)
        .await
        .map_err(failure)?;
    Ok(respond(
        StatusCode::OK,
        pages::jobs::cancel_job_page(&view.job, chrome(&state)),
    ))
}

async fn cancel_job(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(raw): Path<String>,
) -> PageResult {
    let id = parse_id(&raw, "job id").map_err(failure)?;
    // The service checks the caller's project before it changes anything.
    state
        .service
        .cancel_refine_job(&caller, &id.to_string())
        .await
        .map_err(refused("Cancel refused"))?;
    Ok(Redirect::to(&format!("/ui/jobs/{id}")).into_response())
}

/// Retry: the same use case as `POST /v1/refine-jobs/{id}/retry`; on to the new job.
async fn retry_job(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(raw): Path<String>,
) -> PageResult {
    let id = parse_id(&raw, "job id").map_err(failure)?;
    let new = state
        .service
        .retry_refine_job(&caller, &id.to_string())
        .await
        .map_err(refused("Retry refused"))?;
    Ok(Redirect::to(&format!("/ui/jobs/{}", new.id)).into_response())
}

async fn cancel_run_confirm(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(raw): Path<String>,
) -> PageResult {
    let id = parse_id(&raw, "run id").map_err(failure)?;
    let view = state
        .service
        .dashboard_run(&caller, id)
        .await
        .map_err(failure)?;
    Ok(respond(
        StatusCode::OK,
        pages::jobs::cancel_run_page(&view, chrome(&state)),
    ))
}

async fn cancel_run(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(raw): Path<String>,
) -> PageResult {
    let id = parse_id(&raw, "run id").map_err(failure)?;
    state
        .service
        .cancel_refine_run(&caller, &id.to_string())
        .await
        .map_err(refused("Cancel refused"))?;
    Ok(Redirect::to(&format!("/ui/runs/{id}")).into_response())
}

/// `name=value` pairs of a query string or form body, `+` and `%XX` decoded
/// (repeated names kept: the bulk form sends one `id` per job).
fn form_pairs(raw: &str) -> Vec<(String, String)> {
    fn decode(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    match u8::from_str_radix(text.get(i + 1..i + 3).unwrap_or(""), 16) {
                        Ok(b) => {
                            out.push(b);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(name), decode(value))
        })
        .collect()
}

/// The bulk form's action and job ids (at most a page of them).
fn bulk_form(raw: &str) -> Result<(BulkAction, Vec<String>), ServiceError> {
    let pairs = form_pairs(raw);
    let action = pairs
        .iter()
        .find(|(n, _)| n == "action")
        .map(|(_, v)| v.as_str())
        .ok_or_else(|| invalid("action", "missing: cancel or retry"))?;
    let action =
        BulkAction::parse(action).ok_or_else(|| invalid("action", "must be cancel or retry"))?;
    let mut ids: Vec<String> = Vec::new();
    for (_, id) in pairs.into_iter().filter(|(n, _)| n == "id") {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    if ids.is_empty() {
        return Err(invalid("id", "select at least one job"));
    }
    if ids.len() > crate::service::dashboard::JOB_PAGE as usize {
        return Err(invalid("id", "at most one page of jobs at a time"));
    }
    Ok((action, ids))
}

/// The bulk action's confirmation: what it will do to each selected job, and
/// what it will refuse, before anything changes.
async fn bulk_confirm(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    axum::extract::RawQuery(raw): axum::extract::RawQuery,
) -> PageResult {
    let (action, ids) = bulk_form(raw.as_deref().unwrap_or("")).map_err(failure)?;
    let items = state
        .service
        .dashboard_bulk_preview(&caller, action, &ids)
        .await;
    Ok(respond(
        StatusCode::OK,
        pages::jobs::bulk_page(action, &items, false, chrome(&state)),
    ))
}

/// The bulk action: each job through the REST use case, then what was done and
/// what was refused, and why.
async fn bulk_action(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: String,
) -> PageResult {
    let (action, ids) = bulk_form(&body).map_err(failure)?;
    let items = state.service.dashboard_bulk(&caller, action, &ids).await;
    Ok(respond(
        StatusCode::OK,
        pages::jobs::bulk_page(action, &items, true, chrome(&state)),
    ))
}

/// `changed` events for a live list page (overview, jobs, runs, tracks): sent
/// whenever what the page shows changes, for it to fetch itself again. The
/// first event, `ready`, says the stream is up.
async fn live_events(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(page): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Response> {
    let page = LivePage::parse(&page)
        .ok_or_else(|| failure(invalid("page", "one of overview, jobs, runs, tracks")))?;
    let first = state
        .service
        .dashboard_live_marker(&caller, page)
        .await
        .map_err(failure)?;
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
                let marker = state
                    .service
                    .dashboard_live_marker(&caller, page)
                    .await
                    .ok()?;
                if marker != seen {
                    let event = Event::default().event("changed").data("{}");
                    return Some((Ok(event), (state, caller, marker, false)));
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

#[derive(Deserialize)]
struct RunsForm {
    before: Option<String>,
}

async fn runs(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(form): Query<RunsForm>,
) -> PageResult {
    let before = present(&form.before)
        .map(|b| parse_id(b, "before"))
        .transpose()
        .map_err(failure)?;
    let page = state
        .service
        .dashboard_runs(&caller, before)
        .await
        .map_err(failure)?;
    Ok(respond(
        StatusCode::OK,
        pages::jobs::runs_page(&page, before, chrome(&state)),
    ))
}

async fn run(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(raw): Path<String>,
) -> PageResult {
    let id = parse_id(&raw, "run id").map_err(failure)?;
    let view = state
        .service
        .dashboard_run(&caller, id)
        .await
        .map_err(failure)?;
    Ok(respond(
        StatusCode::OK,
        pages::jobs::run_page(&view, chrome(&state)),
    ))
}

async fn tracks(State(state): State<AppState>, Extension(caller): Extension<Caller>) -> PageResult {
    let tracks = state
        .service
        .dashboard_tracks(&caller)
        .await
        .map_err(failure)?;
    Ok(respond(
        StatusCode::OK,
        pages::tracks::tracks_page(&tracks, chrome(&state)),
    ))
}

async fn track(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(track_id): Path<String>,
) -> PageResult {
    let view = state
        .service
        .dashboard_track(&caller, &track_id)
        .await
        .map_err(failure)?;
    Ok(respond(
        StatusCode::OK,
        pages::tracks::track_page(&view, chrome(&state)),
    ))
}

#[derive(Deserialize)]
struct NextQuery {
    next: Option<String>,
}

async fn login_form(State(state): State<AppState>, Query(query): Query<NextQuery>) -> Response {
    let next = session::safe_next(query.next.as_deref());
    respond(
        StatusCode::OK,
        pages::login_page(next, false, !state.settings.api_tokens.is_empty()),
    )
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
    next: Option<String>,
}

async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let next = session::safe_next(form.next.as_deref());
    let signed_in = match state.service.sign_in(&form.token).await {
        Ok(signed_in) => signed_in,
        Err(e) => return failure(e),
    };
    let Some(new_session) = signed_in else {
        return respond(
            StatusCode::UNAUTHORIZED,
            pages::login_page(next, true, !state.settings.api_tokens.is_empty()),
        );
    };
    let cookie = session::set_cookie(
        &new_session.cookie_value,
        session::is_https(&headers),
        new_session.max_age_secs,
    );
    let mut response = Redirect::to(next).into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    response
}

/// Ends the session on the server (a copied cookie stops working too) and in the
/// browser.
async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(value) = session::session_cookie(&headers)
        && let Err(e) = state.service.sign_out(value).await
    {
        return failure(e);
    }
    let cookie = session::set_cookie("", session::is_https(&headers), 0);
    let mut response = Redirect::to("/ui/login").into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    response
}
