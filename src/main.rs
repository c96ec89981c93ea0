use std::process::ExitCode;

use plangate::cli::args::Command;

/// mimalloc: the gate allocates many small strings per request on every worker
/// thread, where glibc's malloc spends a third of the time.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    match plangate::cli::parse() {
        Ok(cli) => {
            // One-shot runs over big lists keep mimalloc's defaults: purging at once
            // slows them (docs/decisions.md, "Jobs, queue and memory").
            if !matches!(cli.command, Some(Command::Validate(_) | Command::Plan(_))) {
                keep_the_heap_small();
            }
            plangate::cli::run(cli)
        }
        Err(code) => code,
    }
}

/// `mi_option_purge_delay` in mimalloc's `mi_option_e` (mimalloc.h of the v3 sources
/// libmimalloc-sys builds, where `show_errors` is 0).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

unsafe extern "C" {
    /// Part of the mimalloc library the allocator above links in.
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// Memory settings of the server, before the runtime starts its threads
/// (`bench/README.md`, memory):
/// - no transparent huge pages: with them each thread's first kilobytes of heap cost
///   a 2 MiB page (idle RSS 39 MB with them, 25 MB without). mimalloc is built
///   without its `MADV_HUGEPAGE` advice (`no_thp`), which takes effect before `main`;
///   this also covers kernels that use THP unasked;
/// - freed pages go back to the OS at once rather than after 1 s: mimalloc only
///   purges when it next allocates, so a server that turns idle kept its peak.
fn keep_the_heap_small() {
    // SAFETY: prctl and mi_option_set take integers only and touch no memory of
    // ours; if prctl fails, THP simply stays on.
    unsafe {
        #[cfg(target_os = "linux")]
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        mi_option_set(MI_OPTION_PURGE_DELAY, 0);
    }
}
