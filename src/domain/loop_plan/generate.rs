//! Deterministic valid loop-plan requests of any size, for benchmarks and tests.

use serde_json::{Value, json};

use super::{CompletedTrack, LoopPlanRequest, PhaseInfo, TrackInfo};
use crate::domain::xorshift::XorShift;

/// Tasks per phase.
pub const TASKS_PER_PHASE: usize = 250;
/// Dependencies point at most this many tasks back, so levels stay shallow-ish and
/// groups hold many tasks.
const DEPENDENCY_WINDOW: usize = 400;

/// A valid request of `n` tasks.
///
/// Task `i` sits in phase `1 + i / 250` with id `{phase}.{k}` (`k` from 1, so natural
/// order matters), has 0–2 dependencies among the 400 tasks before it, 1–3 files
/// drawn from a pool of about `n / 2` paths of mixed kinds (so some levels share
/// files), an acceptance line on every third task and a given duration on every
/// fifth. Two completed tracks deliver ten pool files each, so some tasks overlap.
/// The same `(n, seed)` always gives the same request.
pub fn generate_request(n: usize, seed: u64) -> LoopPlanRequest {
    let mut rng = XorShift::new(seed);
    let phase_count = n.div_ceil(TASKS_PER_PHASE).max(1);
    let pool = (n / 2).max(4);
    let file = |slot: usize| -> String {
        match slot % 10 {
            0 => format!("tests/test_m{slot:06}.py"),
            1 => format!("src/components/C{slot:06}.tsx"),
            2 => format!("docs/m{slot:06}.md"),
            3 => format!("src/api/m{slot:06}.py"),
            4 => format!("config/m{slot:06}.yaml"),
            _ => format!("src/m{:03}/f{slot:06}.py", slot % 97),
        }
    };
    let id = |i: usize| format!("{}.{}", 1 + i / TASKS_PER_PHASE, 1 + i % TASKS_PER_PHASE);
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let mut depends_on: Vec<String> = Vec::new();
        if i > 0 {
            let window = i.min(DEPENDENCY_WINDOW);
            for _ in 0..rng.below(3) {
                let dependency = id(i - 1 - rng.below(window));
                if !depends_on.contains(&dependency) {
                    depends_on.push(dependency);
                }
            }
        }
        let files: Vec<String> = (0..1 + rng.below(3))
            .map(|_| file(rng.below(pool)))
            .collect();
        let mut task = json!({
            "id": id(i),
            "name": format!("Implement unit {i}"),
            "description": format!("Slot {} of phase {}", i % TASKS_PER_PHASE, 1 + i / TASKS_PER_PHASE),
            "files": files,
            "depends_on": depends_on,
            "phase": 1 + i / TASKS_PER_PHASE,
        });
        if let Value::Object(object) = &mut task {
            if i % 3 == 0 {
                object.insert(
                    "acceptance".into(),
                    json!(format!("unit {i} passes its checks")),
                );
            }
            if i % 5 == 0 {
                object.insert("estimated_duration".into(), json!("90m"));
            }
        }
        tasks.push(task);
    }
    let completed = |name: &str, rng: &mut XorShift| CompletedTrack {
        id: format!("{name}_20260101"),
        name: Some(name.to_owned()),
        deliverables: (0..10).map(|_| file(rng.below(pool))).collect(),
    };
    let completed_tracks = vec![completed("base", &mut rng), completed("infra", &mut rng)];
    LoopPlanRequest {
        track: TrackInfo {
            id: format!("generated_{n}"),
            name: format!("Generated plan of {n} tasks"),
            spec: "Benchmark input".to_owned(),
            dependencies: vec!["base_20260101".to_owned()],
        },
        phases: (1..=phase_count)
            .map(|number| PhaseInfo {
                number: u32::try_from(number).unwrap_or(u32::MAX),
                name: format!("Phase {number}"),
            })
            .collect(),
        tasks,
        completed_tracks: Some(completed_tracks),
        tracks_md: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::loop_plan::plan;

    #[test]
    fn generated_requests_are_valid_and_deterministic() {
        for (n, seed) in [(1, 0), (7, 1), (1_000, 2), (5_000, 3)] {
            let request = generate_request(n, seed);
            let plan = plan(&request);
            assert!(plan.is_valid(), "n={n}: {:?}", plan.errors.first());
            assert_eq!(plan.dag.nodes.len(), n);
        }
        assert_eq!(generate_request(300, 5), generate_request(300, 5));
        assert_ne!(generate_request(300, 5), generate_request(300, 6));
        let plan = plan(&generate_request(5_000, 1));
        assert!(plan.summary.coordinated_groups > 0);
        assert!(!plan.overlap.is_empty());
        assert!(plan.summary.max_concurrency > 10);
    }
}
