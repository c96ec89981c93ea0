//! The task-list page: waves side by side, the DAG picture, the task table and the
//! active wave, all following status changes live (`/ui/task-lists/{id}/events`).

use maud::{Markup, html};

use super::dag::{self, MAX_DRAWN_NODES, status_text};
use super::{
    Chrome, Section, class_word, heads, id_code, layout, opt_time, status, task_href, time,
};
use crate::domain::dispatch::{TaskEventKind, TaskStatus};
use crate::service::dashboard::{
    DASHBOARD_PAGE_TASKS, StoredTask, StoredTaskList, TaskDetailView, TaskListPageView,
    TaskListShown, TaskListView, WaveSummary, wave_summaries,
};

/// The task-list page: a small list (or one wave opened) whole, a large one
/// summarised per wave with its tasks a page at a time.
pub fn task_list_page(
    shown: &TaskListShown,
    wave: Option<i64>,
    status_filter: Option<TaskStatus>,
    chrome: Chrome,
) -> Markup {
    match shown {
        TaskListShown::Whole(view) => whole_page(view, wave, status_filter, chrome),
        TaskListShown::Paged(page) => paged_page(page, chrome),
    }
}

/// What the page says first: whose list it is, its size and its active wave.
fn facts(list: &StoredTaskList, total: usize, active_wave: Option<i64>) -> Markup {
    html! {
        dl.facts {
            dt { "Project" } dd { code { (list.project_id) } }
            dt { "Cycle (team_pk)" } dd {
                @match &list.team_pk { Some(t) => code { (t) }, None => span.none { "project-wide" } }
            }
            dt { "Created by" } dd { bdi { (list.created_by) } }
            dt { "Created" } dd { (time(&list.created_at)) }
            dt { "Tasks" } dd { (total) }
            dt { "Active wave" } dd #active-wave aria-live="polite" {
                @match active_wave { Some(w) => (w), None => "none (nothing left to do)" }
            }
        }
    }
}

/// One card per wave with its counts by status; app.js re-reads them on a change.
/// `opened`: the wave a large list's page lists (`?wave=`), marked as the
/// current one.
fn wave_cards(waves: &[WaveSummary], active_wave: Option<i64>, opened: Option<i64>) -> Markup {
    html! {
        section aria-labelledby="waves-h" {
            h2 #waves-h { "Waves" }
            ol.waves #waves {
                @for w in waves {
                    li class={ "wave-card" @if active_wave == Some(w.wave) { " active" } @if opened == Some(w.wave) { " opened" } } data-wave=(w.wave) {
                        a href={ "?wave=" (w.wave) } aria-current=[(opened == Some(w.wave)).then_some("page")] { "Wave " (w.wave) }
                        @if opened == Some(w.wave) { " " strong.opened { "open" } }
                        @if active_wave == Some(w.wave) { " " strong { "active" } }
                        ul.counts {
                            @for state in TaskStatus::ALL {
                                @let n = w.count(state);
                                @if n > 0 { li { (status(state.as_str())) " " span.n { (n) } } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The opened wave's status filter (`?wave=N&status=S`).
fn status_form(wave: i64, status_filter: Option<TaskStatus>) -> Markup {
    html! {
        form.filters #wave-filter method="get" {
            input type="hidden" name="wave" value=(wave);
            label for="f-status" { "Status" }
            select #f-status name="status" {
                option value="" selected[status_filter.is_none()] { "any" }
                @for state in TaskStatus::ALL {
                    option value=(state) selected[status_filter == Some(state)] { (state) }
                }
            }
            button type="submit" { "Filter" }
        }
    }
}

const LEGEND: &str = "Each node names its task and its status in words; \
    colours repeat the status. Abandoned tasks show their category; review tasks say “review”.";

/// The task table's rows; `name` gives the planner id of a task by server id
/// (for a cascade's cause).
fn task_table<'a>(
    list_id: uuid::Uuid,
    tasks: impl Iterator<Item = (usize, &'a StoredTask)>,
    name: &dyn Fn(uuid::Uuid) -> Option<&'a str>,
) -> Markup {
    html! {
        div.table-scroll tabindex="0" role="region" aria-label="Tasks" {
            table.tasks {
                thead { tr { (heads(&["Task", "Wave", "Status", "Persona", "Depends on", "Review of", "Why", "Description"])) } }
                tbody {
                    @for (i, task) in tasks {
                        @let word = task.status.as_str();
                        tr #{ "task-" (i) } class={ "st-" (class_word(word)) } data-task=(task.task_id) data-status=(word) {
                            th scope="row" { a href=(task_href(list_id, &task.task_id)) { (id_code(&task.task_id)) } }
                            td.num { (task.parallel_group) }
                            td { span class={ "status st-" (word) } {
                                span.st { (status_text(task.status, task.abandon_category)) }
                            } }
                            td { bdi { (task.assigned_persona) } }
                            td { @for (k, d) in task.depends_on.iter().enumerate() { @if k > 0 { ", " } (id_code(d)) } }
                            td { @if let Some(r) = &task.reviews { "review: " (id_code(r)) } }
                            td.why { (why(list_id, task, task.upstream_task_id.and_then(name))) }
                            td.desc { bdi { (short(&task.description)) } }
                        }
                    }
                }
            }
        }
    }
}

/// `wave`: the one wave to open (`?wave=N`), if any; `status`: only the tasks
/// in that status (`&status=failed`, one of [`TaskStatus`]).
fn whole_page(
    view: &TaskListView,
    wave: Option<i64>,
    status_filter: Option<TaskStatus>,
    chrome: Chrome,
) -> Markup {
    let list = &view.list;
    let waves = wave_summaries(list);
    let large = list.tasks.len() > MAX_DRAWN_NODES;
    let title = format!("Task list {}", list.id);
    let name = |id: uuid::Uuid| {
        list.tasks
            .iter()
            .find(|t| t.id == id)
            .map(|t| t.task_id.as_str())
    };
    let body = html! {
        div #task-list data-events={ "/ui/task-lists/" (list.id) "/events" } {
            (facts(list, list.tasks.len(), view.active_wave))
            (wave_cards(&waves, view.active_wave, None))
            section aria-labelledby="dag-h" {
                h2 #dag-h { "Graph" }
                @match wave {
                    Some(w) => {
                        p { "Wave " (w) " alone, with the tasks of other waves it needs and that need it. " a href="?" { "Back to all waves" } }
                        (status_form(w, status_filter))
                        (graph(dag::one_wave(view, w, status_filter)))
                    }
                    None if large => {
                        p { (list.tasks.len()) " tasks are too many to draw one by one: each wave below is summarised; open one to see its tasks." }
                        (graph(dag::summary(&waves, view.active_wave)))
                    }
                    None => (graph(dag::full(view))),
                }
                p.legend { (LEGEND) }
            }
            section aria-labelledby="tasks-h" {
                h2 #tasks-h {
                    "Tasks" @if let Some(w) = wave { " of wave " (w) }
                    @if let Some(s) = status_filter { " that are " (s) }
                }
                @if wave.is_none() && large {
                    p { "Open a wave to list its tasks." }
                } @else {
                    (task_table(list.id, list.tasks.iter().enumerate().filter(|(_, task)| {
                        wave.is_none_or(|w| w == task.parallel_group)
                            && status_filter.is_none_or(|s| s == task.status)
                    }), &name))
                }
            }
        }
    };
    layout(&title, Section::Overview, chrome, body)
}

/// A large list: its waves from their counts (cards and the summary drawing),
/// then one page of its tasks in submission order with a link to the next —
/// of every wave, or of the opened one (in the status asked), which is listed,
/// not drawn task by task.
fn paged_page(page: &TaskListPageView, chrome: Chrome) -> Markup {
    let list = &page.list;
    let title = format!("Task list {}", list.id);
    let name = |id: uuid::Uuid| {
        page.names
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, n)| n.as_str())
    };
    // The page's query without its cursor: what the pager and the live
    // stream keep.
    let query = match page.wave {
        None => String::new(),
        Some((w, None)) => format!("wave={w}"),
        Some((w, Some(s))) => format!("wave={w}&status={s}"),
    };
    let with_cursor = |cursor: Option<&str>| match (query.is_empty(), cursor) {
        (true, None) => "?".to_owned(),
        (true, Some(c)) => format!("?cursor={c}"),
        (false, None) => format!("?{query}"),
        (false, Some(c)) => format!("?{query}&cursor={c}"),
    };
    let events = match with_cursor(page.cursor.as_deref()).as_str() {
        "?" => format!("/ui/task-lists/{}/events", list.id),
        q => format!("/ui/task-lists/{}/events{q}", list.id),
    };
    let opened = page
        .wave
        .map(|(w, s)| (w, s, page.waves.iter().find(|x| x.wave == w)));
    let body = html! {
        div #task-list data-events=(events) {
            (facts(list, page.total as usize, page.active_wave))
            (wave_cards(&page.waves, page.active_wave, page.wave.map(|(w, _)| w)))
            section aria-labelledby="dag-h" {
                h2 #dag-h { "Graph" }
                @match opened {
                    None => {
                        p { (page.total) " tasks are too many to draw one by one: each wave below is summarised; open one to see its tasks." }
                        (graph(dag::summary(&page.waves, page.active_wave)))
                    }
                    Some((w, status_filter, summary)) => {
                        p #wave-listed {
                            "Wave " (w) " of a list of " (page.total) " tasks is listed below, not drawn task by task. "
                            a href="?" { "Back to all waves" }
                        }
                        (status_form(w, status_filter))
                        @if let Some(summary) = summary {
                            (graph(dag::summary(std::slice::from_ref(summary), page.active_wave)))
                        }
                    }
                }
                p.legend { (LEGEND) }
            }
            section aria-labelledby="tasks-h" {
                @match opened {
                    None => {
                        h2 #tasks-h { "Tasks" }
                        p #tasks-page {
                            (list.tasks.len()) " of the " (page.total) " tasks, in submission order"
                            @if page.cursor.is_some() { " (a later page)" }
                            "; open a wave above to see its tasks."
                        }
                    }
                    Some((w, status_filter, summary)) => {
                        @let of_wave = summary.map_or(0, |x| match status_filter {
                            None => x.total(),
                            Some(s) => x.count(s),
                        });
                        h2 #tasks-h {
                            "Tasks of wave " (w)
                            @if let Some(s) = status_filter { " that are " (s) }
                        }
                        p #tasks-page {
                            (list.tasks.len()) " of the " (of_wave) " tasks of wave " (w)
                            @if let Some(s) = status_filter { " that are " (s) }
                            ", in submission order"
                            @if page.cursor.is_some() { " (a later page)" }
                            "."
                        }
                    }
                }
                (task_table(list.id, list.tasks.iter().enumerate(), &name))
                nav.pager #task-pager aria-label="Task pages" {
                    @if page.cursor.is_some() { a href=(with_cursor(None)) rel="first" { "First page" } " " }
                    @if let Some(next) = &list.next_cursor {
                        a href=(with_cursor(Some(next))) rel="next" { "Next " (DASHBOARD_PAGE_TASKS) " tasks" }
                    } @else {
                        span.none { "No more tasks." }
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

/// Why a task ended as it did, in the words the person on call needs
/// first: a failure's notes, a cascade's cause (`upstream`, its planner id)
/// linked to its task.
fn why(list_id: uuid::Uuid, task: &StoredTask, upstream: Option<&str>) -> Markup {
    html! {
        @if let Some(up) = upstream {
            span.cause { "blocked by " a href=(task_href(list_id, up)) { (id_code(up)) } }
            @if task.notes.is_some() { br; }
        }
        @if let Some(notes) = &task.notes {
            span.notes { bdi { (notes) } }
        }
    }
}

fn event_text(kind: TaskEventKind) -> &'static str {
    match kind {
        TaskEventKind::Claimed => "claimed",
        TaskEventKind::Renewed => "lease renewed",
        TaskEventKind::LeaseExpired => "lease expired",
        TaskEventKind::StatusChanged => "status changed",
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
                span.st { (status_text(task.status, task.abandon_category)) }
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
                                    td { (event_text(e.kind))
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
