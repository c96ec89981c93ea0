//! The job state machine of docs/spec/jobs.md, shared by refine jobs and refine runs: names,
//! which states are terminal, and the re-queue backoff. Pure.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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

impl JobStatus {
    pub const ALL: [JobStatus; 6] = [
        JobStatus::Queued,
        JobStatus::Running,
        JobStatus::Cancelling,
        JobStatus::Succeeded,
        JobStatus::Failed,
        JobStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Cancelling => "cancelling",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled
        )
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

#[cfg(test)]
mod tests {
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
    fn backoff_grows_is_capped_and_jittered() {
        assert_eq!(requeue_backoff(1, 0.0), Duration::from_secs(1));
        assert_eq!(requeue_backoff(2, 0.0), Duration::from_secs(2));
        assert_eq!(requeue_backoff(3, 0.0), Duration::from_secs(4));
        assert_eq!(requeue_backoff(30, 0.0), Duration::from_secs(60));
        assert_eq!(requeue_backoff(1, 1.0), Duration::from_millis(1500));
        assert_eq!(requeue_backoff(0, 0.0), Duration::from_secs(1));
    }
}
