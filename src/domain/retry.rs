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

    #[test]
    fn first_dag_invalid_gets_a_retry() {
        let v = verdict(false, 1);
        assert_eq!((v.attempt, v.escalate, v.escalation), (1, false, None));
    }

    #[test]
    fn second_dag_invalid_escalates() {
        let v = verdict(false, 2);
        assert_eq!(
            (v.attempt, v.escalate, v.escalation),
            (2, true, Some(Escalation::DagInvalid))
        );
        assert_eq!(verdict(false, 7).attempt, 2);
    }

    #[test]
    fn synthesis_failure_escalates_at_once() {
        let v = verdict(true, 1);
        assert_eq!(
            (v.attempt, v.escalate, v.escalation),
            (1, true, Some(Escalation::SynthesisFailure))
        );
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
