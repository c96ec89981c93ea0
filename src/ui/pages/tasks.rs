//! The task-list page: waves side by side, the DAG picture, the task table and the
//! active wave, all following status changes live (`/ui/task-lists/{id}/events`).

use maud::{Markup, html};

use super::dag::{self, MAX_DRAWN_NODES, status_text};
use super::{Chrome, Section, TASK_ORDER, class_word, layout, status, time};
use crate::service::dashboard::TaskListView;

/// `wave`: the one wave to open (`?wave=N`), if any.
pub fn task_list_page(view: &TaskListView, wave: Option<i64>, chrome: Chrome) -> Markup {
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
                dt { "Created by" } dd { (list.created_by) }
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
                        p { "Wave " (w) " alone. " a href="?" { "Back to all waves" } }
                        div.dag-scroll { (dag::one_wave(view, w)) }
                    }
                    None if large => {
                        p { (list.tasks.len()) " tasks are too many to draw one by one: each wave below is summarised; open one to see its tasks." }
                        div.dag-scroll { (dag::summary(view)) }
                    }
                    None => div.dag-scroll { (dag::full(view)) },
                }
                p.legend {
                    "Each node names its task and its status in words; "
                    "colours repeat the status. Abandoned tasks show their category; review tasks say “review”."
                }
            }
            section aria-labelledby="tasks-h" {
                h2 #tasks-h { "Tasks" @if let Some(w) = wave { " of wave " (w) } }
                @if wave.is_none() && large {
                    p { "Open a wave to list its tasks." }
                } @else {
                    table.tasks {
                        thead { tr {
                            th scope="col" { "Task" } th scope="col" { "Wave" } th scope="col" { "Status" }
                            th scope="col" { "Persona" } th scope="col" { "Depends on" } th scope="col" { "Review of" }
                            th scope="col" { "Description" }
                        } }
                        tbody {
                            @for (i, task) in list.tasks.iter().enumerate() {
                                @if wave.is_none_or(|w| w == task.parallel_group) {
                                    @let word = task.status.as_str();
                                    tr #{ "task-" (i) } class={ "st-" (class_word(word)) } data-task=(task.task_id) data-status=(word) {
                                        th scope="row" { code { (task.task_id) } }
                                        td.num { (task.parallel_group) }
                                        td { span class={ "status st-" (word) } {
                                            span.st { (status_text(word, task.abandon_category.map(|c| c.as_str()))) }
                                        } }
                                        td { (task.assigned_persona) }
                                        td { @for (k, d) in task.depends_on.iter().enumerate() { @if k > 0 { ", " } code { (d) } } }
                                        td { @if let Some(r) = &task.reviews { "review: " code { (r) } } }
                                        td.desc { (task.description) }
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
