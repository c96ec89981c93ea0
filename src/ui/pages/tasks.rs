//! The task-list page: waves side by side, the DAG picture, the task table and the
//! active wave, all following status changes live (`/ui/task-lists/{id}/events`).

use maud::{Markup, html};

use super::dag::{self, MAX_DRAWN_NODES, status_text};
use super::{
    Chrome, Section, TASK_ORDER, class_word, heads, id_code, layout, opt_time, status, time,
};
use crate::service::dashboard::{StoredTask, StoredTaskList, TaskDetailView, TaskListView};

/// `wave`: the one wave to open (`?wave=N`), if any; `status`: only the tasks
/// in that status (`&status=failed`, one of [`TASK_ORDER`]).
pub fn task_list_page(
    view: &TaskListView,
    wave: Option<i64>,
    status_filter: Option<&str>,
    chrome: Chrome,
) -> Markup {
    let list = &view.list;
    let waves = dag::waves(view);
    let large = list.tasks.len() > MAX_DRAWN_NODES;
    let title = format!("Task list {}", list.id);
    let body = html! {
        div #task-list data-events={ "/ui/task-lists/" (list.id) "/events" } {
            dl.facts {
                dt { "Project" } dd { code { (list.project_id) } }
                dt { "Cycle (team_pk)" } dd {
                    @match &list.team_pk { Some(t) => code { (t) }, None => span.none { "project-wide" } }
                }
                dt { "Created by" } dd { bdi { (list.created_by) } }
                dt { "Created" } dd { (time(&list.created_at)) }
                dt { "Tasks" } dd { (list.tasks.len()) }
                dt { "Active wave" } dd #active-wave aria-live="polite" {
                    @match view.active_wave { Some(w) => (w), None => "none (nothing left to do)" }
                }
            }
            section aria-labelledby="waves-h" {
                h2 #waves-h { "Waves" }
                ol.waves #waves {
                    @for (w, tasks) in &waves {
                        li class={ "wave-card" @if view.active_wave == Some(*w) { " active" } } data-wave=(w) {
                            a href={ "?wave=" (w) } { "Wave " (w) }
                            @if view.active_wave == Some(*w) { " " strong { "active" } }
                            ul.counts {
                                @for word in TASK_ORDER {
                                    @let n = tasks.iter().filter(|&&i| list.tasks[i].status.as_str() == word).count();
                                    @if n > 0 { li { (status(word)) " " span.n { (n) } } }
                                }
                            }
                        }
                    }
                }
            }
            section aria-labelledby="dag-h" {
                h2 #dag-h { "Graph" }
                @match wave {
                    Some(w) => {
                        p { "Wave " (w) " alone, with the tasks of other waves it needs and that need it. " a href="?" { "Back to all waves" } }
                        form.filters #wave-filter method="get" {
                            input type="hidden" name="wave" value=(w);
                            label for="f-status" { "Status" }
                            select #f-status name="status" {
                                option value="" selected[status_filter.is_none()] { "any" }
                                @for word in TASK_ORDER {
                                    option value=(word) selected[status_filter == Some(word)] { (word) }
                                }
                            }
                            button type="submit" { "Filter" }
                        }
                        (graph(dag::one_wave(view, w, status_filter)))
                    }
                    None if large => {
                        p { (list.tasks.len()) " tasks are too many to draw one by one: each wave below is summarised; open one to see its tasks." }
                        (graph(dag::summary(view)))
                    }
                    None => (graph(dag::full(view))),
                }
                p.legend {
                    "Each node names its task and its status in words; "
                    "colours repeat the status. Abandoned tasks show their category; review tasks say “review”."
                }
            }
            section aria-labelledby="tasks-h" {
                h2 #tasks-h {
                    "Tasks" @if let Some(w) = wave { " of wave " (w) }
                    @if let Some(s) = status_filter { " that are " (s) }
                }
                @if wave.is_none() && large {
                    p { "Open a wave to list its tasks." }
                } @else {
                    div.table-scroll tabindex="0" role="region" aria-label="Tasks" {
                        table.tasks {
                            thead { tr { (heads(&["Task", "Wave", "Status", "Persona", "Depends on", "Review of", "Why", "Description"])) } }
                            tbody {
                                @for (i, task) in list.tasks.iter().enumerate() {
                                    @if wave.is_none_or(|w| w == task.parallel_group)
                                        && status_filter.is_none_or(|s| s == task.status.as_str()) {
                                        @let word = task.status.as_str();
                                        tr #{ "task-" (i) } class={ "st-" (class_word(word)) } data-task=(task.task_id) data-status=(word) {
                                            th scope="row" { a href=(task_href(list.id, &task.task_id)) { (id_code(&task.task_id)) } }
                                            td.num { (task.parallel_group) }
                                            td { span class={ "status st-" (word) } {
                                                span.st { (status_text(word, task.abandon_category.map(|c| c.as_str()))) }
                                            } }
                                            td { bdi { (task.assigned_persona) } }
                                            td { @for (k, d) in task.depends_on.iter().enumerate() { @if k > 0 { ", " } (id_code(d)) } }
                                            td { @if let Some(r) = &task.reviews { "review: " (id_code(r)) } }
                                            td.why { (why(list, task)) }
                                            td.desc { bdi { (short(&task.description)) } }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    layout(&title, Section::Overview, chrome, body)
}

/// Characters of a description a table row shows; the task's page shows it whole.
/// A long unbroken word in an auto-width cell costs the browser's layout time in
/// proportion to its length (seconds for 10 KB), so rows never carry more.
const DESCRIPTION_CHARS: usize = 160;

/// `text` cut to [`DESCRIPTION_CHARS`] characters, with `…` when cut.
fn short(text: &str) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(DESCRIPTION_CHARS) {
        None => text.into(),
        Some((end, _)) => format!("{}…", &text[..end]).into(),
    }
}

/// The drawing in a focusable region that scrolls inside itself, with the
/// lines app.js keeps: which waves are off-screen, and what the hovered or
/// focused node depends on and is needed by.
fn graph(svg: Markup) -> Markup {
    html! {
        p.hint #dag-offscreen {}
        div.dag-scroll #dag-scroll tabindex="0" role="region" aria-label="Task graph" { (svg) }
        p #dag-trace aria-live="polite" { "Hover or focus a node to see what it depends on and what needs it." }
    }
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

/// Why a task ended as it did, in the words the person on call needs
/// first: a failure's notes, a cascade's cause linked to its task.
fn why(list: &StoredTaskList, task: &StoredTask) -> Markup {
    let upstream = task
        .upstream_task_id
        .and_then(|up| list.tasks.iter().find(|t| t.id == up));
    html! {
        @if let Some(up) = upstream {
            span.cause { "blocked by " a href=(task_href(list.id, &up.task_id)) { (id_code(&up.task_id)) } }
            @if task.notes.is_some() { br; }
        }
        @if let Some(notes) = &task.notes {
            span.notes { bdi { (notes) } }
        }
    }
}

fn event_text(kind: &str) -> &str {
    match kind {
        "claimed" => "claimed",
        "renewed" => "lease renewed",
        "lease_expired" => "lease expired",
        "status_changed" => "status changed",
        other => other,
    }
}

/// One task: its status, why, its cause or the tasks it abandoned, and its history.
pub fn task_page(view: &TaskDetailView, chrome: Chrome) -> Markup {
    let task = &view.task;
    let word = task.status.as_str();
    let title = format!("Task {}", task.task_id);
    let body = html! {
        p { a href={ "/ui/task-lists/" (view.list_id) } { "Back to the task list" } }
        dl.facts #task-facts {
            dt { "Status" } dd { span class={ "status st-" (class_word(word)) } {
                span.st { (status_text(word, task.abandon_category.map(|c| c.as_str()))) }
            } }
            @if let Some(notes) = &task.notes {
                dt { "Reason (notes)" } dd.notes { bdi { (notes) } }
            }
            @if let Some(up) = &view.upstream {
                dt { "Caused by" } dd.cause {
                    a href=(task_href(view.list_id, &up.task_id)) { code { bdi { (up.task_id) } } }
                    " (" (up.status.as_str()) ")"
                    @if let Some(n) = &up.notes { ": " bdi { (n) } }
                }
            } @else if task.upstream_task_id.is_some() {
                dt { "Caused by" } dd { span.unknown { "a task no longer in this list" } }
            }
            @if !view.abandoned_by_it.is_empty() {
                dt { "Abandoned because of it" } dd.abandoned-by {
                    @for (k, t) in view.abandoned_by_it.iter().enumerate() {
                        @if k > 0 { ", " }
                        a href=(task_href(view.list_id, &t.task_id)) { code { bdi { (t.task_id) } } }
                    }
                }
            }
            dt { "Project" } dd { code { bdi { (view.project_id) } } }
            dt { "Wave" } dd { (task.parallel_group) }
            dt { "Persona" } dd { bdi { (task.assigned_persona) } }
            dt { "Depends on" } dd {
                @if task.depends_on.is_empty() { span.none { "nothing" } }
                @for (k, d) in task.depends_on.iter().enumerate() {
                    @if k > 0 { ", " }
                    a href=(task_href(view.list_id, d)) { code { bdi { (d) } } }
                }
            }
            dt { "Attempts" } dd { (task.attempts) }
            @if let Some(claim) = &task.claim {
                dt { "Held by" } dd { bdi { (claim.holder) } " until " (time(&claim.lease_expires_at)) }
            }
            dt { "Started" } dd { (opt_time(task.started_at.as_ref())) }
            dt { "Finished" } dd { (opt_time(task.finished_at.as_ref())) }
            dt { "Description" } dd.desc { bdi { (task.description) } }
        }
        section aria-labelledby="history-h" {
            h2 #history-h { "History" }
            @if view.history.is_empty() {
                p.none { "Nothing happened to this task yet." }
            } @else {
                div.table-scroll tabindex="0" role="region" aria-label="History" {
                    table.history {
                        thead { tr { (heads(&["When", "What", "Status", "Holder", "Attempt", "Lease until"])) } }
                        tbody {
                            @for e in &view.history {
                                tr data-kind=(e.kind.as_str()) {
                                    td { (time(&e.at)) }
                                    td { (event_text(e.kind.as_str()))
                                        @if e.forced { " (overrode " @if let Some(o) = &e.overrode { bdi { (o) } } @else { "a claim" } ")" }
                                    }
                                    td { (e.from_status.as_str()) " → " (status(e.to_status.as_str())) }
                                    td { @match &e.holder { Some(h) => bdi { (h) }, None => span.none { "not said" } } }
                                    td.num { (e.attempt) }
                                    td { (opt_time(e.lease_expires_at.as_ref())) }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    layout(&title, Section::Overview, chrome, body)
}

#[cfg(test)]
mod short_tests {
    #[test]
    fn long_descriptions_are_cut_on_a_character() {
        assert_eq!(super::short("short"), "short");
        let long = "é".repeat(10_000);
        let cut = super::short(&long);
        assert_eq!(cut.chars().count(), super::DESCRIPTION_CHARS + 1);
        assert!(cut.ends_with('…'));
    }
}
