//! Command-line entry points: `serve` (the default), `migrate`, `validate`, `plan`,
//! `openapi`, `refine`, `refine-run`, `mcp`, `track`, `health`.
//! Every failure at start is one line on stderr and a non-zero exit.

use std::process::ExitCode;

use tokio::net::TcpListener;

use crate::config::{LogFormat, ServeArgs, Settings};
use args::{Cli, Command, McpArgs, TrackArgs};

pub mod args;
pub mod health;
pub mod plan;
pub mod refine;
pub mod track;
pub mod validate;

pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        None => serve(&cli.serve),
        Some(Command::Serve(args)) => serve(&args),
        Some(Command::Migrate(args)) => migrate(&args),
        Some(Command::Validate(args)) => exit(validate::run(
            &args.file,
            args.existing_files.as_deref(),
            args.repo.as_deref(),
            args.format,
            &mut std::io::stdout().lock(),
            &mut std::io::stderr().lock(),
        )),
        Some(Command::Plan(args)) => exit(plan::run(
            &args.file,
            args.format,
            args.completed_tracks.as_deref(),
            &mut std::io::stdout().lock(),
            &mut std::io::stderr().lock(),
        )),
        Some(Command::Refine(args)) => {
            let executor = args.profile.executor.as_deref();
            with_settings(&cli.serve, args.profile.config.clone(), |settings| {
                let plan = &args.refined_plan_file;
                refine::refine(settings, &args.context_file, plan, &args.run_dir, executor)
            })
        }
        Some(Command::RefineRun(args)) => {
            let executor = args.profile.executor.as_deref();
            with_settings(&cli.serve, args.profile.config.clone(), |settings| {
                refine::refine_run(settings, &args.plan_file, &args.run_dir, executor)
            })
        }
        Some(Command::Health(args)) => {
            let outcome = crate::config::probe_address(args.bind.clone(), args.config.as_deref())
                .map_err(|e| e.to_string())
                .and_then(|addr| {
                    health::probe(addr, std::time::Duration::from_secs(args.timeout_secs))
                        .map(|()| addr)
                        .map_err(|e| e.to_string())
                });
            match outcome {
                Ok(addr) => {
                    println!("plangate health: http://{addr}/healthz 200");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(format!("unhealthy: {e}")),
            }
        }
        Some(Command::Mcp(args)) => mcp(&args),
        Some(Command::Track(args)) => track(&cli.serve, args),
        Some(Command::Openapi) => match crate::http::openapi().to_pretty_json() {
            Ok(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(format!("cannot render the OpenAPI document: {e}")),
        },
    }
}

/// Settings for the in-process commands: the environment (`PLANGATE_WORKERS`,
/// `PLANGATE_L0_CONCURRENCY`, `PLANGATE_PROMPT_TEMPLATE`, ...) as parsed with the
/// command line, then the config file, then the defaults — as for the server,
/// minus its flags.
fn cli_settings(env: &ServeArgs, config: Option<std::path::PathBuf>) -> Option<Settings> {
    let mut args = env.clone();
    args.config = config.or(args.config);
    match Settings::resolve(&args) {
        Ok(settings) => Some(settings),
        Err(e) => {
            eprintln!("plangate: {e}");
            None
        }
    }
}

/// A command's status as the process's exit code (2 when it does not fit a byte).
fn exit(status: i32) -> ExitCode {
    ExitCode::from(u8::try_from(status).unwrap_or(2))
}

/// Runs an in-process command with [`cli_settings`]; 2 when they do not resolve.
fn with_settings(
    env: &ServeArgs,
    config: Option<std::path::PathBuf>,
    run: impl FnOnce(&Settings) -> i32,
) -> ExitCode {
    exit(cli_settings(env, config).map_or(2, |settings| run(&settings)))
}

/// Parses the command line and the `PLANGATE_*` environment. A malformed variable
/// is an error that names the variable (clap alone names the flag it stands for).
pub fn parse() -> Result<Cli, ExitCode> {
    use clap::{CommandFactory, Parser};
    Cli::try_parse().map_err(|error| match malformed_variable(&error, &Cli::command()) {
        Some(message) => {
            eprintln!("plangate: {message}");
            ExitCode::from(2)
        }
        None => {
            let _ = error.print();
            exit(error.exit_code())
        }
    })
}

/// "invalid PLANGATE_X=value: reason" when `error` is about a value that came
/// from an environment variable.
fn malformed_variable(error: &clap::Error, command: &clap::Command) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        error.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) {
        return None;
    }
    let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let Some(ContextValue::String(value)) = error.get(ContextKind::InvalidValue) else {
        return None;
    };
    let long = arg.split_whitespace().next()?.strip_prefix("--")?;
    let variable = env_of(command, long)?;
    // Only when the variable holds the refused value (not a flag on the line).
    if std::env::var_os(&variable).as_deref() != Some(std::ffi::OsStr::new(value)) {
        return None;
    }
    let reason = std::error::Error::source(error)
        .map(|e| format!(": {e}"))
        .unwrap_or_default();
    Some(format!(
        "invalid {}={value:?}{reason}",
        variable.to_string_lossy()
    ))
}

/// The environment variable behind `--long` in `command` or its subcommands.
fn env_of(command: &clap::Command, long: &str) -> Option<std::ffi::OsString> {
    command
        .get_arguments()
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_env().map(ToOwned::to_owned))
        .or_else(|| command.get_subcommands().find_map(|c| env_of(c, long)))
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("plangate: {message}");
    ExitCode::FAILURE
}

/// Starts the logs (and traces), then runs `main` on a new runtime; the runtime
/// stops before the last spans go out (docs/observability.md).
fn on_runtime<F>(log_format: LogFormat, main: impl FnOnce() -> F) -> ExitCode
where
    F: Future<Output = ExitCode>,
{
    let telemetry = match crate::telemetry::init(log_format) {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(e),
    };
    let code = rt.block_on(main());
    drop(rt);
    telemetry.shutdown();
    code
}

fn serve(args: &ServeArgs) -> ExitCode {
    let settings = match Settings::resolve(args) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    on_runtime(settings.log_format, || async move {
        let db = match crate::service::open_database(&settings).await {
            Ok(db) => db,
            Err(e) => return fail(format!("cannot open the database: {e}")),
        };
        let listener = match TcpListener::bind(settings.bind).await {
            Ok(l) => l,
            Err(e) => return fail(format!("cannot listen on {}: {e}", settings.bind)),
        };
        match crate::app::serve(listener, settings, db, crate::app::shutdown_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e),
        }
    })
}

/// `plangate mcp [--read-only]`: the MCP tools over stdio (docs/mcp.md).
fn mcp(args: &McpArgs) -> ExitCode {
    let (settings, default_database) = match Settings::resolve_local(&args.serve) {
        Ok(resolved) => resolved,
        Err(e) => return fail(e),
    };
    let surface = if args.read_only {
        crate::mcp::Surface::ReadOnly
    } else {
        crate::mcp::Surface::Full
    };
    // Logs go to stderr (telemetry writes nowhere else): stdout is the protocol's.
    on_runtime(settings.log_format, || async move {
        if let Some(path) = default_database {
            // The agent's working directory is no place for it: say where it is.
            tracing::info!(
                database = %path.display(),
                "no DATABASE_URL: using the SQLite file in the user's data directory"
            );
        }
        let db = match crate::service::open_database(&settings).await {
            Ok(db) => db,
            Err(e) => return fail(format!("cannot open the database: {e}")),
        };
        match crate::app::serve_mcp_stdio(settings, db, surface).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e),
        }
    })
}

/// `plangate track import|show|step`: on the database `plangate mcp` would use, with
/// the rest of the settings from the environment (as [`cli_settings`]).
fn track(env: &ServeArgs, args: TrackArgs) -> ExitCode {
    let mut serve = env.clone();
    serve.config = args.config.or(serve.config);
    serve.database_url = args.database_url.or(serve.database_url);
    let settings = match Settings::resolve_local(&serve) {
        Ok((settings, _)) => settings,
        Err(e) => {
            eprintln!("plangate: {e}");
            return ExitCode::from(track::EXIT_FAILED);
        }
    };
    ExitCode::from(track::run(settings, args.command))
}

fn migrate(args: &ServeArgs) -> ExitCode {
    let settings = match Settings::resolve(args) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    on_runtime(settings.log_format, || async {
        match crate::service::open_database(&settings).await {
            Ok(db) => {
                db.close().await;
                eprintln!("plangate: migrations applied");
                ExitCode::SUCCESS
            }
            Err(e) => fail(format!("cannot migrate the database: {e}")),
        }
    })
}

/// A temporary directory with files, for the command tests.
#[cfg(test)]
pub(crate) mod test_support {
    use std::io::Write;
    use std::path::PathBuf;

    /// Output that always fails, like stdout into a closed pipe.
    pub struct Broken;

    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("closed"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::Error::other("closed"))
        }
    }

    pub struct Scratch(tempfile::TempDir);

    impl Scratch {
        pub fn new(_name: &str) -> Self {
            Scratch(tempfile::tempdir().expect("temporary directory"))
        }

        /// Where `name` would be in the directory (the file need not exist).
        pub fn path(&self, name: &str) -> PathBuf {
            self.0.path().join(name)
        }

        pub fn file(&self, name: &str, contents: &str) -> PathBuf {
            let path = self.0.path().join(name);
            std::fs::write(&path, contents).expect("write a scratch file");
            path
        }
    }
}
