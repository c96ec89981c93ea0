//! Loop-plan throughput at 1k / 10k / 100k generated tasks: per-task time should stay
//! flat as the plan grows. `cargo bench --bench loop_plan` (well under 2 minutes).
//!
//! `plan` builds the plan from an already parsed request (the server's case),
//! `render` turns it into plan.md, `parse` reads that plan.md back.

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use plangate::domain::loop_plan::generate::generate_request;
use plangate::domain::loop_plan::{parse_markdown, plan, render_markdown};

fn loop_plan(c: &mut Criterion) {
    let mut group = c.benchmark_group("loop_plan");
    // Flat sampling: 10 samples of equal iteration counts, so a 2 s iteration at 100k
    // costs 10 runs, not the 55 of criterion's linear ramp.
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    for n in [1_000usize, 10_000, 100_000] {
        // Generated outside the timed loops.
        let request = generate_request(n, 42);
        let built = plan(&request);
        assert!(built.is_valid());
        let markdown = render_markdown(&built);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("plan", n), &request, |b, request| {
            b.iter(|| black_box(plan(request)))
        });
        group.bench_with_input(BenchmarkId::new("render", n), &built, |b, built| {
            b.iter(|| black_box(render_markdown(built)))
        });
        group.bench_with_input(BenchmarkId::new("parse", n), &markdown, |b, markdown| {
            b.iter(|| black_box(parse_markdown(markdown)))
        });
    }
    group.finish();
}

criterion_group!(benches, loop_plan);
criterion_main!(benches);
