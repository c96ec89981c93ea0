//! One name per concept: no `struct`, `enum`, `type` or `trait` name is
//! defined in two different files under `src/`, so a name found in a stack trace, a
//! review or a search means one thing.
//!
//! What counts as a definition: an item at the start of a line (module level, where
//! rustfmt puts it) or one indent into an inline module that is not `#[cfg(test)]`.
//! Ignored, because they cannot be reached from another file: items inside
//! functions, associated types inside `impl` and `trait` blocks (all indented), and
//! everything in `#[cfg(test)]` modules. Types a macro defines are not seen.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plangate::domain::dispatch::{
    AbandonCategory, GraphFormat, Next, ReadyMode, TaskEventKind, TaskStatus,
};
use plangate::domain::gating::Code;
use plangate::domain::job::JobStatus;
use plangate::domain::loop_plan::{ExecutionMode, PlanCode, TaskType};
use plangate::domain::refine::{ExecutorKind, JobKind};
use plangate::domain::track_state::{
    CheckpointStatus, Step, StepOutcome, TrackEventAction, TrackStatus,
};
use plangate::domain::usage::{BudgetAction, UsageSource};

/// A type name and where it is defined, as `file:line`.
type Definitions = BTreeMap<String, Vec<String>>;

#[test]
fn no_type_name_is_defined_in_two_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    assert!(files.len() > 50, "src/ read wrong: {} files", files.len());
    let sources: Vec<(String, String)> = files
        .iter()
        .map(|path| {
            let name = path.strip_prefix(root).unwrap().display().to_string();
            (name, std::fs::read_to_string(path).unwrap())
        })
        .collect();
    let twice = defined_in_two_files(&sources);
    assert!(
        twice.is_empty(),
        "type names defined in two files (rename one for what it is):\n{}",
        twice
            .iter()
            .map(|(name, places)| format!("  {name}: {}", places.join(", ")))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn a_planted_duplicate_is_reported_and_local_items_are_not() {
    let sources = [
        (
            "src/a.rs".to_string(),
            "use x;\n\npub struct Job {\n    id: u32,\n}\n\nfn f() {\n    struct Local;\n}\n\
             impl Iterator for Job {\n    type Item = u32;\n}\n"
                .to_string(),
        ),
        (
            "src/b.rs".to_string(),
            "/// Doc.\npub(crate) enum Job {\n    A,\n}\n\n#[cfg(test)]\nmod tests {\n    \
             struct Local;\n    type Item = u8;\n}\n\nmod inner {\n    pub trait Shape {}\n}\n"
                .to_string(),
        ),
        (
            "src/c.rs".to_string(),
            "pub type Shape = u8;\nstruct Single;\n".to_string(),
        ),
    ];
    let twice = defined_in_two_files(&sources);
    let expected: Definitions = [
        ("Job", vec!["src/a.rs:3", "src/b.rs:2"]),
        ("Shape", vec!["src/b.rs:13", "src/c.rs:1"]),
    ]
    .into_iter()
    .map(|(name, places)| {
        (
            name.to_string(),
            places.into_iter().map(String::from).collect(),
        )
    })
    .collect();
    assert_eq!(twice, expected);
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The names defined in more than one file, each with every place it is defined.
fn defined_in_two_files(sources: &[(String, String)]) -> Definitions {
    let mut places = Definitions::new();
    let mut files_of: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (file, source) in sources {
        for (name, line) in type_definitions(source) {
            places
                .entry(name.clone())
                .or_default()
                .push(format!("{file}:{line}"));
            let files = files_of.entry(name).or_default();
            if !files.contains(&file.as_str()) {
                files.push(file);
            }
        }
    }
    places.retain(|name, _| files_of[name].len() > 1);
    places
}

/// Type names defined at module level in `source`, with their 1-based line.
fn type_definitions(source: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    let mut test_attribute = false;
    // Inside an inline `mod x { … }` at column 0: whether it is a test module.
    let mut inline_module: Option<bool> = None;
    for (index, line) in source.lines().enumerate() {
        let item = match inline_module {
            None => Some(line).filter(|l| !l.starts_with(char::is_whitespace)),
            Some(is_test) => {
                if line == "}" {
                    inline_module = None;
                    continue;
                }
                line.strip_prefix("    ")
                    .filter(|l| !is_test && !l.starts_with(char::is_whitespace))
            }
        };
        let Some(item) = item else { continue };
        if item.starts_with("#[cfg(test)]") {
            test_attribute = true;
            continue;
        }
        if item.starts_with("#[") || item.starts_with("//") {
            continue;
        }
        let words: Vec<&str> = item
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        let words = skip_visibility(&words);
        if inline_module.is_none() && words.first() == Some(&"mod") && item.ends_with('{') {
            inline_module = Some(test_attribute);
        } else if let [kind, name, ..] = words
            && matches!(*kind, "struct" | "enum" | "type" | "trait")
        {
            found.push((name.to_string(), index + 1));
        }
        test_attribute = false;
    }
    found
}

/// `words` of an item without its leading `pub`, `pub(crate)` or `unsafe`.
fn skip_visibility<'a, 'b>(mut words: &'a [&'b str]) -> &'a [&'b str] {
    if words.first() == Some(&"pub") {
        words = &words[1..];
        if let Some(scope) = words.first()
            && matches!(*scope, "crate" | "super" | "self" | "in")
        {
            words = &words[1..];
        }
    }
    if words.first() == Some(&"unsafe") {
        words = &words[1..];
    }
    words
}

/// One word per state on the wire: every `wire_strings!` table (the words rows,
/// the API and the dashboard use) is the enum's serde name, and `Display` writes it.
macro_rules! assert_serde_names {
    ($($ty:ident),+ $(,)?) => {$(
        for value in $ty::ALL {
            let name = value.as_str();
            assert_eq!(serde_json::to_value(value).unwrap(), name, stringify!($ty));
            assert_eq!(value.to_string(), name, stringify!($ty));
        }
    )+};
}

#[test]
fn every_table_matches_serde() {
    assert_serde_names!(
        TaskStatus,
        AbandonCategory,
        ReadyMode,
        TaskEventKind,
        GraphFormat,
        Next,
        Code,
        JobStatus,
        JobKind,
        ExecutorKind,
        TaskType,
        ExecutionMode,
        PlanCode,
        CheckpointStatus,
        Step,
        StepOutcome,
        TrackStatus,
        TrackEventAction,
        UsageSource,
        BudgetAction,
    );
}
