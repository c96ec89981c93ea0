//! How values are shown in messages and in the markdown parts of `plan.md`.
//!
//! Messages are printed one a line (CLI, re-prompts), so nothing shown may contain a
//! line break, and a hostile 10 MB value must not be echoed back in full. `quote` is
//! the shared one (Python `repr` style), so both engines read alike.

use serde_json::Value;

pub(crate) use crate::domain::ids::MAX_ID_BYTES;
pub(crate) use crate::domain::text::{is_line_breaking, quote};

/// `text` with every control character or line separator replaced by a space, for
/// one-line markdown and messages (the YAML block keeps the exact text).
pub(crate) fn one_line(text: &str) -> String {
    if !text.chars().any(is_line_breaking) {
        return text.to_owned();
    }
    text.chars()
        .map(|c| if is_line_breaking(c) { ' ' } else { c })
        .collect()
}

/// Why a string is not a usable task id, if it is not.
pub(crate) fn id_problem(id: &str) -> Option<&'static str> {
    if id.is_empty() {
        Some("an empty string")
    } else if id.len() > MAX_ID_BYTES {
        Some("a string longer than 256 bytes")
    } else if id.chars().any(char::is_control) {
        Some("a string with control characters")
    } else {
        None
    }
}

/// A JSON value as `got …` shows it: `number 1.1`, `string 'x'`, `null`, `an array`.
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(flag) => format!("boolean {flag}"),
        Value::Number(number) => format!("number {number}"),
        Value::String(text) => format!("string {}", quote(text)),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_replaces_breaks() {
        assert_eq!(one_line("a\nb\u{2028}c\td"), "a b c d");
        assert_eq!(one_line("plain"), "plain");
    }

    #[test]
    fn ids_and_values() {
        assert_eq!(id_problem("1.1"), None);
        assert!(id_problem("").is_some());
        assert!(id_problem("a\u{7}").is_some());
        assert!(id_problem(&"x".repeat(257)).is_some());
        assert_eq!(describe(&serde_json::json!(1.1)), "number 1.1");
        assert_eq!(describe(&serde_json::json!([1])), "an array");
    }
}
