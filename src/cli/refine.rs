//! `plangate refine CONTEXT_FILE REFINED_PLAN_FILE RUN_DIR` and
//! `plangate refine-run PLAN_FILE RUN_DIR`: the refine engine in-process, with no
//! server and no database. Log lines go to stdout as they happen, progress lines
//! to stderr; `refine` ends with `phase_refined_path = {absolute path}`.
//!
//! Exit status: 0 done (also when L0s failed: their assignments stay unchanged);
//! 1 a phase could not be finished (refine-run) or the result could not be
//! written; 2 usage error, unreadable or invalid input (`FATAL: failed to parse
//! {file}: …`), unknown executor.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::agents::{Executor, Executors};
use crate::config::Settings;
use crate::domain::job::L0State;
use crate::domain::refine::{
    Classified, PhaseContext, assignments_from_value, merge_phase_results, parse_context,
    parse_plan, plan_from_value, split_plan,
};
use crate::domain::usage::UsageTotals;
use crate::jobs::engine::{EngineConfig, FinishedL0Run, JobSink, RefineJob, Switches, run_refine};
use crate::jobs::output::{write_json_atomic, write_result};

pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILED: i32 = 1;
pub const EXIT_USAGE: i32 = 2;

/// Prints what the engine reports. `prefix` tells phases apart in a run.
struct TerminalSink {
    prefix: String,
    total: usize,
    done: Arc<AtomicUsize>,
    /// What the L0s cost (shared by the phases of a run).
    usage: Arc<Mutex<UsageTotals>>,
}

impl TerminalSink {
    fn print_lines(&self, lines: &[String]) {
        let mut out = std::io::stdout().lock();
        for line in lines {
            let _ = writeln!(out, "{}{line}", self.prefix);
        }
    }
}

impl JobSink for TerminalSink {
    async fn batch_started(&mut self, _assignment_ids: &[String]) -> Result<(), String> {
        Ok(())
    }

    async fn l0s_finished(
        &mut self,
        finished: &[FinishedL0Run],
        _log: &[String],
        new_lines: &[String],
    ) -> Result<(), String> {
        self.print_lines(new_lines);
        if let Ok(mut usage) = self.usage.lock() {
            for f in finished {
                usage.add(&f.run.usage, f.prompt_bytes);
            }
        }
        for f in finished {
            let n = self.done.fetch_add(1, Ordering::SeqCst) + 1;
            let status = match &f.classified {
                Classified::NotStarted(_) => L0State::NotStarted,
                classified => L0State::Status(classified.status()),
            }
            .as_str();
            eprintln!(
                "{}[{n}/{}] L0 {} {status} in {:.1} s",
                self.prefix,
                self.total,
                f.assignment_id,
                f.elapsed.as_secs_f64()
            );
        }
        Ok(())
    }

    async fn log(&mut self, _log: &[String], new_lines: &[String]) -> Result<(), String> {
        self.print_lines(new_lines);
        Ok(())
    }

    /// The CLI takes no budget: it runs what it was given.
    async fn budget_reached(&mut self) -> Result<Option<String>, String> {
        Ok(None)
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn executor(settings: &Settings, name: Option<&str>) -> Result<Arc<Executor>, String> {
    let executors = Executors::from_settings(settings).map_err(|e| e.to_string())?;
    executors.resolve(name).ok_or_else(|| {
        format!(
            "unknown executor {:?} (configured: {})",
            name.unwrap_or(&settings.default_executor),
            executors.names().collect::<Vec<_>>().join(", ")
        )
    })
}

/// Runs one phase and writes `{run_dir}/refine_contexts/{phase}_result.json`.
async fn refine_one(
    settings: &Settings,
    executor: Arc<Executor>,
    context: PhaseContext,
    plan: Option<crate::domain::refine::PlanDocument>,
    run_dir: &Path,
    prefix: String,
    usage: Arc<Mutex<UsageTotals>>,
) -> Result<(PathBuf, Value), String> {
    let task_file = context.task_file_path.clone();
    let total = context.assignments.len();
    let job = RefineJob {
        job_id: uuid::Uuid::now_v7(),
        context,
        plan,
        task_file,
    };
    let mut sink = TerminalSink {
        prefix,
        total,
        done: Arc::new(AtomicUsize::new(0)),
        usage,
    };
    let config = EngineConfig {
        template: &settings.prompt_template,
        max_parallel: settings.l0_concurrency,
        budget_action: Default::default(),
        attempt: 1,
    };
    let switches = Switches::default();
    let interrupt = switches.kill.clone();
    let ctrl_c = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            interrupt.cancel();
        }
    });
    let outcome = run_refine(
        &job,
        executor,
        &config,
        HashMap::new(),
        Vec::new(),
        &mut sink,
        &switches,
    )
    .await;
    ctrl_c.abort();
    let (output, new_lines) = outcome.map_err(|e| format!("interrupted: {e}"))?;
    sink.print_lines(&new_lines);
    let path = write_result(run_dir, &job.context.phase_id, &output.result)
        .map_err(|e| format!("cannot write the result under {}: {e}", run_dir.display()))?;
    Ok((path, output.result))
}

/// The command's runtime, or `None` once the failure is printed under `command`.
fn runtime(command: &str) -> Option<tokio::runtime::Runtime> {
    let built = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    built
        .map_err(|e| eprintln!("{command}: cannot start the runtime: {e}"))
        .ok()
}

/// The command's input, or `None` once its error is printed.
fn reported<T>(input: Result<T, String>) -> Option<T> {
    input.map_err(|message| eprintln!("{message}")).ok()
}

/// `plangate refine`.
pub fn refine(
    settings: &Settings,
    context_file: &Path,
    plan_file: &Path,
    run_dir: &Path,
    executor_name: Option<&str>,
) -> i32 {
    let input = (|| {
        let context = parse_context(&context_file.display().to_string(), &read(context_file)?)
            .map_err(|e| e.to_string())?;
        let plan = parse_plan(&plan_file.display().to_string(), &read(plan_file)?)
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((context, plan, executor(settings, executor_name)?))
    })();
    let Some((context, plan, executor)) = reported(input) else {
        return EXIT_USAGE;
    };
    let Some(rt) = runtime("plangate refine") else {
        return EXIT_USAGE;
    };
    let usage = Arc::new(Mutex::new(UsageTotals::default()));
    let result = rt.block_on(refine_one(
        settings,
        executor,
        context,
        Some(plan),
        run_dir,
        String::new(),
        usage.clone(),
    ));
    print_usage(&usage);
    match result {
        Ok((path, _)) => {
            println!("phase_refined_path = {}", path.display());
            EXIT_OK
        }
        Err(message) => {
            eprintln!("plangate refine: {message}");
            EXIT_FAILED
        }
    }
}

/// `plangate refine-run`: split, run the phases in parallel (at most
/// `PLANGATE_WORKERS` at once), merge.
pub fn refine_run(
    settings: &Settings,
    plan_file: &Path,
    run_dir: &Path,
    executor_name: Option<&str>,
) -> i32 {
    let source = plan_file.display().to_string();
    let input = (|| {
        let text = read(plan_file)?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| format!("FATAL: failed to parse {source}: {e}"))?;
        // The file may hold the plan itself or a whole `POST /v1/refine-runs` body.
        let plan_value = value.get("plan").cloned().unwrap_or(value);
        let plan = plan_from_value(&source, &plan_value).map_err(|e| e.to_string())?;
        let assignments = match plan_value.get("assignments") {
            Some(v) => {
                assignments_from_value(&source, "assignments", v).map_err(|e| e.to_string())?
            }
            None => {
                return Err(format!(
                    "FATAL: failed to parse {source}: assignments: missing"
                ));
            }
        };
        Ok::<_, String>((plan, assignments, executor(settings, executor_name)?))
    })();
    let Some((plan, assignments, executor)) = reported(input) else {
        return EXIT_USAGE;
    };
    let split = split_plan(&plan, &assignments);
    for id in &split.unassigned {
        eprintln!("WARNING: assignment {id} names no phase of the plan — left out of the run");
    }
    for id in &split.duplicates {
        eprintln!("WARNING: assignment {id} appears twice in its phase — the first is kept");
    }
    if split.contexts.is_empty() {
        eprintln!("FATAL: failed to parse {source}: no phase has assignments");
        return EXIT_USAGE;
    }
    let contexts_dir = run_dir.join("refine_contexts");
    let task_file = match plan.extra.get("task").and_then(Value::as_str) {
        Some(task) => match write_text(&contexts_dir, "task.md", task) {
            Ok(path) => Some(path.display().to_string()),
            Err(e) => {
                eprintln!("plangate refine-run: cannot write the task file: {e}");
                return EXIT_FAILED;
            }
        },
        None => None,
    };
    let mut contexts = split.contexts;
    for context in &mut contexts {
        context.task_file_path = task_file.clone();
        let name = format!("context_{}.json", context.phase_id);
        if let Err(e) = write_json_atomic(&contexts_dir, &name, &context.to_value()) {
            eprintln!("plangate refine-run: cannot write {name}: {e}");
            return EXIT_FAILED;
        }
    }
    let Some(rt) = runtime("plangate refine-run") else {
        return EXIT_USAGE;
    };
    let started = Instant::now();
    let phases = contexts.len();
    let usage = Arc::new(Mutex::new(UsageTotals::default()));
    let results = rt.block_on(async {
        let gate = Arc::new(Semaphore::new(settings.workers as usize));
        let finished = Arc::new(AtomicUsize::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for context in contexts {
            let gate = gate.clone();
            let finished = finished.clone();
            let settings = settings.clone();
            let executor = executor.clone();
            let plan = plan.clone();
            let run_dir = run_dir.to_path_buf();
            let usage = usage.clone();
            tasks.spawn(async move {
                let _permit = gate.acquire_owned().await;
                let phase_id = context.phase_id.clone();
                let prefix = format!("[{phase_id}] ");
                let outcome = refine_one(
                    &settings,
                    executor,
                    context,
                    Some(plan),
                    &run_dir,
                    prefix,
                    usage,
                )
                .await;
                let n = finished.fetch_add(1, Ordering::SeqCst) + 1;
                match &outcome {
                    Ok(_) => eprintln!("phase {phase_id} done ({n}/{phases} phases)"),
                    Err(e) => eprintln!("phase {phase_id} failed: {e} ({n}/{phases} phases)"),
                }
                (phase_id, outcome.ok().map(|(_, result)| result))
            });
        }
        let mut results = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            if let Ok(r) = joined {
                results.push(r);
            }
        }
        results
    });
    print_usage(&usage);
    let merged = merge_phase_results(&results, &assignments);
    let mut document = merged.result_value();
    if let Some(object) = document.as_object_mut() {
        object.insert("duplicates".into(), json!(merged.duplicates));
        object.insert("emptied_work_packages".into(), json!(merged.emptied_wps));
        object.insert("failed_phases".into(), json!(merged.failed_phases));
        object.insert("skipped".into(), json!(split.unassigned));
    }
    for c in &merged.conflicts {
        println!(
            "FILE CONFLICT: {} kept by {} — stripped from {}",
            c.file,
            c.owner,
            c.stripped_from.join(", ")
        );
    }
    match write_json_atomic(run_dir, "refined_assignments.json", &document) {
        Ok(path) => {
            eprintln!(
                "{phases} phases in {:.1} s, {} conflicts",
                started.elapsed().as_secs_f64(),
                merged.conflict_count
            );
            println!("refined_assignments_path = {}", path.display());
            if merged.failed_phases.is_empty() {
                EXIT_OK
            } else {
                EXIT_FAILED
            }
        }
        Err(e) => {
            eprintln!("plangate refine-run: cannot write refined_assignments.json: {e}");
            EXIT_FAILED
        }
    }
}

/// The usage totals, on stderr (stdout ends with the result path).
fn print_usage(usage: &Mutex<UsageTotals>) {
    if let Ok(usage) = usage.lock() {
        eprintln!("{}", usage.summary());
    }
}

fn write_text(dir: &Path, name: &str, text: &str) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.canonicalize()?.join(name);
    std::fs::write(&path, text)?;
    Ok(path)
}
