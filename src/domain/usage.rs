//! What L0 calls cost (docs/jobs.md, "Usage, cost and budgets"): the usage of one
//! call, pricing from the configured table, totals, budgets and the UTC day of the
//! per-project daily limit. Pure: no I/O.
//!
//! Unknown is never guessed: a field the agent did not report stays `None`; a call
//! with no cost (reported or priced) makes every total over it `cost_usd: null`,
//! and `unpriced_calls` says how many such calls there were.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, NaiveTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::refine::ExecutorKind;

/// Where a call's numbers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum UsageSource {
    /// Tokens and cost as the agent reported them.
    Reported,
    /// Tokens as reported; the cost computed from the configured price table.
    Priced,
    /// Nothing (plain-text command output), or tokens without a price.
    #[default]
    Unknown,
}

crate::domain::wire_strings!(UsageSource, "usage source", column {
    Reported => "reported",
    Priced => "priced",
    Unknown => "unknown",
});

/// The usage of one L0 call (all its tries). `None` = not reported.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct L0Usage {
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cache_read_input_tokens: Option<i64>,
    pub cache_creation_input_tokens: Option<i64>,
    /// US dollars: reported by the agent, or priced from the config's table.
    pub cost_usd: Option<f64>,
    /// The model that answered, as the agent named it (else the profile's).
    pub model: Option<String>,
    pub source: UsageSource,
}

fn add_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

impl L0Usage {
    /// Whether any token count is known.
    pub fn has_tokens(&self) -> bool {
        self.input_tokens.is_some()
            || self.output_tokens.is_some()
            || self.cache_read_input_tokens.is_some()
            || self.cache_creation_input_tokens.is_some()
    }

    /// Adds another try of the same call (a failed HTTP try still costs).
    pub fn add_try(&mut self, other: &L0Usage) {
        self.input_tokens = add_opt(self.input_tokens, other.input_tokens);
        self.output_tokens = add_opt(self.output_tokens, other.output_tokens);
        self.cache_read_input_tokens =
            add_opt(self.cache_read_input_tokens, other.cache_read_input_tokens);
        self.cache_creation_input_tokens = add_opt(
            self.cache_creation_input_tokens,
            other.cache_creation_input_tokens,
        );
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        if self.model.is_none() {
            self.model.clone_from(&other.model);
        }
        if other.source == UsageSource::Reported || self.source == UsageSource::Reported {
            self.source = UsageSource::Reported;
        }
    }

    /// Fills the cost from `prices` when the agent reported tokens but no cost;
    /// the source becomes `priced`. A reported cost is kept as it is.
    pub fn priced(mut self, prices: &Prices) -> Self {
        if self.cost_usd.is_some() {
            self.source = UsageSource::Reported;
            return self;
        }
        if !self.has_tokens() {
            self.source = UsageSource::Unknown;
            return self;
        }
        match self.model.as_deref().and_then(|m| prices.get(m)) {
            Some(price) => {
                self.cost_usd = Some(price.cost(&self));
                self.source = UsageSource::Priced;
            }
            // Tokens are real (reported) but the money is unknown.
            None => self.source = UsageSource::Reported,
        }
        self
    }
}

/// One model's prices in US dollars per million tokens (`[prices."MODEL"]`).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    /// Cache reads; 0 when the model has no cache pricing.
    #[serde(default)]
    pub cache_read_per_mtok: f64,
    /// Cache writes (creation); 0 when the model has no cache pricing.
    #[serde(default)]
    pub cache_write_per_mtok: f64,
}

impl Price {
    /// `input_tokens` are the uncached input (Anthropic's meaning; the OpenAI
    /// parser subtracts the cached part from `prompt_tokens`).
    pub fn cost(&self, u: &L0Usage) -> f64 {
        let per = |tokens: Option<i64>, rate: f64| tokens.unwrap_or(0).max(0) as f64 * rate / 1e6;
        per(u.input_tokens, self.input_per_mtok)
            + per(u.output_tokens, self.output_per_mtok)
            + per(u.cache_read_input_tokens, self.cache_read_per_mtok)
            + per(u.cache_creation_input_tokens, self.cache_write_per_mtok)
    }

    pub fn check(&self, model: &str) -> Result<(), String> {
        let rates = [
            ("input_per_mtok", self.input_per_mtok),
            ("output_per_mtok", self.output_per_mtok),
            ("cache_read_per_mtok", self.cache_read_per_mtok),
            ("cache_write_per_mtok", self.cache_write_per_mtok),
        ];
        match rates.iter().find(|(_, r)| !r.is_finite() || *r < 0.0) {
            Some((name, _)) => Err(format!(
                "[prices.\"{model}\"] {name} must be a non-negative number"
            )),
            None => Ok(()),
        }
    }
}

/// The configured price table, by model name. No built-in prices: they change.
pub type Prices = BTreeMap<String, Price>;

/// The models `/metrics` names in its `model` label: the ones the configuration
/// names (an executor profile's `model`, a `[prices]` key). Any other model an
/// agent reports is labelled `other`, and none reported `unknown`: an agent's
/// answer cannot add series to the metrics (docs/jobs.md, "Totals").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricModels(BTreeSet<String>);

impl MetricModels {
    pub fn new(configured: impl IntoIterator<Item = String>) -> Self {
        MetricModels(configured.into_iter().collect())
    }

    pub fn label<'a>(&'a self, model: Option<&'a str>) -> &'a str {
        match model {
            None => "unknown",
            Some(model) if self.0.contains(model) => model,
            Some(_) => "other",
        }
    }
}

/// One executor and model's sums in a project.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UsageGroup {
    /// The executor profile name.
    pub executor: String,
    /// Its kind: `command`, `openai`, `anthropic` or `builtin`.
    pub executor_kind: ExecutorKind,
    /// The model as the calls reported it (null when none did).
    pub model: Option<String>,
    pub usage: UsageTotals,
}

/// Sums over many calls (a job, a run, a project).
#[derive(Debug, Clone, PartialEq, Default, Serialize, ToSchema)]
pub struct UsageTotals {
    /// L0 calls with a stored outcome.
    pub calls: i64,
    /// Sums of the counts that were reported (unreported ones add nothing).
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_input_tokens: i64,
    pub cache_creation_input_tokens: i64,
    /// The sum, or null when any call's cost is unknown (see `unpriced_calls`).
    pub cost_usd: Option<f64>,
    /// The sum of the costs that are known (equals `cost_usd` when it is not null).
    pub known_cost_usd: f64,
    /// Calls whose cost is unknown (no reported cost, model not in the price table).
    pub unpriced_calls: i64,
    /// Calls that reported no token counts at all.
    pub untracked_calls: i64,
    /// Total size of the prompts sent, in bytes.
    pub prompt_bytes: i64,
}

impl UsageTotals {
    /// Totals from SQL sums: `cost_usd` is null as soon as one call is unpriced.
    #[allow(clippy::too_many_arguments)]
    pub fn from_sums(
        calls: i64,
        input_tokens: i64,
        output_tokens: i64,
        cache_read_input_tokens: i64,
        cache_creation_input_tokens: i64,
        known_cost_usd: f64,
        unpriced_calls: i64,
        untracked_calls: i64,
        prompt_bytes: i64,
    ) -> Self {
        UsageTotals {
            calls,
            input_tokens,
            output_tokens,
            cache_read_input_tokens,
            cache_creation_input_tokens,
            cost_usd: (unpriced_calls == 0).then_some(known_cost_usd),
            known_cost_usd,
            unpriced_calls,
            untracked_calls,
            prompt_bytes,
        }
    }

    /// Adds one call (the CLI keeps its totals in memory).
    pub fn add(&mut self, usage: &L0Usage, prompt_bytes: usize) {
        self.calls += 1;
        self.input_tokens += usage.input_tokens.unwrap_or(0);
        self.output_tokens += usage.output_tokens.unwrap_or(0);
        self.cache_read_input_tokens += usage.cache_read_input_tokens.unwrap_or(0);
        self.cache_creation_input_tokens += usage.cache_creation_input_tokens.unwrap_or(0);
        match usage.cost_usd {
            Some(c) => self.known_cost_usd += c,
            None => self.unpriced_calls += 1,
        }
        if !usage.has_tokens() {
            self.untracked_calls += 1;
        }
        self.prompt_bytes += i64::try_from(prompt_bytes).unwrap_or(i64::MAX);
        self.cost_usd = (self.unpriced_calls == 0).then_some(self.known_cost_usd);
    }

    /// One line for a terminal.
    pub fn summary(&self) -> String {
        let cost = match self.cost_usd {
            Some(c) => format!("${c:.4}"),
            None => format!(
                "unknown (${:.4} known; {} of {} calls unpriced)",
                self.known_cost_usd, self.unpriced_calls, self.calls
            ),
        };
        format!(
            "usage: {} L0 calls, {} input + {} output tokens ({} cache read, {} cache write), cost {cost}",
            self.calls,
            self.input_tokens,
            self.output_tokens,
            self.cache_read_input_tokens,
            self.cache_creation_input_tokens
        )
    }
}

/// What to do with the L0s still running when a budget is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetAction {
    /// Let them finish (their cost is already committed); start no more.
    #[default]
    Finish,
    /// Kill them at once.
    Kill,
}

crate::domain::wire_strings!(BudgetAction, "budget action", column {
    Finish => "finish",
    Kill => "kill",
});

/// A request's spending limits (a job's, or a run's over all its phase jobs).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct Budget {
    /// Stop once the known cost reaches this (US dollars).
    pub max_cost_usd: Option<f64>,
    /// Stop once the output tokens reach this.
    pub max_output_tokens: Option<i64>,
    pub budget_action: BudgetAction,
}

/// A request's budget field that does not parse: the field and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct BudgetError {
    pub field: &'static str,
    pub reason: String,
}

impl Budget {
    /// The budget of a request body's `max_cost_usd` (a positive number of
    /// dollars), `max_output_tokens` (a positive integer) and `budget_action`
    /// (`"finish"`, the default, or `"kill"`; only with a limit). Null = absent.
    pub fn from_fields(
        max_cost_usd: Option<&serde_json::Value>,
        max_output_tokens: Option<&serde_json::Value>,
        budget_action: Option<&serde_json::Value>,
    ) -> Result<Budget, BudgetError> {
        use serde_json::Value;
        let present = |v: Option<&Value>| v.filter(|v| !v.is_null()).cloned();
        let max_cost_usd = match present(max_cost_usd) {
            None => None,
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() && x > 0.0 => Some(x),
                _ => {
                    return Err(BudgetError {
                        field: "max_cost_usd",
                        reason: "must be a positive number of US dollars".into(),
                    });
                }
            },
        };
        let max_output_tokens = match present(max_output_tokens) {
            None => None,
            Some(v) => match v.as_i64() {
                Some(n) if n > 0 => Some(n),
                _ => {
                    return Err(BudgetError {
                        field: "max_output_tokens",
                        reason: "must be a positive integer".into(),
                    });
                }
            },
        };
        let budget_action = match present(budget_action) {
            None => BudgetAction::Finish,
            Some(v) => v
                .as_str()
                .and_then(BudgetAction::parse)
                .ok_or_else(|| BudgetError {
                    field: "budget_action",
                    reason: "must be \"finish\" or \"kill\"".into(),
                })?,
        };
        let budget = Budget {
            max_cost_usd,
            max_output_tokens,
            budget_action,
        };
        if budget_action != BudgetAction::Finish && !budget.is_limited() {
            return Err(BudgetError {
                field: "budget_action",
                reason: "needs max_cost_usd or max_output_tokens".into(),
            });
        }
        Ok(budget)
    }

    pub fn is_limited(&self) -> bool {
        self.max_cost_usd.is_some() || self.max_output_tokens.is_some()
    }
}

/// One budget that applies to an L0 start: a job's or a run's request budget, or
/// a project's daily limit (docs/jobs.md, "Budgets").
#[derive(Debug, Clone, PartialEq)]
pub struct ScopeLimit {
    /// How a reason names it: "the job's budget", "project alpha's daily limit".
    pub name: String,
    pub max_cost_usd: Option<f64>,
    pub max_output_tokens: Option<i64>,
}

impl ScopeLimit {
    /// A request's budget as a scope: over the job's L0s, or the run's when
    /// `of_run`; `None` when it limits nothing.
    pub fn request(budget: &Budget, of_run: bool) -> Option<ScopeLimit> {
        budget.is_limited().then(|| ScopeLimit {
            name: format!("the {}'s budget", if of_run { "run" } else { "job" }),
            max_cost_usd: budget.max_cost_usd,
            max_output_tokens: budget.max_output_tokens,
        })
    }

    /// A project's daily limit (US dollars, per UTC day) as a scope.
    pub fn project_day(project_id: &str, limit_usd: f64) -> ScopeLimit {
        ScopeLimit {
            name: format!("project {project_id}'s daily limit"),
            max_cost_usd: Some(limit_usd),
            max_output_tokens: None,
        }
    }
}

/// What a budget's scope holds, read inside the gate's locked transaction.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ScopeSpend {
    /// The known cost of the calls that ended (a project's: today, UTC).
    pub spent_usd: f64,
    pub output_tokens: i64,
    /// The calls running now, and the sum of their reservations.
    pub running: i64,
    pub reserved_usd: f64,
    /// Running calls that hold no reservation: their cost was unknown at start.
    pub unreserved_running: i64,
}

/// What [`decide`] is asked about the budgets that apply (docs/jobs.md,
/// "Budgets"). Every budget question has this one decision, over the scopes'
/// state as one query shape reads it (`Database::budget_state`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BudgetQuestion {
    /// May one more L0 start now, expected to cost this much (`None`: unknown)?
    Start { expected_usd: Option<f64> },
    /// Is a budget already spent? (Starts not gated one by one, running calls
    /// to kill with `budget_action = "kill"`, a new job naming its project.)
    Spent,
    /// Every call of the scope ended: did it spend more than its budget?
    Overrun,
}

/// The budgets' answer.
#[derive(Debug, Clone, PartialEq)]
pub enum BudgetVerdict {
    /// Go on: for [`BudgetQuestion::Start`], start it, holding `reserve_usd` (its
    /// expected cost) until its outcome is stored (`None` when that cost is
    /// unknown); for the other questions always `None`.
    Go { reserve_usd: Option<f64> },
    /// Not now: calls running in a scope may leave room (or make the cost known)
    /// when they end. Ask again after one ends. (Only to `Start`.)
    Wait,
    /// A budget is spent, cannot cover one more call, or was overrun: why.
    Stop(String),
}

/// Float sums of dollars: a call that exactly fits must not be refused.
const DOLLAR_EPSILON: f64 = 1e-9;

/// The expected cost of the next call: the larger of the most one call of this
/// job's (or run's) executor has cost so far and the configured per-call ceiling;
/// `None` when neither is known.
pub fn expected_call_cost(max_seen_usd: Option<f64>, ceiling_usd: Option<f64>) -> Option<f64> {
    match (max_seen_usd, ceiling_usd) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The one budget decision (docs/jobs.md, "Budgets"), over every scope that
/// applies, tightest first wins:
/// - `Start`: a call starts only when, in every scope, what was spent plus what
///   running calls reserved plus this call's expected cost fits the budget. When
///   the expected cost is unknown, at most one unreserved call runs per scope, and
///   only while the scope is under its budget. So a scope's spend exceeds its
///   budget by at most one call's cost.
/// - `Spent`: stop once what a scope spent reached its budget.
/// - `Overrun`: stop when a scope spent strictly more than its budget (such a job
///   or run must not read plain success).
pub fn decide(scopes: &[(ScopeLimit, ScopeSpend)], question: BudgetQuestion) -> BudgetVerdict {
    let expected_usd = match question {
        BudgetQuestion::Start { expected_usd } => expected_usd,
        BudgetQuestion::Spent => return stop_if(scopes.iter().find_map(|(l, s)| spent(l, s))),
        BudgetQuestion::Overrun => return stop_if(scopes.iter().find_map(|(l, s)| overrun(l, s))),
    };
    let mut wait = false;
    for (limit, spend) in scopes {
        if let Some(why) = spent(limit, spend) {
            return BudgetVerdict::Stop(why);
        }
        let Some(max) = limit.max_cost_usd else {
            continue;
        };
        let committed = spend.spent_usd + spend.reserved_usd;
        let fits = match expected_usd {
            Some(expected) => committed + expected <= max + DOLLAR_EPSILON,
            None => spend.unreserved_running == 0 && committed < max,
        };
        if fits {
            continue;
        }
        if spend.running > 0 {
            wait = true;
            continue;
        }
        let expected = expected_usd.map_or_else(|| "unknown".to_owned(), |e| format!("${e:.6}"));
        return BudgetVerdict::Stop(format!(
            "{} of ${max} cannot cover one more L0 call (${:.6} spent, expected cost of a call \
             {expected})",
            limit.name, spend.spent_usd
        ));
    }
    if wait {
        BudgetVerdict::Wait
    } else {
        BudgetVerdict::Go {
            reserve_usd: expected_usd,
        }
    }
}

fn stop_if(why: Option<String>) -> BudgetVerdict {
    why.map_or(BudgetVerdict::Go { reserve_usd: None }, BudgetVerdict::Stop)
}

/// Why a scope's spend reached its budget (its output tokens first).
fn spent(limit: &ScopeLimit, spend: &ScopeSpend) -> Option<String> {
    if let Some(max) = limit.max_output_tokens
        && spend.output_tokens >= max
    {
        return Some(format!(
            "{} of {max} output tokens is spent ({} so far)",
            limit.name, spend.output_tokens
        ));
    }
    if let Some(max) = limit.max_cost_usd
        && spend.spent_usd >= max
    {
        return Some(format!(
            "{} of ${max} is spent (${:.6} so far)",
            limit.name, spend.spent_usd
        ));
    }
    None
}

/// Why a scope that ended all its calls spent more than its budget.
fn overrun(limit: &ScopeLimit, spend: &ScopeSpend) -> Option<String> {
    if let Some(max) = limit.max_cost_usd
        && spend.spent_usd > max + DOLLAR_EPSILON
    {
        return Some(format!(
            "{} of ${max} was overrun (${:.6} spent)",
            limit.name, spend.spent_usd
        ));
    }
    if let Some(max) = limit.max_output_tokens
        && spend.output_tokens > max
    {
        return Some(format!(
            "{} of {max} output tokens was overrun ({} spent)",
            limit.name, spend.output_tokens
        ));
    }
    None
}

/// The start of the UTC day holding `now` (the daily limit counts from it).
pub fn utc_day_start(now: DateTime<Utc>) -> DateTime<Utc> {
    now.date_naive().and_time(NaiveTime::MIN).and_utc()
}

/// Whole seconds from `now` to the next UTC midnight (at least 1): `Retry-After`.
pub fn secs_to_next_utc_day(now: DateTime<Utc>) -> u64 {
    let next = utc_day_start(now) + Duration::days(1);
    let ms = u64::try_from((next - now).num_milliseconds()).unwrap_or(0);
    ms.div_ceil(1000).max(1)
}

/// A project's daily limit is spent.
#[derive(Debug, Clone, PartialEq)]
pub struct DailyLimitSpent {
    pub project_id: String,
    pub limit_usd: f64,
    pub spent_usd: f64,
    /// Seconds to the next UTC midnight.
    pub retry_after_secs: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_labels_name_configured_models_only() {
        let models = MetricModels::new(["claude-sonnet-4-5".to_owned(), "gpt-x".to_owned()]);
        assert_eq!(models.label(Some("claude-sonnet-4-5")), "claude-sonnet-4-5");
        assert_eq!(models.label(Some("gpt-x")), "gpt-x");
        assert_eq!(models.label(Some("gpt-x-2026")), "other");
        assert_eq!(models.label(Some("")), "other");
        assert_eq!(models.label(None), "unknown");
    }
    use chrono::TimeZone;

    #[test]
    fn the_daily_limit_is_spent_once_reached() {
        let day = |spent_usd| {
            let spend = ScopeSpend {
                spent_usd,
                ..ScopeSpend::default()
            };
            decide(
                &[(ScopeLimit::project_day("p", 5.0), spend)],
                BudgetQuestion::Spent,
            )
        };
        assert_eq!(day(4.99), BudgetVerdict::Go { reserve_usd: None });
        assert_eq!(
            day(5.0),
            BudgetVerdict::Stop("project p's daily limit of $5 is spent ($5.000000 so far)".into())
        );
        let now = Utc.with_ymd_and_hms(2026, 12, 1, 23, 0, 0).unwrap();
        assert_eq!(secs_to_next_utc_day(now), 3600);
    }

    fn tokens(i: i64, o: i64, r: i64, w: i64) -> L0Usage {
        L0Usage {
            input_tokens: Some(i),
            output_tokens: Some(o),
            cache_read_input_tokens: Some(r),
            cache_creation_input_tokens: Some(w),
            cost_usd: None,
            model: Some("m".into()),
            source: UsageSource::Reported,
        }
    }

    #[test]
    fn prices_fill_unreported_costs_only() {
        let prices: Prices = [(
            "m".to_owned(),
            Price {
                input_per_mtok: 3.0,
                output_per_mtok: 15.0,
                cache_read_per_mtok: 0.3,
                cache_write_per_mtok: 3.75,
            },
        )]
        .into();
        let u = tokens(1_000_000, 100_000, 2_000_000, 0).priced(&prices);
        assert_eq!(u.source, UsageSource::Priced);
        assert!((u.cost_usd.unwrap() - (3.0 + 1.5 + 0.6)).abs() < 1e-9);

        let mut reported = tokens(1, 1, 0, 0);
        reported.cost_usd = Some(0.5);
        let r = reported.priced(&prices);
        assert_eq!((r.cost_usd, r.source), (Some(0.5), UsageSource::Reported));

        let mut other = tokens(1, 1, 0, 0);
        other.model = Some("unpriced".into());
        let o = other.priced(&prices);
        assert_eq!((o.cost_usd, o.source), (None, UsageSource::Reported));

        let nothing = L0Usage::default().priced(&prices);
        assert_eq!(nothing.source, UsageSource::Unknown);
    }

    #[test]
    fn tries_add_up_and_unknowns_stay_unknown() {
        let mut a = L0Usage::default();
        a.add_try(&L0Usage::default());
        assert_eq!(a.input_tokens, None);
        assert_eq!(a.cost_usd, None);
        let mut b = tokens(10, 5, 0, 0);
        b.cost_usd = Some(0.25);
        a.add_try(&b);
        a.add_try(&b);
        assert_eq!((a.input_tokens, a.output_tokens), (Some(20), Some(10)));
        assert_eq!(a.cost_usd, Some(0.5));
    }

    #[test]
    fn totals_are_null_when_one_call_is_unpriced() {
        let mut t = UsageTotals::default();
        let mut priced = tokens(10, 5, 0, 0);
        priced.cost_usd = Some(1.0);
        t.add(&priced, 100);
        assert_eq!(t.cost_usd, Some(1.0));
        t.add(&L0Usage::default(), 50);
        assert_eq!(t.cost_usd, None);
        assert_eq!(
            (
                t.calls,
                t.unpriced_calls,
                t.untracked_calls,
                t.known_cost_usd,
                t.prompt_bytes
            ),
            (2, 1, 1, 1.0, 150)
        );
        assert!(t.summary().contains("unpriced"));
    }

    #[test]
    fn budgets_trip_at_the_limit() {
        let b = Budget {
            max_cost_usd: Some(0.02),
            max_output_tokens: Some(100),
            budget_action: BudgetAction::Finish,
        };
        let limit = ScopeLimit::request(&b, false).expect("limited");
        let spent = |spent_usd, output_tokens| {
            let spend = ScopeSpend {
                spent_usd,
                output_tokens,
                ..ScopeSpend::default()
            };
            match decide(&[(limit.clone(), spend)], BudgetQuestion::Spent) {
                BudgetVerdict::Stop(why) => Some(why),
                _ => None,
            }
        };
        assert_eq!(spent(0.0, 0), None);
        assert_eq!(
            spent(0.02, 0).as_deref(),
            Some("the job's budget of $0.02 is spent ($0.020000 so far)")
        );
        assert!(spent(0.0, 100).unwrap().contains("100 output tokens"));
        assert!(!Budget::default().is_limited());
        assert_eq!(ScopeLimit::request(&Budget::default(), false), None);
        assert_eq!(
            ScopeLimit::request(&b, true).map(|l| l.name).as_deref(),
            Some("the run's budget")
        );
    }

    #[test]
    fn budget_fields_parse_or_name_the_field() {
        use serde_json::json;
        let b = Budget::from_fields(Some(&json!(0.5)), Some(&json!(100)), Some(&json!("kill")))
            .unwrap();
        assert_eq!(
            b,
            Budget {
                max_cost_usd: Some(0.5),
                max_output_tokens: Some(100),
                budget_action: BudgetAction::Kill
            }
        );
        assert_eq!(
            Budget::from_fields(None, None, Some(&json!(null))).unwrap(),
            Budget::default()
        );
        let field = |c: Option<serde_json::Value>,
                     t: Option<serde_json::Value>,
                     a: Option<serde_json::Value>| {
            Budget::from_fields(c.as_ref(), t.as_ref(), a.as_ref())
                .unwrap_err()
                .field
        };
        assert_eq!(field(Some(json!(0)), None, None), "max_cost_usd");
        assert_eq!(field(Some(json!("1")), None, None), "max_cost_usd");
        assert_eq!(field(None, Some(json!(1.5)), None), "max_output_tokens");
        assert_eq!(field(None, Some(json!(-1)), None), "max_output_tokens");
        assert_eq!(
            field(Some(json!(1)), None, Some(json!("stop"))),
            "budget_action"
        );
        assert_eq!(field(None, None, Some(json!("kill"))), "budget_action");
    }

    fn scope(
        max: f64,
        spent: f64,
        running: i64,
        reserved: f64,
        unreserved: i64,
    ) -> (ScopeLimit, ScopeSpend) {
        (
            ScopeLimit {
                name: "the job's budget".into(),
                max_cost_usd: Some(max),
                max_output_tokens: None,
            },
            ScopeSpend {
                spent_usd: spent,
                output_tokens: 0,
                running,
                reserved_usd: reserved,
                unreserved_running: unreserved,
            },
        )
    }

    /// The verdict on starting a call expected to cost `expected_usd` under `scopes`.
    fn start(scopes: &[(ScopeLimit, ScopeSpend)], expected_usd: Option<f64>) -> BudgetVerdict {
        decide(scopes, BudgetQuestion::Start { expected_usd })
    }

    #[test]
    fn an_unknown_cost_runs_one_call_at_a_time_under_the_budget() {
        let go = BudgetVerdict::Go { reserve_usd: None };
        assert_eq!(start(&[scope(0.1, 0.0, 0, 0.0, 0)], None), go);
        assert_eq!(
            start(&[scope(0.1, 0.0, 1, 0.0, 1)], None),
            BudgetVerdict::Wait
        );
        assert!(matches!(
            start(&[scope(0.1, 0.4, 0, 0.0, 0)], None),
            BudgetVerdict::Stop(r) if r.contains("$0.1 is spent")
        ));
    }

    #[test]
    fn a_known_cost_is_reserved_and_must_fit() {
        let e = Some(0.4);
        assert_eq!(
            start(&[scope(1.0, 0.2, 1, 0.4, 0)], e),
            BudgetVerdict::Go { reserve_usd: e }
        );
        // Would not fit while a call runs: it may cost less than reserved.
        assert_eq!(start(&[scope(1.0, 0.4, 1, 0.4, 0)], e), BudgetVerdict::Wait);
        // Nothing runs and it cannot fit: stop, below the budget.
        assert!(matches!(
            start(&[scope(1.0, 0.8, 0, 0.0, 0)], e),
            BudgetVerdict::Stop(r) if r.contains("cannot cover")
        ));
        // Exactly fits.
        assert!(matches!(
            start(&[scope(1.2, 0.8, 0, 0.0, 0)], e),
            BudgetVerdict::Go { .. }
        ));
        // The tightest scope decides.
        assert!(matches!(
            start(
                &[scope(10.0, 0.0, 0, 0.0, 0), scope(1.0, 1.0, 0, 0.0, 0)],
                e
            ),
            BudgetVerdict::Stop(_)
        ));
        assert_eq!(expected_call_cost(Some(0.3), Some(0.5)), Some(0.5));
        assert_eq!(expected_call_cost(None, None), None);
    }

    #[test]
    fn overrun_is_strictly_above_the_budget() {
        let mut s = scope(0.5, 0.5, 0, 0.0, 0);
        let go = BudgetVerdict::Go { reserve_usd: None };
        assert_eq!(decide(&[s.clone()], BudgetQuestion::Overrun), go);
        // Reached but not overrun: spent.
        assert!(matches!(
            decide(&[s.clone()], BudgetQuestion::Spent),
            BudgetVerdict::Stop(r) if r == "the job's budget of $0.5 is spent ($0.500000 so far)"
        ));
        s.1.spent_usd = 0.9;
        assert!(matches!(
            decide(&[s], BudgetQuestion::Overrun),
            BudgetVerdict::Stop(r) if r.contains("overrun")
        ));
        assert_eq!(
            decide(&[scope(0.5, 0.4, 1, 0.4, 0)], BudgetQuestion::Spent),
            go
        );
    }

    #[test]
    fn retry_after_reaches_the_next_utc_midnight() {
        let now = Utc.with_ymd_and_hms(2026, 3, 1, 23, 59, 30).unwrap();
        assert_eq!(secs_to_next_utc_day(now), 30);
        assert_eq!(
            utc_day_start(now),
            Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap()
        );
        let midnight = Utc.with_ymd_and_hms(2026, 3, 2, 0, 0, 0).unwrap();
        assert_eq!(secs_to_next_utc_day(midnight), 86_400);
    }
}
