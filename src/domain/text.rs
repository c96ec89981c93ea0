//! How client-sent values are shown inside messages, shared by gating and loop plans
//! so both engines read alike.
//!
//! Messages are re-prompted to a planner one per line, so nothing shown may contain a
//! line break, and a hostile 10 MB value must not be echoed back in full.

/// Longest string shown in full; valid ids (at most
/// [`MAX_ID_BYTES`](crate::domain::ids::MAX_ID_BYTES)) always fit.
pub const MAX_SHOWN_BYTES: usize = 256;

/// Quotes like Python's `repr` of a str (`'t-3'`, `'a\x00b'`, `"it's"`), so messages
/// stay familiar to planners; strings longer than [`MAX_SHOWN_BYTES`] are cut and
/// their full length is given.
pub fn quote(text: &str) -> String {
    let mut shown_end = text.len();
    if text.len() > MAX_SHOWN_BYTES {
        shown_end = MAX_SHOWN_BYTES;
        while !text.is_char_boundary(shown_end) {
            shown_end -= 1;
        }
    }
    let shown = &text[..shown_end];
    // Python switches to double quotes when that avoids escaping.
    let delimiter = if shown.contains('\'') && !shown.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut quoted = String::with_capacity(shown_end + 2);
    quoted.push(delimiter);
    for character in shown.chars() {
        match character {
            '\\' => quoted.push_str("\\\\"),
            c if c == delimiter => {
                quoted.push('\\');
                quoted.push(c);
            }
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\t' => quoted.push_str("\\t"),
            c if is_line_breaking(c) => {
                let code = u32::from(c);
                if code <= 0xFF {
                    quoted.push_str(&format!("\\x{code:02x}"));
                } else {
                    quoted.push_str(&format!("\\u{code:04x}"));
                }
            }
            c => quoted.push(c),
        }
    }
    if shown_end < text.len() {
        quoted.push('…');
        quoted.push(delimiter);
        quoted.push_str(&format!(" ({} bytes)", text.len()));
    } else {
        quoted.push(delimiter);
    }
    quoted
}

/// Control characters and the Unicode line/paragraph separators: anything a reader
/// may treat as a line break or that a terminal interprets.
pub fn is_line_breaking(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// The `cycle` message both engines give (docs/spec/gating.md §3): the closed walk
/// ending on its first id, and how to fix it. `path` reads along `depends_on` and
/// passes through every task of its strongly connected component (`member_count`
/// tasks), repeating a task when no simple cycle covers them all.
pub fn cycle_message(path: &[String], member_count: usize) -> String {
    let Some(first) = path.first() else {
        return "dependency graph contains a cycle".to_owned();
    };
    let shown = format!("{} -> {first}", path.join(" -> "));
    if path.len() == 1 {
        format!(
            "dependency graph contains a cycle: {shown} (task {} depends_on itself); \
             remove it from its own depends_on",
            quote(first)
        )
    } else {
        let mut distinct: Vec<&String> = path.iter().collect();
        distinct.sort_unstable();
        distinct.dedup();
        let walk = if distinct.len() < path.len() {
            format!(
                "each task depends_on the next; no simple cycle covers these {} tasks, so \
                 the walk passes some twice",
                distinct.len()
            )
        } else {
            "each task depends_on the next".to_owned()
        };
        // Only a walk cut short for size leaves members out (see domain::graph).
        let missing = member_count.saturating_sub(distinct.len());
        let tangled = if missing > 0 {
            format!("; {missing} more task(s) in task_ids are on this cycle too")
        } else {
            String::new()
        };
        format!(
            "dependency graph contains a cycle: {shown} ({walk}{tangled}); remove \
             depends_on entries until no task depends on itself"
        )
    }
}

/// How a task's field errors name it: `'t-1' (index 0)`, or `at index 0` before
/// it has a usable id.
pub fn task_label(id: Option<&str>, index: usize) -> String {
    match id {
        Some(id) => format!("{} (index {index})", quote(id)),
        None => format!("at index {index}"),
    }
}

/// The `missing_field` message both engines give for the task `label` names.
pub fn missing_field_message(label: &str, field: &str, expected: &str) -> String {
    format!("task {label} is missing required field '{field}'; add it as {expected}")
}

/// The `invalid_field` message both engines give for the task `label` names.
pub fn invalid_field_message(label: &str, field: &str, expected: &str, found: &str) -> String {
    format!("task {label} has an invalid '{field}': expected {expected}, got {found}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_escapes_like_python_repr() {
        assert_eq!(quote("t-3"), "'t-3'");
        assert_eq!(quote("1.1"), "'1.1'");
        assert_eq!(quote("a\0b"), "'a\\x00b'");
        assert_eq!(quote("it's\n"), "\"it's\\n\"");
        assert_eq!(quote("it's \"x\""), "'it\\'s \"x\"'");
        assert_eq!(quote("back\\slash"), "'back\\\\slash'");
        assert_eq!(quote("\u{85}\u{2028}"), "'\\x85\\u2028'");
        assert_eq!(quote("é"), "'é'");
    }

    #[test]
    fn quote_truncates_long_text_at_a_char_boundary() {
        for (long, bytes) in [("é".repeat(500), 1000), ("é".repeat(5000), 10000)] {
            let shown = quote(&long);
            assert!(shown.len() < 300, "{}", shown.len());
            assert!(shown.ends_with(&format!("…' ({bytes} bytes)")), "{shown}");
        }
        let exact = "x".repeat(MAX_SHOWN_BYTES);
        assert_eq!(quote(&exact), format!("'{exact}'"));
    }
}
