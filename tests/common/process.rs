//! The real `plangate` binary as a child process, for the tests that kill, stop or
//! trace whole servers: started on 127.0.0.1:0 with JSON logs to a file and short
//! leases, and read until its log says where it listens.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::process::{Child, Command};

const START_TIMEOUT: Duration = Duration::from_secs(60);

/// `plangate` on `db_url`, not yet spawned: listening on 127.0.0.1:0 with only
/// `PATH` from this environment, JSON logs at `info` to `log` (stdout and stderr),
/// killed when dropped. Callers add their own settings.
pub fn plangate_command(db_url: &str, log: &Path) -> Command {
    let out = File::create(log).expect("server log");
    let err = out.try_clone().expect("server log");
    let mut command = Command::new(env!("CARGO_BIN_EXE_plangate"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("DATABASE_URL", db_url)
        .env("PLANGATE_BIND", "127.0.0.1:0")
        .env("PLANGATE_LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .kill_on_drop(true);
    command
}

pub struct ServerProcess {
    pub name: String,
    child: Option<Child>,
    pub base: String,
    log: PathBuf,
}

impl ServerProcess {
    /// `plangate` on `db_url` with `config`, logging to `log`: only `PATH` from this
    /// environment, a 3 s lease renewed and reaped every second, then `env`.
    pub async fn start(
        name: &str,
        db_url: &str,
        config: &Path,
        log: PathBuf,
        env: &[(&str, &str)],
    ) -> ServerProcess {
        let mut command = plangate_command(db_url, &log);
        command
            .env("PLANGATE_CONFIG", config)
            .env("PLANGATE_LEASE_SECS", "3")
            .env("PLANGATE_HEARTBEAT_SECS", "1")
            .env("PLANGATE_REAPER_INTERVAL_SECS", "1")
            .envs(env.iter().copied());
        let child = command.spawn().expect("spawn plangate");
        let mut server = ServerProcess {
            name: name.to_owned(),
            child: Some(child),
            base: String::new(),
            log,
        };
        let line = server.wait_for_log("plangate listening").await;
        server.base = format!("http://{}", line["address"].as_str().expect("address"));
        server
    }

    /// The first log line with this `message`, once it is written.
    pub async fn wait_for_log(&mut self, message: &str) -> Value {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(line) = self
                .log_lines()
                .into_iter()
                .find(|l| l["message"] == message)
            {
                return line;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "server {} exited at start ({status}):\n{}",
                    self.name,
                    self.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "server {} never logged {message:?}:\n{}",
                self.name,
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_lines(&self) -> Vec<Value> {
        self.log_text()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    pub fn pid(&self) -> i32 {
        let child = self.child.as_ref().expect("server running");
        i32::try_from(child.id().expect("pid")).expect("pid fits")
    }

    /// SIGKILL, then reap: when this returns the process and its threads are gone
    /// (so its L0s' guardians have seen it die).
    pub async fn sigkill(&mut self) {
        let mut child = self.child.take().expect("server running");
        child.start_kill().expect("SIGKILL");
        child.wait().await.expect("reap");
    }

    /// SIGTERM, then wait for a clean exit within `limit`; returns how long it took.
    pub async fn sigterm(&mut self, limit: Duration) -> Duration {
        let pid = self.pid();
        let started = Instant::now();
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0, "SIGTERM");
        let mut child = self.child.take().expect("server running");
        let status = tokio::time::timeout(limit, child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "server {} still runs {limit:?} after SIGTERM:\n{}",
                    self.name,
                    self.log_text()
                )
            })
            .expect("wait");
        assert!(
            status.success(),
            "server {} exit status {status}:\n{}",
            self.name,
            self.log_text()
        );
        started.elapsed()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}
