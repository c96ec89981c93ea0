//! Claims with leases (docs/api.md, "Claims"): one ready task handed to
//! exactly one holder until its lease expires. Pure: the storage layer reads the
//! list under its lock, asks these functions, and writes the answer.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{Ready, TaskStatus};

/// What one entry of a task's history records.
#[derive(Serialize, Deserialize, ToSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum TaskEventKind {
    /// A holder claimed the task (pending → running).
    Claimed,
    /// The holder renewed its lease (heartbeat).
    Renewed,
    /// The holder's lease ran out: the task went back to pending.
    LeaseExpired,
    /// A status change (PATCH / set_task_status).
    StatusChanged,
}

crate::domain::wire_strings!(TaskEventKind, "task event kind", column {
    Claimed => "claimed",
    Renewed => "renewed",
    LeaseExpired => "lease_expired",
    StatusChanged => "status_changed",
});

/// Longest lease a claim or heartbeat may ask for (a day): a holder that dies
/// must not keep a task away from the others for longer.
pub const MAX_LEASE_SECS: u64 = 86_400;

/// Who holds a running task, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct TaskClaim {
    pub holder: String,
    /// Renew before this (heartbeat), or the task goes back to `pending`.
    pub lease_expires_at: DateTime<Utc>,
}

/// Indices of the running tasks whose claim's lease has expired at `now`: they go
/// back to `pending` so another agent can claim them. A task without a claim
/// (dispatched with a plain status change) never expires.
pub fn expired_claims<'a>(
    tasks: impl IntoIterator<Item = (TaskStatus, Option<&'a TaskClaim>)>,
    now: DateTime<Utc>,
) -> Vec<usize> {
    tasks
        .into_iter()
        .enumerate()
        .filter(|(_, (status, claim))| {
            *status == TaskStatus::Running && claim.is_some_and(|c| c.lease_expires_at <= now)
        })
        .map(|(i, _)| i)
        .collect()
}

/// The task a claim takes: the first ready one in the ready answer's order (wave,
/// then list order), or the first assigned to `persona` when one is asked.
pub fn pick_claim(ready: &Ready, personas: &[&str], persona: Option<&str>) -> Option<usize> {
    ready.tasks.iter().copied().find(|&i| match persona {
        None => true,
        Some(p) => personas.get(i).is_some_and(|own| *own == p),
    })
}

/// A status change or heartbeat is allowed on a claimed task only for its holder,
/// or with an explicit `force` (an orchestrator taking over).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HolderCheck {
    /// The task has no live claim: today's behaviour, anyone may change it.
    Unclaimed,
    /// The caller named the holder.
    Holder,
    /// The caller forced the change over this holder's claim (recorded in history).
    Forced { overrode: String },
}

/// The task is claimed by someone else: 409 naming `holder`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the task is claimed by {holder:?} (or was, when it finished): send \"holder\": \
     {holder:?} to change it, or \"force\": true to override the claim (recorded in the \
     task's history)"
)]
pub struct HeldByOther {
    pub holder: String,
}

/// Checks `asked` (the change's `holder`) against the live claim `current`.
pub fn check_holder(
    current: Option<&str>,
    asked: Option<&str>,
    force: bool,
) -> Result<HolderCheck, HeldByOther> {
    match current {
        None => Ok(HolderCheck::Unclaimed),
        Some(holder) if asked == Some(holder) => Ok(HolderCheck::Holder),
        Some(holder) if force => Ok(HolderCheck::Forced {
            overrode: holder.to_owned(),
        }),
        Some(holder) => Err(HeldByOther {
            holder: holder.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::TaskStatus::*;
    use super::*;
    use chrono::TimeZone;

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    fn claim(holder: &str, s: i64) -> TaskClaim {
        TaskClaim {
            holder: holder.into(),
            lease_expires_at: at(s),
        }
    }

    #[test]
    fn only_running_tasks_with_a_lapsed_lease_expire() {
        let (old, live) = (claim("a", 10), claim("b", 30));
        let tasks = [
            (Running, Some(&old)),
            (Running, Some(&live)),
            (Running, None),
            (Done, Some(&old)),
            (Pending, None),
        ];
        assert_eq!(expired_claims(tasks, at(20)), [0]);
        // The instant of expiry counts as expired: the lease was "until" then.
        assert_eq!(expired_claims(tasks, at(30)), [0, 1]);
        assert!(expired_claims(tasks, at(0)).is_empty());
    }

    #[test]
    fn claims_take_the_first_ready_task_or_the_personas() {
        let ready = Ready {
            wave: Some(1),
            tasks: vec![2, 0, 1],
        };
        let personas = ["dev", "qa", "dev"];
        assert_eq!(pick_claim(&ready, &personas, None), Some(2));
        assert_eq!(pick_claim(&ready, &personas, Some("qa")), Some(1));
        assert_eq!(pick_claim(&ready, &personas, Some("ops")), None);
        assert_eq!(pick_claim(&Ready::default(), &personas, None), None);
    }

    #[test]
    fn the_holder_or_force_may_change_a_claimed_task() {
        assert_eq!(check_holder(None, None, false), Ok(HolderCheck::Unclaimed));
        assert_eq!(
            check_holder(None, Some("x"), true),
            Ok(HolderCheck::Unclaimed)
        );
        assert_eq!(
            check_holder(Some("a"), Some("a"), false),
            Ok(HolderCheck::Holder)
        );
        assert_eq!(
            check_holder(Some("a"), Some("a"), true),
            Ok(HolderCheck::Holder)
        );
        assert_eq!(
            check_holder(Some("a"), Some("boss"), true),
            Ok(HolderCheck::Forced {
                overrode: "a".into()
            })
        );
        for asked in [None, Some("b")] {
            let err = check_holder(Some("a"), asked, false).unwrap_err();
            assert_eq!(err.holder, "a");
            assert!(err.to_string().contains("\"a\""), "{err}");
        }
    }
}
