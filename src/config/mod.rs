//! Configuration: flags > environment > TOML file > defaults.
//!
//! Every setting has one name: a flag, an environment variable (clap's `env`) and a
//! key in the config file. clap merges flags and environment; the file sits below
//! both, so each clap argument is an `Option` and falls back to the file, then to the
//! default. A bad value fails at start with one line, never at the first request.
//!
//! `serve_args` holds the server's flags and variables (the command tree around
//! them is `crate::cli::args`), `file` the TOML file, `tokens` the API tokens; this
//! module merges them into [`Settings`].

mod file;
mod perimeter;
mod serve_args;
mod tokens;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::domain::gating::DEFAULT_MAX_ERRORS;
use crate::domain::refine::{DEFAULT_PROMPT_TEMPLATE, MAX_PARALLEL};
use crate::domain::usage::Prices;

pub use crate::db::{DatabaseKind, SqliteSync};
pub use file::*;
pub use perimeter::*;
pub use serve_args::*;
use tokens::parse_tokens;
pub use tokens::{ApiToken, MIN_TOKEN_LEN, TokenEntry};

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
    /// Private copies of inline task text (docs/jobs.md, "Task files").
    pub task_dir: PathBuf,
    pub workers: u32,
    pub lease: Duration,
    pub heartbeat: Duration,
    pub reaper_interval: Duration,
    pub max_attempts: u32,
    pub shutdown_grace: Duration,
    pub retention: Duration,
    pub request_timeout: Duration,
    pub body_limit: usize,
    /// Errors (and warnings) a gating answer lists; the counts cover all.
    pub max_gating_errors: usize,
    /// Bytes of large gating bodies in memory at once (`http::gating_memory`); the
    /// operator sets it as `gating_budget_bytes` (`PLANGATE_GATING_BUDGET_BYTES`).
    pub gating_memory_bytes: u64,
    /// When an SQLite commit waits for the disk (docs/configuration.md).
    pub sqlite_synchronous: SqliteSync,
    /// Concurrent L0s per job, `1..=MAX_PARALLEL`.
    pub l0_concurrency: usize,
    /// The L0 prompt template text (the shipped one unless configured).
    pub prompt_template: String,
    pub default_executor: String,
    pub executors: BTreeMap<String, ExecutorProfile>,
    pub prices: Prices,
    pub budgets: BudgetsConfig,
    /// `[rate_limits.EXECUTOR]`, checked: each names a non-builtin profile.
    pub rate_limits: BTreeMap<String, crate::domain::rate_limit::Limits>,
    /// Allowed origins and hosts, connection limits, dashboard sessions.
    pub perimeter: PerimeterSettings,
    /// Webhook deliveries (docs/configuration.md, "Webhooks").
    pub webhooks: WebhookSettings,
}

/// How webhook deliveries are made (docs/configuration.md, "Webhooks").
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// One attempt's limit: connect, send and read the answer.
    pub timeout: Duration,
    /// The waits after the 1st, 2nd … failed attempt (1 + N attempts).
    pub retry_schedule: Vec<Duration>,
    /// Whether targets may be loopback, private or link-local.
    pub allow_private: bool,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings {
            timeout: Duration::from_secs(10),
            retry_schedule: crate::domain::webhooks::DEFAULT_SCHEDULE
                .iter()
                .map(|s| Duration::from_secs(*s))
                .collect(),
            allow_private: false,
        }
    }
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

/// A byte limit: at least 1024.
fn kib_or_more<T: PartialOrd + From<u16>>(name: &'static str, bytes: T) -> Result<T, ConfigError> {
    if bytes < T::from(1024) {
        Err(invalid(name, "must be at least 1024"))
    } else {
        Ok(bytes)
    }
}

pub(super) fn invalid(name: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        name,
        message: message.into(),
    }
}

/// The listen address, [`DEFAULT_BIND`] when nothing sets it (shared by `serve` and
/// `health`, so the probe always finds the server).
pub(super) fn parse_bind(text: Option<String>) -> Result<SocketAddr, ConfigError> {
    let text = text.unwrap_or_else(|| DEFAULT_BIND.to_owned());
    text.parse().map_err(|_| {
        invalid(
            "PLANGATE_BIND",
            format!("{text:?} is not an address like 127.0.0.1:8080"),
        )
    })
}

/// The address `plangate health` probes: the server's bind setting (`bind`, from the
/// flag or environment, then the config file, then the default), with an
/// unspecified IP replaced by loopback. Port 0 is refused: the server's port cannot
/// be known.
pub fn probe_address(
    bind: Option<String>,
    config_file: Option<&Path>,
) -> Result<SocketAddr, ConfigError> {
    let from_file = match (&bind, config_file) {
        (None, Some(path)) => FileConfig::load(path)?.bind,
        _ => None,
    };
    let mut addr = parse_bind(bind.or(from_file))?;
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

/// `PLANGATE_TASK_DIR` unless set: per user, so two users of one host never share
/// (or fight over) one directory.
pub fn default_task_dir() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    std::env::temp_dir().join(format!("plangate-tasks-{uid}"))
}

/// The local commands' database when nothing names one:
/// `$XDG_DATA_HOME/plangate/plangate.db`, else `$HOME/.local/share/plangate/plangate.db`.
/// A relative or empty variable counts as unset (the XDG spec ignores relative
/// paths); with neither, the start is refused rather than a file created in the
/// current directory, which is wherever the agent happened to start us.
pub fn user_database_path() -> Result<PathBuf, ConfigError> {
    let absolute = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
    };
    let data = absolute("XDG_DATA_HOME")
        .or_else(|| absolute("HOME").map(|home| home.join(".local").join("share")))
        .ok_or_else(|| {
            invalid(
                "DATABASE_URL",
                "not set, and neither XDG_DATA_HOME nor HOME names an absolute directory for \
                 the default database; set DATABASE_URL (e.g. sqlite:///path/to/plangate.db)",
            )
        })?;
    Ok(data.join("plangate").join("plangate.db"))
}

/// `sqlite://PATH`, with the characters SQLite's URL parser would read as its own
/// (`%`, `?`, `#`) percent-encoded.
fn sqlite_url(path: &std::path::Path) -> Result<String, ConfigError> {
    let text = path.to_str().ok_or_else(|| {
        invalid(
            "DATABASE_URL",
            format!(
                "not set, and the default database path {} is not UTF-8; set DATABASE_URL",
                path.display()
            ),
        )
    })?;
    let mut url = String::from("sqlite://");
    for c in text.chars() {
        match c {
            '%' => url.push_str("%25"),
            '?' => url.push_str("%3F"),
            '#' => url.push_str("%23"),
            c => url.push(c),
        }
    }
    Ok(url)
}

/// Creates `dir` and its missing parents, private to the user (0700) as the XDG
/// spec asks of its directories; an existing directory keeps its mode.
fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Bytes of large task-list bodies gated at once: four lists at the default body
/// limit (docs/configuration.md).
pub const DEFAULT_GATING_MEMORY_BYTES: u64 = 64 * 1024 * 1024;

/// Where the server listens unless told otherwise.
pub const DEFAULT_BIND: &str = "127.0.0.1:8080";

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

    /// [`resolve`](Self::resolve) for the local commands (`plangate mcp`, `plangate
    /// track`): when neither `DATABASE_URL` (flag, variable) nor the config file
    /// names a database, the SQLite file in the user's data directory
    /// ([`user_database_path`], its directory created 0700) rather than one in
    /// whatever directory the agent runs in. Answers that path when it is used.
    pub fn resolve_local(args: &ServeArgs) -> Result<(Self, Option<PathBuf>), ConfigError> {
        let file = match &args.config {
            Some(path) => FileConfig::load(path)?,
            None => FileConfig::default(),
        };
        if args.database_url.is_some() || file.database_url.is_some() {
            return Ok((Self::merge(args, file)?, None));
        }
        let path = user_database_path()?;
        let mut args = args.clone();
        args.database_url = Some(sqlite_url(&path)?);
        let settings = Self::merge(&args, file)?;
        // Only once every setting passed: a refused start leaves nothing behind.
        if let Some(dir) = path.parent() {
            create_private_dir(dir).map_err(|e| {
                invalid(
                    "DATABASE_URL",
                    format!(
                        "not set, and the default database's directory {} cannot be created: {e}",
                        dir.display()
                    ),
                )
            })?;
        }
        Ok((settings, Some(path)))
    }

    pub fn merge(args: &ServeArgs, file: FileConfig) -> Result<Self, ConfigError> {
        // First, while `file` is whole.
        let perimeter = PerimeterSettings::merge(args, &file)?;
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

        // A flag or variable, else the file (each setting has its own default).
        macro_rules! set {
            ($name:ident) => {
                args.$name.or(file.$name)
            };
        }
        let positive = |name: &'static str, value: Option<u64>, default: u64| {
            let v = value.unwrap_or(default);
            if v == 0 {
                Err(invalid(name, "must be at least 1"))
            } else {
                Ok(v)
            }
        };
        let workers = positive("PLANGATE_WORKERS", set!(workers).map(u64::from), 4)?;
        let lease = positive("PLANGATE_LEASE_SECS", set!(lease_secs), 60)?;
        let heartbeat = positive("PLANGATE_HEARTBEAT_SECS", set!(heartbeat_secs), 15)?;
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
            set!(reaper_interval_secs),
            5,
        )?;
        let max_attempts = positive(
            "PLANGATE_MAX_ATTEMPTS",
            set!(max_attempts).map(u64::from),
            3,
        )?;
        let shutdown_grace = set!(shutdown_grace_secs).unwrap_or(25);
        let retention_days = positive("PLANGATE_RETENTION_DAYS", set!(retention_days), 30)?;
        let request_timeout = positive(
            "PLANGATE_REQUEST_TIMEOUT_SECS",
            set!(request_timeout_secs),
            30,
        )?;
        let body_limit = kib_or_more(
            "PLANGATE_BODY_LIMIT_BYTES",
            set!(body_limit_bytes).unwrap_or(DEFAULT_BODY_LIMIT),
        )?;
        let max_gating_errors = positive(
            "PLANGATE_MAX_GATING_ERRORS",
            set!(max_gating_errors).map(|n| u64::try_from(n).unwrap_or(u64::MAX)),
            DEFAULT_MAX_ERRORS as u64,
        )?;
        let gating_memory_bytes = kib_or_more(
            "PLANGATE_GATING_BUDGET_BYTES",
            set!(gating_budget_bytes).unwrap_or(DEFAULT_GATING_MEMORY_BYTES),
        )?;
        let sqlite_synchronous = match args
            .sqlite_synchronous
            .as_deref()
            .or(file.sqlite_synchronous.as_deref())
        {
            None => SqliteSync::default(),
            Some(text) => SqliteSync::parse(text).ok_or_else(|| {
                invalid(
                    "PLANGATE_SQLITE_SYNCHRONOUS",
                    format!(
                        "must be one of {} (got {text:?})",
                        SqliteSync::NAMES.join(", ")
                    ),
                )
            })?,
        };

        let l0_concurrency = set!(l0_concurrency).unwrap_or(MAX_PARALLEL);
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
            )
            .chain(
                file.budgets
                    .max_call_cost_usd
                    .iter()
                    .map(|(e, l)| (format!("max_call_cost_usd.{e}"), *l)),
            );
        for (name, limit) in limits {
            if !limit.is_finite() || limit < 0.0 {
                return Err(invalid(
                    "budgets",
                    format!("[budgets] {name} must be a non-negative number of dollars"),
                ));
            }
        }

        let webhook_timeout = positive(
            "PLANGATE_WEBHOOK_TIMEOUT_SECS",
            args.webhook_timeout_secs.or(file.webhook_timeout_secs),
            10,
        )?;
        let webhook_schedule = match args
            .webhook_retry_schedule
            .clone()
            .or(file.webhook_retry_schedule)
        {
            Some(text) => crate::domain::webhooks::parse_schedule(&text)
                .map_err(|e| invalid("PLANGATE_WEBHOOK_RETRY_SCHEDULE", e))?,
            None => WebhookSettings::default().retry_schedule,
        };
        let webhooks = WebhookSettings {
            timeout: Duration::from_secs(webhook_timeout),
            retry_schedule: webhook_schedule,
            allow_private: args
                .webhook_allow_private
                .or(file.webhook_allow_private)
                .unwrap_or(false),
        };
        let mut rate_limits = BTreeMap::new();
        for (name, config) in &file.rate_limits {
            if !file.executors.contains_key(name) {
                return Err(invalid(
                    "rate_limits",
                    format!("[rate_limits.{name}] names no [executors.*] profile"),
                ));
            }
            let limits = config.limits();
            if let Err((field, why)) = limits.check() {
                return Err(invalid(
                    "rate_limits",
                    format!("[rate_limits.{name}] {field} {why}"),
                ));
            }
            rate_limits.insert(name.clone(), limits);
        }

        Ok(Settings {
            bind,
            database_url,
            log_format,
            api_tokens,
            workspace_root: args.workspace_root.clone().or(file.workspace_root),
            output_root: args.output_root.clone().or(file.output_root),
            task_dir: args
                .task_dir
                .clone()
                .or(file.task_dir)
                .unwrap_or_else(default_task_dir),
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
            sqlite_synchronous,
            gating_memory_bytes,
            max_gating_errors: usize::try_from(max_gating_errors).unwrap_or(usize::MAX),
            l0_concurrency,
            prompt_template,
            default_executor,
            executors: file.executors,
            prices: file.prices,
            budgets: file.budgets,
            rate_limits,
            perimeter,
            webhooks,
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

    /// `PLANGATE_API_TOKENS` set to `spec`, nothing else.
    fn tokens_variable(spec: &str) -> ServeArgs {
        ServeArgs {
            api_tokens: Some(spec.into()),
            ..Default::default()
        }
    }

    #[test]
    fn sqlite_synchronous_is_parsed_at_start_and_a_bad_value_names_the_variable() {
        let with = |value: &str| {
            let args = ServeArgs {
                sqlite_synchronous: Some(value.into()),
                ..Default::default()
            };
            Settings::merge(&args, FileConfig::default())
        };
        assert_eq!(with("FULL").unwrap().sqlite_synchronous, SqliteSync::Full);
        assert_eq!(with("extra").unwrap().sqlite_synchronous, SqliteSync::Extra);
        let defaults = Settings::merge(&ServeArgs::default(), FileConfig::default()).unwrap();
        assert_eq!(defaults.sqlite_synchronous, SqliteSync::Normal);
        assert_eq!(defaults.max_gating_errors, 100);
        let message = with("fsync").unwrap_err().to_string();
        assert_eq!(
            message,
            "invalid PLANGATE_SQLITE_SYNCHRONOUS: must be one of off, normal, full, extra \
             (got \"fsync\")"
        );
        let from_file = Settings::merge(
            &ServeArgs::default(),
            file("sqlite_synchronous = \"full\"\nmax_gating_errors = 7"),
        )
        .unwrap();
        assert_eq!(
            (from_file.sqlite_synchronous, from_file.max_gating_errors),
            (SqliteSync::Full, 7)
        );
        let zero = ServeArgs {
            max_gating_errors: Some(0),
            ..Default::default()
        };
        let message = Settings::merge(&zero, FileConfig::default())
            .unwrap_err()
            .to_string();
        assert!(message.contains("PLANGATE_MAX_GATING_ERRORS"), "{message}");
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
    fn rate_limits_name_a_profile_and_positive_figures() {
        let profile = "[executors.claude]\nkind = \"anthropic\"\nmodel = \"m\"\n";
        let ok = Settings::merge(
            &ServeArgs::default(),
            file(&format!(
                "{profile}[rate_limits.claude]\nrequests_per_minute = 50\n\
                 [rate_limits.claude.shares]\n\"team-a\" = 3\n"
            )),
        )
        .unwrap();
        let limits = &ok.rate_limits["claude"];
        assert_eq!(limits.requests_per_minute, Some(50));
        assert_eq!(limits.share("team-a"), 3);
        assert_eq!(limits.max_wait(), Duration::from_secs(600));
        for (text, needle) in [
            (
                "[rate_limits.other]\nrequests_per_minute = 5",
                "[rate_limits.other] names no",
            ),
            (
                "[rate_limits.claude]\nrequests_per_minute = 0",
                "[rate_limits.claude] requests_per_minute must be at least 1",
            ),
            (
                "[rate_limits.claude.shares]\nx = 0",
                "[rate_limits.claude] shares.x must be at least 1",
            ),
        ] {
            let err = Settings::merge(&ServeArgs::default(), file(&format!("{profile}{text}")))
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{err}");
        }
        let err = toml::from_str::<FileConfig>("[rate_limits.claude]\nrequests_per_minute = -1")
            .unwrap_err()
            .to_string();
        assert!(err.contains("requests_per_minute"), "{err}");
    }

    #[test]
    fn default_database_urls_escape_what_sqlite_would_parse() {
        let url = sqlite_url(std::path::Path::new("/home/a b/x?y#z%/plangate.db")).unwrap();
        assert_eq!(url, "sqlite:///home/a b/x%3Fy%23z%25/plangate.db");
    }

    #[test]
    fn call_cost_ceilings_are_dollars_by_executor() {
        let ok = Settings::merge(
            &ServeArgs::default(),
            file("[budgets.max_call_cost_usd]\nbuiltin = 0.5"),
        )
        .expect("a ceiling parses");
        assert_eq!(ok.budgets.max_call_cost_usd.get("builtin"), Some(&0.5));
        let bad = Settings::merge(
            &ServeArgs::default(),
            file("[budgets.max_call_cost_usd]\nbuiltin = -1.0"),
        )
        .unwrap_err()
        .to_string();
        assert!(bad.contains("max_call_cost_usd.builtin"), "{bad}");
    }

    #[test]
    fn bad_values_fail_with_the_setting_name() {
        let bad =
            |args: ServeArgs, f: &str| Settings::merge(&args, file(f)).unwrap_err().to_string();
        let bind = ServeArgs {
            bind: Some("nowhere".into()),
            ..Default::default()
        };
        assert!(bad(bind, "").contains("PLANGATE_BIND"));
        let mysql = ServeArgs {
            database_url: Some("mysql://x".into()),
            ..Default::default()
        };
        assert!(bad(mysql, "").contains("DATABASE_URL"));
        assert!(bad(ServeArgs::default(), "workers = 0").contains("PLANGATE_WORKERS"));
        assert!(
            bad(ServeArgs::default(), "lease_secs = 10\nheartbeat_secs = 10")
                .contains("PLANGATE_HEARTBEAT_SECS")
        );
        assert!(bad(ServeArgs::default(), "default_executor = \"nope\"").contains("nope"));
        let tokens = tokens_variable("secret-short");
        let short = bad(tokens, "");
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
        let args = tokens_variable(" aaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbb ,");
        let s = Settings::merge(&args, FileConfig::default()).unwrap();
        assert_eq!(s.api_tokens.len(), 2);
        assert!(s.api_tokens.iter().all(|t| t.projects().is_none()));
    }

    #[test]
    fn api_tokens_may_be_limited_to_projects_in_the_variable() {
        let args = tokens_variable("aaaaaaaaaaaaaaaa,bbbbbbbbbbbbbbbb: proj-a | proj-b ");
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
        let args = tokens_variable("ffffffffffffffff");
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
            let args = tokens_variable(&spec);
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
