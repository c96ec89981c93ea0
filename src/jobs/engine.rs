//! The refine engine: runs one phase's L0s in batches through an executor and
//! reports each step to a [`JobSink`] — the database for a server job (fenced
//! writes), the terminal for `plangate refine`. The decisions (classification, log
//! lines, conflicts, applying) are the pure `domain::refine`; this module only adds
//! processes, concurrency and cancellation.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use super::l0_span::{l0_span, record_l0};

use crate::agents::{Executor, L0Request, L0Run, RateFeedback};
use crate::domain::refine::{
    Assignment, Classified, L0Outcome, NEXT_BATCH, PhaseContext, PlanDocument, RefineOutput,
    batches, build_packets, classify, refine_phase, refine_phase_stopped, render_prompt,
};
use crate::domain::storable::replace_nul;
use crate::domain::usage::BudgetAction;

/// Why the engine stopped before producing a result.
#[derive(Debug, thiserror::Error)]
pub enum Stop {
    /// The kill switch fired (job cancel, lost lease, end of the shutdown grace):
    /// running L0s were killed and nothing of them stored.
    #[error("stopped: running L0s were killed")]
    Killed,
    /// Draining for shutdown: the next batch was not started.
    #[error("stopped before the next batch (shutting down)")]
    Drained,
    /// The sink refused a write (lost lease, database down for too long).
    #[error("{0}")]
    Sink(String),
    /// A budget was reached: no further L0 was started. `output` is the phase
    /// refined with the L0s that finished (the others leave their assignments
    /// unchanged); `new_lines` what its log adds.
    #[error("{reason}")]
    Budget {
        reason: String,
        output: Box<RefineOutput>,
        new_lines: Vec<String>,
    },
}

/// Where the engine reports. Errors stop the job ([`Stop::Sink`]).
pub trait JobSink {
    /// A batch's L0s (those without a stored outcome) are about to start.
    fn batch_started(
        &mut self,
        assignment_ids: &[String],
    ) -> impl Future<Output = Result<(), String>> + Send;
    /// L0s ended (all that ended together: one write for them); `log` is the whole
    /// log so far, `new_lines` what they added.
    fn l0s_finished(
        &mut self,
        finished: &[FinishedL0Run],
        log: &[String],
        new_lines: &[String],
    ) -> impl Future<Output = Result<(), String>> + Send;
    /// Lines not tied to one L0 (`--- next batch ---`).
    fn log(
        &mut self,
        log: &[String],
        new_lines: &[String],
    ) -> impl Future<Output = Result<(), String>> + Send;
    /// Asked before each batch and after each write of finished L0s: `Some(why)`
    /// once a budget is spent (then no further L0 starts).
    fn budget_reached(&mut self) -> impl Future<Output = Result<Option<String>, String>> + Send;
    /// Whether each L0 start is asked of [`JobSink::gate_start`] (a budget applies);
    /// otherwise a batch's starts are reported together by `batch_started`.
    fn gates_starts(&self) -> bool {
        false
    }
    /// Asked before each L0 starts when [`JobSink::gates_starts`]: stores the start
    /// when every budget can cover one more call (docs/jobs.md, "Budgets").
    fn gate_start(
        &mut self,
        _assignment_id: &str,
        _prompt_bytes: usize,
    ) -> impl Future<Output = Result<Gate, String>> + Send {
        async { Ok(Gate::Start) }
    }
    /// Who hears what the provider's answers say about its rate limits.
    fn rate_feedback(&self) -> Option<Arc<dyn RateFeedback>> {
        None
    }
    /// Asked once every L0 of the job ended: `Some(why)` when the spend went over
    /// the request's budget, so the job cannot read plain success.
    fn budget_overrun(&mut self) -> impl Future<Output = Result<Option<String>, String>> + Send {
        async { Ok(None) }
    }
    /// When the writes this sink holds back must be stored ([`JobSink::flush`]);
    /// `None` when it holds none. The engine calls `flush` then, even while every
    /// L0 is still running.
    fn flush_due(&self) -> Option<tokio::time::Instant> {
        None
    }
    /// Stores what the sink holds back.
    fn flush(&mut self) -> impl Future<Output = Result<(), String>> + Send {
        async { Ok(()) }
    }
}

/// The budget gate's answer for one L0 start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Its start is stored: start it.
    Start,
    /// Not now: ask again once a running call (of this job or another one sharing
    /// a budget) ends, or after the time given (a rate limit's queue).
    Wait(Option<Duration>),
    /// A budget cannot cover one more call: start no further L0.
    Stop(String),
    /// This L0 ends failed without starting (it waited longer than its rate
    /// limit's `max_wait_secs`): why.
    Fail(String),
}

/// How often a job waiting at the gate asks again when none of its own L0s runs
/// (the calls it waits for belong to other jobs of its run or project).
const GATE_POLL: Duration = Duration::from_millis(200);

/// Why a killed L0's record says it failed.
const KILLED_BY_BUDGET: &str = "killed: a budget was reached (budget_action \"kill\")";

/// An L0 that ended, with its judgement.
pub struct FinishedL0Run {
    pub assignment_id: String,
    pub run: L0Run,
    pub classified: Classified,
    pub elapsed: Duration,
    /// The size of the prompt it was sent, in bytes.
    pub prompt_bytes: usize,
}

/// The inputs of one refine job, parsed.
#[derive(Debug, Clone)]
pub struct RefineJob {
    pub job_id: Uuid,
    pub context: PhaseContext,
    pub plan: Option<PlanDocument>,
    /// The task file every L0 is pointed at (absolute; server-side copy for inline text).
    pub task_file: Option<String>,
}

/// How the engine runs: prompt template, L0 concurrency (clamped to 1..=6) and
/// what a reached budget does to the L0s still running.
pub struct EngineConfig<'a> {
    pub template: &'a str,
    pub max_parallel: usize,
    pub budget_action: BudgetAction,
    /// The job's attempt (claim number), on each L0's span.
    pub attempt: i32,
}

/// Kill switch and drain switch of one run.
#[derive(Clone, Default)]
pub struct Switches {
    /// Kill running L0s and stop.
    pub kill: CancellationToken,
    /// Start no further batch.
    pub drain: CancellationToken,
}

impl Switches {
    /// The stop a fired switch asks for, the kill first (the worker hands the job
    /// back on either).
    fn fired(&self) -> Option<Stop> {
        if self.kill.is_cancelled() {
            Some(Stop::Killed)
        } else if self.drain.is_cancelled() {
            Some(Stop::Drained)
        } else {
            None
        }
    }
}

/// Runs the L0s that have no stored outcome (`prior`), then the L1 step. `log` is
/// the log so far (a resumed job continues it). The returned output's `log` is the
/// final log in the seed's order; lines it holds beyond `log` are returned too.
pub async fn run_refine(
    job: &RefineJob,
    executor: Arc<Executor>,
    config: &EngineConfig<'_>,
    prior: HashMap<String, L0Outcome>,
    mut log: Vec<String>,
    sink: &mut impl JobSink,
    switches: &Switches,
) -> Result<(RefineOutput, Vec<String>), Stop> {
    let packets = build_packets(&job.context, job.plan.as_ref());
    let phase_assignments: Arc<[Assignment]> = job.context.assignments.clone().into();
    let ids: Vec<String> = packets
        .iter()
        .map(|p| p.target_assignment_id.clone())
        .collect();
    let mut packets: HashMap<String, _> = packets
        .into_iter()
        .map(|p| (p.target_assignment_id.clone(), Arc::new(p)))
        .collect();
    let mut outcomes: Vec<(String, L0Outcome)> = prior.into_iter().collect();
    let mut nul_warnings: Vec<String> = Vec::new();

    for (i, batch) in batches(&ids, config.max_parallel).into_iter().enumerate() {
        if i > 0 && log.iter().filter(|l| *l == NEXT_BATCH).count() < i {
            log.push(NEXT_BATCH.to_owned());
            let new = [NEXT_BATCH.to_owned()];
            sink.log(&log, &new).await.map_err(Stop::Sink)?;
        }
        let todo: Vec<String> = batch
            .into_iter()
            .filter(|id| !outcomes.iter().any(|(o, _)| o == id))
            .collect();
        if todo.is_empty() {
            continue;
        }
        if let Some(stop) = switches.fired() {
            return Err(stop);
        }
        // With a budget, each L0 start passes the gate (one locked transaction
        // that also stores the start); without, the batch's starts are one write.
        let gated = sink.gates_starts();
        if !gated {
            if let Some(reason) = sink.budget_reached().await.map_err(Stop::Sink)? {
                return Err(budget_stop(job, config, &outcomes, &log, reason));
            }
            sink.batch_started(&todo).await.map_err(Stop::Sink)?;
        }
        let mut waiting: std::collections::VecDeque<String> = todo.into();
        let mut budget_stopped: Option<String> = None;
        let mut running: RunningL0s = JoinSet::new();
        // The front L0's prompt, rendered once however often it asks the gate.
        let mut front_prompt: Option<(String, String)> = None;
        let mut wait_hint: Option<Duration>;
        loop {
            wait_hint = None;
            while budget_stopped.is_none()
                && switches.fired().is_none()
                && let Some(id) = waiting.front()
            {
                let Some(packet) = packets.get(id) else {
                    waiting.pop_front();
                    continue;
                };
                if front_prompt.as_ref().is_none_or(|(f, _)| f != id) {
                    front_prompt = Some((id.clone(), render_prompt(config.template, packet)));
                }
                let prompt_bytes = front_prompt.as_ref().map_or(0, |(_, p)| p.len());
                if gated {
                    match sink.gate_start(id, prompt_bytes).await {
                        Ok(Gate::Start) => {}
                        Ok(Gate::Wait(hint)) => {
                            wait_hint = hint;
                            break;
                        }
                        Ok(Gate::Stop(reason)) => budget_stopped = Some(reason),
                        Ok(Gate::Fail(reason)) => {
                            let id = id.clone();
                            waiting.pop_front();
                            packets.remove(&id);
                            let mut ended = EndedL0s::default();
                            let run = L0Run::failed(reason, 0);
                            ended.judge(id, run, Duration::ZERO, prompt_bytes, &mut nul_warnings);
                            if let Err(e) = ended.store(sink, &mut log, &mut outcomes).await {
                                return Err(stop_running(running, switches, Stop::Sink(e)).await);
                            }
                            continue;
                        }
                        Err(e) => return Err(stop_running(running, switches, Stop::Sink(e)).await),
                    }
                    if budget_stopped.is_some() {
                        break;
                    }
                }
                let Some(id) = waiting.pop_front() else { break };
                let Some(packet) = packets.remove(&id) else {
                    continue;
                };
                let prompt = match front_prompt.take() {
                    Some((f, p)) if f == id => p,
                    _ => render_prompt(config.template, &packet),
                };
                let request = L0Request {
                    job_id: job.job_id,
                    phase_id: job.context.phase_id.clone(),
                    assignment_id: id.clone(),
                    task_file: job.task_file.clone(),
                    prompt,
                    packet,
                    phase_assignments: phase_assignments.clone(),
                    rate_feedback: sink.rate_feedback(),
                };
                let executor = executor.clone();
                let kill = switches.kill.clone();
                // Made here, in the job's span: the spawned task is its own root.
                let span = l0_span(&executor, &id, config.attempt);
                running.spawn(async move {
                    let started = Instant::now();
                    let run = executor.run(&request, &kill).instrument(span.clone()).await;
                    record_l0(&span, &executor, &request.assignment_id, &run);
                    let prompt_bytes = request.prompt.len();
                    (request.assignment_id, run, started.elapsed(), prompt_bytes)
                });
            }
            if let Some(reason) = &budget_stopped
                && config.budget_action == BudgetAction::Kill
                && !running.is_empty()
            {
                let reason = reason.clone();
                return Err(kill_for_budget(
                    running, switches, sink, job, config, outcomes, log, reason,
                )
                .await);
            }
            if running.is_empty() {
                if let Some(reason) = budget_stopped {
                    return Err(budget_stop(job, config, &outcomes, &log, reason));
                }
                if waiting.is_empty() {
                    break;
                }
                if let Some(stop) = switches.fired() {
                    return Err(stop);
                }
                // Waiting for calls of other jobs that share a budget: ask again.
                tokio::select! {
                    () = tokio::time::sleep(wait_hint.unwrap_or(GATE_POLL)) => {}
                    () = switches.kill.cancelled() => {}
                }
                continue;
            }
            // Wait for the next L0 to end, storing what the sink holds back when it
            // is due (a start or an end is stored within its window even while the
            // other L0s run for minutes), and asking the gate again now and then
            // while L0s wait for it (what they wait for may end in another job).
            let poll = (gated && budget_stopped.is_none() && !waiting.is_empty())
                .then(|| tokio::time::Instant::now() + wait_hint.unwrap_or(GATE_POLL));
            let next = tokio::select! {
                joined = running.join_next() => joined,
                () = at(sink.flush_due()) => {
                    if let Err(e) = sink.flush().await {
                        return Err(stop_running(running, switches, Stop::Sink(e)).await);
                    }
                    continue;
                }
                () = at(poll) => continue,
            };
            let Some(first) = next else { continue };
            // The L0s that ended together (in-process ones, microseconds apart)
            // are reported together.
            let mut joined = vec![first];
            while let Some(more) = running.try_join_next() {
                joined.push(more);
            }
            let mut ended = EndedL0s::default();
            let mut killed = false;
            for j in joined {
                match j {
                    Ok((id, Ok(run), elapsed, prompt_bytes)) => {
                        ended.judge(id, run, elapsed, prompt_bytes, &mut nul_warnings);
                    }
                    Ok((_, Err(_cancelled), _, _)) => killed = true,
                    // An executor panicked: a bug, but it costs only this L0.
                    Err(e) => tracing::error!(error = %e, "an L0 task panicked"),
                }
            }
            let finished_now = match ended.store(sink, &mut log, &mut outcomes).await {
                Ok(stored) => stored,
                Err(e) => return Err(stop_running(running, switches, Stop::Sink(e)).await),
            };
            if killed {
                // Killed: the others are being killed too; collect them and stop.
                return Err(stop_running(running, switches, Stop::Killed).await);
            }
            if !finished_now {
                continue;
            }
            // Running L0s finish (their cost is committed) unless the request
            // asked to kill them; none starts after this batch either way.
            if config.budget_action == BudgetAction::Kill && !running.is_empty() {
                match sink.budget_reached().await {
                    Ok(Some(reason)) => {
                        return Err(kill_for_budget(
                            running, switches, sink, job, config, outcomes, log, reason,
                        )
                        .await);
                    }
                    Ok(None) => {}
                    Err(e) => return Err(stop_running(running, switches, Stop::Sink(e)).await),
                }
            }
        }
    }

    // Every L0 ran: a spend above the budget still cannot read plain success.
    if let Some(reason) = sink.budget_overrun().await.map_err(Stop::Sink)? {
        return Err(budget_stop(job, config, &outcomes, &log, reason));
    }
    let mut output = refine_phase(&job.context, &outcomes, config.max_parallel);
    // The final log replaces the live one: keep the NUL warnings in it.
    output.log.splice(0..0, nul_warnings);
    let extra = lines_beyond(&output.log, &log);
    Ok((output, extra))
}

/// The budget stop: the phase refined with the outcomes stored so far.
fn budget_stop(
    job: &RefineJob,
    config: &EngineConfig<'_>,
    outcomes: &[(String, L0Outcome)],
    log: &[String],
    reason: String,
) -> Stop {
    let output = refine_phase_stopped(&job.context, outcomes, config.max_parallel, &reason);
    let new_lines = lines_beyond(&output.log, log);
    Stop::Budget {
        reason,
        output: Box::new(output),
        new_lines,
    }
}

/// Sleeps until `due`, or forever when there is none (a `select!` arm that
/// never fires).
async fn at(due: Option<tokio::time::Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

/// L0s that ended together, judged, and the log lines they add.
#[derive(Default)]
struct EndedL0s {
    finished: Vec<FinishedL0Run>,
    new_lines: Vec<String>,
}

impl EndedL0s {
    /// Judges an L0 that ended: its log line (and a warning when its output held
    /// NUL) added to `new_lines`.
    fn judge(
        &mut self,
        id: String,
        mut run: L0Run,
        elapsed: Duration,
        prompt_bytes: usize,
        nul_warnings: &mut Vec<String>,
    ) {
        if make_storable(&mut run) {
            let warning = format!(
                "WARNING: L0 {id} output held U+0000 (NUL), which cannot be \
                 stored; each is kept as U+FFFD"
            );
            nul_warnings.push(warning.clone());
            self.new_lines.push(warning);
        }
        let classified = classify(&id, &run.outcome);
        self.new_lines.extend(classified.log_line(&id));
        self.finished.push(FinishedL0Run {
            assignment_id: id,
            run,
            classified,
            elapsed,
            prompt_bytes,
        });
    }

    /// Stores the L0s (when any ended) with their lines added to `log`, then adds
    /// their outcomes; true when any was stored.
    async fn store(
        self,
        sink: &mut impl JobSink,
        log: &mut Vec<String>,
        outcomes: &mut Vec<(String, L0Outcome)>,
    ) -> Result<bool, String> {
        if self.finished.is_empty() {
            return Ok(false);
        }
        log.extend(self.new_lines.iter().cloned());
        sink.l0s_finished(&self.finished, log, &self.new_lines)
            .await?;
        outcomes.extend(
            self.finished
                .into_iter()
                .map(|f| (f.assignment_id, f.run.outcome)),
        );
        Ok(true)
    }
}

/// `budget_action: "kill"`: kills the running L0s and stores each as a call that
/// ended `failed` with unknown usage — it was started, so it counts in `calls`
/// and `untracked_calls`, and its cost is unknown (docs/jobs.md, "Budgets") —
/// then the budget stop.
#[allow(clippy::too_many_arguments)]
async fn kill_for_budget(
    mut running: RunningL0s,
    switches: &Switches,
    sink: &mut impl JobSink,
    job: &RefineJob,
    config: &EngineConfig<'_>,
    mut outcomes: Vec<(String, L0Outcome)>,
    mut log: Vec<String>,
    reason: String,
) -> Stop {
    switches.kill.cancel();
    let mut ended = EndedL0s::default();
    while let Some(joined) = running.join_next().await {
        match joined {
            Ok((id, run, elapsed, prompt_bytes)) => {
                // One the kill reached ends failed, with the budget as its reason.
                let run =
                    run.unwrap_or_else(|_killed| L0Run::failed(KILLED_BY_BUDGET.to_owned(), 1));
                ended.judge(id, run, elapsed, prompt_bytes, &mut Vec::new());
            }
            Err(e) => tracing::error!(error = %e, "an L0 task panicked"),
        }
    }
    if let Err(e) = ended.store(sink, &mut log, &mut outcomes).await {
        return Stop::Sink(e);
    }
    budget_stop(job, config, &outcomes, &log, reason)
}

type RunningL0s = JoinSet<(
    String,
    Result<L0Run, crate::agents::Cancelled>,
    Duration,
    usize,
)>;

/// Kills what still runs, waits for it to be reaped, and returns `stop`.
async fn stop_running(mut running: RunningL0s, switches: &Switches, stop: Stop) -> Stop {
    switches.kill.cancel();
    while running.join_next().await.is_some() {}
    stop
}

/// The lines of `fin` that `live` does not hold (as a multiset): what the final
/// log adds to what was streamed while the L0s ran.
pub fn lines_beyond(fin: &[String], live: &[String]) -> Vec<String> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for l in live {
        *seen.entry(l.as_str()).or_default() += 1;
    }
    fin.iter()
        .filter(|l| match seen.get_mut(l.as_str()) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .cloned()
        .collect()
}

/// The first `max` bytes of `text` (on a char boundary), for record excerpts.
pub fn excerpt(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Replaces U+0000 in what an L0 printed (raw, or escaped in its JSON) by U+FFFD, so
/// every write of the job succeeds on Postgres too (`domain::storable`). Whether
/// anything changed.
fn make_storable(run: &mut L0Run) -> bool {
    let text = match &mut run.outcome {
        L0Outcome::Answer(text) | L0Outcome::Failed(text) => text,
    };
    let mut changed = false;
    if let Some(clean) = replace_nul(text) {
        *text = clean;
        changed = true;
    }
    if let Some(clean) = run.stderr.as_deref().and_then(replace_nul) {
        run.stderr = Some(clean);
        changed = true;
    }
    changed
}

/// The outcome as stored for resuming (`{"answer": text}` / `{"failed": reason}`).
pub fn outcome_value(outcome: &L0Outcome) -> Value {
    serde_json::to_value(outcome).unwrap_or(Value::Null)
}

pub fn outcome_from_value(value: &Value) -> Option<L0Outcome> {
    serde_json::from_value(value.clone()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_beyond_is_a_multiset_difference() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            lines_beyond(&s(&["a", "b", "a", "c"]), &s(&["a", "b"])),
            s(&["a", "c"])
        );
        assert!(lines_beyond(&s(&["a"]), &s(&["a", "a"])).is_empty());
    }

    #[test]
    fn excerpt_cuts_on_char_boundaries() {
        assert_eq!(excerpt("héllo", 2), "h");
        assert_eq!(excerpt("abc", 10), "abc");
    }

    #[test]
    fn outcomes_round_trip_through_json() {
        for o in [L0Outcome::Answer("x".into()), L0Outcome::Failed("y".into())] {
            assert_eq!(outcome_from_value(&outcome_value(&o)), Some(o));
        }
    }
}
