//! L0 executors (refine.md §2): `command`, `openai`, `anthropic` and `builtin` turn
//! one L0 prompt into an answer. They never touch the database; the job engine
//! (`jobs/`) decides what to do with what they return.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::{ConfigError, ExecutorKind, ExecutorProfile, Settings};
use crate::domain::refine::{Assignment, L0Outcome, L0Packet, builtin_review};

/// Everything an executor needs for one L0.
#[derive(Debug, Clone)]
pub struct L0Request {
    pub job_id: Uuid,
    pub phase_id: String,
    pub assignment_id: String,
    /// Passed as `PLANGATE_TASK_FILE` (empty when the job has none).
    pub task_file: Option<String>,
    /// The rendered prompt (stdin for `command`, the user message for the APIs).
    pub prompt: String,
    /// The packet and the phase's assignments, for the `builtin` reviewer.
    pub packet: Arc<L0Packet>,
    pub phase_assignments: Arc<[Assignment]>,
}

/// What one L0 run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct L0Run {
    pub outcome: L0Outcome,
    /// The process exit code (`command` only; `None` when killed by a signal).
    pub exit_code: Option<i32>,
    /// Captured stderr, capped (`command`), or the last transient error (APIs).
    pub stderr: Option<String>,
    /// How many tries it took (retries of transient errors included).
    pub tries: u32,
}

/// The run was cancelled (job cancel, lost lease or shutdown): the L0 did not
/// finish and its process group is already killed. Nothing of it may be stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("L0 run cancelled")]
pub struct Cancelled;

/// One configured executor.
#[derive(Debug)]
pub struct Executor {
    name: String,
    kind: ExecutorKind,
}

impl Executor {
    pub fn builtin() -> Self {
        Executor {
            name: "builtin".into(),
            kind: ExecutorKind::Builtin,
        }
    }

    /// Checks a profile and builds its executor (a bad profile fails at start).
    pub fn from_profile(name: &str, profile: &ExecutorProfile) -> Result<Self, ConfigError> {
        Ok(Executor {
            name: name.to_owned(),
            kind: profile.kind,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `command`, `openai`, `anthropic` or `builtin` (metric label, job record).
    pub fn kind(&self) -> &'static str {
        match self.kind {
            ExecutorKind::Command => "command",
            ExecutorKind::Openai => "openai",
            ExecutorKind::Anthropic => "anthropic",
            ExecutorKind::Builtin => "builtin",
        }
    }

    /// Runs one L0. Returns `Err(Cancelled)` as soon as `cancel` fires.
    pub async fn run(
        &self,
        req: &L0Request,
        cancel: &CancellationToken,
    ) -> Result<L0Run, Cancelled> {
        if cancel.is_cancelled() {
            return Err(Cancelled);
        }
        let outcome = match self.kind {
            ExecutorKind::Builtin => {
                L0Outcome::Answer(builtin_review(&req.packet, &req.phase_assignments))
            }
            _ => L0Outcome::Failed(format!("executor kind {} is not built yet", self.kind())),
        };
        Ok(L0Run {
            outcome,
            exit_code: None,
            stderr: None,
            tries: 1,
        })
    }
}

/// The executors a server or CLI run may use, by name. `builtin` always exists.
#[derive(Debug, Clone)]
pub struct Executors {
    default: String,
    by_name: BTreeMap<String, Arc<Executor>>,
}

impl Executors {
    pub fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        let mut by_name = BTreeMap::new();
        by_name.insert("builtin".to_owned(), Arc::new(Executor::builtin()));
        for (name, profile) in &settings.executors {
            by_name.insert(
                name.clone(),
                Arc::new(Executor::from_profile(name, profile)?),
            );
        }
        Ok(Executors {
            default: settings.default_executor.clone(),
            by_name,
        })
    }

    /// The executor a request names, else the default; `None` for an unknown name.
    pub fn resolve(&self, name: Option<&str>) -> Option<Arc<Executor>> {
        self.by_name.get(name.unwrap_or(&self.default)).cloned()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }
}
