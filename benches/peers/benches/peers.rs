//! hystrix-rs side by side with its Rust peers: one criterion group per BENCH_PLAN §8 scenario,
//! one function per implementation (see `common/scenarios.rs` for each configuration and its
//! semantic caveats).
//!
//! Run with `cargo bench -p hystrix-peers-bench --bench peers [-- FILTER]`, or `scripts/bench`
//! for the whole suite and a summary table. Every object is built before its measurement;
//! async rows run on a tokio current-thread runtime; F runs pre-spawned threads.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};

#[allow(dead_code)]
mod common;

fn main() {
    let mut criterion = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .configure_from_args();

    let mut scenarios = common::all().into_iter().peekable();
    while let Some(first) = scenarios.next() {
        let group_name = first.group;
        let mut group = criterion.benchmark_group(group_name);
        if group_name == common::scenarios::H {
            // Each pre-fill of the window is long (tower-resilience records its calls one by
            // one, O(n) each): fewer samples.
            group.sample_size(10);
        }
        let mut next = Some(first);
        while let Some(scenario) = next.take() {
            bench(&mut group, scenario);
            if scenarios.peek().is_some_and(|s| s.group == group_name) {
                next = scenarios.next();
            }
        }
        group.finish();
    }
    criterion.final_summary();
}

fn bench(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    scenario: common::Scenario,
) {
    if let Some(elements) = scenario.elements {
        group.throughput(Throughput::Elements(elements));
    }
    // Built on the first call only, so a filtered-out row builds nothing, and dropped (threads
    // joined, permits released) when this row is done.
    let mut build = Some(scenario.build);
    let mut runner: Option<common::Runner> = None;
    let mut routine = |b: &mut criterion::Bencher<'_>| {
        let run = runner.get_or_insert_with(|| (build.take().expect("built once"))());
        b.iter_custom(run);
    };
    match &scenario.param {
        Some(param) => group.bench_function(BenchmarkId::new(scenario.name, param), &mut routine),
        None => group.bench_function(scenario.name, &mut routine),
    };
    drop(runner);
}
