//! Starting and completing steps (rules in the parent module's documentation).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::{CheckpointStatus, CurrentStep, LoopState, Metadata, Step, StepOutcome, TrackStatus};
use crate::domain::loop_plan::text::quote;

/// The body of `POST /v1/tracks/{id}/steps/{step}/start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StepStart {
    pub agent: String,
}

/// The body of `POST /v1/tracks/{id}/steps/{step}/complete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Completion {
    pub outcome: StepOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_sha: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// EXECUTE / FIX only.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::domain::json_int::option_u32"
    )]
    #[schema(value_type = Option<u64>, maximum = 4294967295.0)]
    pub tasks_completed: Option<u32>,
    /// EXECUTE / FIX only.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::domain::json_int::option_u32"
    )]
    #[schema(value_type = Option<u64>, maximum = 4294967295.0)]
    pub tasks_total: Option<u32>,
    /// EXECUTE / FIX only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_task: Option<String>,
    /// EXECUTE / FIX only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_commit: Option<String>,
}

impl Completion {
    /// A completion with only an outcome.
    pub fn new(outcome: StepOutcome) -> Self {
        Self {
            outcome,
            commit_sha: None,
            notes: None,
            tasks_completed: None,
            tasks_total: None,
            last_task: None,
            last_commit: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TransitionCode {
    /// Not a legal move from the current state (HTTP 409).
    IllegalTransition,
    /// The step name is not one of the six (HTTP 409, like the spec says).
    UnknownStep,
    /// The track is `blocked` or `complete` (HTTP 409).
    TrackClosed,
    /// The request body itself is unusable, e.g. an empty agent (HTTP 422).
    InvalidInput,
}

/// A refused start or completion, with what would be legal instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, thiserror::Error)]
#[error("{message}")]
pub struct TransitionError {
    pub code: TransitionCode,
    /// One line, ending with the legal next steps.
    pub message: String,
    /// `loop_state.current_step` (`PLAN` … or `COMPLETE`).
    pub current_step: CurrentStep,
    /// `loop_state.step_status`.
    pub step_status: CheckpointStatus,
    /// e.g. `["start PLAN"]`, `["complete EVALUATE_PLAN"]`; empty for a closed track.
    pub legal: Vec<String>,
}

/// What may be done next: `start X` or `complete X` for the current step, or
/// nothing when the track is closed.
pub fn legal_next_steps(meta: &Metadata) -> Vec<String> {
    if meta.is_closed() {
        return Vec::new();
    }
    let Some(step) = meta.loop_state.current_step.step() else {
        return Vec::new();
    };
    match meta.loop_state.step_status {
        CheckpointStatus::NotStarted | CheckpointStatus::Failed => vec![format!("start {step}")],
        CheckpointStatus::InProgress => vec![format!("complete {step}")],
        CheckpointStatus::Passed | CheckpointStatus::Blocked | CheckpointStatus::Skipped => {
            Vec::new()
        }
    }
}

fn refuse(meta: &Metadata, code: TransitionCode, problem: String) -> TransitionError {
    let legal = legal_next_steps(meta);
    let next = if legal.is_empty() {
        match meta.status {
            TrackStatus::Complete => "none (the track is complete)".to_owned(),
            _ => "none until the metadata is re-imported (PUT the track)".to_owned(),
        }
    } else {
        legal.join(", ")
    };
    TransitionError {
        code,
        message: format!("{problem}; legal next: {next}"),
        current_step: meta.loop_state.current_step,
        step_status: meta.loop_state.step_status,
        legal,
    }
}

/// The 409 for a step name that [`Step::parse`] does not know.
pub fn unknown_step(meta: &Metadata, name: &str) -> TransitionError {
    let known: Vec<&str> = Step::ALL.iter().map(|step| step.as_str()).collect();
    refuse(
        meta,
        TransitionCode::UnknownStep,
        format!(
            "unknown step {}; steps are {}",
            quote(name),
            known.join(", ")
        ),
    )
}

/// Refuses anything on a closed track, any step but the current one, and the current
/// one unless its status is one of `from` (`expected` ends the message saying which).
fn check_current(
    meta: &Metadata,
    step: Step,
    action: &str,
    from: &[CheckpointStatus],
    expected: &str,
) -> Result<(), TransitionError> {
    if meta.is_closed() {
        let state = if meta.status == TrackStatus::Blocked {
            "blocked"
        } else {
            "complete"
        };
        return Err(refuse(
            meta,
            TransitionCode::TrackClosed,
            format!("cannot {action} {step}: the track is {state}"),
        ));
    }
    if meta.loop_state.current_step != CurrentStep::from(step) {
        return Err(refuse(
            meta,
            TransitionCode::IllegalTransition,
            format!(
                "cannot {action} {step}: the current step is {} ({})",
                meta.loop_state.current_step.as_str(),
                meta.loop_state.step_status.as_str()
            ),
        ));
    }
    let status = meta.loop_state.step_status;
    if !from.contains(&status) {
        return Err(refuse(
            meta,
            TransitionCode::IllegalTransition,
            format!(
                "cannot {action} {step}: it is {}{expected}",
                status.as_str()
            ),
        ));
    }
    Ok(())
}

/// Short single-line identifiers (agents, commits, task ids).
fn check_label(field: &str, value: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        Err(format!("{field} must not be empty"))
    } else if value.len() > 256 {
        Err(format!("{field} must be at most 256 bytes"))
    } else if value.chars().any(char::is_control) {
        Err(format!("{field} must not contain control characters"))
    } else {
        Ok(())
    }
}

fn invalid_input(meta: &Metadata, problem: String) -> TransitionError {
    refuse(meta, TransitionCode::InvalidInput, problem)
}

/// Starts the current step (`NOT_STARTED`, or `FAILED` for a retry).
pub fn start_step(
    meta: &Metadata,
    step: Step,
    agent: &str,
    now: DateTime<Utc>,
) -> Result<Metadata, TransitionError> {
    check_label("agent", agent).map_err(|problem| invalid_input(meta, problem))?;
    let from = [CheckpointStatus::NotStarted, CheckpointStatus::Failed];
    check_current(meta, step, "start", &from, "")?;
    let mut next = meta.clone();
    let loop_state = &mut next.loop_state;
    loop_state.step_status = CheckpointStatus::InProgress;
    loop_state.step_started_at = Some(now);
    let checkpoint = loop_state.checkpoints.get_mut(step);
    checkpoint.status = CheckpointStatus::InProgress;
    checkpoint.started_at = Some(now);
    checkpoint.agent = Some(agent.to_owned());
    // The previous attempt's results no longer describe this one.
    checkpoint.completed_at = None;
    checkpoint.notes = None;
    checkpoint.commit_sha = None;
    next.status = TrackStatus::InProgress;
    next.updated_at = now;
    Ok(next)
}

fn check_completion(step: Step, completion: &Completion) -> Result<(), String> {
    for (field, value) in [
        ("commit_sha", &completion.commit_sha),
        ("last_task", &completion.last_task),
        ("last_commit", &completion.last_commit),
    ] {
        if let Some(value) = value {
            check_label(field, value)?;
        }
    }
    let progress_given = completion.tasks_completed.is_some()
        || completion.tasks_total.is_some()
        || completion.last_task.is_some()
        || completion.last_commit.is_some();
    if progress_given && !matches!(step, Step::Execute | Step::Fix) {
        return Err(format!(
            "tasks_completed, tasks_total, last_task and last_commit are reported by EXECUTE \
             and FIX only, not {step}"
        ));
    }
    if let (Some(done), Some(total)) = (completion.tasks_completed, completion.tasks_total)
        && done > total
    {
        return Err(format!(
            "tasks_completed ({done}) must not exceed tasks_total ({total})"
        ));
    }
    Ok(())
}

/// Completes the current, `IN_PROGRESS` step with `completion.outcome`.
pub fn complete_step(
    meta: &Metadata,
    step: Step,
    completion: &Completion,
    now: DateTime<Utc>,
) -> Result<Metadata, TransitionError> {
    check_completion(step, completion).map_err(|problem| invalid_input(meta, problem))?;
    let from = [CheckpointStatus::InProgress];
    check_current(meta, step, "complete", &from, ", not IN_PROGRESS")?;
    let mut next = meta.clone();
    next.updated_at = now;
    next.status = TrackStatus::InProgress;
    record(&mut next, step, completion, now);
    let outcome_status = match completion.outcome {
        StepOutcome::Passed => CheckpointStatus::Passed,
        StepOutcome::Failed => CheckpointStatus::Failed,
        StepOutcome::Blocked => CheckpointStatus::Blocked,
    };
    next.loop_state.checkpoints.get_mut(step).status = outcome_status;

    match (step, completion.outcome) {
        (_, StepOutcome::Blocked) => {
            next.loop_state.step_status = CheckpointStatus::Blocked;
            block(
                &mut next,
                step,
                "the step reported BLOCKED",
                completion,
                now,
            );
        }
        (Step::Plan, StepOutcome::Passed) => {
            let plan = &mut next.loop_state.checkpoints.plan;
            plan.plan_version = Some(plan.plan_version.unwrap_or(0).saturating_add(1));
            advance(&mut next, Step::EvaluatePlan);
        }
        (Step::EvaluatePlan, StepOutcome::Passed) => advance(&mut next, Step::Execute),
        (Step::Execute, StepOutcome::Passed) | (Step::Fix, StepOutcome::Passed) => {
            advance(&mut next, Step::EvaluateExecution);
        }
        (Step::EvaluateExecution, StepOutcome::Passed) => {
            if next.loop_state.checkpoints.business_sync.required == Some(true) {
                advance(&mut next, Step::BusinessSync);
            } else {
                next.loop_state.checkpoints.business_sync.status = CheckpointStatus::Skipped;
                finish(&mut next);
            }
        }
        (Step::BusinessSync, StepOutcome::Passed) => finish(&mut next),
        (Step::EvaluatePlan, StepOutcome::Failed) => {
            let names = ("plan_revision_count", "max_plan_revisions");
            let rounds: Rounds = |s| (&mut s.plan_revision_count, s.max_plan_revisions);
            retry_or_block(
                &mut next,
                (step, Step::Plan),
                rounds,
                names,
                completion,
                now,
            );
        }
        (Step::EvaluateExecution, StepOutcome::Failed) => {
            let names = ("fix_cycle_count", "max_fix_cycles");
            let rounds: Rounds = |s| (&mut s.fix_cycle_count, s.max_fix_cycles);
            retry_or_block(&mut next, (step, Step::Fix), rounds, names, completion, now);
        }
        (Step::Execute, StepOutcome::Failed) => advance(&mut next, Step::Fix),
        // No FAILED edge: the step stays current and can be started again.
        (Step::Plan | Step::Fix | Step::BusinessSync, StepOutcome::Failed) => {
            next.loop_state.step_status = CheckpointStatus::Failed;
        }
    }
    Ok(next)
}

/// Writes the completion's report onto the step's checkpoint.
fn record(meta: &mut Metadata, step: Step, completion: &Completion, now: DateTime<Utc>) {
    let checkpoint = meta.loop_state.checkpoints.get_mut(step);
    checkpoint.completed_at = Some(now);
    if let Some(notes) = &completion.notes {
        checkpoint.notes = Some(notes.clone());
    }
    if let Some(sha) = &completion.commit_sha {
        checkpoint.commit_sha = Some(sha.clone());
    }
    if let Some(done) = completion.tasks_completed {
        checkpoint.tasks_completed = Some(done);
    }
    if let Some(total) = completion.tasks_total {
        checkpoint.tasks_total = Some(total);
    }
    if let Some(task) = &completion.last_task {
        checkpoint.last_task = Some(task.clone());
    }
    if let Some(commit) = &completion.last_commit {
        checkpoint.last_commit = Some(commit.clone());
    }
}

/// A loop's round counter and its limit.
type Rounds = fn(&mut LoopState) -> (&mut u32, u32);

/// A failed evaluation counts one more round: back to `retry`, unless the count
/// (`counter` gives it and its limit; `names` theirs) reaches its limit, which
/// fails the step and blocks the track.
fn retry_or_block(
    meta: &mut Metadata,
    (step, retry): (Step, Step),
    counter: Rounds,
    (count_name, limit_name): (&str, &str),
    completion: &Completion,
    now: DateTime<Utc>,
) {
    let (count, limit) = counter(&mut meta.loop_state);
    *count = count.saturating_add(1);
    if *count >= limit {
        let reason = format!("{count_name} reached {limit_name} ({limit})");
        meta.loop_state.step_status = CheckpointStatus::Failed;
        block(meta, step, &reason, completion, now);
    } else {
        advance(meta, retry);
    }
}

fn advance(meta: &mut Metadata, step: Step) {
    let loop_state = &mut meta.loop_state;
    loop_state.current_step = CurrentStep::from(step);
    loop_state.step_status = CheckpointStatus::NotStarted;
    loop_state.step_started_at = None;
    loop_state.checkpoints.get_mut(step).status = CheckpointStatus::NotStarted;
}

fn finish(meta: &mut Metadata) {
    let loop_state = &mut meta.loop_state;
    loop_state.current_step = CurrentStep::Complete;
    loop_state.step_status = CheckpointStatus::Passed;
    loop_state.step_started_at = None;
    meta.status = TrackStatus::Complete;
}

fn block(
    meta: &mut Metadata,
    step: Step,
    reason: &str,
    completion: &Completion,
    now: DateTime<Utc>,
) {
    meta.status = TrackStatus::Blocked;
    let mut entry = json!({
        "step": step.as_str(),
        "reason": reason,
        "at": now.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
    });
    if let (Some(notes), Value::Object(object)) = (&completion.notes, &mut entry) {
        object.insert("notes".into(), Value::String(notes.clone()));
    }
    meta.blockers.push(entry);
}
