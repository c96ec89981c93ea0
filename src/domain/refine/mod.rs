//! Refine jobs and refine runs (`docs/spec/refine.md`), pure: no files, clock or processes.
//!
//! Flow of a refine job: [`parse_context`] (+ [`parse_plan`]) → [`build_packets`] →
//! [`render_prompt`] per L0, run in [`batches`] by an executor (or [`builtin_review`])
//! → [`refine_phase`] over the [`L0Outcome`]s. A refine run wraps that in
//! [`split_plan`] and [`merge_phase_results`].
//!
//! Decisions where the spec is silent (each is tested): docs/decisions.md, "The refine
//! step".

mod answer;
mod builtin;
mod input;
mod packet;
mod phase;
mod record;
mod run;
mod run_result;

pub use answer::{
    AnswerError, Change, DependencyCorrection, L0Answer, WpAdjustment, format_l0_answer,
    parse_l0_answer,
};
pub use builtin::{builtin_answer, builtin_review};
pub use input::{
    Assignment, EDITABLE_FIELDS, PeerSummary, PhaseContext, PhaseElaborated, PlanDocument,
    RefineInputError, WorkPackage, WpKey, assignments_from_value, context_from_value, is_valid_id,
    parse_assignments, parse_context, parse_plan, plan_from_value,
};
pub use packet::{
    DEFAULT_PROMPT_TEMPLATE, L0_INSTRUCTIONS, L0Packet, build_packets, render_prompt,
};
pub use phase::{
    Classified, L0ErrorCode, L0Outcome, L0Status, L0Verdict, MAX_PARALLEL, NEXT_BATCH,
    RefineOutput, batches, classify, dependency_line, refine_phase, refine_phase_stopped,
    result_value,
};
pub use record::{ExecutorKind, JobError, JobKind, JobProgress, StoredJob, StoredL0, StoredRun};
pub use run::{FileConflict, MergeOutput, SplitPlan, merge_phase_results, split_plan};
pub use run_result::{PhaseOutcome, RunRequest, merge_run};
