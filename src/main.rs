use std::process::ExitCode;

use clap::Parser;

/// mimalloc: the gate allocates many small strings per request on every worker
/// thread, where glibc's malloc spends a third of the time.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    plangate::cli::run(plangate::config::Cli::parse())
}
