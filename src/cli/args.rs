//! The command tree: subcommands and their flags, each flag with its variable. The
//! server's own flags, [`ServeArgs`], belong to the settings they feed and live in
//! `config`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::plan::PlanFormat;
use super::validate::OutputFormat;
use crate::config::ServeArgs;
use crate::service::tracks::StepAction;

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
    Validate(ValidateFileArgs),
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
        action: StepAction,
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
    #[command(flatten)]
    pub profile: ProfileArgs,
}

#[derive(Debug, Args)]
pub struct RefineRunArgs {
    /// The plan: `{task?, source_dir?, phases, assignments}` (or a whole
    /// `POST /v1/refine-runs` body with it under `plan`).
    pub plan_file: PathBuf,
    /// Where refine_contexts/ and refined_assignments.json are written.
    pub run_dir: PathBuf,
    #[command(flatten)]
    pub profile: ProfileArgs,
}

/// Which executor an in-process refine (`refine`, `refine-run`) uses, and the
/// config that defines it.
#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// Executor profile [default: the config's default_executor, else builtin]
    #[arg(long, value_name = "NAME")]
    pub executor: Option<String>,
    /// TOML config file (executor profiles, prompt template, L0 concurrency).
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

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// JSON or YAML file holding the body of `POST /v1/loop-plans/generate`.
    pub file: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = PlanFormat::Md)]
    pub format: PlanFormat,
    /// A tracks.md whose completed rows are checked for overlap.
    #[arg(long, value_name = "FILE")]
    pub completed_tracks: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ValidateFileArgs {
    /// JSON task list or planner output text.
    pub file: PathBuf,
    /// Files that pre-exist: a JSON array or one path a line.
    #[arg(long, value_name = "FILE")]
    pub existing_files: Option<PathBuf>,
    /// A git checkout whose `git ls-files` are the pre-existing files.
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}
