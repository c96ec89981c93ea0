//! `plan.md`: rendering a [`LoopPlan`] and reading a plan (DAG + progress) back.
//!
//! The layout and the reading rules: docs/decisions.md, "`plan.md`: layout and
//! reading". The renderer and the reader live together so a round trip is checked
//! beside them.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::text::{one_line, quote};
use super::{Dag, LoopPlan, Node, PlanError, PlanErrorKind};

/// A task's status by its marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProgressStatus {
    /// `[ ]`
    Pending,
    /// `[~]`
    InProgress,
    /// `[x]`
    Done,
    /// `[!]`
    Blocked,
}

impl ProgressStatus {
    pub fn marker(self) -> char {
        match self {
            ProgressStatus::Pending => ' ',
            ProgressStatus::InProgress => '~',
            ProgressStatus::Done => 'x',
            ProgressStatus::Blocked => '!',
        }
    }

    pub fn from_marker(marker: char) -> Option<Self> {
        match marker {
            ' ' => Some(ProgressStatus::Pending),
            '~' => Some(ProgressStatus::InProgress),
            'x' | 'X' => Some(ProgressStatus::Done),
            '!' => Some(ProgressStatus::Blocked),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TaskProgress {
    pub id: String,
    pub status: ProgressStatus,
    /// The node is marked `skip` (overlaps a completed track).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
    /// 1-based line of its marker; absent when the task has no marker line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProgressCounts {
    pub total: usize,
    pub pending: usize,
    pub in_progress: usize,
    pub done: usize,
    pub blocked: usize,
    /// Tasks marked `skip`, whatever their marker.
    pub skipped: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DiscoveredItem {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ProgressStatus>,
    pub line: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Progress {
    /// One entry per DAG node, in DAG order.
    pub tasks: Vec<TaskProgress>,
    pub counts: ProgressCounts,
    pub discovered_work: Vec<DiscoveredItem>,
}

/// The `POST /v1/loop-plans/parse` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ParsedPlan {
    pub dag: Dag,
    pub progress: Progress,
}

// ---------------------------------------------------------------- rendering

/// Renders `plan.md` (layout in the module documentation).
pub fn render_markdown(plan: &LoopPlan) -> String {
    // Roughly 600 bytes per task across YAML, Mermaid and the task list.
    let mut out = String::with_capacity(2048 + plan.dag.nodes.len() * 600);
    render_context(plan, &mut out);
    if !plan.errors.is_empty() {
        out.push_str("## Validation Errors\n\n");
        for error in &plan.errors {
            let _ = writeln!(out, "- {}", one_line(&error.message));
        }
        out.push('\n');
    }
    out.push_str("## Dependency Graph\n\n<!-- YAML DAG for parallel execution -->\n");
    render_yaml(&plan.dag, &mut out);
    out.push('\n');
    render_mermaid(&plan.dag, &mut out);
    out.push('\n');
    render_tasks(plan, &mut out);
    out.push_str("## Discovered Work\n\n_None yet._\n");
    out
}

fn render_context(plan: &LoopPlan, out: &mut String) {
    let track = &plan.track;
    let _ = writeln!(out, "# {} — Execution Plan\n", one_line(&track.name));
    out.push_str("## Context\n\n");
    let _ = writeln!(out, "- **Track**: {}", one_line(&track.id));
    let _ = writeln!(out, "- **Spec**: {}", one_line(&track.spec));
    let dependencies = if track.dependencies.is_empty() {
        "none".to_owned()
    } else {
        one_line(&track.dependencies.join(", "))
    };
    let _ = writeln!(out, "- **Dependencies**: {dependencies}");
    let checked = if plan.checked_tracks.is_empty() {
        "no completed tracks given".to_owned()
    } else {
        format!("checked {}", one_line(&plan.checked_tracks.join(", ")))
    };
    let found = match plan.overlap.len() {
        0 => "no overlap".to_owned(),
        count => {
            let items: Vec<String> = plan
                .overlap
                .iter()
                .map(|o| format!("{} ({})", one_line(&o.task_id), one_line(&o.reason)))
                .collect();
            format!("{count} overlap(s): {}", items.join("; "))
        }
    };
    let _ = writeln!(out, "- **Overlap Check**: {checked}; {found}");
    let _ = writeln!(
        out,
        "- **Execution Mode**: {}\n",
        plan.execution_mode.as_str()
    );
}

/// A YAML double-quoted scalar on one line. Escapes every character YAML does not
/// allow raw (C0/C1 controls, DEL, U+FFFE/F) plus line separators and BOM, so the
/// line structure cannot change.
fn push_yaml_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn push_yaml_list(out: &mut String, items: &[String]) {
    out.push('[');
    for (position, item) in items.iter().enumerate() {
        if position > 0 {
            out.push_str(", ");
        }
        push_yaml_string(out, item);
    }
    out.push(']');
}

fn yaml_field(out: &mut String, indent: &str, key: &str, value: &str) {
    out.push_str(indent);
    out.push_str(key);
    out.push_str(": ");
    push_yaml_string(out, value);
    out.push('\n');
}

fn yaml_list_field(out: &mut String, indent: &str, key: &str, items: &[String]) {
    out.push_str(indent);
    out.push_str(key);
    out.push_str(": ");
    push_yaml_list(out, items);
    out.push('\n');
}

/// The `dag:` member `key`: `[]` when empty, else (after `gap`) one `- ` entry per
/// item, written by `entry`.
fn yaml_items<T>(
    out: &mut String,
    key: &str,
    gap: &str,
    items: &[T],
    mut entry: impl FnMut(&mut String, &T),
) {
    if items.is_empty() {
        let _ = writeln!(out, "  {key}: []");
        return;
    }
    let _ = writeln!(out, "{gap}  {key}:");
    for item in items {
        out.push_str("    - ");
        entry(out, item);
    }
}

fn render_yaml(dag: &Dag, out: &mut String) {
    const FIELD: &str = "      ";
    out.push_str("```yaml\ndag:\n");
    yaml_items(out, "nodes", "", &dag.nodes, |out, node| {
        yaml_field(out, "", "id", &node.id);
        yaml_field(out, FIELD, "name", &node.name);
        yaml_field(out, FIELD, "type", node.r#type.as_str());
        yaml_list_field(out, FIELD, "files", &node.files);
        yaml_list_field(out, FIELD, "depends_on", &node.depends_on);
        yaml_field(out, FIELD, "estimated_duration", &node.estimated_duration);
        let _ = writeln!(out, "{FIELD}phase: {}", node.phase);
        if let Some(level) = node.level {
            let _ = writeln!(out, "{FIELD}level: {level}");
        }
        if let Some(acceptance) = &node.acceptance {
            yaml_field(out, FIELD, "acceptance", acceptance);
        }
        if !node.description.is_empty() {
            yaml_field(out, FIELD, "description", &node.description);
        }
        if let Some(skip) = &node.skip {
            yaml_field(out, FIELD, "skip", skip);
        }
    });
    yaml_items(
        out,
        "parallel_groups",
        "\n",
        &dag.parallel_groups,
        |out, group| {
            yaml_field(out, "", "id", &group.id);
            yaml_list_field(out, FIELD, "tasks", &group.tasks);
            let _ = writeln!(out, "{FIELD}conflict_free: {}", group.conflict_free);
            if let Some(shared) = &group.shared_resources {
                yaml_list_field(out, FIELD, "shared_resources", shared);
            }
            if let Some(strategy) = &group.coordination_strategy {
                yaml_field(out, FIELD, "coordination_strategy", strategy);
            }
        },
    );
    out.push_str("```\n");
}

/// Each node's position in `dag.nodes`, by id.
fn node_positions(dag: &Dag) -> HashMap<&str, usize> {
    dag.nodes
        .iter()
        .enumerate()
        .map(|(position, node)| (node.id.as_str(), position))
        .collect()
}

/// A Mermaid label: one line, with `#`, `"`, `<`, `>` as entity codes.
fn mermaid_label(text: &str) -> String {
    let mut label = String::with_capacity(text.len());
    for c in one_line(text).chars() {
        match c {
            '#' => label.push_str("#35;"),
            '"' => label.push_str("#quot;"),
            '<' => label.push_str("#lt;"),
            '>' => label.push_str("#gt;"),
            c => label.push(c),
        }
    }
    label
}

fn render_mermaid(dag: &Dag, out: &mut String) {
    let position_of = node_positions(dag);
    out.push_str("```mermaid\nflowchart TD\n");
    let mut grouped = vec![false; dag.nodes.len()];
    for (number, group) in dag.parallel_groups.iter().enumerate() {
        let _ = writeln!(
            out,
            "  subgraph pg{number}[\"{}\"]",
            mermaid_label(&group.id)
        );
        for task in &group.tasks {
            if let Some(&position) = position_of.get(task.as_str()) {
                grouped[position] = true;
                mermaid_node(out, "    ", position, &dag.nodes[position]);
            }
        }
        out.push_str("  end\n");
    }
    for (position, node) in dag.nodes.iter().enumerate() {
        if !grouped[position] {
            mermaid_node(out, "  ", position, node);
        }
    }
    let mut skipped = Vec::new();
    for (position, node) in dag.nodes.iter().enumerate() {
        for dependency in &node.depends_on {
            if let Some(&from) = position_of.get(dependency.as_str()) {
                let _ = writeln!(out, "  t{from} --> t{position}");
            }
        }
        if node.skip.is_some() {
            skipped.push(format!("t{position}"));
        }
    }
    if !skipped.is_empty() {
        out.push_str("  classDef skip stroke-dasharray: 5 5,color:#888\n");
        let _ = writeln!(out, "  class {} skip", skipped.join(","));
    }
    out.push_str("```\n");
}

fn mermaid_node(out: &mut String, indent: &str, position: usize, node: &Node) {
    let _ = writeln!(
        out,
        "{indent}t{position}[\"{} {}\"]",
        mermaid_label(&node.id),
        mermaid_label(&node.name)
    );
}

/// An inline code span that survives backticks inside `text`.
fn code_span(text: &str) -> String {
    let text = one_line(text);
    let mut longest_run = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest_run = longest_run.max(run);
    }
    let fence = "`".repeat(longest_run + 1);
    if longest_run == 0 {
        format!("{fence}{text}{fence}")
    } else {
        format!("{fence} {text} {fence}")
    }
}

fn render_tasks(plan: &LoopPlan, out: &mut String) {
    out.push_str("## Tasks\n\n");
    let mut by_phase: HashMap<u32, Vec<&Node>> = HashMap::new();
    for node in &plan.dag.nodes {
        by_phase.entry(node.phase).or_default().push(node);
    }
    for phase in &plan.phases {
        let _ = writeln!(
            out,
            "### Phase {}: {}\n",
            phase.number,
            one_line(&phase.name)
        );
        match by_phase.remove(&phase.number) {
            Some(nodes) => nodes.iter().for_each(|node| render_task(node, out)),
            None => out.push_str("_No tasks._\n\n"),
        }
    }
    // Only an invalid plan has tasks in unlisted phases; show them anyway.
    let mut unlisted: Vec<(u32, Vec<&Node>)> = by_phase.into_iter().collect();
    unlisted.sort_by_key(|(number, _)| *number);
    for (number, nodes) in unlisted {
        let _ = writeln!(out, "### Phase {number}: (not in phases)\n");
        nodes.iter().for_each(|node| render_task(node, out));
    }
}

fn render_task(node: &Node, out: &mut String) {
    let _ = writeln!(out, "- [ ] Task {}: {}", node.id, one_line(&node.name));
    let _ = writeln!(out, "  - Type: {}", node.r#type.as_str());
    let acceptance = node
        .acceptance
        .as_deref()
        .map_or_else(|| "(not specified)".to_owned(), one_line);
    let _ = writeln!(out, "  - Acceptance: {acceptance}");
    let files = if node.files.is_empty() {
        "(none)".to_owned()
    } else {
        node.files
            .iter()
            .map(|f| code_span(f))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(out, "  - Files: {files}");
    if !node.depends_on.is_empty() {
        let _ = writeln!(
            out,
            "  - Depends on: {}",
            one_line(&node.depends_on.join(", "))
        );
    }
    let _ = writeln!(out, "  - Estimate: {}", node.estimated_duration);
    if let Some(skip) = &node.skip {
        let _ = writeln!(out, "  - Overlap: {}", one_line(skip));
    }
    out.push('\n');
}

// ---------------------------------------------------------------- parsing

#[derive(Deserialize)]
struct DagDocument {
    dag: Dag,
}

fn markdown_error(line: Option<usize>, body: impl std::fmt::Display) -> PlanError {
    PlanError::new(PlanErrorKind::InvalidPlanMarkdown, line, body)
}

/// An open code fence: its character, length and 1-based line.
struct Fence {
    marker: char,
    length: usize,
    line: usize,
}

/// `Some((marker, length, info))` when `line` opens or closes a fence.
fn fence_of(line: &str) -> Option<(char, usize, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let marker = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let length = rest.chars().take_while(|c| *c == marker).count();
    (length >= 3).then(|| (marker, length, rest[length..].trim()))
}

/// `(status character, text after the marker)` for `- [c] text` list items, and the
/// item's indentation.
fn marker_item(line: &str) -> Option<(usize, char, &str)> {
    let body = line.trim_start();
    let indent = line.len() - body.len();
    let rest = body
        .strip_prefix("- ")
        .or_else(|| body.strip_prefix("* "))
        .or_else(|| body.strip_prefix("+ "))?;
    let rest = rest.strip_prefix('[')?;
    let mut characters = rest.char_indices();
    let (_, marker) = characters.next()?;
    let (close, bracket) = characters.next()?;
    if bracket != ']' {
        return None;
    }
    let after = &rest[close + 1..];
    if after.is_empty() {
        return Some((indent, marker, ""));
    }
    after.strip_prefix(' ').map(|text| (indent, marker, text))
}

/// Reads a `plan.md` back: its DAG and the task markers (rules in the module
/// documentation).
pub fn parse_markdown(text: &str) -> Result<ParsedPlan, PlanError> {
    let lines: Vec<&str> = text.lines().collect();
    let dag = read_dag(&lines)?;
    let progress = read_progress(&lines, &dag)?;
    Ok(ParsedPlan { dag, progress })
}

fn read_dag(lines: &[&str]) -> Result<Dag, PlanError> {
    let mut open: Option<(Fence, bool)> = None; // (fence, is a yaml block)
    let mut block_start = 0;
    for (position, line) in lines.iter().enumerate() {
        let number = position + 1;
        match (&open, fence_of(line)) {
            (None, Some((marker, length, info))) => {
                let language = info.split_whitespace().next().unwrap_or("");
                let is_yaml = matches!(language, "yaml" | "yml");
                open = Some((
                    Fence {
                        marker,
                        length,
                        line: number,
                    },
                    is_yaml,
                ));
                block_start = position + 1;
            }
            (Some((fence, is_yaml)), Some((marker, length, info)))
                if marker == fence.marker && length >= fence.length && info.is_empty() =>
            {
                let body = &lines[block_start..position];
                if *is_yaml && body.iter().any(|line| line.starts_with("dag:")) {
                    return parse_dag_yaml(body, fence.line);
                }
                open = None;
            }
            _ => {}
        }
    }
    match open {
        Some((fence, true)) => Err(markdown_error(
            Some(fence.line),
            "the ```yaml block is never closed; end it with a line of ```",
        )),
        _ => Err(markdown_error(
            None,
            "no ```yaml block with a top-level `dag:` key found; the Dependency Graph \
             section must hold `dag: {nodes, parallel_groups}`",
        )),
    }
}

fn parse_dag_yaml(body: &[&str], fence_line: usize) -> Result<Dag, PlanError> {
    let yaml = body.join("\n");
    let document: DagDocument = serde_norway::from_str(&yaml).map_err(|error| {
        let line = error
            .location()
            .map_or(fence_line, |location| fence_line + location.line());
        markdown_error(Some(line), format!("invalid YAML DAG: {error}"))
    })?;
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(document.dag.nodes.len());
    for (position, node) in document.dag.nodes.iter().enumerate() {
        if let Some(first) = seen.insert(node.id.as_str(), position) {
            return Err(markdown_error(
                Some(fence_line),
                format!(
                    "the DAG lists node id {} twice (nodes {first} and {position}); ids must be unique",
                    quote(&node.id)
                ),
            ));
        }
    }
    Ok(document.dag)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PlanSection {
    Other,
    Discovered,
}

fn read_progress(lines: &[&str], dag: &Dag) -> Result<Progress, PlanError> {
    let position_of = node_positions(dag);
    let mut marks: Vec<Option<(ProgressStatus, usize)>> = vec![None; dag.nodes.len()];
    let mut discovered_work = Vec::new();
    let mut section = PlanSection::Other;
    let mut fence: Option<(char, usize)> = None;
    for (position, line) in lines.iter().enumerate() {
        let number = position + 1;
        if let Some((marker, length, info)) = fence_of(line) {
            match fence {
                None => fence = Some((marker, length)),
                Some((open_marker, open_length))
                    if marker == open_marker && length >= open_length && info.is_empty() =>
                {
                    fence = None;
                }
                Some(_) => {}
            }
            continue;
        }
        if fence.is_some() {
            continue;
        }
        if let Some(heading) = line.strip_prefix("## ").or_else(|| line.strip_prefix("# ")) {
            section = if heading.trim().to_lowercase().starts_with("discovered work") {
                PlanSection::Discovered
            } else {
                PlanSection::Other
            };
            continue;
        }
        if section == PlanSection::Discovered {
            if let Some(item) = discovered_item(line, number) {
                discovered_work.push(item);
            }
            continue;
        }
        let Some((_, marker, rest)) = marker_item(line) else {
            continue;
        };
        let Some(after_task) = rest.strip_prefix("Task ") else {
            continue;
        };
        let Some(status) = ProgressStatus::from_marker(marker) else {
            return Err(markdown_error(
                Some(number),
                format!(
                    "unknown task marker [{}]; use [ ] pending, [~] in progress, [x] done or [!] blocked",
                    one_line(&marker.to_string())
                ),
            ));
        };
        let Some(node) = resolve_task(after_task, &position_of, dag) else {
            return Err(markdown_error(
                Some(number),
                format!(
                    "the marker {} names no task of the DAG; add the task to the yaml block or \
                     move the line to Discovered Work",
                    quote(line.trim())
                ),
            ));
        };
        if let Some((_, first_line)) = marks[node] {
            return Err(markdown_error(
                Some(number),
                format!(
                    "task {} is marked twice (lines {first_line} and {number}); keep one marker line",
                    quote(&dag.nodes[node].id)
                ),
            ));
        }
        marks[node] = Some((status, number));
    }

    let mut counts = ProgressCounts {
        total: dag.nodes.len(),
        ..ProgressCounts::default()
    };
    let mut tasks = Vec::with_capacity(dag.nodes.len());
    for (node, mark) in dag.nodes.iter().zip(marks) {
        let status = mark.map_or(ProgressStatus::Pending, |(status, _)| status);
        match status {
            ProgressStatus::Pending => counts.pending += 1,
            ProgressStatus::InProgress => counts.in_progress += 1,
            ProgressStatus::Done => counts.done += 1,
            ProgressStatus::Blocked => counts.blocked += 1,
        }
        let skipped = node.skip.is_some();
        counts.skipped += usize::from(skipped);
        tasks.push(TaskProgress {
            id: node.id.clone(),
            status,
            skipped,
            line: mark.map(|(_, line)| line),
        });
    }
    Ok(Progress {
        tasks,
        counts,
        discovered_work,
    })
}

/// A top-level list item under Discovered Work (sub-items belong to their parent).
fn discovered_item(line: &str, number: usize) -> Option<DiscoveredItem> {
    if let Some((indent, marker, text)) = marker_item(line)
        && indent <= 1
        && let Some(status) = ProgressStatus::from_marker(marker)
    {
        return Some(DiscoveredItem {
            text: text.trim().to_owned(),
            status: Some(status),
            line: number,
        });
    }
    let body = line.trim_start();
    if line.len() - body.len() > 1 {
        return None;
    }
    let text = body
        .strip_prefix("- ")
        .or_else(|| body.strip_prefix("* "))
        .or_else(|| body.strip_prefix("+ "))?;
    Some(DiscoveredItem {
        text: text.trim().to_owned(),
        status: None,
        line: number,
    })
}

/// The node a `Task {id}: {name}` line names (rules in the module documentation).
fn resolve_task(text: &str, position_of: &HashMap<&str, usize>, dag: &Dag) -> Option<usize> {
    let mut candidates: Vec<(usize, &str)> = Vec::new();
    for (offset, _) in text.match_indices(':') {
        let after = &text[offset + 1..];
        if (after.is_empty() || after.starts_with(' '))
            && let Some(&node) = position_of.get(&text[..offset])
        {
            candidates.push((node, after.strip_prefix(' ').unwrap_or(after)));
        }
    }
    if let Some(&node) = position_of.get(text.trim_end()) {
        candidates.push((node, ""));
    }
    match candidates.as_slice() {
        [] => None,
        [(node, _)] => Some(*node),
        _ => candidates
            .iter()
            .find(|(node, name)| one_line(&dag.nodes[*node].name) == *name)
            .or_else(|| {
                candidates
                    .iter()
                    .max_by_key(|(node, _)| dag.nodes[*node].id.len())
            })
            .map(|(node, _)| *node),
    }
}
