//! Refine runs, the L2 step (docs/spec/refine.md §7): split a whole plan into phase contexts,
//! and merge the phase results back with cross-phase file ownership.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::input::{Assignment, PeerSummary, PhaseContext, PlanDocument};
use crate::domain::natural::natural_cmp;

/// A plan split into phase contexts.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitPlan {
    /// One per plan phase that has assignments, natural phase order. Their
    /// `task_file_path` is unset: the caller fills in the run's task path.
    pub contexts: Vec<PhaseContext>,
    /// Assignments without `phase_id`, or naming a phase the plan lacks (input order).
    pub unassigned: Vec<String>,
    /// Ids repeated within one phase; only the first is kept (a phase context must
    /// have unique ids). Repeats across phases go through and the merge reports them.
    pub duplicates: Vec<String>,
    /// Plan phases no assignment belongs to (no context is made for them).
    pub empty_phases: Vec<String>,
}

/// Splits `assignments` by `phase_id` over `plan`'s phases.
pub fn split_plan(plan: &PlanDocument, assignments: &[Assignment]) -> SplitPlan {
    let mut groups: BTreeMap<usize, Vec<Assignment>> = BTreeMap::new();
    let mut unassigned = Vec::new();
    let mut duplicates = Vec::new();
    let mut seen: HashSet<(&str, &str)> = HashSet::new();
    let phase_index: HashMap<&str, usize> = plan
        .phases
        .iter()
        .enumerate()
        .map(|(i, p)| (p.id.as_str(), i))
        .collect();
    for a in assignments {
        match a
            .phase_id
            .as_deref()
            .and_then(|p| phase_index.get(p).map(|&i| (p, i)))
        {
            Some((p, i)) => {
                if seen.insert((p, a.id.as_str())) {
                    groups.entry(i).or_default().push(a.clone());
                } else {
                    duplicates.push(a.id.clone());
                }
            }
            None => unassigned.push(a.id.clone()),
        }
    }
    let mut phases: Vec<(&str, Vec<Assignment>)> = groups
        .into_iter()
        .map(|(i, list)| (plan.phases[i].id.as_str(), list))
        .collect();
    phases.sort_by(|a, b| natural_cmp(a.0, b.0));
    let mut empty_phases: Vec<String> = plan
        .phases
        .iter()
        .filter(|p| !phases.iter().any(|(id, _)| *id == p.id))
        .map(|p| p.id.clone())
        .collect();
    empty_phases.sort_by(|a, b| natural_cmp(a, b));

    let contexts = phases
        .iter()
        .map(|(phase_id, own)| {
            let peers = phases
                .iter()
                .filter(|(other, _)| other != phase_id)
                .flat_map(|(_, list)| list.iter().map(PeerSummary::of))
                .collect();
            PhaseContext::new(phase_id, own.clone(), peers)
        })
        .collect();
    SplitPlan {
        contexts,
        unassigned,
        duplicates,
        empty_phases,
    }
}

/// One file several assignments claimed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct FileConflict {
    pub file: String,
    /// The naturally-earliest claimant, which keeps it.
    pub owner: String,
    /// The assignments it was stripped from, natural order.
    pub stripped_from: Vec<String>,
}

/// The merged plan.
#[derive(Debug, Clone, PartialEq)]
pub struct MergeOutput {
    pub assignments: Vec<Assignment>,
    /// Files stripped from an assignment: one per (file, losing assignment).
    pub conflict_count: usize,
    pub conflicts: Vec<FileConflict>,
    /// Ids dropped as repeats (one entry per dropped copy).
    pub duplicates: Vec<String>,
    /// WPs that had files and have none left (full WP id, else `{assignment}[index]`).
    pub emptied_wps: Vec<String>,
    /// Phases whose job failed, or whose result was unreadable: originals kept.
    pub failed_phases: Vec<String>,
}

impl MergeOutput {
    /// `{"schema_version": 1, "assignments": [...], "conflict_count": n}`; the run
    /// adds `phases` (job ids and statuses).
    pub fn result_value(&self) -> Value {
        let list: Vec<Value> = self.assignments.iter().map(Assignment::to_value).collect();
        json!({"schema_version": 1, "assignments": list, "conflict_count": self.conflict_count})
    }
}

/// Merges phase results (`None` = the phase job failed) in natural phase order.
pub fn merge_phase_results(
    phase_results: &[(String, Option<Value>)],
    original_assignments: &[Assignment],
) -> MergeOutput {
    let mut results: Vec<&(String, Option<Value>)> = phase_results.iter().collect();
    results.sort_by(|a, b| natural_cmp(&a.0, &b.0));

    let mut failed_phases = Vec::new();
    let mut merged: Vec<Assignment> = Vec::new();
    for (phase_id, result) in results {
        match result.as_ref().and_then(|v| read_result(phase_id, v)) {
            Some(list) => merged.extend(list),
            None => {
                failed_phases.push(phase_id.clone());
                merged.extend(
                    original_assignments
                        .iter()
                        .filter(|a| a.phase_id.as_deref() == Some(phase_id.as_str()))
                        .cloned(),
                );
            }
        }
    }

    let mut duplicates = Vec::new();
    let mut seen = HashSet::new();
    merged.retain(|a| {
        let first = seen.insert(a.id.clone());
        if !first {
            duplicates.push(a.id.clone());
        }
        first
    });

    let (conflicts, emptied_wps) = resolve_file_ownership(&mut merged);
    MergeOutput {
        conflict_count: conflicts.iter().map(|c| c.stripped_from.len()).sum(),
        assignments: merged,
        conflicts,
        duplicates,
        emptied_wps,
        failed_phases,
    }
}

/// A phase result's assignments, `None` when it is not a readable result.
fn read_result(phase_id: &str, value: &Value) -> Option<Vec<Assignment>> {
    let input = format!("result of phase {phase_id}");
    value
        .get("assignments")?
        .as_array()?
        .iter()
        .enumerate()
        .map(|(i, a)| Assignment::from_value(&input, &format!("assignments[{i}]"), a).ok())
        .collect()
}

/// Each file stays with the naturally-earliest assignment claiming it (over
/// `estimated_files ∪ files_touched`) and is stripped from the others' WPs.
fn resolve_file_ownership(assignments: &mut [Assignment]) -> (Vec<FileConflict>, Vec<String>) {
    let mut claimants: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, a) in assignments.iter().enumerate() {
        for file in a.work_packages.iter().flat_map(|wp| wp.files()) {
            let list = claimants.entry(file).or_default();
            // Claims arrive grouped by assignment, so a repeat is always the last entry.
            if list.last() != Some(&i) {
                list.push(i);
            }
        }
    }
    let had_files: Vec<Vec<bool>> = assignments
        .iter()
        .map(|a| {
            a.work_packages
                .iter()
                .map(|wp| !wp.files().is_empty())
                .collect()
        })
        .collect();

    let mut conflicts = Vec::new();
    for (file, mut list) in claimants {
        if list.len() < 2 {
            continue;
        }
        list.sort_by(|&x, &y| natural_cmp(&assignments[x].id, &assignments[y].id));
        let owner = assignments[list[0]].id.clone();
        let mut stripped_from = Vec::new();
        for &i in &list[1..] {
            for wp in &mut assignments[i].work_packages {
                wp.strip_file(&file);
            }
            stripped_from.push(assignments[i].id.clone());
        }
        conflicts.push(FileConflict {
            file,
            owner,
            stripped_from,
        });
    }
    conflicts.sort_by(|a, b| natural_cmp(&a.file, &b.file));

    let mut emptied = Vec::new();
    for (a, had) in assignments.iter().zip(&had_files) {
        for (index, (wp, had)) in a.work_packages.iter().zip(had).enumerate() {
            if *had && wp.files().is_empty() {
                emptied.push(
                    wp.full_id(&a.id)
                        .unwrap_or_else(|| format!("{}[{index}]", a.id)),
                );
            }
        }
    }
    (conflicts, emptied)
}

#[cfg(test)]
mod tests;
