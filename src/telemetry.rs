//! Logging via tracing: human-readable on a terminal, JSON lines otherwise.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Install the global subscriber once. `RUST_LOG` refines the default filter.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // try_init: a second call (tests, embedding) keeps the first subscriber.
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
        // No colour codes when stderr is a file or a pipe.
        LogFormat::Pretty => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
}
