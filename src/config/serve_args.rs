//! The server's settings as given on the command line or in the environment (clap
//! merges the two); the config file fills what neither names.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Deserialize;

/// Default request body limit: 16 MiB (docs/spec/operations.md).
pub const DEFAULT_BODY_LIMIT: usize = 16 * 1024 * 1024;

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
    /// Private directory (0700) for copies of inline task text [default: $TMPDIR/plangate-tasks-UID]
    #[arg(long, env = "PLANGATE_TASK_DIR", value_name = "DIR")]
    pub task_dir: Option<PathBuf>,
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
    /// Errors (and warnings) a gating answer lists, at least 1 [default: 100]
    #[arg(long, env = "PLANGATE_MAX_GATING_ERRORS")]
    pub max_gating_errors: Option<usize>,
    /// Bytes of large task-list bodies gated at once [default: 67108864]
    #[arg(long, env = "PLANGATE_GATING_BUDGET_BYTES")]
    pub gating_budget_bytes: Option<u64>,
    /// SQLite's `synchronous`: off, normal, full or extra [default: normal]
    #[arg(long, env = "PLANGATE_SQLITE_SYNCHRONOUS")]
    pub sqlite_synchronous: Option<String>,
    /// Request body limit in bytes [default: 16777216]
    #[arg(long, env = "PLANGATE_BODY_LIMIT_BYTES")]
    pub body_limit_bytes: Option<usize>,
    /// Concurrent L0s per refine job, 1 to 6 [default: 6]
    #[arg(long, env = "PLANGATE_L0_CONCURRENCY")]
    pub l0_concurrency: Option<usize>,
    /// L0 prompt template file replacing the shipped one [default: templates/l0_prompt.md, built in]
    #[arg(long, env = "PLANGATE_PROMPT_TEMPLATE", value_name = "FILE")]
    pub prompt_template: Option<PathBuf>,
    /// Comma-separated web origins allowed besides the server's own, e.g. `https://plangate.example.com` [default: none]
    #[arg(long, env = "PLANGATE_ALLOWED_ORIGINS", value_name = "ORIGINS")]
    pub allowed_origins: Option<String>,
    /// Comma-separated host names a loopback-bound server answers to besides localhost, 127.0.0.1 and [::1] [default: none]
    #[arg(long, env = "PLANGATE_ALLOWED_HOSTS", value_name = "HOSTS")]
    pub allowed_hosts: Option<String>,
    /// Seconds a client has to send a request's headers [default: 10]
    #[arg(long, env = "PLANGATE_HEADER_READ_TIMEOUT_SECS")]
    pub header_read_timeout_secs: Option<u64>,
    /// Seconds a keep-alive connection may wait for its next request [default: 60]
    #[arg(long, env = "PLANGATE_IDLE_TIMEOUT_SECS")]
    pub idle_timeout_secs: Option<u64>,
    /// Open connections kept at most; at the cap the oldest idle one is closed [default: from the file-descriptor limit]
    #[arg(long, env = "PLANGATE_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Dashboard session lifetime in seconds [default: 43200]
    #[arg(long, env = "PLANGATE_SESSION_TTL_SECS")]
    pub session_ttl_secs: Option<u64>,
    /// Seconds a webhook delivery attempt may take before it counts as failed [default: 10]
    #[arg(long, env = "PLANGATE_WEBHOOK_TIMEOUT_SECS")]
    pub webhook_timeout_secs: Option<u64>,
    /// Comma-separated seconds to wait after the 1st, 2nd … failed webhook attempt [default: 5,300,1800,7200,18000,36000,36000]
    #[arg(long, env = "PLANGATE_WEBHOOK_RETRY_SCHEDULE", value_name = "SECS")]
    pub webhook_retry_schedule: Option<String>,
    /// Let webhooks target loopback, private and link-local addresses (local development and tests) [default: false]
    #[arg(long, env = "PLANGATE_WEBHOOK_ALLOW_PRIVATE")]
    pub webhook_allow_private: Option<bool>,
}
