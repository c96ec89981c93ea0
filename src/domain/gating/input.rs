//! Reading a task list into typed tasks plus shape errors (gate 0) in one pass.
//!
//! One serde visitor serves both a `serde_json::Value` and JSON text. On text it
//! builds tasks directly, never an intermediate `Value` (which would cost several
//! times the input size), and it never fails on a wrong type: every surprise becomes
//! data for a violation. Only malformed JSON is an error. Nesting depth stays bounded
//! by serde_json's recursion limit, which is left on.
//!
//! Long on purpose: the visitor must name every field it meets to
//! report shape errors with their JSON pointer; split, it would need a shared state type.

use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::text::{Found, describe_bad_id, id_problem, quote};
use super::{Code, Task, Violation};
use crate::domain::text::{invalid_field_message, missing_field_message, task_label};

/// A task list read from JSON, shape problems included; validate it with
/// [`super::TaskListSource::Parsed`].
///
/// Implements `Deserialize`, so it can be a field of a larger document (a request
/// body, the CLI's `{"tasks": [...], "existing_files": [...]}`) and be read in the
/// same streaming pass. Deserializing only fails on malformed JSON.
#[derive(Debug)]
pub struct ParsedTaskList(List);

#[derive(Debug)]
enum List {
    Tasks(Vec<RawTask>),
    Empty,
    OtherValue(Found),
    NonObjectEntry { index: usize, found: Found },
}

/// Which fields of a task are usable by the gates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct UsableFields {
    pub id: bool,
    pub persona: bool,
    pub group: bool,
    pub depends_on: bool,
    pub reads: bool,
    pub writes: bool,
    pub description: bool,
}

impl UsableFields {
    pub(crate) fn all(&self) -> bool {
        self.id
            && self.persona
            && self.group
            && self.depends_on
            && self.reads
            && self.writes
            && self.description
    }
}

/// A task as read, before the cross-task gates.
#[derive(Debug)]
pub(crate) struct RawTask {
    pub index: usize,
    pub task: Task,
    pub usable: UsableFields,
    /// `reviews` was present but not a usable id: what was found (gate 6).
    pub invalid_reviews: Option<String>,
    /// Gate-0 errors of this task alone, in field order.
    pub shape_errors: Vec<Violation>,
}

impl ParsedTaskList {
    pub(crate) fn from_value(value: &Value) -> Result<Self, SynthesisError> {
        // Reading a `Value` cannot hit malformed JSON; the error arm is defensive.
        ParsedTaskList::deserialize(value).map_err(|error| not_json(&error.to_string()))
    }

    pub(crate) fn into_tasks(self) -> Result<Vec<RawTask>, SynthesisError> {
        match self.0 {
            List::Tasks(tasks) => Ok(tasks),
            List::Empty => Err(not_a_task_list("empty array")),
            List::OtherValue(found) => Err(not_a_task_list(found.json_type())),
            List::NonObjectEntry { index, found } => Err(SynthesisError {
                message: format!(
                    "synthesis task list contains a non-object entry (index {index}: got {})",
                    found.described()
                ),
                index: Some(index),
            }),
        }
    }

    /// Number of entries read (0 unless the input was a list of objects).
    pub fn len(&self) -> usize {
        match &self.0 {
            List::Tasks(tasks) => tasks.len(),
            _ => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A synthesis failure (§2): nothing usable came out. Kept small (not a whole
/// `Violation`) because it travels in `Result`s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SynthesisError {
    pub message: String,
    /// The entry at fault, for a non-object entry.
    pub index: Option<usize>,
}

impl SynthesisError {
    fn new(message: String) -> Self {
        Self {
            message,
            index: None,
        }
    }

    pub(crate) fn into_violation(self) -> Violation {
        let violation = Violation::new(Code::SynthesisFailure, self.message, Vec::new());
        match self.index {
            Some(index) => violation.at_index(index),
            None => violation,
        }
    }
}

pub(crate) fn empty_output() -> SynthesisError {
    SynthesisError::new("synthesis produced empty output".to_owned())
}

pub(crate) fn not_json(detail: &str) -> SynthesisError {
    SynthesisError::new(format!("synthesis output is not valid JSON: {detail}"))
}

fn not_a_task_list(json_type: &str) -> SynthesisError {
    SynthesisError::new(format!(
        "synthesis output is not a non-empty task list (got {json_type})"
    ))
}

/// Parses JSON text that should hold the task array. `first_line` is the line of the
/// enclosing document where `text` starts, so error positions point into the
/// planner's whole output; `context` is put before the detail.
pub(crate) fn parse_json_text(
    text: &str,
    first_line: usize,
    context: Option<&str>,
) -> Result<ParsedTaskList, SynthesisError> {
    if text.trim().is_empty() {
        return Err(empty_output());
    }
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let parsed = ParsedTaskList::deserialize(&mut deserializer).and_then(|parsed| {
        deserializer.end()?; // reject trailing characters
        Ok(parsed)
    });
    parsed.map_err(|error| {
        let detail = json_error_detail(&error, first_line);
        match context {
            Some(context) => not_json(&format!("{context}: {detail}")),
            None => not_json(&detail),
        }
    })
}

/// serde_json's message with its line moved from `text`'s numbering to the whole
/// document's.
fn json_error_detail(error: &serde_json::Error, first_line: usize) -> String {
    let full = error.to_string();
    if error.line() == 0 {
        return full;
    }
    let position = format!(" at line {} column {}", error.line(), error.column());
    let what = full.strip_suffix(&position).unwrap_or(&full);
    let line = error.line().saturating_add(first_line.saturating_sub(1));
    format!("{what} at line {line} column {}", error.column())
}

impl<'de> Deserialize<'de> for ParsedTaskList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let list = match ParsedSeed(Expect::TaskList).deserialize(deserializer)? {
            Parsed::TaskList(list) => list,
            other => List::OtherValue(other.into_found()),
        };
        Ok(ParsedTaskList(list))
    }
}

/// What the visitor is reading; decides what arrays and objects become.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// A string or scalar; arrays and objects are skipped and only their kind kept.
    Scalar,
    /// An array of strings; `ids` also applies the id rules to each.
    StringList {
        ids: bool,
    },
    TaskList,
}

enum Parsed {
    Text(String),
    StringList(StringList),
    TaskList(List),
    Other(Found),
}

impl Parsed {
    /// What was found, for a value that is not what the field needs.
    fn into_found(self) -> Found {
        match self {
            Parsed::Text(text) => Found::string(&text),
            Parsed::StringList(_) => Found::Array,
            Parsed::TaskList(List::OtherValue(found)) => found,
            Parsed::TaskList(_) => Found::Array,
            Parsed::Other(found) => found,
        }
    }
}

struct StringList {
    items: Vec<String>,
    /// Position and description of the first unusable element.
    first_bad: Option<(usize, String)>,
    bad_count: usize,
}

struct ParsedSeed(Expect);

impl<'de> DeserializeSeed<'de> for ParsedSeed {
    type Value = Parsed;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Parsed, D::Error> {
        deserializer.deserialize_any(ParsedVisitor(self.0))
    }
}

struct ParsedVisitor(Expect);

impl<'de> Visitor<'de> for ParsedVisitor {
    type Value = Parsed;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Parsed, E> {
        Ok(Parsed::Other(Found::Bool(value)))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Parsed, E> {
        Ok(Parsed::Other(Found::Integer(value.into())))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Parsed, E> {
        Ok(Parsed::Other(Found::Integer(value.into())))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Parsed, E> {
        Ok(Parsed::Other(Found::Float(value)))
    }

    fn visit_str<E>(self, value: &str) -> Result<Parsed, E> {
        Ok(Parsed::Text(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Parsed, E> {
        Ok(Parsed::Text(value))
    }

    fn visit_unit<E>(self) -> Result<Parsed, E> {
        Ok(Parsed::Other(Found::Null))
    }

    fn visit_none<E>(self) -> Result<Parsed, E> {
        Ok(Parsed::Other(Found::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Parsed, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Parsed, A::Error> {
        match self.0 {
            Expect::StringList { ids } => read_string_list(seq, ids).map(Parsed::StringList),
            Expect::TaskList => read_task_list(seq).map(Parsed::TaskList),
            Expect::Scalar => {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Parsed::Other(Found::Array))
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Parsed::Other(Found::Object))
    }
}

/// One entry of the task list: an object is read as a task and pushed straight onto
/// `tasks` (a boxed task per entry, moved twice, was a measurable share of a
/// validate request); anything else is what was found, for the synthesis failure.
struct EntrySeed<'t> {
    index: usize,
    /// `None` once a non-object entry was seen: the rest is only checked as JSON.
    tasks: Option<&'t mut Vec<RawTask>>,
}

impl<'de> DeserializeSeed<'de> for EntrySeed<'_> {
    type Value = Option<Found>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// Non-objects are read as [`Expect::Scalar`] values would be.
impl<'de> Visitor<'de> for EntrySeed<'_> {
    type Value = Option<Found>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Self::Value, E> {
        Ok(Some(Found::Bool(value)))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Self::Value, E> {
        Ok(Some(Found::Integer(value.into())))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Self::Value, E> {
        Ok(Some(Found::Integer(value.into())))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Self::Value, E> {
        Ok(Some(Found::Float(value)))
    }

    fn visit_str<E>(self, value: &str) -> Result<Self::Value, E> {
        Ok(Some(Found::string(value)))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Some(Found::Null))
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Some(Found::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Some(Found::Array))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let task = read_task(map, self.index)?;
        if let Some(tasks) = self.tasks {
            tasks.push(task);
        }
        Ok(None)
    }
}

/// Room for a request-sized list from the start: serde_json gives no size hint, and
/// growing from 4 moved each task up to four times (measured in `bench/README.md`).
const TASKS_RESERVED: usize = 64;

fn read_task_list<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<List, A::Error> {
    let mut tasks = Vec::with_capacity(seq.size_hint().unwrap_or(TASKS_RESERVED));
    let mut first_non_object = None;
    let mut index = 0;
    loop {
        // After a non-object entry the list is a synthesis failure: keep reading
        // (the rest must still be valid JSON) but stop keeping tasks.
        let keep = first_non_object.is_none().then_some(&mut tasks);
        let Some(found) = seq.next_element_seed(EntrySeed { index, tasks: keep })? else {
            break;
        };
        if let (Some(found), None) = (found, &first_non_object) {
            first_non_object = Some((index, found));
            tasks = Vec::new();
        }
        index += 1;
    }
    Ok(match first_non_object {
        Some((index, found)) => List::NonObjectEntry { index, found },
        None if index == 0 => List::Empty,
        None => List::Tasks(tasks),
    })
}

fn read_string_list<'de, A: SeqAccess<'de>>(mut seq: A, ids: bool) -> Result<StringList, A::Error> {
    // Capped: a hostile size hint must not reserve gigabytes.
    let mut list = StringList {
        items: Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64)),
        first_bad: None,
        bad_count: 0,
    };
    let mut position = 0;
    while let Some(element) = seq.next_element_seed(ParsedSeed(Expect::Scalar))? {
        let problem = match element {
            Parsed::Text(text) => match id_problem(&text).filter(|_| ids) {
                None => {
                    list.items.push(text);
                    None
                }
                Some(problem) => Some(describe_bad_id(&text, problem)),
            },
            other => Some(other.into_found().described()),
        };
        if let Some(problem) = problem {
            list.bad_count += 1;
            list.first_bad.get_or_insert((position, problem));
        }
        position += 1;
    }
    Ok(list)
}

/// Keys of a task object; known names are matched without allocating.
enum TaskKey {
    TaskId,
    AssignedPersona,
    ParallelGroup,
    DependsOn,
    Reads,
    Writes,
    Description,
    Reviews,
    Unknown(String),
}

impl TaskKey {
    fn known(name: &str) -> Option<TaskKey> {
        Some(match name {
            "task_id" => TaskKey::TaskId,
            "assigned_persona" => TaskKey::AssignedPersona,
            "parallel_group" => TaskKey::ParallelGroup,
            "depends_on" => TaskKey::DependsOn,
            "reads" => TaskKey::Reads,
            "writes" => TaskKey::Writes,
            "description" => TaskKey::Description,
            "reviews" => TaskKey::Reviews,
            _ => return None,
        })
    }
}

impl<'de> Deserialize<'de> for TaskKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = TaskKey;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a field name")
            }

            fn visit_str<E>(self, name: &str) -> Result<TaskKey, E> {
                Ok(TaskKey::known(name).unwrap_or_else(|| TaskKey::Unknown(name.to_owned())))
            }

            fn visit_string<E>(self, name: String) -> Result<TaskKey, E> {
                Ok(TaskKey::known(&name).unwrap_or(TaskKey::Unknown(name)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

#[derive(Default)]
struct TaskFields {
    task_id: Option<Parsed>,
    assigned_persona: Option<Parsed>,
    parallel_group: Option<Parsed>,
    depends_on: Option<Parsed>,
    reads: Option<Parsed>,
    writes: Option<Parsed>,
    description: Option<Parsed>,
    reviews: Option<Parsed>,
    extra: Map<String, Value>,
}

fn read_task<'de, A: MapAccess<'de>>(mut map: A, index: usize) -> Result<RawTask, A::Error> {
    let mut fields = TaskFields::default();
    let scalar = || ParsedSeed(Expect::Scalar);
    // A repeated key keeps its last value, as serde_json's own `Value` does.
    while let Some(key) = map.next_key::<TaskKey>()? {
        match key {
            TaskKey::TaskId => fields.task_id = Some(map.next_value_seed(scalar())?),
            TaskKey::AssignedPersona => {
                fields.assigned_persona = Some(map.next_value_seed(scalar())?)
            }
            TaskKey::ParallelGroup => fields.parallel_group = Some(map.next_value_seed(scalar())?),
            TaskKey::DependsOn => {
                let seed = ParsedSeed(Expect::StringList { ids: true });
                fields.depends_on = Some(map.next_value_seed(seed)?);
            }
            TaskKey::Reads => {
                let seed = ParsedSeed(Expect::StringList { ids: false });
                fields.reads = Some(map.next_value_seed(seed)?);
            }
            TaskKey::Writes => {
                let seed = ParsedSeed(Expect::StringList { ids: false });
                fields.writes = Some(map.next_value_seed(seed)?);
            }
            TaskKey::Description => fields.description = Some(map.next_value_seed(scalar())?),
            TaskKey::Reviews => fields.reviews = Some(map.next_value_seed(scalar())?),
            TaskKey::Unknown(name) => {
                let value: Value = map.next_value()?;
                fields.extra.insert(name, value);
            }
        }
    }
    Ok(fields.into_raw_task(index))
}

const ID_EXPECTED: &str = "a non-empty string of at most 256 bytes without control characters";
const PERSONA_EXPECTED: &str = "a non-empty string";
const DESCRIPTION_EXPECTED: &str = "a string (may be empty)";
const DEPENDS_ON_EXPECTED: &str = "an array of task_id strings";
const PATHS_EXPECTED: &str = "an array of file path strings";

/// Builds gate-0 errors for one task; they name the task by index and, once known
/// to be usable, by id. Names are only formatted when there is an error.
struct ShapeReport<'a> {
    index: usize,
    id: Option<&'a str>,
    errors: Vec<Violation>,
}

impl ShapeReport<'_> {
    /// `'t-1' (index 0)`, or `at index 0` without a usable id.
    fn label(&self) -> String {
        task_label(self.id, self.index)
    }

    /// `'t-1'`, or `at index 0`: the `{id!r}` of the spec's parallel_group messages.
    fn short_label(&self) -> String {
        match self.id {
            Some(id) => quote(id),
            None => format!("at index {}", self.index),
        }
    }

    fn missing(&mut self, field: &str, expected: &str) {
        let body = missing_field_message(&self.label(), field, expected);
        self.push(Code::MissingField, body, field);
    }

    fn invalid(&mut self, field: &str, expected: &str, found: &str) {
        let body = invalid_field_message(&self.label(), field, expected, found);
        self.push(Code::InvalidField, body, field);
    }

    fn push(&mut self, code: Code, body: String, field: &str) {
        let task_ids = self.id.map(str::to_owned).into_iter().collect();
        let violation = Violation::new(code, body, task_ids)
            .at_index(self.index)
            .on_field(field);
        self.errors.push(violation);
    }

    /// `assigned_persona`: a required non-empty string.
    fn persona(&mut self, value: Option<Parsed>) -> Option<String> {
        const FIELD: &str = "assigned_persona";
        match value {
            None => self.missing(FIELD, PERSONA_EXPECTED),
            Some(Parsed::Text(text)) if !text.is_empty() => return Some(text),
            Some(Parsed::Text(_)) => self.invalid(FIELD, PERSONA_EXPECTED, "an empty string"),
            Some(other) => self.invalid(FIELD, PERSONA_EXPECTED, &other.into_found().described()),
        }
        None
    }

    /// An optional array-of-strings field; absent means empty.
    fn string_list(
        &mut self,
        value: Option<Parsed>,
        field: &str,
        expected: &str,
    ) -> Option<Vec<String>> {
        match value {
            None => Some(Vec::new()),
            Some(Parsed::StringList(list)) => match list.first_bad {
                None => Some(list.items),
                Some((position, found)) => {
                    let more = match list.bad_count {
                        0 | 1 => String::new(),
                        count => format!(" (and {} more invalid entries)", count - 1),
                    };
                    let found = format!("{found} at position {position}{more}");
                    self.invalid(field, expected, &found);
                    None
                }
            },
            Some(other) => {
                self.invalid(field, expected, &other.into_found().described());
                None
            }
        }
    }
}

impl TaskFields {
    fn into_raw_task(self, index: usize) -> RawTask {
        let mut task_id_errors = ShapeReport {
            index,
            id: None,
            errors: Vec::new(),
        };
        let task_id = match self.task_id {
            None => {
                task_id_errors.missing("task_id", ID_EXPECTED);
                None
            }
            Some(Parsed::Text(id)) => match id_problem(&id) {
                None => Some(id),
                Some(problem) => {
                    let found = describe_bad_id(&id, problem);
                    task_id_errors.invalid("task_id", ID_EXPECTED, &found);
                    None
                }
            },
            Some(other) => {
                let found = other.into_found().described();
                task_id_errors.invalid("task_id", ID_EXPECTED, &found);
                None
            }
        };
        // Messages about the other fields name the task by id when it has one.
        let mut report = ShapeReport {
            index,
            id: task_id.as_deref(),
            errors: task_id_errors.errors,
        };
        let mut usable = UsableFields {
            id: task_id.is_some(),
            ..UsableFields::default()
        };

        let assigned_persona = report.persona(self.assigned_persona);
        usable.persona = assigned_persona.is_some();

        let parallel_group = read_parallel_group(self.parallel_group, &mut report);
        usable.group = parallel_group.is_some();

        let depends_on = report.string_list(self.depends_on, "depends_on", DEPENDS_ON_EXPECTED);
        usable.depends_on = depends_on.is_some();
        let reads = report.string_list(self.reads, "reads", PATHS_EXPECTED);
        usable.reads = reads.is_some();
        let writes = report.string_list(self.writes, "writes", PATHS_EXPECTED);
        usable.writes = writes.is_some();

        let description = match self.description {
            None => {
                report.missing("description", DESCRIPTION_EXPECTED);
                None
            }
            Some(Parsed::Text(text)) => Some(text),
            Some(other) => {
                let found = other.into_found().described();
                report.invalid("description", DESCRIPTION_EXPECTED, &found);
                None
            }
        };
        usable.description = description.is_some();

        // A bad `reviews` is a gate-6 error (`invalid_reviews`), not a shape error.
        let (reviews, invalid_reviews) = match self.reviews {
            None | Some(Parsed::Other(Found::Null)) => (None, None),
            Some(Parsed::Text(reviewed)) => match id_problem(&reviewed) {
                None => (Some(reviewed), None),
                Some(problem) => (None, Some(describe_bad_id(&reviewed, problem))),
            },
            Some(other) => (None, Some(other.into_found().described())),
        };

        let shape_errors = report.errors;
        RawTask {
            index,
            task: Task {
                task_id: task_id.unwrap_or_default(),
                assigned_persona: assigned_persona.unwrap_or_default(),
                parallel_group: parallel_group.unwrap_or_default(),
                depends_on: depends_on.unwrap_or_default(),
                reads: reads.unwrap_or_default(),
                writes: writes.unwrap_or_default(),
                description: description.unwrap_or_default(),
                reviews,
                extra: self.extra,
            },
            usable,
            invalid_reviews,
            shape_errors,
        }
    }
}

/// `parallel_group`: an integer >= 1 (never null, a bool, a float — `2.0` included —
/// or a string). Errors use the spec's wording verbatim.
fn read_parallel_group(value: Option<Parsed>, report: &mut ShapeReport<'_>) -> Option<i64> {
    const RULE: &str = "every task must declare an integer wave (>= 1)";
    let body = match value {
        Some(Parsed::Other(Found::Integer(group))) if group >= 1 => match i64::try_from(group) {
            Ok(group) => return Some(group),
            Err(_) => format!(
                "task {} parallel_group must be an int >= 1, got {group}",
                report.short_label()
            ),
        },
        None => format!(
            "task {} has no parallel_group; {RULE}",
            report.short_label()
        ),
        Some(Parsed::Other(Found::Null)) => {
            format!(
                "task {} has null parallel_group; {RULE}",
                report.short_label()
            )
        }
        Some(other) => format!(
            "task {} parallel_group must be an int >= 1, got {}",
            report.short_label(),
            other.into_found().value()
        ),
    };
    report.push(Code::InvalidParallelGroup, body, "parallel_group");
    None
}
