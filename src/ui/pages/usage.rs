//! What L0 calls used and cost (docs/jobs.md, "Usage, cost and budgets"), as the
//! job and run pages show it. Unknown is shown as "unknown", never guessed: a
//! null cost is not $0.

use maud::{Markup, html};

use crate::domain::usage::{L0Usage, UsageTotals};

/// A count with thousands separators (`1,234,567`).
fn grouped(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// US dollars to the micro-dollar, without trailing zeros beyond the cents
/// (`$0.0123`, `$0.25`, `$0.00`).
fn dollars(cost: f64) -> String {
    let fixed = format!("{cost:.6}");
    let (whole, fraction) = fixed.split_once('.').unwrap_or((&fixed, ""));
    let kept = fraction.trim_end_matches('0');
    let cents = if kept.len() < 2 { &fraction[..2] } else { kept };
    format!("${whole}.{cents}")
}

fn unknown() -> Markup {
    html! { span.unknown { "unknown" } }
}

/// A cost, or "unknown" when it is null.
pub fn cost(cost: Option<f64>) -> Markup {
    match cost {
        Some(c) => html! { (dollars(c)) },
        None => unknown(),
    }
}

/// A token count the agent may not have reported.
fn tokens(count: Option<i64>) -> Markup {
    match count {
        Some(n) => html! { (grouped(n)) },
        None => unknown(),
    }
}

/// The usage cells of one L0 row: input tokens, output tokens, cost, model,
/// source. Before its outcome is stored an L0 has no usage yet: dashes.
/// `in_process`: the `builtin` reviewer, which has no model at all (rather than
/// one nobody named).
pub fn l0_cells(usage: Option<&L0Usage>, in_process: bool) -> Markup {
    let Some(u) = usage else {
        return html! {
            @for class in ["l0-input", "l0-output", "l0-cost", "l0-model", "l0-source"] {
                td class={ "num " (class) } { span.none title="not finished yet" { "—" } }
            }
        };
    };
    let cache = match (u.cache_read_input_tokens, u.cache_creation_input_tokens) {
        (None, None) => None,
        (read, write) => Some(format!(
            "cache: {} read, {} written",
            read.map(grouped).unwrap_or_else(|| "unknown".to_owned()),
            write.map(grouped).unwrap_or_else(|| "unknown".to_owned()),
        )),
    };
    html! {
        td.num.l0-input title=[cache] { (tokens(u.input_tokens)) }
        td.num.l0-output { (tokens(u.output_tokens)) }
        td.num.l0-cost { (cost(u.cost_usd)) }
        td.l0-model {
            @match &u.model {
                Some(m) => code { (m) },
                None if in_process => span.none title="in-process rules, no model" { "none" },
                None => (unknown()),
            }
        }
        td.l0-source { (u.source.as_str()) }
    }
}

/// The totals of a job or run, as `dt`/`dd` pairs for a `dl.facts`.
pub fn totals_facts(t: &UsageTotals) -> Markup {
    html! {
        dt { "Tokens" } dd #usage-tokens {
            (grouped(t.input_tokens)) " input, " (grouped(t.output_tokens)) " output"
            @if t.cache_read_input_tokens != 0 || t.cache_creation_input_tokens != 0 {
                " (cache: " (grouped(t.cache_read_input_tokens)) " read, "
                (grouped(t.cache_creation_input_tokens)) " written)"
            }
            " over " (t.calls) @if t.calls == 1 { " L0 call" } @else { " L0 calls" }
            @if t.untracked_calls > 0 {
                "; " (t.untracked_calls) " reported no tokens"
            }
        }
        dt { "Cost (USD)" } dd #usage-cost {
            (cost(t.cost_usd))
            @if t.cost_usd.is_none() {
                " (" (dollars(t.known_cost_usd)) " known)"
            }
        }
        dt { "Unpriced calls" } dd #usage-unpriced { (t.unpriced_calls) }
    }
}
