//! Cost of one execution on the main paths, beside a bare call of the same closure.
//!
//! Run with `cargo bench -p hystrix-rs --bench command`. Each row builds its command outside the
//! timed loop; the run is a closure (or ready future) returning a `u64`.

#![allow(missing_docs, clippy::unwrap_used)]

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use hystrix::{Command, IsolationStrategy, Registry};

type Never = std::convert::Infallible;

fn semaphore_command(registry: &Registry, key: &str, timeout: bool) -> Command {
    Command::builder(key)
        .group("Bench")
        .isolation(IsolationStrategy::Semaphore)
        .timeout_enabled(timeout)
        .build_in(registry)
        .unwrap()
}

/// Polls a future that is ready at once (no runtime in the measurement).
fn poll_ready<F: Future>(future: F) -> F::Output {
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    match pin!(future).poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("the bench future is ready at once"),
    }
}

/// Fails executions of `command` until the health check (every 500 ms by default) opens it.
fn trip_by_errors(command: &Command) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !command.is_circuit_breaker_open() {
        assert!(
            std::time::Instant::now() < deadline,
            "failures did not trip the breaker"
        );
        for _ in 0..25 {
            let _ = command.run(|| Err::<u64, &str>("down")).execute();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(matches!(
        command.circuit_breaker().trip_cause(),
        Some(hystrix::TripCause::Message(_) | hystrix::TripCause::Failure(_))
    ));
}

fn execute(c: &mut Criterion) {
    let registry = Registry::new();
    let plain = semaphore_command(&registry, "Plain", false);
    let timed = semaphore_command(&registry, "Timed", true);
    let unmeasured = semaphore_command(&registry, "Unmeasured", false);
    let unguarded = Command::builder("Unguarded")
        .group("Bench")
        .isolation(IsolationStrategy::Semaphore)
        .timeout_enabled(false)
        .circuit_breaker_enabled(false)
        .build_in(&registry)
        .unwrap();
    registry
        .properties()
        .set(
            "hystrix.command.Unmeasured.metrics.rollingPercentile.enabled",
            false,
        )
        .unwrap();
    let open = semaphore_command(&registry, "Open", false);
    registry
        .properties()
        .set("hystrix.command.Open.circuitBreaker.forceOpen", true)
        .unwrap();
    // Opened for real (state OPEN, an hour's sleep window) by failures, not by the forceOpen
    // flag nor `force_open()` (whose rejections have no failure to report, so no trip cause to
    // clone).
    let tripped = Command::builder("Tripped")
        .group("Bench")
        .isolation(IsolationStrategy::Semaphore)
        .circuit_breaker_sleep_window(Duration::from_secs(3600))
        .build_in(&registry)
        .unwrap();
    trip_by_errors(&tripped);
    let full = Command::builder("Full")
        .group("Bench")
        .isolation(IsolationStrategy::Semaphore)
        .semaphore_max_concurrent_requests(0)
        .build_in(&registry)
        .unwrap();

    let mut group = c.benchmark_group("closed_success_sync");
    let bare = || Ok::<u64, Never>(black_box(7));
    group.bench_function("bare closure", |b| b.iter(bare));
    group.bench_function("execute, timeout off", |b| {
        b.iter(|| plain.run(|| Ok::<u64, Never>(black_box(7))).execute())
    });
    group.bench_function("execute, timeout off, no latency percentiles", |b| {
        b.iter(|| unmeasured.run(|| Ok::<u64, Never>(black_box(7))).execute())
    });
    group.bench_function("execute, timeout off, breaker disabled", |b| {
        b.iter(|| unguarded.run(|| Ok::<u64, Never>(black_box(7))).execute())
    });
    group.bench_function("execute, timeout 1 s", |b| {
        b.iter(|| timed.run(|| Ok::<u64, Never>(black_box(7))).execute())
    });
    group.bench_function("execute with fallback, timeout 1 s", |b| {
        b.iter(|| {
            timed
                .run(|| Ok::<u64, Never>(black_box(7)))
                .fallback(|_| Ok::<u64, Never>(0))
                .execute()
        })
    });
    group.finish();

    let mut group = c.benchmark_group("closed_success_async");
    group.bench_function("bare ready future", |b| {
        b.iter(|| poll_ready(async { Ok::<u64, Never>(black_box(7)) }))
    });
    group.bench_function("execute_async, timeout off", |b| {
        b.iter(|| {
            poll_ready(
                plain
                    .run_async(async { Ok::<u64, Never>(black_box(7)) })
                    .execute_async(),
            )
        })
    });
    group.bench_function("execute_async, timeout 1 s", |b| {
        b.iter(|| {
            poll_ready(
                timed
                    .run_async(async { Ok::<u64, Never>(black_box(7)) })
                    .execute_async(),
            )
        })
    });
    group.finish();

    let mut group = c.benchmark_group("rejected");
    group.bench_function("circuit OPEN, no fallback", |b| {
        b.iter(|| tripped.run(|| Ok::<u64, Never>(black_box(7))).execute())
    });
    group.bench_function("circuit OPEN, fallback", |b| {
        b.iter(|| {
            tripped
                .run(|| Ok::<u64, Never>(black_box(7)))
                .fallback(|_| Ok::<u64, Never>(0))
                .execute()
        })
    });
    group.bench_function("forceOpen flag, no fallback", |b| {
        b.iter(|| open.run(|| Ok::<u64, Never>(black_box(7))).execute())
    });
    group.bench_function("forceOpen flag, fallback", |b| {
        b.iter(|| {
            open.run(|| Ok::<u64, Never>(black_box(7)))
                .fallback(|_| Ok::<u64, Never>(0))
                .execute()
        })
    });
    group.bench_function("semaphore full, no fallback", |b| {
        b.iter(|| full.run(|| Ok::<u64, Never>(black_box(7))).execute())
    });
    group.finish();
    keyed(c);
}

/// Keyed breakers (one per host/tenant): a call through an existing key's breaker, and the
/// first call of a new key (a breaker made in the bounded map, evicting the least recently
/// used of 10 000).
fn keyed(c: &mut Criterion) {
    let registry = Registry::new();
    let per_key = Command::builder("PerKey")
        .group("Bench")
        .isolation(IsolationStrategy::Semaphore)
        .timeout_enabled(false)
        .breaker_per_key(std::num::NonZeroUsize::new(10_000).unwrap(), None)
        .build_in(&registry)
        .unwrap();
    let host: std::sync::Arc<str> = "api.example".into();
    let fresh: Vec<std::sync::Arc<str>> = (0..1_000_000)
        .map(|n| format!("tenant-{n}").into())
        .collect();
    let mut next = 0;
    let mut group = c.benchmark_group("keyed_breakers");
    group.bench_function("execute via a keyed breaker, key known", |b| {
        b.iter(|| {
            per_key
                .run(|| Ok::<u64, Never>(black_box(7)))
                .breaker_key(std::sync::Arc::clone(&host))
                .execute()
        })
    });
    group.bench_function(
        "execute via a keyed breaker, new key (map of 10 000)",
        |b| {
            b.iter(|| {
                next = (next + 1) % fresh.len();
                per_key
                    .run(|| Ok::<u64, Never>(black_box(7)))
                    .breaker_key(std::sync::Arc::clone(&fresh[next]))
                    .execute()
            })
        },
    );
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = execute
}
criterion_main!(benches);
