//! The rate-limits page (docs/jobs.md, "Rate limits"): each limited executor's
//! limits, what its provider said, its pause and its projects' shares, and the L0
//! calls waiting for room, each linked to its job.

use maud::{Markup, html};

use super::{Chrome, Section, id_code, layout, opt_time};
use crate::service::rate_limits::{RateLimits, WaitingCall};

fn figure(value: Option<u64>) -> Markup {
    match value {
        Some(v) => html! { (v) "/min" },
        None => html! { span.none title="not configured" { "—" } },
    }
}

pub fn rate_limits_page(limits: &RateLimits, waiting: &[WaitingCall], chrome: Chrome) -> Markup {
    let body = html! {
        div.table-scroll tabindex="0" role="region" aria-label="Rate limits" {
            table.rate-limits {
                thead { tr {
                    th scope="col" { "Executor" } th scope="col" { "Requests" }
                    th scope="col" { "Input tokens" } th scope="col" { "Output tokens" }
                    th scope="col" { "Max wait" } th scope="col" { "Remaining" }
                    th scope="col" { "Running" } th scope="col" { "Waiting" }
                    th scope="col" { "Paused until" } th scope="col" { "Learned" }
                } }
                tbody {
                    @for e in &limits.executors {
                        tr {
                            th scope="row" { (id_code(&e.executor)) }
                            td.num { (figure(e.requests_per_minute)) }
                            td.num { (figure(e.input_tokens_per_minute)) }
                            td.num { (figure(e.output_tokens_per_minute)) }
                            td.num { (e.max_wait_secs) " s" }
                            td.num { @match e.remaining_requests { Some(n) => { (n) }, None => { "—" } } }
                            td.num { (e.reserved_requests) }
                            td.num { (e.waiting) }
                            td { @match &e.paused_until { Some(p) => { (p) }, None => { "not paused" } } }
                            td { code { (e.learned.to_string()) } }
                        }
                        @if !e.projects.is_empty() {
                            tr.rate-projects { td colspan="10" {
                                "Shares: "
                                @for (i, (project, p)) in e.projects.iter().enumerate() {
                                    @if i > 0 { "; " }
                                    bdi { (if project.is_empty() { "(no project)" } else { project }) }
                                    " " (p.share) " (" (p.waiting) " waiting, "
                                    (p.started_last_minute) " started in the last minute)"
                                }
                            } }
                        }
                    }
                    @if limits.executors.is_empty() { tr { td colspan="10" { "No executor has a rate limit." } } }
                }
            }
        }
        h2 { "Calls waiting for room" }
        div.table-scroll tabindex="0" role="region" aria-label="Calls waiting" {
            table.rate-waiting {
                thead { tr {
                    th scope="col" { "Job" } th scope="col" { "Assignment" } th scope="col" { "Executor" }
                    th scope="col" { "Project" } th scope="col" { "Waiting since" } th scope="col" { "State" }
                } }
                tbody {
                    @for w in waiting {
                        tr {
                            th scope="row" { a href={ "/ui/jobs/" (w.job_id) } { (id_code(&w.job_id)) } }
                            td { (id_code(&w.assignment_id)) }
                            td { (id_code(&w.executor)) }
                            td { bdi { (w.project_id) } }
                            td { (opt_time(w.waiting_since.as_ref())) }
                            td { (if w.granted { "granted: starts at its next ask" } else { "waiting" }) }
                        }
                    }
                    @if waiting.is_empty() { tr { td colspan="6" { "No call is waiting." } } }
                }
            }
        }
    };
    layout("Rate limits", Section::RateLimits, chrome, body)
}
