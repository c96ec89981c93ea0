//! The `builtin` L0 executor (docs/spec/refine.md §2): a deterministic **heuristic** reviewer,
//! not an LLM. It reads no task file and proposes no free-text `changes`; it only
//! finds two mechanical problems:
//!
//! - `dependency_corrections`: another assignment (a peer, or one of the same phase)
//!   whose id or name the target mentions in its goal, technical approach, overlap
//!   notes or WP text, while its `dependency_notes` names neither. An id counts as
//!   mentioned when an id-like token equals it or extends it with `-` (`P2-A1-WP1`
//!   mentions `P2-A1`, `P2-A10` does not); a name (3+ characters) counts when it
//!   occurs case-insensitively between word boundaries.
//! - `wp_proposal_adjustments` `remove`: a WP sharing a file with a WP of a
//!   naturally-earlier assignment of the phase (as proposed, before any removal).
//!
//! Its answer is in the L0 text format, so it goes through the same validation.

use super::answer::{DependencyCorrection, L0Answer, WpAdjustment, format_l0_answer};
use super::input::{Assignment, WorkPackage, is_id_byte};
use super::packet::L0Packet;
use crate::domain::natural::natural_cmp;
use std::cmp::Ordering;
use std::collections::HashMap;

/// Reviews `packet`'s assignment; `phase_assignments` are all assignments of its phase.
pub fn builtin_review(packet: &L0Packet, phase_assignments: &[Assignment]) -> String {
    format_l0_answer(&builtin_answer(packet, phase_assignments))
}

/// [`builtin_review`] before formatting.
pub fn builtin_answer(packet: &L0Packet, phase_assignments: &[Assignment]) -> L0Answer {
    let target = &packet.assignment;
    L0Answer {
        assignment_id: packet.target_assignment_id.clone(),
        changes: Vec::new(),
        dependency_corrections: missing_dependencies(packet, phase_assignments),
        wp_proposal_adjustments: contested_wps(target, phase_assignments),
    }
}

fn missing_dependencies(packet: &L0Packet, phase: &[Assignment]) -> Vec<DependencyCorrection> {
    let target = &packet.assignment;
    // (id, name) of every other assignment the L0 knows about, first occurrence wins.
    let mut candidates: Vec<(&str, Option<&str>)> = Vec::new();
    let others = packet
        .peer_summaries
        .iter()
        .map(|p| (p.id.as_str(), p.name.as_deref()))
        .chain(phase.iter().map(|a| (a.id.as_str(), a.name.as_deref())));
    for (id, name) in others {
        if id != target.id && !candidates.iter().any(|(c, _)| *c == id) {
            candidates.push((id, name));
        }
    }
    candidates.sort_by(|a, b| natural_cmp(a.0, b.0));

    let wp_text: String = target
        .work_packages
        .iter()
        .map(wp_text)
        .collect::<Vec<_>>()
        .join("\n");
    let fields: [(&str, &str); 4] = [
        ("goal", target.goal.as_deref().unwrap_or("")),
        (
            "technical_approach",
            target.technical_approach.as_deref().unwrap_or(""),
        ),
        (
            "overlap_notes",
            target.overlap_notes.as_deref().unwrap_or(""),
        ),
        ("work packages", &wp_text),
    ];
    let notes = target.dependency_notes.as_deref().unwrap_or("");

    let mut out = Vec::new();
    for (id, name) in candidates {
        let mentions =
            |text: &str| mentions_id(text, id) || name.is_some_and(|n| mentions_name(text, n));
        let places: Vec<&str> = fields
            .iter()
            .filter(|(_, text)| mentions(text))
            .map(|(field, _)| *field)
            .collect();
        if !places.is_empty() && !mentions(notes) {
            out.push(DependencyCorrection {
                missing_dep: id.to_owned(),
                reason: format!(
                    "{} mentioned in {} but not in dependency_notes (builtin heuristic)",
                    name.map_or_else(|| id.to_owned(), |n| format!("{id} ({n})")),
                    places.join(", ")
                ),
            });
        }
    }
    out
}

fn wp_text(wp: &WorkPackage) -> String {
    let mut parts: Vec<&str> = [&wp.id, &wp.name]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect();
    parts.extend(wp.extra.values().filter_map(|v| v.as_str()));
    parts.join("\n")
}

/// Whether an id-like token of `text` is `id` or extends it with `-`.
fn mentions_id(text: &str, id: &str) -> bool {
    text.split(|c: char| !c.is_ascii() || !is_id_byte(c as u8))
        .any(|token| {
            token == id
                || (token.len() > id.len()
                    && token.starts_with(id)
                    && token[id.len()..].starts_with('-'))
        })
}

/// Case-insensitive occurrence of `name` between word boundaries.
fn mentions_name(text: &str, name: &str) -> bool {
    let name = name.trim().to_lowercase();
    if name.chars().count() < 3 {
        return false;
    }
    let text = text.to_lowercase();
    let is_word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    text.match_indices(&name).any(|(start, m)| {
        !is_word(text[..start].chars().next_back())
            && !is_word(text[start + m.len()..].chars().next())
    })
}

fn contested_wps(target: &Assignment, phase: &[Assignment]) -> Vec<WpAdjustment> {
    let mut earlier: Vec<&Assignment> = phase
        .iter()
        .filter(|a| natural_cmp(&a.id, &target.id) == Ordering::Less)
        .collect();
    earlier.sort_by(|a, b| natural_cmp(&a.id, &b.id));
    // file → naturally-earliest earlier claimant, built once.
    let mut owner: HashMap<String, &str> = HashMap::new();
    for a in &earlier {
        for file in a.work_packages.iter().flat_map(WorkPackage::files) {
            owner.entry(file).or_insert(a.id.as_str());
        }
    }
    let mut out = Vec::new();
    for wp in &target.work_packages {
        // A WP with neither id nor id_suffix cannot be named in an answer.
        let Some(suffix) = wp.id_suffix.clone().or_else(|| wp.id.clone()) else {
            continue;
        };
        let mut shared = Vec::new();
        for file in wp.files() {
            if let Some(owner) = owner.get(&file) {
                shared.push(format!("{file} (claimed by {owner})"));
            }
        }
        if !shared.is_empty() {
            out.push(WpAdjustment {
                wp_id_suffix: suffix,
                action: "remove".into(),
                reason: format!(
                    "shares {} with a naturally-earlier assignment (builtin heuristic)",
                    shared.join(", ")
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::refine::answer::parse_l0_answer;
    use crate::domain::refine::input::{parse_context, parse_plan};
    use crate::domain::refine::packet::build_packets;

    fn example() -> (Vec<L0Packet>, Vec<Assignment>) {
        let context =
            parse_context("c", include_str!("../../../examples/context_P2.json")).unwrap();
        let plan = parse_plan("p", include_str!("../../../examples/refined_plan.json")).unwrap();
        (build_packets(&context, Some(&plan)), context.assignments)
    }

    #[test]
    fn example_phase_reviews() {
        let (packets, phase) = example();
        let answers: Vec<L0Answer> = packets
            .iter()
            .map(|p| parse_l0_answer(&builtin_review(p, &phase)).unwrap())
            .collect();
        // P2-A1 names P1-A1 in its notes already; its WPs come first.
        assert_eq!(answers[0].assignment_id, "P2-A1");
        assert!(answers[0].dependency_corrections.is_empty());
        assert!(answers[0].wp_proposal_adjustments.is_empty());
        // P2-A2 mentions P2-A1 and P2-A1-WP1 with empty notes; its WP1 shares client.py.
        let deps: Vec<&str> = answers[1]
            .dependency_corrections
            .iter()
            .map(|d| d.missing_dep.as_str())
            .collect();
        assert_eq!(deps, ["P2-A1"]);
        assert!(
            answers[1].dependency_corrections[0]
                .reason
                .contains("goal, technical_approach")
        );
        assert_eq!(answers[1].wp_proposal_adjustments[0].wp_id_suffix, "WP1");
        assert!(
            answers[1].wp_proposal_adjustments[0]
                .reason
                .contains("src/http/client.py (claimed by P2-A1)")
        );
        // P2-A10's WP1 also claims src/auth/cache.py, which P2-A1 claims.
        assert!(answers[2].dependency_corrections.is_empty());
        assert_eq!(answers[2].wp_proposal_adjustments.len(), 1);
        assert_eq!(answers[2].wp_proposal_adjustments[0].action, "remove");
        assert!(answers.iter().all(|a| a.changes.is_empty()));
    }

    #[test]
    fn names_count_and_notes_that_name_the_dep_suppress_it() {
        let (mut packets, phase) = example();
        let p = &mut packets[0];
        p.assignment.goal =
            Some("Builds on the Tenant Model and the config loader's output.".into());
        p.assignment.dependency_notes = Some("Needs P1-A1; see config loader.".into());
        let missing = |p: &L0Packet| -> Vec<String> {
            builtin_answer(p, &phase)
                .dependency_corrections
                .into_iter()
                .map(|d| d.missing_dep)
                .collect()
        };
        let deps = missing(p);
        // P1-A1 is in the notes by id; P1-A2 by name.
        assert!(deps.is_empty(), "{deps:?}");
        p.assignment.dependency_notes = None;
        let deps = missing(p);
        assert_eq!(deps, ["P1-A1", "P1-A2"]);
    }

    #[test]
    fn id_mentions_respect_token_boundaries() {
        assert!(mentions_id("see P2-A1-WP1.", "P2-A1"));
        assert!(mentions_id("(P2-A1)", "P2-A1"));
        assert!(!mentions_id("P2-A10 only", "P2-A1"));
        assert!(!mentions_id("XP2-A1", "P2-A1"));
        assert!(mentions_name("the Admin UI, later", "admin ui"));
        assert!(!mentions_name("adminuis", "admin ui"));
        assert!(!mentions_name("ui", "ui"));
    }
}
