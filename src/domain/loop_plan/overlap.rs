//! Overlap with completed tracks, and reading `tracks.md`.
//!
//! The matching and `tracks.md` rules: docs/decisions.md, "Overlap with completed
//! tracks, and reading `tracks.md`".

use std::collections::HashMap;

use super::{CompletedTrack, PlanError, PlanErrorKind};

/// `SKIP — already done in {TRACK-ID}`.
pub fn skip_reason(track_id: &str) -> String {
    format!("SKIP — already done in {track_id}")
}

/// Lookup tables over all deliverables; values are track positions.
pub(crate) struct DeliverableIndex {
    paths: HashMap<String, usize>,
    names: HashMap<String, usize>,
}

const TOKEN_SEPARATORS: &[char] = &[
    '`', '"', '\'', ',', ';', '(', ')', '[', ']', '<', '>', '|', '*',
];

impl DeliverableIndex {
    pub(crate) fn new(tracks: &[CompletedTrack]) -> Self {
        let mut paths = HashMap::new();
        let mut names = HashMap::new();
        for (position, track) in tracks.iter().enumerate() {
            for deliverable in &track.deliverables {
                let whole = strip_dot_slash(deliverable.trim().trim_matches('`').trim());
                if !whole.is_empty() {
                    paths.entry(whole.to_owned()).or_insert(position);
                }
                for token in
                    deliverable.split(|c: char| c.is_whitespace() || TOKEN_SEPARATORS.contains(&c))
                {
                    let token = strip_dot_slash(token.trim_end_matches(['.', ':']));
                    if !token.is_empty() {
                        paths.entry(token.to_owned()).or_insert(position);
                    }
                }
                let name = name_key(deliverable);
                if !name.is_empty() {
                    names.entry(name).or_insert(position);
                }
            }
            if let Some(name) = track.name.as_deref().map(name_key)
                && !name.is_empty()
            {
                names.entry(name).or_insert(position);
            }
        }
        Self { paths, names }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.paths.is_empty() && self.names.is_empty()
    }

    /// The first matching track and what matched (a file, else the name).
    pub(crate) fn find<'t>(&self, files: &'t [String], name: &'t str) -> Option<(usize, &'t str)> {
        let mut best: Option<(usize, &str)> = None;
        for file in files {
            if let Some(&track) = self.paths.get(file.as_str())
                && best.is_none_or(|(current, _)| track < current)
            {
                best = Some((track, file.as_str()));
            }
        }
        let key = name_key(name);
        if !key.is_empty()
            && let Some(&track) = self.names.get(&key)
            && best.is_none_or(|(current, _)| track < current)
        {
            best = Some((track, name));
        }
        best
    }
}

fn strip_dot_slash(path: &str) -> &str {
    let mut path = path;
    while let Some(rest) = path.strip_prefix("./") {
        path = rest;
    }
    path
}

/// Trimmed, lower-cased, whitespace collapsed, surrounding backticks removed.
fn name_key(text: &str) -> String {
    let text = text.trim().trim_matches('`');
    let mut key = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !key.is_empty() {
            key.push(' ');
        }
        key.extend(word.chars().flat_map(char::to_lowercase));
    }
    key
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Column {
    Id,
    Name,
    Status,
    Completed,
    Deliverables,
    /// Prose describing the deliverables (`Summary`, `Description`).
    Summary,
}

fn column_of(header: &str) -> Option<Column> {
    let header = clean_cell(header).to_lowercase();
    let header = header.split_whitespace().collect::<Vec<_>>().join(" ");
    match header.as_str() {
        "track" | "track id" | "track-id" | "track_id" | "id" => Some(Column::Id),
        "name" | "title" | "track name" => Some(Column::Name),
        "status" | "state" => Some(Column::Status),
        "completed" | "completed at" | "completed on" | "finished" | "done" => {
            Some(Column::Completed)
        }
        "deliverables" | "deliverable" | "files" | "outputs" => Some(Column::Deliverables),
        "summary" | "description" => Some(Column::Summary),
        _ => None,
    }
}

/// Removes `*`, `_` at the ends and backticks; reads `[text](url)` as `text`.
fn clean_cell(cell: &str) -> String {
    let mut text = cell.trim();
    if let Some(rest) = text.strip_prefix('[')
        && let Some((inner, tail)) = rest.split_once("](")
        && tail.ends_with(')')
    {
        text = inner;
    }
    text.replace('`', "")
        .trim_matches(|c: char| c == '*' || c == '_' || c.is_whitespace())
        .to_owned()
}

const COMPLETED_WORDS: &[&str] = &[
    "complete",
    "completed",
    "done",
    "passed",
    "shipped",
    "merged",
    "[x]",
    "✅",
    "✔",
    "✔️",
    "✓",
];
const COMPLETED_HEADING_WORDS: &[&str] = &["complete", "done", "finished", "shipped"];

fn status_is_completed(cell: &str) -> bool {
    let cleaned = clean_cell(cell).to_lowercase();
    // `✅Done` and `✅ Done` both start with the check mark.
    let first = cleaned.split_whitespace().next().unwrap_or("");
    COMPLETED_WORDS.contains(&first)
        || ["✅", "✔", "✓", "[x]"]
            .iter()
            .any(|mark| first.starts_with(mark))
}

/// A completion cell: a date (or timestamp) says when the track was completed; a
/// completed word or mark says so too.
fn completion_is_set(cell: &str) -> bool {
    let cleaned = clean_cell(cell);
    cleaned.split_whitespace().next().is_some_and(is_date) || status_is_completed(&cleaned)
}

/// `YYYY-MM-DD` (or `/`, `.`; a `T…` time may follow) or `DD.MM.YYYY` (`-`, `/`).
fn is_date(word: &str) -> bool {
    let date = word.split(['T', 't']).next().unwrap_or(word);
    let parts: Vec<&str> = date.split(['-', '/', '.']).collect();
    let digits = |part: &str, lengths: std::ops::RangeInclusive<usize>| {
        lengths.contains(&part.len()) && part.bytes().all(|b| b.is_ascii_digit())
    };
    match parts.as_slice() {
        [year, month, day] if digits(year, 4..=4) => digits(month, 1..=2) && digits(day, 1..=2),
        [day, month, year] => digits(day, 1..=2) && digits(month, 1..=2) && digits(year, 4..=4),
        _ => false,
    }
}

/// Splits a table row into trimmed cells; `\|` is a literal pipe.
fn split_row(line: &str) -> Vec<String> {
    let line = line.trim();
    let line = line.strip_prefix('|').unwrap_or(line);
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut characters = line.chars().peekable();
    while let Some(c) = characters.next() {
        match c {
            '\\' if characters.peek() == Some(&'|') => {
                cell.push('|');
                characters.next();
            }
            '|' => cells.push(std::mem::take(&mut cell).trim().to_owned()),
            c => cell.push(c),
        }
    }
    // A row ending in `|` leaves an empty last piece, which is not a cell.
    if !cell.trim().is_empty() {
        cells.push(cell.trim().to_owned());
    }
    cells
}

fn is_delimiter_row(line: &str) -> bool {
    let cells = split_row(line);
    !cells.is_empty()
        && cells.iter().all(|cell| {
            let inner = cell.trim_start_matches(':').trim_end_matches(':');
            !inner.is_empty() && inner.chars().all(|c| c == '-')
        })
}

fn split_deliverables(cell: &str) -> Vec<String> {
    let normalized = cell
        .replace("<br />", ";")
        .replace("<br/>", ";")
        .replace("<br>", ";");
    normalized
        .split([',', ';'])
        .map(|part| part.trim().trim_matches('`').trim())
        .filter(|part| !part.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The completed tracks listed in a `tracks.md` (rules in the module documentation).
pub fn parse_tracks_md(text: &str) -> Result<Vec<CompletedTrack>, PlanError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut tracks = Vec::new();
    let mut found_table = false;
    let mut tables_without_id: Vec<usize> = Vec::new();
    let mut heading = String::new();
    let mut in_fence = false;
    let mut position = 0;
    while position < lines.len() {
        let line = lines[position];
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            position += 1;
            continue;
        }
        if in_fence {
            position += 1;
            continue;
        }
        if trimmed.starts_with('#') {
            heading = trimmed.trim_start_matches('#').trim().to_lowercase();
            position += 1;
            continue;
        }
        let is_header = line.contains('|')
            && lines
                .get(position + 1)
                .is_some_and(|next| next.contains('-') && is_delimiter_row(next));
        if !is_header {
            position += 1;
            continue;
        }
        let header_line = position + 1;
        let columns: Vec<Option<Column>> = split_row(line).iter().map(|h| column_of(h)).collect();
        let find = |wanted: Column| columns.iter().position(|column| *column == Some(wanted));
        position += 2;
        let body_start = position;
        while position < lines.len()
            && lines[position].contains('|')
            && !lines[position].trim().is_empty()
        {
            position += 1;
        }
        let Some(id_column) = find(Column::Id) else {
            tables_without_id.push(header_line);
            continue;
        };
        found_table = true;
        let status_column = find(Column::Status);
        let completed_column = find(Column::Completed);
        let summary_column = find(Column::Summary);
        let heading_says_completed = COMPLETED_HEADING_WORDS
            .iter()
            .any(|word| heading.contains(word));
        for row in &lines[body_start..position] {
            let cells = split_row(row);
            let cell = |column: Option<usize>| {
                column.and_then(|c| cells.get(c)).map_or("", String::as_str)
            };
            let completed = completed_column.is_some_and(|c| completion_is_set(cell(Some(c))))
                || match status_column {
                    Some(column) => status_is_completed(cell(Some(column))),
                    None => heading_says_completed,
                };
            let id = clean_cell(cell(Some(id_column)));
            if !completed || id.is_empty() {
                continue;
            }
            let name = clean_cell(cell(find(Column::Name)));
            tracks.push(CompletedTrack {
                id,
                name: (!name.is_empty()).then_some(name),
                deliverables: [find(Column::Deliverables), summary_column]
                    .into_iter()
                    .flat_map(|column| split_deliverables(cell(column)))
                    .collect(),
            });
        }
    }
    if !found_table && !text.trim().is_empty() {
        let line = tables_without_id.first().copied();
        let body = match line {
            Some(_) => "this table has no track id column: name one column `Track` or `ID` \
                        (columns `Status` and `Deliverables` are read when present)"
                .to_owned(),
            None => "no tracks table found: expected a markdown table whose header has a \
                     `Track` (or `Track ID`) column, and optionally `Status`, `Completed`, \
                     `Deliverables` or `Summary`"
                .to_owned(),
        };
        return Err(PlanError::new(
            PlanErrorKind::InvalidTracksMarkdown,
            line,
            body,
        ));
    }
    Ok(tracks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::assert_contains;

    /// `path` alone is found as a deliverable of the `track`-th track.
    fn assert_owns(index: &DeliverableIndex, path: &str, track: usize) {
        assert_eq!(index.find(&[path.to_owned()], "x"), Some((track, path)));
    }

    fn track(id: &str, deliverables: &[&str]) -> CompletedTrack {
        CompletedTrack {
            id: id.to_owned(),
            name: None,
            deliverables: deliverables.iter().map(|d| (*d).to_owned()).collect(),
        }
    }

    #[test]
    fn files_match_whole_deliverables_and_path_tokens() {
        let tracks = [
            track("A", &["src/tenancy/model.py"]),
            track("B", &["Tenant model in `src/auth/cache.py`.", "./lib/x.rs"]),
        ];
        let index = DeliverableIndex::new(&tracks);
        let files = |f: &[&str]| f.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_owns(&index, "src/tenancy/model.py", 0);
        assert_owns(&index, "src/auth/cache.py", 1);
        assert_owns(&index, "lib/x.rs", 1);
        // Paths are case-sensitive and must be whole tokens.
        assert_eq!(index.find(&files(&["SRC/tenancy/model.py"]), "x"), None);
        assert_eq!(index.find(&files(&["tenancy/model.py"]), "x"), None);
        // The earliest track wins whatever the file order.
        assert_eq!(
            index.find(&files(&["src/auth/cache.py", "src/tenancy/model.py"]), "x"),
            Some((0, "src/tenancy/model.py"))
        );
    }

    #[test]
    fn names_match_case_insensitively_and_whole() {
        let index = DeliverableIndex::new(&[track("A", &["  Token   Cache "])]);
        assert_eq!(index.find(&[], "token cache"), Some((0, "token cache")));
        assert_eq!(index.find(&[], "Token cache v2"), None);
        assert_eq!(index.find(&[], ""), None);
    }

    const TRACKS_MD: &str = "\
# Tracks

## Active

| Status | Track ID | Title | Deliverables |
|--------|----------|-------|--------------|
| in progress | auth-cache_20261130 | Token cache | src/auth/cache.py |

## History

| Track | Status | Name | Owner | Deliverables |
| :--- | :---: | --- | --- | --- |
| [tenancy_20261120](./tracks/tenancy_20261120/) | ✅ Complete | Tenancy | ana | `src/tenancy/model.py`, src/tenancy/api.py<br>Tenant model |
| **billing_1** | **DONE** | Billing | bo | a \\| b; c |
| | done | no id | x | y |
| old_1 | [x] |
";

    #[test]
    fn tracks_md_reads_completed_rows_only() {
        let tracks = parse_tracks_md(TRACKS_MD).unwrap();
        assert_eq!(tracks.len(), 3, "{tracks:?}");
        assert_eq!(tracks[0].id, "tenancy_20261120");
        assert_eq!(tracks[0].name.as_deref(), Some("Tenancy"));
        assert_eq!(
            tracks[0].deliverables,
            ["src/tenancy/model.py", "src/tenancy/api.py", "Tenant model"]
        );
        assert_eq!(tracks[1].id, "billing_1");
        assert_eq!(tracks[1].deliverables, ["a | b", "c"]);
        assert_eq!(tracks[2].id, "old_1");
        assert!(tracks[2].deliverables.is_empty());
    }

    #[test]
    fn tracks_md_without_status_column_uses_the_heading() {
        let text = "## Completed tracks\n\n|ID|Deliverables|\n|-|-|\n|a|x.py|\n\n\
                    ## Planned\n\n|ID|Deliverables|\n|-|-|\n|b|y.py|\n";
        let tracks = parse_tracks_md(text).unwrap();
        assert_eq!(tracks.len(), 1);
        assert_eq!(tracks[0].id, "a");
    }

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/tests/fixtures/tracks/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn completed_tracks_with_a_date_and_a_summary() {
        let tracks = parse_tracks_md(&fixture("completed_tracks.md")).unwrap();
        let ids: Vec<&str> = tracks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(
            ids,
            ["auth-jwt_20261118", "tenancy_20261110", "audit_20261101"]
        );
        assert_eq!(tracks[0].name.as_deref(), Some("JWT authentication"));
        assert_eq!(
            tracks[0].deliverables,
            [
                "Token issuing and refresh in `src/auth/jwt.py",
                "middleware in src/auth/middleware.py"
            ]
        );
        let index = DeliverableIndex::new(&tracks);
        assert_owns(&index, "src/auth/jwt.py", 0);
        assert_owns(&index, "src/tenancy/scope.py", 1);
        // A task named like a completed track overlaps it.
        assert_eq!(index.find(&[], "Audit  log"), Some((2, "Audit  log")));
        assert_eq!(index.find(&[], "Audit log v2"), None);
    }

    #[test]
    fn a_completed_column_counts_only_when_it_holds_a_date_or_says_done() {
        let text = "## Tracks\n\n| Track ID | Name | Completed | Summary |\n|-|-|-|-|\n\
                    | a | A | 2026-11-20 | x |\n| b | B | | y |\n| c | C | 20.11.2026 | z |\n\
                    | d | D | 2026-11-20T10:00:00Z | w |\n| e | E | yes? | v |\n| f | F | ✅ | u |\n";
        let ids: Vec<String> = parse_tracks_md(text)
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect();
        assert_eq!(ids, ["a", "c", "d", "f"]);
        for not_a_date in ["2026-11", "11-20", "2026-111-20", "26-11-20", "v1.2.3"] {
            assert!(!is_date(not_a_date), "{not_a_date}");
        }
    }

    #[test]
    fn active_tracks_count_by_status_not_by_created_date() {
        let tracks = parse_tracks_md(&fixture("active_tracks.md")).unwrap();
        assert_eq!(tracks.len(), 1, "{tracks:?}");
        assert_eq!(tracks[0].id, "search_20261115");
        assert_eq!(tracks[0].name.as_deref(), Some("Full-text search"));
        assert!(tracks[0].deliverables.is_empty());
        let index = DeliverableIndex::new(&tracks);
        assert_eq!(
            index.find(&[], "full-text search"),
            Some((0, "full-text search"))
        );
        assert_eq!(index.find(&[], "Rate limiting"), None);
    }

    #[test]
    fn progress_tracks_count_by_status() {
        let tracks = parse_tracks_md(&fixture("progress_tracks.md")).unwrap();
        let ids: Vec<&str> = tracks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["metrics_20261105", "cache_20261101"]);
        assert!(
            tracks
                .iter()
                .all(|t| t.name.is_none() && t.deliverables.is_empty())
        );
    }

    #[test]
    fn tracks_md_errors_and_empty() {
        assert_eq!(parse_tracks_md("  \n").unwrap(), Vec::new());
        let error = parse_tracks_md("# Tracks\n\nnothing here\n").unwrap_err();
        assert_eq!(error.kind, PlanErrorKind::InvalidTracksMarkdown);
        assert_contains(&error.message, "no tracks table");
        let error =
            parse_tracks_md("text\n\n| Tarck | Status |\n|---|---|\n| a | done |\n").unwrap_err();
        assert_eq!(error.line, Some(3));
        assert!(error.message.starts_with("line 3: "), "{}", error.message);
        // Tables inside code fences are not read.
        assert!(parse_tracks_md("```\n|ID|Status|\n|-|-|\n|a|done|\n```\n").is_err());
    }
}
