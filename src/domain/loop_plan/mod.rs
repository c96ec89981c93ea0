//! Loop plans (`docs/spec/loop-plan.md` §1): turn a track's tasks into a DAG with
//! topological levels, one parallel group per level, file-conflict analysis, overlap
//! with completed tracks, and the `plan.md` text — and read a `plan.md` back.
//!
//! Pure: no I/O. [`plan`] runs in O(n log n) for n tasks (hash maps over ids, files
//! and deliverables, one graph pass from [`crate::domain::graph`], one natural sort
//! per level); nothing recurses on input depth.
//!
//! Decisions where the spec leaves room (each is tested): docs/decisions.md, "Loop plans".

mod build;
pub mod generate;
pub mod markdown;
pub mod overlap;
mod request;
pub mod rules;
pub(crate) mod text;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use build::plan;
pub use markdown::{
    DiscoveredItem, ParsedPlan, Progress, ProgressCounts, ProgressStatus, TaskProgress,
    parse_markdown, render_markdown,
};
pub use overlap::parse_tracks_md;
pub use request::{parse_request_json, parse_request_yaml};
pub use rules::{
    TYPE_RULES, TypeRule, detect_type, estimate_duration, format_duration, normalize_duration,
};

/// The body of `POST /v1/loop-plans/generate` and the file of `plangate plan`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LoopPlanRequest {
    pub track: TrackInfo,
    pub phases: Vec<PhaseInfo>,
    /// Kept as raw JSON so [`plan`] can name the index and field of every problem.
    #[schema(value_type = Vec<Object>)]
    #[serde(deserialize_with = "crate::domain::json_int::values")]
    pub tasks: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_tracks: Option<Vec<CompletedTrack>>,
    /// The `tracks.md` text; its completed rows are added to `completed_tracks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracks_md: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TrackInfo {
    pub id: String,
    pub name: String,
    /// One-line summary of the track's spec.
    #[serde(default)]
    pub spec: String,
    /// Ids of tracks this one depends on.
    #[serde(default)]
    pub dependencies: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PhaseInfo {
    #[serde(deserialize_with = "crate::domain::json_int::u32")]
    #[schema(value_type = u64, maximum = 4294967295.0)]
    pub number: u32,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CompletedTrack {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Free text, typically file paths (`src/tenancy/model.py`) or feature names.
    #[serde(default)]
    pub deliverables: Vec<String>,
}

/// Task kinds, in detection precedence order (see [`rules`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TaskType {
    Test,
    Ui,
    Integration,
    Docs,
    Config,
    Code,
}

crate::domain::wire_strings!(TaskType, parse {
    Test => "test",
    Ui => "ui",
    Integration => "integration",
    Docs => "docs",
    Config => "config",
    Code => "code",
});

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ExecutionMode {
    /// Some level holds two or more tasks.
    Parallel,
    Sequential,
}

crate::domain::wire_strings!(ExecutionMode {
    Parallel => "PARALLEL",
    Sequential => "SEQUENTIAL",
});

/// The generated plan: the `POST /v1/loop-plans/generate` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LoopPlan {
    pub track: TrackInfo,
    /// Sorted by number.
    pub phases: Vec<PhaseInfo>,
    pub dag: Dag,
    pub execution_mode: ExecutionMode,
    pub summary: Summary,
    pub overlap: Vec<Overlap>,
    /// Ids of the completed tracks the overlap check looked at, in input order.
    pub checked_tracks: Vec<String>,
    /// Empty when the plan is valid.
    pub errors: Vec<PlanViolation>,
}

impl LoopPlan {
    pub fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Dag {
    pub nodes: Vec<Node>,
    pub parallel_groups: Vec<ParallelGroup>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Node {
    pub id: String,
    pub name: String,
    #[serde(rename = "type")]
    pub r#type: TaskType,
    #[serde(default)]
    pub files: Vec<String>,
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// Normalized (`30m`, `1h`, `1h30m`): the given one or the estimate.
    #[serde(default)]
    pub estimated_duration: String,
    pub phase: u32,
    /// Longest dependency path to the task, roots at 1; absent when a cycle exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// `SKIP — already done in {TRACK-ID}` when the task overlaps a completed track.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ParallelGroup {
    /// `pg-N` for level N.
    pub id: String,
    /// Task ids of the level, in natural order.
    pub tasks: Vec<String>,
    /// No file is touched by two tasks of the group.
    pub conflict_free: bool,
    /// Files touched by two or more tasks of the group, in natural order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_resources: Option<Vec<String>>,
    /// `file_lock` whenever `shared_resources` is present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordination_strategy: Option<String>,
}

pub const FILE_LOCK: &str = "file_lock";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Summary {
    pub total_tasks: usize,
    pub phases: usize,
    pub parallel_groups: usize,
    /// Size of the largest group.
    pub max_concurrency: usize,
    pub conflict_free_groups: usize,
    pub coordinated_groups: usize,
    /// The track's dependencies (other track ids).
    pub dependencies: Vec<String>,
    /// Tasks marked `skip` by the overlap check.
    pub skipped_tasks: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Overlap {
    pub task_id: String,
    pub track_id: String,
    /// `SKIP — already done in {TRACK-ID}`.
    pub reason: String,
    /// The task file or name that matched a deliverable.
    pub matched: String,
}

/// Stable violation codes (serialized snake_case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlanCode {
    MissingField,
    InvalidField,
    DuplicateTaskId,
    OrphanDependency,
    Cycle,
}

crate::domain::wire_strings!(PlanCode {
    MissingField => "missing_field",
    InvalidField => "invalid_field",
    DuplicateTaskId => "duplicate_task_id",
    OrphanDependency => "orphan_dependency",
    Cycle => "cycle",
});

impl PlanCode {
    /// The message prefix, as in gating (planners already know these names).
    fn class_name(self) -> &'static str {
        match self {
            PlanCode::MissingField | PlanCode::InvalidField | PlanCode::DuplicateTaskId => {
                "TaskShapeError"
            }
            PlanCode::OrphanDependency => "OrphanDepsError",
            PlanCode::Cycle => "CycleError",
        }
    }
}

/// One validation error, shaped like gating's `Violation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PlanViolation {
    pub code: PlanCode,
    /// Starts with the class name (`CycleError: ...`); never contains a line break.
    pub message: String,
    /// The tasks involved, most relevant first.
    pub task_ids: Vec<String>,
    /// Position in `tasks` of the task the violation is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// For `cycle`: task ids in path order (each depends_on the next, the last on the
    /// first), from the naturally smallest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycle: Option<Vec<String>>,
}

impl PlanViolation {
    pub(crate) fn new(code: PlanCode, body: impl std::fmt::Display, task_ids: Vec<String>) -> Self {
        Self {
            code,
            message: format!("{}: {body}", code.class_name()),
            task_ids,
            index: None,
            field: None,
            cycle: None,
        }
    }

    pub(crate) fn at_index(mut self, index: usize) -> Self {
        self.index = Some(index);
        self
    }

    pub(crate) fn on_field(mut self, field: &str) -> Self {
        self.field = Some(field.to_owned());
        self
    }
}

/// What a [`PlanError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlanErrorKind {
    /// The request (JSON or YAML) could not be read.
    InvalidRequest,
    /// A `plan.md` could not be read.
    InvalidPlanMarkdown,
    /// A `tracks.md` could not be read.
    InvalidTracksMarkdown,
}

/// A document that cannot be read at all (as opposed to a readable but invalid plan,
/// which [`LoopPlan::errors`] describes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PlanError {
    pub kind: PlanErrorKind,
    /// One line; starts with `line N: ` when the line is known.
    pub message: String,
    /// 1-based line in the document.
    pub line: Option<usize>,
}

impl PlanError {
    pub(crate) fn new(
        kind: PlanErrorKind,
        line: Option<usize>,
        body: impl std::fmt::Display,
    ) -> Self {
        let body = text::one_line(&body.to_string());
        let message = match line {
            Some(line) => format!("line {line}: {body}"),
            None => body,
        };
        Self {
            kind,
            message,
            line,
        }
    }
}
