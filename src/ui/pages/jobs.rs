//! Refine jobs (list with filters and cursor pages; one job with its L0s, live
//! log, result and cancel button) and refine runs (phases, merged result).

use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::usage::{self, l0_cells, totals_facts};
use super::{
    Chrome, Section, heads, id_code, layout, live_badge, opt_time, status as status_badge, time,
};
use crate::domain::job::{JobState, JobStatus, L0State, RunSummary, degraded_note, retry_refusal};
use crate::domain::refine::{ExecutorKind, L0Status};
use crate::service::dashboard::{
    BulkAction, BulkItem, BulkKind, JobList, JobQuery, JobView, Page, RunView, StoredJob, StoredL0,
};
use crate::service::rate_limits::WaitingCall;

/// The list's query as a URL query, with `status` replaced by `status` (the
/// count links) and the page cursor `before`.
fn query_string(query: &JobQuery, status: Option<JobState>, before: Option<uuid::Uuid>) -> String {
    let mut parts = Vec::new();
    if let Some(s) = status {
        parts.push(format!("status={s}"));
    }
    if let Some(q) = &query.search {
        parts.push(format!("q={}", crate::ui::session::url_encode(q)));
    }
    if let Some(p) = &query.project_id {
        parts.push(format!("project={}", crate::ui::session::url_encode(p)));
    }
    if let Some(d) = query.date {
        parts.push(format!("date={d}"));
    }
    if let Some(b) = before {
        parts.push(format!("before={b}"));
    }
    parts.join("&")
}

/// A length of time as a person reads it: "850 ms", "12.4 s", "3 min 05 s", "2 h 07 min".
pub fn span_text(d: chrono::Duration) -> String {
    let ms = d.num_milliseconds().max(0);
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{}.{} s", ms / 1000, (ms % 1000) / 100),
        60_000..3_600_000 => format!("{} min {:02} s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{} h {:02} min", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

/// How long a job ran (ended) or has run so far (`running` = not ended).
fn job_span(
    created: DateTime<Utc>,
    started: Option<DateTime<Utc>>,
    finished: Option<DateTime<Utc>>,
) -> Option<(chrono::Duration, bool)> {
    match (started, finished) {
        (Some(s), Some(f)) => Some((f - s, false)),
        (None, Some(f)) => Some((f - created, false)),
        (Some(s), None) => Some((Utc::now() - s, true)),
        (None, None) => None,
    }
}

/// The job's state as a person reads it: `succeeded — 3 of 3 L0 calls failed`
/// in amber for a degraded success, else the status word.
fn job_state(status: JobStatus, l0_not_valid: i64, l0_total: i64) -> Markup {
    match degraded_note(status, l0_not_valid, l0_total) {
        Some(note) => html! {
            span class="status st-degraded" title="degraded: the job succeeded without all its L0 suggestions" {
                "succeeded — " (note)
            }
        },
        None => status_badge(status.as_str()),
    }
}

pub fn jobs_page(query: &JobQuery, list: &JobList, since: &str, chrome: Chrome) -> Markup {
    let page = &list.page;
    let total: i64 = list.counts.iter().map(|(_, n)| n).sum();
    let body = html! {
        form.filters method="get" action="/ui/jobs" role="search" aria-label="Filter refine jobs" {
            label for="f-q" { "Search" }
            input #f-q type="search" name="q" placeholder="job or run id, phase, project" value=(query.search.as_deref().unwrap_or(""));
            label for="f-status" { "State" }
            select #f-status name="status" {
                option value="" selected[query.status.is_none()] { "any" }
                @for state in JobState::ALL {
                    option value=(state) selected[query.status == Some(state)] { (state) }
                }
            }
            label for="f-project" { "Project" }
            input #f-project name="project" value=(query.project_id.as_deref().unwrap_or(""));
            label for="f-date" { "Created on (UTC)" }
            input #f-date type="date" name="date" value=(query.date.map(|d| d.to_string()).unwrap_or_default());
            button type="submit" { "Filter" }
            " " a href="/ui/jobs" { "Clear" }
        }
        (live_badge())
        div #live-region data-live="jobs" data-since=(since) {
            nav.state-counts aria-label="Jobs by state" {
                ul.counts #job-counts {
                    li { a href={ "/ui/jobs?" (query_string(query, None, None)) } aria-current=[query.status.is_none().then_some("true")] { "all " span.n { (total) } } }
                    @for state in JobState::ALL {
                        @let n = list.counts.iter().find(|(s, _)| *s == state).map_or(0, |(_, n)| *n);
                        li data-state=(state) {
                            a href={ "/ui/jobs?" (query_string(query, Some(state), None)) } aria-current=[(query.status == Some(state)).then_some("true")] {
                                (status_badge(state.as_str())) " " span.n { (n) }
                            }
                        }
                    }
                }
            }
            p.hint { "Newest first. Select jobs to cancel or retry them together; a confirmation page comes first." }
            @let headings = ["Job", "State", "Phase", "Project", "Cycle", "Attempt", "Executor", "Error", "Duration", "Cost (USD)", "Created", "Finished"];
            @let rows = html! {
                @for job in &page.rows {
                    tr data-job=(job.id) {
                        td { input type="checkbox" name="id" value=(job.id) aria-label={ "Select job " (job.id) }; }
                        td { a href={ "/ui/jobs/" (job.id) } { (id_code(job.id)) } }
                        td.state { (job_state(job.status, job.l0_not_valid, job.l0_total)) }
                        td { code { (job.phase_id) } }
                        td { bdi { (job.project_id.as_deref().unwrap_or("—")) } }
                        td { bdi { (job.team_pk.as_deref().unwrap_or("—")) } }
                        td.num { (job.attempt) " of " (job.max_attempts) }
                        td { bdi { (job.executor) } }
                        td.error {
                            @if let Some(code) = &job.error_code {
                                code { (code) } @if let Some(m) = &job.error_message { ": " bdi { (m) } }
                            } @else { span.none { "—" } }
                        }
                        td.num.duration {
                            @match job_span(job.created_at, job.started_at, job.finished_at) {
                                Some((d, true)) => { (span_text(d)) " so far" }
                                Some((d, false)) => { (span_text(d)) }
                                None => span.none { "—" },
                            }
                        }
                        td.num.cost {
                            @match list.usage.get(&job.id) {
                                Some(u) => (usage::cost(u.cost_usd)),
                                None => (usage::cost(Some(0.0))),
                            }
                        }
                        td { (time(&job.created_at)) }
                        td { (opt_time(job.finished_at.as_ref())) }
                    }
                }
            };
            (bulk_table(BulkKind::Jobs, &headings, rows, page.rows.is_empty(), "No refine jobs match."))
            nav.pages aria-label="Pages" {
                @if query.before.is_some() {
                    a href={ "/ui/jobs?" (query_string(query, query.status, None)) } { "First page" }
                }
                @if let Some(next) = page.next {
                    " " a rel="next" href={ "/ui/jobs?" (query_string(query, query.status, Some(next))) } { "Older jobs" }
                }
            }
        }
    };
    layout("Refine jobs", Section::Jobs, chrome, body)
}

fn duration(l0: &StoredL0) -> String {
    match (l0.started_at, l0.finished_at) {
        (Some(s), Some(f)) => {
            let ms = (f - s).num_milliseconds().max(0);
            format!("{}.{:03} s", ms / 1000, ms % 1000)
        }
        (Some(_), None) => L0Status::Running.as_str().to_owned(),
        _ => "—".to_owned(),
    }
}

/// A job id as a link to its page.
fn job_link(id: uuid::Uuid) -> Markup {
    html! { a href={ "/ui/jobs/" (id) } { code { (id) } } }
}

pub fn job_page(view: &JobView, chrome: Chrome) -> Markup {
    let job = &view.job;
    let not_valid = job.progress.l0_total - job.progress.l0_succeeded;
    let ended = job.status.is_terminal();
    let body = html! {
        div #job data-events={ "/ui/jobs/" (job.id) "/events" } data-version=(job.version) {
            div #job-details {
                dl.facts {
                    dt { "State" } dd #job-state aria-live="polite" { (job_state(job.status, not_valid, job.progress.l0_total)) }
                    @match job_span(job.created_at, job.started_at, job.finished_at) {
                        Some((d, true)) => { dt { "Elapsed" } dd #job-elapsed { (span_text(d)) " (running since " (time(&job.started_at.unwrap_or(job.created_at))) ")" } }
                        Some((d, false)) => { dt { "Took" } dd #job-took { (span_text(d)) } }
                        None => { dt { "Elapsed" } dd #job-elapsed { "not started (queued since " (time(&job.created_at)) ")" } }
                    }
                    (totals_facts(&job.usage))
                    dt { "Attempt" } dd #job-attempt { (job.attempt) " of " (job.max_attempts) }
                    dt { "Phase" } dd { code { (job.phase_id) } }
                    dt { "Project" } dd { bdi { (job.project_id.as_deref().unwrap_or("—")) } }
                    dt { "Cycle (team_pk)" } dd { bdi { (job.team_pk.as_deref().unwrap_or("—")) } }
                    dt { "Executor" } dd { bdi { (job.executor) } " (" (job.executor_kind.as_str()) ")" }
                    @if let Some(run) = job.run_id { dt { "Run" } dd { a href={ "/ui/runs/" (run) } { (id_code(run)) } } }
                    @if let Some(original) = job.retry_of { dt { "Retry of" } dd #retry-of { (job_link(original)) } }
                    @if let Some(retry) = job.retried_by { dt { "Retried by" } dd #retried-by { (job_link(retry)) } }
                    dt { "Created" } dd { (time(&job.created_at)) }
                    dt { "Started" } dd { (opt_time(job.started_at.as_ref())) }
                    dt { "Finished" } dd { (opt_time(job.finished_at.as_ref())) }
                    dt { "L0s" } dd #job-progress {
                        (job.progress.l0_total) " total, " (job.progress.l0_running) " running, "
                        (job.progress.l0_succeeded) " valid, " (job.progress.l0_invalid) " invalid, "
                        (job.progress.l0_failed) " failed or not started"
                    }
                }
                div.actions {
                    @if !ended {
                        form.cancel method="get" action={ "/ui/jobs/" (job.id) "/cancel" } {
                            button type="submit" { "Cancel this job…" }
                        }
                    }
                    @if retry_refusal(job.status).is_none() && job.retried_by.is_none() {
                        form.retry method="post" action={ "/ui/jobs/" (job.id) "/retry" } {
                            button type="submit" { "Retry this job" }
                            span.hint { " A new job from the same request; this one stays as it is." }
                        }
                    }
                }
                @if let Some(error) = &job.error {
                    p.problem role="alert" { "Error " code { (error.code) } ": " (error.message) }
                }
                section aria-labelledby="l0-h" {
                    h2 #l0-h { "L0 reviewers" }
                    div.table-scroll tabindex="0" role="region" aria-label="L0 reviewers" {
                    table.l0s {
                        thead { tr { (heads(&["Assignment", "Batch", "Status", "Starts", "Tries", "Duration", "Exit", "Error", "Input tokens", "Output tokens", "Cost (USD)", "Model", "Usage source"])) } }
                        tbody {
                            @for l0 in &view.l0s {
                                @let word = L0State::of(job.status, l0.status, l0.error.as_deref()).as_str();
                                tr data-assignment=(l0.assignment_id) {
                                    th scope="row" { code { (l0.assignment_id) } }
                                    td.num { (l0.batch) }
                                    td.l0-status { (status_badge(word)) }
                                    td.num { (l0.starts) }
                                    td.num { (l0.tries) }
                                    td.num { (duration(l0)) }
                                    td.num { (l0.exit_code.map(|c| c.to_string()).unwrap_or_default()) }
                                    td { (l0.error.as_deref().unwrap_or("")) }
                                    (l0_cells(l0.usage.as_ref(), job.executor_kind == ExecutorKind::Builtin))
                                }
                            }
                        }
                    }
                    }
                }
                @if !view.waiting.is_empty() {
                    (waiting_calls(&view.waiting))
                }
                section aria-labelledby="result-h" {
                    h2 #result-h { "Result" }
                    @match &job.result {
                        Some(result) => pre.result tabindex="0" { (serde_json::to_string_pretty(result).unwrap_or_default()) }
                        None => p.none #no-result { "No result yet." }
                    }
                }
            }
            section aria-labelledby="log-h" {
                h2 #log-h { "Log" }
                ol.log #log tabindex="0" aria-label="Job log" aria-live="polite" {
                    @for (at, line) in &view.log {
                        li { (log_time(at)) " " span.line { (line) } }
                    }
                }
            }
        }
    };
    layout(
        &format!("Refine job {}", job.id),
        Section::Jobs,
        chrome,
        body,
    )
}

/// The job's L0 calls waiting for room on their executor's rate limit
/// (docs/jobs.md, "Rate limits"): a granted one starts at its job's next ask.
fn waiting_calls(waiting: &[WaitingCall]) -> Markup {
    html! {
        section #job-waiting aria-labelledby="waiting-h" {
            h2 #waiting-h { "L0 calls waiting for room" }
            div.table-scroll tabindex="0" role="region" aria-label="L0 calls waiting for room" {
                table.rate-waiting {
                    thead { tr {
                        th scope="col" { "Assignment" } th scope="col" { "Executor" }
                        th scope="col" { "Project" } th scope="col" { "Waiting since" }
                        th scope="col" { "Granted" }
                    } }
                    tbody {
                        @for w in waiting {
                            tr data-assignment=(w.assignment_id) {
                                th scope="row" { code { (w.assignment_id) } }
                                td { (id_code(&w.executor)) }
                                td { bdi { (if w.project_id.is_empty() { "—" } else { &w.project_id }) } }
                                td { (opt_time(w.waiting_since.as_ref())) }
                                td { (if w.granted { "yes: starts at its next ask" } else { "no" }) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A log line's time: `HH:MM:SS.mmm`, the full date on hover.
fn log_time(at: &DateTime<Utc>) -> Markup {
    html! {
        time.at datetime=(at.to_rfc3339()) title=(at.format("%Y-%m-%d %H:%M:%S%.3f UTC")) {
            (at.format("%H:%M:%S%.3f"))
        }
    }
}

/// What a cancel's confirmation shows of the job or run it cancels.
struct CancelTarget {
    kind: BulkKind,
    id: uuid::Uuid,
    status: JobStatus,
    /// The facts after its link and state.
    facts: Markup,
    /// What the cancel will do.
    what: Markup,
}

/// The path of a job's or run's list (its pages are below it) and the dashboard
/// section it belongs to.
fn list_of(kind: BulkKind) -> (&'static str, Section) {
    match kind {
        BulkKind::Jobs => ("/ui/jobs", Section::Jobs),
        BulkKind::Runs => ("/ui/runs", Section::Runs),
    }
}

/// Cancel's confirmation (no script needed): what the cancel does, and the form
/// that does it; for a job or run that has ended, that there is nothing to do.
fn cancel_page(target: CancelTarget, chrome: Chrome) -> Markup {
    let CancelTarget {
        kind,
        id,
        status,
        facts,
        what,
    } = target;
    let (noun, (list, section)) = (kind.noun(), list_of(kind));
    let href = format!("{list}/{id}");
    let body = html! {
        dl.facts {
            dt { (if kind == BulkKind::Jobs { "Job" } else { "Run" }) } dd { a href=(href) { (id_code(id)) } }
            dt { "State" } dd { (status_badge(status.as_str())) }
            (facts)
        }
        @if status.is_terminal() {
            p #confirm-what { "This " (noun) " has ended (" (status.as_str()) "): there is nothing to cancel." }
            p { a href=(href) { "Back to the " (noun) } }
        } @else {
            (what)
            form.cancel method="post" action={ (href) "/cancel" } {
                button type="submit" { "Yes, cancel this " (noun) }
                " " a href=(href) { "No, keep it running" }
            }
        }
    };
    layout(
        &format!("Cancel refine {noun} {id}?"),
        section,
        chrome,
        body,
    )
}

pub fn cancel_job_page(job: &StoredJob, chrome: Chrome) -> Markup {
    let target = CancelTarget {
        kind: BulkKind::Jobs,
        id: job.id,
        status: job.status,
        facts: html! {
            dt { "Phase" } dd { code { (job.phase_id) } }
            dt { "Project" } dd { bdi { (job.project_id.as_deref().unwrap_or("—")) } }
        },
        what: html! {
            p #confirm-what {
                @if job.status == JobStatus::Queued {
                    "The job has not started: it will be cancelled at once and never run."
                } @else {
                    "Its running L0 calls will be stopped (their processes killed); what they spent so far stays spent. The job then ends cancelled, without a result."
                }
            }
        },
    };
    cancel_page(target, chrome)
}

pub fn cancel_run_page(view: &RunView, chrome: Chrome) -> Markup {
    let run = &view.run;
    let open: Vec<&StoredJob> = view
        .jobs
        .iter()
        .filter(|j| !j.status.is_terminal())
        .collect();
    let target = CancelTarget {
        kind: BulkKind::Runs,
        id: run.id,
        status: run.status,
        facts: html! {
            dt { "Project" } dd { bdi { (run.project_id.as_deref().unwrap_or("—")) } }
        },
        what: html! {
            p #confirm-what {
                "Its " (open.len()) " phase jobs not yet ended will be cancelled; what the others produced is merged and the run ends cancelled."
            }
            ul { @for job in &open { li { (job_link(job.id)) " " code { (job.phase_id) } " " (status_badge(job.status.as_str())) } } }
        },
    };
    cancel_page(target, chrome)
}

/// A bulk action's confirmation (`done = false`: what will happen, and the form
/// that does it) or result (what was done, what was refused and why), for jobs
/// or runs.
pub fn bulk_page(
    kind: BulkKind,
    action: BulkAction,
    items: &[BulkItem],
    done: bool,
    chrome: Chrome,
) -> Markup {
    let (noun, (list, section)) = (kind.noun(), list_of(kind));
    let verb = match action {
        BulkAction::Cancel => "Cancel",
        BulkAction::Retry => "Retry",
    };
    let ok = items.iter().filter(|i| i.ok).count();
    let refused = items.len() - ok;
    let title = if done {
        format!("{verb}: {ok} done, {refused} refused")
    } else {
        format!("{verb} {} selected {noun}s?", items.len())
    };
    let link = |id: uuid::Uuid| html! { a href={ (list) "/" (id) } { code { (id) } } };
    let body = html! {
        p #bulk-summary {
            @if done {
                (ok) " of " (items.len()) " " (noun) "s: " (action.as_str()) " done; " (refused) " refused."
            } @else {
                (ok) " of " (items.len()) " " (noun) "s will be affected; " (refused) " will be refused, as said below."
            }
        }
        div.table-scroll tabindex="0" role="region" aria-label={ "Selected " (noun) "s" } {
        table.bulk {
            thead { tr {
                th scope="col" { @if kind == BulkKind::Jobs { "Job" } @else { "Run" } }
                th scope="col" { "State" }
                th scope="col" { @if kind == BulkKind::Jobs { "Phase" } @else { "Project" } }
                th scope="col" { "Outcome" }
            } }
            tbody {
                @for item in items {
                    tr.ok[item.ok].refused[!item.ok]
                        data-job=[(kind == BulkKind::Jobs).then_some(&item.id)]
                        data-run=[(kind == BulkKind::Runs).then_some(&item.id)] {
                        td { @match &item.subject { Some(s) => (link(s.id)), None => code { bdi { (item.id) } } } }
                        td { @if let Some(s) = &item.subject { (status_badge(s.status.as_str())) } }
                        td { @if let Some(what) = item.subject.as_ref().and_then(|s| s.what.as_ref()) { code { (what) } } }
                        td.outcome {
                            @if item.ok { (status_badge(if done { "done" } else { "pending" })) } @else { (status_badge("refused")) }
                            " " (item.note)
                            @if let Some(new) = item.new_job { " " (job_link(new)) }
                        }
                    }
                }
            }
        }
        }
        @if done {
            p { a href=(list) { "Back to the " (noun) " list" } }
        } @else if ok > 0 {
            form.bulk-confirm method="post" action={ (list) "/bulk" } {
                input type="hidden" name="action" value=(action.as_str());
                // Every selected one goes again: the result page then says what
                // was refused, and why, beside what was done.
                @for item in items { input type="hidden" name="id" value=(item.id); }
                button type="submit" { "Yes, " (action.as_str()) " " (ok) " " (noun) @if ok != 1 { "s" } }
                " " a href=(list) { "No, back to the list" }
            }
        } @else {
            p { "Nothing to do. " a href=(list) { "Back to the list" } }
        }
    };
    layout(&title, section, chrome, body)
}

/// A list of jobs or runs whose rows people select for a bulk action: the form,
/// its buttons, and a scrolling table with a select column before `headings`.
fn bulk_table(kind: BulkKind, headings: &[&str], rows: Markup, empty: bool, none: &str) -> Markup {
    let noun = kind.noun();
    html! {
        form #bulk method="get" action={ "/ui/" (noun) "s/bulk" } {
            (bulk_buttons(kind))
            div.table-scroll tabindex="0" role="region" aria-label={ "Refine " (noun) "s" } {
                table class={ (noun) "s" } {
                    thead { tr {
                        th scope="col" { span.visually-hidden { "Select" } }
                        (heads(headings))
                    } }
                    tbody {
                        (rows)
                        @if empty { tr { td colspan=(headings.len() + 1) { (none) } } }
                    }
                }
            }
        }
    }
}

/// The list's bulk buttons: each opens the confirmation page of its action.
fn bulk_buttons(kind: BulkKind) -> Markup {
    html! {
        div.bulk-actions {
            @for action in kind.actions() {
                button type="submit" name="action" value=(action.as_str()) {
                    @match action { BulkAction::Cancel => "Cancel selected…", BulkAction::Retry => "Retry selected…" }
                }
                " "
            }
        }
    }
}

pub fn runs_page(
    page: &Page<RunSummary>,
    before: Option<uuid::Uuid>,
    since: &str,
    chrome: Chrome,
) -> Markup {
    let body = html! {
        (live_badge())
        div #live-region data-live="runs" data-since=(since) {
        p.hint { "Newest first. Select runs to cancel them together; a confirmation page comes first." }
        @let headings = ["Run", "Status", "Project", "Cycle", "Executor", "Created", "Finished"];
        @let rows = html! {
            @for run in &page.rows {
                tr data-run=(run.id) {
                    td { input type="checkbox" name="id" value=(run.id) aria-label={ "Select run " (run.id) }; }
                    td { a href={ "/ui/runs/" (run.id) } { (id_code(run.id)) } }
                    td { (status_badge(run.status.as_str())) }
                    td { (run.project_id.as_deref().unwrap_or("—")) }
                    td { (run.team_pk.as_deref().unwrap_or("—")) }
                    td { bdi { (run.executor) } }
                    td { (time(&run.created_at)) }
                    td { (opt_time(run.finished_at.as_ref())) }
                }
            }
        };
        (bulk_table(BulkKind::Runs, &headings, rows, page.rows.is_empty(), "No refine runs yet."))
        nav.pages aria-label="Pages" {
            @if before.is_some() { a href="/ui/runs" { "First page" } }
            @if let Some(next) = page.next { " " a rel="next" href={ "/ui/runs?before=" (next) } { "Older runs" } }
        }
        }
    };
    layout("Refine runs", Section::Runs, chrome, body)
}

pub fn run_page(view: &RunView, chrome: Chrome) -> Markup {
    let run = &view.run;
    let result = run.result.as_ref().and_then(|r| r.as_object());
    let conflict_count = result
        .and_then(|r| r.get("conflict_count"))
        .and_then(|c| c.as_u64());
    // What the merge reported beside the assignments (conflicts, duplicates, ...).
    let reports: Vec<(&String, &serde_json::Value)> = result
        .map(|r| {
            r.iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "assignments" | "phases" | "schema_version" | "conflict_count"
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let body = html! {
        dl.facts {
            dt { "State" } dd #run-state { (status_badge(run.status.as_str())) }
            (totals_facts(&run.usage))
            dt { "Project" } dd { (run.project_id.as_deref().unwrap_or("—")) }
            dt { "Cycle (team_pk)" } dd { (run.team_pk.as_deref().unwrap_or("—")) }
            dt { "Executor" } dd { bdi { (run.executor) } }
            dt { "Created" } dd { (time(&run.created_at)) }
            dt { "Finished" } dd { (opt_time(run.finished_at.as_ref())) }
        }
        @if !run.status.is_terminal() {
            form.cancel method="get" action={ "/ui/runs/" (run.id) "/cancel" } {
                button type="submit" { "Cancel this run…" }
            }
        }
        section aria-labelledby="phases-h" {
            h2 #phases-h { "Phases" }
            div.table-scroll tabindex="0" role="region" aria-label="Phases of this run" {
            table {
                thead { tr { (heads(&["Phase", "Job", "Status", "Attempt", "L0s valid / total", "Cost (USD)"])) } }
                tbody {
                    @for job in &view.jobs {
                        tr {
                            th scope="row" { code { (job.phase_id) } }
                            td { a href={ "/ui/jobs/" (job.id) } { (id_code(job.id)) } }
                            td { (job_state(job.status, job.progress.l0_total - job.progress.l0_succeeded, job.progress.l0_total)) }
                            td.num { (job.attempt) " of " (job.max_attempts) }
                            td.num { (job.progress.l0_succeeded) " / " (job.progress.l0_total) }
                            td.num.phase-cost { (usage::cost(job.usage.cost_usd)) }
                        }
                    }
                }
            }
            }
        }
        section aria-labelledby="conflicts-h" {
            h2 #conflicts-h { "Conflicts" }
            @match conflict_count {
                Some(n) => p #conflict-count { (n) " file conflicts resolved across phases." }
                None => p.none { "Not merged yet." }
            }
            @for (key, value) in &reports {
                h3 { code { (key) } }
                pre.result tabindex="0" { (serde_json::to_string_pretty(value).unwrap_or_default()) }
            }
        }
        section aria-labelledby="merged-h" {
            h2 #merged-h { "Merged result" }
            @match &run.result {
                Some(result) => pre.result tabindex="0" { (serde_json::to_string_pretty(result).unwrap_or_default()) }
                None => p.none { "Not merged yet." }
            }
        }
    };
    layout(
        &format!("Refine run {}", run.id),
        Section::Runs,
        chrome,
        body,
    )
}
