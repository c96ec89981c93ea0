//! The TOML config file: the settings below flags and variables, plus what only
//! the file can say (executor profiles, prices, budgets).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{ConfigError, LogFormat, TokenEntry};
use crate::domain::usage::Prices;

/// The config file. Unknown keys are refused so that a typo fails at start instead
/// of silently running with a default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub bind: Option<String>,
    pub database_url: Option<String>,
    pub log_format: Option<LogFormat>,
    /// Strings as in `PLANGATE_API_TOKENS` (`"TOKEN"`, `"TOKEN:a|b"`) or tables
    /// `{ value = "...", projects = ["a", "b"] }`, also written `[[api_tokens]]`.
    pub api_tokens: Option<Vec<TokenEntry>>,
    pub workspace_root: Option<PathBuf>,
    pub output_root: Option<PathBuf>,
    pub task_dir: Option<PathBuf>,
    pub workers: Option<u32>,
    pub lease_secs: Option<u64>,
    pub heartbeat_secs: Option<u64>,
    pub reaper_interval_secs: Option<u64>,
    pub max_attempts: Option<u32>,
    pub shutdown_grace_secs: Option<u64>,
    pub retention_days: Option<u64>,
    pub request_timeout_secs: Option<u64>,
    pub body_limit_bytes: Option<usize>,
    pub sqlite_synchronous: Option<String>,
    pub max_gating_errors: Option<usize>,
    pub gating_budget_bytes: Option<u64>,
    pub l0_concurrency: Option<usize>,
    pub prompt_template: Option<PathBuf>,
    /// The perimeter (docs/configuration.md, "Perimeter").
    pub allowed_origins: Option<Vec<String>>,
    pub allowed_hosts: Option<Vec<String>>,
    pub header_read_timeout_secs: Option<u64>,
    pub idle_timeout_secs: Option<u64>,
    pub max_connections: Option<usize>,
    pub session_ttl_secs: Option<u64>,
    /// Webhook deliveries (docs/configuration.md, "Webhooks").
    pub webhook_timeout_secs: Option<u64>,
    pub webhook_retry_schedule: Option<String>,
    pub webhook_allow_private: Option<bool>,
    pub default_executor: Option<String>,
    #[serde(default)]
    pub executors: BTreeMap<String, ExecutorProfile>,
    /// `[prices."MODEL"]`: prices calls that report tokens but no cost.
    #[serde(default)]
    pub prices: Prices,
    /// `[budgets]`: the per-project daily spending limits.
    #[serde(default)]
    pub budgets: BudgetsConfig,
    /// `[rate_limits.EXECUTOR]`: a provider's limits shared by every replica
    /// (docs/configuration.md, "Rate limits").
    #[serde(default)]
    pub rate_limits: BTreeMap<String, RateLimitConfig>,
}

/// `[rate_limits.EXECUTOR]` of the config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    pub requests_per_minute: Option<u64>,
    pub input_tokens_per_minute: Option<u64>,
    pub output_tokens_per_minute: Option<u64>,
    pub max_wait_secs: Option<u64>,
    /// Weights by project_id.
    #[serde(default)]
    pub shares: BTreeMap<String, u64>,
}

impl RateLimitConfig {
    pub fn limits(&self) -> crate::domain::rate_limit::Limits {
        crate::domain::rate_limit::Limits {
            requests_per_minute: self.requests_per_minute,
            input_tokens_per_minute: self.input_tokens_per_minute,
            output_tokens_per_minute: self.output_tokens_per_minute,
            max_wait_secs: self.max_wait_secs,
            shares: self.shares.clone(),
        }
    }
}

/// `[budgets]` of the config file (docs/jobs.md, "Usage, cost and budgets").
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetsConfig {
    /// Every project's daily limit in US dollars (UTC days); none when absent.
    pub project_daily_cost_usd: Option<f64>,
    /// Per-project limits that replace the default one.
    #[serde(default)]
    pub projects: BTreeMap<String, f64>,
    /// `[budgets.max_call_cost_usd]`: the most one L0 call of an executor (by
    /// profile name) may cost; the budget gate reserves it for each call before
    /// the job has seen a cost (docs/jobs.md, "Budgets").
    #[serde(default)]
    pub max_call_cost_usd: BTreeMap<String, f64>,
}

impl BudgetsConfig {
    /// The daily limit of `project`, if any.
    pub fn daily_limit(&self, project: &str) -> Option<f64> {
        self.projects
            .get(project)
            .copied()
            .or(self.project_daily_cost_usd)
    }
}

pub use crate::domain::refine::ExecutorKind;

/// An L0 executor profile (docs/spec/operations.md). The refine engine uses it; the
/// foundation only checks it is well formed so that a bad profile fails at start.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorProfile {
    pub kind: ExecutorKind,
    #[serde(default)]
    pub argv: Vec<String>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub timeout_secs: Option<u64>,
    pub max_output_bytes: Option<usize>,
    #[serde(default)]
    pub env_allow: Vec<String>,
    /// `command` only: `text` (default) or `claude-json`.
    #[serde(default)]
    pub output: StdoutFormat,
}

/// How a command's stdout is read (`output` in the profile).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StdoutFormat {
    /// stdout is the answer; usage unknown.
    #[default]
    Text,
    /// stdout is a `claude -p --output-format json` envelope: the answer is its
    /// `result`, the usage and cost come from it, `is_error: true` is a failure.
    ClaudeJson,
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            // toml's message spans several lines with a caret; one line is the contract.
            message: e.message().to_owned()
                + &e.span()
                    .map(|s| format!(" (at byte {})", s.start))
                    .unwrap_or_default(),
        })
    }
}
