//! What both databases can store: every string except those holding U+0000.
//!
//! Postgres `text` and `jsonb` refuse U+0000 while SQLite keeps it, so one rule for
//! both:
//! - client input that would be stored is refused before anything is written, with
//!   a 422 naming the field ([`find_nul`] gives its JSON pointer);
//! - text plangate did not receive from the client (L0 answers and stderr) is stored
//!   with U+FFFD in place of each U+0000 ([`replace_nul`]), and the job log says so,
//!   so a stray byte from an agent never fails a job's write.
//!
//! Other strings — control characters, 4-byte UTF-8, long text — are stored and read
//! back as they were sent. Lone surrogates (`"\ud800"`) are not strings at all: the
//! JSON parser refuses them (400 `malformed_json` or the route's own parse error).

use serde_json::Value;

/// Where the first U+0000 of a JSON document is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NulAt {
    /// JSON pointer (RFC 6901) of the string, or of the object whose member name
    /// holds it; `""` is the whole document.
    pub pointer: String,
    /// The member name holds it, not the value.
    pub in_name: bool,
}

impl NulAt {
    /// `/tasks/0/description holds U+0000 (NUL), which cannot be stored; remove it`.
    pub fn message(&self) -> String {
        let place = match (self.pointer.is_empty(), self.in_name) {
            (true, false) => "the body".to_owned(),
            (true, true) => "a member name of the body".to_owned(),
            (false, false) => self.pointer.clone(),
            (false, true) => format!("a member name in {}", self.pointer),
        };
        format!(
            "{place} holds U+0000 (NUL), which cannot be stored; remove it or send it \
             escaped in your own encoding"
        )
    }
}

/// A cheap pre-check on JSON text: `false` means it holds no U+0000 (a JSON string
/// can only hold one as the escape `\u0000`; a raw NUL byte is checked too).
pub fn may_hold_nul(json: &[u8]) -> bool {
    if json.contains(&0) {
        return true;
    }
    let mut rest = json;
    while let Some(at) = rest.iter().position(|&b| b == b'\\') {
        if rest[at + 1..].starts_with(b"u0000") {
            return true;
        }
        // Skip the escaped character, so `\\u0000` (a backslash, then text) is not
        // taken for an escape.
        rest = rest.get(at + 2..).unwrap_or_default();
    }
    false
}

/// The first string (in document order) or member name holding U+0000.
///
/// Recursive: parsed documents are at most 128 levels deep (serde_json's limit).
pub fn find_nul(value: &Value) -> Option<NulAt> {
    let mut path = Vec::new();
    find_in(value, &mut path).map(|in_name| NulAt {
        pointer: path.concat(),
        in_name,
    })
}

/// `Some(in_name)` when found; `path` then holds the pointer's segments.
fn find_in(value: &Value, path: &mut Vec<String>) -> Option<bool> {
    match value {
        Value::String(text) => text.contains('\0').then_some(false),
        Value::Array(items) => items.iter().enumerate().find_map(|(index, item)| {
            path.push(format!("/{index}"));
            let found = find_in(item, path);
            if found.is_none() {
                path.pop();
            }
            found
        }),
        Value::Object(members) => {
            if members.keys().any(|name| name.contains('\0')) {
                return Some(true);
            }
            members.iter().find_map(|(name, member)| {
                path.push(format!("/{}", name.replace('~', "~0").replace('/', "~1")));
                let found = find_in(member, path);
                if found.is_none() {
                    path.pop();
                }
                found
            })
        }
        _ => None,
    }
}

/// `text` with each U+0000 — a raw one, or the JSON escape `\u0000` (so that JSON
/// parsed from it holds none either) — replaced by U+FFFD (`\ufffd`). `None` when
/// there is none.
pub fn replace_nul(text: &str) -> Option<String> {
    if !may_hold_nul(text.as_bytes()) {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut changed = false;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '\0' => {
                out.push('\u{fffd}');
                changed = true;
            }
            '\\' => {
                if text[at + 1..].starts_with("u0000") {
                    out.push_str("\\ufffd");
                    for _ in 0..5 {
                        chars.next();
                    }
                    changed = true;
                } else {
                    out.push('\\');
                    // The escaped character is copied as is (`\\` stays two).
                    if let Some((_, escaped)) = chars.next_if(|&(_, next)| next != '\0') {
                        out.push(escaped);
                    }
                }
            }
            c => out.push(c),
        }
    }
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_pre_check_sees_escapes_and_raw_bytes_only() {
        assert!(may_hold_nul(br#"{"a": "x\u0000"}"#));
        assert!(may_hold_nul(b"a\0b"));
        assert!(!may_hold_nul(br#"{"a": "x\\u0000"}"#));
        assert!(may_hold_nul(br#"{"a": "x\\\u0000"}"#));
        assert!(!may_hold_nul(br#"{"a": "\u0001 \ud800 \\"}"#));
        assert!(!may_hold_nul(b"ends with \\"));
    }

    #[test]
    fn find_nul_names_the_field_by_json_pointer() {
        let body = json!({"tasks": [{"writes": ["ok", "b\u{0}"]}], "x": "\u{0}"});
        assert_eq!(
            find_nul(&body),
            Some(NulAt {
                pointer: "/tasks/0/writes/1".into(),
                in_name: false
            })
        );
        let body = json!({"metadata": {"a/b~": {"k\u{0}": 1}}});
        let at = find_nul(&body).unwrap();
        assert_eq!(at.pointer, "/metadata/a~1b~0");
        assert!(at.in_name);
        assert!(
            at.message()
                .starts_with("a member name in /metadata/a~1b~0 holds U+0000")
        );
        assert_eq!(find_nul(&json!({"a": ["\u{1}", "𝄞"]})), None);
        assert_eq!(
            find_nul(&json!("\u{0}"))
                .unwrap()
                .message()
                .split(' ')
                .next(),
            Some("the")
        );
    }

    #[test]
    fn nested_documents_name_the_full_path() {
        let mut value = json!(["ok", "\u{0}"]);
        for _ in 0..100 {
            value = json!({"a": [value]});
        }
        assert_eq!(
            find_nul(&value).unwrap().pointer,
            format!("{}/1", "/a/0".repeat(100))
        );
    }

    #[test]
    fn replace_nul_covers_raw_and_escaped_nul() {
        assert_eq!(replace_nul("plain \\n text"), None);
        assert_eq!(replace_nul("a\0b").as_deref(), Some("a\u{fffd}b"));
        assert_eq!(
            replace_nul(r#"{"x": "a\u0000b", "y": "\\u0000"}"#).as_deref(),
            Some(r#"{"x": "a\ufffdb", "y": "\\u0000"}"#)
        );
        let parsed: Value =
            serde_json::from_str(&replace_nul(r#"["\u0000\\\u0000"]"#).unwrap()).unwrap();
        assert_eq!(parsed, json!(["\u{fffd}\\\u{fffd}"]));
        assert_eq!(replace_nul("\\\0").as_deref(), Some("\\\u{fffd}"));
    }
}
