//! Deterministic valid task lists of any size, for benchmarks, property tests and
//! load tests (`cargo run --release --example gen_tasks -- N [SEED]`).

use serde_json::{Value, json};

use crate::domain::xorshift::XorShift;

/// Tasks per wave, roughly: the list spans `max(1, n / TASKS_PER_WAVE)` waves.
const TASKS_PER_WAVE: usize = 500;

/// A valid task list of `n` tasks and the existing files its reads rely on.
///
/// Tasks `t-1..t-n` fill waves `1..=max(1, n / 500)` in order. Each task has up to
/// three distinct dependencies in earlier waves, two reads (files written in an earlier
/// wave or pre-existing) and two writes unique within its wave (file names repeat
/// across waves, so write-contention checks see real collisions of names). Every tenth
/// task after the first wave reviews its first dependency under a reviewer persona.
/// The same `(n, seed)` always yields the same list.
pub fn generate_task_list(n: usize, seed: u64) -> (Value, Vec<String>) {
    let mut rng = XorShift::new(seed);
    let wave_count = (n / TASKS_PER_WAVE).max(1);
    let wave_of = |position: usize| 1 + position * wave_count / n.max(1);
    let existing_files: Vec<String> = (0..n.clamp(8, 1000))
        .map(|k| format!("lib/m{k:04}.rs"))
        .collect();

    let mut tasks = Vec::with_capacity(n);
    let mut personas: Vec<String> = Vec::with_capacity(n);
    let mut wave_start = 0; // first position of the current wave
    for position in 0..n {
        let wave = wave_of(position);
        if position > 0 && wave != wave_of(position - 1) {
            wave_start = position;
        }
        let slot = position - wave_start;
        // Dependencies and read sources come from positions before `wave_start`:
        // exactly the tasks of earlier waves.
        let mut depends_on: Vec<usize> = Vec::with_capacity(3);
        if wave_start > 0 {
            for _ in 0..3 {
                let dependency = rng.below(wave_start);
                if !depends_on.contains(&dependency) {
                    depends_on.push(dependency);
                }
            }
        }
        let reads: Vec<String> = (0..2)
            .map(|_| {
                if wave_start > 0 && rng.below(2) == 0 {
                    let writer = rng.below(wave_start);
                    let writer_slot =
                        writer - first_position_of_wave(wave_of(writer), wave_count, n);
                    written_file(writer_slot, rng.below(2))
                } else {
                    existing_files[rng.below(existing_files.len())].clone()
                }
            })
            .collect();
        let is_review = wave_start > 0 && position % 10 == 0;
        let persona = match depends_on.first().filter(|_| is_review) {
            None => format!("backend-engineer-{}", position % 8),
            // A reviewer persona, never that of the task reviewed (maybe a review too).
            Some(&reviewed) => (0..3)
                .map(|shift| format!("code-reviewer-{}", (position + shift) % 3))
                .find(|candidate| *candidate != personas[reviewed])
                .unwrap_or_default(),
        };
        personas.push(persona.clone());
        let mut task = json!({
            "task_id": task_id(position),
            "assigned_persona": persona.clone(),
            "parallel_group": wave,
            "depends_on": depends_on.iter().map(|&d| task_id(d)).collect::<Vec<_>>(),
            "reads": reads,
            "writes": [written_file(slot, 0), written_file(slot, 1)],
            "description": format!("Implement slot {slot} of wave {wave}."),
        });
        if let (true, Some(object), Some(&reviewed)) =
            (is_review, task.as_object_mut(), depends_on.first())
        {
            object.insert("reviews".to_owned(), Value::String(task_id(reviewed)));
        }
        tasks.push(task);
    }
    (Value::Array(tasks), existing_files)
}

fn task_id(position: usize) -> String {
    format!("t-{}", position + 1)
}

/// Slot `slot` of any wave writes these two files; unique within a wave.
fn written_file(slot: usize, which: usize) -> String {
    format!("src/a{:02}/m{slot:05}_{which}.rs", slot / 64)
}

/// The first position of `wave` under `wave_of(p) = 1 + p * waves / n`.
fn first_position_of_wave(wave: usize, wave_count: usize, n: usize) -> usize {
    // Smallest p with p * waves / n >= wave - 1, i.e. p >= ceil((wave - 1) * n / waves).
    ((wave - 1) * n).div_ceil(wave_count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::gating::{TaskListSource, validate};

    #[test]
    fn generated_lists_are_valid_at_several_sizes() {
        for (n, seed) in [(1, 0), (2, 7), (499, 1), (1_001, 2), (5_000, 3)] {
            let (tasks, existing) = generate_task_list(n, seed);
            let validation = validate(TaskListSource::Tasks(&tasks), &existing);
            assert!(
                validation.is_valid(),
                "n={n}: {:?}",
                validation.errors.first()
            );
            assert_eq!(validation.tasks.len(), n);
            assert_eq!(validation.waves.len(), (n / TASKS_PER_WAVE).max(1));
            assert!(
                validation.warnings.is_empty(),
                "{:?}",
                validation.warnings.first()
            );
        }
    }

    #[test]
    fn generation_is_deterministic_and_seeded() {
        assert_eq!(generate_task_list(300, 5), generate_task_list(300, 5));
        assert_ne!(generate_task_list(3000, 5).0, generate_task_list(3000, 6).0);
    }

    #[test]
    fn wave_starts_match_the_wave_formula() {
        for (n, waves) in [(1_000, 2), (1_234, 2), (100_000, 200), (777, 1)] {
            for position in 0..n {
                let wave = 1 + position * waves / n;
                let start = first_position_of_wave(wave, waves, n);
                assert!(start <= position);
                assert!(start == 0 || 1 + (start - 1) * waves / n < wave);
            }
        }
    }
}
