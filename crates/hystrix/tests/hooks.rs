//! The execution hook (SPEC §10, Part A 16): every step of an execution in Hystrix's order,
//! for each outcome; a panicking hook changes nothing.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};

use common::{DependencyError, builder, poll_once};
use hystrix::clock::ManualClock;
use hystrix::context::RequestContext;
use hystrix::{
    Command, CommandKey, EventType, ExecutionHook, FailureType, IsolationStrategy, Registry,
};

/// Records each callback as text.
#[derive(Clone, Default)]
struct Steps(Arc<Mutex<Vec<String>>>);

impl Steps {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
    fn push(&self, step: impl Into<String>) {
        self.0.lock().unwrap().push(step.into());
    }
}

impl ExecutionHook for Steps {
    fn on_start(&self, _: &CommandKey) {
        self.push("start");
    }
    fn on_thread_start(&self, _: &CommandKey) {
        self.push("thread_start");
    }
    fn on_execution_start(&self, _: &CommandKey) {
        self.push("execution_start");
    }
    fn on_execution_emit(&self, _: &CommandKey) {
        self.push("execution_emit");
    }
    fn on_execution_success(&self, _: &CommandKey) {
        self.push("execution_success");
    }
    fn on_execution_error(&self, _: &CommandKey, event: EventType) {
        self.push(format!("execution_error({event})"));
    }
    fn on_thread_complete(&self, _: &CommandKey) {
        self.push("thread_complete");
    }
    fn on_fallback_start(&self, _: &CommandKey) {
        self.push("fallback_start");
    }
    fn on_fallback_emit(&self, _: &CommandKey) {
        self.push("fallback_emit");
    }
    fn on_fallback_success(&self, _: &CommandKey) {
        self.push("fallback_success");
    }
    fn on_fallback_error(&self, _: &CommandKey) {
        self.push("fallback_error");
    }
    fn on_emit(&self, _: &CommandKey) {
        self.push("emit");
    }
    fn on_success(&self, _: &CommandKey) {
        self.push("success");
    }
    fn on_error(&self, _: &CommandKey, failure: FailureType) {
        self.push(format!("error({failure})"));
    }
    fn on_cache_hit(&self, _: &CommandKey) {
        self.push("cache_hit");
    }
    fn on_unsubscribe(&self, _: &CommandKey) {
        self.push("unsubscribe");
    }
}

fn hooked() -> (Registry, ManualClock, Steps) {
    let steps = Steps::default();
    let clock = ManualClock::new();
    let registry = Registry::builder()
        .clock(clock.clone())
        .execution_hook(steps.clone())
        .build();
    (registry, clock, steps)
}

fn ok() -> Result<u32, DependencyError> {
    Ok(1)
}

fn boom() -> Result<u32, DependencyError> {
    Err(DependencyError("boom"))
}

#[test]
fn a_semaphore_success_and_a_thread_success() {
    let (registry, _, steps) = hooked();
    let cmd = builder("Sem").build_in(&registry).unwrap();
    cmd.run(ok).execute().unwrap();
    assert_eq!(
        steps.take(),
        [
            "start",
            "execution_start",
            "execution_emit",
            "emit",
            "execution_success",
            "success"
        ]
    );
    let pooled = Command::builder("Pooled")
        .group("G")
        .isolation(IsolationStrategy::Thread)
        .build_in(&registry)
        .unwrap();
    pooled.run(ok).execute().unwrap();
    assert_eq!(
        steps.take(),
        [
            "start",
            "thread_start",
            "execution_start",
            "execution_emit",
            "emit",
            "execution_success",
            "thread_complete",
            "success"
        ]
    );
    registry.shutdown();
}

#[test]
fn failures_with_and_without_a_fallback() {
    let (registry, _, steps) = hooked();
    let cmd = builder("Fails").build_in(&registry).unwrap();
    cmd.run(boom)
        .fallback(|_| Ok::<u32, DependencyError>(0))
        .execute()
        .unwrap();
    assert_eq!(
        steps.take(),
        [
            "start",
            "execution_start",
            "execution_error(FAILURE)",
            "fallback_start",
            "fallback_emit",
            "emit",
            "fallback_success",
            "success"
        ]
    );
    cmd.run(boom).execute().unwrap_err();
    assert_eq!(
        steps.take(),
        [
            "start",
            "execution_start",
            "execution_error(FAILURE)",
            "error(COMMAND_EXCEPTION)"
        ]
    );
    cmd.run(boom)
        .fallback(|_| Err::<u32, _>(DependencyError("fallback down")))
        .execute()
        .unwrap_err();
    assert_eq!(
        steps.take(),
        [
            "start",
            "execution_start",
            "execution_error(FAILURE)",
            "fallback_start",
            "fallback_error",
            "error(COMMAND_EXCEPTION)"
        ]
    );
}

#[test]
fn short_circuits_and_timeouts() {
    let (registry, clock, steps) = hooked();
    let cmd = builder("Open").build_in(&registry).unwrap();
    cmd.circuit_breaker().force_open();
    cmd.run(ok).execute().unwrap_err();
    assert_eq!(steps.take(), ["start", "error(SHORTCIRCUIT)"]);
    cmd.run(ok)
        .fallback(|_| Ok::<u32, DependencyError>(0))
        .execute()
        .unwrap();
    assert_eq!(
        steps.take(),
        [
            "start",
            "fallback_start",
            "fallback_emit",
            "emit",
            "fallback_success",
            "success"
        ]
    );

    let slow = builder("Slow").build_in(&registry).unwrap();
    let late = clock.clone();
    slow.run(move || {
        late.advance_ms(2_000);
        ok()
    })
    .execute()
    .unwrap_err();
    assert_eq!(
        steps.take(),
        ["start", "execution_start", "error(TIMEOUT)"],
        "a timeout is no execution error"
    );
}

#[test]
fn a_cache_hit_is_only_a_cache_hit_and_a_dropped_execution_unsubscribes() {
    let (registry, _, steps) = hooked();
    let cmd = builder("Cached").build_in(&registry).unwrap();
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    cmd.run(ok).cache_key("k").execute().unwrap();
    steps.take();
    cmd.run(ok).cache_key("k").execute().unwrap();
    assert_eq!(steps.take(), ["cache_hit"]);

    let mut pending = Box::pin(
        cmd.run_async(std::future::pending::<Result<u32, DependencyError>>())
            .execute_async(),
    );
    assert!(poll_once(pending.as_mut()).is_pending());
    drop(pending);
    assert_eq!(steps.take(), ["start", "execution_start", "unsubscribe"]);
}

struct Panics;

impl ExecutionHook for Panics {
    fn on_execution_start(&self, _: &CommandKey) {
        panic!("hook bug");
    }
}

#[test]
fn a_panicking_hook_changes_nothing() {
    let registry = Registry::builder().execution_hook(Panics).build();
    let cmd = builder("Guarded").build_in(&registry).unwrap();
    for _ in 0..2 {
        let outcome = cmd.run(ok).execute_outcome();
        assert_eq!(*outcome.response().as_ref().unwrap(), 1);
        assert_eq!(
            common::names(outcome.execution_result().execution_events()),
            ["SUCCESS"]
        );
    }
    assert_eq!(cmd.metrics().cumulative_count(EventType::Success), 2);
}

#[test]
fn a_stream_command_emits_each_value() {
    let (registry, _, steps) = hooked();
    let cmd = builder("Ticks").build_in(&registry).unwrap();
    let values: Vec<_> = futures::executor::block_on_stream(Box::pin(
        cmd.run_stream(futures::stream::iter([
            Ok::<u32, DependencyError>(1),
            Ok(2),
        ]))
        .to_observable(),
    ))
    .collect();
    assert_eq!(values.len(), 2);
    assert_eq!(
        steps.take(),
        [
            "start",
            "execution_start",
            "execution_emit",
            "emit",
            "execution_emit",
            "emit",
            "execution_success",
            "success"
        ]
    );
}

#[test]
fn a_shared_notifier_and_listener_can_be_read_through_a_clone() {
    #[derive(Default)]
    struct Counting(std::sync::atomic::AtomicUsize);
    impl hystrix::EventNotifier for Counting {
        fn mark_event(&self, _: EventType, _: &CommandKey) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    impl hystrix::circuit::CircuitBreakerListener for Counting {
        fn on_event(&self, _: &hystrix::circuit::CircuitBreakerEvent) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let events = Arc::new(Counting::default());
    let transitions = Arc::new(Counting::default());
    let registry = Registry::builder()
        .clock(ManualClock::new())
        .event_notifier(Arc::clone(&events))
        .circuit_breaker_listener(Arc::clone(&transitions))
        .build();
    let cmd = builder("Shared").build_in(&registry).unwrap();
    cmd.run(|| Ok::<_, DependencyError>(1)).execute().unwrap();
    cmd.circuit_breaker().force_open();
    // SUCCESS, then FORCED_OPEN.
    assert_eq!(events.0.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(transitions.0.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[test]
fn each_hedge_starts_and_ends_on_its_pool_thread() {
    let (registry, clock, steps) = hooked();
    let cmd = builder("Hedged")
        .isolation(IsolationStrategy::Thread)
        .property("hedging.maxAttempts", 2)
        .property("hedging.delayInMilliseconds", 100)
        .property("execution.isolation.thread.timeoutInMilliseconds", 10_000)
        .build_in(&registry)
        .unwrap();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (cancelled_tx, _cancelled) = std::sync::mpsc::channel();
    let mut future = Box::pin(
        cmd.run_cancellable_retryable(common::first_run_hangs(started_tx, cancelled_tx))
            .execute_async_outcome(),
    );
    assert!(poll_once(future.as_mut()).is_pending());
    started_rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    clock.advance(std::time::Duration::from_millis(100));
    let outcome = futures::executor::block_on(future);
    assert_eq!(*outcome.response().as_ref().unwrap(), 1);
    // Two attempts, each started and completed on its thread: the hedge wins, the first
    // attempt is cancelled (HEDGE_CANCELLED completes its thread, no unsubscribe).
    assert_eq!(
        steps.take(),
        [
            "start",
            "thread_start",
            "execution_start",
            "thread_start",
            "execution_start",
            "execution_emit",
            "emit",
            "execution_success",
            "thread_complete",
            "thread_complete",
            "success",
        ]
    );
}
