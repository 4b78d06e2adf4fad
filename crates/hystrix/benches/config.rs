//! Cost of a run-time property change (`Properties::set`, which the admin endpoint's PUT calls)
//! against the number of command keys in use.
//!
//! Run with `cargo bench -p hystrix-rs --bench config`. Each row builds its commands outside
//! the timed loop, then sets one property again and again, alternating two values so that every
//! call really changes it (a `set` to the current value does nothing).
//!
//! - a per-key property (`hystrix.command.<Key>.…`) touches that key's snapshot only: its cost
//!   must not grow with the number of keys;
//! - a global default (`hystrix.command.default.…`) must reach every key in use: it grows with
//!   their number, by nature.

#![allow(missing_docs, clippy::unwrap_used)]

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hystrix::{Command, IsolationStrategy, Registry};

/// The numbers of command keys in use the rows compare.
const KEYS: [usize; 2] = [10, 20_000];

const PROPERTY: &str = "execution.isolation.thread.timeoutInMilliseconds";

/// A registry with `keys` commands built (`Cmd0`, `Cmd1`, ...), kept alive with it.
fn registry_with(keys: usize) -> (Registry, Vec<Command>) {
    let registry = Registry::new();
    let commands = (0..keys)
        .map(|n| {
            Command::builder(format!("Cmd{n}"))
                .group("Bench")
                .isolation(IsolationStrategy::Semaphore)
                .build_in(&registry)
                .unwrap()
        })
        .collect();
    (registry, commands)
}

fn set(c: &mut Criterion) {
    let mut group = c.benchmark_group("config_set");
    for keys in KEYS {
        let (registry, _commands) = registry_with(keys);
        let rows = [
            ("set one per-key property, keys in use", "Cmd0"),
            ("set one global default, keys in use", "default"),
        ];
        for (row, key) in rows {
            let name = format!("hystrix.command.{key}.{PROPERTY}");
            let mut flip = false;
            group.bench_with_input(BenchmarkId::new(row, keys), &keys, |b, _| {
                b.iter(|| {
                    flip = !flip;
                    registry
                        .properties()
                        .set(&name, if flip { 500 } else { 600 })
                        .unwrap();
                })
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = set
}
criterion_main!(benches);
