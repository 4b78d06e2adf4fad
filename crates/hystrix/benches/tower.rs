//! Cost of one call through `HystrixLayer`, beside the bare service.
//!
//! Run with `cargo bench -p hystrix-rs --bench tower`. The inner service answers with a ready
//! future; each iteration is `poll_ready`, `call` and one poll of the response future with a
//! no-op waker (no runtime in the measurement).

#![allow(missing_docs, clippy::unwrap_used)]

use std::borrow::Cow;
use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::hint::black_box;
use std::num::NonZeroUsize;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use hystrix::command::KeyedCommands;
use hystrix::tower::HystrixLayer;
use hystrix::{Command, IsolationStrategy, Registry};
use tower::{Layer, Service, service_fn};

fn echo(request: u64) -> Ready<Result<u64, Infallible>> {
    ready(Ok(request))
}

/// One call: readiness, call, and the (ready) response.
fn call_once<S: Service<u64>>(svc: &mut S, request: u64) -> Result<S::Response, S::Error> {
    let mut cx = Context::from_waker(Waker::noop());
    match svc.poll_ready(&mut cx) {
        Poll::Ready(Ok(())) => {}
        _ => unreachable!("the bench services are always ready"),
    }
    match pin!(svc.call(request)).poll(&mut cx) {
        Poll::Ready(result) => result,
        Poll::Pending => unreachable!("the bench service answers at once"),
    }
}

fn command(registry: &Registry, key: &str, timeout: bool) -> Command {
    Command::builder(key)
        .group("Bench")
        .isolation(IsolationStrategy::Semaphore)
        .timeout_enabled(timeout)
        .build_in(registry)
        .unwrap()
}

fn layer(c: &mut Criterion) {
    let registry = Registry::new();
    let mut bare = service_fn(echo);
    let mut plain = HystrixLayer::new(command(&registry, "Plain", false)).layer(service_fn(echo));
    let mut timed = HystrixLayer::new(command(&registry, "Timed", true)).layer(service_fn(echo));
    let keyed = KeyedCommands::builder(|key| {
        Command::builder(format!("Keyed-{key}"))
            .group("Bench")
            .isolation(IsolationStrategy::Semaphore)
            .timeout_enabled(false)
    })
    .registry(&registry)
    .max_keys(NonZeroUsize::new(100).unwrap())
    .build();
    let mut by_key = HystrixLayer::keyed(keyed, |request: &u64| {
        Cow::Borrowed(if request % 2 == 0 { "even" } else { "odd" })
    })
    .layer(service_fn(echo));

    let mut group = c.benchmark_group("tower_call");
    group.bench_function("bare service", |b| {
        b.iter(|| call_once(&mut bare, black_box(7)))
    });
    group.bench_function("HystrixLayer, timeout off", |b| {
        b.iter(|| call_once(&mut plain, black_box(7)))
    });
    group.bench_function("HystrixLayer, timeout 1 s", |b| {
        b.iter(|| call_once(&mut timed, black_box(7)))
    });
    group.bench_function("HystrixLayer keyed (2 keys), timeout off", |b| {
        b.iter(|| call_once(&mut by_key, black_box(7)))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = layer
}
criterion_main!(benches);
