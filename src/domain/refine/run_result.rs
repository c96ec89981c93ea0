//! The end of a refine run (docs/spec/refine.md §7): what a run stores to merge later,
//! and the merge of its phase jobs' outcomes into the run's final status and result
//! document. Pure; `db` calls [`merge_run`] inside the transaction that writes it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::input::{Assignment, assignments_from_value};
use super::run::{SplitPlan, merge_phase_results};
use crate::domain::job::JobStatus;
use crate::domain::natural::natural_cmp;

/// A phase job as the merge sees it.
#[derive(Debug, Clone)]
pub struct PhaseOutcome {
    pub phase_id: String,
    pub job_id: Uuid,
    pub status: JobStatus,
    pub result: Option<Value>,
    /// The job's error code when it failed (`budget_exceeded`, …).
    pub error_code: Option<String>,
}

/// What a run keeps to merge later (on any replica, after any restart).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRequest {
    /// The plan as submitted: `{task?, source_dir?, phases, assignments}`.
    pub plan: Value,
    /// Assignments without a `phase_id` (reported, not refined).
    pub unassigned: Vec<String>,
    /// Ids repeated within one phase (first kept).
    pub duplicates_in_phase: Vec<String>,
    /// Plan phases without assignments (no job).
    pub empty_phases: Vec<String>,
}

impl RunRequest {
    pub fn new(plan: Value, split: &SplitPlan) -> Self {
        RunRequest {
            plan,
            unassigned: split.unassigned.clone(),
            duplicates_in_phase: split.duplicates.clone(),
            empty_phases: split.empty_phases.clone(),
        }
    }
}

/// The merged result document of a run, and the run's final status: `cancelled`
/// when it was being cancelled, `failed` when no phase succeeded or a budget was
/// reached, else `succeeded` (failed phases keep their assignments unchanged and
/// are listed). A phase stopped by the budget still merges the L0s that finished
/// (its partial result) and is listed in `budget_exceeded_phases`.
pub fn merge_run(
    request: &Value,
    outcomes: &[PhaseOutcome],
    cancelling: bool,
) -> (JobStatus, Value) {
    let stored: Option<RunRequest> = serde_json::from_value(request.clone()).ok();
    let originals: Vec<Assignment> = stored
        .as_ref()
        .and_then(|s| s.plan.get("assignments"))
        .and_then(|v| assignments_from_value("stored run", "assignments", v).ok())
        .unwrap_or_default();
    let results: Vec<(String, Option<Value>)> = outcomes
        .iter()
        .map(|o| {
            let result = (o.status == JobStatus::Succeeded || over_budget(o))
                .then(|| o.result.clone())
                .flatten();
            (o.phase_id.clone(), result)
        })
        .collect();
    let merged = merge_phase_results(&results, &originals);

    let mut sorted: Vec<&PhaseOutcome> = outcomes.iter().collect();
    sorted.sort_by(|a, b| natural_cmp(&a.phase_id, &b.phase_id));
    let phases: Map<String, Value> = sorted
        .iter()
        .map(|o| {
            let mut entry = json!({"job_id": o.job_id, "status": o.status.as_str()});
            if let (Some(code), Some(e)) = (&o.error_code, entry.as_object_mut()) {
                e.insert("error_code".into(), json!(code));
            }
            (o.phase_id.clone(), entry)
        })
        .collect();
    let mut document = merged.result_value();
    if let Some(object) = document.as_object_mut() {
        object.insert("phases".into(), Value::Object(phases));
        object.insert(
            "skipped".into(),
            json!({
                "unassigned": stored.as_ref().map(|s| s.unassigned.clone()).unwrap_or_default(),
                "duplicates": merged.duplicates,
                "duplicates_in_phase": stored.as_ref().map(|s| s.duplicates_in_phase.clone()).unwrap_or_default(),
                "failed_phases": merged.failed_phases,
                "empty_phases": stored.as_ref().map(|s| s.empty_phases.clone()).unwrap_or_default(),
            }),
        );
        let budget_exceeded: Vec<&str> = sorted
            .iter()
            .filter(|o| over_budget(o))
            .map(|o| o.phase_id.as_str())
            .collect();
        object.insert("budget_exceeded_phases".into(), json!(budget_exceeded));
        object.insert("conflicts".into(), json!(merged.conflicts));
        object.insert("emptied_work_packages".into(), json!(merged.emptied_wps));
    }
    let any_succeeded = outcomes.iter().any(|o| o.status == JobStatus::Succeeded);
    let status = if cancelling {
        JobStatus::Cancelled
    } else if outcomes.iter().any(over_budget) {
        JobStatus::Failed
    } else if any_succeeded || outcomes.is_empty() {
        JobStatus::Succeeded
    } else {
        JobStatus::Failed
    };
    (status, document)
}

fn over_budget(o: &PhaseOutcome) -> bool {
    o.status == JobStatus::Failed && o.error_code.as_deref() == Some("budget_exceeded")
}
