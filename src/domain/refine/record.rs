//! The refine jobs, L0 records and refine runs as stored and as shown (REST, MCP
//! and the dashboard): one type each, which `db/` builds from its rows (so storage
//! can change without changing these) and the API serializes as they are.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{L0ErrorCode, L0Status};
use crate::domain::job::JobStatus;
use crate::domain::usage::{Budget, L0Usage, UsageTotals};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct JobProgress {
    pub l0_total: i64,
    pub l0_running: i64,
    /// Valid answers.
    pub l0_succeeded: i64,
    /// Answers that failed validation or were for another assignment.
    pub l0_invalid: i64,
    /// No answer (spawn error, timeout, non-zero exit with no output, cancelled).
    pub l0_failed: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct JobError {
    /// `lease_expired`, `internal`, …
    pub code: String,
    pub message: String,
}

/// What a job does; `refine` is the only kind.
// Never written: every row holds the column's default, so rows decode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// Refine a phase's L0 assignments (docs/spec/jobs.md).
    #[default]
    Refine,
}

crate::domain::wire_strings!(JobKind, "job kind", column {
    Refine => "refine",
});

/// An executor profile's kind (docs/spec/operations.md).
// Rows hold only `Executor::kind`'s words (no CHECK), so they decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecutorKind {
    Command,
    Openai,
    Anthropic,
    Builtin,
}

crate::domain::wire_strings!(ExecutorKind, "executor kind", column {
    Command => "command",
    Openai => "openai",
    Anthropic => "anthropic",
    Builtin => "builtin",
});

/// A refine job as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StoredJob {
    pub id: Uuid,
    /// Always `refine`.
    pub kind: JobKind,
    pub status: JobStatus,
    pub phase_id: String,
    pub run_id: Option<Uuid>,
    pub project_id: Option<String>,
    pub team_pk: Option<String>,
    /// The executor profile name the job runs with.
    pub executor: String,
    /// Its kind: `command`, `openai`, `anthropic` or `builtin`.
    pub executor_kind: ExecutorKind,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub cancel_requested_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    /// Attempts started so far (a hand-back at shutdown is not charged).
    pub attempt: i32,
    pub max_attempts: i32,
    pub progress: JobProgress,
    /// The job log, in order: one line per L0 verdict, work-package conflict or warning.
    pub log: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase_refined_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<JobError>,
    /// Bumped by every change; the `id` of the job's last event.
    pub version: i64,
    /// What its L0 calls cost so far (for a run's phase job: this job's calls).
    pub usage: UsageTotals,
    /// Its spending limits; null when the request set none. A run's phase jobs
    /// show the run's budget, which applies to the whole run.
    pub budget: Option<Budget>,
    /// The job this one retries (`POST /v1/refine-jobs/{id}/retry`); null for a
    /// job submitted as such.
    pub retry_of: Option<Uuid>,
    /// The job that retries this one; null until it is retried.
    pub retried_by: Option<Uuid>,
}

/// One L0's record as `/assignments` shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StoredL0 {
    pub assignment_id: String,
    /// 1-based batch number.
    pub batch: i32,
    pub status: L0Status,
    /// The job attempt that ran it last.
    pub attempt: i32,
    /// How many times an L0 process/call was started for it (1 unless a crash
    /// interrupted it before its outcome was stored).
    pub starts: i32,
    /// Executor tries of the last start (transient errors retried).
    pub tries: i32,
    pub project_id: Option<String>,
    pub team_pk: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub exit_code: Option<i32>,
    /// Why it was not valid.
    pub error: Option<String>,
    /// Why it failed, typed, when a client can act on it: `rate_limited` (it
    /// waited its executor's `max_wait_secs` and never started) or
    /// `quota_exhausted` (the provider's spend or credit limit); null otherwise
    /// (docs/jobs.md, "Rate limits"). `error` keeps the full text.
    pub error_code: Option<L0ErrorCode>,
    /// The start of its answer (or stderr when it gave none).
    pub output_excerpt: Option<String>,
    /// What the call cost (all its tries); null until its outcome is stored.
    pub usage: Option<L0Usage>,
    /// The size of the prompt sent, in bytes (the prompt names the task file,
    /// never inlines it); null until its outcome is stored.
    pub prompt_bytes: Option<i64>,
}

/// A refine run as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StoredRun {
    pub id: Uuid,
    /// `running`, `cancelling`, `succeeded`, `failed` or `cancelled`.
    pub status: JobStatus,
    pub project_id: Option<String>,
    pub team_pk: Option<String>,
    pub executor: String,
    /// Phase id → its job, natural phase order.
    #[schema(value_type = Object)]
    pub phases: serde_json::Map<String, Value>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Present once merged.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// Changes when the run or any of its phase jobs changes.
    pub version: i64,
    /// What the L0 calls of all its phase jobs cost so far.
    pub usage: UsageTotals,
    /// The run's spending limits over all its phase jobs; null when none.
    pub budget: Option<Budget>,
}
