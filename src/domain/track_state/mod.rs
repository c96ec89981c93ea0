//! Track loop state (`docs/spec/loop-plan.md` §2): the v2 `metadata.json` as typed values,
//! v1 → v2 import, and the step state machine. Pure: time is a parameter.
//!
//! Status values and the state machine's rules: docs/decisions.md, "Track status and
//! the step state machine".

mod import;
mod machine;

#[cfg(test)]
mod tests;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

pub use import::{import, import_for_track};
pub use machine::{
    Completion, StepStart, TransitionCode, TransitionError, complete_step, legal_next_steps,
    start_step, unknown_step,
};

/// The loop's steps: one closed enum (wire names `PLAN`, `EVALUATE_PLAN`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Step {
    Plan,
    EvaluatePlan,
    Execute,
    EvaluateExecution,
    Fix,
    BusinessSync,
}

crate::domain::wire_strings!(Step {
    Plan => "PLAN",
    EvaluatePlan => "EVALUATE_PLAN",
    Execute => "EXECUTE",
    EvaluateExecution => "EVALUATE_EXECUTION",
    Fix => "FIX",
    BusinessSync => "BUSINESS_SYNC",
});

impl Step {
    /// A wire name, ASCII case-insensitively (`evaluate_plan` works in a URL path);
    /// nothing else.
    pub fn parse(text: &str) -> Option<Step> {
        Self::ALL
            .into_iter()
            .find(|step| step.as_str().eq_ignore_ascii_case(text))
    }
}

/// `loop_state.current_step`: a step, or `COMPLETE` once the loop is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CurrentStep {
    Plan,
    EvaluatePlan,
    Execute,
    EvaluateExecution,
    Fix,
    BusinessSync,
    Complete,
}

impl CurrentStep {
    pub fn step(self) -> Option<Step> {
        match self {
            CurrentStep::Plan => Some(Step::Plan),
            CurrentStep::EvaluatePlan => Some(Step::EvaluatePlan),
            CurrentStep::Execute => Some(Step::Execute),
            CurrentStep::EvaluateExecution => Some(Step::EvaluateExecution),
            CurrentStep::Fix => Some(Step::Fix),
            CurrentStep::BusinessSync => Some(Step::BusinessSync),
            CurrentStep::Complete => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.step().map_or("COMPLETE", Step::as_str)
    }

    /// Inverse of [`Self::as_str`] (a step's name case-insensitively, as [`Step::parse`]).
    pub fn parse(text: &str) -> Option<CurrentStep> {
        if text == "COMPLETE" {
            return Some(CurrentStep::Complete);
        }
        Step::parse(text).map(CurrentStep::from)
    }
}

impl From<Step> for CurrentStep {
    fn from(step: Step) -> Self {
        match step {
            Step::Plan => CurrentStep::Plan,
            Step::EvaluatePlan => CurrentStep::EvaluatePlan,
            Step::Execute => CurrentStep::Execute,
            Step::EvaluateExecution => CurrentStep::EvaluateExecution,
            Step::Fix => CurrentStep::Fix,
            Step::BusinessSync => CurrentStep::BusinessSync,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CheckpointStatus {
    #[default]
    NotStarted,
    InProgress,
    Passed,
    Failed,
    Blocked,
    Skipped,
}

crate::domain::wire_strings!(CheckpointStatus {
    NotStarted => "NOT_STARTED",
    InProgress => "IN_PROGRESS",
    Passed => "PASSED",
    Failed => "FAILED",
    Blocked => "BLOCKED",
    Skipped => "SKIPPED",
});

/// How a step ended, as its agent reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StepOutcome {
    Passed,
    Failed,
    Blocked,
}

crate::domain::wire_strings!(StepOutcome, "step outcome", column {
    Passed => "PASSED",
    Failed => "FAILED",
    Blocked => "BLOCKED",
});

/// What a write of a track's document did, as its history records it (docs/api.md,
/// "Tracks"): the document keeps only each step's latest checkpoint, the history
/// every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TrackEventAction {
    /// The document was imported (created or replaced).
    Imported,
    /// A step was started.
    Started,
    /// A step was completed with an outcome.
    Completed,
}

crate::domain::wire_strings!(TrackEventAction, "track event action", column {
    Imported => "imported",
    Started => "started",
    Completed => "completed",
});

/// One entry of a track's history: what a write of its document did.
#[derive(Debug, Clone, Serialize, ToSchema, sqlx::FromRow)]
pub struct StoredTrackEvent {
    pub at: DateTime<Utc>,
    /// The document revision (`ETag`) this write made.
    pub revision: i64,
    pub action: TrackEventAction,
    /// `started` / `completed`: the step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<Step>,
    /// `completed`: the verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<StepOutcome>,
    /// `started`: the agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// `completed`: the verdict's notes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit_sha: Option<String>,
    /// The track's status after the write.
    pub status: TrackStatus,
    /// The track's current step after the write.
    pub current_step: CurrentStep,
}

/// The track's overall status. Older spellings (`NEW`, `pending`, `IN_PROGRESS`,
/// `done`, …) are read as these four.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TrackStatus {
    #[serde(alias = "NEW", alias = "pending", alias = "planned")]
    New,
    #[serde(alias = "IN_PROGRESS", alias = "in-progress", alias = "active")]
    InProgress,
    #[serde(alias = "BLOCKED")]
    Blocked,
    #[serde(alias = "COMPLETE", alias = "completed", alias = "done")]
    Complete,
}

crate::domain::wire_strings!(TrackStatus {
    New => "new",
    InProgress => "in_progress",
    Blocked => "blocked",
    Complete => "complete",
});

impl TrackStatus {
    /// Import's lenient reading (see the module documentation).
    pub fn parse(text: &str) -> Option<TrackStatus> {
        match text.trim().to_ascii_lowercase().as_str() {
            "new" | "pending" | "planned" => Some(TrackStatus::New),
            "in_progress" | "in-progress" | "active" => Some(TrackStatus::InProgress),
            "blocked" => Some(TrackStatus::Blocked),
            "complete" | "completed" | "done" => Some(TrackStatus::Complete),
            _ => None,
        }
    }
}

/// A track id that is safe as one path segment: only `[A-Za-z0-9._-]`, 1–128 bytes,
/// not starting with `.` (so never `.`, `..` or a hidden file).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TrackId(String);

pub const MAX_TRACK_ID_BYTES: usize = 128;

/// [`TrackId`]'s rule as a regex (with `maxLength` [`MAX_TRACK_ID_BYTES`]; the
/// characters are ASCII, so bytes and characters agree).
pub const TRACK_ID_PATTERN: &str = "^[A-Za-z0-9_-][A-Za-z0-9._-]*$";

/// The OpenAPI schema of track ids (`value_type = TrackId`): the rule, exactly.
impl utoipa::PartialSchema for TrackId {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        crate::domain::ids::id_schema(
            "A track id: 1 to 128 of A-Z, a-z, 0-9, `.`, `_`, `-`, not starting with `.`.",
            MAX_TRACK_ID_BYTES,
            TRACK_ID_PATTERN,
        )
    }
}

impl utoipa::ToSchema for TrackId {}

impl TrackId {
    pub fn parse(text: &str) -> Result<Self, TrackError> {
        let problem = if text.is_empty() {
            Some("is empty")
        } else if text.len() > MAX_TRACK_ID_BYTES {
            Some("is longer than 128 bytes")
        } else if text.starts_with('.') {
            Some("starts with '.'")
        } else if !text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            Some("has characters other than A-Z, a-z, 0-9, '.', '_' and '-'")
        } else {
            None
        };
        match problem {
            None => Ok(Self(text.to_owned())),
            Some(problem) => Err(TrackError::new(
                TrackErrorCode::InvalidTrackId,
                format!(
                    "track id {} {problem}",
                    crate::domain::loop_plan::text::quote(text)
                ),
            )),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TrackId {
    type Error = TrackError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::parse(&text)
    }
}

impl From<TrackId> for String {
    fn from(id: TrackId) -> Self {
        id.0
    }
}

impl std::fmt::Display for TrackId {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}

/// One step's checkpoint. Fields a step never uses stay absent on the wire.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Checkpoint {
    #[serde(default)]
    pub status: CheckpointStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_sha: Option<String>,
    /// PLAN: how many plans have passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_version: Option<u32>,
    /// EXECUTE / FIX progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_completed: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_total: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_commit: Option<String>,
    /// BUSINESS_SYNC: whether the loop must pass through it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Checkpoints {
    #[serde(rename = "PLAN", default)]
    pub plan: Checkpoint,
    #[serde(rename = "EVALUATE_PLAN", default)]
    pub evaluate_plan: Checkpoint,
    #[serde(rename = "EXECUTE", default)]
    pub execute: Checkpoint,
    #[serde(rename = "EVALUATE_EXECUTION", default)]
    pub evaluate_execution: Checkpoint,
    #[serde(rename = "FIX", default)]
    pub fix: Checkpoint,
    #[serde(rename = "BUSINESS_SYNC", default = "business_sync_default")]
    pub business_sync: Checkpoint,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn business_sync_default() -> Checkpoint {
    Checkpoint {
        required: Some(false),
        ..Checkpoint::default()
    }
}

impl Default for Checkpoints {
    fn default() -> Self {
        Self {
            plan: Checkpoint::default(),
            evaluate_plan: Checkpoint::default(),
            execute: Checkpoint::default(),
            evaluate_execution: Checkpoint::default(),
            fix: Checkpoint::default(),
            business_sync: business_sync_default(),
            extra: Map::new(),
        }
    }
}

impl Checkpoints {
    pub fn get(&self, step: Step) -> &Checkpoint {
        match step {
            Step::Plan => &self.plan,
            Step::EvaluatePlan => &self.evaluate_plan,
            Step::Execute => &self.execute,
            Step::EvaluateExecution => &self.evaluate_execution,
            Step::Fix => &self.fix,
            Step::BusinessSync => &self.business_sync,
        }
    }

    pub fn get_mut(&mut self, step: Step) -> &mut Checkpoint {
        match step {
            Step::Plan => &mut self.plan,
            Step::EvaluatePlan => &mut self.evaluate_plan,
            Step::Execute => &mut self.execute,
            Step::EvaluateExecution => &mut self.evaluate_execution,
            Step::Fix => &mut self.fix,
            Step::BusinessSync => &mut self.business_sync,
        }
    }
}

pub const DEFAULT_MAX_FIX_CYCLES: u32 = 3;
pub const DEFAULT_MAX_PLAN_REVISIONS: u32 = 3;

fn default_max_fix_cycles() -> u32 {
    DEFAULT_MAX_FIX_CYCLES
}

fn default_max_plan_revisions() -> u32 {
    DEFAULT_MAX_PLAN_REVISIONS
}

fn default_current_step() -> CurrentStep {
    CurrentStep::Plan
}

/// `loop_state`. Missing fields take their fresh-track defaults, so a partial
/// `loop_state` written by an agent still imports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LoopState {
    #[serde(default = "default_current_step")]
    pub current_step: CurrentStep,
    #[serde(default)]
    pub step_status: CheckpointStatus,
    #[serde(default)]
    pub step_started_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub fix_cycle_count: u32,
    #[serde(default = "default_max_fix_cycles")]
    pub max_fix_cycles: u32,
    #[serde(default)]
    pub plan_revision_count: u32,
    #[serde(default = "default_max_plan_revisions")]
    pub max_plan_revisions: u32,
    #[serde(default)]
    pub checkpoints: Checkpoints,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Default for LoopState {
    fn default() -> Self {
        Self {
            current_step: CurrentStep::Plan,
            step_status: CheckpointStatus::NotStarted,
            step_started_at: None,
            fix_cycle_count: 0,
            max_fix_cycles: DEFAULT_MAX_FIX_CYCLES,
            plan_revision_count: 0,
            max_plan_revisions: DEFAULT_MAX_PLAN_REVISIONS,
            checkpoints: Checkpoints::default(),
            extra: Map::new(),
        }
    }
}

pub const METADATA_VERSION: u32 = 2;

/// A track's v2 `metadata.json`. Unknown top-level fields are kept in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Metadata {
    /// Always 2.
    pub version: u32,
    pub track_id: TrackId,
    /// Free text such as `feature`, `bug`, `refactor`.
    #[serde(rename = "type")]
    pub r#type: String,
    pub status: TrackStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub loop_state: LoopState,
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub discovered_work: Vec<Value>,
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub blockers: Vec<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Metadata {
    /// A fresh track: PLAN not started, every checkpoint `NOT_STARTED`.
    pub fn new(track_id: TrackId, kind: impl Into<String>, now: DateTime<Utc>) -> Self {
        Self {
            version: METADATA_VERSION,
            track_id,
            r#type: kind.into(),
            status: TrackStatus::New,
            created_at: now,
            updated_at: now,
            loop_state: LoopState::default(),
            discovered_work: Vec::new(),
            blockers: Vec::new(),
            extra: Map::new(),
        }
    }

    /// Whether the track refuses further steps until re-imported.
    pub fn is_closed(&self) -> bool {
        matches!(self.status, TrackStatus::Blocked | TrackStatus::Complete)
            || self.loop_state.current_step == CurrentStep::Complete
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TrackErrorCode {
    InvalidTrackId,
    InvalidMetadata,
    UnsupportedVersion,
    TrackIdMismatch,
}

/// A metadata document or track id that cannot be accepted (HTTP 422 / 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TrackError {
    pub code: TrackErrorCode,
    /// One line.
    pub message: String,
}

impl TrackError {
    pub(crate) fn new(code: TrackErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

// Their own (lenient) `parse` reads the stored words too.
crate::domain::wire_strings!(@column Step, "step");
crate::domain::wire_strings!(@column CurrentStep, "current step");
crate::domain::wire_strings!(@column TrackStatus, "track status");
