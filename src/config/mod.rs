//! Configuration: flags > environment > TOML file > defaults.
//!
//! Every setting has one name: a flag, an environment variable (clap's `env`) and a
//! key in the config file. clap merges flags and environment; the file sits below
//! both, so each clap argument is an `Option` and falls back to the file, then to the
//! default. A bad value fails at start with one line, never at the first request.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Deserialize;

use crate::domain::refine::{DEFAULT_PROMPT_TEMPLATE, MAX_PARALLEL};
use crate::domain::usage::Prices;

/// Default request body limit: 16 MiB (docs/spec/operations.md).
pub const DEFAULT_BODY_LIMIT: usize = 16 * 1024 * 1024;

#[derive(Debug, Parser)]
#[command(
    name = "plangate",
    version,
    about = "Deterministic, durable planning service for LLM-agent orchestrators",
    long_about = "plangate gates planner task lists, refines plans with L0 agents and tracks \
                  loop state, as an HTTP service (`plangate serve`, the default) or as CLI \
                  commands over the same engine."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server (what a bare `plangate` does).
    Serve(ServeArgs),
    /// Apply the database migrations and exit.
    Migrate(ServeArgs),
    /// Gate a task list (JSON array, `{tasks, existing_files}` or planner output text).
    Validate(ValidateArgs),
    /// Build a loop plan (plan.md or JSON) from a JSON or YAML request file.
    Plan(PlanArgs),
    /// Print the OpenAPI document the server serves at /openapi.json.
    Openapi,
    /// Probe a running server's /healthz (exit 0 when it answers 200, else 1): the
    /// container image's HEALTHCHECK, which follows the server's bind setting.
    Health(HealthArgs),
    /// Refine one phase in-process (the L1 step): L0 fan-out, validation, WP
    /// ownership; writes RUN_DIR/refine_contexts/{phase_id}_result.json.
    Refine(RefineArgs),
    /// Refine a whole plan in-process: split into phase contexts, run the phases
    /// in parallel, merge into RUN_DIR/refined_assignments.json.
    RefineRun(RefineRunArgs),
    /// Serve the MCP tools over stdio for a local agent, in-process on the configured
    /// database with the refine workers (`claude mcp add plangate -- plangate mcp`).
    /// stdout carries JSON-RPC only; logs go to stderr.
    Mcp(McpArgs),
}

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Offer only the tools that change nothing (validate_task_list, ready_tasks,
    /// project_status, plan_loop, refine_status).
    #[arg(long)]
    pub read_only: bool,
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Args)]
pub struct RefineArgs {
    /// The phase context (context_{phase_id}.json).
    pub context_file: PathBuf,
    /// The refined plan (refined_plan.json).
    pub refined_plan_file: PathBuf,
    /// Where refine_contexts/{phase_id}_result.json is written.
    pub run_dir: PathBuf,
    /// Executor profile [default: the config's default_executor, else builtin]
    #[arg(long, value_name = "NAME")]
    pub executor: Option<String>,
    /// TOML config file (executor profiles, prompt template, L0 concurrency).
    #[arg(long, env = "PLANGATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RefineRunArgs {
    /// The plan: `{task?, source_dir?, phases, assignments}` (or a whole
    /// `POST /v1/refine-runs` body with it under `plan`).
    pub plan_file: PathBuf,
    /// Where refine_contexts/ and refined_assignments.json are written.
    pub run_dir: PathBuf,
    /// Executor profile [default: the config's default_executor, else builtin]
    #[arg(long, value_name = "NAME")]
    pub executor: Option<String>,
    /// TOML config file (executor profiles, prompt template, concurrency).
    #[arg(long, env = "PLANGATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct HealthArgs {
    /// TOML config file; its `bind` applies when neither the flag nor the variable is set.
    #[arg(long, env = "PLANGATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The server's listen address, as for `serve`; 0.0.0.0 and [::] are probed on
    /// loopback [default: 127.0.0.1:8080]
    #[arg(long, env = "PLANGATE_BIND", value_name = "ADDR")]
    pub bind: Option<String>,
    /// Give up after this many seconds (connect, request and answer together).
    #[arg(long, value_name = "SECS", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub timeout_secs: u64,
}

impl HealthArgs {
    /// The address to probe: the server's bind setting (flag or environment, then
    /// the config file, then the default), with an unspecified IP replaced by
    /// loopback. Port 0 is refused: the server's port cannot be known.
    pub fn probe_address(&self) -> Result<SocketAddr, ConfigError> {
        let from_file = match (&self.bind, &self.config) {
            (None, Some(path)) => FileConfig::load(path)?.bind,
            _ => None,
        };
        let mut addr = parse_bind(self.bind.clone().or(from_file))?;
        if addr.port() == 0 {
            return Err(invalid(
                "PLANGATE_BIND",
                "port 0 picks a random port: there is no fixed port to probe",
            ));
        }
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        Ok(addr)
    }
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// JSON or YAML file holding the body of `POST /v1/loop-plans/generate`.
    pub file: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = PlanOutput::Md)]
    pub format: PlanOutput,
    /// A tracks.md whose completed rows are checked for overlap.
    #[arg(long, value_name = "FILE")]
    pub completed_tracks: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PlanOutput {
    Md,
    Json,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// JSON task list or planner output text.
    pub file: PathBuf,
    /// Files that pre-exist: a JSON array or one path a line.
    #[arg(long, value_name = "FILE")]
    pub existing_files: Option<PathBuf>,
    /// A git checkout whose `git ls-files` are the pre-existing files.
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ValidateFormat::Text)]
    pub format: ValidateFormat,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ValidateFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Pretty,
    Json,
}

/// Server settings as given on the command line or in the environment. Every field
/// is optional so that the config file can fill what neither names.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// TOML config file (executor profiles and every setting below).
    #[arg(long, env = "PLANGATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Listen address [default: 127.0.0.1:8080]
    #[arg(long, env = "PLANGATE_BIND", value_name = "ADDR")]
    pub bind: Option<String>,
    /// `sqlite://FILE` or `postgres://…` [default: sqlite://plangate.db]
    #[arg(long, env = "DATABASE_URL", value_name = "URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Log format [default: pretty on a terminal, else json]
    #[arg(long, env = "PLANGATE_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Comma-separated bearer tokens, each optionally limited to projects; empty means no auth
    ///
    /// Each entry is `TOKEN` (every project) or `TOKEN:PROJECT|PROJECT...` (only those
    /// project ids), e.g. `tok-aaaaaaaaaaaaaaaa,tok-bbbbbbbbbbbbbbbb:proj-a|proj-b`.
    /// A token has at least 16 characters and, in this form, no `,` or `:`; the config
    /// file's `[[api_tokens]]` tables (`value`, `projects`) take any token. A limited
    /// token gets 403 `forbidden_project` on other projects' resources.
    #[arg(
        long,
        env = "PLANGATE_API_TOKENS",
        hide_env_values = true,
        value_name = "TOKENS"
    )]
    pub api_tokens: Option<String>,
    /// Directory under which `task_file_path` may be read [default: unset = refused]
    #[arg(long, env = "PLANGATE_WORKSPACE_ROOT", value_name = "DIR")]
    pub workspace_root: Option<PathBuf>,
    /// Directory under which result files may be written [default: unset = refused]
    #[arg(long, env = "PLANGATE_OUTPUT_ROOT", value_name = "DIR")]
    pub output_root: Option<PathBuf>,
    /// Concurrent jobs per process [default: 4]
    #[arg(long, env = "PLANGATE_WORKERS")]
    pub workers: Option<u32>,
    /// Job lease in seconds [default: 60]
    #[arg(long, env = "PLANGATE_LEASE_SECS")]
    pub lease_secs: Option<u64>,
    /// Lease renewal period in seconds [default: 15]
    #[arg(long, env = "PLANGATE_HEARTBEAT_SECS")]
    pub heartbeat_secs: Option<u64>,
    /// How often expired leases are looked for, in seconds [default: 5]
    #[arg(long, env = "PLANGATE_REAPER_INTERVAL_SECS")]
    pub reaper_interval_secs: Option<u64>,
    /// Attempts before a job fails [default: 3]
    #[arg(long, env = "PLANGATE_MAX_ATTEMPTS")]
    pub max_attempts: Option<u32>,
    /// Drain time on SIGTERM, in seconds [default: 25]
    #[arg(long, env = "PLANGATE_SHUTDOWN_GRACE_SECS")]
    pub shutdown_grace_secs: Option<u64>,
    /// How long terminal jobs are kept, in days [default: 30]
    #[arg(long, env = "PLANGATE_RETENTION_DAYS")]
    pub retention_days: Option<u64>,
    /// Request timeout in seconds [default: 30]
    #[arg(long, env = "PLANGATE_REQUEST_TIMEOUT_SECS")]
    pub request_timeout_secs: Option<u64>,
    /// Request body limit in bytes [default: 16777216]
    #[arg(long, env = "PLANGATE_BODY_LIMIT_BYTES")]
    pub body_limit_bytes: Option<usize>,
    /// Concurrent L0s per refine job, 1 to 6 [default: 6]
    #[arg(long, env = "PLANGATE_L0_CONCURRENCY")]
    pub l0_concurrency: Option<usize>,
    /// L0 prompt template file replacing the shipped one [default: templates/l0_prompt.md, built in]
    #[arg(long, env = "PLANGATE_PROMPT_TEMPLATE", value_name = "FILE")]
    pub prompt_template: Option<PathBuf>,
}

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
    pub workers: Option<u32>,
    pub lease_secs: Option<u64>,
    pub heartbeat_secs: Option<u64>,
    pub reaper_interval_secs: Option<u64>,
    pub max_attempts: Option<u32>,
    pub shutdown_grace_secs: Option<u64>,
    pub retention_days: Option<u64>,
    pub request_timeout_secs: Option<u64>,
    pub body_limit_bytes: Option<usize>,
    pub l0_concurrency: Option<usize>,
    pub prompt_template: Option<PathBuf>,
    pub default_executor: Option<String>,
    #[serde(default)]
    pub executors: BTreeMap<String, ExecutorProfile>,
    /// `[prices."MODEL"]`: prices calls that report tokens but no cost.
    #[serde(default)]
    pub prices: Prices,
    /// `[budgets]`: the per-project daily spending limits.
    #[serde(default)]
    pub budgets: BudgetsConfig,
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

/// One `api_tokens` entry of the config file.
#[derive(Clone, Deserialize)]
#[serde(
    untagged,
    expecting = "a token string (\"TOKEN\" or \"TOKEN:proj-a|proj-b\") or a table { value = \"TOKEN\", projects = [..] }"
)]
pub enum TokenEntry {
    /// `TOKEN` or `TOKEN:proj-a|proj-b`, as in `PLANGATE_API_TOKENS`.
    Spec(String),
    /// `{ value, projects? }`: the token is taken whole (it may hold `:` or `,`);
    /// no `projects` means every project.
    Table {
        value: String,
        projects: Option<Vec<String>>,
    },
}

/// Never print a token, not even in a debug dump of the config.
impl std::fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenEntry::Spec(_) => f.write_str("TokenEntry::Spec(<redacted>)"),
            TokenEntry::Table { projects, .. } => f
                .debug_struct("TokenEntry::Table")
                .field("value", &"<redacted>")
                .field("projects", projects)
                .finish(),
        }
    }
}

/// A configured bearer token and the projects it may act on.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken {
    value: String,
    /// `None`: every project; otherwise these project ids only (never empty).
    projects: Option<Arc<[String]>>,
}

/// Shortest token accepted, in bytes.
pub const MIN_TOKEN_LEN: usize = 16;

impl ApiToken {
    /// A token valid for every project (unchecked: [`Settings::merge`] checks the
    /// configured ones). Handy in tests.
    pub fn unrestricted(value: impl Into<String>) -> Self {
        ApiToken {
            value: value.into(),
            projects: None,
        }
    }

    /// A token limited to `projects` (unchecked, like [`ApiToken::unrestricted`]).
    pub fn limited(value: impl Into<String>, projects: &[&str]) -> Self {
        ApiToken {
            value: value.into(),
            projects: Some(projects.iter().map(|p| (*p).to_owned()).collect()),
        }
    }

    /// Parse `TOKEN` or `TOKEN:proj-a|proj-b`. Errors never contain the token.
    pub fn parse(spec: &str) -> Result<Self, String> {
        match spec.trim().split_once(':') {
            None => Self::checked(spec.trim().to_owned(), None),
            Some((value, projects)) => Self::checked(
                value.trim().to_owned(),
                Some(projects.split('|').map(|p| p.trim().to_owned()).collect()),
            ),
        }
    }

    fn checked(value: String, projects: Option<Vec<String>>) -> Result<Self, String> {
        if value.len() < MIN_TOKEN_LEN {
            // Never echo the token itself: logs and terminals are not secret.
            return Err(format!(
                "every token needs at least {MIN_TOKEN_LEN} characters (one has {})",
                value.len()
            ));
        }
        if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("a token may not contain spaces or control characters".to_owned());
        }
        let projects = match projects {
            None => None,
            Some(list) => {
                if list.is_empty() || list.iter().all(|p| p.is_empty()) {
                    return Err("a token limited to projects must name at least one".to_owned());
                }
                for project in &list {
                    crate::domain::ids::Ident::parse("project_id", project)
                        .map_err(|e| format!("a token's project list: {e}"))?;
                }
                Some(list.into())
            }
        };
        Ok(ApiToken { value, projects })
    }

    /// The secret, for the constant-time comparison in the auth middleware only.
    pub fn secret(&self) -> &[u8] {
        self.value.as_bytes()
    }

    /// `None` when the token may act on every project.
    pub fn projects(&self) -> Option<&Arc<[String]>> {
        self.projects.as_ref()
    }
}

impl From<&str> for ApiToken {
    /// [`ApiToken::unrestricted`].
    fn from(value: &str) -> Self {
        ApiToken::unrestricted(value)
    }
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiToken")
            .field("value", &"<redacted>")
            .field("projects", &self.projects)
            .finish()
    }
}

/// Parse every configured token; duplicates are refused (which of two entries
/// would apply is not obvious). Errors name the entry by position, never the token.
fn parse_tokens(
    entries: impl IntoIterator<Item = Result<ApiToken, String>>,
) -> Result<Vec<ApiToken>, ConfigError> {
    let mut tokens: Vec<ApiToken> = Vec::new();
    for (n, entry) in entries.into_iter().enumerate() {
        let token =
            entry.map_err(|m| invalid("PLANGATE_API_TOKENS", format!("entry {}: {m}", n + 1)))?;
        if tokens.iter().any(|t| t.value == token.value) {
            return Err(invalid(
                "PLANGATE_API_TOKENS",
                format!("entry {} repeats an earlier token", n + 1),
            ));
        }
        tokens.push(token);
    }
    Ok(tokens)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorKind {
    Command,
    Openai,
    Anthropic,
    Builtin,
}

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
    pub output: crate::agents::OutputFormat,
}

pub use crate::db::DatabaseKind;

/// The validated settings the server runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub bind: SocketAddr,
    pub database_url: String,
    pub log_format: LogFormat,
    /// Empty: no auth.
    pub api_tokens: Vec<ApiToken>,
    pub workspace_root: Option<PathBuf>,
    pub output_root: Option<PathBuf>,
    pub workers: u32,
    pub lease: Duration,
    pub heartbeat: Duration,
    pub reaper_interval: Duration,
    pub max_attempts: u32,
    pub shutdown_grace: Duration,
    pub retention: Duration,
    pub request_timeout: Duration,
    pub body_limit: usize,
    /// Concurrent L0s per job, `1..=MAX_PARALLEL`.
    pub l0_concurrency: usize,
    /// The L0 prompt template text (the shipped one unless configured).
    pub prompt_template: String,
    pub default_executor: String,
    pub executors: BTreeMap<String, ExecutorProfile>,
    pub prices: Prices,
    pub budgets: BudgetsConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid {name}: {message}")]
    Invalid { name: &'static str, message: String },
}

fn invalid(name: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        name,
        message: message.into(),
    }
}

/// The listen address, [`DEFAULT_BIND`] when nothing sets it (shared by `serve` and
/// `health`, so the probe always finds the server).
fn parse_bind(text: Option<String>) -> Result<SocketAddr, ConfigError> {
    let text = text.unwrap_or_else(|| DEFAULT_BIND.to_owned());
    text.parse().map_err(|_| {
        invalid(
            "PLANGATE_BIND",
            format!("{text:?} is not an address like 127.0.0.1:8080"),
        )
    })
}

/// Where the server listens unless told otherwise.
pub const DEFAULT_BIND: &str = "127.0.0.1:8080";

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

impl Settings {
    /// Merge flags/environment over the config file over the defaults, and check
    /// every value.
    pub fn resolve(args: &ServeArgs) -> Result<Self, ConfigError> {
        let file = match &args.config {
            Some(path) => FileConfig::load(path)?,
            None => FileConfig::default(),
        };
        Self::merge(args, file)
    }

    pub fn merge(args: &ServeArgs, file: FileConfig) -> Result<Self, ConfigError> {
        let bind = parse_bind(args.bind.clone().or(file.bind))?;
        let database_url = args
            .database_url
            .clone()
            .or(file.database_url)
            .unwrap_or_else(|| "sqlite://plangate.db".to_owned());
        database_kind(&database_url)?;

        let log_format = args.log_format.or(file.log_format).unwrap_or_else(|| {
            use std::io::IsTerminal;
            if std::io::stdout().is_terminal() {
                LogFormat::Pretty
            } else {
                LogFormat::Json
            }
        });
        let api_tokens =
            match &args.api_tokens {
                Some(list) => parse_tokens(
                    list.split(',')
                        .filter(|t| !t.trim().is_empty())
                        .map(ApiToken::parse),
                )?,
                None => parse_tokens(file.api_tokens.unwrap_or_default().into_iter().map(
                    |entry| match entry {
                        TokenEntry::Spec(spec) => ApiToken::parse(&spec),
                        TokenEntry::Table { value, projects } => ApiToken::checked(value, projects),
                    },
                ))?,
            };

        let positive = |name: &'static str, value: Option<u64>, default: u64| {
            let v = value.unwrap_or(default);
            if v == 0 {
                Err(invalid(name, "must be at least 1"))
            } else {
                Ok(v)
            }
        };
        let workers = positive(
            "PLANGATE_WORKERS",
            args.workers.or(file.workers).map(u64::from),
            4,
        )?;
        let lease = positive(
            "PLANGATE_LEASE_SECS",
            args.lease_secs.or(file.lease_secs),
            60,
        )?;
        let heartbeat = positive(
            "PLANGATE_HEARTBEAT_SECS",
            args.heartbeat_secs.or(file.heartbeat_secs),
            15,
        )?;
        if heartbeat >= lease {
            return Err(invalid(
                "PLANGATE_HEARTBEAT_SECS",
                format!(
                    "must be shorter than the lease ({lease} s), or leases expire between heartbeats"
                ),
            ));
        }
        let reaper = positive(
            "PLANGATE_REAPER_INTERVAL_SECS",
            args.reaper_interval_secs.or(file.reaper_interval_secs),
            5,
        )?;
        let max_attempts = positive(
            "PLANGATE_MAX_ATTEMPTS",
            args.max_attempts.or(file.max_attempts).map(u64::from),
            3,
        )?;
        let shutdown_grace = args
            .shutdown_grace_secs
            .or(file.shutdown_grace_secs)
            .unwrap_or(25);
        let retention_days = positive(
            "PLANGATE_RETENTION_DAYS",
            args.retention_days.or(file.retention_days),
            30,
        )?;
        let request_timeout = positive(
            "PLANGATE_REQUEST_TIMEOUT_SECS",
            args.request_timeout_secs.or(file.request_timeout_secs),
            30,
        )?;
        let body_limit = args
            .body_limit_bytes
            .or(file.body_limit_bytes)
            .unwrap_or(DEFAULT_BODY_LIMIT);
        if body_limit < 1024 {
            return Err(invalid(
                "PLANGATE_BODY_LIMIT_BYTES",
                "must be at least 1024",
            ));
        }

        let l0_concurrency = args
            .l0_concurrency
            .or(file.l0_concurrency)
            .unwrap_or(MAX_PARALLEL);
        if !(1..=MAX_PARALLEL).contains(&l0_concurrency) {
            return Err(invalid(
                "PLANGATE_L0_CONCURRENCY",
                format!("must be between 1 and {MAX_PARALLEL} (got {l0_concurrency})"),
            ));
        }
        let prompt_template = match args.prompt_template.clone().or(file.prompt_template) {
            None => DEFAULT_PROMPT_TEMPLATE.to_owned(),
            Some(path) => std::fs::read_to_string(&path).map_err(|e| {
                invalid(
                    "PLANGATE_PROMPT_TEMPLATE",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?,
        };

        let default_executor = file
            .default_executor
            .unwrap_or_else(|| "builtin".to_owned());
        if default_executor != "builtin" && !file.executors.contains_key(&default_executor) {
            return Err(invalid(
                "default_executor",
                format!("{default_executor:?} names no [executors.*] profile"),
            ));
        }
        for (name, profile) in &file.executors {
            if profile.kind == ExecutorKind::Command && profile.argv.is_empty() {
                return Err(invalid(
                    "executors",
                    format!("[executors.{name}] of kind \"command\" needs a non-empty argv"),
                ));
            }
        }

        for (model, price) in &file.prices {
            price.check(model).map_err(|m| invalid("prices", m))?;
        }
        let limits = file
            .budgets
            .project_daily_cost_usd
            .iter()
            .map(|l| ("project_daily_cost_usd".to_owned(), *l))
            .chain(
                file.budgets
                    .projects
                    .iter()
                    .map(|(p, l)| (format!("projects.{p}"), *l)),
            );
        for (name, limit) in limits {
            if !limit.is_finite() || limit < 0.0 {
                return Err(invalid(
                    "budgets",
                    format!("[budgets] {name} must be a non-negative number of dollars"),
                ));
            }
        }

        Ok(Settings {
            bind,
            database_url,
            log_format,
            api_tokens,
            workspace_root: args.workspace_root.clone().or(file.workspace_root),
            output_root: args.output_root.clone().or(file.output_root),
            // `positive` took these from u32, so they fit back.
            workers: u32::try_from(workers).unwrap_or(u32::MAX),
            lease: Duration::from_secs(lease),
            heartbeat: Duration::from_secs(heartbeat),
            reaper_interval: Duration::from_secs(reaper),
            max_attempts: u32::try_from(max_attempts).unwrap_or(u32::MAX),
            shutdown_grace: Duration::from_secs(shutdown_grace),
            retention: Duration::from_secs(retention_days.saturating_mul(86_400)),
            request_timeout: Duration::from_secs(request_timeout),
            body_limit,
            l0_concurrency,
            prompt_template,
            default_executor,
            executors: file.executors,
            prices: file.prices,
            budgets: file.budgets,
        })
    }

    pub fn database_kind(&self) -> DatabaseKind {
        // Checked in `merge`.
        database_kind(&self.database_url).unwrap_or(DatabaseKind::Sqlite)
    }
}

pub fn database_kind(url: &str) -> Result<DatabaseKind, ConfigError> {
    DatabaseKind::of_url(url)
        .ok_or_else(|| invalid("DATABASE_URL", "must start with sqlite:// or postgres://"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> FileConfig {
        toml::from_str(text).expect("test config parses")
    }

    #[test]
    fn flags_override_file_and_defaults_fill_the_rest() {
        let args = ServeArgs {
            bind: Some("127.0.0.1:9999".into()),
            ..Default::default()
        };
        let s = Settings::merge(&args, file("bind = \"0.0.0.0:1\"\nworkers = 7")).unwrap();
        assert_eq!(s.bind.port(), 9999);
        assert_eq!(s.workers, 7);
        assert_eq!(s.database_url, "sqlite://plangate.db");
        assert_eq!(s.lease, Duration::from_secs(60));
        assert_eq!(s.body_limit, DEFAULT_BODY_LIMIT);
    }

    #[test]
    fn bad_values_fail_with_the_setting_name() {
        let bad =
            |args: ServeArgs, f: &str| Settings::merge(&args, file(f)).unwrap_err().to_string();
        assert!(
            bad(
                ServeArgs {
                    bind: Some("nowhere".into()),
                    ..Default::default()
                },
                ""
            )
            .contains("PLANGATE_BIND")
        );
        assert!(
            bad(
                ServeArgs {
                    database_url: Some("mysql://x".into()),
                    ..Default::default()
                },
                ""
            )
            .contains("DATABASE_URL")
        );
        assert!(bad(ServeArgs::default(), "workers = 0").contains("PLANGATE_WORKERS"));
        assert!(
            bad(ServeArgs::default(), "lease_secs = 10\nheartbeat_secs = 10")
                .contains("PLANGATE_HEARTBEAT_SECS")
        );
        assert!(bad(ServeArgs::default(), "default_executor = \"nope\"").contains("nope"));
        let short = bad(
            ServeArgs {
                api_tokens: Some("secret-short".into()),
                ..Default::default()
            },
            "",
        );
        assert!(short.contains("PLANGATE_API_TOKENS") && !short.contains("secret-short"));
    }

    #[test]
    fn unknown_file_keys_and_kinds_are_refused() {
        assert!(toml::from_str::<FileConfig>("wokers = 3").is_err());
        assert!(toml::from_str::<FileConfig>("[executors.x]\nkind = \"shell\"").is_err());
        let f = file("[executors.x]\nkind = \"command\"");
        assert!(
            Settings::merge(&ServeArgs::default(), f)
                .unwrap_err()
                .to_string()
                .contains("argv")
        );
    }

    #[test]
    fn api_tokens_split_on_commas() {
        let args = ServeArgs {
            api_tokens: Some(" aaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbb ,".into()),
            ..Default::default()
        };
        let s = Settings::merge(&args, FileConfig::default()).unwrap();
        assert_eq!(s.api_tokens.len(), 2);
        assert!(s.api_tokens.iter().all(|t| t.projects().is_none()));
    }

    #[test]
    fn api_tokens_may_be_limited_to_projects_in_the_variable() {
        let args = ServeArgs {
            api_tokens: Some("aaaaaaaaaaaaaaaa,bbbbbbbbbbbbbbbb: proj-a | proj-b ".into()),
            ..Default::default()
        };
        let s = Settings::merge(&args, FileConfig::default()).unwrap();
        assert_eq!(s.api_tokens[0], ApiToken::unrestricted("aaaaaaaaaaaaaaaa"));
        assert_eq!(
            s.api_tokens[1],
            ApiToken::limited("bbbbbbbbbbbbbbbb", &["proj-a", "proj-b"])
        );
    }

    #[test]
    fn api_tokens_in_the_file_take_strings_and_tables() {
        let inline = file(
            r#"api_tokens = ["aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb:p1|p2", { value = "cc:cc,cccccccccccccc", projects = ["p3"] }]"#,
        );
        let s = Settings::merge(&ServeArgs::default(), inline).unwrap();
        assert_eq!(
            s.api_tokens,
            vec![
                ApiToken::unrestricted("aaaaaaaaaaaaaaaa"),
                ApiToken::limited("bbbbbbbbbbbbbbbb", &["p1", "p2"]),
                ApiToken::limited("cc:cc,cccccccccccccc", &["p3"]),
            ]
        );
        let tables = file(
            "[[api_tokens]]\nvalue = \"dddddddddddddddd\"\nprojects = [\"p4\"]\n\
             [[api_tokens]]\nvalue = \"eeeeeeeeeeeeeeee\"\n",
        );
        let s = Settings::merge(&ServeArgs::default(), tables).unwrap();
        assert_eq!(
            s.api_tokens,
            vec![
                ApiToken::limited("dddddddddddddddd", &["p4"]),
                ApiToken::unrestricted("eeeeeeeeeeeeeeee"),
            ]
        );
        // The variable wins over the file, as for every setting.
        let args = ServeArgs {
            api_tokens: Some("ffffffffffffffff".into()),
            ..Default::default()
        };
        let s = Settings::merge(&args, file(r#"api_tokens = ["aaaaaaaaaaaaaaaa"]"#)).unwrap();
        assert_eq!(
            s.api_tokens,
            vec![ApiToken::unrestricted("ffffffffffffffff")]
        );
        assert!(toml::from_str::<FileConfig>("[[api_tokens]]\nvalu = \"x\"").is_err());
    }

    #[test]
    fn bad_token_entries_fail_without_echoing_the_token() {
        let secret = "secret-0123456789abcdef";
        for spec in [
            format!("{secret}:"),
            format!("{secret}:a||b"),
            format!("{secret}:ok|bad\u{7}"),
            format!("{secret},{secret}:p"),
            "short:p".to_owned(),
        ] {
            let args = ServeArgs {
                api_tokens: Some(spec.clone()),
                ..Default::default()
            };
            let err = Settings::merge(&args, FileConfig::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("PLANGATE_API_TOKENS"), "{spec}: {err}");
            assert!(!err.contains("secret") && !err.contains("short"), "{err}");
        }
        let err = Settings::merge(
            &ServeArgs::default(),
            file(r#"api_tokens = [{ value = "secret-0123456789abcdef", projects = [] }]"#),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("at least one") && !err.contains("secret"),
            "{err}"
        );
        let dump = format!("{:?}", ApiToken::limited(secret, &["p"]));
        assert!(!dump.contains(secret), "{dump}");
    }
}
