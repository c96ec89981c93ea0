//! Gating throughput at 1k / 10k / 100k generated tasks: per-task time should stay
//! flat as the list grows (linear gates). `cargo bench --bench gating`
//!
//! Two paths: `value` gates an already parsed `serde_json::Value`, `text` parses JSON
//! text straight into tasks and gates them (the CLI).
//!
//! `request_50` is the body of a 50-task `POST /v1/task-lists/validate` (12 KB):
//! `scan` only checks it is JSON (serde_json into `IgnoredAny`, the least any JSON
//! reader must do), `parse` reads it into the request type as the server does,
//! `parse_and_gate` adds the gates. `bench/README.md` (gating over HTTP) sets these
//! against the HTTP path's own costs.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use plangate::domain::gating::generate::generate_task_list;
use plangate::domain::gating::{TaskListSource, validate, validate_report};
use plangate::service::task_lists::ValidateRequest;
use serde::de::IgnoredAny;

/// The allocator of the `plangate` binary (`src/main.rs`): the figures are the server's
/// and the CLI's, and allocation is a large share of them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

fn request_50(c: &mut Criterion) {
    let mut group = c.benchmark_group("request_50");
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    let (tasks, existing_files) = generate_task_list(50, 7);
    let body = serde_json::json!({"tasks": tasks, "existing_files": existing_files}).to_string();
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("scan", |b| {
        b.iter(|| black_box(serde_json::from_str::<IgnoredAny>(&body).unwrap()))
    });
    group.bench_function("parse", |b| {
        b.iter(|| black_box(serde_json::from_str::<ValidateRequest>(&body).unwrap()))
    });
    group.bench_function("parse_and_gate", |b| {
        b.iter(|| {
            let request: ValidateRequest = serde_json::from_str(&body).unwrap();
            let tasks = TaskListSource::Parsed(request.tasks.unwrap());
            let (_, report) = validate_report(tasks, &request.existing_files);
            assert!(report.valid);
            black_box(report)
        })
    });
    group.finish();
}

criterion_group!(benches, gating, request_50);
criterion_main!(benches);
