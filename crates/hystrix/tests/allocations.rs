//! The hot paths allocate nothing: a SEMAPHORE `execute()` and a ready `execute_async()` on the
//! success path, with a fallback, and when short-circuited (by the forceOpen flag, and by an
//! OPEN breaker, opened by hand or tripped by failures, with and without a fallback, blocking
//! and async). Counted by a global allocator that
//! counts only the measuring thread's allocations.
#![allow(clippy::unwrap_used, unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use hystrix::{Command, IsolationStrategy, Registry};

struct CountingAllocator;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    /// Bytes allocated and not yet freed while counting (requested sizes).
    static LIVE_BYTES: Cell<i64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only adds a thread-local count.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.with(|n| n.set(n.get() + 1));
            LIVE_BYTES.with(|n| n.set(n.get() + layout.size() as i64));
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.with(Cell::get) {
            LIVE_BYTES.with(|n| n.set(n.get() - layout.size() as i64));
        }
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Allocations made by `f` on this thread, per call, after a warm-up.
fn allocations_per_call(mut f: impl FnMut()) -> u64 {
    for _ in 0..100 {
        f();
    }
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|c| c.set(true));
    for _ in 0..1_000 {
        f();
    }
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(Cell::get) / 1_000
}

type Never = std::convert::Infallible;

#[test]
fn hot_paths_allocate_nothing() {
    let registry = Registry::new();
    let semaphore = |key: &str| {
        Command::builder(key)
            .group("Alloc")
            .isolation(IsolationStrategy::Semaphore)
            .build_in(&registry)
            .unwrap()
    };
    let cmd = semaphore("Hot");
    let open = semaphore("Open");
    registry
        .properties()
        .set("hystrix.command.Open.circuitBreaker.forceOpen", true)
        .unwrap();

    let execute = allocations_per_call(|| {
        black_box(cmd.run(|| Ok::<u64, Never>(black_box(7))).execute()).unwrap();
    });
    let with_fallback = allocations_per_call(|| {
        let value = cmd
            .run(|| Err::<u64, _>(black_box(1u32)))
            .fallback(|_| Ok::<u64, Never>(0))
            .execute();
        black_box(value).unwrap();
    });
    let short_circuited = allocations_per_call(|| {
        let value = open
            .run(|| Ok::<u64, Never>(7))
            .fallback(|_| Ok::<u64, Never>(0))
            .execute();
        black_box(value).unwrap();
    });
    let tripped = Command::builder("Tripped")
        .group("Alloc")
        .isolation(IsolationStrategy::Semaphore)
        .circuit_breaker_sleep_window(std::time::Duration::from_secs(3600))
        .build_in(&registry)
        .unwrap();
    tripped.circuit_breaker().force_open();
    let open_state = allocations_per_call(|| {
        let value = tripped
            .run(|| Ok::<u64, Never>(7))
            .fallback(|_| Ok::<u64, Never>(0))
            .execute();
        black_box(value).unwrap();
    });
    let open_state_no_fallback = allocations_per_call(|| {
        let err = tripped.run(|| Ok::<u64, Never>(7)).execute().unwrap_err();
        black_box(err);
    });
    let per_host = Command::builder("PerHost")
        .group("Alloc")
        .isolation(IsolationStrategy::Semaphore)
        .breaker_per_key(std::num::NonZeroUsize::new(16).unwrap(), None)
        .build_in(&registry)
        .unwrap();
    let host: std::sync::Arc<str> = "api.example".into();
    let keyed = allocations_per_call(|| {
        let value = per_host
            .run(|| Ok::<u64, Never>(7))
            .breaker_key(std::sync::Arc::clone(&host))
            .execute();
        black_box(value).unwrap();
    });
    let execute_async = allocations_per_call(|| {
        let mut future = pin!(cmd.run_async(async { Ok::<u64, Never>(7) }).execute_async());
        let polled = future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        assert!(black_box(polled).is_ready());
    });
    // Tripped by failures (the breaker keeps the trip cause; a rejection refers to it).
    let test = hystrix::testing::TestRegistry::new();
    let failing = Command::builder("Failing")
        .group("Alloc")
        .isolation(IsolationStrategy::Semaphore)
        .circuit_breaker_sleep_window(std::time::Duration::from_secs(3600))
        .build_in(test.registry())
        .unwrap();
    for _ in 0..20 {
        let _ = failing.run(|| Err::<u64, _>(black_box(1u32))).execute();
    }
    test.advance(std::time::Duration::from_millis(500));
    assert!(failing.circuit_breaker().is_open());
    let tripped_no_fallback = allocations_per_call(|| {
        let err = failing.run(|| Ok::<u64, u32>(7)).execute().unwrap_err();
        assert_eq!(err.failure_type(), hystrix::FailureType::ShortCircuit);
        black_box(err);
    });
    let tripped_with_fallback = allocations_per_call(|| {
        let value = failing
            .run(|| Ok::<u64, u32>(7))
            .fallback(|_| Ok::<u64, Never>(0))
            .execute();
        black_box(value).unwrap();
    });
    let poll_once = |future: &mut std::pin::Pin<&mut dyn Future<Output = _>>| {
        future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
    };
    let tripped_async = allocations_per_call(|| {
        let future = pin!(
            failing
                .run_async(async { Ok::<u64, u32>(7) })
                .execute_async()
        );
        let mut future: std::pin::Pin<&mut dyn Future<Output = _>> = future;
        let polled = poll_once(&mut future);
        assert!(matches!(black_box(polled), Poll::Ready(Err(_))));
    });
    let tripped_async_fallback = allocations_per_call(|| {
        let future = pin!(
            failing
                .run_async(async { Ok::<u64, u32>(7) })
                .fallback(|_| Ok::<u64, Never>(0))
                .execute_async()
        );
        let mut future: std::pin::Pin<&mut dyn Future<Output = _>> = future;
        let polled = poll_once(&mut future);
        assert!(matches!(black_box(polled), Poll::Ready(Ok(0))));
    });
    assert_eq!(
        (
            execute,
            with_fallback,
            short_circuited,
            open_state,
            open_state_no_fallback,
            keyed,
            execute_async
        ),
        (0, 0, 0, 0, 0, 0, 0)
    );
    assert_eq!(
        (
            tripped_no_fallback,
            tripped_with_fallback,
            tripped_async,
            tripped_async_fallback
        ),
        (0, 0, 0, 0)
    );
}

/// An idle keyed breaker (the cloud pattern's resource differentiation) takes at most 512
/// bytes, map entry and key included: measured over 100 000 keys, for each window kind (a
/// COUNT window of the largest size keyed breakers accept, 200 calls, used full). Run with
/// `--nocapture` to see the figures.
#[test]
fn an_idle_keyed_breaker_takes_at_most_512_bytes() {
    for (window, size) in [("TIME", 100), ("COUNT", 200), ("CONSECUTIVE", 100)] {
        let per_key = keyed_breaker_bytes(window, size);
        println!("an idle keyed breaker ({window} window) takes {per_key} bytes (100 000 keys)");
        assert!(
            per_key <= 512,
            "{window}: {per_key} bytes per keyed breaker"
        );
    }
}

fn keyed_breaker_bytes(window: &str, size: u32) -> i64 {
    const KEYS: i64 = 100_000;
    let registry = Registry::new();
    let cmd = Command::builder("Tenants")
        .group("Alloc")
        .isolation(IsolationStrategy::Semaphore)
        .property("circuitBreaker.window.type", window)
        .property("circuitBreaker.window.size", size)
        .breaker_per_key(std::num::NonZeroUsize::new(KEYS as usize).unwrap(), None)
        .build_in(&registry)
        .unwrap();
    let names: Vec<std::sync::Arc<str>> =
        (0..KEYS).map(|n| format!("tenant-{n:06}").into()).collect();
    LIVE_BYTES.with(|n| n.set(0));
    COUNTING.with(|c| c.set(true));
    for name in &names {
        let value = cmd
            .run(|| Ok::<u64, Never>(7))
            .breaker_key(std::sync::Arc::clone(name))
            .execute();
        black_box(value).unwrap();
    }
    COUNTING.with(|c| c.set(false));
    assert_eq!(cmd.keyed_circuit_breaker_count(), KEYS as usize);
    LIVE_BYTES.with(Cell::get) / KEYS
}

#[cfg(feature = "tower")]
#[test]
fn a_call_through_the_tower_layer_allocates_nothing() {
    use tower::{Layer, Service, service_fn};

    let registry = Registry::new();
    let cmd = Command::builder("Layered")
        .group("Alloc")
        .isolation(IsolationStrategy::Semaphore)
        .build_in(&registry)
        .unwrap();
    let mut svc = hystrix::tower::HystrixLayer::new(cmd)
        .fallback_value(0u64)
        .layer(service_fn(|request: u64| {
            std::future::ready(Ok::<u64, Never>(request))
        }));
    let per_call = allocations_per_call(|| {
        let mut cx = Context::from_waker(Waker::noop());
        assert!(svc.poll_ready(&mut cx).is_ready());
        let polled = pin!(svc.call(black_box(7))).poll(&mut cx);
        assert!(black_box(polled).is_ready());
    });
    assert_eq!(per_call, 0);
}
