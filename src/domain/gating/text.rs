//! How values are shown inside violation messages.
//!
//! Messages are re-prompted to a planner one per line, so nothing shown may contain a
//! line break, and a hostile 10 MB value must not be echoed back in full.

use serde_json::Number;

pub(crate) use crate::domain::ids::MAX_ID_BYTES;
pub(crate) use crate::domain::text::quote;

/// Why a string is not a usable task id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdProblem {
    Empty,
    TooLong,
    ControlCharacters,
}

/// Checks the id rules: ids must be non-empty, at most [`MAX_ID_BYTES`] bytes and
/// free of control characters. They are echoed in re-prompts (one message a line),
/// used as keys and shown unquoted in cycle paths, so anything else would be
/// unreadable or ambiguous.
pub(crate) fn id_problem(id: &str) -> Option<IdProblem> {
    if id.is_empty() {
        Some(IdProblem::Empty)
    } else if id.len() > MAX_ID_BYTES {
        Some(IdProblem::TooLong)
    } else if id.chars().any(char::is_control) {
        Some(IdProblem::ControlCharacters)
    } else {
        None
    }
}

/// Describes an unusable id string: `an empty string`, `string 'a\x00b', which
/// contains control characters`.
pub(crate) fn describe_bad_id(id: &str, problem: IdProblem) -> String {
    match problem {
        IdProblem::Empty => "an empty string".to_owned(),
        IdProblem::TooLong => format!("string {}, longer than {MAX_ID_BYTES} bytes", quote(id)),
        IdProblem::ControlCharacters => {
            format!("string {}, which contains control characters", quote(id))
        }
    }
}

/// A JSON value that was not what a field needs, kept small: strings as a quoted,
/// truncated preview; arrays and objects only by kind.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Found {
    Null,
    Bool(bool),
    Integer(i128),
    Float(f64),
    String { shown: String },
    Array,
    Object,
}

impl Found {
    pub(crate) fn string(text: &str) -> Self {
        Found::String { shown: quote(text) }
    }

    pub(crate) fn json_type(&self) -> &'static str {
        match self {
            Found::Null => "null",
            Found::Bool(_) => "boolean",
            Found::Integer(_) | Found::Float(_) => "number",
            Found::String { .. } => "string",
            Found::Array => "array",
            Found::Object => "object",
        }
    }

    /// The value as JSON would show it (`2.0`, `true`, `'2'`), for `got {value}`.
    pub(crate) fn value(&self) -> String {
        match self {
            Found::Null => "null".to_owned(),
            Found::Bool(flag) => flag.to_string(),
            Found::Integer(number) => number.to_string(),
            // serde_json keeps the `.0` that Rust's `Display` for f64 drops.
            Found::Float(number) => Number::from_f64(*number)
                .map_or_else(|| number.to_string(), |json| json.to_string()),
            Found::String { shown } => shown.clone(),
            Found::Array => "an array".to_owned(),
            Found::Object => "an object".to_owned(),
        }
    }

    /// The type and value: `number 2.0`, `string '2'`, `boolean true`, `an array`.
    pub(crate) fn described(&self) -> String {
        match self {
            Found::Null | Found::Array | Found::Object => self.value(),
            _ => format!("{} {}", self.json_type(), self.value()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_rules() {
        assert_eq!(id_problem("t-1"), None);
        assert_eq!(id_problem(""), Some(IdProblem::Empty));
        assert_eq!(id_problem(&"x".repeat(MAX_ID_BYTES)), None);
        assert_eq!(
            id_problem(&"x".repeat(MAX_ID_BYTES + 1)),
            Some(IdProblem::TooLong)
        );
        assert_eq!(id_problem("a\0b"), Some(IdProblem::ControlCharacters));
        assert_eq!(id_problem("a\u{9f}"), Some(IdProblem::ControlCharacters));
    }

    #[test]
    fn found_values_keep_json_spelling() {
        assert_eq!(Found::Float(2.0).value(), "2.0");
        assert_eq!(Found::Float(1.5).described(), "number 1.5");
        assert_eq!(Found::Integer(-1).value(), "-1");
        assert_eq!(Found::Bool(true).described(), "boolean true");
        assert_eq!(Found::string("2").value(), "'2'");
        assert_eq!(Found::Null.described(), "null");
        assert_eq!(Found::Array.described(), "an array");
    }
}
