//! Gates 0–7 of `docs/spec/gating.md` §3 over tasks that were read, in gate order, each in task
//! order. Each gate is a single pass, so the whole run is linear in the size of the
//! list (plus one sort of the tasks by wave).
//!
//! Memory access, not arithmetic, is the cost at scale: ids are copied into one
//! buffer before they are hashed, and every distinct path is hashed once and then
//! handled as a small integer.
//!
//! Long on purpose: the eight gates share the interned ids and
//! paths built here; each gate is one short function in gate order.

use std::collections::hash_map::Entry;
/// foldhash instead of SipHash: several times faster on short keys (ids, paths are
/// most of the gate's work) and still seeded per process, so colliding keys cannot be
/// precomputed by a client.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

use super::input::RawTask;
use super::text::quote;
use super::{Code, Outcome, Validation, Violation};
use crate::domain::graph::DiGraph;
use crate::domain::natural::natural_cmp;
use crate::domain::text::cycle_message;

/// Paths are compared after removing a leading `./` (spec §1).
fn normalize_path(path: &str) -> &str {
    path.strip_prefix("./").unwrap_or(path)
}

/// Usable task ids copied into one contiguous buffer. Hash lookups compare against
/// the stored key; keys scattered over a large heap would make each comparison a
/// cache (and TLB) miss.
struct IdArena {
    text: String,
    /// Byte range of each task's id in `text` (empty for unusable ids).
    spans: Vec<(usize, usize)>,
}

impl IdArena {
    fn new(tasks: &[RawTask]) -> Self {
        let usable_ids = || tasks.iter().filter(|raw| raw.usable.id);
        let total = usable_ids().map(|raw| raw.task.task_id.len()).sum();
        let mut text = String::with_capacity(total);
        let spans = tasks
            .iter()
            .map(|raw| {
                let start = text.len();
                if raw.usable.id {
                    text.push_str(&raw.task.task_id);
                }
                (start, text.len())
            })
            .collect();
        Self { text, spans }
    }

    fn id(&self, position: usize) -> &str {
        let (start, end) = self.spans[position];
        &self.text[start..end]
    }
}

/// What the gates know about the list, shared by all of them.
struct TaskGraph<'a> {
    tasks: &'a [RawTask],
    /// First task with each usable id: ids resolve to it.
    position_of: HashMap<&'a str, usize>,
    /// Has a usable id and is the first with it; only these take part in gates 1–7.
    addressable: Vec<bool>,
    /// Distinct resolved dependencies of addressable tasks with a usable `depends_on`,
    /// as `(task, dependency)` positions in task order, then `depends_on` order.
    edges: Vec<(usize, usize)>,
    /// `edges[edge_start[t]..edge_start[t + 1]]` are task `t`'s.
    edge_start: Vec<usize>,
    /// Addressable tasks with a usable wave, sorted by wave, in task order within one.
    by_wave: Vec<usize>,
}

impl TaskGraph<'_> {
    fn id(&self, position: usize) -> &str {
        &self.tasks[position].task.task_id
    }

    /// `parallel_group`, when usable.
    fn wave(&self, position: usize) -> Option<i64> {
        let task = &self.tasks[position];
        task.usable.group.then_some(task.task.parallel_group)
    }

    /// The error on the `parallel_group` of `task`, which must run in a later wave
    /// than `earlier` (gates 3 and 7).
    fn not_after(&self, code: Code, task: usize, earlier: usize, body: String) -> Violation {
        let task_ids = vec![self.id(task).to_owned(), self.id(earlier).to_owned()];
        let mut violation = Violation::new(code, body, task_ids).at_index(self.tasks[task].index);
        violation.wave = self.wave(task);
        violation.on_field("parallel_group")
    }

    fn dependencies(&self, position: usize) -> &[(usize, usize)] {
        &self.edges[self.edge_start[position]..self.edge_start[position + 1]]
    }

    /// How messages name a task: `'t-3'`, or by index when it has no usable id.
    fn label(&self, position: usize) -> String {
        let task = &self.tasks[position];
        if task.usable.id {
            quote(&task.task.task_id)
        } else {
            format!("at index {}", task.index)
        }
    }
}

/// Reads and writes as path numbers: each distinct normalized path is hashed once,
/// then the file gates index plain vectors.
struct PathIndex<'a> {
    /// Path number → normalized path.
    paths: Vec<&'a str>,
    /// Paths numbered below this are the existing files.
    existing_count: usize,
    writes: Vec<usize>,
    write_start: Vec<usize>,
    reads: Vec<usize>,
    read_start: Vec<usize>,
}

impl<'a> PathIndex<'a> {
    /// Numbers the writes of every task with usable `writes` (a write counts even if
    /// its task has no usable id) and the reads of addressable tasks.
    fn new(graph: &TaskGraph<'a>, existing_files: &'a [String]) -> Self {
        // Sized up front for request-sized lists (growing rehashes every path seen so
        // far), capped: big lists mention the same paths many times over.
        let mentions: usize = graph
            .tasks
            .iter()
            .map(|raw| raw.task.reads.len() + raw.task.writes.len())
            .sum();
        let expected_paths = (existing_files.len() + mentions).min(PRESIZED_PATHS);
        let mut numbering = PathNumbering::with_capacity(expected_paths);
        for path in existing_files {
            numbering.number(path);
        }
        let existing_count = numbering.paths.len();
        let task_count = graph.tasks.len();
        let (mut writes, mut write_start) = (Vec::new(), Vec::with_capacity(task_count + 1));
        let (mut reads, mut read_start) = (Vec::new(), Vec::with_capacity(task_count + 1));
        for (position, raw) in graph.tasks.iter().enumerate() {
            write_start.push(writes.len());
            read_start.push(reads.len());
            if raw.usable.writes {
                writes.extend(raw.task.writes.iter().map(|path| numbering.number(path)));
            }
            if raw.usable.reads && graph.addressable[position] {
                reads.extend(raw.task.reads.iter().map(|path| numbering.number(path)));
            }
        }
        write_start.push(writes.len());
        read_start.push(reads.len());
        Self {
            paths: numbering.paths,
            existing_count,
            writes,
            write_start,
            reads,
            read_start,
        }
    }

    fn count(&self) -> usize {
        self.paths.len()
    }

    fn writes_of(&self, position: usize) -> &[usize] {
        &self.writes[self.write_start[position]..self.write_start[position + 1]]
    }

    fn reads_of(&self, position: usize) -> &[usize] {
        &self.reads[self.read_start[position]..self.read_start[position + 1]]
    }
}

/// At most this many paths are reserved for before the list is read.
const PRESIZED_PATHS: usize = 4096;

struct PathNumbering<'a> {
    number_of: HashMap<&'a str, usize>,
    paths: Vec<&'a str>,
}

impl<'a> PathNumbering<'a> {
    fn with_capacity(paths: usize) -> Self {
        Self {
            number_of: HashMap::with_capacity_and_hasher(paths, Default::default()),
            paths: Vec::with_capacity(paths),
        }
    }

    fn number(&mut self, path: &'a str) -> usize {
        let path = normalize_path(path);
        *self.number_of.entry(path).or_insert_with(|| {
            self.paths.push(path);
            self.paths.len() - 1
        })
    }
}

/// `keep_tasks: false` leaves [`Validation::tasks`] empty, for callers that only
/// answer the report (moving every task out showed in a validate request's
/// profile, `bench/README.md`).
pub(crate) fn run(
    mut tasks: Vec<RawTask>,
    existing_files: &[String],
    keep_tasks: bool,
) -> Validation {
    let shape_errors: Vec<Vec<Violation>> = tasks
        .iter_mut()
        .map(|task| std::mem::take(&mut task.shape_errors))
        .collect();

    let (errors, warnings, waves, keep) = {
        let ids = IdArena::new(&tasks);
        let (position_of, addressable, duplicate_of) = resolve_ids(&tasks, &ids);
        let mut by_wave: Vec<usize> = (0..tasks.len())
            .filter(|&position| addressable[position] && tasks[position].usable.group)
            .collect();
        by_wave.sort_by_key(|&position| tasks[position].task.parallel_group); // stable

        let mut errors = gate_shapes(&tasks, shape_errors, &duplicate_of);
        let mut duplicate_dependency = Vec::new();
        let mut graph = TaskGraph {
            tasks: &tasks,
            position_of,
            addressable,
            edges: Vec::new(),
            edge_start: Vec::new(),
            by_wave,
        };
        errors.extend(gate_orphans(&mut graph, &mut duplicate_dependency));
        let (cycle_errors, in_cycle_component) = gate_cycles(&graph);
        errors.extend(cycle_errors);
        errors.extend(gate_wave_order(&graph, &in_cycle_component));
        let paths = PathIndex::new(&graph, existing_files);
        errors.extend(gate_write_contention(&graph, &paths));
        errors.extend(gate_unsatisfied_reads(&graph, &paths));
        let (review_errors, review_pairs) = gate_reviews(&graph);
        errors.extend(review_errors);
        errors.extend(gate_review_after(&graph, &review_pairs));

        let mut warnings = reviews_without_dependency(&graph, &review_pairs);
        warnings.extend(duplicate_dependency);

        let waves = group_waves(&graph);
        // Kept tasks: all when valid, else the well-formed addressable ones.
        let keep: Vec<bool> = (0..tasks.len())
            .map(|position| graph.addressable[position] && tasks[position].usable.all())
            .collect();
        (errors, warnings, waves, keep)
    };

    let outcome = if errors.is_empty() {
        Outcome::Valid
    } else {
        Outcome::DagInvalid
    };
    // Each id of a wave is one task's own, so a list that is not kept gives its ids
    // up instead of copying them (one allocation per task less).
    let waves = waves
        .into_iter()
        .map(|members| {
            members
                .into_iter()
                .map(|position| {
                    let id = &mut tasks[position].task.task_id;
                    if keep_tasks {
                        id.clone()
                    } else {
                        std::mem::take(id)
                    }
                })
                .collect()
        })
        .collect();
    if !keep_tasks {
        tasks.clear();
    }
    let tasks = tasks
        .into_iter()
        .zip(keep)
        .filter(|(_, keep)| *keep || outcome == Outcome::Valid)
        .map(|(raw, _)| raw.task)
        .collect();
    Validation {
        outcome,
        tasks,
        errors,
        warnings,
        waves,
    }
}

/// Maps each usable id to its first task. Returns that map, which tasks are
/// addressable (first with their id), and for later duplicates the first's position.
fn resolve_ids<'a>(
    tasks: &[RawTask],
    ids: &'a IdArena,
) -> (HashMap<&'a str, usize>, Vec<bool>, Vec<Option<usize>>) {
    let mut position_of: HashMap<&str, usize> =
        HashMap::with_capacity_and_hasher(tasks.len(), Default::default());
    let mut addressable = vec![false; tasks.len()];
    let mut duplicate_of = vec![None; tasks.len()];
    for (position, raw) in tasks.iter().enumerate() {
        if !raw.usable.id {
            continue;
        }
        match position_of.entry(ids.id(position)) {
            Entry::Occupied(first) => duplicate_of[position] = Some(*first.get()),
            Entry::Vacant(slot) => {
                slot.insert(position);
                addressable[position] = true;
            }
        }
    }
    (position_of, addressable, duplicate_of)
}

/// Gate 0: per task, its `task_id` problems (duplicate included) first, then the
/// other fields' in field order.
fn gate_shapes(
    tasks: &[RawTask],
    shape_errors: Vec<Vec<Violation>>,
    duplicate_of: &[Option<usize>],
) -> Vec<Violation> {
    let mut errors = Vec::new();
    for ((task, own_errors), duplicate_of) in tasks.iter().zip(shape_errors).zip(duplicate_of) {
        if let Some(first) = *duplicate_of {
            let id = &task.task.task_id;
            let body = format!(
                "task_id {} is used by the tasks at index {} and index {}; task ids must be \
                 unique — rename one of them",
                quote(id),
                tasks[first].index,
                task.index
            );
            errors.push(
                Violation::new(Code::DuplicateTaskId, body, vec![id.clone()])
                    .at_index(task.index)
                    .on_field("task_id"),
            );
        }
        errors.extend(own_errors);
    }
    errors
}

/// Gate 1: `depends_on` entries naming no task. Also resolves the dependency edges
/// (distinct per task) and collects `duplicate_dependency` warnings.
fn gate_orphans(
    graph: &mut TaskGraph<'_>,
    duplicate_warnings: &mut Vec<Violation>,
) -> Vec<Violation> {
    let tasks = graph.tasks;
    let mut errors = Vec::new();
    // `seen_by[d] == t` marks dependency `d` as already listed by task `t` (avoids a
    // set per task); `warned_by` does the same for the duplicate warning.
    let mut seen_by = vec![usize::MAX; tasks.len()];
    let mut warned_by = vec![usize::MAX; tasks.len()];
    graph.edge_start = Vec::with_capacity(tasks.len() + 1);
    graph.edges = Vec::with_capacity(tasks.iter().map(|raw| raw.task.depends_on.len()).sum());
    for (position, raw) in tasks.iter().enumerate() {
        graph.edge_start.push(graph.edges.len());
        if !graph.addressable[position] || !raw.usable.depends_on {
            continue;
        }
        // Orphans are rare: plain sets, which allocate only when used.
        let mut orphans_seen: HashSet<&str> = HashSet::default();
        let mut orphans_warned: HashSet<&str> = HashSet::default();
        for dependency in &raw.task.depends_on {
            // An error or warning about this `depends_on` entry.
            let on_entry = |code, body: String| {
                let ids = vec![raw.task.task_id.clone(), dependency.clone()];
                Violation::new(code, body, ids)
                    .at_index(raw.index)
                    .on_field("depends_on")
            };
            let warn_repeated = match graph.position_of.get(dependency.as_str()) {
                Some(&target) if seen_by[target] != position => {
                    seen_by[target] = position;
                    graph.edges.push((position, target));
                    false
                }
                Some(&target) => {
                    let first_repeat = warned_by[target] != position;
                    warned_by[target] = position;
                    first_repeat
                }
                None if orphans_seen.insert(dependency) => {
                    let body = format!(
                        "task {} depends_on {} which is not in the task list; remove it from \
                         depends_on or add the missing task",
                        quote(&raw.task.task_id),
                        quote(dependency)
                    );
                    errors.push(on_entry(Code::OrphanDependency, body));
                    false
                }
                None => orphans_warned.insert(dependency),
            };
            if warn_repeated {
                let body = format!(
                    "task {} lists {} more than once in depends_on; list each dependency once",
                    quote(&raw.task.task_id),
                    quote(dependency)
                );
                duplicate_warnings.push(on_entry(Code::DuplicateDependency, body));
            }
        }
    }
    graph.edge_start.push(graph.edges.len());
    errors
}

/// Gate 2: one error per strongly connected component of two or more tasks and per
/// self-dependency. Returns, per task, whether it lies in such a component (or has a
/// self-loop), identified by component number, to exempt those edges from gate 3.
fn gate_cycles(graph: &TaskGraph<'_>) -> (Vec<Violation>, Vec<Option<usize>>) {
    // Waves only rise along a path when every edge leads to a strictly smaller
    // wave, so no cycle (self-loops included) can exist: skip building the graph,
    // the common case for lists that pass.
    let descending = graph.edges.iter().all(|&(task, dependency)| {
        matches!((graph.wave(task), graph.wave(dependency)), (Some(w), Some(d)) if w > d)
    });
    if descending {
        return (Vec::new(), vec![None; graph.tasks.len()]);
    }
    let dependency_graph = match DiGraph::from_edges(graph.tasks.len(), graph.edges.iter().copied())
    {
        Ok(dependency_graph) => dependency_graph,
        // Positions always index `tasks`; keep going without cycle reports if not.
        Err(_) => return (Vec::new(), vec![None; graph.tasks.len()]),
    };
    let components = dependency_graph.strongly_connected_components();
    let cycles =
        dependency_graph.cycles_in(&components, |a, b| natural_cmp(graph.id(a), graph.id(b)));

    let mut in_cycle_component = vec![None; graph.tasks.len()];
    let mut errors = Vec::with_capacity(cycles.len());
    for cycle in cycles {
        for &member in &cycle.members {
            in_cycle_component[member] = Some(components.component_of[member]);
        }
        let path: Vec<String> = cycle.path.iter().map(|&p| graph.id(p).to_owned()).collect();
        if path.is_empty() {
            continue;
        }
        let body = cycle_message(&path, cycle.members.len());
        let task_ids = cycle
            .members
            .iter()
            .map(|&m| graph.id(m).to_owned())
            .collect();
        let mut violation = Violation::new(Code::Cycle, body, task_ids);
        violation.cycle = Some(path);
        errors.push(violation);
    }
    (errors, in_cycle_component)
}

/// Gate 3: each dependency edge whose task is not in a strictly later wave than its
/// dependency, except edges inside a reported cycle.
fn gate_wave_order(graph: &TaskGraph<'_>, in_cycle_component: &[Option<usize>]) -> Vec<Violation> {
    let mut errors = Vec::new();
    for &(task, dependency) in &graph.edges {
        let (Some(wave), Some(dependency_wave)) = (graph.wave(task), graph.wave(dependency)) else {
            continue;
        };
        let same_cycle = in_cycle_component[task].is_some()
            && in_cycle_component[task] == in_cycle_component[dependency];
        if wave > dependency_wave || same_cycle {
            continue;
        }
        let (id, dependency_id) = (graph.id(task), graph.id(dependency));
        let body = format!(
            "task {} (parallel_group {wave}) depends_on {} (parallel_group {dependency_wave}), \
             but a task's parallel_group must be strictly greater than that of every task it \
             depends on; move {} to parallel_group {} or later",
            quote(id),
            quote(dependency_id),
            quote(id),
            dependency_wave.saturating_add(1)
        );
        errors.push(graph.not_after(Code::WaveOrder, task, dependency, body));
    }
    errors
}

/// Gate 4: within a wave the first writer of a file owns it; every later writer of
/// it in that wave gets one error naming the owner.
fn gate_write_contention(graph: &TaskGraph<'_>, paths: &PathIndex<'_>) -> Vec<Violation> {
    // Scanning wave by wave lets one slot per path hold `(wave, owner, last task that
    // listed it)` for the wave at hand; the last lister keeps a task that lists a file
    // twice from being reported twice. Waves are >= 1, so wave 0 means "not yet".
    let mut slots: Vec<(i64, usize, usize)> = vec![(0, 0, 0); paths.count()];
    let mut found: Vec<(usize, Violation)> = Vec::new();
    for &position in &graph.by_wave {
        let raw = &graph.tasks[position];
        let Some(wave) = graph.wave(position) else {
            continue;
        };
        if !raw.usable.writes {
            continue;
        }
        for &path in paths.writes_of(position) {
            let slot = &mut slots[path];
            if slot.0 != wave {
                *slot = (wave, position, position);
                continue;
            }
            if slot.2 == position {
                continue;
            }
            slot.2 = position;
            let (owner_id, writer_id) = (graph.id(slot.1), graph.id(position));
            let path = paths.paths[path];
            let body = format!(
                "wave {wave}: tasks {} and {} both write file {} — concurrent writes would \
                 race. Move one to a different parallel_group.",
                quote(owner_id),
                quote(writer_id),
                quote(path)
            );
            let violation = Violation::new(
                Code::WriteContention,
                body,
                vec![owner_id.to_owned(), writer_id.to_owned()],
            )
            .at_index(raw.index)
            .on_field("writes")
            .on_path(path)
            .in_wave(wave);
            found.push((position, violation));
        }
    }
    // Back to task order (stable: a task's own errors keep their file order).
    found.sort_by_key(|(position, _)| *position);
    found.into_iter().map(|(_, violation)| violation).collect()
}

/// Gate 5: a read must be an existing file or written in a strictly earlier wave.
fn gate_unsatisfied_reads(graph: &TaskGraph<'_>, paths: &PathIndex<'_>) -> Vec<Violation> {
    const NONE: (i64, usize) = (i64::MAX, usize::MAX);
    // Earliest writer per path, `(wave, position)`, first in task order on a tie.
    let mut first_writer = vec![NONE; paths.count()];
    // Written by a task whose wave is unusable: such reads cannot be judged.
    let mut written_in_unknown_wave = vec![false; paths.count()];
    for (position, raw) in graph.tasks.iter().enumerate() {
        if !raw.usable.writes {
            continue;
        }
        let wave = graph.wave(position);
        for &path in paths.writes_of(position) {
            match wave {
                Some(wave) if wave < first_writer[path].0 => first_writer[path] = (wave, position),
                Some(_) => {}
                None => written_in_unknown_wave[path] = true,
            }
        }
    }

    let mut errors = Vec::new();
    let mut reported_for = vec![usize::MAX; paths.count()];
    for (position, raw) in graph.tasks.iter().enumerate() {
        let Some(wave) = graph.wave(position) else {
            continue;
        };
        if !graph.addressable[position] || !raw.usable.reads {
            continue;
        }
        for &path in paths.reads_of(position) {
            let writer = first_writer[path];
            let satisfied =
                path < paths.existing_count || writer.0 < wave || written_in_unknown_wave[path];
            if satisfied || reported_for[path] == position {
                continue;
            }
            reported_for[path] = position;
            let id = graph.id(position);
            let why = if writer == NONE {
                " and no task writes it".to_owned()
            } else {
                format!(
                    "; its earliest writer {} is in parallel_group {}, not earlier (a same-wave \
                     writer does not count)",
                    graph.label(writer.1),
                    writer.0
                )
            };
            let path = paths.paths[path];
            let body = format!(
                "task {} (parallel_group {wave}) reads {}, which is not in existing_files{why}; \
                 move the task after a writer of the file, add a task that writes it in an \
                 earlier parallel_group, or drop the read",
                quote(id),
                quote(path)
            );
            errors.push(
                Violation::new(Code::UnsatisfiedRead, body, vec![id.to_owned()])
                    .at_index(raw.index)
                    .on_field("reads")
                    .on_path(path)
                    .in_wave(wave),
            );
        }
    }
    errors
}

/// Gate 6: `reviews` must name another task, whose persona differs. Returns the
/// errors and the `(review task, reviewed task)` pairs that resolved.
fn gate_reviews(graph: &TaskGraph<'_>) -> (Vec<Violation>, Vec<(usize, usize)>) {
    let mut errors = Vec::new();
    let mut pairs = Vec::new();
    for (position, raw) in graph.tasks.iter().enumerate() {
        if !graph.addressable[position] {
            continue;
        }
        let id = &raw.task.task_id;
        let violation = if let Some(found) = &raw.invalid_reviews {
            let body = format!(
                "reviewer-disjointness: task {} has an invalid reviews value (got {found}); \
                 reviews must be the task_id of the implement task it reviews — or omit it on \
                 tasks that review nothing",
                quote(id)
            );
            Violation::new(Code::InvalidReviews, body, vec![id.clone()])
        } else if let Some(reviewed) = &raw.task.reviews {
            if reviewed == id {
                let body = format!(
                    "self-review: task {} reviews itself; a task cannot review its own work — \
                     point reviews at the implement task under review, done by another persona",
                    quote(id)
                );
                Violation::new(Code::SelfReview, body, vec![id.clone()])
            } else if let Some(&target) = graph.position_of.get(reviewed.as_str()) {
                pairs.push((position, target));
                let target_raw = &graph.tasks[target];
                let same_persona = raw.usable.persona
                    && target_raw.usable.persona
                    && raw.task.assigned_persona == target_raw.task.assigned_persona;
                if !same_persona {
                    continue;
                }
                let body = format!(
                    "reviewer-disjointness: review task {} and the task it reviews, {}, share \
                     assigned_persona {}; a persona cannot review its own work — assign the \
                     review to a different persona",
                    quote(id),
                    quote(reviewed),
                    quote(&raw.task.assigned_persona)
                );
                Violation::new(
                    Code::ReviewerNotDisjoint,
                    body,
                    vec![id.clone(), reviewed.clone()],
                )
            } else {
                let body = format!(
                    "orphan-reviews: task {} reviews {}, which is not in the task list; point \
                     reviews at an existing task_id or omit it",
                    quote(id),
                    quote(reviewed)
                );
                Violation::new(
                    Code::OrphanReviews,
                    body,
                    vec![id.clone(), reviewed.clone()],
                )
            }
        } else {
            continue;
        };
        errors.push(violation.at_index(raw.index).on_field("reviews"));
    }
    (errors, pairs)
}

/// Gate 7: a review task must run in a strictly later wave than the task it reviews.
fn gate_review_after(graph: &TaskGraph<'_>, review_pairs: &[(usize, usize)]) -> Vec<Violation> {
    let mut errors = Vec::new();
    for &(reviewer, reviewed) in review_pairs {
        let (Some(wave), Some(reviewed_wave)) = (graph.wave(reviewer), graph.wave(reviewed)) else {
            continue;
        };
        if wave > reviewed_wave {
            continue;
        }
        let (id, reviewed_id) = (graph.id(reviewer), graph.id(reviewed));
        let depends = graph
            .dependencies(reviewer)
            .iter()
            .any(|&(_, dependency)| dependency == reviewed);
        let and_depend = if depends {
            String::new()
        } else {
            format!(" and make it depend_on {}", quote(reviewed_id))
        };
        let body = format!(
            "reviewer-disjointness: review task {} (parallel_group {wave}) reviews {} \
             (parallel_group {reviewed_wave}) but does not run after it; move {} to \
             parallel_group {} or later{and_depend}",
            quote(id),
            quote(reviewed_id),
            quote(id),
            reviewed_wave.saturating_add(1),
        );
        let violation = graph.not_after(Code::ReviewNotAfter, reviewer, reviewed, body);
        errors.push(violation);
    }
    errors
}

/// Warning: a review task that does not depend on the task it reviews.
fn reviews_without_dependency(
    graph: &TaskGraph<'_>,
    review_pairs: &[(usize, usize)],
) -> Vec<Violation> {
    let mut warnings = Vec::new();
    for &(reviewer, reviewed) in review_pairs {
        let raw = &graph.tasks[reviewer];
        let depends = graph
            .dependencies(reviewer)
            .iter()
            .any(|&(_, dependency)| dependency == reviewed);
        if depends || !raw.usable.depends_on {
            continue;
        }
        let (id, reviewed_id) = (graph.id(reviewer), graph.id(reviewed));
        let body = format!(
            "review task {} reviews {} but does not depends_on it; add {} to its depends_on so \
             the review runs after the work",
            quote(id),
            quote(reviewed_id),
            quote(reviewed_id)
        );
        warnings.push(
            Violation::new(
                Code::ReviewWithoutDependency,
                body,
                vec![id.to_owned(), reviewed_id.to_owned()],
            )
            .at_index(raw.index)
            .on_field("depends_on"),
        );
    }
    warnings
}

/// Task positions by wave, ascending, task order within a wave; each position at
/// most once.
fn group_waves(graph: &TaskGraph<'_>) -> Vec<Vec<usize>> {
    let mut waves: Vec<Vec<usize>> = Vec::new();
    let mut current_wave = None;
    for &position in &graph.by_wave {
        let wave = graph.wave(position);
        if current_wave != wave {
            current_wave = wave;
            waves.push(Vec::new());
        }
        if let Some(members) = waves.last_mut() {
            members.push(position);
        }
    }
    waves
}
