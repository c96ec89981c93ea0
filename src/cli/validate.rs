//! `plangate validate FILE [--existing-files FILE] [--repo DIR] [--format text|json]`.
//!
//! FILE holds one of:
//! - a JSON task list (array);
//! - a JSON object shaped like the `POST /v1/task-lists/validate` body: `tasks` or
//!   `planner_output`, optional `existing_files`, other keys ignored (this is what
//!   `cargo run --example gen_tasks` prints);
//! - any other JSON object: planner output that is not a task list (invalid,
//!   `synthesis_failure`);
//! - anything else: planner output text (the last fenced json block wins).
//!
//! Existing files are the union of FILE's `existing_files`, `--existing-files` (a JSON
//! array or one path a line) and `git -C DIR ls-files` for `--repo DIR`.
//!
//! Exit status: 0 valid, 1 invalid (including planner output that holds no task
//! list), 2 usage or I/O error: unreadable FILE, bad flags, a request body with a
//! field of the wrong type (message on `err`).
//!
//! Big lists are read straight into tasks (no `serde_json::Value` copy) and the text
//! is dropped before gating, so memory stays a small multiple of the file size.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::Command;

use serde::Deserialize;

use crate::domain::gating::{Outcome, ParsedTaskList, TaskListSource, Validation, validate};

/// The `--format` flag's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

pub const EXIT_VALID: i32 = 0;
pub const EXIT_INVALID: i32 = 1;
pub const EXIT_USAGE: i32 = 2;

/// A usage or I/O problem: printed on `err`, exit status 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct UsageError(String);

fn usage_error(path: &Path, problem: impl std::fmt::Display) -> UsageError {
    UsageError(format!("{}: {problem}", path.display()))
}

pub fn run(
    file: &Path,
    existing_files: Option<&Path>,
    repo: Option<&Path>,
    format: OutputFormat,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    match validate_file(file, existing_files, repo) {
        Ok(validation) => match print_validation(validation, format, out) {
            Ok(status) => status,
            Err(error) => {
                // Nothing more useful to do if stderr fails too.
                let _ = writeln!(err, "plangate validate: cannot write the result: {error}");
                EXIT_USAGE
            }
        },
        Err(error) => {
            let _ = writeln!(err, "plangate validate: {error}");
            EXIT_USAGE
        }
    }
}

fn validate_file(
    file: &Path,
    existing_files_path: Option<&Path>,
    repo: Option<&Path>,
) -> Result<Validation, UsageError> {
    let mut existing_files = Vec::new();
    if let Some(path) = existing_files_path {
        existing_files.extend(read_existing_files(path)?);
    }
    if let Some(repo) = repo {
        existing_files.extend(git_ls_files(repo)?);
    }

    let text = read_text(file)?;
    match read_document(&text, file)? {
        Document::TaskList(parsed, listed_files) => {
            existing_files.extend(listed_files);
            drop(text); // the tasks own their strings now
            Ok(validate(TaskListSource::Parsed(parsed), &existing_files))
        }
        Document::PlannerOutput => Ok(validate(
            TaskListSource::PlannerOutput(&text),
            &existing_files,
        )),
        Document::PlannerOutputText(output, listed_files) => {
            existing_files.extend(listed_files);
            drop(text);
            Ok(validate(
                TaskListSource::PlannerOutput(&output),
                &existing_files,
            ))
        }
    }
}

enum Document {
    /// A task list and the `existing_files` given beside it.
    TaskList(ParsedTaskList, Vec<String>),
    /// FILE itself is planner output.
    PlannerOutput,
    /// A request body's `planner_output`.
    PlannerOutputText(String, Vec<String>),
}

/// The `POST /v1/task-lists/validate` body (unknown keys ignored).
#[derive(Deserialize)]
struct RequestBody {
    tasks: Option<ParsedTaskList>,
    planner_output: Option<String>,
    existing_files: Option<Vec<String>>,
}

fn read_document(text: &str, file: &Path) -> Result<Document, UsageError> {
    match text.trim_start().as_bytes().first() {
        Some(b'[') => Ok(match serde_json::from_str::<ParsedTaskList>(text) {
            Ok(parsed) => Document::TaskList(parsed, Vec::new()),
            // Not JSON after all: planner output (whose JSON errors get reported).
            Err(_) => Document::PlannerOutput,
        }),
        Some(b'{') => match serde_json::from_str::<RequestBody>(text) {
            Ok(body) => {
                let listed_files = body.existing_files.unwrap_or_default();
                match (body.tasks, body.planner_output) {
                    (Some(tasks), None) => Ok(Document::TaskList(tasks, listed_files)),
                    (None, Some(output)) => Ok(Document::PlannerOutputText(output, listed_files)),
                    (Some(_), Some(_)) => Err(usage_error(
                        file,
                        "give either `tasks` or `planner_output`, not both",
                    )),
                    // Not a request body: the object is the planner's output itself,
                    // a task list of the wrong shape (`synthesis_failure`, as the
                    // HTTP gate answers for `{"tasks": {...}}`).
                    (None, None) => Ok(Document::TaskList(
                        serde_json::from_str::<ParsedTaskList>(text)
                            .map_err(|error| usage_error(file, error))?,
                        listed_files,
                    )),
                }
            }
            Err(error) if error.is_data() => Err(usage_error(file, error)),
            Err(_) => Ok(Document::PlannerOutput),
        },
        _ => Ok(Document::PlannerOutput),
    }
}

fn read_text(path: &Path) -> Result<String, UsageError> {
    let bytes = std::fs::read(path).map_err(|error| usage_error(path, error))?;
    let mut text = String::from_utf8(bytes).map_err(|_| usage_error(path, "not UTF-8 text"))?;
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    Ok(text)
}

/// `--existing-files`: a JSON array of paths, or one path a line.
///
/// JSON when the text starts with `[` and holds a `"` (or is `[]`): a line-per-path
/// file may well start with `[` too (`[slug]/page.tsx`), but has no JSON strings.
fn read_existing_files(path: &Path) -> Result<Vec<String>, UsageError> {
    let text = read_text(path)?;
    let trimmed = text.trim();
    let looks_like_json = trimmed.starts_with('[') && (trimmed.contains('"') || trimmed == "[]");
    if looks_like_json {
        return serde_json::from_str(&text)
            .map_err(|error| usage_error(path, format!("not a JSON array of paths: {error}")));
    }
    Ok(text
        .lines()
        .map(|line| line.trim_end_matches('\r'))
        .filter(|line| !line.trim().is_empty())
        .map(str::to_owned)
        .collect())
}

/// `--repo DIR`: the tracked files of a checkout, as `git ls-files` lists them.
fn git_ls_files(repo: &Path) -> Result<Vec<String>, UsageError> {
    let output = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["ls-files", "-z"])
        .output()
        .map_err(|error| usage_error(repo, format!("cannot run git: {error}")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(usage_error(
            repo,
            format!("git ls-files failed ({}): {}", output.status, stderr.trim()),
        ));
    }
    Ok(output
        .stdout
        .split(|&byte| byte == 0)
        .filter(|path| !path.is_empty())
        .map(|path| String::from_utf8_lossy(path).into_owned())
        .collect())
}

fn print_validation(
    validation: Validation,
    format: OutputFormat,
    out: &mut dyn Write,
) -> std::io::Result<i32> {
    let status = if validation.is_valid() {
        EXIT_VALID
    } else {
        EXIT_INVALID
    };
    let mut out = BufWriter::new(out);
    match format {
        OutputFormat::Json => {
            serde_json::to_writer(&mut out, &validation.into_report())?;
            writeln!(out)?;
        }
        OutputFormat::Text => {
            for error in &validation.errors {
                writeln!(out, "{}", error.message)?;
            }
            for warning in &validation.warnings {
                writeln!(out, "warning: {}", warning.message)?;
            }
            writeln!(out, "{}", summary(&validation))?;
        }
    }
    out.flush()?;
    Ok(status)
}

fn summary(validation: &Validation) -> String {
    let warnings = plural(validation.warnings.len(), "warning");
    match validation.outcome {
        Outcome::Valid => format!(
            "valid: {} in {}, {warnings}",
            plural(validation.tasks.len(), "task"),
            plural(validation.waves.len(), "wave")
        ),
        Outcome::DagInvalid => format!(
            "invalid (dag-invalid): {}, {warnings}",
            plural(validation.errors.len(), "error")
        ),
        Outcome::SynthesisFailure => {
            "invalid (synthesis-failure): the output holds no task list".to_owned()
        }
    }
}

fn plural(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cli::test_support::{Broken, Scratch};

    fn run_cli(
        file: &Path,
        existing: Option<&Path>,
        repo: Option<&Path>,
        format: OutputFormat,
    ) -> (i32, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let status = run(file, existing, repo, format, &mut out, &mut err);
        (
            status,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    const VALID_LIST: &str = r#"[
        {"task_id": "t-1", "assigned_persona": "be-1", "parallel_group": 1,
         "reads": ["src/http/client.py"], "writes": ["a.py"], "description": "x"},
        {"task_id": "t-2", "assigned_persona": "rv-1", "parallel_group": 2, "depends_on": ["t-1"],
         "reads": ["a.py"], "description": "y", "reviews": "t-1"}
    ]"#;

    #[test]
    fn valid_list_with_line_per_path_existing_files() {
        let scratch = Scratch::new("valid");
        let list = scratch.file("list.json", VALID_LIST);
        let existing = scratch.file("existing.txt", "README.md\r\n./src/http/client.py\n\n");
        let (status, out, err) = run_cli(&list, Some(&existing), None, OutputFormat::Text);
        assert_eq!((status, err.as_str()), (0, ""));
        assert_eq!(out, "valid: 2 tasks in 2 waves, 0 warnings\n");
    }

    #[test]
    fn line_per_path_existing_files_may_start_with_a_bracket() {
        let scratch = Scratch::new("bracket-paths");
        let list = scratch.file(
            "list.json",
            r#"[{"task_id": "t", "assigned_persona": "p", "parallel_group": 1,
                "reads": ["[slug]/page.tsx", "b.ts"], "description": ""}]"#,
        );
        let existing = scratch.file("existing.txt", "[slug]/page.tsx\nb.ts\n");
        assert_eq!(
            run_cli(&list, Some(&existing), None, OutputFormat::Text).0,
            0
        );
        let empty_json = scratch.file("empty.json", " [] ");
        assert_eq!(
            run_cli(&list, Some(&empty_json), None, OutputFormat::Text).0,
            1
        );
    }

    #[test]
    fn invalid_list_prints_each_violation_then_summary() {
        let scratch = Scratch::new("invalid");
        let list = scratch.file("list.json", VALID_LIST);
        let (status, out, _) = run_cli(&list, None, None, OutputFormat::Text);
        assert_eq!(status, 1);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(
            lines[0].starts_with("UnsatisfiableReadsError: task 't-1'"),
            "{out}"
        );
        assert_eq!(lines[1], "invalid (dag-invalid): 1 error, 0 warnings");
    }

    #[test]
    fn json_format_prints_exactly_the_report() {
        let scratch = Scratch::new("json");
        let list = scratch.file("list.json", VALID_LIST);
        let existing = scratch.file("existing.json", r#"["src/http/client.py"]"#);
        let (status, out, _) = run_cli(&list, Some(&existing), None, OutputFormat::Json);
        assert_eq!(status, 0);
        assert_eq!(
            out,
            "{\"valid\":true,\"errors\":[],\"warnings\":[],\"error_count\":0,\
             \"warning_count\":0,\"error_counts\":{},\"truncated\":false,\
             \"waves\":[[\"t-1\"],[\"t-2\"]]}\n"
        );
    }

    #[test]
    fn request_body_object_and_planner_output_files() {
        let scratch = Scratch::new("body");
        let body = format!(
            r#"{{"project_id": "p", "tasks": {VALID_LIST}, "existing_files": ["src/http/client.py"]}}"#
        );
        let file = scratch.file("body.json", &body);
        assert_eq!(run_cli(&file, None, None, OutputFormat::Text).0, 0);

        let planner = format!("Here it is:\n\n```json\n{VALID_LIST}\n```\n");
        let file = scratch.file("planner.md", &planner);
        let existing = scratch.file("existing.txt", "src/http/client.py\n");
        assert_eq!(
            run_cli(&file, Some(&existing), None, OutputFormat::Text).0,
            0
        );

        let wrapped = serde_json::json!({ "planner_output": planner, "existing_files": ["src/http/client.py"] });
        let file = scratch.file("wrapped.json", &wrapped.to_string());
        assert_eq!(run_cli(&file, None, None, OutputFormat::Text).0, 0);
    }

    #[test]
    fn text_that_merely_starts_like_json_is_planner_output() {
        let scratch = Scratch::new("bracket");
        let planner = format!("[draft] the list:\n```json\n{VALID_LIST}\n```\n");
        let file = scratch.file("planner.md", &planner);
        let existing = scratch.file("existing.txt", "src/http/client.py\n");
        let (status, out, _) = run_cli(&file, Some(&existing), None, OutputFormat::Text);
        assert_eq!(status, 0, "{out}");
    }

    #[test]
    fn synthesis_failure_exits_one() {
        let scratch = Scratch::new("synthesis");
        let file = scratch.file("planner.md", "I could not produce a plan.");
        let (status, out, _) = run_cli(&file, None, None, OutputFormat::Text);
        assert_eq!(status, 1);
        assert!(
            out.starts_with(
                "synthesis output is not valid JSON: expected value at line 1 column 1\n"
            ),
            "{out}"
        );
        assert!(out.ends_with("invalid (synthesis-failure): the output holds no task list\n"));
    }

    #[test]
    fn objects_that_are_not_task_lists_are_synthesis_failures() {
        let scratch = Scratch::new("object");
        for (name, body) in [
            ("empty.json", "{}"),
            ("foo.json", r#"{"foo": 1}"#),
            ("project.json", r#"{"project_id": "p"}"#),
        ] {
            let file = scratch.file(name, body);
            let (status, out, err) = run_cli(&file, None, None, OutputFormat::Json);
            assert_eq!((status, err.as_str()), (1, ""), "{name}: {out}");
            let report: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(report["valid"], false, "{name}: {out}");
            assert_eq!(
                report["errors"][0]["code"], "synthesis_failure",
                "{name}: {out}"
            );
        }
    }

    #[test]
    fn usage_and_io_errors_exit_two() {
        let scratch = Scratch::new("usage");
        let list = scratch.file("list.json", VALID_LIST);
        let missing = scratch.path("missing.json");
        let (status, out, err) = run_cli(&missing, None, None, OutputFormat::Text);
        assert_eq!((status, out.as_str()), (2, ""));
        assert!(
            err.starts_with("plangate validate: ") && err.contains("missing.json"),
            "{err}"
        );

        let bad_existing = scratch.file("existing.json", r#"["a", 3]"#);
        assert_eq!(
            run_cli(&list, Some(&bad_existing), None, OutputFormat::Text).0,
            2
        );

        let not_utf8 = scratch.path("binary.json");
        std::fs::write(&not_utf8, [0xff, 0xfe, 0x00]).unwrap();
        assert_eq!(run_cli(&not_utf8, None, None, OutputFormat::Text).0, 2);

        let bad_body = scratch.file("bad-body.json", r#"{"tasks": [], "existing_files": "a"}"#);
        assert_eq!(run_cli(&bad_body, None, None, OutputFormat::Text).0, 2);

        let not_a_repo = Scratch::new("not-a-repo");
        let (status, _, err) = run_cli(&list, None, Some(&not_a_repo.path("")), OutputFormat::Text);
        assert_eq!(status, 2, "{err}");
        assert!(err.contains("git"), "{err}");
    }

    #[test]
    fn repo_files_come_from_git_ls_files() {
        let scratch = Scratch::new("repo");
        let repo = scratch.path("checkout");
        std::fs::create_dir_all(repo.join("src/http")).unwrap();
        std::fs::write(repo.join("src/http/client.py"), "").unwrap();
        let git = |args: &[&str]| {
            Command::new("git")
                .arg("-C")
                .arg(&repo)
                .args(args)
                .output()
                .map(|output| output.status.success())
                .unwrap_or(false)
        };
        if !git(&["init", "-q"]) {
            eprintln!("git unavailable; skipping");
            return;
        }
        assert!(git(&["add", "src/http/client.py"]));
        let list = scratch.file("list.json", VALID_LIST);
        let (status, out, err) = run_cli(&list, None, Some(&repo), OutputFormat::Text);
        assert_eq!(status, 0, "{out}{err}");
    }

    #[test]
    fn broken_output_is_an_io_error() {
        let scratch = Scratch::new("broken");
        let list = scratch.file("list.json", VALID_LIST);
        let mut err = Vec::new();
        let status = run(&list, None, None, OutputFormat::Text, &mut Broken, &mut err);
        assert_eq!(status, 2);
        assert!(String::from_utf8(err).unwrap().contains("cannot write"));
    }
}
