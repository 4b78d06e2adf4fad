//! The cost of one tick of `/hystrix.stream` (every command's, pool's and collapser's message
//! rendered once; one sampler serves every client) and of one `/metrics` scrape, for a registry
//! of 100 and of 1000 command keys that have all run.
//!
//! Run with `cargo bench -p hystrix-dashboard --bench stream_tick`.

#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;

mod common;

use common::registry_with;
use criterion::{Criterion, criterion_group, criterion_main};
use hystrix_dashboard::{Dashboard, stream};

fn ticks(c: &mut Criterion) {
    let mut group = c.benchmark_group("dashboard_tick");
    for commands in [100, 1000] {
        let registry = registry_with(commands);
        let dashboard = Dashboard::builder(registry.clone()).build();
        group.bench_function(format!("hystrix.stream tick, {commands} commands"), |b| {
            b.iter(|| black_box(stream::sample(&registry)));
        });
        group.bench_function(format!("/metrics scrape, {commands} commands"), |b| {
            b.iter(|| black_box(dashboard.render_metrics()));
        });
    }
    group.finish();
}

criterion_group!(benches, ticks);
criterion_main!(benches);
