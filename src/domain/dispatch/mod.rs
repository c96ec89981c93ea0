//! Wave-dispatch rules for persisted task lists (docs/spec/gating.md §6 and §7).
//!
//! Pure logic over an in-memory read model: no I/O, no clock, no database. The
//! storage layer loads a list's tasks, calls these functions and applies the answer in
//! its own transaction. Everything here must tolerate corrupt stored data (bad
//! indices, cycles, self-loops) without panicking, because it runs after gating and
//! cannot assume gating's guarantees still hold.

use std::fmt;

/// Implements `ALL`, `as_str`, `parse`, `Display` and `FromStr` for a fieldless enum
/// from one `Variant => "wire"` table, so the strings cannot drift between methods.
/// The strings must equal the serde names; a test per enum checks that.
macro_rules! wire_strings {
    (@unit $variant:ident) => { () };
    ($ty:ident, $kind:literal, { $($variant:ident => $s:literal),+ $(,)? }) => {
        impl $ty {
            /// Every variant, in declaration order.
            pub const ALL: [$ty; <[()]>::len(&[$(wire_strings!(@unit $variant)),+])] =
                [$($ty::$variant),+];

            /// The wire (serde) name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $s),+
                }
            }

            /// Inverse of [`Self::as_str`]: exact, case-sensitive, like serde.
            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $($s => Some($ty::$variant),)+
                    _ => None,
                }
            }
        }

        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $ty {
            type Err = $crate::domain::dispatch::ParseEnumError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s).ok_or_else(|| $crate::domain::dispatch::ParseEnumError {
                    kind: $kind,
                    value: s.to_owned(),
                    expected: &[$($s),+],
                })
            }
        }
    };
}

mod cascade;
mod claim;
mod next;
mod ready;
mod render;
mod snapshot;
mod status;

pub use cascade::cascade;
pub use claim::{
    HeldByOther, HolderCheck, Lease, MAX_LEASE_SECS, TaskEventKind, check_holder, expired_leases,
    pick_claim,
};
pub use next::{BlockedBy, BlockedTask, Next, NextStep, Remaining, WAIT_RETRY_SECS, next_step};
pub use ready::{DispatchTask, Ready, ReadyMode, ready};
pub use render::{GraphFormat, GraphNode, render_graph};
pub use snapshot::{StatusScope, StatusSnapshot, WaveCounts, snapshot};
pub use status::{
    AbandonCategory, IllegalTransition, TaskStatus, Transition, allowed_targets, check_transition,
};

/// An unknown string for one of this module's wire enums (e.g. `?mode=` or a
/// `status` field), naming the accepted values so a 400/422 message is actionable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}; expected one of: {}", ExpectedList(.expected))]
pub struct ParseEnumError {
    /// What was being parsed, e.g. `"task status"`.
    pub kind: &'static str,
    /// The rejected input, verbatim.
    pub value: String,
    /// Every accepted spelling.
    pub expected: &'static [&'static str],
}

/// Formats `["a", "b"]` as `a, b` without allocating.
struct ExpectedList<'a>(&'a [&'a str]);

impl fmt::Display for ExpectedList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(s)?;
        }
        Ok(())
    }
}
