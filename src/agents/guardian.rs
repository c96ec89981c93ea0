//! The guardian of one `command` L0: the process that kills the L0's whole tree
//! when the server dies (docs/jobs.md, "Shutdown").
//!
//! `PR_SET_PDEATHSIG` reaches only the direct child of the server, so an L0 started
//! through a wrapper (`sh -c`, `npx`, `uv run`) left its grandchildren running
//! after a `kill -9` of the server — and, once the lease expired, another replica
//! ran the same call again: paid twice. So the server's child is a guardian, not
//! the L0:
//!
//! ```text
//! server ──fork──► guardian (leads the process group G, child subreaper)
//!                     └──fork──► L0 (group G, PR_SET_PDEATHSIG = SIGKILL) ─exec─► argv
//! ```
//!
//! - The guardian is forked by `std` (the `pre_exec` hook runs in it) and forks the
//!   L0, which goes on to `exec`; the guardian never returns from the hook.
//! - It notices the server's death by the end of file of the *life pipe*: a pipe
//!   whose write end only the server holds (close-on-exec, closed by every
//!   guardian at once) and never writes. The kernel closes it when the server
//!   dies, however it dies; no signal is involved, so the guardian cannot be killed
//!   before it kills, and nothing depends on which server thread forked it.
//! - On the server's death it kills every descendant, layer by layer (being a
//!   child subreaper, it inherits each orphan, including one that left the group
//!   with `setsid`), then the whole group G, itself included.
//! - When the L0 exits on its own it kills what the L0 left behind the same way,
//!   then exits with the L0's status (or dies of its signal), which is what the
//!   server's `wait` sees.
//! - The server's own kills (timeout, cancel, output cap, shutdown) stay one
//!   `killpg(G, SIGKILL)`: the guardian, the L0 and its group die at once. A
//!   process that left the group is not reached by that kill.
//!
//! Everything after the fork runs in a copy of a multi-threaded process: only
//! async-signal-safe system calls, no allocation, no lock, no panic.

use std::io;
use std::os::fd::RawFd;
use std::sync::OnceLock;

/// How many pids one read of `/proc/thread-self/children` handles; more are
/// handled by the next round.
const CHILDREN_BUF: usize = 4096;
/// Bounds the sweep of a process tree that forks faster than it is killed.
const SWEEP_ROUNDS: usize = 100_000;

/// The life pipe: `(read end, write end)`, both close-on-exec, created once per
/// process and never closed by it.
fn life_pipe() -> io::Result<(RawFd, RawFd)> {
    static PIPE: OnceLock<Result<(RawFd, RawFd), i32>> = OnceLock::new();
    let pipe = PIPE.get_or_init(|| {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two fds into the array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == 0 {
            Ok((fds[0], fds[1]))
        } else {
            Err(io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO))
        }
    });
    pipe.map_err(io::Error::from_raw_os_error)
}

/// What the `pre_exec` hook needs, prepared in the server before the fork.
#[derive(Clone, Copy)]
pub(super) struct Guardian {
    server: libc::pid_t,
    life_read: RawFd,
    life_write: RawFd,
}

impl Guardian {
    pub(super) fn prepare() -> io::Result<Guardian> {
        let (life_read, life_write) = life_pipe()?;
        // SAFETY: getpid has no preconditions.
        let server = unsafe { libc::getpid() };
        Ok(Guardian {
            server,
            life_read,
            life_write,
        })
    }

    /// Runs in the server's child, between `fork` and `exec`, after `std` made it
    /// the leader of its process group. Returns `Ok` in the L0 (which then execs);
    /// the guardian never returns.
    ///
    /// # Safety
    /// Only in a `pre_exec` hook: async-signal-safe calls only.
    pub(super) unsafe fn split(self) -> io::Result<()> {
        // SAFETY: (the whole block) plain system calls on values of this process.
        unsafe {
            // This copy of the write end would keep the pipe open after the
            // server's death.
            libc::close(self.life_write);
            if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The server died before the write end was closed here: the pipe
            // may never report it (no allocation: a raw errno).
            if libc::getppid() != self.server {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            let guardian = libc::getpid();
            match libc::fork() {
                -1 => Err(io::Error::last_os_error()),
                0 => {
                    // The L0: dies with its guardian, whoever kills it.
                    if libc::prctl(
                        libc::PR_SET_PDEATHSIG,
                        libc::SIGKILL as libc::c_ulong,
                        0,
                        0,
                        0,
                    ) != 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                    if libc::getppid() != guardian {
                        return Err(io::Error::from_raw_os_error(libc::ESRCH));
                    }
                    Ok(())
                }
                l0 => guard(l0, self.life_read),
            }
        }
    }
}

/// The guardian's life: wait for the L0's exit or the server's death.
unsafe fn guard(l0: libc::pid_t, life_read: RawFd) -> ! {
    // SAFETY: (the whole block) async-signal-safe system calls on this process's own
    // fds, pids and stack buffers.
    unsafe {
        // The server's signal handlers (copied by the fork) must not run here.
        for signal in 1..32 {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        // Hold no pipe of the L0's (its stdout reaches end of file when the L0's
        // processes are gone, not when the guardian is) and nothing of the
        // server's (its listening socket, std's exec-error pipe, which `spawn`
        // reads until end of file).
        close_all_but(life_read);
        let pidfd = libc::syscall(libc::SYS_pidfd_open, l0, 0) as libc::c_int;
        let mut l0_status = None;
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: life_read,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: pidfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // Without a pidfd (Linux < 5.3) the L0's exit is polled for.
            let (count, timeout) = if pidfd >= 0 { (2, -1) } else { (1, 50) };
            libc::poll(fds.as_mut_ptr(), count, timeout);
            reap(l0, &mut l0_status, libc::WNOHANG);
            if let Some(status) = l0_status {
                sweep(l0, &mut l0_status);
                exit_like(status);
            }
            if fds[0].revents != 0 {
                // End of file: the server is gone.
                sweep(l0, &mut l0_status);
                libc::killpg(libc::getpgrp(), libc::SIGKILL);
                libc::_exit(137);
            }
        }
    }
}

/// Closes every fd but 0..=2 (closed too) and `keep`.
unsafe fn close_all_but(keep: RawFd) {
    // SAFETY: closing fds of this process.
    unsafe {
        for fd in 0..3 {
            if fd != keep {
                libc::close(fd);
            }
        }
        let ranges = [(3, keep - 1), (keep + 1, libc::c_int::MAX)];
        for (first, last) in ranges {
            if first > last {
                continue;
            }
            let done = libc::syscall(
                libc::SYS_close_range,
                first as libc::c_uint,
                last as libc::c_uint,
                0,
            ) == 0;
            if !done {
                // Linux < 5.9: one by one, as far as the fd limit goes.
                let mut limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
                let end = (limit.rlim_cur.min(65_536) as libc::c_int).min(last);
                for fd in first..=end {
                    libc::close(fd);
                }
            }
        }
    }
}

/// Reaps the exited children (the L0 and orphans it inherited); keeps the L0's
/// status. `flags`: `WNOHANG`, or 0 to wait for one.
unsafe fn reap(l0: libc::pid_t, l0_status: &mut Option<libc::c_int>, flags: libc::c_int) -> bool {
    let mut reaped = false;
    let mut flags = flags;
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status it is given.
        let pid = unsafe { libc::waitpid(-1, &mut status, flags) };
        if pid <= 0 {
            return reaped;
        }
        reaped = true;
        if pid == l0 {
            *l0_status = Some(status);
        }
        flags = libc::WNOHANG;
    }
}

/// Kills every descendant: SIGKILL to each child (and the group it leads, when it
/// left ours), reap, and again — the orphans of the killed come to the guardian
/// (child subreaper) — until it has no child left.
unsafe fn sweep(l0: libc::pid_t, l0_status: &mut Option<libc::c_int>) {
    let mut buf = [0u8; CHILDREN_BUF];
    for _ in 0..SWEEP_ROUNDS {
        // SAFETY: reading a /proc file into a stack buffer; kill/waitpid.
        unsafe {
            let Some(len) = read_children(&mut buf) else {
                // No /proc children list: the group kill is all there is.
                return;
            };
            let mut pid: libc::pid_t = 0;
            let mut any = false;
            for &byte in buf.iter().take(len) {
                if byte.is_ascii_digit() {
                    pid = pid
                        .saturating_mul(10)
                        .saturating_add(libc::pid_t::from(byte - b'0'));
                } else if pid > 0 {
                    libc::kill(-pid, libc::SIGKILL);
                    libc::kill(pid, libc::SIGKILL);
                    any = true;
                    pid = 0;
                }
            }
            // Every pid ends with a space: digits left over are a pid cut by a full
            // buffer, read whole in the next round.
            if !any || !reap(l0, l0_status, 0) {
                return;
            }
        }
    }
}

/// `/proc/thread-self/children` (the guardian has one thread) into `buf`.
unsafe fn read_children(buf: &mut [u8]) -> Option<usize> {
    // SAFETY: open/read/close on a NUL-terminated path and a stack buffer.
    unsafe {
        let fd = libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return None;
        }
        let mut len = 0;
        while len < buf.len() {
            let n = libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len);
            if n <= 0 {
                break;
            }
            len += n as usize;
        }
        libc::close(fd);
        Some(len)
    }
}

/// Ends the guardian the way the L0 ended: its exit code, or its signal.
unsafe fn exit_like(status: libc::c_int) -> ! {
    // SAFETY: signal/kill/_exit on this process.
    unsafe {
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            // No core file of the guardian for a signal that dumped the L0's.
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            libc::signal(signal, libc::SIG_DFL);
            libc::kill(libc::getpid(), signal);
            libc::_exit(128 + signal);
        }
        libc::_exit(libc::WEXITSTATUS(status))
    }
}
