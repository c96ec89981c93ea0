use std::process::ExitCode;

/// mimalloc: the gate allocates many small strings per request on every worker
/// thread, where glibc's malloc spends a third of the time.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    match plangate::cli::parse() {
        Ok(cli) => plangate::cli::run(cli),
        Err(code) => code,
    }
}
