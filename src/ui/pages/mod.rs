//! Page rendering: pure functions from service values to HTML. maud escapes every
//! interpolated value; nothing here uses its raw-HTML escape hatch (`PreEscaped`).

pub mod dag;
pub mod jobs;
pub mod rate_limits;
pub mod tasks;
pub mod tracks;
pub mod usage;
pub mod webhooks;

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, html};

use crate::domain::wire_strings::WireEnum;
use crate::service::dashboard::{Overview, TaskListSummary};

/// Which top-level section a page belongs to (marked `aria-current="page"`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Overview,
    Jobs,
    Runs,
    Tracks,
    Webhooks,
    RateLimits,
    None,
}

/// What every page's header needs to know about the viewer.
#[derive(Clone, Copy)]
pub struct Chrome {
    /// A token is configured and the viewer is signed in: offer "Sign out".
    pub signed_in: bool,
}

pub fn layout(title: &str, section: Section, chrome: Chrome, body: Markup) -> Markup {
    let nav = [
        (Section::Overview, "/ui/", "Overview"),
        (Section::Jobs, "/ui/jobs", "Refine jobs"),
        (Section::Runs, "/ui/runs", "Refine runs"),
        (Section::Tracks, "/ui/tracks", "Tracks"),
        (Section::Webhooks, "/ui/webhooks", "Webhooks"),
        (Section::RateLimits, "/ui/rate-limits", "Rate limits"),
    ];
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · plangate" }
                link rel="icon" href="/ui/assets/icon.svg" type="image/svg+xml";
                link rel="stylesheet" href="/ui/assets/app.css";
                // Not deferred: sets the stored theme before the first paint.
                script src="/ui/assets/theme.js" {}
                script src="/ui/assets/app.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/ui/" { "plangate" }
                    nav aria-label="Sections" {
                        ul {
                            @for (s, href, label) in nav {
                                li { a href=(href) aria-current=[(s == section).then_some("page")] { (label) } }
                            }
                        }
                    }
                    div.theme {
                        // Shown by theme.js, which names the theme it switches to.
                        button #theme-toggle type="button" hidden { "Dark theme" }
                    }
                    @if chrome.signed_in {
                        form.signout method="post" action="/ui/logout" {
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main #main tabindex="-1" {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

pub fn respond(status: StatusCode, markup: Markup) -> Response {
    (status, Html(markup.into_string())).into_response()
}

pub fn error_page(status: StatusCode, title: &str, detail: &str) -> Response {
    let body = html! {
        p.problem role="alert" { (detail) }
        p { a href="/ui/" { "Back to the overview" } }
    };
    respond(
        status,
        layout(title, Section::None, Chrome { signed_in: false }, body),
    )
}

/// A status word with its colour class: the word is always shown, the colour
/// only repeats it. Words outside `[a-z_]` get a neutral class.
pub fn status(word: &str) -> Markup {
    html! { span class={ "status st-" (class_word(word)) } { (word) } }
}

pub fn class_word(word: &str) -> &str {
    if word == "not started" {
        return "not_started";
    }
    if !word.is_empty() && word.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
        word
    } else {
        "other"
    }
}

/// A table in a keyboard-focusable region that scrolls sideways inside itself,
/// so no table makes the page wider than a phone.
pub fn scroll_table(label: &str, table: Markup) -> Markup {
    html! { div.table-scroll tabindex="0" role="region" aria-label=(label) { (table) } }
}

/// The task page's address; the planner's id is percent-encoded, as it may hold
/// any character.
pub fn task_href(list_id: uuid::Uuid, task_id: &str) -> String {
    let mut href = format!("/ui/task-lists/{list_id}/tasks/");
    for b in task_id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            href.push(b as char);
        } else {
            href.push_str(&format!("%{b:02X}"));
        }
    }
    href
}

/// An id in a table: cut with an ellipsis when long, whole in its title and
/// whole again while its link has keyboard focus.
pub fn id_code(id: impl std::fmt::Display) -> Markup {
    let id = id.to_string();
    html! { code.id title=(id) { bdi { (id) } } }
}

/// A table's column headings, in order.
pub fn heads(names: &[&str]) -> Markup {
    html! { @for name in names { th scope="col" { (name) } } }
}

pub fn time(at: &DateTime<Utc>) -> Markup {
    html! { time datetime=(at.to_rfc3339()) { (at.format("%Y-%m-%d %H:%M:%S UTC")) } }
}

pub fn opt_time(at: Option<&DateTime<Utc>>) -> Markup {
    match at {
        Some(at) => time(at),
        None => html! { span.none { "—" } },
    }
}

/// `status n` pairs in their enum's order, as text.
pub fn counts<S: WireEnum>(pairs: &[(S, i64)]) -> Markup {
    html! {
        ul.counts {
            @for (state, n) in sorted(pairs) {
                li { (status(state.as_wire())) " " span.n { (n) } }
            }
            @if pairs.is_empty() { li.none { "none" } }
        }
    }
}

/// Whether the page is live: the script turns it to "live" once its event
/// stream is up, "disconnected" when it drops. Without the
/// script the page says it does not update.
pub fn live_badge() -> Markup {
    html! {
        p.live-line {
            "Updates: "
            span #live-badge class="live-badge off" role="status" aria-live="polite" { "not live (reload to update)" }
        }
    }
}

fn list_row(list: &TaskListSummary) -> Markup {
    let total: i64 = list.counts.iter().map(|(_, n)| n).sum();
    html! {
        tr {
            td { a href={ "/ui/task-lists/" (list.id) } { (id_code(list.id)) } }
            td { bdi { (list.created_by) } }
            td { (time(&list.created_at)) }
            td.num { (total) }
            td { (counts(&list.counts)) }
        }
    }
}

pub fn overview_page(overview: &Overview, chrome: Chrome) -> Markup {
    let body = html! {
        (live_badge())
        div #live-region data-live="overview" data-since=(overview.since) {
        section aria-labelledby="jobs-h" {
            h2 #jobs-h { "Refine jobs by state" }
            ul.counts {
                @for (state, n) in sorted(&overview.job_counts) {
                    li { a href={ "/ui/jobs?status=" (state) } { (status(state.as_str())) " " span.n { (n) } } }
                }
                @if overview.job_counts.is_empty() { li.none { "no refine jobs" } }
            }
            h2 { "Refine runs by status" }
            ul.counts {
                @for (state, n) in sorted(&overview.run_counts) {
                    li { a href="/ui/runs" { (status(state.as_str())) " " span.n { (n) } } }
                }
                @if overview.run_counts.is_empty() { li.none { "no refine runs" } }
            }
        }
        section aria-labelledby="projects-h" {
            h2 #projects-h { "Projects and their cycles" }
            @if overview.projects.is_empty() {
                p.none { "No task lists yet." }
            }
            @for project in &overview.projects {
                section.project {
                    h3 { "Project " code { (project.project_id) } }
                    @for cycle in &project.cycles {
                        h4 {
                            @match &cycle.team_pk {
                                Some(team) => { "Cycle (team_pk) " code { (team) } }
                                None => { "Project-wide (no team_pk)" }
                            }
                        }
                        @let label = match &cycle.team_pk {
                            Some(team) => format!("Task lists of project {}, cycle {team}", project.project_id),
                            None => format!("Task lists of project {}", project.project_id),
                        };
                        (scroll_table(&label, html! { table {
                            thead { tr { th scope="col" { "Task list" } th scope="col" { "Created by" } th scope="col" { "Created" } th scope="col" { "Tasks" } th scope="col" { "By status" } } }
                            tbody { @for list in &cycle.lists { (list_row(list)) } }
                        } }))
                    }
                }
            }
        }
        }
    };
    layout("Overview", Section::Overview, chrome, body)
}

/// `(state, n)` pairs in the order the enum declares its states.
fn sorted<S: WireEnum>(pairs: &[(S, i64)]) -> Vec<(S, i64)> {
    let mut v = pairs.to_vec();
    v.sort_by_key(|(s, _)| S::all().iter().position(|o| o == s));
    v
}

pub fn login_page(next: &str, failed: bool, auth_on: bool) -> Markup {
    let body = html! {
        @if !auth_on {
            p { "No API tokens are configured: the dashboard is open. " a href="/ui/" { "Go to the overview" } }
        } @else {
            @if failed { p.problem role="alert" { "That token is not valid." } }
            form.login method="post" action="/ui/login" {
                input type="hidden" name="next" value=(next);
                label for="token" { "API token" }
                input #token type="password" name="token" autocomplete="current-password" required autofocus;
                button type="submit" { "Sign in" }
            }
            p.hint { "The token is checked once; the browser keeps a session cookie, never the token." }
        }
    };
    layout("Sign in", Section::None, Chrome { signed_in: false }, body)
}
