//! Wave-dispatch rules for persisted task lists (docs/spec/gating.md §6 and §7).
//!
//! Pure logic over an in-memory read model: no I/O, no clock, no database. The
//! storage layer loads a list's tasks, calls these functions and applies the answer in
//! its own transaction. Everything here must tolerate corrupt stored data (bad
//! indices, cycles, self-loops) without panicking, because it runs after gating and
//! cannot assume gating's guarantees still hold.

mod cascade;
mod claim;
mod next;
mod ready;
mod record;
mod render;
mod render_waves;
mod snapshot;
mod status;

pub use cascade::cascade;
pub use claim::{
    HeldByOther, HolderCheck, MAX_LEASE_SECS, TaskClaim, TaskEventKind, check_holder,
    expired_claims, pick_claim,
};
pub use next::{
    BlockedBy, BlockedTask, Next, NextStep, Remaining, WAIT_RETRY_SECS, next_from_counts,
    next_step, ready_by_counts,
};
pub use ready::{DispatchTask, Ready, ReadyMode, normalize_path, offer_writes, ready};
pub use record::{ListEvent, StoredTask, StoredTaskEvent, StoredTaskList, Team};
pub use render::{GraphFormat, GraphNode, render_graph};
pub use render_waves::{MAX_SUMMARY_WAVES, WaveSummaryGraph, WaveTally, render_wave_summary};
pub use snapshot::{StatusScope, StatusSnapshot, WaveCounts, snapshot};
pub use status::{
    AbandonCategory, IllegalTransition, TaskStatus, Transition, allowed_targets, check_transition,
};

pub use super::wire_strings::ParseEnumError;
