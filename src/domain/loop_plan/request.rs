//! Reading a request (JSON or YAML) and its tasks, with one violation per bad field.

use serde_json::{Map, Value};

use super::rules::parse_duration_minutes;
use super::text::{describe, id_problem, quote};
use super::{LoopPlanRequest, PlanCode, PlanError, PlanErrorKind, PlanViolation, TaskType};
use crate::domain::text::{invalid_field_message, missing_field_message, task_label};

/// Reads a request from JSON text. Errors name the line.
pub fn parse_request_json(text: &str) -> Result<LoopPlanRequest, PlanError> {
    serde_json::from_str(text).map_err(|error| {
        let line = (error.line() > 0).then_some(error.line());
        PlanError::new(
            PlanErrorKind::InvalidRequest,
            line,
            format!("invalid loop plan request: {error}"),
        )
    })
}

/// Reads a request from YAML text. Errors name the line. Unquoted ids such as
/// `1.10` are YAML numbers; [`super::plan`] reports them with a hint to quote them.
pub fn parse_request_yaml(text: &str) -> Result<LoopPlanRequest, PlanError> {
    serde_norway::from_str(text).map_err(|error| {
        let line = error.location().map(|location| location.line());
        PlanError::new(
            PlanErrorKind::InvalidRequest,
            line,
            format!("invalid loop plan request: {error}"),
        )
    })
}

/// One task as read; fields that failed their checks hold defaults.
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskInput {
    pub index: usize,
    /// `None` when missing or unusable.
    pub id: Option<String>,
    pub name: String,
    pub description: String,
    /// Leading `./` removed, first occurrence of each kept.
    pub files: Vec<String>,
    /// First occurrence of each kept.
    pub depends_on: Vec<String>,
    pub phase: Option<u32>,
    pub acceptance: Option<String>,
    /// Normalized minutes, when given and readable.
    pub duration_minutes: Option<u32>,
    pub kind: Option<TaskType>,
}

const ID_EXPECTED: &str =
    "a non-empty string of at most 256 bytes without control characters, such as \"1.1\"";

/// Reads task `index`; pushes its field violations onto `errors`.
pub(crate) fn read_task(index: usize, value: &Value, errors: &mut Vec<PlanViolation>) -> TaskInput {
    let mut task = TaskInput {
        index,
        ..TaskInput::default()
    };
    let Value::Object(object) = value else {
        let body = format!(
            "task at index {index} must be an object with id, name and phase, got {}",
            describe(value)
        );
        errors.push(PlanViolation::new(PlanCode::InvalidField, body, Vec::new()).at_index(index));
        return task;
    };
    let mut report = Report {
        index,
        id: None,
        errors,
    };

    match present(object, "id") {
        None => report.missing("id", ID_EXPECTED),
        Some(Value::String(id)) => match id_problem(id) {
            None => {
                task.id = Some(id.clone());
                report.id = Some(id.clone());
            }
            Some(problem) => report.invalid("id", ID_EXPECTED, &format!("{problem} {}", quote(id))),
        },
        Some(Value::Number(number)) => report.invalid(
            "id",
            ID_EXPECTED,
            &format!("number {number} (quote ids in YAML: id: \"1.10\")"),
        ),
        Some(other) => report.invalid("id", ID_EXPECTED, &describe(other)),
    }

    match present(object, "name") {
        None => report.missing("name", "a string"),
        Some(Value::String(name)) => task.name = name.clone(),
        Some(other) => report.invalid("name", "a string", &describe(other)),
    }

    match present(object, "description") {
        None => {}
        Some(Value::String(description)) => task.description = description.clone(),
        Some(other) => report.invalid("description", "a string", &describe(other)),
    }

    if let Some(files) = report.string_list(object, "files", "an array of file path strings") {
        let mut seen = Seen::default();
        for file in files {
            let file = strip_dot_slash(&file);
            if file.is_empty() {
                report.invalid("files", "an array of file path strings", "an empty path");
                continue;
            }
            if seen.insert(file, &task.files) {
                task.files.push(file.to_owned());
            }
        }
    }

    if let Some(dependencies) =
        report.string_list(object, "depends_on", "an array of task id strings")
    {
        let mut seen = Seen::default();
        for dependency in dependencies {
            if let Some(problem) = id_problem(&dependency) {
                report.invalid(
                    "depends_on",
                    "an array of task id strings",
                    &format!("{problem} {}", quote(&dependency)),
                );
            } else if seen.insert(&dependency, &task.depends_on) {
                task.depends_on.push(dependency);
            }
        }
    }

    const PHASE_EXPECTED: &str = "a phase number (integer ≥ 1) listed in phases";
    match present(object, "phase") {
        None => report.missing("phase", PHASE_EXPECTED),
        Some(Value::Number(number)) => match number.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(phase) if phase >= 1 => task.phase = Some(phase),
            _ => report.invalid("phase", PHASE_EXPECTED, &format!("number {number}")),
        },
        Some(other) => report.invalid("phase", PHASE_EXPECTED, &describe(other)),
    }

    match present(object, "acceptance") {
        None => {}
        Some(Value::String(acceptance)) => task.acceptance = Some(acceptance.clone()),
        Some(other) => report.invalid("acceptance", "a string", &describe(other)),
    }

    const DURATION_EXPECTED: &str = "a duration such as \"30m\", \"1h\", \"1h30m\" or \"1.5h\"";
    match present(object, "estimated_duration") {
        None => {}
        Some(Value::String(text)) => match parse_duration_minutes(text) {
            Some(minutes) => task.duration_minutes = Some(minutes),
            None => report.invalid(
                "estimated_duration",
                DURATION_EXPECTED,
                &format!("string {}", quote(text)),
            ),
        },
        Some(other) => report.invalid("estimated_duration", DURATION_EXPECTED, &describe(other)),
    }

    const TYPE_EXPECTED: &str = "one of code, ui, integration, test, docs, config";
    match present(object, "type") {
        None => {}
        Some(Value::String(text)) => match TaskType::parse(text) {
            Some(kind) => task.kind = Some(kind),
            None => report.invalid("type", TYPE_EXPECTED, &format!("string {}", quote(text))),
        },
        Some(other) => report.invalid("type", TYPE_EXPECTED, &describe(other)),
    }
    task
}

/// De-duplication that stays linear: a scan while the list is short (most are),
/// a hash set once it grows.
#[derive(Default)]
struct Seen(Option<std::collections::HashSet<String>>);

impl Seen {
    const SCAN_LIMIT: usize = 16;

    /// Whether `item` is new to `kept` (the items kept so far); records it.
    fn insert(&mut self, item: &str, kept: &[String]) -> bool {
        if self.0.is_none() && kept.len() >= Self::SCAN_LIMIT {
            self.0 = Some(kept.iter().cloned().collect());
        }
        match &mut self.0 {
            Some(set) => set.insert(item.to_owned()),
            None => !kept.iter().any(|k| k == item),
        }
    }
}

/// The field's value unless it is absent or `null` (YAML's `files:` with nothing).
fn present<'a>(object: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    object.get(field).filter(|value| !value.is_null())
}

fn strip_dot_slash(path: &str) -> &str {
    let mut path = path;
    while let Some(rest) = path.strip_prefix("./") {
        path = rest;
    }
    path
}

/// Builds the field violations of one task, naming it by id once that is known.
struct Report<'a> {
    index: usize,
    id: Option<String>,
    errors: &'a mut Vec<PlanViolation>,
}

impl Report<'_> {
    fn missing(&mut self, field: &str, expected: &str) {
        let label = task_label(self.id.as_deref(), self.index);
        let body = missing_field_message(&label, field, expected);
        self.push(PlanCode::MissingField, body, field);
    }

    fn invalid(&mut self, field: &str, expected: &str, found: &str) {
        let label = task_label(self.id.as_deref(), self.index);
        let body = invalid_field_message(&label, field, expected, found);
        self.push(PlanCode::InvalidField, body, field);
    }

    fn push(&mut self, code: PlanCode, body: String, field: &str) {
        let task_ids = self.id.iter().cloned().collect();
        self.errors.push(
            PlanViolation::new(code, body, task_ids)
                .at_index(self.index)
                .on_field(field),
        );
    }

    /// An optional array of strings; `None` (after reporting) when it is not one.
    fn string_list(
        &mut self,
        object: &Map<String, Value>,
        field: &str,
        expected: &str,
    ) -> Option<Vec<String>> {
        match present(object, field)? {
            Value::Array(items) => {
                let mut strings = Vec::with_capacity(items.len());
                for item in items {
                    match item {
                        Value::String(text) => strings.push(text.clone()),
                        Value::Number(number) if field == "depends_on" => {
                            let found =
                                format!("an entry number {number} (quote ids in YAML: [\"1.10\"])");
                            self.invalid(field, expected, &found);
                            return None;
                        }
                        other => {
                            let found = format!("an entry {}", describe(other));
                            self.invalid(field, expected, &found);
                            return None;
                        }
                    }
                }
                Some(strings)
            }
            other => {
                self.invalid(field, expected, &describe(other));
                None
            }
        }
    }
}
