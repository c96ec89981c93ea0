//! Retry and escalation accounting of docs/spec/gating.md §4: a planner gets one retry after
//! DAG-INVALID, a second DAG-INVALID escalates, a synthesis failure escalates at once.

use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Escalation {
    SynthesisFailure,
    DagInvalid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryVerdict {
    /// 1 for the first rejection since the last accepted list, 2 after.
    pub attempt: u32,
    pub escalate: bool,
    pub escalation: Option<Escalation>,
}

/// `rejections` counts the rejected submissions of this `(project_id, team_pk)`
/// since its last accepted list, the current one included. Rejections beyond the
/// second keep answering attempt 2 and keep escalating: the planner had its retry.
pub fn verdict(synthesis_failure: bool, rejections: u32) -> RetryVerdict {
    let attempt = rejections.clamp(1, 2);
    let escalation = if synthesis_failure {
        Some(Escalation::SynthesisFailure)
    } else if attempt >= 2 {
        Some(Escalation::DagInvalid)
    } else {
        None
    };
    RetryVerdict {
        attempt,
        escalate: escalation.is_some(),
        escalation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DAG_INVALID gets one retry, then escalates (attempts stay capped at 2); a
    /// synthesis failure escalates at once.
    #[test]
    fn verdicts() {
        use Escalation::{DagInvalid, SynthesisFailure};
        for (synthesis_failed, attempt, expected) in [
            (false, 1, (1, false, None)),
            (false, 2, (2, true, Some(DagInvalid))),
            (false, 7, (2, true, Some(DagInvalid))),
            (true, 1, (1, true, Some(SynthesisFailure))),
        ] {
            let v = verdict(synthesis_failed, attempt);
            assert_eq!((v.attempt, v.escalate, v.escalation), expected);
        }
        assert_eq!(
            serde_json::to_value(Escalation::SynthesisFailure).unwrap(),
            "synthesis-failure"
        );
        assert_eq!(
            serde_json::to_value(Escalation::DagInvalid).unwrap(),
            "dag-invalid"
        );
    }
}
