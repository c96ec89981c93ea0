//! `plangate plan FILE [--format md|json] [--completed-tracks tracks.md]`.
//!
//! FILE holds the `POST /v1/loop-plans/generate` body as JSON or YAML: `.json` is
//! JSON, `.yaml`/`.yml` is YAML, anything else is JSON when its first non-blank
//! character is `{`, else YAML. `--completed-tracks` adds the completed rows of a
//! `tracks.md` to the request's completed tracks.
//!
//! Exit status: 0 the plan is valid and printed (plan.md, or the JSON answer); 1 the
//! DAG is invalid: every error message on `err`, one a line (with `--format json`
//! the JSON answer, errors included, is printed on `out` too, for machines); 2 usage
//! or I/O error, or a file that cannot be read as a request (message on `err`).

use std::io::{BufWriter, Write};
use std::path::Path;

use crate::domain::loop_plan::{
    LoopPlanRequest, PlanError, parse_request_json, parse_request_yaml, parse_tracks_md, plan,
    render_markdown,
};

/// The `--format` flag's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanFormat {
    Md,
    Json,
}

// The same statuses as `plangate validate`.
pub use super::validate::{EXIT_INVALID, EXIT_USAGE, EXIT_VALID};

pub fn run(
    file: &Path,
    format: PlanFormat,
    completed_tracks: Option<&Path>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let request = match read_request(file, completed_tracks) {
        Ok(request) => request,
        Err(message) => {
            // Nothing more useful to do if stderr fails too.
            let _ = writeln!(err, "plangate plan: {message}");
            return EXIT_USAGE;
        }
    };
    let plan = plan(&request);
    drop(request);
    let status = if plan.is_valid() {
        EXIT_VALID
    } else {
        EXIT_INVALID
    };
    let printed = (|| -> std::io::Result<()> {
        if !plan.is_valid() {
            let mut err = BufWriter::new(&mut *err);
            for error in &plan.errors {
                writeln!(err, "{}", error.message)?;
            }
            err.flush()?;
        }
        let mut out = BufWriter::new(&mut *out);
        match format {
            PlanFormat::Json => {
                serde_json::to_writer_pretty(&mut out, &plan)?;
                writeln!(out)?;
            }
            PlanFormat::Md if plan.is_valid() => {
                out.write_all(render_markdown(&plan).as_bytes())?
            }
            PlanFormat::Md => {}
        }
        out.flush()
    })();
    match printed {
        Ok(()) => status,
        Err(error) => {
            let _ = writeln!(err, "plangate plan: cannot write the result: {error}");
            EXIT_USAGE
        }
    }
}

fn read_text(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|error| format!("{}: {error}", path.display()))?;
    String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", path.display()))
}

fn read_request(file: &Path, completed_tracks: Option<&Path>) -> Result<LoopPlanRequest, String> {
    let text = read_text(file)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let extension = file
        .extension()
        .and_then(|extension| extension.to_str())
        .map(str::to_ascii_lowercase);
    let is_json = match extension.as_deref() {
        Some("json") => true,
        Some("yaml" | "yml") => false,
        _ => text.trim_start().starts_with('{'),
    };
    let parsed = if is_json {
        parse_request_json(text)
    } else {
        parse_request_yaml(text)
    };
    let describe = |path: &Path, error: PlanError| format!("{}: {}", path.display(), error.message);
    let mut request = parsed.map_err(|error| describe(file, error))?;
    if let Some(path) = completed_tracks {
        let tracks = parse_tracks_md(&read_text(path)?).map_err(|error| describe(path, error))?;
        request
            .completed_tracks
            .get_or_insert_with(Vec::new)
            .extend(tracks);
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cli::test_support::{Broken, Scratch};

    fn run_cli(file: &Path, format: PlanFormat, tracks: Option<&Path>) -> (i32, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let status = run(file, format, tracks, &mut out, &mut err);
        (
            status,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    const REQUEST: &str = r#"{"track": {"id": "t_1", "name": "Track"},
        "phases": [{"number": 1, "name": "Core"}],
        "tasks": [
          {"id": "1.1", "name": "A", "phase": 1, "files": ["src/a.py"]},
          {"id": "1.2", "name": "B", "phase": 1, "depends_on": ["1.1"], "files": ["src/b.py"]}
        ]}"#;

    const YAML_REQUEST: &str = "track:\n  id: t_1\n  name: Track\nphases:\n  - {number: 1, name: Core}\ntasks:\n  - id: \"1.1\"\n    name: A\n    phase: 1\n    files: [src/a.py]\n";

    #[test]
    fn markdown_and_json_output() {
        let scratch = Scratch::new("ok");
        let file = scratch.file("request.json", REQUEST);
        let (status, out, err) = run_cli(&file, PlanFormat::Md, None);
        assert_eq!((status, err.as_str()), (0, ""));
        assert!(out.starts_with("# Track — Execution Plan\n"), "{out}");
        assert!(out.contains("- [ ] Task 1.2: B\n"));

        let (status, out, _) = run_cli(&file, PlanFormat::Json, None);
        assert_eq!(status, 0);
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(json["execution_mode"], "SEQUENTIAL");
        assert_eq!(json["dag"]["parallel_groups"][1]["tasks"][0], "1.2");
    }

    #[test]
    fn yaml_by_extension_or_sniffing() {
        let scratch = Scratch::new("yaml");
        for name in ["request.yaml", "request.yml", "request.txt", "request"] {
            let file = scratch.file(name, YAML_REQUEST);
            let (status, out, err) = run_cli(&file, PlanFormat::Md, None);
            assert_eq!(status, 0, "{name}: {err}");
            assert!(out.contains("Task 1.1: A"));
        }
        // JSON without the extension is sniffed (YAML would read it too, but JSON
        // errors are clearer).
        let file = scratch.file("request.body", &format!("\u{feff}  {REQUEST}"));
        assert_eq!(run_cli(&file, PlanFormat::Md, None).0, 0);
    }

    #[test]
    fn completed_tracks_file_marks_overlap() {
        let scratch = Scratch::new("tracks");
        let file = scratch.file("request.json", REQUEST);
        let tracks = scratch.file(
            "tracks.md",
            "| Track | Status | Deliverables |\n|---|---|---|\n| base_1 | complete | src/a.py |\n",
        );
        let (status, out, _) = run_cli(&file, PlanFormat::Md, Some(&tracks));
        assert_eq!(status, 0);
        assert!(
            out.contains("  - Overlap: SKIP — already done in base_1\n"),
            "{out}"
        );

        let bad = scratch.file("bad.md", "no table here\n");
        let (status, _, err) = run_cli(&file, PlanFormat::Md, Some(&bad));
        assert_eq!(status, 2);
        assert!(
            err.contains("bad.md") && err.contains("no tracks table"),
            "{err}"
        );
    }

    #[test]
    fn invalid_dag_exits_one_with_one_error_a_line() {
        let scratch = Scratch::new("invalid");
        let file = scratch.file(
            "request.json",
            r#"{"track": {"id": "t", "name": "T"}, "phases": [{"number": 1, "name": "P"}],
                "tasks": [{"id": "a", "name": "A", "phase": 1, "depends_on": ["b", "ghost"]},
                          {"id": "b", "name": "B", "phase": 1, "depends_on": ["a"]}]}"#,
        );
        let (status, out, err) = run_cli(&file, PlanFormat::Md, None);
        assert_eq!((status, out.as_str()), (1, ""));
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 2, "{err}");
        assert!(lines[0].starts_with("OrphanDepsError: "), "{err}");
        assert!(
            lines[1].starts_with("CycleError: dependency graph contains a cycle: a -> b -> a"),
            "{err}"
        );

        let (status, out, _) = run_cli(&file, PlanFormat::Json, None);
        assert_eq!(status, 1);
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(json["errors"][1]["cycle"], serde_json::json!(["a", "b"]));
    }

    #[test]
    fn usage_and_io_errors_exit_two() {
        let scratch = Scratch::new("usage");
        let missing = scratch.path("missing.json");
        let (status, out, err) = run_cli(&missing, PlanFormat::Md, None);
        assert_eq!((status, out.as_str()), (2, ""));
        assert!(
            err.starts_with("plangate plan: ") && err.contains("missing.json"),
            "{err}"
        );

        let broken = scratch.file("broken.json", "{\"track\": ");
        let (status, _, err) = run_cli(&broken, PlanFormat::Md, None);
        assert_eq!(status, 2);
        assert!(err.contains("line 1"), "{err}");

        let binary = scratch.path("binary.yaml");
        std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
        assert_eq!(run_cli(&binary, PlanFormat::Md, None).0, 2);

        let file = scratch.file("request.json", REQUEST);
        let missing_tracks = scratch.path("tracks.md");
        assert_eq!(run_cli(&file, PlanFormat::Md, Some(&missing_tracks)).0, 2);
    }

    #[test]
    fn broken_output_is_an_io_error() {
        let scratch = Scratch::new("broken");
        let file = scratch.file("request.json", REQUEST);
        let mut err = Vec::new();
        let status = run(&file, PlanFormat::Md, None, &mut Broken, &mut err);
        assert_eq!(status, 2);
        assert!(String::from_utf8(err).unwrap().contains("cannot write"));
    }
}
