//! The L1 step of one phase (docs/spec/refine.md §2–§6): batches, L0 answer classification,
//! WP ownership conflicts, `remove` adjustments, changes and dependency corrections.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::answer::{L0Answer, scan};
use super::input::{Assignment, PhaseContext};
use crate::domain::natural::natural_cmp;

/// The ceiling on concurrent L0s (docs/spec/refine.md §2); configuration may only lower it.
pub const MAX_PARALLEL: usize = 6;

/// The log line between two batches.
pub const NEXT_BATCH: &str = "--- next batch ---";

/// Splits assignment ids into sequential batches: natural order, each at most
/// `max_parallel` long, `max_parallel` clamped to `1..=6`.
pub fn batches(assignment_ids: &[String], max_parallel: usize) -> Vec<Vec<String>> {
    let size = max_parallel.clamp(1, MAX_PARALLEL);
    let mut ids = assignment_ids.to_vec();
    ids.sort_by(|a, b| natural_cmp(a, b));
    ids.chunks(size).map(<[String]>::to_vec).collect()
}

/// What an executor produced for one L0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum L0Outcome {
    /// The L0's answer text (stdout, or the model's message).
    Answer(String),
    /// No answer: spawn error, timeout, non-zero exit with empty output, executor error.
    Failed(String),
}

/// The per-L0 record status: waiting, under way, or how its answer was judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum L0Status {
    Pending,
    Running,
    Valid,
    Invalid,
    Mismatch,
    Failed,
}

crate::domain::wire_strings!(L0Status, "L0 status", column {
    Pending => "pending",
    Running => "running",
    Valid => "valid",
    Invalid => "invalid",
    Mismatch => "mismatch",
    Failed => "failed",
});

/// Why a `failed` L0 failed, when a client can act on it (docs/jobs.md, "Rate
/// limits", "Errors"): its record's `error_code`. Other failures have none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum L0ErrorCode {
    /// It waited its executor's `max_wait_secs` for room and never started.
    RateLimited,
    /// The provider's usage, spend or credit limit is reached: tried once.
    QuotaExhausted,
}

crate::domain::wire_strings!(L0ErrorCode, "L0 error code", column {
    RateLimited => "rate_limited",
    QuotaExhausted => "quota_exhausted",
});

impl L0ErrorCode {
    /// The failure reason of an L0 that ends with this code: `"{code}: {detail}"`.
    /// The reason text is what clients read today; the code leads it so that a
    /// stored outcome (which carries only the reason) keeps its code.
    pub fn reason(self, detail: &str) -> String {
        format!("{}: {detail}", self.as_str())
    }

    /// The code a failure reason made by [`Self::reason`] carries.
    pub fn of_reason(reason: &str) -> Option<Self> {
        let (code, _) = reason.split_once(": ")?;
        Self::parse(code)
    }
}

impl L0Status {
    /// Ended: judged or failed.
    pub fn is_ended(self) -> bool {
        !matches!(self, L0Status::Pending | L0Status::Running)
    }
}

/// An outcome judged against the assignment it was for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classified {
    Valid(L0Answer),
    Invalid(String),
    Mismatch {
        expected: String,
        actual: String,
    },
    Failed(String),
    /// Never started: a budget stopped the job first (the reason). Its record says
    /// `failed` (no suggestion), its log line says what happened.
    NotStarted(String),
}

/// Judges one outcome. A present but different `assignment_id` is a mismatch even
/// when the rest is broken too (the seed checks the id first).
pub fn classify(expected_id: &str, outcome: &L0Outcome) -> Classified {
    let text = match outcome {
        L0Outcome::Failed(reason) => return Classified::Failed(reason.clone()),
        L0Outcome::Answer(text) => text,
    };
    let raw = scan(text);
    if let Some(actual) = raw.assignment_id.as_deref().filter(|id| *id != expected_id) {
        return Classified::Mismatch {
            expected: expected_id.to_owned(),
            actual: actual.to_owned(),
        };
    }
    match raw.validate() {
        Ok(answer) => Classified::Valid(answer),
        Err(e) => Classified::Invalid(e.to_string()),
    }
}

impl Classified {
    pub fn status(&self) -> L0Status {
        match self {
            Classified::Valid(_) => L0Status::Valid,
            Classified::Invalid(_) => L0Status::Invalid,
            Classified::Mismatch { .. } => L0Status::Mismatch,
            Classified::Failed(_) | Classified::NotStarted(_) => L0Status::Failed,
        }
    }

    /// The job-log line (verbatim from docs/spec/refine.md §3), none for a valid answer.
    pub fn log_line(&self, assignment_id: &str) -> Option<String> {
        match self {
            Classified::Valid(_) => None,
            Classified::Invalid(_) => Some(format!(
                "WARNING: L0 response for {assignment_id} failed validation — skipping"
            )),
            Classified::Mismatch { expected, actual } => Some(format!(
                "WARNING: L0 response assignment_id mismatch — expected {expected}, got {actual} — skipping"
            )),
            Classified::Failed(reason) => Some(match L0ErrorCode::of_reason(reason) {
                // The code in the line (docs/spec/refine.md §3): a log reader sees
                // why without the record.
                Some(code) => format!(
                    "CRITICAL: L0 for {assignment_id} failed ({code}) — proceeding with N-1 \
                     suggestions"
                ),
                None => format!(
                    "CRITICAL: L0 for {assignment_id} failed — proceeding with N-1 suggestions"
                ),
            }),
            // Not a failure: it never ran (docs/jobs.md, "Lifecycle").
            Classified::NotStarted(reason) => Some(format!(
                "NOT STARTED: L0 for {assignment_id} was not started: {reason} — proceeding \
                 without its suggestions"
            )),
        }
    }

    pub fn record(&self, assignment_id: &str) -> L0Verdict {
        let reason = match self {
            Classified::Valid(_) => None,
            Classified::Invalid(r) | Classified::Failed(r) => Some(r.clone()),
            Classified::NotStarted(r) => Some(format!("not started: {r}")),
            Classified::Mismatch { expected, actual } => {
                Some(format!("expected {expected}, got {actual}"))
            }
        };
        let error_code = match self {
            Classified::Failed(r) => L0ErrorCode::of_reason(r),
            _ => None,
        };
        L0Verdict {
            assignment_id: assignment_id.to_owned(),
            status: self.status(),
            reason,
            error_code,
        }
    }
}

/// One L0's fate, stored with the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct L0Verdict {
    pub assignment_id: String,
    pub status: L0Status,
    /// Why it was not valid (validation error, mismatch, executor failure).
    pub reason: Option<String>,
    /// The typed cause of a failure a client can act on (`rate_limited`, …).
    pub error_code: Option<L0ErrorCode>,
}

/// What the L1 step produces.
#[derive(Debug, Clone, PartialEq)]
pub struct RefineOutput {
    /// `{"schema_version": 1, "assignments": [...]}`, input order.
    pub result: Value,
    pub log: Vec<String>,
    /// One per assignment, natural order.
    pub records: Vec<L0Verdict>,
}

/// Refines one phase from its L0 outcomes. An assignment without an outcome counts
/// as a failed L0; outcomes for ids not in the context are logged and ignored; of
/// repeated outcomes for one id the first counts. `max_parallel` only shapes the
/// log (`--- next batch ---` between batches).
pub fn refine_phase(
    context: &PhaseContext,
    outcomes: &[(String, L0Outcome)],
    max_parallel: usize,
) -> RefineOutput {
    refine_phase_with(context, outcomes, max_parallel, None)
}

/// [`refine_phase`] after a budget stop: an assignment without an outcome was
/// never started (`reason`), and its log line says so instead of "failed".
pub fn refine_phase_stopped(
    context: &PhaseContext,
    outcomes: &[(String, L0Outcome)],
    max_parallel: usize,
    reason: &str,
) -> RefineOutput {
    refine_phase_with(context, outcomes, max_parallel, Some(reason))
}

fn refine_phase_with(
    context: &PhaseContext,
    outcomes: &[(String, L0Outcome)],
    max_parallel: usize,
    not_started: Option<&str>,
) -> RefineOutput {
    let mut log = Vec::new();
    let mut records = Vec::new();
    let mut assignments = context.assignments.clone();

    for (id, _) in outcomes {
        if context.assignment(id).is_none() {
            log.push(format!(
                "WARNING: L0 outcome for unknown assignment {id} — ignoring"
            ));
        }
    }

    let ids: Vec<String> = assignments.iter().map(|a| a.id.clone()).collect();
    let mut answers: HashMap<String, L0Answer> = HashMap::new();
    for (i, batch) in batches(&ids, max_parallel).iter().enumerate() {
        if i > 0 {
            log.push(NEXT_BATCH.to_owned());
        }
        for id in batch {
            let classified = match outcomes.iter().find(|(o, _)| o == id) {
                Some((_, outcome)) => classify(id, outcome),
                None => match not_started {
                    Some(reason) => Classified::NotStarted(reason.to_owned()),
                    None => Classified::Failed("no L0 outcome was recorded".into()),
                },
            };
            log.extend(classified.log_line(id));
            records.push(classified.record(id));
            if let Classified::Valid(answer) = classified {
                answers.insert(id.clone(), answer);
            }
        }
    }

    let mut order: Vec<usize> = (0..assignments.len()).collect();
    order.sort_by(|&x, &y| natural_cmp(&assignments[x].id, &assignments[y].id));

    let removed = resolve_conflicts(&mut assignments, &order, &mut log);
    apply_removals(&mut assignments, &order, &answers, &removed, &mut log);
    for &i in &order {
        if let Some(answer) = answers.get(&assignments[i].id) {
            apply_answer(&mut assignments[i], answer, &mut log);
        }
    }

    RefineOutput {
        result: result_value(&assignments),
        log,
        records,
    }
}

/// `{"schema_version": 1, "assignments": [...]}`.
pub fn result_value(assignments: &[Assignment]) -> Value {
    let list: Vec<Value> = assignments.iter().map(Assignment::to_value).collect();
    json!({"schema_version": 1, "assignments": list})
}

/// Intra-phase WP ownership (docs/spec/refine.md §4): walking assignments in natural order,
/// a WP sharing a file with a WP an earlier assignment kept is removed. WPs of one
/// assignment never conflict with each other. Returns the removed WPs per
/// assignment index, so a later `remove` of one of them is not "unknown".
fn resolve_conflicts(
    assignments: &mut [Assignment],
    order: &[usize],
    log: &mut Vec<String>,
) -> HashMap<usize, Vec<super::input::WorkPackage>> {
    let mut owner: HashMap<String, usize> = HashMap::new();
    let mut removed: HashMap<usize, Vec<_>> = HashMap::new();
    let mut rank = vec![0; assignments.len()];
    for (r, &i) in order.iter().enumerate() {
        rank[i] = r;
    }
    for &i in order {
        let mut kept = Vec::new();
        let mut claimed = Vec::new();
        for wp in std::mem::take(&mut assignments[i].work_packages) {
            let files = wp.files();
            // Winner index → shared files; BTreeMap keyed by natural rank for a stable log.
            let mut shared: BTreeMap<usize, (usize, Vec<String>)> = BTreeMap::new();
            for file in &files {
                if let Some(&w) = owner.get(file).filter(|&&w| w != i) {
                    shared
                        .entry(rank[w])
                        .or_insert((w, Vec::new()))
                        .1
                        .push(file.clone());
                }
            }
            if shared.is_empty() {
                claimed.extend(files);
                kept.push(wp);
                continue;
            }
            for (w, files) in shared.into_values() {
                let (a, b) = (&assignments[w].id, &assignments[i].id);
                log.push(format!(
                    "WP CONFLICT: {a} vs {b} — {} assigned to {a}",
                    files.join(", ")
                ));
            }
            removed.entry(i).or_default().push(wp);
        }
        for file in claimed {
            owner.entry(file).or_insert(i);
        }
        assignments[i].work_packages = kept;
    }
    removed
}

fn apply_removals(
    assignments: &mut [Assignment],
    order: &[usize],
    answers: &HashMap<String, L0Answer>,
    removed: &HashMap<usize, Vec<super::input::WorkPackage>>,
    log: &mut Vec<String>,
) {
    for &i in order {
        let Some(answer) = answers.get(&assignments[i].id) else {
            continue;
        };
        let a = &mut assignments[i];
        for adj in &answer.wp_proposal_adjustments {
            if !adj.action.trim().eq_ignore_ascii_case("remove") {
                log.push(format!(
                    "WARNING: Unsupported action '{}' in wp_proposal_adjustments for {} — skipping",
                    adj.action, a.id
                ));
                continue;
            }
            let suffix = adj.wp_id_suffix.trim();
            if let Some(pos) = a
                .work_packages
                .iter()
                .position(|wp| wp.matches_suffix(&a.id, suffix))
            {
                a.work_packages.remove(pos);
            } else if !removed
                .get(&i)
                .is_some_and(|wps| wps.iter().any(|wp| wp.matches_suffix(&a.id, suffix)))
            {
                log.push(format!(
                    "WARNING: Unknown work package '{}' in wp_proposal_adjustments for {} — skipping",
                    adj.wp_id_suffix, a.id
                ));
            }
        }
    }
}

/// `changes` first, then `dependency_corrections` (docs/spec/refine.md §5).
fn apply_answer(a: &mut Assignment, answer: &L0Answer, log: &mut Vec<String>) {
    for change in &answer.changes {
        match a.editable_field_mut(&change.field) {
            Some(slot) => *slot = Some(change.new_value.clone()),
            None => log.push(format!(
                "WARNING: Unrecognized field '{}' in changes for {} — skipping",
                change.field, a.id
            )),
        }
    }
    for dep in &answer.dependency_corrections {
        let line = dependency_line(&dep.missing_dep, &dep.reason);
        let notes = a.dependency_notes.get_or_insert_with(String::new);
        if notes.lines().any(|l| l.trim() == line) {
            continue;
        }
        let trimmed_len = notes.trim_end().len();
        notes.truncate(trimmed_len);
        if !notes.is_empty() {
            notes.push('\n');
        }
        notes.push_str(&line);
    }
}

/// The line a dependency correction adds to `dependency_notes`.
pub fn dependency_line(missing_dep: &str, reason: &str) -> String {
    let (dep, reason) = (missing_dep.trim(), reason.trim());
    if reason.is_empty() {
        format!("Depends on {dep}.")
    } else {
        format!("Depends on {dep}: {reason}")
    }
}

#[cfg(test)]
mod tests;
