//! The cost of the fleet view (`/turbine.stream`): one 500 ms tick of 100 instances × 100
//! commands, each instance's 100 `/hystrix.stream` messages read (parsed into records), then
//! the merge written; and the memory the instances' messages hold. The network is left out
//! (each instance's reader is its own task; this is the work they and the merge do).
//!
//! Run with `cargo bench -p hystrix-dashboard --bench turbine`.

#![allow(missing_docs, clippy::unwrap_used)]

use std::alloc::System;
use std::hint::black_box;
use std::time::Duration;

mod common;

use common::registry_with;
use criterion::{Criterion, criterion_group, criterion_main};
use hystrix_dashboard::stream;
use hystrix_dashboard::turbine::bench::Aggregation;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

/// Counts the bytes allocated, to measure what the instances' messages hold.
#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const INSTANCES: usize = 100;
const COMMANDS: usize = 100;

fn tick(c: &mut Criterion) {
    let registry = registry_with(COMMANDS);
    let lines: Vec<Vec<u8>> = stream::sample(&registry)
        .iter()
        .map(|m| format!("data: {m}").into_bytes())
        .collect();
    let feed = |aggregation: &Aggregation| {
        for instance in 0..INSTANCES {
            for line in &lines {
                aggregation.line(instance, line);
            }
        }
    };

    // Memory: what the instances' latest messages hold once read (net bytes allocated).
    let region = Region::new(ALLOCATOR);
    let mut aggregation = Aggregation::new(INSTANCES);
    feed(&aggregation);
    let change = region.change();
    let held = change.bytes_allocated as i64 - change.bytes_deallocated as i64
        + change.bytes_reallocated as i64;
    let merged = aggregation.tick();
    let per = held / (INSTANCES * lines.len()) as i64;
    eprintln!(
        "memory: {INSTANCES} instances x {} messages ({} bytes of JSON each on average) hold {held} bytes: {per} bytes per instance per message; {} merged messages",
        lines.len(),
        lines.iter().map(Vec::len).sum::<usize>() / lines.len(),
        merged.len(),
    );

    // CPU: this thread's CPU time for whole ticks (every instance's 100 messages read, then
    // the merge written), which a loaded machine does not inflate as it does wall time.
    let mut cpu: Vec<Duration> = (0..25)
        .map(|_| {
            let start = cpu_time::ThreadTime::now();
            feed(&aggregation);
            black_box(aggregation.tick());
            start.elapsed()
        })
        .skip(5)
        .collect();
    cpu.sort();
    eprintln!(
        "cpu per tick ({INSTANCES} x {COMMANDS}): min {:.1} ms, median {:.1} ms, max {:.1} ms (20 ticks)",
        cpu[0].as_secs_f64() * 1e3,
        cpu[cpu.len() / 2].as_secs_f64() * 1e3,
        cpu[cpu.len() - 1].as_secs_f64() * 1e3,
    );

    let mut group = c.benchmark_group("turbine");
    group.sample_size(20);
    group.bench_function("read 100 instances x 100 commands", |b| {
        b.iter(|| feed(black_box(&aggregation)));
    });
    group.bench_function("merge 100 instances x 100 commands", |b| {
        b.iter(|| black_box(aggregation.tick()));
    });
    group.bench_function("tick: read and merge 100 x 100", |b| {
        b.iter(|| {
            feed(&aggregation);
            black_box(aggregation.tick())
        });
    });
    group.finish();
}

criterion_group!(benches, tick);
criterion_main!(benches);
