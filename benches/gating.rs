//! Gating throughput at 1k / 10k / 100k generated tasks: per-task time should stay
//! flat as the list grows (linear gates). `cargo bench --bench gating`
//!
//! Two paths: `value` gates an already parsed `serde_json::Value` (the server's
//! request body), `text` parses JSON text straight into tasks and gates them (the CLI).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use plangate::domain::gating::generate::generate_task_list;
use plangate::domain::gating::{TaskListSource, validate};

fn gating(c: &mut Criterion) {
    let mut group = c.benchmark_group("validate");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    for n in [1_000usize, 10_000, 100_000] {
        // Generated outside the timed loop.
        let (tasks, existing_files) = generate_task_list(n, 42);
        let text = tasks.to_string();
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("value", n), &tasks, |b, tasks| {
            b.iter(|| {
                let validation = validate(TaskListSource::Tasks(tasks), &existing_files);
                assert!(validation.is_valid());
                black_box(validation)
            })
        });
        group.bench_with_input(BenchmarkId::new("text", n), &text, |b, text| {
            b.iter(|| {
                let validation = validate(TaskListSource::Json(text), &existing_files);
                assert!(validation.is_valid());
                black_box(validation)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, gating);
criterion_main!(benches);
