//! Prints a valid generated task list:
//! `cargo run --release --example gen_tasks -- N [SEED] > tasks.json`
//!
//! Output: `{"tasks": [...], "existing_files": [...]}` — the shape of the
//! `POST /v1/task-lists/validate` body, which `plangate validate tasks.json` reads
//! directly (its `existing_files` are used; `--existing-files`/`--repo` add more).

use std::io::{BufWriter, Write};
use std::process::ExitCode;

use plangate::domain::gating::generate::generate_task_list;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(count), seed) = (
        args.first().and_then(|n| n.parse::<usize>().ok()),
        args.get(1).map(|seed| seed.parse::<u64>()),
    ) else {
        eprintln!("usage: gen_tasks N [SEED]");
        return ExitCode::from(2);
    };
    let seed = match seed {
        None => 1,
        Some(Ok(seed)) => seed,
        Some(Err(_)) => {
            eprintln!("usage: gen_tasks N [SEED]  (SEED is an unsigned integer)");
            return ExitCode::from(2);
        }
    };
    let (tasks, existing_files) = generate_task_list(count, seed);
    let document = serde_json::json!({ "tasks": tasks, "existing_files": existing_files });
    let mut out = BufWriter::new(std::io::stdout().lock());
    match serde_json::to_writer(&mut out, &document)
        .map_err(std::io::Error::from)
        .and_then(|()| {
            writeln!(out)?;
            out.flush()
        }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("gen_tasks: {error}");
            ExitCode::from(2)
        }
    }
}
