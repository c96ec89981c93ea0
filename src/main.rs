use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    plangate::cli::run(plangate::config::Cli::parse())
}
