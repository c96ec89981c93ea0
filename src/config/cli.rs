//! The command tree: subcommands and their flags, each flag with its variable.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Deserialize;

use super::{ConfigError, FileConfig, invalid, parse_bind};

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
    /// stdout carries JSON-RPC only; logs go to stderr. With no DATABASE_URL:
    /// $XDG_DATA_HOME/plangate/plangate.db, else ~/.local/share/plangate/plangate.db.
    Mcp(McpArgs),
    /// Import, show and step tracks (metadata.json v2) in-process on the database
    /// `plangate mcp` uses, as `PUT /v1/tracks/{id}` and the step routes do; answers JSON on
    /// stdout, a refusal is one line `plangate: CODE: detail` on stderr.
    Track(TrackArgs),
}

#[derive(Debug, Args)]
pub struct TrackArgs {
    #[command(subcommand)]
    pub command: TrackCommand,
    /// TOML config file (its database_url and sqlite_synchronous apply).
    #[arg(long, env = "PLANGATE_CONFIG", value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// `sqlite://FILE` or `postgres://…` [default: as `plangate mcp`,
    /// $XDG_DATA_HOME/plangate/plangate.db, else ~/.local/share/plangate/plangate.db]
    #[arg(
        long,
        env = "DATABASE_URL",
        value_name = "URL",
        hide_env_values = true,
        global = true
    )]
    pub database_url: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum TrackCommand {
    /// Import (create or replace) a track from its metadata.json (v1 is upgraded).
    Import {
        /// The metadata.json file (`-` reads stdin).
        file: PathBuf,
        /// The track id [default: the document's track_id]
        #[arg(long, value_name = "ID")]
        id: Option<String>,
        /// The project the track belongs to (a replace without it keeps the stored one).
        #[arg(long, value_name = "PROJECT")]
        project: Option<String>,
        /// Replace only this revision (a previous answer's `revision`).
        #[arg(long, value_name = "REV")]
        if_match: Option<i64>,
    },
    /// Print a track's metadata with its revision.
    Show {
        /// The track id.
        id: String,
    },
    /// Start or complete the track's current loop step.
    Step {
        /// The track id.
        id: String,
        /// PLAN, EVALUATE_PLAN, EXECUTE, EVALUATE_EXECUTION, FIX or BUSINESS_SYNC.
        #[arg(long)]
        step: String,
        #[arg(long, value_enum)]
        action: TrackAction,
        /// With complete (required there): PASSED, FAILED or BLOCKED.
        #[arg(long)]
        outcome: Option<String>,
        /// With start (required there): who works on the step.
        #[arg(long)]
        agent: Option<String>,
        /// Apply only to this revision (a previous answer's `revision`).
        #[arg(long, value_name = "REV")]
        if_match: Option<i64>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TrackAction {
    Start,
    Complete,
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
}
