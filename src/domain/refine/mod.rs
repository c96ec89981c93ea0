//! Refine jobs and refine runs (`docs/spec/refine.md`), pure: no files, clock or processes.
//!
//! Flow of a refine job: [`parse_context`] (+ [`parse_plan`]) → [`build_packets`] →
//! [`render_prompt`] per L0, run in [`batches`] by an executor (or [`builtin_review`])
//! → [`refine_phase`] over the [`L0Outcome`]s. A refine run wraps that in
//! [`split_plan`] and [`merge_phase_results`].
//!
//! Decisions where the spec is silent (each is tested):
//! - A context needs a valid `phase_id` (it names the result file). An assignment
//!   holding both `proposed_work_packages` and `work_packages` is rejected as
//!   ambiguous. Text fields must be strings or `null`; file lists arrays of strings.
//! - Known fields are typed; unknown keys are kept and every object is written back
//!   in its input key order (fields new to an object are appended).
//! - L0 answer entries must be objects with string fields (`reason` may be absent);
//!   a bad entry makes the whole answer invalid. A present but different
//!   `assignment_id` is a mismatch even when the rest is broken too.
//! - `wp_id_suffix` matches a WP's `id_suffix`, its `id`, or `{assignment}-{suffix}`.
//!   A `remove` of a WP already removed by conflict resolution is silent; an action
//!   other than `remove` logs `WARNING: Unsupported action '{action}' in
//!   wp_proposal_adjustments for {id} — skipping`.
//! - Conflicts: WPs are taken in natural assignment order; a WP sharing a file with
//!   a WP an earlier assignment kept is removed whole, one log line per (winner,
//!   losing WP); a removed WP claims nothing. WPs of one assignment never conflict.
//!   Shared files are sorted naturally.
//! - A dependency correction appends `Depends on {dep}: {reason}` (or
//!   `Depends on {dep}.`), skipped when that line is already in the notes.
//! - An assignment with no outcome counts as a failed L0; outcomes for unknown ids
//!   log `WARNING: L0 outcome for unknown assignment {id} — ignoring`; of repeated
//!   outcomes for one id the first counts.
//! - Runs: phases without assignments get no context (`empty_phases`); a phase result
//!   that cannot be read counts as a failed phase; `conflict_count` counts (file,
//!   stripped assignment) pairs; emptied WPs stay in place, reported.

mod answer;
mod builtin;
mod input;
mod packet;
mod phase;
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
    Classified, L0Outcome, L0Status, L0Verdict, MAX_PARALLEL, NEXT_BATCH, RefineOutput, batches,
    classify, dependency_line, refine_phase, result_value,
};
pub use run::{FileConflict, MergeOutput, SplitPlan, merge_phase_results, split_plan};
pub use run_result::{PhaseOutcome, RunRequest, merge_run};
