//! L0 context packets and the prompt built from them (docs/spec/refine.md §2).
//!
//! The prompt names the task *file*; the task text is never inlined (inlining it
//! into every L0 prompt is what blew the reference pipeline's token budget).

use serde_json::{Map, Value};

use super::input::{Assignment, PeerSummary, PhaseContext, PhaseElaborated, PlanDocument};
use crate::domain::natural::natural_cmp;

/// The prompt template shipped with plangate; configuration may replace it.
pub const DEFAULT_PROMPT_TEMPLATE: &str = include_str!("../../../templates/l0_prompt.md");

/// The fixed instructions every L0 gets.
pub const L0_INSTRUCTIONS: &str = "Review the target assignment against the peer summaries \
(missing or wrong dependencies, overlapping work packages). Read the task from disk at the \
task file path and flag scope creep: goal, scope or deliverables the task did not ask for. \
Return structured suggestions only, in the answer format below. Do NOT edit any files.";

/// Everything one L0 is given.
#[derive(Debug, Clone, PartialEq)]
pub struct L0Packet {
    pub target_assignment_id: String,
    pub phase_id: String,
    /// The full assignment.
    pub assignment: Assignment,
    pub peer_summaries: Vec<PeerSummary>,
    /// The assignment's phase from the refined plan, when the plan has it.
    pub phase: Option<PhaseElaborated>,
    pub task_file_path: Option<String>,
    pub instructions: String,
}

impl L0Packet {
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert(
            "target_assignment_id".into(),
            self.target_assignment_id.clone().into(),
        );
        m.insert("phase_id".into(), self.phase_id.clone().into());
        m.insert("assignment".into(), self.assignment.to_value());
        m.insert(
            "peer_summaries".into(),
            serde_json::to_value(&self.peer_summaries).unwrap_or(Value::Null),
        );
        m.insert(
            "phase".into(),
            self.phase
                .as_ref()
                .map_or(Value::Null, |p| Value::Object(p.raw.clone())),
        );
        m.insert(
            "task_file_path".into(),
            self.task_file_path
                .clone()
                .map_or(Value::Null, Value::String),
        );
        m.insert("instructions".into(), self.instructions.clone().into());
        Value::Object(m)
    }
}

/// One packet per assignment, in natural id order. The phase comes from the
/// assignment's own `phase_id`, else the context's.
pub fn build_packets(context: &PhaseContext, plan: Option<&PlanDocument>) -> Vec<L0Packet> {
    let mut packets: Vec<L0Packet> = context
        .assignments
        .iter()
        .map(|a| {
            let phase_id = a.phase_id.as_deref().unwrap_or(&context.phase_id);
            L0Packet {
                target_assignment_id: a.id.clone(),
                phase_id: context.phase_id.clone(),
                assignment: a.clone(),
                peer_summaries: context.peer_summaries.clone(),
                phase: plan.and_then(|p| p.phase(phase_id)).cloned(),
                task_file_path: context.task_file_path.clone(),
                instructions: L0_INSTRUCTIONS.to_owned(),
            }
        })
        .collect();
    packets.sort_by(|x, y| natural_cmp(&x.target_assignment_id, &y.target_assignment_id));
    packets
}

/// Fills `{{name}}` placeholders in one left-to-right pass. Substituted text is not
/// scanned again (an assignment containing `{{...}}` cannot inject), and unknown
/// placeholders are left as written so a typo in a custom template stays visible.
///
/// Placeholders: `target_assignment_id`, `phase_id`, `task_file_path`,
/// `instructions`, `assignment_json`, `peer_summaries_json`, `phase_json`.
pub fn render_prompt(template: &str, packet: &L0Packet) -> String {
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let lookup = |name: &str| -> Option<String> {
        Some(match name {
            "target_assignment_id" => packet.target_assignment_id.clone(),
            "phase_id" => packet.phase_id.clone(),
            "task_file_path" => packet
                .task_file_path
                .clone()
                .unwrap_or_else(|| "(no task file given)".into()),
            "instructions" => packet.instructions.clone(),
            "assignment_json" => pretty(&packet.assignment.to_value()),
            "peer_summaries_json" => {
                pretty(&serde_json::to_value(&packet.peer_summaries).unwrap_or(Value::Null))
            }
            "phase_json" => pretty(
                &packet
                    .phase
                    .as_ref()
                    .map_or(Value::Null, |p| Value::Object(p.raw.clone())),
            ),
            _ => return None,
        })
    };
    let mut out = String::with_capacity(template.len() + 1024);
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        match after.find("}}") {
            Some(close) => match lookup(after[..close].trim()) {
                Some(value) => {
                    out.push_str(&value);
                    rest = &after[close + 2..];
                }
                None => {
                    out.push_str("{{");
                    rest = after;
                }
            },
            None => {
                out.push_str(&rest[open..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::refine::input::{parse_context, parse_plan};

    const CONTEXT: &str = include_str!("../../../examples/context_P2.json");
    const PLAN: &str = include_str!("../../../examples/refined_plan.json");

    fn packets() -> Vec<L0Packet> {
        let context = parse_context("context_P2.json", CONTEXT).unwrap();
        let plan = parse_plan("refined_plan.json", PLAN).unwrap();
        build_packets(&context, Some(&plan))
    }

    #[test]
    fn one_packet_per_assignment_in_natural_order_with_its_phase() {
        let packets = packets();
        let ids: Vec<&str> = packets
            .iter()
            .map(|p| p.target_assignment_id.as_str())
            .collect();
        assert_eq!(ids, ["P2-A1", "P2-A2", "P2-A10"]);
        for p in &packets {
            assert_eq!(p.phase.as_ref().map(|ph| ph.id.as_str()), Some("P2"));
            assert_eq!(p.peer_summaries.len(), 3);
            assert_eq!(p.task_file_path.as_deref(), Some("task_input.md"));
            assert_eq!(p.assignment.id, p.target_assignment_id);
        }
        let v = packets[0].to_value();
        assert_eq!(v["phase"]["name"], "Authenticated client");
        assert_eq!(
            v["assignment"]["proposed_work_packages"][1]["id_suffix"],
            "WP2"
        );
    }

    #[test]
    fn prompt_carries_the_task_path_not_the_task_text() {
        let packets = packets();
        let prompt = render_prompt(DEFAULT_PROMPT_TEMPLATE, &packets[1]);
        assert!(prompt.contains("`task_input.md`"));
        assert!(!prompt.contains("Out of scope: any billing"));
        assert!(prompt.contains("assignment_id = P2-A2"));
        assert!(prompt.contains("\"Retrying HTTP client\""));
        assert!(prompt.contains("Config loader"));
        assert!(prompt.contains("Do NOT edit any files"));
        assert!(!prompt.contains("{{"), "{prompt}");
    }

    #[test]
    fn substitution_is_single_pass_and_keeps_unknown_placeholders() {
        let mut packet = packets().remove(0);
        packet.assignment.goal = Some("{{phase_id}}".into());
        packet.task_file_path = None;
        let out = render_prompt(
            "{{ target_assignment_id }}|{{nope}}|{{task_file_path}}|{{assignment_json}}|{{",
            &packet,
        );
        assert!(out.starts_with("P2-A1|{{nope}}|(no task file given)|"));
        assert!(out.contains("\"goal\": \"{{phase_id}}\""));
        assert!(out.ends_with("|{{"));
    }
}
