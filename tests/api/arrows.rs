//! The layer arrows, checked: every `crate::…` path of every file under `src/` must
//! follow an arrow of the Mermaid flowchart in `docs/architecture.md` ("Layers and
//! arrows"), every arrow of that picture must be used by some code, and the layers
//! must form no cycle. The picture is the table: they cannot disagree.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

/// One `crate::x` (or `super::…` climbing to the crate root) found in a file.
#[derive(Debug)]
struct Use {
    file: String,
    line: usize,
    from: String,
    to: String,
}

/// The arrows of the picture, and its nodes.
struct Picture {
    layers: BTreeSet<String>,
    arrows: BTreeSet<(String, String)>,
}

/// Reads the first ```` ```mermaid ```` block holding a `flowchart`: nodes are
/// `id` or `id[label]`, arrows `a --> b` (chains `a --> b --> c` and `a & b --> c`
/// allowed); `%%` comments, `subgraph`, `end` and styling lines are skipped.
fn parse_picture(markdown: &str) -> Picture {
    let mut blocks = markdown.split("```mermaid").skip(1);
    let block = blocks
        .find(|b| b.trim_start().starts_with("flowchart"))
        .expect("docs/architecture.md has a ```mermaid flowchart block");
    let block = block.split("```").next().unwrap_or_default();
    let node = |text: &str| -> String {
        let text = text.trim();
        let end = text.find(['[', '(', '{']).unwrap_or(text.len());
        text[..end].trim().to_string()
    };
    let mut picture = Picture {
        layers: BTreeSet::new(),
        arrows: BTreeSet::new(),
    };
    let lines = block
        .lines()
        .skip_while(|line| !line.trim_start().starts_with("flowchart"))
        .skip(1);
    for line in lines {
        let line = line.trim();
        let keyword = line.split_whitespace().next().unwrap_or_default();
        if line.is_empty()
            || line.starts_with("%%")
            || matches!(
                keyword,
                "subgraph" | "end" | "classDef" | "class" | "style" | "linkStyle" | "direction"
            )
        {
            continue;
        }
        let steps: Vec<Vec<String>> = line
            .split("-->")
            .map(|step| step.split('&').map(node).collect())
            .collect();
        for step in &steps {
            picture.layers.extend(step.iter().cloned());
        }
        for pair in steps.windows(2) {
            for from in &pair[0] {
                for to in &pair[1] {
                    picture.arrows.insert((from.clone(), to.clone()));
                }
            }
        }
    }
    picture
}

/// `src/http/perimeter.rs` → its module path (`http`, `perimeter`); `mod.rs`, `lib.rs` and
/// `main.rs` name their directory.
fn module_path(file: &str) -> Vec<String> {
    let rel = file.strip_prefix("src/").unwrap_or(file);
    let rel = rel.strip_suffix(".rs").unwrap_or(rel);
    let mut parts: Vec<String> = rel.split('/').map(str::to_string).collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// A file's layer: its top-level directory under `src/`, or the root file's name.
fn layer_of(file: &str) -> String {
    let rel = file.strip_prefix("src/").unwrap_or(file);
    let first = rel.split('/').next().unwrap_or(rel);
    first.strip_suffix(".rs").unwrap_or(first).to_string()
}

/// The text without comments (a line's `//…` outside a string literal), so prose
/// that names a path is no arrow.
fn code_only(line: &str) -> &str {
    let mut in_string = false;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
        i += 1;
    }
    line
}

fn ident_at(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The first segment of every item of a `{…}` group starting at `text` (just after
/// the `{`), and the group's length; nested groups are skipped.
fn group_items(text: &str) -> (Vec<(usize, String)>, usize) {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut expect_item = true;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return (items, i),
            '}' => depth -= 1,
            ',' if depth == 0 => expect_item = true,
            c if expect_item && (c.is_ascii_alphabetic() || c == '_') => {
                expect_item = false;
                if depth == 0 {
                    items.push((i, ident_at(&text[i..]).to_string()));
                }
            }
            _ => {}
        }
    }
    (items, text.len())
}

/// Where the inline modules (`mod tests { … }`) of `code` start and end: a `super`
/// inside one climbs out of it first. Braces in string and char literals are skipped.
fn inline_modules(code: &str) -> Vec<(usize, usize)> {
    let bytes = code.as_bytes();
    let mut ranges = Vec::new();
    for (start, _) in code.match_indices("mod ") {
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        let after = &code[start + 4..];
        let name = ident_at(after);
        if name.is_empty() || !after[name.len()..].trim_start().starts_with('{') {
            continue;
        }
        let open = start + 4 + name.len() + after[name.len()..].find('{').unwrap_or(0);
        let (mut depth, mut i, mut in_string) = (0usize, open, false);
        while i < bytes.len() {
            match bytes[i] {
                b'\\' if in_string => i += 1,
                b'"' => in_string = !in_string,
                b'\'' if !in_string && bytes.get(i + 2) == Some(&b'\'') => i += 2,
                b'\'' if !in_string && bytes.get(i + 1) == Some(&b'\\') => {
                    i += code[i + 2..].find('\'').map_or(0, |n| n + 2);
                }
                b'{' if !in_string => depth += 1,
                b'}' if !in_string => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        ranges.push((open, i));
    }
    ranges
}

/// Every layer a file names: `crate::x`, `$crate::x`, each item of `crate::{x, y::z}`
/// (over several lines too), and `super::super::x` when it climbs to the crate root.
fn uses_of(file: &str, source: &str) -> Vec<Use> {
    let from = layer_of(file);
    let depth = module_path(file).len();
    let code: String = source.lines().map(code_only).collect::<Vec<_>>().join("\n");
    let line_at = |offset: usize| code[..offset].matches('\n').count() + 1;
    let mut found = Vec::new();
    let mut push = |offset: usize, to: &str| {
        if !to.is_empty() && to != "self" && to != "super" {
            found.push(Use {
                file: file.to_string(),
                line: line_at(offset),
                from: from.clone(),
                to: to.to_string(),
            });
        }
    };
    let bytes = code.as_bytes();
    let starts_word =
        |i: usize| i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
    for (i, _) in code.match_indices("crate::") {
        if !starts_word(i) {
            continue;
        }
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let start = i + "crate::{".len();
            for (at, name) in group_items(group).0 {
                push(start + at, &name);
            }
        } else {
            push(i, ident_at(rest));
        }
    }
    let inline_modules = inline_modules(&code);
    for (i, _) in code.match_indices("super::") {
        if !starts_word(i) || (i >= 2 && &code[i - 2..i] == "::") {
            continue;
        }
        let mut rest = &code[i..];
        let mut climbs = 0;
        while let Some(next) = rest.strip_prefix("super::") {
            climbs += 1;
            rest = next;
        }
        let nested = inline_modules
            .iter()
            .filter(|(s, e)| *s < i && i < *e)
            .count();
        let depth = depth + nested;
        if climbs >= depth && depth > 0 {
            push(i, ident_at(rest));
        }
    }
    found
}

/// Everything wrong with `files` against `picture`, one paragraph each.
fn check(files: &[(String, String)], picture: &Picture) -> Vec<String> {
    let mut failures = Vec::new();
    let modules: BTreeSet<String> = files.iter().map(|(f, _)| layer_of(f)).collect();
    let mut used: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (file, source) in files {
        for u in uses_of(file, source) {
            if u.from != u.to {
                used.entry((u.from, u.to))
                    .or_default()
                    .push(format!("{}:{}", u.file, u.line));
            }
        }
    }
    for ((from, to), places) in &used {
        if !picture.arrows.contains(&(from.clone(), to.clone())) {
            let what = if modules.contains(to) {
                format!("arrow {from} → {to} is not in the picture of docs/architecture.md")
            } else {
                format!("{from} names crate::{to}, which is no layer (an item of the crate root)")
            };
            let mut text = format!("{what}:");
            for place in places {
                write!(text, "\n  {place}").unwrap();
            }
            failures.push(text);
        }
    }
    for (from, to) in &picture.arrows {
        if !used.contains_key(&(from.clone(), to.clone())) {
            failures.push(format!(
                "stale: docs/architecture.md draws {from} → {to}, but no file of src/{from} names crate::{to}"
            ));
        }
    }
    for layer in &picture.layers {
        if !modules.contains(layer) {
            failures.push(format!(
                "docs/architecture.md draws layer {layer}, which is no module of src/"
            ));
        }
    }
    let graph: BTreeSet<(String, String)> = picture
        .arrows
        .iter()
        .cloned()
        .chain(used.keys().cloned())
        .collect();
    if let Some(cycle) = find_cycle(&graph) {
        failures.push(format!("the layers form a cycle: {}", cycle.join(" → ")));
    }
    failures
}

fn find_cycle(arrows: &BTreeSet<(String, String)>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        arrows: &BTreeSet<(String, String)>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for (_, to) in arrows.iter().filter(|(from, _)| from == node) {
            if let Some(cycle) = visit(to, arrows, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for (from, _) in arrows {
        if let Some(cycle) = visit(from, arrows, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

fn source_files(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src/")
        .map(|e| e.expect("read src/").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            source_files(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            out.push((
                rel,
                std::fs::read_to_string(&path).expect("read a source file"),
            ));
        }
    }
}

fn repository() -> (Vec<(String, String)>, Picture) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    source_files(&root.join("src"), root, &mut files);
    let doc = std::fs::read_to_string(root.join("docs/architecture.md"))
        .expect("read docs/architecture.md");
    (files, parse_picture(&doc))
}

#[test]
fn every_arrow_of_the_code_is_in_the_picture_and_back() {
    let (files, picture) = repository();
    assert!(
        files.len() > 50,
        "found only {} files under src/",
        files.len()
    );
    let failures = check(&files, &picture);
    assert!(
        failures.is_empty(),
        "the layer arrows disagree with docs/architecture.md (\"Layers and arrows\"):\n{}",
        failures.join("\n")
    );
}

#[test]
fn a_planted_wrong_import_is_reported_with_its_place() {
    let (mut files, picture) = repository();
    files.push((
        "src/domain/x.rs".into(),
        "//! Planted.\n\nuse crate::db::Db;\n".into(),
    ));
    files.push((
        "src/ui/x.rs".into(),
        "use crate::{\n    service::Caller,\n    db::{Database, DbError},\n};\n".into(),
    ));
    files.push((
        "src/http/a/b.rs".into(),
        "// crate::jobs in a comment is no arrow\nuse super::super::super::jobs::JobsHub;\n".into(),
    ));
    files.push((
        "src/db/d.rs".into(),
        "#[cfg(test)]\nmod tests {\n    use super::super::super::service::Caller;\n    use super::super::helper;\n}\n"
            .into(),
    ));
    files.push((
        "src/http/c.rs".into(),
        "fn f() { crate::open_database(); }\n".into(),
    ));
    let report = check(&files, &picture).join("\n");
    for expected in [
        "arrow domain → db is not in the picture",
        "src/domain/x.rs:3",
        "arrow ui → db is not in the picture",
        "src/ui/x.rs:3",
        "arrow http → jobs is not in the picture",
        "src/http/a/b.rs:2",
        "http names crate::open_database, which is no layer",
        "src/http/c.rs:1",
        "arrow db → service is not in the picture",
        "src/db/d.rs:3",
    ] {
        assert!(
            report.contains(expected),
            "{expected:?} missing from:\n{report}"
        );
    }
    assert!(
        !report.contains("src/http/a/b.rs:1"),
        "a comment was read:\n{report}"
    );
    assert!(
        !report.contains("src/db/d.rs:4"),
        "super inside `mod tests` misread:\n{report}"
    );
    assert!(
        !report.contains("ui → service"),
        "an allowed arrow was reported:\n{report}"
    );
}

#[test]
fn a_stale_arrow_and_a_cycle_in_the_picture_are_reported() {
    let (files, _) = repository();
    let picture = parse_picture(
        "```mermaid\nflowchart TD\n  %% a comment\n  domain[domain/] --> db\n  db --> domain\n```\n",
    );
    let report = check(&files, &picture).join("\n");
    assert!(
        report.contains("stale: docs/architecture.md draws domain → db"),
        "{report}"
    );
    assert!(report.contains("the layers form a cycle: d"), "{report}");
}

/// The module files `file` names (`crate::a::b`, `$crate::a::b`, `super::b`,
/// `self::b`, and each item of a `{…}` group after them), resolved to the deepest
/// module file that exists; `modules` maps module paths to files.
fn files_named(
    file: &str,
    source: &str,
    modules: &BTreeMap<Vec<String>, String>,
) -> BTreeSet<String> {
    let code: String = source.lines().map(code_only).collect::<Vec<_>>().join("\n");
    let own = module_path(file);
    let parent = own[..own.len().saturating_sub(1)].to_vec();
    let inline = inline_modules(&code);
    let bytes = code.as_bytes();
    let mut named = BTreeSet::new();
    let mut resolve = |path: Vec<String>| {
        for end in (1..=path.len()).rev() {
            if let Some(target) = modules.get(&path[..end]) {
                if target != file {
                    named.insert(target.clone());
                }
                return;
            }
        }
    };
    // A path's segments from `at` on: idents joined by `::`, then maybe a group.
    let segments = |at: usize| -> (Vec<String>, Option<usize>) {
        let mut parts = Vec::new();
        let mut i = at;
        loop {
            let ident = ident_at(&code[i..]);
            if ident.is_empty() {
                return (parts, code[i..].starts_with('{').then_some(i + 1));
            }
            parts.push(ident.to_string());
            i += ident.len();
            match code[i..].strip_prefix("::") {
                Some(_) => i += 2,
                None => return (parts, None),
            }
        }
    };
    for (root, base) in [
        ("crate::", Vec::new()),
        ("super::", parent.clone()),
        ("self::", own.clone()),
    ] {
        for (i, _) in code.match_indices(root) {
            let after_dollar = i > 0 && bytes[i - 1] == b'$';
            if i > 0
                && !after_dollar
                && (bytes[i - 1].is_ascii_alphanumeric()
                    || bytes[i - 1] == b'_'
                    || bytes[i - 1] == b':')
            {
                continue;
            }
            let mut base = base.clone();
            // Inside `mod tests { … }`, `super` is the file's own module.
            if root == "super::" && inline.iter().any(|(s, e)| *s < i && i < *e) {
                base = own.clone();
            }
            let mut at = i + root.len();
            // `super::super::x` climbs once more per `super`.
            while root == "super::" && code[at..].starts_with("super::") {
                base.pop();
                at += "super::".len();
            }
            let (parts, group) = segments(at);
            let mut path = base.clone();
            path.extend(parts);
            match group {
                Some(start) => {
                    for (_, item) in group_items(&code[start..]).0 {
                        let mut item_path = path.clone();
                        item_path.push(item);
                        resolve(item_path);
                    }
                }
                None => resolve(path),
            }
        }
    }
    named
}

/// Pairs of files of one folder that name each other: one of them should hold
/// what both need, or the shared part should move to a third file they both use.
fn mutual_imports(files: &[(String, String)]) -> Vec<String> {
    let modules: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|(f, _)| (module_path(f), f.clone()))
        .collect();
    let folder = |f: &str| {
        f.rsplit_once('/')
            .map_or(String::new(), |(d, _)| d.to_string())
    };
    let named: BTreeMap<&str, BTreeSet<String>> = files
        .iter()
        .map(|(f, s)| (f.as_str(), files_named(f, s, &modules)))
        .collect();
    let mut pairs = Vec::new();
    for (a, targets) in &named {
        for b in targets {
            if a < &b.as_str()
                && folder(a) == folder(b)
                && named.get(b.as_str()).is_some_and(|back| back.contains(*a))
            {
                pairs.push(format!("{a} <-> {b}"));
            }
        }
    }
    pairs
}

#[test]
fn no_two_files_of_one_folder_name_each_other() {
    let (files, _) = repository();
    let pairs = mutual_imports(&files);
    assert!(
        pairs.is_empty(),
        "files of one folder that name each other (move what both need to one of them, or to a third file):\n{}",
        pairs.join("\n")
    );
}

#[test]
fn a_planted_mutual_import_is_reported() {
    let files = vec![
        (
            "src/db/a.rs".to_string(),
            "use super::b::Thing;\n".to_string(),
        ),
        (
            "src/db/b.rs".to_string(),
            "fn f() { crate::db::{a::x, c}; }\n".to_string(),
        ),
        (
            "src/db/c.rs".to_string(),
            "use super::a::Y; // super::b in a comment\n".to_string(),
        ),
        (
            "src/db/mod.rs".to_string(),
            "mod a;\nmod b;\nmod c;\n".to_string(),
        ),
        (
            "src/jobs/w/mod.rs".to_string(),
            "use self::p::Pool;\n".to_string(),
        ),
        (
            "src/jobs/w/p.rs".to_string(),
            "use super::Pool;\n".to_string(),
        ),
    ];
    let pairs = mutual_imports(&files);
    assert_eq!(
        pairs,
        [
            "src/db/a.rs <-> src/db/b.rs",
            "src/jobs/w/mod.rs <-> src/jobs/w/p.rs"
        ],
        "{pairs:?}"
    );
}
