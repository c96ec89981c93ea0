//! Task-list gating (`docs/spec/gating.md` §1–§3): parse a planner's task list, run every
//! DAG gate, and report all violations with stable codes.
//!
//! Pure: no I/O. Runs in linear time (keyed hash maps over ids and paths, one
//! strongly-connected-components pass, one sort by wave), so hostile input cannot
//! make it quadratic; std's randomly keyed hasher also resists crafted collisions.
//!
//! Decisions where the spec leaves room (each is tested): docs/decisions.md, "The gate".

mod fence;
mod gates;
pub mod generate;
mod input;
mod text;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use input::ParsedTaskList;

/// Where a task list comes from.
pub enum TaskListSource<'a> {
    /// A JSON value that should be the task array (e.g. a request's `tasks`).
    Tasks(&'a serde_json::Value),
    /// The planner's raw text: the last fenced `json` (or unlabelled) block wins.
    PlannerOutput(&'a str),
    /// JSON text that should be the task array, parsed straight into tasks without an
    /// intermediate `serde_json::Value` (a fraction of the memory for big lists).
    Json(&'a str),
    /// A list already read as part of a larger document (see [`ParsedTaskList`]).
    Parsed(ParsedTaskList),
}

/// One task of a list. Fields that failed the shape checks hold defaults.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Task {
    pub task_id: String,
    pub assigned_persona: String,
    pub parallel_group: i64,
    pub depends_on: Vec<String>,
    pub reads: Vec<String>,
    pub writes: Vec<String>,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reviews: Option<String>,
    /// Unknown fields, kept in input order and returned, never rejected.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Stable violation codes (serialized snake_case), in gate order.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    SynthesisFailure,
    MissingField,
    InvalidField,
    DuplicateTaskId,
    InvalidParallelGroup,
    OrphanDependency,
    Cycle,
    WaveOrder,
    WriteContention,
    UnsatisfiedRead,
    InvalidReviews,
    SelfReview,
    OrphanReviews,
    ReviewerNotDisjoint,
    ReviewNotAfter,
    ReviewWithoutDependency,
    DuplicateDependency,
}

crate::domain::wire_strings!(Code {
    SynthesisFailure => "synthesis_failure",
    MissingField => "missing_field",
    InvalidField => "invalid_field",
    DuplicateTaskId => "duplicate_task_id",
    InvalidParallelGroup => "invalid_parallel_group",
    OrphanDependency => "orphan_dependency",
    Cycle => "cycle",
    WaveOrder => "wave_order",
    WriteContention => "write_contention",
    UnsatisfiedRead => "unsatisfied_read",
    InvalidReviews => "invalid_reviews",
    SelfReview => "self_review",
    OrphanReviews => "orphan_reviews",
    ReviewerNotDisjoint => "reviewer_not_disjoint",
    ReviewNotAfter => "review_not_after",
    ReviewWithoutDependency => "review_without_dependency",
    DuplicateDependency => "duplicate_dependency",
});

impl Code {
    /// The violation class a message starts with (the reference validator's exception
    /// names, which planners already know); `None` for synthesis failures, whose
    /// wording the spec fixes without a prefix.
    pub fn class_name(self) -> Option<&'static str> {
        match self {
            Code::SynthesisFailure => None,
            Code::MissingField | Code::InvalidField | Code::DuplicateTaskId => {
                Some("TaskShapeError")
            }
            Code::OrphanDependency => Some("OrphanDepsError"),
            Code::Cycle => Some("CycleError"),
            Code::WaveOrder => Some("WaveOrderError"),
            Code::WriteContention => Some("FileContentionError"),
            Code::UnsatisfiedRead => Some("UnsatisfiableReadsError"),
            Code::InvalidParallelGroup
            | Code::InvalidReviews
            | Code::SelfReview
            | Code::OrphanReviews
            | Code::ReviewerNotDisjoint
            | Code::ReviewNotAfter => Some("PlannerDagInvalid"),
            Code::ReviewWithoutDependency | Code::DuplicateDependency => Some("PlannerDagWarning"),
        }
    }
}

/// One gate violation or warning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Violation {
    pub code: Code,
    /// Starts with the class name (`CycleError: ...`); never contains a line break.
    pub message: String,
    /// The tasks involved, most relevant first.
    pub task_ids: Vec<String>,
    /// Position in the input list of the task the violation is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// A file path, after removing a leading `./`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The `parallel_group` of the task the violation is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<i64>,
    /// For `cycle`: the cycle's task ids in path order, from the naturally smallest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycle: Option<Vec<String>>,
}

impl Violation {
    /// A violation whose message is `body` behind the code's class prefix.
    pub(crate) fn new(code: Code, body: impl std::fmt::Display, task_ids: Vec<String>) -> Self {
        let message = match code.class_name() {
            Some(class) => format!("{class}: {body}"),
            None => body.to_string(),
        };
        Self {
            code,
            message,
            task_ids,
            index: None,
            field: None,
            path: None,
            wave: None,
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

    pub(crate) fn on_path(mut self, path: &str) -> Self {
        self.path = Some(path.to_owned());
        self
    }

    pub(crate) fn in_wave(mut self, wave: i64) -> Self {
        self.wave = Some(wave);
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Valid,
    /// Nothing usable came out (§2): escalate at once, no retry.
    SynthesisFailure,
    /// A list was read but violates gates (§3): one retry.
    DagInvalid,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Validation {
    pub outcome: Outcome,
    /// The typed tasks: complete and in input order when valid; otherwise the tasks
    /// with no shape error (gate 0), in input order; empty on synthesis failure.
    pub tasks: Vec<Task>,
    pub errors: Vec<Violation>,
    pub warnings: Vec<Violation>,
    /// Task ids by `parallel_group`, ascending, task order within a wave (tasks with
    /// an unusable id or group are left out).
    pub waves: Vec<Vec<String>>,
}

/// How many errors, and how many warnings, an answer of the server lists by default
/// (`PLANGATE_MAX_GATING_ERRORS`): a rejected 12 MB list once answered with 52.6 MB
/// of violations (docs/api.md, "Bounded gating answers").
pub const DEFAULT_MAX_ERRORS: usize = 100;

/// The body of `POST /v1/task-lists/validate` and of `plangate validate --format json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ValidationReport {
    pub valid: bool,
    /// The errors in gate order then task order: the server lists the first ones
    /// only (its `max_gating_errors`, 100 by default); `plangate validate` lists all.
    pub errors: Vec<Violation>,
    /// The warnings, cut like `errors`.
    pub warnings: Vec<Violation>,
    /// Every error found, listed or not.
    pub error_count: usize,
    /// Every warning found, listed or not.
    pub warning_count: usize,
    /// Every error found, listed or not, counted by code.
    pub error_counts: BTreeMap<Code, usize>,
    /// True when `errors` or `warnings` lists only the first ones: fix those and
    /// every other violation of the kinds `error_counts` names, then resubmit the
    /// list (or run `plangate validate` on it, which lists all).
    pub truncated: bool,
    pub waves: Vec<Vec<String>>,
}

impl ValidationReport {
    /// The report listing at most `max` errors and `max` warnings (the counts still
    /// count all of them).
    pub fn capped(mut self, max: usize) -> Self {
        if self.errors.len() > max || self.warnings.len() > max {
            self.truncated = true;
            self.errors.truncate(max);
            self.warnings.truncate(max);
        }
        self
    }
}

/// Errors per code.
fn counts_by_code(errors: &[Violation]) -> BTreeMap<Code, usize> {
    let mut counts = BTreeMap::new();
    for error in errors {
        *counts.entry(error.code).or_insert(0) += 1;
    }
    counts
}

impl Validation {
    pub fn is_valid(&self) -> bool {
        self.outcome == Outcome::Valid
    }

    /// The whole report: every error and warning.
    pub fn report(&self) -> ValidationReport {
        self.report_within(usize::MAX)
    }

    /// The report listing at most `max` errors and `max` warnings, copying only
    /// those.
    pub fn report_within(&self, max: usize) -> ValidationReport {
        ValidationReport {
            valid: self.is_valid(),
            errors: self.errors.iter().take(max).cloned().collect(),
            warnings: self.warnings.iter().take(max).cloned().collect(),
            error_count: self.errors.len(),
            warning_count: self.warnings.len(),
            error_counts: counts_by_code(&self.errors),
            truncated: self.errors.len() > max || self.warnings.len() > max,
            waves: self.waves.clone(),
        }
    }

    /// [`Validation::report`] without copying.
    pub fn into_report(self) -> ValidationReport {
        ValidationReport {
            valid: self.is_valid(),
            error_count: self.errors.len(),
            warning_count: self.warnings.len(),
            error_counts: counts_by_code(&self.errors),
            truncated: false,
            errors: self.errors,
            warnings: self.warnings,
            waves: self.waves,
        }
    }

    /// The text a planner is re-prompted with: every error message, one a line.
    pub fn reprompt(&self) -> String {
        self.reprompt_within(usize::MAX)
    }

    /// The re-prompt with the first `max` error messages, one a line; when there are
    /// more, a last line says how many of each kind were left out and asks for all of
    /// them to be fixed, so the planner does not fix the first ones only.
    pub fn reprompt_within(&self, max: usize) -> String {
        let mut text = String::new();
        for error in self.errors.iter().take(max) {
            text.push_str(&error.message);
            text.push('\n');
        }
        let left_out = &self.errors[self.errors.len().min(max)..];
        if !left_out.is_empty() {
            let kinds: Vec<String> = counts_by_code(left_out)
                .iter()
                .map(|(code, n)| format!("{n} {code}"))
                .collect();
            text.push_str(&format!(
                "... and {} more errors not listed ({}). Fix every violation of these kinds \
                 in the whole list, not only the ones listed, then resubmit the whole list.\n",
                left_out.len(),
                kinds.join(", ")
            ));
        }
        text
    }

    fn synthesis_failure(error: Violation) -> Self {
        Self {
            outcome: Outcome::SynthesisFailure,
            tasks: Vec::new(),
            errors: vec![error],
            warnings: Vec::new(),
            waves: Vec::new(),
        }
    }
}

/// Parses and gates a task list. `existing_files` are the paths that pre-exist in the
/// repository (a leading `./` is ignored).
pub fn validate(source: TaskListSource<'_>, existing_files: &[String]) -> Validation {
    run(source, existing_files, true)
}

/// [`validate`] for callers that need only the verdict: the same outcome and
/// report, without handing back the typed tasks.
pub fn validate_report(
    source: TaskListSource<'_>,
    existing_files: &[String],
) -> (Outcome, ValidationReport) {
    let validation = run(source, existing_files, false);
    (validation.outcome, validation.into_report())
}

fn run(source: TaskListSource<'_>, existing_files: &[String], keep_tasks: bool) -> Validation {
    let parsed = match source {
        TaskListSource::Tasks(value) => ParsedTaskList::from_value(value),
        TaskListSource::PlannerOutput(text) => fence::parse_planner_output(text),
        TaskListSource::Json(text) => input::parse_json_text(text, 1, None),
        TaskListSource::Parsed(parsed) => Ok(parsed),
    };
    match parsed.and_then(ParsedTaskList::into_tasks) {
        Ok(tasks) => gates::run(tasks, existing_files, keep_tasks),
        Err(error) => Validation::synthesis_failure(error.into_violation()),
    }
}
