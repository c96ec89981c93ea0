//! The L0 answer format (docs/spec/refine.md §3) and its validation.
//!
//! An answer is `key = value` lines. A key counts only at the start of a line
//! (after indentation), so prose that merely mentions `changes` is ignored; the text
//! around the keys — prose, code fences — is skipped. An array value is read as one
//! JSON value starting at its `[` and may span lines; scanning resumes after it, so
//! key-like text inside a JSON string is never taken for a key. Repeated keys: the
//! last occurrence wins, whether it is valid or not.

use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::input::{is_id_byte, json_type};

/// One `changes` entry: set an editable field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Change {
    pub field: String,
    pub new_value: String,
}

/// One `dependency_corrections` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct DependencyCorrection {
    pub missing_dep: String,
    pub reason: String,
}

/// One `wp_proposal_adjustments` entry. Only `remove` is acted on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct WpAdjustment {
    pub wp_id_suffix: String,
    pub action: String,
    pub reason: String,
}

/// A structurally valid L0 answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct L0Answer {
    pub assignment_id: String,
    pub changes: Vec<Change>,
    pub dependency_corrections: Vec<DependencyCorrection>,
    pub wp_proposal_adjustments: Vec<WpAdjustment>,
}

/// Why an answer is not valid; its text goes into the per-L0 record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("assignment_id is missing")]
    MissingAssignmentId,
    #[error("{key} is missing")]
    MissingKey { key: &'static str },
    #[error("{key} is not a JSON array: {detail}")]
    NotAnArray { key: &'static str, detail: String },
    #[error("{key}[{index}]: {detail}")]
    BadEntry {
        key: &'static str,
        index: usize,
        detail: String,
    },
}

const ARRAY_KEYS: [&str; 3] = [
    "changes",
    "dependency_corrections",
    "wp_proposal_adjustments",
];

/// What the scanner found, before validation. `assignment_id` is kept even when the
/// arrays are broken: a mismatch is reported as such first (seed Step 4).
#[derive(Debug, Default)]
pub(crate) struct RawAnswer {
    pub assignment_id: Option<String>,
    /// Per key of [`ARRAY_KEYS`]: the last occurrence, parsed or the reason it failed.
    arrays: [Option<Result<Vec<Value>, String>>; 3],
}

/// Parses and validates an L0 answer.
pub fn parse_l0_answer(text: &str) -> Result<L0Answer, AnswerError> {
    scan(text).validate()
}

pub(crate) fn scan(text: &str) -> RawAnswer {
    let mut raw = RawAnswer::default();
    let mut pos = 0;
    while pos < text.len() {
        let line_end = text[pos..].find('\n').map_or(text.len(), |i| pos + i);
        let line = &text[pos..line_end];
        let indent = line.len() - line.trim_start().len();
        let next = match key_at(&line[indent..]) {
            Some((Key::AssignmentId, value_offset)) => {
                raw.assignment_id = read_id(&line[indent + value_offset..]);
                line_end + 1
            }
            Some((Key::Array(k), value_offset)) => {
                let start = pos + indent + value_offset;
                let (result, consumed) = read_array(&text[start..]);
                raw.arrays[k] = Some(result);
                // Resume on the line after the value, never inside it.
                let end = start + consumed;
                text[end..].find('\n').map_or(text.len(), |i| end + i + 1)
            }
            None => line_end + 1,
        };
        pos = next;
    }
    raw
}

enum Key {
    AssignmentId,
    Array(usize),
}

/// Recognises `key =` at the start of `line`; returns the key and the value offset.
fn key_at(line: &str) -> Option<(Key, usize)> {
    let keys = std::iter::once(("assignment_id", Key::AssignmentId)).chain(
        ARRAY_KEYS
            .iter()
            .enumerate()
            .map(|(i, k)| (*k, Key::Array(i))),
    );
    for (name, key) in keys {
        if let Some(rest) = line.strip_prefix(name) {
            let after_ws = rest.trim_start_matches([' ', '\t']);
            if let Some(value) = after_ws.strip_prefix('=') {
                return Some((key, line.len() - value.len()));
            }
        }
    }
    None
}

/// The id is the run of id characters after optional quotes or backticks, so
/// `P1-A2`, `"P1-A2"` and ``P1-A2``` ``` all read as `P1-A2`.
fn read_id(value: &str) -> Option<String> {
    let value = value.trim_start().trim_start_matches(['"', '\'', '`']);
    let end = value
        .bytes()
        .position(|b| !is_id_byte(b))
        .unwrap_or(value.len());
    (end > 0).then(|| value[..end].to_owned())
}

/// Reads one JSON value from the start of `text` (leading whitespace, newlines
/// included, allowed). Returns the result and how many bytes it used.
fn read_array(text: &str) -> (Result<Vec<Value>, String>, usize) {
    let trimmed = text.trim_start();
    let skipped = text.len() - trimmed.len();
    if !trimmed.starts_with('[') {
        let shown: String = trimmed
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(40)
            .collect();
        return (Err(format!("expected '[', found {shown:?}")), 0);
    }
    let mut stream = serde_json::Deserializer::from_str(trimmed).into_iter::<Value>();
    match stream.next() {
        Some(Ok(Value::Array(items))) => (Ok(items), skipped + stream.byte_offset()),
        Some(Ok(other)) => (
            Err(format!("got {}", json_type(&other))),
            skipped + stream.byte_offset(),
        ),
        Some(Err(e)) => (Err(e.to_string()), 0),
        None => (Err("no value".into()), 0),
    }
}

impl RawAnswer {
    pub(crate) fn validate(self) -> Result<L0Answer, AnswerError> {
        let assignment_id = self.assignment_id.ok_or(AnswerError::MissingAssignmentId)?;
        let [changes, deps, adjustments] = self.arrays;
        let changes = entries(ARRAY_KEYS[0], changes, |e| {
            Ok(Change {
                field: e.text("field")?,
                new_value: e.text("new_value")?,
            })
        })?;
        let dependency_corrections = entries(ARRAY_KEYS[1], deps, |e| {
            Ok(DependencyCorrection {
                missing_dep: e.text("missing_dep")?,
                reason: e.optional_text("reason")?,
            })
        })?;
        let wp_proposal_adjustments = entries(ARRAY_KEYS[2], adjustments, |e| {
            Ok(WpAdjustment {
                wp_id_suffix: e.text("wp_id_suffix")?,
                action: e.text("action")?,
                reason: e.optional_text("reason")?,
            })
        })?;
        Ok(L0Answer {
            assignment_id,
            changes,
            dependency_corrections,
            wp_proposal_adjustments,
        })
    }
}

struct Entry<'a>(&'a Map<String, Value>);

impl Entry<'_> {
    fn text(&self, field: &str) -> Result<String, String> {
        match self.0.get(field) {
            Some(Value::String(s)) => Ok(s.clone()),
            None => Err(format!("{field} is missing")),
            Some(other) => Err(format!(
                "{field}: expected a string, got {}",
                json_type(other)
            )),
        }
    }

    fn optional_text(&self, field: &str) -> Result<String, String> {
        match self.0.get(field) {
            None | Some(Value::Null) => Ok(String::new()),
            _ => self.text(field),
        }
    }
}

/// The entries of the array under `key` (`slot`: its last occurrence, parsed or
/// the reason it failed), each read by `read`.
fn entries<T>(
    key: &'static str,
    slot: Option<Result<Vec<Value>, String>>,
    read: impl Fn(&Entry<'_>) -> Result<T, String>,
) -> Result<Vec<T>, AnswerError> {
    let items = match slot {
        None => return Err(AnswerError::MissingKey { key }),
        Some(Err(detail)) => return Err(AnswerError::NotAnArray { key, detail }),
        Some(Ok(items)) => items,
    };
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let object = item.as_object().ok_or_else(|| AnswerError::BadEntry {
                key,
                index,
                detail: format!("expected an object, got {}", json_type(item)),
            })?;
            read(&Entry(object)).map_err(|detail| AnswerError::BadEntry { key, index, detail })
        })
        .collect()
}

/// Writes an answer in the L0 text format (one array per line).
pub fn format_l0_answer(answer: &L0Answer) -> String {
    let line = |v: Result<String, serde_json::Error>| v.unwrap_or_else(|_| "[]".into());
    format!(
        "assignment_id = {}\nchanges = {}\ndependency_corrections = {}\nwp_proposal_adjustments = {}\n",
        answer.assignment_id,
        line(serde_json::to_string(&answer.changes)),
        line(serde_json::to_string(&answer.dependency_corrections)),
        line(serde_json::to_string(&answer.wp_proposal_adjustments)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const EXAMPLE: &str = include_str!("../../../examples/l0_answer_example.txt");

    #[test]
    fn parses_the_example_answer() {
        let answer = parse_l0_answer(EXAMPLE).unwrap();
        assert_eq!(answer.assignment_id, "P2-A2");
        assert_eq!(answer.changes[0].field, "dependency_notes");
        assert_eq!(answer.dependency_corrections[0].missing_dep, "P2-A1-WP1");
        assert!(answer.wp_proposal_adjustments.is_empty());
    }

    #[test]
    fn accepts_key_value_without_spaces_and_empty_arrays() {
        let a = parse_l0_answer(
            "assignment_id=P1-A2\nchanges=[]\ndependency_corrections=[]\nwp_proposal_adjustments=[]",
        )
        .unwrap();
        assert_eq!(a.assignment_id, "P1-A2");
    }

    #[test]
    fn last_occurrence_wins_even_when_invalid() {
        let text = "assignment_id = P1-A1\nchanges = []\ndependency_corrections = []\n\
                    wp_proposal_adjustments = []\nassignment_id = P1-A2\n";
        assert_eq!(parse_l0_answer(text).unwrap().assignment_id, "P1-A2");
        let broken = "assignment_id = P1-A1\nchanges = []\ndependency_corrections = []\n\
                      wp_proposal_adjustments = []\nchanges = not an array\n";
        assert!(matches!(
            parse_l0_answer(broken),
            Err(AnswerError::NotAnArray { key: "changes", .. })
        ));
    }

    #[test]
    fn reports_missing_and_malformed_parts() {
        assert_eq!(
            parse_l0_answer("changes = []"),
            Err(AnswerError::MissingAssignmentId)
        );
        assert_eq!(
            parse_l0_answer("assignment_id = X\nchanges = []\ndependency_corrections = []"),
            Err(AnswerError::MissingKey {
                key: "wp_proposal_adjustments"
            })
        );
        let err = parse_l0_answer(
            "assignment_id = X\nchanges = {}\ndependency_corrections = []\nwp_proposal_adjustments = []",
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with("changes is not a JSON array"),
            "{err}"
        );
        let err = parse_l0_answer(
            "assignment_id = X\nchanges = [\n {\"field\": 1}\ndependency_corrections = []\nwp_proposal_adjustments = []",
        )
        .unwrap_err();
        assert!(
            matches!(err, AnswerError::NotAnArray { key: "changes", .. }),
            "{err}"
        );
        let err = parse_l0_answer(
            "assignment_id = X\nchanges = [{\"field\": \"goal\"}]\ndependency_corrections = []\nwp_proposal_adjustments = []",
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "changes[0]: new_value is missing");
    }

    #[test]
    fn keys_inside_json_strings_and_mid_line_prose_are_ignored() {
        let text = "The key assignment_id = WRONG is mid-line.\nassignment_id = P1-A1\n\
                    changes = [{\"field\": \"goal\", \"new_value\": \"x\\nassignment_id = EVIL\"}]\n\
                    dependency_corrections = [\n]\nwp_proposal_adjustments = [\n  ]";
        let a = parse_l0_answer(text).unwrap();
        assert_eq!(a.assignment_id, "P1-A1");
        assert_eq!(a.changes[0].new_value, "x\nassignment_id = EVIL");
    }

    #[test]
    fn a_key_prefix_is_not_the_key() {
        let text = "assignment_id = A\nchanges_made = oops\nchanges = []\n\
                    dependency_corrections = []\nwp_proposal_adjustments = []";
        assert!(parse_l0_answer(text).is_ok());
    }

    #[test]
    fn format_round_trips() {
        let a = parse_l0_answer(EXAMPLE).unwrap();
        assert_eq!(parse_l0_answer(&format_l0_answer(&a)).unwrap(), a);
    }

    fn text_strategy() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9 ,.:'\"{}-]{0,20}"
    }

    fn answer_strategy() -> impl Strategy<Value = L0Answer> {
        let change = (text_strategy(), text_strategy())
            .prop_map(|(field, new_value)| Change { field, new_value });
        let dep = (text_strategy(), text_strategy()).prop_map(|(missing_dep, reason)| {
            DependencyCorrection {
                missing_dep,
                reason,
            }
        });
        let adj = (text_strategy(), text_strategy(), text_strategy()).prop_map(
            |(wp_id_suffix, action, reason)| WpAdjustment {
                wp_id_suffix,
                action,
                reason,
            },
        );
        (
            "[A-Za-z0-9_-]{1,12}",
            prop::collection::vec(change, 0..3),
            prop::collection::vec(dep, 0..3),
            prop::collection::vec(adj, 0..3),
        )
            .prop_map(
                |(assignment_id, changes, dependency_corrections, wp_proposal_adjustments)| {
                    L0Answer {
                        assignment_id,
                        changes,
                        dependency_corrections,
                        wp_proposal_adjustments,
                    }
                },
            )
    }

    /// Renders an array with the chosen whitespace between tokens (line breaks too).
    fn render_array<T: Serialize>(items: &[T], ws: &str) -> String {
        let parts: Vec<String> = items
            .iter()
            .map(|i| serde_json::to_string(i).unwrap_or_default())
            .collect();
        format!("[{ws}{}{ws}]", parts.join(&format!(",{ws}")))
    }

    proptest! {
        #[test]
        fn any_valid_answer_parses_however_wrapped(
            answer in answer_strategy(),
            prose_before in "([A-Za-z ,.]{0,30}\n){0,3}",
            prose_after in "(\n[A-Za-z ,.]{0,30}){0,3}",
            fence in prop::sample::select(vec!["", "```\n", "```text\n"]),
            ws in prop::sample::select(vec!["", " ", "\n", "\n  ", "\r\n\t"]),
            eq in prop::sample::select(vec!["=", " = ", "\t=  ", " ="]),
            indent in prop::sample::select(vec!["", "  ", "\t"]),
        ) {
            let body = format!(
                "{indent}assignment_id{eq}{}\n{indent}changes{eq}{}\n{indent}dependency_corrections{eq}{}\n{indent}wp_proposal_adjustments{eq}{}",
                answer.assignment_id,
                render_array(&answer.changes, ws),
                render_array(&answer.dependency_corrections, ws),
                render_array(&answer.wp_proposal_adjustments, ws),
            );
            let close = if fence.is_empty() { "" } else { "\n```" };
            let text = format!("{prose_before}{fence}{body}{close}{prose_after}");
            prop_assert_eq!(parse_l0_answer(&text), Ok(answer));
        }

        #[test]
        fn never_panics_on_arbitrary_text(text in "(?s).{0,200}") {
            let _ = parse_l0_answer(&text);
        }
    }
}
