//! Throughput of `decide()` on one core (issue 14: at least 1,000,000
//! decisions a second for a decision that creates a job). The scheduler
//! decides for every instance whose check is due, so the engine's cost per
//! instance is this number.
//!
//! `VERGENCE_BENCH_SMOKE=1` measures for a fraction of a second, so CI can
//! check that the benchmark still runs without paying for precise numbers.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use vergence_engine::{Facts, decide};
use vergence_model::FetchMode;

#[path = "../tests/decide/fixtures.rs"]
mod fixtures;

use fixtures::{compiled, converged, fresh, now};

fn bench_decide(c: &mut Criterion) {
    let now = now();
    let facts = Facts::at(now);
    let mut group = c.benchmark_group("decide");
    group.throughput(Throughput::Elements(1));
    if std::env::var_os("VERGENCE_BENCH_SMOKE").is_some_and(|v| v == "1") {
        group
            .warm_up_time(Duration::from_millis(100))
            .measurement_time(Duration::from_millis(300))
            .sample_size(10);
    }

    let apply = fresh(compiled(None), now);
    assert_eq!(decide(&apply, &facts).jobs.len(), 1, "starts the apply");
    group.bench_function("creates an apply job", |b| {
        b.iter(|| decide(black_box(&apply), black_box(&facts)));
    });

    let fetch = fresh(compiled(Some(FetchMode::ExitCode)), now);
    assert_eq!(decide(&fetch, &facts).jobs.len(), 1, "starts the fetch");
    group.bench_function("creates a fetch job", |b| {
        b.iter(|| decide(black_box(&fetch), black_box(&facts)));
    });

    let idle = converged(now);
    group.bench_function("no-op", |b| {
        b.iter(|| decide(black_box(&idle), black_box(&facts)));
    });
    group.finish();
}

criterion_group!(benches, bench_decide);
criterion_main!(benches);
