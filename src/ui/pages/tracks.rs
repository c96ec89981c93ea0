//! Tracks: the loop state with the current step marked `aria-current="step"`, the
//! fix cycles used of the maximum, each step's last checkpoint, every write the
//! server kept (docs/api.md, "Tracks") and the blockers.

use maud::{Markup, html};

use super::{Chrome, Section, heads, id_code, layout, live_badge, opt_time, time};
use crate::domain::track_state::{CheckpointStatus, CurrentStep, Metadata, Step};
use crate::service::dashboard::{TrackListEntry, TrackView};

/// The loop in order, with COMPLETE at the end.
const LOOP: [CurrentStep; 7] = [
    CurrentStep::Plan,
    CurrentStep::EvaluatePlan,
    CurrentStep::Execute,
    CurrentStep::EvaluateExecution,
    CurrentStep::Fix,
    CurrentStep::BusinessSync,
    CurrentStep::Complete,
];

fn word(text: &str) -> Markup {
    // Track and checkpoint words are upper or snake case: class them lower-cased.
    let class = text.to_ascii_lowercase();
    html! { span class={ "status st-" (super::class_word(&class)) } { (text) } }
}

pub fn tracks_page(tracks: &[TrackListEntry], since: &str, chrome: Chrome) -> Markup {
    let body = html! {
        (live_badge())
        div #live-region data-live="tracks" data-since=(since) {
        div.table-scroll tabindex="0" role="region" aria-label="Tracks" {
            table.tracks {
                thead { tr { (heads(&["Track", "Status", "Current step", "Step status", "Fix cycles", "Revision", "Updated"])) } }
                tbody {
                    @for t in tracks {
                        tr {
                            th scope="row" {
                                a href={ "/ui/tracks/" (crate::ui::session::url_encode(&t.track_id)) } { (id_code(&t.track_id)) }
                                @if let Some(d) = t.metadata.as_ref().and_then(description) {
                                    br; span.track-desc { bdi { (d) } }
                                }
                            }
                            @match &t.metadata {
                                Some(m) => {
                                    td { (word(m.status.as_str())) }
                                    td { (m.loop_state.current_step.as_str()) }
                                    td { (word(m.loop_state.step_status.as_str())) }
                                    td.num { (m.loop_state.fix_cycle_count) " of " (m.loop_state.max_fix_cycles) }
                                    td.num { (t.revision) }
                                    td { (time(&m.updated_at)) }
                                }
                                None => { td colspan="4" { "not a version 2 document" } td.num { (t.revision) } td {} }
                            }
                        }
                    }
                    @if tracks.is_empty() { tr { td colspan="7" { "No tracks yet." } } }
                }
            }
        }
        }
    };
    layout("Tracks", Section::Tracks, chrome, body)
}

/// The free-text `description` a track document may carry (v1 documents had one).
fn description(m: &Metadata) -> Option<&str> {
    m.extra
        .get("description")
        .and_then(|d| d.as_str())
        .filter(|d| !d.trim().is_empty())
}

fn loop_steps(m: &Metadata) -> Markup {
    let current = m.loop_state.current_step;
    html! {
        ol.steps aria-label="Loop state" {
            @for step in LOOP {
                @let is_current = step == current;
                @let status = step.step().map(|s| m.loop_state.checkpoints.get(s).status.as_str());
                li class={ "step" @if is_current { " current" } } aria-current=[is_current.then_some("step")] {
                    span.name { (step.as_str()) }
                    @if let Some(s) = status { " " (word(s)) }
                    @if is_current { " " strong.here { "current" } }
                }
            }
        }
    }
}

/// Every write of the document, so a FAILED evaluation and its notes stay readable
/// after FIX starts the loop again.
fn history_table(view: &TrackView) -> Markup {
    // Writes the history does not hold: those made before it was kept.
    let first_kept = view
        .history
        .first()
        .map_or(view.revision + 1, |e| e.revision);
    html! {
        h3 #track-history-h { "History" }
        @if first_kept > 1 {
            p.hint #history-missing {
                "Revisions 1 to " (first_kept - 1) " were written before this server kept a track's history; "
                "the table above shows only their latest checkpoint per step."
            }
        }
        @if !view.history.is_empty() {
            div.table-scroll role="region" aria-labelledby="track-history-h" tabindex="0" {
                table #track-history {
                    thead { tr { (heads(&["When", "Revision", "What", "Agent", "Notes", "Then"])) } }
                    tbody {
                        @for e in view.history.iter().rev() {
                            tr class={ "ev-" (e.action.as_str()) } {
                                td { (time(&e.at)) }
                                td.num { (e.revision) }
                                td {
                                    (e.action.as_str())
                                    @if let Some(step) = e.step { " " (step.as_str()) }
                                    @if let Some(outcome) = e.outcome { " " (word(outcome.as_str())) }
                                }
                                td { bdi { (e.agent.as_deref().unwrap_or("")) } }
                                td.notes {
                                    @if let Some(n) = &e.notes { bdi { (n) } }
                                    @if let Some(sha) = &e.commit_sha { " " (id_code(sha)) }
                                }
                                td { (e.current_step.as_str()) ", " (word(e.status.as_str())) }
                            }
                        }
                    }
                }
            }
        }
    }
}

pub fn track_page(view: &TrackView, chrome: Chrome) -> Markup {
    let body = match &view.metadata {
        None => html! {
            p.problem { "The stored document does not read as metadata version 2; shown as stored." }
            pre.result tabindex="0" aria-label="Track state (JSON)" { (serde_json::to_string_pretty(&view.raw).unwrap_or_default()) }
        },
        Some(m) => {
            let ls = &m.loop_state;
            html! {
                @if let Some(d) = description(m) {
                    p.description #track-description { bdi { (d) } }
                }
                dl.facts {
                    dt { "Status" } dd { (word(m.status.as_str())) }
                    dt { "Type" } dd { bdi { (m.r#type) } }
                    dt { "Current step" } dd { (ls.current_step.as_str()) " " (word(ls.step_status.as_str())) }
                    dt { "Fix cycles" } dd #fix-cycles { (ls.fix_cycle_count) " of " (ls.max_fix_cycles) " used" }
                    dt { "Plan revisions" } dd { (ls.plan_revision_count) " of " (ls.max_plan_revisions) " used" }
                    dt { "Stored revision" } dd { (view.revision) }
                    dt { "Created" } dd { (time(&m.created_at)) }
                    dt { "Updated" } dd { (time(&m.updated_at)) }
                }
                section aria-labelledby="loop-h" {
                    h2 #loop-h { "Loop" }
                    (loop_steps(m))
                }
                section aria-labelledby="history-h" {
                    h2 #history-h { "Checkpoints and history" }
                    p { "Plan version " (ls.checkpoints.get(Step::Plan).plan_version.unwrap_or(0))
                        ", revised " (ls.plan_revision_count) " times; document revision " (view.revision) "." }
                    div.table-scroll tabindex="0" role="region" aria-label="Checkpoints" {
                        table.checkpoints {
                            thead { tr { (heads(&["Step", "Status", "Started", "Completed", "Agent", "Commit", "Notes"])) } }
                            tbody {
                                @for step in Step::ALL {
                                    @let c = ls.checkpoints.get(step);
                                    tr {
                                        th scope="row" { (step.as_str()) }
                                        td { (word(c.status.as_str())) }
                                        td { (opt_time(c.started_at.as_ref())) }
                                        td { (opt_time(c.completed_at.as_ref())) }
                                        td { bdi { (c.agent.as_deref().unwrap_or("")) } }
                                        td { @if let Some(sha) = &c.commit_sha { (id_code(sha)) } }
                                        td.notes {
                                            @if let Some(n) = &c.notes {
                                                bdi { (n) }
                                                // Starting a step clears its notes, so notes on a step
                                                // not started again belong to its previous attempt.
                                                @if c.status == CheckpointStatus::NotStarted {
                                                    " " span.hint { "(previous attempt)" }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    (history_table(view))
                    h3 { "Blockers" }
                    @if m.blockers.is_empty() { p.none { "None." } }
                    ul.blockers {
                        @for b in &m.blockers {
                            li {
                                @if let Some(s) = b.get("step").and_then(|v| v.as_str()) { strong { (s) } ": " }
                                bdi { (b.get("reason").and_then(|v| v.as_str()).unwrap_or("")) }
                                @if let Some(at) = b.get("at").and_then(|v| v.as_str()) { " (" (at) ")" }
                            }
                        }
                    }
                }
            }
        }
    };
    layout(
        &format!("Track {}", view.track_id),
        Section::Tracks,
        chrome,
        body,
    )
}
