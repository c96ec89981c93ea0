//! Finding the task list in a planner's text: the last fenced block whose info string
//! is empty or `json` (any case) wins; other languages are never parsed.
//!
//! Fences follow CommonMark: a line indented at most three spaces, then at least three
//! backticks or tildes; the info string's first word is the language (a backtick fence
//! may not have a backtick in its info string). A fence closes on a line of at least as
//! many of the same character and nothing else; an unclosed fence runs to the end of
//! the text. Inside a fence nothing opens a new one, so a ```` ```json ```` line quoted
//! inside a `python` block is ignored. CRLF line ends are accepted.

use super::input::{ParsedTaskList, SynthesisError, empty_output, parse_json_text};

/// Where the JSON to parse is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum JsonLocation<'a> {
    /// The selected fenced block; `first_line` is its first content line (1-based).
    Block { text: &'a str, first_line: usize },
    /// No fenced block at all: the whole text.
    WholeText,
    /// Fenced blocks exist but none in json; their languages, first seen first.
    OnlyOtherLanguages(Vec<String>),
}

struct OpenFence<'a> {
    marker: u8,
    marker_len: usize,
    language: &'a str,
    content_start: usize,
    first_line: usize,
}

pub(crate) fn locate_json(text: &str) -> JsonLocation<'_> {
    let mut selected = None;
    let mut other_languages: Vec<String> = Vec::new();
    let mut open: Option<OpenFence<'_>> = None;
    let mut offset = 0;

    let mut close = |fence: OpenFence<'_>, content_end: usize| {
        if fence.language.is_empty() || fence.language.eq_ignore_ascii_case("json") {
            selected = Some(JsonLocation::Block {
                text: &text[fence.content_start..content_end],
                first_line: fence.first_line,
            });
        } else if !other_languages.iter().any(|known| known == fence.language) {
            other_languages.push(fence.language.to_owned());
        }
    };

    for (line_number, raw_line) in (1..).zip(text.split_inclusive('\n')) {
        let line_start = offset;
        offset += raw_line.len();
        let line = raw_line.trim_end_matches(['\n', '\r']);
        match open.take() {
            None => {
                open = opening_fence(line).map(|(marker, marker_len, language)| OpenFence {
                    marker,
                    marker_len,
                    language,
                    content_start: offset,
                    first_line: line_number + 1,
                });
            }
            Some(fence) if is_closing_fence(line, fence.marker, fence.marker_len) => {
                close(fence, line_start);
            }
            Some(fence) => open = Some(fence),
        }
    }
    if let Some(fence) = open {
        close(fence, text.len());
    }
    match selected {
        Some(block) => block,
        None if other_languages.is_empty() => JsonLocation::WholeText,
        None => JsonLocation::OnlyOtherLanguages(other_languages),
    }
}

/// `(marker byte, marker length, language)` when `line` opens a fence.
fn opening_fence(line: &str) -> Option<(u8, usize, &str)> {
    let rest = strip_fence_indent(line)?;
    let marker = *rest.as_bytes().first()?;
    if marker != b'`' && marker != b'~' {
        return None;
    }
    let marker_len = rest.bytes().take_while(|&byte| byte == marker).count();
    if marker_len < 3 {
        return None;
    }
    let info = &rest[marker_len..];
    if marker == b'`' && info.contains('`') {
        return None; // inline code such as ```x```, not a fence
    }
    let language = info.split_whitespace().next().unwrap_or("");
    Some((marker, marker_len, language))
}

fn is_closing_fence(line: &str, marker: u8, open_len: usize) -> bool {
    let Some(rest) = strip_fence_indent(line) else {
        return false;
    };
    let run = rest.bytes().take_while(|&byte| byte == marker).count();
    run >= open_len && rest[run..].trim().is_empty()
}

/// The line without its indentation, if that is at most three spaces.
fn strip_fence_indent(line: &str) -> Option<&str> {
    let indent = line.bytes().take_while(|&byte| byte == b' ').count();
    (indent <= 3).then(|| &line[indent..])
}

/// Reads the task list out of planner output (spec §1–§2).
pub(crate) fn parse_planner_output(text: &str) -> Result<ParsedTaskList, SynthesisError> {
    if text.trim().is_empty() {
        return Err(empty_output());
    }
    match locate_json(text) {
        JsonLocation::Block { text, first_line } => parse_json_text(text, first_line, None),
        JsonLocation::WholeText => parse_json_text(text, 1, None),
        JsonLocation::OnlyOtherLanguages(languages) => {
            let context = format!(
                "no fenced json block (only {}) and the whole text is not JSON either",
                languages.join(", ")
            );
            parse_json_text(text, 1, Some(&context))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(text: &str) -> (&str, usize) {
        match locate_json(text) {
            JsonLocation::Block { text, first_line } => (text, first_line),
            other => panic!("no block: {other:?}"),
        }
    }

    #[test]
    fn which_block_is_the_json_and_its_first_line() {
        for (text, found) in [
            // The last json block wins; other languages are ignored.
            (
                "a\n```json\n[1]\n```\nb\n```JSON\n[2]\n```\n```python\n[3]\n```\n",
                ("[2]\n", 7),
            ),
            // Unlabelled blocks count; an info string may have more words.
            ("```\n[1]\n```\n", ("[1]\n", 2)),
            ("``` json title=\"x\"  \n[1]\n```", ("[1]\n", 2)),
            ("```jsonc\n[9]\n```\n```Json  \n[1]\n```", ("[1]\n", 5)),
            // Tilde fences and CRLF; a backtick line does not close a tilde fence.
            ("~~~json\r\n[1]\r\n~~~\r\n", ("[1]\r\n", 2)),
            ("~~~json\n```\n[1]\n~~~\n", ("```\n[1]\n", 2)),
            // A fence inside another language's block is content.
            (
                "```json\n[1]\n```\n````python\n```json\n[2]\n```\n````\n",
                ("[1]\n", 2),
            ),
            // A closing fence needs at least the opening's length.
            ("````json\n[1,\n```\n2]\n````\n", ("[1,\n```\n2]\n", 2)),
            // An unclosed fence runs to the end.
            ("text\n```json\n[1]", ("[1]", 3)),
        ] {
            assert_eq!(block(text), found, "{text:?}");
        }
    }

    #[test]
    fn indented_four_spaces_or_inline_backticks_are_not_fences() {
        assert_eq!(
            locate_json("    ```json\n[1]\n    ```"),
            JsonLocation::WholeText
        );
        assert_eq!(locate_json("```json [1] ```"), JsonLocation::WholeText);
        assert_eq!(block("   ```json\n[1]\n   ```"), ("[1]\n", 2));
    }

    #[test]
    fn no_fence_or_only_other_languages() {
        assert_eq!(locate_json("[1]"), JsonLocation::WholeText);
        assert_eq!(
            locate_json("```python\nx\n```\n```text\ny\n```\n```python\n```"),
            JsonLocation::OnlyOtherLanguages(vec!["python".into(), "text".into()])
        );
    }

    #[test]
    fn json_error_lines_count_from_the_top_of_the_output() {
        let text = "intro\n\n```json\n[\n  {\"task_id\": }\n]\n```\n";
        let error = parse_planner_output(text).unwrap_err();
        assert_eq!(
            error.message,
            "synthesis output is not valid JSON: expected value at line 5 column 15"
        );
    }

    #[test]
    fn only_other_languages_says_so() {
        let error = parse_planner_output("```python\nprint(1)\n```\n").unwrap_err();
        assert_eq!(
            error.message,
            "synthesis output is not valid JSON: no fenced json block (only python) and the \
             whole text is not JSON either: expected value at line 1 column 1"
        );
    }

    #[test]
    fn empty_output_and_empty_block() {
        for text in ["", "  \n\t", "```json\n\n```"] {
            let error = parse_planner_output(text).unwrap_err();
            assert_eq!(error.message, "synthesis produced empty output", "{text:?}");
        }
    }
}
