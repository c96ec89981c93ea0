//! The `command` executor: one child process per L0.
//!
//! - argv, no shell. `argv[0]` without a `/` is looked up in the **server's** `PATH`
//!   at spawn time (the child's environment is cleared, so it may have no `PATH`
//!   at all); the child still sees the configured name as its `argv[0]`.
//! - The environment is cleared, then gets the profile's `env_allow` variables
//!   (copied from the server's environment when present) and `PLANGATE_JOB_ID`,
//!   `PLANGATE_PHASE_ID`, `PLANGATE_ASSIGNMENT_ID`, `PLANGATE_TASK_FILE` (empty when
//!   the job has no task file). `PATH` reaches the child only when `env_allow`
//!   names it.
//! - The prompt is written to stdin, then stdin is closed.
//! - The server's child is the L0's *guardian* (`agents/guardian.rs`), which forks
//!   the L0 and waits for it, relaying its exit status. Guardian and L0 share a
//!   process group the guardian leads (`process_group(0)`); every kill by the server
//!   is a `killpg(SIGKILL)` of that group, so grandchildren (a `sh` script's
//!   `sleep`) die with it.
//! - The L0 ends when it exits: the guardian then kills what it left behind (even a
//!   process that left the group, `setsid`: the guardian is a child subreaper), the
//!   server kills the group, and the pipes are drained of what was already written.
//! - When the server dies (SIGKILL, crash) the guardian sees its life pipe close
//!   and kills the L0's whole tree, so no agent runs on, spending tokens, while
//!   another replica re-runs the call. The L0 itself has `PR_SET_PDEATHSIG(SIGKILL)`
//!   towards the guardian.
//!
//! Outcomes: exit 0 → `Answer(stdout)` (even when empty: the validator judges it);
//! non-zero exit or death by a signal we did not send → `Answer(stdout)` when stdout
//! has non-whitespace text, else `Failed("exit status N, no output…")`; stdout over
//! `max_output_bytes` → the group is killed and the first `max_output_bytes` bytes
//! are the answer (`stderr` notes `stdout truncated at N bytes`); timeout →
//! `Failed("timed out after N s")`; spawn error → `Failed("cannot spawn …")`.
//! stdout is decoded as lossy UTF-8. stderr keeps its last 64 KiB.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio_util::sync::CancellationToken;

use super::guardian::Guardian;
use super::usage::claude_json;
use super::{Cancelled, L0Request, L0Run, StdoutFormat};
use crate::domain::refine::L0Outcome;
use crate::domain::usage::L0Usage;

/// How much of an L0's stderr is kept (the tail).
pub const STDERR_CAP: usize = 64 * 1024;
/// How much of the stderr tail a failure reason quotes.
const REASON_STDERR_CHARS: usize = 300;

#[derive(Debug, Clone)]
pub(crate) struct CommandConfig {
    pub argv: Vec<String>,
    pub env_allow: Vec<String>,
    pub timeout: Duration,
    pub max_output_bytes: usize,
    pub output: StdoutFormat,
    /// The profile's `model`: the usage label (and price) when the agent names none.
    pub model: Option<String>,
}

/// Kills the whole process group when dropped (the run future was dropped, or the
/// run ended): no member of an L0's group outlives it.
struct GroupGuard {
    pgid: libc::pid_t,
}

impl GroupGuard {
    fn kill(&self) {
        kill_group(self.pgid);
    }

    /// The group is dead and its leader reaped: nothing left to kill (and its id
    /// must not be signalled again once it may be reused).
    fn disarm(mut self) {
        self.pgid = 0;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

fn kill_group(pgid: libc::pid_t) {
    if pgid > 0 {
        // SAFETY: killpg has no memory-safety preconditions; ESRCH (group already
        // gone) is expected and ignored.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
}

/// Finds `program` the way `execvp` would, but in the server's `PATH` (the child's
/// environment is cleared). Names with a `/` are used as they are.
pub(crate) fn resolve_program(program: &str, path_var: Option<&OsStr>) -> Result<PathBuf, String> {
    if program.is_empty() {
        return Err("empty program name".to_owned());
    }
    if program.contains('/') {
        return Ok(PathBuf::from(program));
    }
    let Some(path_var) = path_var else {
        return Err(format!("{program}: not found (the server has no PATH)"));
    };
    std::env::split_paths(path_var)
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                // An empty PATH entry means the current directory.
                Path::new(".").join(program)
            } else {
                dir.join(program)
            }
        })
        .find(|candidate| is_executable_file(candidate))
        .ok_or_else(|| format!("{program}: not found in PATH"))
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The child's environment: `env_allow` (from `lookup`, when set) then the
/// `PLANGATE_*` variables (which win over an allowed variable of the same name).
pub(crate) fn child_env(
    env_allow: &[String],
    req: &L0Request,
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = env_allow
        .iter()
        .filter_map(|name| lookup(name).map(|value| (OsString::from(name), value)))
        .collect();
    let plangate = [
        ("PLANGATE_JOB_ID", req.job_id.to_string()),
        ("PLANGATE_PHASE_ID", req.phase_id.clone()),
        ("PLANGATE_ASSIGNMENT_ID", req.assignment_id.clone()),
        (
            "PLANGATE_TASK_FILE",
            req.task_file.clone().unwrap_or_default(),
        ),
    ];
    for (name, value) in plangate {
        env.retain(|(n, _)| n != name);
        env.push((name.into(), value.into()));
    }
    env
}

/// Keeps the last `cap` bytes written to it, counting what it drops.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    buf: Vec<u8>,
    dropped: usize,
    cap: usize,
}

impl Tail {
    pub(crate) fn new(cap: usize) -> Self {
        Tail {
            buf: Vec::new(),
            dropped: 0,
            cap,
        }
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        // Trim in amortised steps rather than on every write.
        if self.buf.len() > self.cap.saturating_mul(2).max(4096) {
            let excess = self.buf.len() - self.cap;
            self.buf.drain(..excess);
            self.dropped += excess;
        }
    }

    pub(crate) fn finish(mut self) -> (String, usize) {
        if self.buf.len() > self.cap {
            let excess = self.buf.len() - self.cap;
            self.buf.drain(..excess);
            self.dropped += excess;
        }
        (
            String::from_utf8_lossy(&self.buf).into_owned(),
            self.dropped,
        )
    }
}

/// The last `max_chars` characters of `text`, trimmed, on one line.
fn short_tail(text: &str, max_chars: usize) -> String {
    let trimmed = text.trim();
    let count = trimmed.chars().count();
    let tail: String = if count > max_chars {
        let skip = count - max_chars;
        format!("…{}", trimmed.chars().skip(skip).collect::<String>())
    } else {
        trimmed.to_owned()
    };
    tail.split_whitespace().collect::<Vec<_>>().join(" ")
}

enum Ended {
    Exited(std::io::Result<ExitStatus>),
    TimedOut,
}

pub(crate) async fn run(
    cfg: &CommandConfig,
    executor: &str,
    req: &L0Request,
    cancel: &CancellationToken,
) -> Result<L0Run, Cancelled> {
    // `Executor::run` has refused an already cancelled call.
    let failed = |reason: String| L0Run::failed(reason, 1);
    let name = &cfg.argv[0];
    let program = match resolve_program(name, std::env::var_os("PATH").as_deref()) {
        Ok(p) => p,
        Err(e) => return Ok(failed(format!("cannot spawn {name}: {e}"))),
    };

    let mut command = tokio::process::Command::new(&program);
    command
        .arg0(name)
        .args(&cfg.argv[1..])
        .env_clear()
        .envs(child_env(&cfg.env_allow, req, |n| std::env::var_os(n)))
        // The L0 span's context, winning over an allowed TRACEPARENT of the
        // server's own (docs/observability.md, "Context in and out").
        .envs(crate::telemetry::current_traceparent().map(|tp| ("TRACEPARENT", tp)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // The guardian is also killed if everything else fails (the L0 dies with
        // it); the group kill below is what takes the L0's descendants along.
        .kill_on_drop(true);
    // The server's child is the L0's guardian, which forks the L0 (agents/guardian.rs).
    let guardian = match Guardian::prepare() {
        Ok(g) => g,
        Err(e) => {
            return Ok(failed(format!(
                "cannot spawn {name}: the guardian's pipe: {e}"
            )));
        }
    };
    // SAFETY: between fork and exec, `split` makes only async-signal-safe system
    // calls and allocates nothing.
    unsafe {
        command.pre_exec(move || guardian.split());
    }

    let mut child: Child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return Ok(failed(format!("cannot spawn {name}: {e}"))),
    };
    let pgid = child
        .id()
        .and_then(|pid| libc::pid_t::try_from(pid).ok())
        .unwrap_or(0);
    let guard = GroupGuard { pgid };
    tracing::debug!(
        executor,
        assignment_id = %req.assignment_id,
        pid = pgid,
        "L0 command spawned"
    );

    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let mut out = Vec::new();
    let mut err = Tail::new(STDERR_CAP);
    let mut truncated = false;

    let ended = {
        let work = async {
            let (_, _, _, status) = tokio::join!(
                write_prompt(stdin, req.prompt.as_bytes()),
                read_capped(stdout, cfg.max_output_bytes, &mut out, &mut truncated, pgid),
                drain_tail(stderr, &mut err),
                async {
                    let status = child.wait().await;
                    // The leader exited: stragglers of its group go too, which also
                    // releases the pipes they inherited.
                    kill_group(pgid);
                    status
                },
            );
            Ended::Exited(status)
        };
        tokio::select! {
            ended = work => ended,
            _ = tokio::time::sleep(cfg.timeout) => Ended::TimedOut,
            _ = cancel.cancelled() => {
                guard.kill();
                let _ = child.wait().await;
                guard.disarm();
                tracing::debug!(executor, assignment_id = %req.assignment_id, "L0 command cancelled");
                return Err(Cancelled);
            }
        }
    };
    let status = match ended {
        // The group was killed when the leader exited.
        Ended::Exited(status) => status,
        Ended::TimedOut => {
            guard.kill();
            let _ = child.wait().await;
            Err(std::io::Error::from(std::io::ErrorKind::TimedOut))
        }
    };
    guard.disarm();

    let (mut stderr_text, dropped) = err.finish();
    if dropped > 0 {
        stderr_text = format!("[first {dropped} bytes of stderr dropped]\n{stderr_text}");
    }
    let mut notes = Vec::new();
    let exit_code = status.as_ref().ok().and_then(|s| s.code());
    let outcome = match status {
        _ if truncated => {
            notes.push(format!(
                "stdout truncated at {} bytes",
                cfg.max_output_bytes
            ));
            L0Outcome::Answer(String::from_utf8_lossy(&out).into_owned())
        }
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            let reason = format!("timed out after {} s", cfg.timeout.as_secs_f64());
            notes.push(reason.clone());
            L0Outcome::Failed(reason)
        }
        Err(e) => L0Outcome::Failed(format!("cannot wait for {name}: {e}")),
        Ok(status) => {
            let answer = String::from_utf8_lossy(&out).into_owned();
            if status.success() || !answer.trim().is_empty() {
                L0Outcome::Answer(answer)
            } else {
                let what = match status.code() {
                    Some(code) => format!("exit status {code}"),
                    None => {
                        use std::os::unix::process::ExitStatusExt as _;
                        format!("killed by signal {}", status.signal().unwrap_or(0))
                    }
                };
                let mut reason = format!("{what}, no output");
                let tail = short_tail(&stderr_text, REASON_STDERR_CHARS);
                if !tail.is_empty() {
                    reason.push_str("; stderr: ");
                    reason.push_str(&tail);
                }
                L0Outcome::Failed(reason)
            }
        }
    };
    for note in notes {
        if !stderr_text.is_empty() && !stderr_text.ends_with('\n') {
            stderr_text.push('\n');
        }
        stderr_text.push_str(&format!("[plangate] {note}\n"));
    }
    tracing::debug!(
        executor,
        assignment_id = %req.assignment_id,
        exit_code = ?exit_code,
        truncated,
        "L0 command ended"
    );
    let (outcome, usage) = match (cfg.output, outcome) {
        (StdoutFormat::Text, outcome) => (
            outcome,
            L0Usage {
                model: cfg.model.clone(),
                ..L0Usage::default()
            },
        ),
        (StdoutFormat::ClaudeJson, L0Outcome::Answer(stdout)) => {
            read_envelope(&stdout, cfg.model.as_deref())
        }
        (StdoutFormat::ClaudeJson, failed) => (
            failed,
            L0Usage {
                model: cfg.model.clone(),
                ..L0Usage::default()
            },
        ),
    };
    Ok(L0Run {
        outcome,
        exit_code,
        stderr: (!stderr_text.is_empty()).then_some(stderr_text),
        tries: 1,
        usage,
    })
}

/// The outcome and usage of a claude-json stdout: the envelope's `result` is the
/// answer; `is_error: true` fails the L0 (its cost still counts); anything that
/// is not an envelope fails it with the reason and an excerpt.
fn read_envelope(stdout: &str, model: Option<&str>) -> (L0Outcome, L0Usage) {
    match claude_json(stdout, model) {
        Ok(envelope) if envelope.is_error => {
            let detail = short_tail(&envelope.result, REASON_STDERR_CHARS);
            let reason = if detail.is_empty() {
                "the agent reported an error (is_error: true)".to_owned()
            } else {
                format!("the agent reported an error (is_error: true): {detail}")
            };
            (L0Outcome::Failed(reason), envelope.usage)
        }
        Ok(envelope) => (L0Outcome::Answer(envelope.result), envelope.usage),
        Err(why) => (
            L0Outcome::Failed(format!(
                "output = \"claude-json\": {why}: {}",
                super::http_api::excerpt(stdout.as_bytes())
            )),
            L0Usage {
                model: model.map(str::to_owned),
                ..L0Usage::default()
            },
        ),
    }
}

/// Writes the prompt and closes stdin. A child that exits without reading it
/// (EPIPE) is not an error here: its exit status and output tell the story.
async fn write_prompt(stdin: Option<ChildStdin>, prompt: &[u8]) {
    if let Some(mut stdin) = stdin {
        let _ = stdin.write_all(prompt).await;
        let _ = stdin.shutdown().await;
    }
}

/// Reads stdout until EOF, or until it exceeds `cap`: then keeps the first `cap`
/// bytes, kills the group and stops.
async fn read_capped(
    pipe: Option<impl AsyncRead + Unpin>,
    cap: usize,
    out: &mut Vec<u8>,
    truncated: &mut bool,
    pgid: libc::pid_t,
) {
    let Some(mut pipe) = pipe else { return };
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                out.extend_from_slice(&chunk[..n]);
                if out.len() > cap {
                    out.truncate(cap);
                    *truncated = true;
                    kill_group(pgid);
                    return;
                }
            }
        }
    }
}

/// Reads a pipe until EOF, keeping its tail.
async fn drain_tail(pipe: Option<impl AsyncRead + Unpin>, tail: &mut Tail) {
    let Some(mut pipe) = pipe else { return };
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => tail.push(&chunk[..n]),
        }
    }
}

#[cfg(test)]
mod tests;
