//! Task statuses, abandon categories and the transition table (docs/spec/gating.md §7).

use std::fmt;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Lifecycle of one persisted task: `pending → running → done | failed`, and any
/// non-terminal task may become `abandoned`.
#[derive(Serialize, Deserialize, ToSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Pending,
    Running,
    Done,
    Failed,
    Abandoned,
}

crate::domain::wire_strings!(TaskStatus, "task status", column {
    Pending => "pending",
    Running => "running",
    Done => "done",
    Failed => "failed",
    Abandoned => "abandoned",
});

impl TaskStatus {
    /// `done`, `failed` and `abandoned` are final: no transition leaves them.
    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Done | Self::Failed | Self::Abandoned)
    }

    /// Position in [`Self::ALL`]; lets counters use a fixed array instead of a map.
    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

/// Why a task was abandoned. Cascade-abandon always uses `blocked`.
#[derive(Serialize, Deserialize, ToSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum AbandonCategory {
    Scope,
    Blocked,
    Conflict,
    Capacity,
    StaleRules,
    NoConsensus,
    DestructiveRejected,
    TestsUnrecoverable,
}

crate::domain::wire_strings!(AbandonCategory, "abandon category", column {
    Scope => "scope",
    Blocked => "blocked",
    Conflict => "conflict",
    Capacity => "capacity",
    StaleRules => "stale_rules",
    NoConsensus => "no_consensus",
    DestructiveRejected => "destructive_rejected",
    TestsUnrecoverable => "tests_unrecoverable",
});

impl AbandonCategory {
    /// The category cascade-abandon records on every dependent (§7).
    pub const CASCADE: AbandonCategory = AbandonCategory::Blocked;
}

/// What a legal status change asks the caller to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Target equals the current status: a retried PATCH must succeed without
    /// charging another attempt, re-stamping times or cascading again.
    NoChange,
    /// A real change: persist it (and, for `failed`/`abandoned`, cascade).
    Apply,
}

/// A status change the lifecycle forbids; the API answers 409 with this message.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct IllegalTransition {
    pub from: TaskStatus,
    pub to: TaskStatus,
    /// The statuses `from` may legally move to (empty when `from` is terminal).
    pub allowed: Vec<TaskStatus>,
}

impl fmt::Display for IllegalTransition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "illegal task transition from '{}' to '{}': ",
            self.from, self.to
        )?;
        if self.allowed.is_empty() {
            return write!(
                f,
                "'{}' is terminal, so no further change is allowed",
                self.from
            );
        }
        write!(f, "from '{}' the only legal targets are ", self.from)?;
        for (i, s) in self.allowed.iter().enumerate() {
            let sep = match i {
                0 => "",
                _ if i + 1 == self.allowed.len() => " and ",
                _ => ", ",
            };
            write!(f, "{sep}'{s}'")?;
        }
        Ok(())
    }
}

impl std::error::Error for IllegalTransition {}

/// The statuses `from` may move to (excluding itself, which is always a no-op).
///
/// `pending → done` and `pending → failed` are deliberately absent: an outcome can
/// only be reported for work that was dispatched, and only the `running` transition
/// charges an attempt and stamps the start time (§7). Skipping it would record a
/// result with no attempt behind it. A task that will never run is `abandoned`.
pub const fn allowed_targets(from: TaskStatus) -> &'static [TaskStatus] {
    use TaskStatus::*;
    match from {
        Pending => &[Running, Abandoned],
        Running => &[Done, Failed, Abandoned],
        // Terminal states are final: reopening would contradict cascades already
        // applied to dependents and the attempt history.
        Done | Failed | Abandoned => &[],
    }
}

/// Decides whether `from → to` is legal. Same status is [`Transition::NoChange`]
/// (including terminal ones), so PATCH is idempotent for the same target (§7).
pub fn check_transition(from: TaskStatus, to: TaskStatus) -> Result<Transition, IllegalTransition> {
    if from == to {
        return Ok(Transition::NoChange);
    }
    let allowed = allowed_targets(from);
    if allowed.contains(&to) {
        Ok(Transition::Apply)
    } else {
        Err(IllegalTransition {
            from,
            to,
            allowed: allowed.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::TaskStatus::*;
    use super::*;

    #[test]
    fn every_legal_transition_applies() {
        for (from, to) in [
            (Pending, Running),
            (Running, Done),
            (Running, Failed),
            (Pending, Abandoned),
            (Running, Abandoned),
        ] {
            assert_eq!(
                check_transition(from, to),
                Ok(Transition::Apply),
                "{from} -> {to}"
            );
        }
    }

    #[test]
    fn same_status_is_idempotent_no_change() {
        for s in TaskStatus::ALL {
            assert_eq!(check_transition(s, s), Ok(Transition::NoChange), "{s}");
        }
    }

    #[test]
    fn illegal_transitions_are_rejected_with_allowed_targets() {
        let mut table: Vec<(TaskStatus, TaskStatus, &[TaskStatus])> = vec![
            (Pending, Done, &[Running, Abandoned]),
            (Pending, Failed, &[Running, Abandoned]),
            (Running, Pending, &[Done, Failed, Abandoned]),
        ];
        // A terminal status has no way out.
        for from in [Done, Failed, Abandoned] {
            let others = TaskStatus::ALL.into_iter().filter(|&to| to != from);
            table.extend(others.map(|to| (from, to, &[][..])));
        }
        for (from, to, allowed) in table {
            let err = check_transition(from, to).expect_err("must be illegal");
            assert_eq!(err.from, from);
            assert_eq!(err.to, to);
            assert_eq!(err.allowed, allowed);
        }
    }

    #[test]
    fn table_is_exhaustive_five_legal_pairs() {
        let applied = TaskStatus::ALL
            .iter()
            .flat_map(|&a| TaskStatus::ALL.iter().map(move |&b| (a, b)))
            .filter(|&(a, b)| check_transition(a, b) == Ok(Transition::Apply))
            .count();
        assert_eq!(applied, 5);
    }

    #[test]
    fn illegal_transition_message_names_from_to_and_targets() {
        let msg = check_transition(Pending, Done).unwrap_err().to_string();
        assert_eq!(
            msg,
            "illegal task transition from 'pending' to 'done': \
             from 'pending' the only legal targets are 'running' and 'abandoned'"
        );
        let msg = check_transition(Running, Pending).unwrap_err().to_string();
        assert!(msg.ends_with("'done', 'failed' and 'abandoned'"), "{msg}");
        let msg = check_transition(Done, Running).unwrap_err().to_string();
        assert_eq!(
            msg,
            "illegal task transition from 'done' to 'running': \
             'done' is terminal, so no further change is allowed"
        );
    }

    #[test]
    fn terminal_set() {
        let terminal: Vec<_> = TaskStatus::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(terminal, [Done, Failed, Abandoned]);
    }

    #[test]
    fn status_strings_match_serde_and_round_trip() {
        for s in TaskStatus::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
            assert_eq!(TaskStatus::parse(s.as_str()), Some(s));
            assert_eq!(s.as_str().parse::<TaskStatus>(), Ok(s));
            assert_eq!(TaskStatus::ALL[s.index()], s);
        }
        assert_eq!(TaskStatus::parse("Pending"), None);
        assert_eq!(TaskStatus::parse(""), None);
        let err = "nope".parse::<TaskStatus>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown task status \"nope\"; expected one of: pending, running, done, failed, abandoned"
        );
    }

    #[test]
    fn category_strings_match_serde_and_round_trip() {
        assert_eq!(AbandonCategory::ALL.len(), 8);
        for c in AbandonCategory::ALL {
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
            assert_eq!(AbandonCategory::parse(c.as_str()), Some(c));
        }
        assert_eq!(AbandonCategory::StaleRules.as_str(), "stale_rules");
        assert_eq!(AbandonCategory::CASCADE.as_str(), "blocked");
        assert_eq!(AbandonCategory::parse("stale-rules"), None);
    }
}
