//! The job state machine of docs/spec/jobs.md, shared by refine jobs and refine runs:
//! the statuses and their sets, the allowed transitions, what a cancel does in each
//! status, what becomes of a job whose worker lost its lease (the attempt rule) or
//! handed it back at shutdown, and the re-queue backoff. Pure: `db/` executes these
//! decisions and builds its SQL status lists from the sets here.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::refine::L0Status;

/// `queued → running → succeeded | failed | cancelled`, with `cancelling` between a
/// cancel request and the moment the worker has stopped its L0s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Queued,
    Running,
    Cancelling,
    Succeeded,
    Failed,
    Cancelled,
}

crate::domain::wire_strings!(JobStatus, "job status", column {
    Queued => "queued",
    Running => "running",
    Cancelling => "cancelling",
    Succeeded => "succeeded",
    Failed => "failed",
    Cancelled => "cancelled",
});

impl JobStatus {
    /// Not finished: waiting for a worker or held by one.
    pub const ACTIVE: [JobStatus; 3] =
        [JobStatus::Queued, JobStatus::Running, JobStatus::Cancelling];

    /// Started and not finished. A job in these is held by a worker under a lease
    /// (its writes are fenced; the reaper recovers it when the lease expires); a run
    /// in these is not merged yet.
    pub const IN_FLIGHT: [JobStatus; 2] = [JobStatus::Running, JobStatus::Cancelling];

    /// Final: no transition leaves them.
    pub const TERMINAL: [JobStatus; 3] = [
        JobStatus::Succeeded,
        JobStatus::Failed,
        JobStatus::Cancelled,
    ];

    pub fn is_terminal(self) -> bool {
        Self::TERMINAL.contains(&self)
    }

    /// The transition table. Who makes each move:
    /// - `queued → running`: a worker claims the job;
    /// - `queued → cancelled`, `running → cancelling`: a cancel ([`JobStatus::after_cancel`]);
    /// - `running → queued`: the reaper retries it ([`after_lease_expired`]) or its
    ///   worker hands it back at shutdown ([`after_hand_back`]);
    /// - `running | cancelling → succeeded | failed | cancelled`: its worker ends it
    ///   (a result can land before the worker sees a cancel), the reaper fails or
    ///   cancels it, a hand-back ends a cancel; for a run, its merge.
    pub fn can_become(self, next: JobStatus) -> bool {
        use JobStatus::*;
        match self {
            Queued => matches!(next, Running | Cancelled),
            Running => matches!(next, Queued | Cancelling | Succeeded | Failed | Cancelled),
            Cancelling => matches!(next, Succeeded | Failed | Cancelled),
            Succeeded | Failed | Cancelled => false,
        }
    }

    /// The cancel table: the status a cancel request moves a job (or run) to, or
    /// `None` when it leaves it as it is — already being cancelled, or finished.
    /// A queued job has no worker to stop, so it is cancelled at once; a running one
    /// goes `cancelling` until its worker has stopped its L0s.
    pub fn after_cancel(self) -> Option<JobStatus> {
        match self {
            JobStatus::Queued => Some(JobStatus::Cancelled),
            JobStatus::Running => Some(JobStatus::Cancelling),
            JobStatus::Cancelling
            | JobStatus::Succeeded
            | JobStatus::Failed
            | JobStatus::Cancelled => None,
        }
    }
}

/// The error code of a job that failed because its last attempt's lease expired.
pub const LEASE_EXPIRED: &str = "lease_expired";

/// What the reaper does with a job whose worker's lease expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseExpiry {
    /// A cancel was in progress: the job ends `cancelled`.
    Cancel,
    /// Attempts remain: queued again, offered after `delay`.
    Retry { delay: Duration },
    /// That was its last attempt: it fails with [`LEASE_EXPIRED`] and this message.
    Fail { message: String },
}

impl LeaseExpiry {
    /// The status the job moves to.
    pub fn status(&self) -> JobStatus {
        match self {
            LeaseExpiry::Cancel => JobStatus::Cancelled,
            LeaseExpiry::Retry { .. } => JobStatus::Queued,
            LeaseExpiry::Fail { .. } => JobStatus::Failed,
        }
    }
}

/// The attempt rule. `attempt` is the attempt whose lease expired (1-based; the
/// claim counted it), `max_attempts` the job's limit; `backoff` gives the delay after
/// that many attempts (the service passes [`requeue_backoff`] with fresh jitter).
pub fn after_lease_expired(
    status: JobStatus,
    attempt: i32,
    max_attempts: i32,
    backoff: impl FnOnce(u32) -> Duration,
) -> LeaseExpiry {
    if status == JobStatus::Cancelling {
        LeaseExpiry::Cancel
    } else if attempt >= max_attempts {
        LeaseExpiry::Fail {
            message: format!("the worker's lease expired on attempt {attempt} of {max_attempts}"),
        }
    } else {
        LeaseExpiry::Retry {
            delay: backoff(u32::try_from(attempt).unwrap_or(1)),
        }
    }
}

/// What a graceful shutdown does with a job its worker holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandBack {
    pub status: JobStatus,
    /// The attempt is given back (not charged): the job did not fail, the replica
    /// stopped.
    pub refund_attempt: bool,
}

/// A job being cancelled ends `cancelled`; any other is queued again at once, its
/// attempt not charged, so any replica resumes it.
pub fn after_hand_back(status: JobStatus) -> HandBack {
    if status == JobStatus::Cancelling {
        HandBack {
            status: JobStatus::Cancelled,
            refund_attempt: false,
        }
    } else {
        HandBack {
            status: JobStatus::Queued,
            refund_attempt: true,
        }
    }
}

/// Delay before a job whose lease expired is offered again: exponential in the
/// attempts already made (1 s, 2 s, 4 s … capped at 60 s) plus up to 50 % jitter,
/// so replicas recovering together do not stampede. `jitter` is in `0.0..1.0`.
pub fn requeue_backoff(attempts_made: u32, jitter: f64) -> Duration {
    let base_ms = 1000u64.saturating_mul(1 << attempts_made.saturating_sub(1).min(6));
    let base_ms = base_ms.min(60_000);
    let extra = (base_ms as f64 * 0.5 * jitter.clamp(0.0, 1.0)) as u64;
    Duration::from_millis(base_ms + extra)
}

/// A refine job as a list row shows it — no log, request or result (the
/// dashboard's job list, decoded straight from its `refine_jobs` row).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JobSummary {
    pub id: uuid::Uuid,
    pub status: JobStatus,
    pub phase_id: String,
    pub project_id: Option<String>,
    pub team_pk: Option<String>,
    pub executor: String,
    pub attempt: i32,
    pub max_attempts: i32,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub l0_total: i64,
    /// Its L0s without a valid answer (a succeeded job with some is degraded).
    pub l0_not_valid: i64,
}

/// A refine run as a list row shows it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunSummary {
    pub id: uuid::Uuid,
    pub status: JobStatus,
    pub project_id: Option<String>,
    pub team_pk: Option<String>,
    pub executor: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn names_round_trip_and_terminal_states() {
        for s in JobStatus::ALL {
            assert_eq!(JobStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(JobStatus::parse("done"), None);
        let terminal: Vec<_> = JobStatus::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(
            terminal,
            [
                JobStatus::Succeeded,
                JobStatus::Failed,
                JobStatus::Cancelled
            ]
        );
    }

    #[test]
    fn the_sets_partition_the_statuses() {
        for s in JobStatus::ALL {
            assert_ne!(
                JobStatus::ACTIVE.contains(&s),
                JobStatus::TERMINAL.contains(&s),
                "{s:?} is in exactly one of ACTIVE and TERMINAL"
            );
            if JobStatus::IN_FLIGHT.contains(&s) {
                assert!(JobStatus::ACTIVE.contains(&s), "{s:?} in flight is active");
            }
        }
        assert!(!JobStatus::IN_FLIGHT.contains(&JobStatus::Queued));
    }

    #[test]
    fn terminal_statuses_have_no_outgoing_transitions() {
        for from in JobStatus::TERMINAL {
            for to in JobStatus::ALL {
                assert!(!from.can_become(to), "{from:?} -> {to:?}");
            }
        }
    }

    #[test]
    fn every_active_status_can_reach_a_terminal_one_and_none_loops_on_itself() {
        for s in JobStatus::ALL {
            assert!(!s.can_become(s), "{s:?} -> itself");
        }
        for from in JobStatus::ACTIVE {
            let mut seen = vec![from];
            let mut i = 0;
            while i < seen.len() {
                for to in JobStatus::ALL {
                    if seen[i].can_become(to) && !seen.contains(&to) {
                        seen.push(to);
                    }
                }
                i += 1;
            }
            assert!(seen.iter().any(|s| s.is_terminal()), "{from:?} cannot end");
        }
        // Only a claim leaves `queued`, and only for `running` (or a cancel).
        assert!(JobStatus::Queued.can_become(JobStatus::Running));
        assert!(!JobStatus::Queued.can_become(JobStatus::Succeeded));
        assert!(!JobStatus::Cancelling.can_become(JobStatus::Queued));
    }

    #[test]
    fn cancel_table() {
        use JobStatus::*;
        assert_eq!(Queued.after_cancel(), Some(Cancelled));
        assert_eq!(Running.after_cancel(), Some(Cancelling));
        // Already being cancelled, or finished: left as it is.
        for s in [Cancelling, Succeeded, Failed, Cancelled] {
            assert_eq!(s.after_cancel(), None, "{s:?}");
        }
        for s in JobStatus::ALL {
            if let Some(next) = s.after_cancel() {
                assert!(
                    s.can_become(next),
                    "cancel makes an illegal move {s:?} -> {next:?}"
                );
            }
        }
    }

    #[test]
    fn hand_back_refunds_the_attempt_unless_a_cancel_ends_the_job() {
        for s in JobStatus::IN_FLIGHT {
            let back = after_hand_back(s);
            assert!(s.can_become(back.status), "{s:?} -> {back:?}");
        }
        assert_eq!(
            after_hand_back(JobStatus::Running),
            HandBack {
                status: JobStatus::Queued,
                refund_attempt: true
            }
        );
        assert_eq!(
            after_hand_back(JobStatus::Cancelling),
            HandBack {
                status: JobStatus::Cancelled,
                refund_attempt: false
            }
        );
    }

    proptest! {
        #[test]
        fn lease_expiry_follows_the_attempt_rule(
            cancelling in any::<bool>(),
            attempt in 1i32..20,
            max_attempts in 1i32..20,
            jitter in 0.0f64..1.0,
        ) {
            let status = if cancelling { JobStatus::Cancelling } else { JobStatus::Running };
            let mut asked = None;
            let expiry = after_lease_expired(status, attempt, max_attempts, |made| {
                asked = Some(made);
                requeue_backoff(made, jitter)
            });
            prop_assert!(status.can_become(expiry.status()));
            if cancelling {
                prop_assert_eq!(expiry, LeaseExpiry::Cancel);
            } else if attempt >= max_attempts {
                prop_assert_eq!(expiry, LeaseExpiry::Fail {
                    message: format!(
                        "the worker's lease expired on attempt {attempt} of {max_attempts}"
                    ),
                });
            } else {
                // Retried after the backoff of the attempts made so far.
                let made = u32::try_from(attempt).unwrap();
                prop_assert_eq!(asked, Some(made));
                prop_assert_eq!(expiry, LeaseExpiry::Retry { delay: requeue_backoff(made, jitter) });
            }
        }
    }

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        assert_eq!(requeue_backoff(1, 0.0), Duration::from_secs(1));
        assert_eq!(requeue_backoff(2, 0.0), Duration::from_secs(2));
        assert_eq!(requeue_backoff(3, 0.0), Duration::from_secs(4));
        assert_eq!(requeue_backoff(30, 0.0), Duration::from_secs(60));
        assert_eq!(requeue_backoff(1, 1.0), Duration::from_millis(1500));
        assert_eq!(requeue_backoff(0, 0.0), Duration::from_secs(1));
    }
}

/// How a person reads a refine job: its status, or `degraded` for a success whose
/// L0 calls did not all give a valid answer (docs/jobs.md). REST keeps the
/// status `succeeded`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Queued,
    Running,
    Cancelling,
    Succeeded,
    Degraded,
    Failed,
    Cancelled,
}

crate::domain::wire_strings!(JobState, "job state", column {
    Queued => "queued",
    Running => "running",
    Cancelling => "cancelling",
    Succeeded => "succeeded",
    Degraded => "degraded",
    Failed => "failed",
    Cancelled => "cancelled",
});

impl JobState {
    /// A job of `status` with `l0_not_valid` of its L0 calls giving no usable answer.
    pub fn of(status: JobStatus, l0_not_valid: i64) -> JobState {
        match status {
            JobStatus::Queued => JobState::Queued,
            JobStatus::Running => JobState::Running,
            JobStatus::Cancelling => JobState::Cancelling,
            JobStatus::Succeeded if l0_not_valid > 0 => JobState::Degraded,
            JobStatus::Succeeded => JobState::Succeeded,
            JobStatus::Failed => JobState::Failed,
            JobStatus::Cancelled => JobState::Cancelled,
        }
    }
}

/// The word the dashboard shows for a degraded success.
pub const DEGRADED: &str = JobState::Degraded.as_str();

/// "3 of 3 L0 calls failed" for a degraded job, `None` otherwise.
pub fn degraded_note(status: JobStatus, l0_not_valid: i64, l0_total: i64) -> Option<String> {
    (JobState::of(status, l0_not_valid) == JobState::Degraded)
        .then(|| format!("{l0_not_valid} of {l0_total} L0 calls failed"))
}

/// The error an L0 row gets when its job ended while it ran (a cancel, or a
/// hand-back that ended a cancel): it did not fail, it was stopped.
pub const STOPPED_L0_ERRORS: [&str; 2] = [
    "cancelled before it finished",
    "the job ended before it finished",
];

/// How a person reads one L0 of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L0State {
    /// Its stored status.
    Status(L0Status),
    /// Still pending in an ended job (a budget stop or cancel came first).
    NotStarted,
    /// Stopped by its job's cancel.
    Cancelled,
}

impl L0State {
    pub fn of(job: JobStatus, l0: L0Status, error: Option<&str>) -> L0State {
        match l0 {
            L0Status::Pending if job.is_terminal() => L0State::NotStarted,
            L0Status::Failed if error.is_some_and(|e| STOPPED_L0_ERRORS.contains(&e)) => {
                L0State::Cancelled
            }
            status => L0State::Status(status),
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            L0State::Status(status) => status.as_str(),
            L0State::NotStarted => "not started",
            L0State::Cancelled => "cancelled",
        }
    }
}

/// Why a job cannot be retried, or `None` when it can: only an ended job that did
/// not succeed (failed, budget-stopped, cancelled) is retried.
pub fn retry_refusal(status: JobStatus) -> Option<String> {
    match status {
        JobStatus::Failed | JobStatus::Cancelled => None,
        JobStatus::Succeeded => Some(
            "the job succeeded; only a failed, budget-stopped or cancelled job is retried \
             (submit a new job to refine the phase again)"
                .to_owned(),
        ),
        JobStatus::Queued | JobStatus::Running | JobStatus::Cancelling => Some(format!(
            "the job is {}; only an ended job is retried (wait for it to end, or cancel it \
             first)",
            status.as_str()
        )),
    }
}

#[cfg(test)]
mod display_tests {
    use super::*;

    #[test]
    fn a_success_with_failed_calls_reads_degraded() {
        assert_eq!(JobState::of(JobStatus::Succeeded, 0), JobState::Succeeded);
        assert_eq!(JobState::of(JobStatus::Succeeded, 3), JobState::Degraded);
        assert_eq!(JobState::of(JobStatus::Failed, 3), JobState::Failed);
        // Every status reads as the state of the same word, but a degraded success.
        for status in JobStatus::ALL {
            assert_eq!(JobState::of(status, 0).as_str(), status.as_str());
        }
        assert_eq!(
            degraded_note(JobStatus::Succeeded, 3, 3).as_deref(),
            Some("3 of 3 L0 calls failed")
        );
        assert_eq!(degraded_note(JobStatus::Succeeded, 0, 3), None);
    }

    #[test]
    fn l0s_that_never_ran_or_were_stopped_are_not_failed() {
        use L0Status::{Failed, Pending};
        let stopped = Some("cancelled before it finished");
        assert_eq!(
            L0State::of(JobStatus::Failed, Pending, None),
            L0State::NotStarted
        );
        assert_eq!(
            L0State::of(JobStatus::Running, Pending, None),
            L0State::Status(Pending)
        );
        assert_eq!(
            L0State::of(JobStatus::Cancelled, Failed, stopped),
            L0State::Cancelled
        );
        assert_eq!(
            L0State::of(JobStatus::Failed, Failed, Some("exit 1")).as_str(),
            "failed"
        );
    }

    #[test]
    fn only_ended_unsuccessful_jobs_are_retried() {
        for s in [JobStatus::Failed, JobStatus::Cancelled] {
            assert!(retry_refusal(s).is_none());
        }
        for s in [
            JobStatus::Queued,
            JobStatus::Running,
            JobStatus::Cancelling,
            JobStatus::Succeeded,
        ] {
            assert!(retry_refusal(s).is_some(), "{s:?}");
        }
    }
}
