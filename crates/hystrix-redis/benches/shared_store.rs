//! What sharing breaker state through Redis costs, and what it buys.
//!
//! Run with `cargo bench -p hystrix-redis --bench shared_store` (it starts its own
//! redis-server on a free port, as the tests do).
//!
//! - `execute/store_off` vs `execute/store_on`: one execution of a SEMAPHORE command with a
//!   blocking closure, without a state store vs with a Redis store and sync rounds running
//!   every 500 ms in the background. The hot path never touches Redis, so they should match.
//! - `trip_propagation/pubsub` and `trip_propagation/polling`: from `force_open` on one
//!   instance to the other instance's breaker reading OPEN; with Pub/Sub (sync interval 5 s,
//!   so only the push can be that fast) and with polling alone (interval 200 ms).

#![allow(missing_docs, clippy::unwrap_used)]

#[path = "../tests/common/server.rs"]
mod server;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use hystrix::circuit::store::{SharedStatus, StateStore};
use hystrix::{Command, CommandKey, IsolationStrategy, Registry, Status};
use hystrix_redis::RedisStateStore;
use server::{RedisServer, runtime};
use tokio::runtime::Runtime;

type Never = std::convert::Infallible;

fn store(rt: &Runtime, server: &RedisServer, pubsub: bool) -> RedisStateStore {
    RedisStateStore::builder(server.url(), "bench")
        .pubsub(pubsub)
        .runtime(rt.handle().clone())
        .build()
        .unwrap()
}

fn registry(rt: &Runtime, store: Option<&RedisStateStore>, interval: Duration) -> Registry {
    let builder = Registry::builder().executor(rt.handle().clone());
    match store {
        Some(store) => builder
            .state_store(store.clone())
            .state_store_sync_interval(Some(interval))
            .build(),
        None => builder.build(),
    }
}

fn command(registry: &Registry, key: &str, shared: bool) -> Command {
    Command::builder(key)
        .group("Bench")
        .isolation(IsolationStrategy::Semaphore)
        .timeout_enabled(false)
        .shared_state(shared)
        .build_in(registry)
        .unwrap()
}

fn execute(c: &mut Criterion) {
    let server = RedisServer::start();
    let rt = runtime();
    let store = store(&rt, &server, true);
    let off = registry(&rt, None, Duration::ZERO);
    let on = registry(&rt, Some(&store), Duration::from_millis(500));
    let plain = command(&off, "Plain", false);
    let shared = command(&on, "Shared", true);
    let mut group = c.benchmark_group("execute");
    group.bench_function("store_off", |b| {
        b.iter(|| plain.run(|| Ok::<u64, Never>(black_box(1))).execute())
    });
    group.bench_function("store_on", |b| {
        b.iter(|| shared.run(|| Ok::<u64, Never>(black_box(1))).execute())
    });
    group.finish();
    let status = on.state_store_status().unwrap();
    assert!(!status.degraded, "{status:?}");
}

/// From `force_open` on A to B reading OPEN, once; both are closed (and the store) first.
fn propagate_once(rt: &Runtime, probe: &RedisStateStore, a: &Command, b: &Command) -> Duration {
    let key = CommandKey::new("Propagated").unwrap();
    loop {
        a.circuit_breaker().force_close();
        b.circuit_breaker().force_close();
        std::thread::sleep(Duration::from_millis(20));
        let closed = rt
            .block_on(probe.fetch(&key))
            .is_ok_and(|view| view.status == SharedStatus::Closed);
        if closed
            && a.circuit_breaker().status() == Status::Closed
            && b.circuit_breaker().status() == Status::Closed
        {
            break;
        }
    }
    let start = Instant::now();
    a.circuit_breaker().force_open();
    while b.circuit_breaker().status() != Status::Open {
        assert!(start.elapsed() < Duration::from_secs(10), "no propagation");
        std::hint::spin_loop();
    }
    start.elapsed()
}

fn trip_propagation(c: &mut Criterion) {
    let server = RedisServer::start();
    let rt = runtime();
    let mut group = c.benchmark_group("trip_propagation");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5));
    for (name, pubsub, interval) in [
        ("pubsub", true, Duration::from_secs(5)),
        ("polling", false, Duration::from_millis(200)),
    ] {
        let (sa, sb) = (store(&rt, &server, pubsub), store(&rt, &server, pubsub));
        let (ra, rb) = (
            registry(&rt, Some(&sa), interval),
            registry(&rt, Some(&sb), interval),
        );
        let (a, b) = (
            command(&ra, "Propagated", true),
            command(&rb, "Propagated", true),
        );
        // Subscribed before measuring.
        let start = Instant::now();
        while pubsub && !(sa.pubsub_connected() && sb.pubsub_connected()) {
            assert!(start.elapsed() < Duration::from_secs(10), "no subscription");
            std::thread::sleep(Duration::from_millis(5));
        }
        group.bench_function(name, |bench| {
            bench.iter_custom(|iters| (0..iters).map(|_| propagate_once(&rt, &sa, &a, &b)).sum())
        });
    }
    group.finish();
}

criterion_group!(benches, execute, trip_propagation);
criterion_main!(benches);
