//! Refine jobs (list with filters and cursor pages; one job with its L0s, live
//! log, result and cancel button) and refine runs (phases, merged result).

use maud::{Markup, html};

use super::usage::{self, l0_cells, totals_facts};
use super::{Chrome, JOB_ORDER, Section, id_code, layout, opt_time, status, time};
use crate::service::dashboard::{JobQuery, JobRow, JobView, Page, RunRow, RunView, StoredL0};

fn query_string(query: &JobQuery, before: Option<uuid::Uuid>) -> String {
    let mut parts = Vec::new();
    if let Some(s) = query.status {
        parts.push(format!("status={}", s.as_str()));
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

pub fn jobs_page(query: &JobQuery, page: &Page<JobRow>, chrome: Chrome) -> Markup {
    let body = html! {
        form.filters method="get" action="/ui/jobs" role="search" aria-label="Filter refine jobs" {
            label for="f-status" { "Status" }
            select #f-status name="status" {
                option value="" selected[query.status.is_none()] { "any" }
                @for word in JOB_ORDER {
                    option value=(word) selected[query.status.is_some_and(|s| s.as_str() == word)] { (word) }
                }
            }
            label for="f-project" { "Project" }
            input #f-project name="project" value=(query.project_id.as_deref().unwrap_or(""));
            label for="f-date" { "Created on (UTC)" }
            input #f-date type="date" name="date" value=(query.date.map(|d| d.to_string()).unwrap_or_default());
            button type="submit" { "Filter" }
            " " a href="/ui/jobs" { "Clear" }
        }
        p.hint { "Newest first." }
        div.table-scroll tabindex="0" role="region" aria-label="Refine jobs" {
        table.jobs {
            thead { tr {
                th scope="col" { "Job" } th scope="col" { "Status" } th scope="col" { "Phase" }
                th scope="col" { "Project" } th scope="col" { "Cycle" } th scope="col" { "Attempt" }
                th scope="col" { "Executor" } th scope="col" { "Created" } th scope="col" { "Finished" }
            } }
            tbody {
                @for job in &page.rows {
                    tr data-job=(job.id) {
                        td { a href={ "/ui/jobs/" (job.id) } { (id_code(job.id)) } }
                        td { (status(&job.status)) }
                        td { code { (job.phase_id) } }
                        td { (job.project_id.as_deref().unwrap_or("—")) }
                        td { (job.team_pk.as_deref().unwrap_or("—")) }
                        td.num { (job.attempt) " of " (job.max_attempts) }
                        td { bdi { (job.executor) } }
                        td { (time(&job.created_at)) }
                        td { (opt_time(job.finished_at.as_ref())) }
                    }
                }
                @if page.rows.is_empty() { tr { td colspan="9" { "No refine jobs match." } } }
            }
        }
        }
        nav.pages aria-label="Pages" {
            @if query.before.is_some() {
                a href={ "/ui/jobs?" (query_string(query, None)) } { "First page" }
            }
            @if let Some(next) = page.next {
                " " a rel="next" href={ "/ui/jobs?" (query_string(query, Some(next))) } { "Older jobs" }
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
        (Some(_), None) => "running".to_owned(),
        _ => "—".to_owned(),
    }
}

pub fn job_page(view: &JobView, chrome: Chrome) -> Markup {
    let job = &view.job;
    let word = job.status.as_str();
    let body = html! {
        div #job data-events={ "/ui/jobs/" (job.id) "/events" } data-version=(job.version) {
            div #job-details {
                dl.facts {
                    dt { "State" } dd #job-state aria-live="polite" { (status(word)) }
                    (totals_facts(&job.usage))
                    dt { "Attempt" } dd #job-attempt { (job.attempt) " of " (job.max_attempts) }
                    dt { "Phase" } dd { code { (job.phase_id) } }
                    dt { "Project" } dd { (job.project_id.as_deref().unwrap_or("—")) }
                    dt { "Cycle (team_pk)" } dd { (job.team_pk.as_deref().unwrap_or("—")) }
                    dt { "Executor" } dd { bdi { (job.executor) } " (" (job.executor_kind) ")" }
                    @if let Some(run) = job.run_id { dt { "Run" } dd { a href={ "/ui/runs/" (run) } { (id_code(run)) } } }
                    dt { "Created" } dd { (time(&job.created_at)) }
                    dt { "Started" } dd { (opt_time(job.started_at.as_ref())) }
                    dt { "Finished" } dd { (opt_time(job.finished_at.as_ref())) }
                    dt { "L0s" } dd #job-progress {
                        (job.progress.l0_total) " total, " (job.progress.l0_running) " running, "
                        (job.progress.l0_succeeded) " valid, " (job.progress.l0_invalid) " invalid, "
                        (job.progress.l0_failed) " failed"
                    }
                }
                @if !job.status.is_terminal() {
                    form.cancel method="post" action={ "/ui/jobs/" (job.id) "/cancel" } {
                        button type="submit" { "Cancel this job" }
                    }
                }
                @if let Some(error) = &job.error {
                    p.problem role="alert" { "Error " code { (error.code) } ": " (error.message) }
                }
                section aria-labelledby="l0-h" {
                    h2 #l0-h { "L0 reviewers" }
                    div.table-scroll tabindex="0" role="region" aria-label="L0 reviewers" {
                    table.l0s {
                        thead { tr {
                            th scope="col" { "Assignment" } th scope="col" { "Batch" } th scope="col" { "Status" }
                            th scope="col" { "Starts" } th scope="col" { "Tries" } th scope="col" { "Duration" }
                            th scope="col" { "Exit" } th scope="col" { "Error" }
                            th scope="col" { "Input tokens" } th scope="col" { "Output tokens" }
                            th scope="col" { "Cost (USD)" } th scope="col" { "Model" } th scope="col" { "Usage source" }
                        } }
                        tbody {
                            @for l0 in &view.l0s {
                                tr data-assignment=(l0.assignment_id) {
                                    th scope="row" { code { (l0.assignment_id) } }
                                    td.num { (l0.batch) }
                                    td { (status(&l0.status)) }
                                    td.num { (l0.starts) }
                                    td.num { (l0.tries) }
                                    td.num { (duration(l0)) }
                                    td.num { (l0.exit_code.map(|c| c.to_string()).unwrap_or_default()) }
                                    td { (l0.error.as_deref().unwrap_or("")) }
                                    (l0_cells(l0.usage.as_ref(), job.executor_kind == "builtin"))
                                }
                            }
                        }
                    }
                    }
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
                    @for line in &job.log { li { (line) } }
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

pub fn runs_page(page: &Page<RunRow>, before: Option<uuid::Uuid>, chrome: Chrome) -> Markup {
    let body = html! {
        p.hint { "Newest first." }
        div.table-scroll tabindex="0" role="region" aria-label="Refine runs" {
        table.runs {
            thead { tr {
                th scope="col" { "Run" } th scope="col" { "Status" } th scope="col" { "Project" }
                th scope="col" { "Cycle" } th scope="col" { "Executor" } th scope="col" { "Created" } th scope="col" { "Finished" }
            } }
            tbody {
                @for run in &page.rows {
                    tr {
                        td { a href={ "/ui/runs/" (run.id) } { (id_code(run.id)) } }
                        td { (status(&run.status)) }
                        td { (run.project_id.as_deref().unwrap_or("—")) }
                        td { (run.team_pk.as_deref().unwrap_or("—")) }
                        td { bdi { (run.executor) } }
                        td { (time(&run.created_at)) }
                        td { (opt_time(run.finished_at.as_ref())) }
                    }
                }
                @if page.rows.is_empty() { tr { td colspan="7" { "No refine runs yet." } } }
            }
        }
        }
        nav.pages aria-label="Pages" {
            @if before.is_some() { a href="/ui/runs" { "First page" } }
            @if let Some(next) = page.next { " " a rel="next" href={ "/ui/runs?before=" (next) } { "Older runs" } }
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
            dt { "State" } dd #run-state { (status(run.status.as_str())) }
            (totals_facts(&run.usage))
            dt { "Project" } dd { (run.project_id.as_deref().unwrap_or("—")) }
            dt { "Cycle (team_pk)" } dd { (run.team_pk.as_deref().unwrap_or("—")) }
            dt { "Executor" } dd { bdi { (run.executor) } }
            dt { "Created" } dd { (time(&run.created_at)) }
            dt { "Finished" } dd { (opt_time(run.finished_at.as_ref())) }
        }
        section aria-labelledby="phases-h" {
            h2 #phases-h { "Phases" }
            div.table-scroll tabindex="0" role="region" aria-label="Phases of this run" {
            table {
                thead { tr { th scope="col" { "Phase" } th scope="col" { "Job" } th scope="col" { "Status" } th scope="col" { "Attempt" } th scope="col" { "L0s valid / total" } th scope="col" { "Cost (USD)" } } }
                tbody {
                    @for job in &view.jobs {
                        tr {
                            th scope="row" { code { (job.phase_id) } }
                            td { a href={ "/ui/jobs/" (job.id) } { (id_code(job.id)) } }
                            td { (status(job.status.as_str())) }
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
