//! Provider rate limits shared by every replica (docs/jobs.md, "Rate limits"): the
//! token-bucket arithmetic, the fair-share tags, and what a provider's rate-limit
//! headers and 429 answers say. Pure: the database keeps the state, this decides.
//!
//! - A bucket per limit (requests, input tokens, output tokens per minute) refills
//!   continuously at 1/60 of the per-minute figure per second. The request bucket
//!   holds at most one request, so the requests started in any 60 s window are at
//!   most `requests_per_minute + 1`; a token bucket holds at most one second's worth
//!   and may go into debt by one call (a call may need more tokens than a second
//!   brings), which later calls wait out.
//! - Fair shares are weighted fair queuing: each waiting call gets a start tag
//!   `max(V, last finish of its project)` and a finish tag `start + 1/share`; the
//!   waiting call with the least finish tag is admitted next, and `V` (the
//!   executor's virtual time) becomes its start tag. A project alone is never held
//!   back; a newcomer's first tag is `V`, so it is next in line behind at most one
//!   call per other project, whatever their backlog.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// How long a call may wait for room when nothing sets `max_wait_secs`.
pub const DEFAULT_MAX_WAIT_SECS: u64 = 600;

/// The limits of one executor, as configured and changed at runtime. `None`: no
/// configured limit (the provider's learned one applies, if any).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens_per_minute: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_minute: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wait_secs: Option<u64>,
    /// Weights by project_id (1 for a project not named).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub shares: BTreeMap<String, u64>,
}

impl Limits {
    /// `self` with what `over` sets replacing it (a runtime change over the config).
    pub fn overlaid(&self, over: &Limits) -> Limits {
        let mut shares = self.shares.clone();
        shares.extend(over.shares.iter().map(|(k, v)| (k.clone(), *v)));
        Limits {
            requests_per_minute: over.requests_per_minute.or(self.requests_per_minute),
            input_tokens_per_minute: over
                .input_tokens_per_minute
                .or(self.input_tokens_per_minute),
            output_tokens_per_minute: over
                .output_tokens_per_minute
                .or(self.output_tokens_per_minute),
            max_wait_secs: over.max_wait_secs.or(self.max_wait_secs),
            shares,
        }
    }

    pub fn max_wait(&self) -> Duration {
        Duration::from_secs(self.max_wait_secs.unwrap_or(DEFAULT_MAX_WAIT_SECS))
    }

    /// A project's weight (1 unless named).
    pub fn share(&self, project: &str) -> u64 {
        self.shares.get(project).copied().unwrap_or(1).max(1)
    }

    /// Whether anything here limits calls (a lone `max_wait_secs` does not).
    pub fn limits_anything(&self) -> bool {
        self.requests_per_minute.is_some()
            || self.input_tokens_per_minute.is_some()
            || self.output_tokens_per_minute.is_some()
    }

    /// Checks a configured or requested set of limits: every figure at least 1.
    /// The error names the field.
    pub fn check(&self) -> Result<(), (String, String)> {
        let figures = [
            ("requests_per_minute", self.requests_per_minute),
            ("input_tokens_per_minute", self.input_tokens_per_minute),
            ("output_tokens_per_minute", self.output_tokens_per_minute),
            ("max_wait_secs", self.max_wait_secs),
        ];
        for (name, value) in figures {
            if value == Some(0) {
                return Err((name.to_owned(), "must be at least 1".to_owned()));
            }
        }
        for (project, share) in &self.shares {
            if project.is_empty() {
                return Err(("shares".into(), "a project_id must not be empty".into()));
            }
            if *share == 0 {
                return Err((format!("shares.{project}"), "must be at least 1".into()));
            }
        }
        Ok(())
    }
}

/// What the provider's headers said last (any part may be unknown).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Learned {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_remaining: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_reset: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens_limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens_remaining: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_remaining: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_remaining: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_reset: Option<DateTime<Utc>>,
    /// A call of the executor ended: until then, with no limit configured or
    /// learned, calls start one at a time (the first answer's headers say more).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub answered: bool,
}

impl Learned {
    /// `self` with what `newer` knows replacing it.
    pub fn merge(&mut self, newer: &Learned) {
        macro_rules! take {
            ($($f:ident),*) => { $( if newer.$f.is_some() { self.$f = newer.$f; } )* };
        }
        take!(
            requests_limit,
            requests_remaining,
            requests_reset,
            input_tokens_limit,
            input_tokens_remaining,
            output_tokens_limit,
            output_tokens_remaining,
            tokens_limit,
            tokens_remaining,
            tokens_reset
        );
        self.answered |= newer.answered;
    }

    pub fn is_empty(&self) -> bool {
        *self == Learned::default()
    }

    /// When a resource the provider says is used up comes back: the latest reset
    /// of a resource with nothing remaining.
    pub fn exhausted_until(&self) -> Option<DateTime<Utc>> {
        let mut until: Option<DateTime<Utc>> = None;
        let mut note = |remaining: Option<u64>, reset: Option<DateTime<Utc>>| {
            if remaining == Some(0)
                && let Some(r) = reset
            {
                until = Some(until.map_or(r, |u| u.max(r)));
            }
        };
        note(self.requests_remaining, self.requests_reset);
        note(self.tokens_remaining, self.tokens_reset);
        note(self.input_tokens_remaining, self.tokens_reset);
        note(self.output_tokens_remaining, self.tokens_reset);
        until
    }
}

/// What one provider answer said about the limits (the executor reports it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProviderSignal {
    pub learned: Learned,
    /// A 429 (or 529/503 overload) asked to wait this long before any new call.
    pub retry_after: Option<Duration>,
    /// The answer was a 429.
    pub too_many: bool,
    /// The answer succeeded (a pause's gradual release may end).
    pub success: bool,
}

/// The refill rates per minute of the buckets: the configured limits, else what
/// the provider said; the request bucket's holds `request_burst` requests.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    pub requests: Option<f64>,
    pub request_burst: f64,
    pub input_tokens: Option<f64>,
    pub output_tokens: Option<f64>,
}

impl Rates {
    /// The rates for a limit of `rpm` requests a minute whose starts may come up
    /// to `lateness` after their admission: the request bucket holds one second's
    /// worth `B` (at least one) and refills at `(rpm + 1 - B) / (60 s + lateness)`,
    /// so the starts in any 60 s window are at most `B + (rpm + 1 - B) = rpm + 1`.
    pub fn effective(limits: &Limits, learned: &Learned, lateness: Duration) -> Rates {
        let f = |v: Option<u64>| v.map(|v| v as f64);
        let rpm = f(limits.requests_per_minute.or(learned.requests_limit));
        let burst = rpm.map_or(1.0, |r| (r / 60.0).floor().max(1.0));
        let requests = rpm.map(|r| {
            ((r + 1.0 - burst).max(r / 60.0) * 60.0 / (60.0 + lateness.as_secs_f64())).max(0.001)
        });
        Rates {
            requests,
            request_burst: burst,
            input_tokens: f(limits
                .input_tokens_per_minute
                .or(learned.input_tokens_limit)
                .or(learned.tokens_limit)),
            output_tokens: f(limits
                .output_tokens_per_minute
                .or(learned.output_tokens_limit)),
        }
    }
}

/// The bucket levels of one executor at `at_ms` (ms since the Unix epoch). `None`:
/// full (never used, or no limit).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Buckets {
    pub requests: Option<f64>,
    pub input_tokens: Option<f64>,
    pub output_tokens: Option<f64>,
    pub at_ms: i64,
}

/// A token bucket's capacity: one second's worth (at least one).
fn capacity(per_minute: f64) -> f64 {
    (per_minute / 60.0).max(1.0)
}

/// What one call asks of the buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cost {
    pub input_tokens: i64,
    pub output_tokens: i64,
}

impl Buckets {
    /// The levels refilled to `now_ms` (continuous refill, capped at capacity).
    pub fn refilled(self, rates: &Rates, now_ms: i64) -> Buckets {
        let secs = ((now_ms - self.at_ms).max(0)) as f64 / 1000.0;
        let fill = |level: Option<f64>, rate: Option<f64>, cap: Option<f64>| -> Option<f64> {
            let rate = rate?;
            let cap = cap.unwrap_or_else(|| capacity(rate));
            Some(level.map_or(cap, |l| (l + secs * rate / 60.0).min(cap)))
        };
        Buckets {
            requests: fill(self.requests, rates.requests, Some(rates.request_burst)),
            input_tokens: fill(self.input_tokens, rates.input_tokens, None),
            output_tokens: fill(self.output_tokens, rates.output_tokens, None),
            at_ms: now_ms.max(self.at_ms),
        }
    }

    /// How long until a call of `cost` fits (zero: now). A token bucket admits a
    /// call once it holds the call's tokens or is full (then it goes into debt).
    pub fn wait_for(&self, rates: &Rates, cost: Cost) -> Duration {
        let mut wait = 0.0_f64;
        let mut need = |level: Option<f64>, rate: Option<f64>, want: f64, cap: Option<f64>| {
            if let (Some(level), Some(rate)) = (level, rate) {
                let want = want.min(cap.unwrap_or_else(|| capacity(rate)));
                if level < want {
                    wait = wait.max((want - level) * 60.0 / rate);
                }
            }
        };
        need(
            self.requests,
            rates.requests,
            1.0,
            Some(rates.request_burst),
        );
        need(
            self.input_tokens,
            rates.input_tokens,
            cost.input_tokens as f64,
            None,
        );
        need(
            self.output_tokens,
            rates.output_tokens,
            cost.output_tokens as f64,
            None,
        );
        Duration::from_secs_f64(wait)
    }

    /// Takes a call's request and tokens (levels may go below zero).
    pub fn take(&mut self, cost: Cost) {
        if let Some(l) = &mut self.requests {
            *l -= 1.0;
        }
        if let Some(l) = &mut self.input_tokens {
            *l -= cost.input_tokens as f64;
        }
        if let Some(l) = &mut self.output_tokens {
            *l -= cost.output_tokens as f64;
        }
    }

    /// Gives back what a call reserved beyond what it used (settlement).
    pub fn give_back(&mut self, rates: &Rates, unused: Cost) {
        let back = |level: &mut Option<f64>, rate: Option<f64>, n: i64| {
            if let (Some(l), Some(rate)) = (level.as_mut(), rate)
                && n > 0
            {
                *l = (*l + n as f64).min(capacity(rate));
            }
        };
        back(
            &mut self.input_tokens,
            rates.input_tokens,
            unused.input_tokens,
        );
        back(
            &mut self.output_tokens,
            rates.output_tokens,
            unused.output_tokens,
        );
    }

    /// Gives back what `calls` lapsed grants took (`cost`: their tokens together).
    /// A grant lapses only while its call still waits, so none of them started:
    /// their room is the next calls'.
    pub fn refund(&mut self, rates: &Rates, calls: i64, cost: Cost) {
        if let (Some(l), Some(_)) = (self.requests.as_mut(), rates.requests)
            && calls > 0
        {
            *l = (*l + calls as f64).min(rates.request_burst);
        }
        self.give_back(rates, cost);
    }

    /// Empties every bucket (a provider pause: after it, calls come back at the
    /// refill rate, never all at once).
    pub fn drain(&mut self) {
        for l in [
            &mut self.requests,
            &mut self.input_tokens,
            &mut self.output_tokens,
        ]
        .into_iter()
        .flatten()
        {
            *l = l.min(0.0);
        }
    }
}

/// The fair-queuing tags of a call that starts waiting: `(start, finish)`.
pub fn fair_tags(virtual_time: f64, project_last_finish: Option<f64>, share: u64) -> (f64, f64) {
    let start = project_last_finish.map_or(virtual_time, |f| f.max(virtual_time));
    (start, start + 1.0 / share.max(1) as f64)
}

/// The tokens a call reserves: its prompt's estimated input tokens (4 bytes a
/// token, rounded up) and its `max_tokens` of output.
pub fn estimated_cost(prompt_bytes: usize, max_output_tokens: u64) -> Cost {
    Cost {
        input_tokens: i64::try_from(prompt_bytes.div_ceil(4)).unwrap_or(i64::MAX),
        output_tokens: i64::try_from(max_output_tokens).unwrap_or(i64::MAX),
    }
}

/// Whether a 429's body speaks of an account's usage, spend or credit limit (no
/// waiting brings such a call through: it is tried once).
pub fn is_quota_exhausted(body: &str) -> bool {
    let lower = body.to_lowercase();
    [
        "usage limit",
        "spend limit",
        "credit balance",
        "insufficient_quota",
        "exceeded your current quota",
        "billing",
    ]
    .iter()
    .any(|needle| lower.contains(needle))
}

/// A duration as OpenAI writes its resets: `6m0s`, `1.5s`, `20ms`, `1h2m3s`.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut total = 0.0_f64;
    let mut rest = text;
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..end].parse().ok()?;
        rest = &rest[end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 0.000_001,
            "ns" => 0.000_000_001,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[unit_end..];
    }
    (total.is_finite() && total >= 0.0).then(|| Duration::from_secs_f64(total))
}

/// The rate-limit headers of one answer (`get` looks a header up by lower-case
/// name). Anthropic's resets are RFC 3339 times, OpenAI's durations from `now`.
pub fn learn_from_headers(get: impl Fn(&str) -> Option<String>, now: DateTime<Utc>) -> Learned {
    let num = |name: &str| get(name).and_then(|v| v.trim().parse::<u64>().ok());
    let time = |name: &str| {
        get(name).and_then(|v| {
            let v = v.trim().to_owned();
            DateTime::parse_from_rfc3339(&v)
                .map(|t| t.with_timezone(&Utc))
                .ok()
                .or_else(|| {
                    parse_go_duration(&v)
                        .and_then(|d| chrono::Duration::from_std(d).ok())
                        .map(|d| now + d)
                })
        })
    };
    let a = "anthropic-ratelimit-";
    let o = "x-ratelimit-";
    Learned {
        requests_limit: num(&format!("{a}requests-limit"))
            .or_else(|| num(&format!("{o}limit-requests"))),
        requests_remaining: num(&format!("{a}requests-remaining"))
            .or_else(|| num(&format!("{o}remaining-requests"))),
        requests_reset: time(&format!("{a}requests-reset"))
            .or_else(|| time(&format!("{o}reset-requests"))),
        input_tokens_limit: num(&format!("{a}input-tokens-limit")),
        input_tokens_remaining: num(&format!("{a}input-tokens-remaining")),
        output_tokens_limit: num(&format!("{a}output-tokens-limit")),
        output_tokens_remaining: num(&format!("{a}output-tokens-remaining")),
        tokens_limit: num(&format!("{a}tokens-limit")).or_else(|| num(&format!("{o}limit-tokens"))),
        tokens_remaining: num(&format!("{a}tokens-remaining"))
            .or_else(|| num(&format!("{o}remaining-tokens"))),
        tokens_reset: time(&format!("{a}tokens-reset"))
            .or_else(|| time(&format!("{a}input-tokens-reset")))
            .or_else(|| time(&format!("{o}reset-tokens"))),
        answered: false,
    }
}

/// Where a call stands in its executor's queue (`rate_limit_calls.state`, never
/// on the wire: the dashboard shows `granted` as a flag). The column has no CHECK;
/// `db/rate_limits.rs` alone writes it, only these words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallState {
    /// Registered, waiting for room.
    Waiting,
    /// Another replica's admission granted its start: it starts at its next ask.
    Granted,
    /// Started: it holds concurrency until it is settled.
    Running,
    /// Settled: what it reserved and did not use waits for the next admission.
    Done,
}

crate::domain::wire_strings!(CallState, "rate-limited call state", column {
    Waiting => "waiting",
    Granted => "granted",
    Running => "running",
    Done => "done",
});

/// A call waiting for room, as the dashboard lists it.
#[derive(Debug, Clone)]
pub struct WaitingCall {
    pub executor: String,
    pub job_id: String,
    pub assignment_id: String,
    pub project_id: String,
    pub waiting_since: Option<DateTime<Utc>>,
    /// Another replica's admission granted its start: it starts at its next ask.
    pub granted: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(rpm: u64) -> Rates {
        let limits = Limits {
            requests_per_minute: Some(rpm),
            ..Limits::default()
        };
        Rates::effective(&limits, &Learned::default(), Duration::ZERO)
    }

    /// Admits calls as fast as the bucket lets them over `secs` seconds and
    /// returns the start times (ms).
    fn admit_greedily(r: &Rates, cost: Cost, secs: i64) -> Vec<i64> {
        let mut b = Buckets::default();
        let mut t = 0_i64;
        let mut starts = Vec::new();
        while t < secs * 1000 {
            b = b.refilled(r, t);
            let w = b.wait_for(r, cost);
            if w.is_zero() {
                b.take(cost);
                starts.push(t);
            } else {
                t += (w.as_secs_f64() * 1000.0).ceil() as i64;
            }
        }
        starts
    }

    #[test]
    fn any_minute_holds_at_most_the_limit_plus_one() {
        for rpm in [1_u64, 50, 60, 600, 3000] {
            let starts = admit_greedily(&rates(rpm), Cost::default(), 180);
            let worst = starts
                .iter()
                .map(|s| {
                    starts
                        .iter()
                        .filter(|t| **t >= *s && **t < s + 60_000)
                        .count()
                })
                .max()
                .unwrap();
            assert!(worst as u64 <= rpm + 1, "rpm {rpm}: {worst} in a minute");
            // And the limit is used: a busy minute holds at least the limit.
            assert!(worst as u64 >= rpm, "rpm {rpm}: only {worst}");
        }
    }

    #[test]
    fn output_tokens_reserved_at_admission_bound_the_rate() {
        let r = Rates {
            output_tokens: Some(8000.0),
            request_burst: 1.0,
            ..Rates::default()
        };
        let cost = Cost {
            input_tokens: 10,
            output_tokens: 1000,
        };
        // 8000 output tokens a minute at 1000 each: ~8 calls a minute (+1 debt).
        let starts = admit_greedily(&r, cost, 120);
        assert!((16..=18).contains(&starts.len()), "{}", starts.len());
    }

    #[test]
    fn unused_tokens_come_back_and_pauses_empty_the_buckets() {
        let r = Rates {
            requests: Some(60.0),
            request_burst: 1.0,
            output_tokens: Some(6000.0),
            ..Rates::default()
        };
        let mut b = Buckets::default().refilled(&r, 0);
        assert_eq!(b.output_tokens, Some(100.0));
        b.take(Cost {
            input_tokens: 0,
            output_tokens: 1000,
        });
        assert_eq!(b.output_tokens, Some(-900.0));
        b.give_back(
            &r,
            Cost {
                input_tokens: 0,
                output_tokens: 950,
            },
        );
        assert_eq!(b.output_tokens, Some(50.0));
        b.drain();
        assert_eq!(b.requests, Some(0.0));
        assert_eq!(b.output_tokens, Some(0.0));
        assert_eq!(
            b.wait_for(&r, Cost::default()),
            Duration::from_secs(1),
            "one request a second"
        );
    }

    #[test]
    fn lapsed_grants_give_their_room_back_up_to_the_burst() {
        let r = rates(600);
        let cost = Cost {
            input_tokens: 0,
            output_tokens: 0,
        };
        let mut b = Buckets::default().refilled(&r, 0);
        for _ in 0..10 {
            b.take(cost);
        }
        assert!(b.requests.unwrap() < 1.0);
        assert!(!b.wait_for(&r, cost).is_zero());
        b.refund(&r, 3, cost);
        assert_eq!(b.requests, Some(3.0));
        assert!(b.wait_for(&r, cost).is_zero());
        b.refund(&r, 50, cost);
        assert_eq!(b.requests, Some(r.request_burst), "never above the burst");
    }

    #[test]
    fn fair_tags_favour_the_lighter_project_and_let_newcomers_in() {
        // Project a (share 3) and b (share 1), both backlogged.
        let shares = [("a", 3_u64), ("b", 1_u64)];
        let mut last: BTreeMap<&str, f64> = BTreeMap::new();
        let mut v = 0.0;
        let mut heads: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
        for (p, s) in shares {
            heads.insert(p, fair_tags(v, None, s));
        }
        let mut admitted: BTreeMap<&str, u32> = BTreeMap::new();
        for _ in 0..400 {
            let (&p, &(start, finish)) =
                heads.iter().min_by(|x, y| x.1.1.total_cmp(&y.1.1)).unwrap();
            v = start;
            last.insert(p, finish);
            *admitted.entry(p).or_default() += 1;
            let share = shares.iter().find(|s| s.0 == p).unwrap().1;
            heads.insert(p, fair_tags(v, last.get(p).copied(), share));
        }
        assert_eq!(admitted["a"], 300);
        assert_eq!(admitted["b"], 100);
        // A newcomer's first tag is the virtual time: it goes next or nearly.
        let (_, f) = fair_tags(v, None, 1);
        assert!(f <= heads["a"].1 + 1.0 && f <= heads["b"].1 + 1.0);
    }

    #[test]
    fn headers_of_both_providers_are_read() {
        let now = DateTime::parse_from_rfc3339("2026-12-06T01:35:00Z")
            .unwrap()
            .with_timezone(&Utc);
        // A response's headers, looked up by name.
        let headers = |pairs: &'static [(&str, &str)]| {
            move |name: &str| {
                let value = pairs.iter().find(|(n, _)| *n == name);
                value.map(|(_, value)| (*value).to_owned())
            }
        };
        let anthropic = headers(&[
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            (
                "anthropic-ratelimit-requests-reset",
                "2026-12-06T01:35:14.883Z",
            ),
            ("anthropic-ratelimit-input-tokens-limit", "40000"),
            ("anthropic-ratelimit-output-tokens-remaining", "7000"),
        ]);
        let l = learn_from_headers(anthropic, now);
        assert_eq!(l.requests_limit, Some(50));
        assert_eq!(l.input_tokens_limit, Some(40000));
        assert_eq!(l.output_tokens_remaining, Some(7000));
        let until = l.exhausted_until().unwrap();
        assert_eq!((until - now).num_milliseconds(), 14_883);

        let openai = headers(&[
            ("x-ratelimit-limit-requests", "600"),
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "1.5s"),
            ("x-ratelimit-reset-tokens", "6m0s"),
            ("x-ratelimit-remaining-tokens", "10"),
        ]);
        let l = learn_from_headers(openai, now);
        assert_eq!(l.requests_limit, Some(600));
        assert_eq!((l.requests_reset.unwrap() - now).num_milliseconds(), 1_500);
        assert_eq!((l.tokens_reset.unwrap() - now).num_seconds(), 360);
        assert_eq!(
            (l.exhausted_until().unwrap() - now).num_milliseconds(),
            1_500
        );
    }

    #[test]
    fn go_durations_parse() {
        let ms = |s: &str| parse_go_duration(s).map(|d| d.as_millis());
        assert_eq!(ms("6m0s"), Some(360_000));
        assert_eq!(ms("1.5s"), Some(1_500));
        assert_eq!(ms("20ms"), Some(20));
        assert_eq!(ms("1h2m3s"), Some(3_723_000));
        assert_eq!(ms("3"), None);
        assert_eq!(ms("abc"), None);
        assert_eq!(ms(""), None);
    }

    #[test]
    fn spend_limit_answers_are_recognised() {
        assert!(is_quota_exhausted(
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your specified API usage limits. You will regain access on 2027-01-01"}}"#
        ));
        assert!(is_quota_exhausted("Your credit balance is too low"));
        assert!(is_quota_exhausted(
            r#"{"error":{"code":"insufficient_quota"}}"#
        ));
        assert!(!is_quota_exhausted(
            r#"{"error":{"type":"rate_limit_error","message":"Number of requests has exceeded your rate limit"}}"#
        ));
    }

    #[test]
    fn limits_are_checked_and_overlaid() {
        let base = Limits {
            requests_per_minute: Some(50),
            shares: [("a".to_owned(), 3)].into(),
            ..Limits::default()
        };
        let over = Limits {
            requests_per_minute: Some(100),
            max_wait_secs: Some(5),
            shares: [("b".to_owned(), 2)].into(),
            ..Limits::default()
        };
        let eff = base.overlaid(&over);
        assert_eq!(eff.requests_per_minute, Some(100));
        assert_eq!(eff.share("a"), 3);
        assert_eq!(eff.share("b"), 2);
        assert_eq!(eff.share("c"), 1);
        assert_eq!(eff.max_wait(), Duration::from_secs(5));
        let bad = Limits {
            output_tokens_per_minute: Some(0),
            ..Limits::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "output_tokens_per_minute");
        let bad = Limits {
            shares: [("x".to_owned(), 0)].into(),
            ..Limits::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "shares.x");
    }
}
