//! L0 executors (docs/spec/refine.md §2): `command`, `openai`, `anthropic` and `builtin` turn
//! one L0 prompt into an answer. They never touch the database; the job engine
//! (`jobs/`) decides what to do with what they return.
//!
//! Contract for the engine:
//! - [`Executor::run`] returns `Ok(L0Run)` whatever happened to the L0 — an answer
//!   (`L0Outcome::Answer`, judged later by `classify`) or a failure with a one-line
//!   reason (`L0Outcome::Failed`: spawn error, timeout, silent non-zero exit, API
//!   error after retries) — and `Err(Cancelled)` only when the token fired.
//! - Every executor enforces its own per-L0 timeout ([`Executor::timeout`]); the
//!   engine needs no timer of its own. Dropping the `run` future is safe: a
//!   command's process group is killed all the same.
//! - `command` details (environment, process group, caps): see `agents/command.rs`;
//!   `openai`/`anthropic` details (endpoints, retries): `agents/http_api.rs`.

mod command;
mod guardian;
mod http_api;
mod usage;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::{ConfigError, ExecutorKind, ExecutorProfile, Settings};
use crate::domain::rate_limit::ProviderSignal;
use crate::domain::refine::{Assignment, L0Outcome, L0Packet, builtin_review};
use crate::domain::usage::{L0Usage, Prices, UsageSource};
use command::CommandConfig;

pub use crate::config::StdoutFormat;
use http_api::{Api, HttpConfig};

pub use command::STDERR_CAP;
pub use http_api::{
    ANTHROPIC_MAX_TOKENS, ANTHROPIC_VERSION, BACKOFF_BASE, MAX_RETRY_DELAY, MAX_TRIES,
};

/// Everything an executor needs for one L0.
#[derive(Debug, Clone)]
pub struct L0Request {
    pub job_id: Uuid,
    pub phase_id: String,
    pub assignment_id: String,
    /// Passed as `PLANGATE_TASK_FILE` (empty when the job has none).
    pub task_file: Option<String>,
    /// The rendered prompt (stdin for `command`, the user message for the APIs).
    pub prompt: String,
    /// The packet and the phase's assignments, for the `builtin` reviewer.
    pub packet: Arc<L0Packet>,
    pub phase_assignments: Arc<[Assignment]>,
    /// Told what each provider answer said about its rate limits (the server
    /// shares it with every replica, docs/jobs.md "Rate limits"); `None`: nobody
    /// listens.
    pub rate_feedback: Option<Arc<dyn RateFeedback>>,
}

/// Hears what a provider's answers say about its limits: the rate-limit headers,
/// a 429's `retry-after`. Called on the executor's task: must not block.
pub trait RateFeedback: Send + Sync + std::fmt::Debug {
    fn signal(&self, signal: ProviderSignal);
}

/// What one L0 run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct L0Run {
    pub outcome: L0Outcome,
    /// The process exit code (`command` only; `None` when killed by a signal).
    pub exit_code: Option<i32>,
    /// Captured stderr, capped (`command`), or the last transient error (APIs).
    pub stderr: Option<String>,
    /// How many tries it took (retries of transient errors included).
    pub tries: u32,
    /// What it cost, over all its tries (priced from the table when configured).
    pub usage: L0Usage,
}

impl L0Run {
    /// A run that ended without an answer and with nothing known spent.
    pub(crate) fn failed(reason: String, tries: u32) -> Self {
        Self {
            outcome: L0Outcome::Failed(reason),
            exit_code: None,
            stderr: None,
            tries,
            usage: L0Usage::default(),
        }
    }
}

/// The run was cancelled (job cancel, lost lease or shutdown): the L0 did not
/// finish and its process group is already killed. Nothing of it may be stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("L0 run cancelled")]
pub struct Cancelled;

/// The per-L0 timeout when a profile sets none (10 min).
pub const DEFAULT_TIMEOUT_SECS: u64 = 600;
/// The output cap when a profile sets none (1 MiB): a command's stdout, an API's
/// response body.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 1024 * 1024;

/// One configured executor.
#[derive(Debug)]
pub struct Executor {
    name: String,
    kind: Kind,
    /// Prices calls that report tokens but no cost (`[prices."MODEL"]`).
    prices: Arc<Prices>,
}

#[derive(Debug)]
enum Kind {
    Builtin,
    Command(CommandConfig),
    Http(HttpConfig),
}

fn profile_error(name: &str, message: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        name: "executors",
        message: format!("[executors.{name}] {message}"),
    }
}

impl Executor {
    pub fn builtin() -> Self {
        Executor {
            name: "builtin".into(),
            kind: Kind::Builtin,
            prices: Arc::default(),
        }
    }

    /// Checks a profile and builds its executor (a bad profile fails at start):
    /// `timeout_secs` and `max_output_bytes` must be positive; `command` needs an
    /// argv; `openai` and `anthropic` need a `model`, a usable `base_url`, and —
    /// when `api_key_env` is set — that variable set and non-empty in the server's
    /// environment (it is read here, once).
    pub fn from_profile(name: &str, profile: &ExecutorProfile) -> Result<Self, ConfigError> {
        let timeout = match profile.timeout_secs {
            Some(0) => return Err(profile_error(name, "timeout_secs must be at least 1")),
            secs => Duration::from_secs(secs.unwrap_or(DEFAULT_TIMEOUT_SECS)),
        };
        let max_output_bytes = match profile.max_output_bytes {
            Some(0) => return Err(profile_error(name, "max_output_bytes must be at least 1")),
            bytes => bytes.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES),
        };
        let kind = match profile.kind {
            ExecutorKind::Builtin => Kind::Builtin,
            ExecutorKind::Command => {
                if profile.argv.first().is_none_or(|p| p.is_empty()) {
                    return Err(profile_error(
                        name,
                        "of kind \"command\" needs a non-empty argv",
                    ));
                }
                if profile.argv.iter().any(|a| a.contains('\0')) {
                    return Err(profile_error(name, "argv must not contain NUL bytes"));
                }
                if let Some(bad) = profile
                    .env_allow
                    .iter()
                    .find(|v| v.is_empty() || v.contains(['=', '\0']))
                {
                    return Err(profile_error(
                        name,
                        format!("env_allow has an invalid variable name {bad:?}"),
                    ));
                }
                Kind::Command(CommandConfig {
                    argv: profile.argv.clone(),
                    env_allow: profile.env_allow.clone(),
                    timeout,
                    max_output_bytes,
                    output: profile.output,
                    model: profile.model.clone().filter(|m| !m.trim().is_empty()),
                })
            }
            ExecutorKind::Openai | ExecutorKind::Anthropic => {
                let api = if profile.kind == ExecutorKind::Openai {
                    Api::Openai
                } else {
                    Api::Anthropic
                };
                let model = profile
                    .model
                    .clone()
                    .filter(|m| !m.trim().is_empty())
                    .ok_or_else(|| {
                        profile_error(name, format!("of kind \"{}\" needs a model", profile.kind))
                    })?;
                let key = match &profile.api_key_env {
                    None => None,
                    Some(var) => match std::env::var(var) {
                        Ok(key) if !key.is_empty() => Some(key),
                        _ => {
                            return Err(profile_error(
                                name,
                                format!(
                                    "api_key_env names {var}, which is unset or empty in the environment"
                                ),
                            ));
                        }
                    },
                };
                let http = HttpConfig::new(
                    api,
                    profile.base_url.as_deref(),
                    model,
                    key,
                    timeout,
                    max_output_bytes,
                )
                .map_err(|e| profile_error(name, e))?;
                Kind::Http(http)
            }
        };
        if profile.output != StdoutFormat::Text && profile.kind != ExecutorKind::Command {
            return Err(profile_error(
                name,
                "output applies to kind \"command\" only",
            ));
        }
        Ok(Executor {
            name: name.to_owned(),
            kind,
            prices: Arc::default(),
        })
    }

    /// The price table that fills the cost of calls reporting tokens only.
    pub fn with_prices(mut self, prices: Arc<Prices>) -> Self {
        self.prices = prices;
        self
    }

    /// The model a profile names (`None` for `builtin`, or a command without one).
    pub fn model(&self) -> Option<&str> {
        match &self.kind {
            Kind::Builtin => None,
            Kind::Command(c) => c.model.as_deref(),
            Kind::Http(h) => Some(&h.model),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The output tokens a call may use at most, which a rate limit reserves at
    /// admission (`max_tokens` of the Messages API; 0 when the API sets none).
    pub fn max_output_tokens(&self) -> u64 {
        match &self.kind {
            Kind::Http(h) if h.api == Api::Anthropic => u64::from(ANTHROPIC_MAX_TOKENS),
            _ => 0,
        }
    }

    /// Whether its answers carry a provider's rate-limit headers.
    pub fn speaks_rate_headers(&self) -> bool {
        matches!(self.kind, Kind::Http(_))
    }

    /// Its profile's kind (metric label, job record).
    pub fn kind(&self) -> ExecutorKind {
        match &self.kind {
            Kind::Builtin => ExecutorKind::Builtin,
            Kind::Command(_) => ExecutorKind::Command,
            Kind::Http(http) => match http.api {
                Api::Openai => ExecutorKind::Openai,
                Api::Anthropic => ExecutorKind::Anthropic,
            },
        }
    }

    /// The per-L0 time limit (`None` for `builtin`, which needs none).
    pub fn timeout(&self) -> Option<Duration> {
        match &self.kind {
            Kind::Builtin => None,
            Kind::Command(c) => Some(c.timeout),
            Kind::Http(h) => Some(h.timeout),
        }
    }

    /// Overrides the per-L0 timeout (tests: below the config's 1 s granularity).
    #[doc(hidden)]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        match &mut self.kind {
            Kind::Builtin => {}
            Kind::Command(c) => c.timeout = timeout,
            Kind::Http(h) => h.timeout = timeout,
        }
        self
    }

    /// Overrides the API retry waits (tests: the 250 ms base and 10 s cap would make
    /// them slow). `base` is the first retry's backoff; `max_delay` caps every wait,
    /// `Retry-After` included. No effect on other kinds.
    #[doc(hidden)]
    pub fn with_backoff(mut self, base: Duration, max_delay: Duration) -> Self {
        if let Kind::Http(h) = &mut self.kind {
            h.backoff.base = base;
            h.backoff.max_delay = max_delay;
        }
        self
    }

    /// Runs one L0. Returns `Err(Cancelled)` as soon as `cancel` fires (a command's
    /// process group is killed and reaped first). Dropping the future also kills
    /// the group.
    pub async fn run(
        &self,
        req: &L0Request,
        cancel: &CancellationToken,
    ) -> Result<L0Run, Cancelled> {
        if cancel.is_cancelled() {
            return Err(Cancelled);
        }
        let mut run = match &self.kind {
            Kind::Builtin => L0Run {
                outcome: L0Outcome::Answer(builtin_review(&req.packet, &req.phase_assignments)),
                exit_code: None,
                stderr: None,
                tries: 1,
                // In-process rules: no model, nothing spent.
                usage: L0Usage {
                    input_tokens: Some(0),
                    output_tokens: Some(0),
                    cache_read_input_tokens: Some(0),
                    cache_creation_input_tokens: Some(0),
                    cost_usd: Some(0.0),
                    model: None,
                    source: UsageSource::Reported,
                },
            },
            Kind::Command(c) => command::run(c, &self.name, req, cancel).await?,
            Kind::Http(h) => h.run(&self.name, req, cancel).await?,
        };
        run.usage = std::mem::take(&mut run.usage).priced(&self.prices);
        Ok(run)
    }
}

/// The executors a server or CLI run may use, by name. `builtin` always exists.
#[derive(Debug, Clone)]
pub struct Executors {
    default: String,
    by_name: BTreeMap<String, Arc<Executor>>,
}

impl Executors {
    pub fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        let prices = Arc::new(settings.prices.clone());
        let mut by_name = BTreeMap::new();
        by_name.insert("builtin".to_owned(), Arc::new(Executor::builtin()));
        for (name, profile) in &settings.executors {
            by_name.insert(
                name.clone(),
                Arc::new(Executor::from_profile(name, profile)?.with_prices(prices.clone())),
            );
        }
        Ok(Executors {
            default: settings.default_executor.clone(),
            by_name,
        })
    }

    /// The executor a request names, else the default; `None` for an unknown name.
    pub fn resolve(&self, name: Option<&str>) -> Option<Arc<Executor>> {
        self.by_name.get(name.unwrap_or(&self.default)).cloned()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }
}
