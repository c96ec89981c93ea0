//! Typed phase contexts and plan documents (docs/spec/refine.md §1), read from JSON with
//! field-precise errors. Known fields are typed; every other key is kept verbatim and
//! re-emitted at its original position, so a refine never reorders or drops data.
//!
//! Long on purpose: one typed reader per document kind, all built on
//! the same order-keeping field map and error paths defined here.

use std::collections::HashSet;

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use crate::domain::natural::natural_cmp;

/// `FATAL: failed to parse {input}: {detail}` — `input` is the file path (CLI) or
/// `request body` (HTTP); `path` names the offending field when there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("FATAL: failed to parse {input}: {}", self.detail())]
pub struct RefineInputError {
    pub input: String,
    /// JSON path of the field at fault (`assignments[2].id`), `None` for the document.
    pub path: Option<String>,
    pub reason: String,
}

impl RefineInputError {
    pub fn detail(&self) -> String {
        match &self.path {
            Some(path) => format!("{path}: {}", self.reason),
            None => self.reason.clone(),
        }
    }
}

/// `^[A-Za-z0-9_-]+$`, written out (ids end up in file names).
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(is_id_byte)
}

pub(crate) fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Which key an assignment's work packages came under; the answer uses the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WpKey {
    ProposedWorkPackages,
    WorkPackages,
}

crate::domain::wire_strings!(WpKey {
    ProposedWorkPackages => "proposed_work_packages",
    WorkPackages => "work_packages",
});

/// A work package as proposed by an assignment.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WorkPackage {
    pub id: Option<String>,
    pub id_suffix: Option<String>,
    pub name: Option<String>,
    pub estimated_files: Option<Vec<String>>,
    pub files_touched: Option<Vec<String>>,
    /// Every other key (scope, goal, ...), unchanged.
    pub extra: Map<String, Value>,
    key_order: Vec<String>,
}

impl WorkPackage {
    /// `id`, else `{assignment_id}-{id_suffix}`; `None` when the WP has neither.
    pub fn full_id(&self, assignment_id: &str) -> Option<String> {
        match (&self.id, &self.id_suffix) {
            (Some(id), _) => Some(id.clone()),
            (None, Some(suffix)) => Some(format!("{assignment_id}-{suffix}")),
            (None, None) => None,
        }
    }

    /// `estimated_files ∪ files_touched`, sorted naturally, without repeats.
    pub fn files(&self) -> Vec<String> {
        let mut files: Vec<String> = self
            .estimated_files
            .iter()
            .chain(self.files_touched.iter())
            .flatten()
            .cloned()
            .collect();
        files.sort_by(|a, b| natural_cmp(a, b));
        files.dedup();
        files
    }

    /// Whether a `wp_id_suffix` from an L0 answer names this WP. The full id is
    /// accepted too because L0s often quote it.
    pub fn matches_suffix(&self, assignment_id: &str, suffix: &str) -> bool {
        self.id_suffix.as_deref() == Some(suffix)
            || self.id.as_deref() == Some(suffix)
            || self.full_id(assignment_id).as_deref() == Some(&format!("{assignment_id}-{suffix}"))
    }

    /// Removes `file` from both file fields; true when it was present.
    pub(crate) fn strip_file(&mut self, file: &str) -> bool {
        let mut stripped = false;
        for list in [&mut self.estimated_files, &mut self.files_touched]
            .into_iter()
            .flatten()
        {
            let before = list.len();
            list.retain(|f| f != file);
            stripped |= list.len() != before;
        }
        stripped
    }

    pub fn to_value(&self) -> Value {
        let strings = |list: &Option<Vec<String>>| {
            list.as_ref()
                .map(|l| Value::Array(l.iter().cloned().map(Value::String).collect()))
        };
        Value::Object(ordered_object(
            &self.key_order,
            vec![
                ("id", self.id.clone().map(Value::String)),
                ("id_suffix", self.id_suffix.clone().map(Value::String)),
                ("name", self.name.clone().map(Value::String)),
                ("estimated_files", strings(&self.estimated_files)),
                ("files_touched", strings(&self.files_touched)),
            ],
            &self.extra,
        ))
    }

    fn from_value(r: &Reader<'_>, path: &str, value: &Value) -> Result<Self, RefineInputError> {
        let object = r.object(path, value)?;
        let mut wp = WorkPackage {
            key_order: object.keys().cloned().collect(),
            ..WorkPackage::default()
        };
        for (key, value) in object {
            let field = format!("{path}.{key}");
            match key.as_str() {
                "id" => wp.id = r.opt_string(&field, value)?,
                "id_suffix" => wp.id_suffix = r.opt_string(&field, value)?,
                "name" => wp.name = r.opt_string(&field, value)?,
                "estimated_files" => wp.estimated_files = r.opt_strings(&field, value)?,
                "files_touched" => wp.files_touched = r.opt_strings(&field, value)?,
                _ => {
                    wp.extra.insert(key.clone(), value.clone());
                }
            }
        }
        Ok(wp)
    }
}

/// An elaborated assignment (AssignmentElaborated).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Assignment {
    pub id: String,
    pub phase_id: Option<String>,
    pub name: Option<String>,
    pub goal: Option<String>,
    pub technical_approach: Option<String>,
    pub dependency_notes: Option<String>,
    pub overlap_notes: Option<String>,
    pub work_packages: Vec<WorkPackage>,
    /// `None` when the input had neither WP key (then none is written back).
    pub wp_key: Option<WpKey>,
    pub extra: Map<String, Value>,
    key_order: Vec<String>,
}

/// The fields an L0 `changes` entry may set (docs/spec/refine.md §5).
pub const EDITABLE_FIELDS: [&str; 5] = [
    "name",
    "goal",
    "technical_approach",
    "dependency_notes",
    "overlap_notes",
];

impl Assignment {
    /// A bare assignment (tests, builders); other fields start empty.
    pub fn new(id: &str) -> Self {
        Assignment {
            id: id.to_owned(),
            ..Assignment::default()
        }
    }

    /// The editable text field named `field`, or `None` if it is not editable.
    pub fn editable_field_mut(&mut self, field: &str) -> Option<&mut Option<String>> {
        match field {
            "name" => Some(&mut self.name),
            "goal" => Some(&mut self.goal),
            "technical_approach" => Some(&mut self.technical_approach),
            "dependency_notes" => Some(&mut self.dependency_notes),
            "overlap_notes" => Some(&mut self.overlap_notes),
            _ => None,
        }
    }

    pub fn to_value(&self) -> Value {
        let text = |v: &Option<String>| v.clone().map(Value::String);
        let wps = (self.wp_key.is_some() || !self.work_packages.is_empty()).then(|| {
            Value::Array(
                self.work_packages
                    .iter()
                    .map(WorkPackage::to_value)
                    .collect(),
            )
        });
        let wp_key = self.wp_key.unwrap_or(WpKey::ProposedWorkPackages).as_str();
        Value::Object(ordered_object(
            &self.key_order,
            vec![
                ("id", Some(Value::String(self.id.clone()))),
                ("phase_id", text(&self.phase_id)),
                ("name", text(&self.name)),
                ("goal", text(&self.goal)),
                ("technical_approach", text(&self.technical_approach)),
                (wp_key, wps),
                ("dependency_notes", text(&self.dependency_notes)),
                ("overlap_notes", text(&self.overlap_notes)),
            ],
            &self.extra,
        ))
    }

    /// Reads one assignment; `input` names the document for error messages.
    pub fn from_value(input: &str, path: &str, value: &Value) -> Result<Self, RefineInputError> {
        Self::read(&Reader { input }, path, value)
    }

    fn read(r: &Reader<'_>, path: &str, value: &Value) -> Result<Self, RefineInputError> {
        let object = r.object(path, value)?;
        if object.contains_key("proposed_work_packages") && object.contains_key("work_packages") {
            return Err(r.fail(
                Some(path),
                "has both proposed_work_packages and work_packages; use one",
            ));
        }
        let id_path = format!("{path}.id");
        let id = match object.get("id") {
            None | Some(Value::Null) => return Err(r.fail(Some(&id_path), "missing")),
            Some(Value::String(id)) => id.clone(),
            Some(other) => {
                return Err(r.fail(
                    Some(&id_path),
                    format!("expected a string, got {}", json_type(other)),
                ));
            }
        };
        if !is_valid_id(&id) {
            return Err(r.fail(
                Some(&id_path),
                format!("{id:?} does not match ^[A-Za-z0-9_-]+$"),
            ));
        }
        let mut a = Assignment {
            id,
            key_order: object.keys().cloned().collect(),
            ..Assignment::default()
        };
        for (key, value) in object {
            let field = format!("{path}.{key}");
            match key.as_str() {
                "id" => {}
                "phase_id" => a.phase_id = r.opt_string(&field, value)?,
                "name" => a.name = r.opt_string(&field, value)?,
                "goal" => a.goal = r.opt_string(&field, value)?,
                "technical_approach" => a.technical_approach = r.opt_string(&field, value)?,
                "dependency_notes" => a.dependency_notes = r.opt_string(&field, value)?,
                "overlap_notes" => a.overlap_notes = r.opt_string(&field, value)?,
                "proposed_work_packages" | "work_packages" => {
                    a.wp_key = Some(if key == "work_packages" {
                        WpKey::WorkPackages
                    } else {
                        WpKey::ProposedWorkPackages
                    });
                    // `null` reads as "no WPs" but is written back as `[]`.
                    if !value.is_null() {
                        let list = r.array(&field, value)?;
                        for (i, wp) in list.iter().enumerate() {
                            a.work_packages.push(WorkPackage::from_value(
                                r,
                                &format!("{field}[{i}]"),
                                wp,
                            )?);
                        }
                    }
                }
                _ => {
                    a.extra.insert(key.clone(), value.clone());
                }
            }
        }
        Ok(a)
    }
}

impl Serialize for Assignment {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

/// `{id, name, goal}` of an assignment of another phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerSummary {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl PeerSummary {
    pub fn of(a: &Assignment) -> Self {
        PeerSummary {
            id: a.id.clone(),
            name: a.name.clone(),
            goal: a.goal.clone(),
            extra: Map::new(),
        }
    }
}

/// A per-phase refine context (`context_{phase_id}.json`).
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseContext {
    pub phase_id: String,
    pub task_file_path: Option<String>,
    pub task_text: Option<String>,
    /// Input order; never empty, ids unique and valid.
    pub assignments: Vec<Assignment>,
    pub peer_summaries: Vec<PeerSummary>,
    /// `schema_version` and any unknown keys, unchanged.
    pub extra: Map<String, Value>,
    key_order: Vec<String>,
}

impl PhaseContext {
    /// A context built in code (the split of a refine run); `assignments` must be
    /// non-empty with unique valid ids for the result to re-parse.
    pub fn new(phase_id: &str, assignments: Vec<Assignment>, peers: Vec<PeerSummary>) -> Self {
        let mut extra = Map::new();
        extra.insert("schema_version".into(), Value::from(1));
        PhaseContext {
            phase_id: phase_id.to_owned(),
            task_file_path: None,
            task_text: None,
            assignments,
            peer_summaries: peers,
            extra,
            key_order: Vec::new(),
        }
    }

    pub fn assignment(&self, id: &str) -> Option<&Assignment> {
        self.assignments.iter().find(|a| a.id == id)
    }

    pub fn to_value(&self) -> Value {
        let peers = self
            .peer_summaries
            .iter()
            .map(|p| serde_json::to_value(p).unwrap_or(Value::Null))
            .collect();
        Value::Object(ordered_object(
            &self.key_order,
            vec![
                ("phase_id", Some(Value::String(self.phase_id.clone()))),
                (
                    "task_file_path",
                    self.task_file_path.clone().map(Value::String),
                ),
                ("task_text", self.task_text.clone().map(Value::String)),
                (
                    "assignments",
                    Some(Value::Array(
                        self.assignments.iter().map(Assignment::to_value).collect(),
                    )),
                ),
                ("peer_summaries", Some(Value::Array(peers))),
            ],
            &self.extra,
        ))
    }
}

impl Serialize for PhaseContext {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

/// One phase of the refined plan; the whole object is kept for the L0 packet.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseElaborated {
    pub id: String,
    pub name: Option<String>,
    pub goal: Option<String>,
    /// The phase object exactly as given.
    pub raw: Map<String, Value>,
}

/// The refined plan (PlanDocument): phases in input order.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanDocument {
    pub phases: Vec<PhaseElaborated>,
    /// `task`, `source_dir` and anything else, unchanged.
    pub extra: Map<String, Value>,
}

impl PlanDocument {
    /// The `phase_id → PhaseElaborated` lookup.
    pub fn phase(&self, phase_id: &str) -> Option<&PhaseElaborated> {
        self.phases.iter().find(|p| p.id == phase_id)
    }
}

/// Reads a phase context. Rejects (docs/spec/refine.md §1) malformed JSON, a missing or empty
/// `assignments`, an assignment without `id`, duplicate or malformed ids.
pub fn parse_context(input: &str, text: &str) -> Result<PhaseContext, RefineInputError> {
    let value = Reader { input }.json(text)?;
    context_from_value(input, &value)
}

/// [`parse_context`] for an already-parsed body.
pub fn context_from_value(input: &str, value: &Value) -> Result<PhaseContext, RefineInputError> {
    let r = &Reader { input };
    let object = r.object_root(value)?;
    let phase_id = match object.get("phase_id") {
        None | Some(Value::Null) => return Err(r.fail(Some("phase_id"), "missing")),
        Some(v) => r.opt_string("phase_id", v)?.unwrap_or_default(),
    };
    if !is_valid_id(&phase_id) {
        return Err(r.fail(
            Some("phase_id"),
            format!("{phase_id:?} does not match ^[A-Za-z0-9_-]+$"),
        ));
    }
    let assignments = match object.get("assignments") {
        None | Some(Value::Null) => return Err(r.fail(Some("assignments"), "missing")),
        Some(v) => read_assignments(r, "assignments", v)?,
    };
    let mut seen = HashSet::new();
    for (i, a) in assignments.iter().enumerate() {
        if !seen.insert(a.id.as_str()) {
            return Err(r.fail(
                Some(&format!("assignments[{i}].id")),
                format!("duplicate assignment id {:?}", a.id),
            ));
        }
    }
    let mut context = PhaseContext {
        phase_id,
        task_file_path: None,
        task_text: None,
        assignments,
        peer_summaries: Vec::new(),
        extra: Map::new(),
        key_order: object.keys().cloned().collect(),
    };
    for (key, value) in object {
        match key.as_str() {
            "phase_id" | "assignments" => {}
            "task_file_path" => context.task_file_path = r.opt_string(key, value)?,
            "task_text" => context.task_text = r.opt_string(key, value)?,
            "peer_summaries" if !value.is_null() => {
                for (i, peer) in r.array(key, value)?.iter().enumerate() {
                    context.peer_summaries.push(read_peer(
                        r,
                        &format!("peer_summaries[{i}]"),
                        peer,
                    )?);
                }
            }
            _ => {
                context.extra.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(context)
}

/// Reads a list of assignments (the body of a refine run): a JSON array or an
/// object with `assignments`. Ids must be present and valid; duplicates are allowed
/// here because the run's merge reports them.
pub fn parse_assignments(input: &str, text: &str) -> Result<Vec<Assignment>, RefineInputError> {
    let r = Reader { input };
    let value = r.json(text)?;
    match &value {
        Value::Object(o) => match o.get("assignments") {
            Some(v) => read_assignments(&r, "assignments", v),
            None => Err(r.fail(Some("assignments"), "missing")),
        },
        other => read_assignments(&r, "assignments", other),
    }
}

/// The `assignments` list of an already-parsed refine-run body (`path` names it in
/// errors). Ids must be present and valid; duplicates are left to the merge.
pub fn assignments_from_value(
    input: &str,
    path: &str,
    value: &Value,
) -> Result<Vec<Assignment>, RefineInputError> {
    read_assignments(&Reader { input }, path, value)
}

/// Reads a refined plan (PlanDocument). Phases need unique valid ids.
pub fn parse_plan(input: &str, text: &str) -> Result<PlanDocument, RefineInputError> {
    let value = Reader { input }.json(text)?;
    plan_from_value(input, &value)
}

/// [`parse_plan`] for an already-parsed body.
pub fn plan_from_value(input: &str, value: &Value) -> Result<PlanDocument, RefineInputError> {
    let r = &Reader { input };
    let object = r.object_root(value)?;
    let list = match object.get("phases") {
        None | Some(Value::Null) => return Err(r.fail(Some("phases"), "missing")),
        Some(v) => r.array("phases", v)?,
    };
    let mut phases: Vec<PhaseElaborated> = Vec::with_capacity(list.len());
    for (i, phase) in list.iter().enumerate() {
        let path = format!("phases[{i}]");
        let raw = r.object(&path, phase)?;
        let id_path = format!("{path}.id");
        let id = match raw.get("id") {
            None | Some(Value::Null) => return Err(r.fail(Some(&id_path), "missing")),
            Some(v) => r.opt_string(&id_path, v)?.unwrap_or_default(),
        };
        if !is_valid_id(&id) {
            return Err(r.fail(
                Some(&id_path),
                format!("{id:?} does not match ^[A-Za-z0-9_-]+$"),
            ));
        }
        if phases.iter().any(|p| p.id == id) {
            return Err(r.fail(Some(&id_path), format!("duplicate phase id {id:?}")));
        }
        let text = |key: &str| raw.get(key).and_then(Value::as_str).map(str::to_owned);
        phases.push(PhaseElaborated {
            name: text("name"),
            goal: text("goal"),
            id,
            raw: raw.clone(),
        });
    }
    let extra = object
        .iter()
        .filter(|(k, _)| k.as_str() != "phases")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok(PlanDocument { phases, extra })
}

fn read_assignments(
    r: &Reader<'_>,
    path: &str,
    value: &Value,
) -> Result<Vec<Assignment>, RefineInputError> {
    let list = r.array(path, value)?;
    if list.is_empty() {
        return Err(r.fail(
            Some(path),
            "empty list; at least one assignment is required",
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, a)| Assignment::read(r, &format!("{path}[{i}]"), a))
        .collect()
}

fn read_peer(r: &Reader<'_>, path: &str, value: &Value) -> Result<PeerSummary, RefineInputError> {
    let object = r.object(path, value)?;
    let id_path = format!("{path}.id");
    let id = match object.get("id") {
        None | Some(Value::Null) => return Err(r.fail(Some(&id_path), "missing")),
        Some(v) => r.opt_string(&id_path, v)?.unwrap_or_default(),
    };
    let mut peer = PeerSummary {
        id,
        name: None,
        goal: None,
        extra: Map::new(),
    };
    for (key, value) in object {
        let field = format!("{path}.{key}");
        match key.as_str() {
            "id" => {}
            "name" => peer.name = r.opt_string(&field, value)?,
            "goal" => peer.goal = r.opt_string(&field, value)?,
            _ => {
                peer.extra.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(peer)
}

/// Field readers that turn every type surprise into a [`RefineInputError`].
pub(crate) struct Reader<'a> {
    input: &'a str,
}

impl Reader<'_> {
    fn fail(&self, path: Option<&str>, reason: impl Into<String>) -> RefineInputError {
        RefineInputError {
            input: self.input.to_owned(),
            path: path.map(str::to_owned),
            reason: reason.into(),
        }
    }

    fn json(&self, text: &str) -> Result<Value, RefineInputError> {
        serde_json::from_str(text).map_err(|e| self.fail(None, format!("malformed JSON: {e}")))
    }

    fn object_root<'v>(
        &self,
        value: &'v Value,
    ) -> Result<&'v Map<String, Value>, RefineInputError> {
        value.as_object().ok_or_else(|| {
            self.fail(
                None,
                format!("expected a JSON object, got {}", json_type(value)),
            )
        })
    }

    fn object<'v>(
        &self,
        path: &str,
        v: &'v Value,
    ) -> Result<&'v Map<String, Value>, RefineInputError> {
        v.as_object().ok_or_else(|| {
            self.fail(
                Some(path),
                format!("expected an object, got {}", json_type(v)),
            )
        })
    }

    fn array<'v>(&self, path: &str, v: &'v Value) -> Result<&'v Vec<Value>, RefineInputError> {
        v.as_array().ok_or_else(|| {
            self.fail(
                Some(path),
                format!("expected an array, got {}", json_type(v)),
            )
        })
    }

    /// Absent callers skip this; `null` reads as `None`.
    fn opt_string(&self, path: &str, v: &Value) -> Result<Option<String>, RefineInputError> {
        match v {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s.clone())),
            other => Err(self.fail(
                Some(path),
                format!("expected a string, got {}", json_type(other)),
            )),
        }
    }

    fn opt_strings(&self, path: &str, v: &Value) -> Result<Option<Vec<String>>, RefineInputError> {
        if v.is_null() {
            return Ok(None);
        }
        let list = self.array(path, v)?;
        list.iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s.clone()),
                other => Err(self.fail(
                    Some(&format!("{path}[{i}]")),
                    format!("expected a string, got {}", json_type(other)),
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

pub(crate) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Rebuilds an object in its input key order: typed `known` values go where their
/// key was (`null` if the key was there but the value is now absent), unknown keys
/// come from `extra`, and typed values new to the object are appended.
fn ordered_object(
    order: &[String],
    known: Vec<(&str, Option<Value>)>,
    extra: &Map<String, Value>,
) -> Map<String, Value> {
    let mut out = Map::new();
    for key in order {
        if let Some((_, value)) = known.iter().find(|(k, _)| k == key) {
            out.insert(key.clone(), value.clone().unwrap_or(Value::Null));
        } else if let Some(value) = extra.get(key) {
            out.insert(key.clone(), value.clone());
        }
    }
    for (key, value) in known {
        if let (false, Some(value)) = (out.contains_key(key), value) {
            out.insert(key.to_owned(), value);
        }
    }
    for (key, value) in extra {
        if !out.contains_key(key) {
            out.insert(key.clone(), value.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CONTEXT: &str = include_str!("../../../examples/context_P2.json");
    const PLAN: &str = include_str!("../../../examples/refined_plan.json");

    fn fatal(text: &str) -> String {
        parse_context("request body", text).unwrap_err().to_string()
    }

    #[test]
    fn reads_the_example_context_and_plan() {
        let c = parse_context("/tmp/context_P2.json", CONTEXT).unwrap();
        assert_eq!(c.phase_id, "P2");
        assert_eq!(c.task_file_path.as_deref(), Some("task_input.md"));
        assert_eq!(c.assignments.len(), 3);
        assert_eq!(c.peer_summaries[2].id, "P3-A1");
        let a1 = &c.assignments[0];
        assert_eq!(a1.wp_key, Some(WpKey::ProposedWorkPackages));
        assert_eq!(
            a1.work_packages[1].full_id("P2-A1").as_deref(),
            Some("P2-A1-WP2")
        );
        assert_eq!(
            a1.work_packages[1].files(),
            ["src/auth/cache.py", "src/http/client.py"]
        );
        assert_eq!(a1.work_packages[0].extra["scope"], "TTL map and eviction");
        // Round trip: same keys, same order, same values.
        let original: Value = serde_json::from_str(CONTEXT).unwrap();
        assert_eq!(
            serde_json::to_string(&c.to_value()).unwrap(),
            serde_json::to_string(&original).unwrap()
        );

        let plan = parse_plan("refined_plan.json", PLAN).unwrap();
        let p2 = plan.phase("P2").unwrap();
        assert_eq!(p2.name.as_deref(), Some("Authenticated client"));
        assert_eq!(p2.raw["ordering"], 2);
        assert!(plan.phase("P9").is_none());
        assert_eq!(plan.extra["source_dir"], "/srv/app");
    }

    #[test]
    fn wp_ids_and_files() {
        let wp = WorkPackage {
            id: Some("P1-A1-WP7".into()),
            id_suffix: Some("WP1".into()),
            estimated_files: Some(vec!["b".into(), "a10".into()]),
            files_touched: Some(vec!["a2".into(), "b".into()]),
            ..WorkPackage::default()
        };
        assert_eq!(wp.full_id("P1-A1").as_deref(), Some("P1-A1-WP7"));
        assert_eq!(wp.files(), ["a2", "a10", "b"]);
        assert!(wp.matches_suffix("P1-A1", "WP1"));
        assert!(wp.matches_suffix("P1-A1", "WP7"));
        assert!(wp.matches_suffix("P1-A1", "P1-A1-WP7"));
        assert!(!wp.matches_suffix("P1-A1", "WP2"));
    }

    #[test]
    fn rejections_carry_the_source_and_the_field() {
        assert!(fatal("{").starts_with("FATAL: failed to parse request body: malformed JSON: "));
        assert_eq!(
            fatal(r#"{"phase_id": "P1"}"#),
            "FATAL: failed to parse request body: assignments: missing"
        );
        assert_eq!(
            fatal(r#"{"phase_id": "P1", "assignments": []}"#),
            "FATAL: failed to parse request body: assignments: empty list; at least one assignment is required"
        );
        assert_eq!(
            fatal(r#"{"phase_id": "P1", "assignments": [{"name": "x"}]}"#),
            "FATAL: failed to parse request body: assignments[0].id: missing"
        );
        assert_eq!(
            fatal(r#"{"phase_id": "P1", "assignments": [{"id": "A"}, {"id": "B"}, {"id": "A"}]}"#),
            "FATAL: failed to parse request body: assignments[2].id: duplicate assignment id \"A\""
        );
        for bad in ["P1 A1", "", "P1/A1", "é", "a.b"] {
            let text = json!({"phase_id": "P1", "assignments": [{"id": bad}]}).to_string();
            assert!(fatal(&text).contains("assignments[0].id: "), "{bad}");
            assert!(
                fatal(&text).contains("does not match ^[A-Za-z0-9_-]+$"),
                "{bad}"
            );
        }
        assert!(
            fatal(r#"{"phase_id": "../x", "assignments": [{"id": "a"}]}"#).contains("phase_id: ")
        );
        assert_eq!(
            fatal(
                r#"{"phase_id": "P1", "assignments": [{"id": "a", "proposed_work_packages": [{"estimated_files": ["x", 3]}]}]}"#
            ),
            "FATAL: failed to parse request body: assignments[0].proposed_work_packages[0].estimated_files[1]: expected a string, got number"
        );
        assert!(fatal(r#"{"phase_id": "P1", "assignments": [{"id": "a", "work_packages": [], "proposed_work_packages": []}]}"#).contains("use one"));
        assert_eq!(
            fatal(r#"{"phase_id": "P1", "assignments": [{"id": "a", "goal": 5}]}"#),
            "FATAL: failed to parse request body: assignments[0].goal: expected a string, got number"
        );
        assert_eq!(
            fatal("[1]"),
            "FATAL: failed to parse request body: expected a JSON object, got array"
        );
        let err = parse_plan(
            "/x/plan.json",
            r#"{"phases": [{"id": "P1"}, {"id": "P1"}]}"#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "FATAL: failed to parse /x/plan.json: phases[1].id: duplicate phase id \"P1\""
        );
        assert_eq!(err.path.as_deref(), Some("phases[1].id"));
    }

    #[test]
    fn ids_follow_the_pattern() {
        for good in ["P1", "P1-A2", "a_b-C9", "-"] {
            assert!(is_valid_id(good), "{good}");
        }
        for bad in ["", " P1", "P1\n", "P1.A", "Ä"] {
            assert!(!is_valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn nulls_and_new_fields_keep_their_place() {
        let text = r#"{"phase_id": "P1", "assignments": [{"id": "a", "overlap_notes": null, "x": [1], "work_packages": null}]}"#;
        let mut c = parse_context("b", text).unwrap();
        c.assignments[0].goal = Some("g".into());
        assert_eq!(
            c.assignments[0].to_value().to_string(),
            r#"{"id":"a","overlap_notes":null,"x":[1],"work_packages":[],"goal":"g"}"#
        );
    }
}
