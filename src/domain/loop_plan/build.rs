//! [`plan`]: validation, levels, parallel groups, conflicts, overlap, summary.

use std::collections::{HashMap, HashSet};

use crate::domain::graph::DiGraph;
use crate::domain::natural::natural_cmp;
use crate::domain::text::cycle_message;

use super::overlap::{DeliverableIndex, parse_tracks_md, skip_reason};
use super::request::{TaskInput, read_task};
use super::rules::{detect_type, estimate_duration, format_duration};
use super::text::quote;
use super::{
    CompletedTrack, Dag, ExecutionMode, FILE_LOCK, LoopPlan, LoopPlanRequest, Node, Overlap,
    ParallelGroup, PhaseInfo, PlanCode, PlanViolation, Summary,
};

/// Builds the loop plan. Never fails: problems are listed in [`LoopPlan::errors`]
/// (empty when valid), and the same request always gives the same plan.
pub fn plan(request: &LoopPlanRequest) -> LoopPlan {
    let mut errors = Vec::new();

    // Gate 0: shapes, in task order, each task's duplicate id first.
    let mut shape_errors: Vec<Vec<PlanViolation>> = Vec::with_capacity(request.tasks.len());
    let mut inputs: Vec<TaskInput> = Vec::with_capacity(request.tasks.len());
    for (index, value) in request.tasks.iter().enumerate() {
        let mut own = Vec::new();
        inputs.push(read_task(index, value, &mut own));
        shape_errors.push(own);
    }
    let mut position_of: HashMap<&str, usize> = HashMap::with_capacity(inputs.len());
    // Tasks that become nodes: a usable id seen for the first time.
    let mut node_inputs: Vec<usize> = Vec::with_capacity(inputs.len());
    for (task, own) in inputs.iter().zip(shape_errors) {
        if let Some(id) = task.id.as_deref() {
            match position_of.get(id) {
                Some(&first) => {
                    let first_index = inputs[node_inputs[first]].index;
                    let body = format!(
                        "task id {} is used by the tasks at index {first_index} and index {}; \
                         task ids must be unique — rename one of them",
                        quote(id),
                        task.index
                    );
                    errors.push(
                        PlanViolation::new(PlanCode::DuplicateTaskId, body, vec![id.to_owned()])
                            .at_index(task.index)
                            .on_field("id"),
                    );
                }
                None => {
                    position_of.insert(id, node_inputs.len());
                    node_inputs.push(task.index);
                }
            }
        }
        errors.extend(own);
    }

    let phases = check_phases(&request.phases, &inputs, &mut errors);

    // Gate 1: orphans; collect `dependency → task` edges between nodes.
    let mut edges: Vec<(usize, usize)> = Vec::new();
    for (node, &input) in node_inputs.iter().enumerate() {
        let task = &inputs[input];
        for dependency in &task.depends_on {
            match position_of.get(dependency.as_str()) {
                Some(&target) => edges.push((target, node)),
                None => {
                    let id = task.id.clone().unwrap_or_default();
                    let body = format!(
                        "task {} depends_on {} which is not in the task list; remove it from \
                         depends_on or add the missing task",
                        quote(&id),
                        quote(dependency)
                    );
                    errors.push(
                        PlanViolation::new(
                            PlanCode::OrphanDependency,
                            body,
                            vec![id, dependency.clone()],
                        )
                        .at_index(task.index)
                        .on_field("depends_on"),
                    );
                }
            }
        }
    }

    // Gate 2: cycles, and levels when there are none.
    let levels = {
        let node_id = |node: usize| inputs[node_inputs[node]].id.as_deref().unwrap_or("");
        match DiGraph::from_edges(node_inputs.len(), edges.iter().copied()) {
            Ok(graph) => {
                let cycles = graph.cycles(|a, b| natural_cmp(node_id(a), node_id(b)));
                for cycle in &cycles {
                    errors.push(cycle_violation(&cycle.path, &cycle.members, &node_id));
                }
                if cycles.is_empty() {
                    graph.longest_path_levels().ok()
                } else {
                    None
                }
            }
            // Positions always index the nodes; keep going without levels if not.
            Err(_) => None,
        }
    };
    drop(position_of);
    drop(edges);

    let completed_tracks = all_completed_tracks(request, &mut errors);
    let deliverables = DeliverableIndex::new(&completed_tracks);

    // Tasks move into nodes (no copies); `node_inputs` is ascending, so node order
    // is input order.
    let mut is_node = vec![false; inputs.len()];
    for &input in &node_inputs {
        is_node[input] = true;
    }
    let mut overlap = Vec::new();
    let mut nodes = Vec::with_capacity(node_inputs.len());
    for task in inputs.into_iter().filter(|task| is_node[task.index]) {
        let node = nodes.len();
        let id = task.id.unwrap_or_default();
        let kind = task
            .kind
            .unwrap_or_else(|| detect_type(&task.files, &task.name, &task.description));
        let minutes = task
            .duration_minutes
            .unwrap_or_else(|| estimate_duration(kind, task.files.len()));
        let mut skip = None;
        if !deliverables.is_empty()
            && let Some((track, matched)) = deliverables.find(&task.files, &task.name)
        {
            let track_id = completed_tracks[track].id.clone();
            let reason = skip_reason(&track_id);
            skip = Some(reason.clone());
            overlap.push(Overlap {
                task_id: id.clone(),
                track_id,
                reason,
                matched: matched.to_owned(),
            });
        }
        nodes.push(Node {
            id,
            name: task.name,
            r#type: kind,
            files: task.files,
            depends_on: task.depends_on,
            estimated_duration: format_duration(minutes),
            phase: task.phase.unwrap_or(0),
            level: levels
                .as_ref()
                .and_then(|levels| u32::try_from(levels[node]).ok()),
            acceptance: task.acceptance,
            description: task.description,
            skip,
        });
    }

    let parallel_groups = match &levels {
        Some(levels) => parallel_groups(&nodes, levels),
        None => Vec::new(),
    };
    let max_concurrency = parallel_groups
        .iter()
        .map(|group| group.tasks.len())
        .max()
        .unwrap_or(0);
    let coordinated_groups = parallel_groups
        .iter()
        .filter(|group| !group.conflict_free)
        .count();
    let summary = Summary {
        total_tasks: nodes.len(),
        phases: phases.len(),
        parallel_groups: parallel_groups.len(),
        max_concurrency,
        conflict_free_groups: parallel_groups.len() - coordinated_groups,
        coordinated_groups,
        dependencies: request.track.dependencies.clone(),
        skipped_tasks: overlap.len(),
    };
    let mut checked_tracks: Vec<String> = Vec::new();
    let mut seen_tracks = HashSet::new();
    for track in &completed_tracks {
        if seen_tracks.insert(track.id.as_str()) {
            checked_tracks.push(track.id.clone());
        }
    }
    LoopPlan {
        track: request.track.clone(),
        phases,
        execution_mode: if max_concurrency >= 2 {
            ExecutionMode::Parallel
        } else {
            ExecutionMode::Sequential
        },
        dag: Dag {
            nodes,
            parallel_groups,
        },
        summary,
        overlap,
        checked_tracks,
        errors,
    }
}

/// Unique phase numbers (else `invalid_field` on `phases`) and every task's phase
/// among them. Returns the phases sorted by number.
fn check_phases(
    phases: &[PhaseInfo],
    tasks: &[TaskInput],
    errors: &mut Vec<PlanViolation>,
) -> Vec<PhaseInfo> {
    let mut known: HashMap<u32, usize> = HashMap::with_capacity(phases.len());
    for (position, phase) in phases.iter().enumerate() {
        if let Some(first) = known.insert(phase.number, position) {
            let body = format!(
                "phases[{first}] and phases[{position}] both have number {}; phase numbers \
                 must be unique",
                phase.number
            );
            errors.push(
                PlanViolation::new(PlanCode::InvalidField, body, Vec::new()).on_field("phases"),
            );
            known.insert(phase.number, first);
        }
    }
    for task in tasks {
        if let Some(phase) = task.phase
            && !known.contains_key(&phase)
        {
            let label = match &task.id {
                Some(id) => format!("{} (index {})", quote(id), task.index),
                None => format!("at index {}", task.index),
            };
            let listed = if phases.is_empty() {
                "none are listed".to_owned()
            } else {
                let mut numbers: Vec<u32> = known.keys().copied().collect();
                numbers.sort_unstable();
                let numbers: Vec<String> = numbers.iter().map(u32::to_string).collect();
                format!("listed: {}", numbers.join(", "))
            };
            let body = format!(
                "task {label} has an invalid 'phase': phase {phase} is not in phases \
                     ({listed}); add it to phases or fix the task"
            );
            errors.push(
                PlanViolation::new(
                    PlanCode::InvalidField,
                    body,
                    task.id.iter().cloned().collect(),
                )
                .at_index(task.index)
                .on_field("phase"),
            );
        }
    }
    let mut sorted = phases.to_vec();
    sorted.sort_by_key(|phase| phase.number);
    sorted
}

/// A cycle error. `path` comes from the `dependency → task` graph, so it is reversed
/// to read along `depends_on`, still starting at the naturally smallest member.
fn cycle_violation<'a>(
    path: &[usize],
    members: &[usize],
    node_id: &impl Fn(usize) -> &'a str,
) -> PlanViolation {
    let mut ids: Vec<String> = Vec::with_capacity(path.len());
    if let Some((&first, rest)) = path.split_first() {
        ids.push(node_id(first).to_owned());
        ids.extend(rest.iter().rev().map(|&node| node_id(node).to_owned()));
    }
    let body = cycle_message(&ids, members.len());
    let task_ids = members.iter().map(|&m| node_id(m).to_owned()).collect();
    let mut violation = PlanViolation::new(PlanCode::Cycle, body, task_ids);
    violation.cycle = Some(ids);
    violation
}

/// One group per level (`pg-N` for level N), tasks in natural order; files touched
/// by two or more tasks of a level become its `shared_resources`.
fn parallel_groups(nodes: &[Node], levels: &[usize]) -> Vec<ParallelGroup> {
    let level_count = levels.iter().copied().max().unwrap_or(0);
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); level_count];
    for (node, &level) in levels.iter().enumerate() {
        // Levels start at 1.
        if let Some(bucket) = members.get_mut(level.wrapping_sub(1)) {
            bucket.push(node);
        }
    }
    // Per file: (last node counted, how many nodes of the level touch it). Reused
    // across levels so the work stays linear in the total number of files.
    let mut usage: HashMap<&str, (usize, usize)> = HashMap::new();
    let mut groups = Vec::with_capacity(level_count);
    for (level_index, mut bucket) in members.into_iter().enumerate() {
        bucket.sort_by(|&a, &b| natural_cmp(&nodes[a].id, &nodes[b].id));
        usage.clear();
        let mut shared: Vec<&str> = Vec::new();
        for &node in &bucket {
            for file in &nodes[node].files {
                let entry = usage.entry(file.as_str()).or_insert((usize::MAX, 0));
                // Files are distinct per task already; the guard keeps it robust.
                if entry.0 != node {
                    entry.0 = node;
                    entry.1 += 1;
                    if entry.1 == 2 {
                        shared.push(file.as_str());
                    }
                }
            }
        }
        shared.sort_by(|a, b| natural_cmp(a, b));
        let conflict_free = shared.is_empty();
        groups.push(ParallelGroup {
            id: format!("pg-{}", level_index + 1),
            tasks: bucket.iter().map(|&node| nodes[node].id.clone()).collect(),
            conflict_free,
            shared_resources: (!conflict_free)
                .then(|| shared.iter().map(|file| (*file).to_owned()).collect()),
            coordination_strategy: (!conflict_free).then(|| FILE_LOCK.to_owned()),
        });
    }
    groups
}

/// `completed_tracks` followed by the completed rows of `tracks_md`; an unreadable
/// `tracks_md` is an `invalid_field` error.
fn all_completed_tracks(
    request: &LoopPlanRequest,
    errors: &mut Vec<PlanViolation>,
) -> Vec<CompletedTrack> {
    let mut tracks = request.completed_tracks.clone().unwrap_or_default();
    if let Some(text) = &request.tracks_md {
        match parse_tracks_md(text) {
            Ok(rows) => tracks.extend(rows),
            Err(error) => errors.push(
                PlanViolation::new(
                    PlanCode::InvalidField,
                    format!("tracks_md cannot be read: {}", error.message),
                    Vec::new(),
                )
                .on_field("tracks_md"),
            ),
        }
    }
    tracks
}
