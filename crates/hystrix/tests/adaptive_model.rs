//! A model of the adaptive limit's in-flight count (proptest, on the manual clock): random
//! executions (values, failures, overload errors, panics, timeouts), cancellations, clock
//! advances and limit changes at run time. Checked after every step:
//!
//! - an execution is admitted exactly when fewer than the limit were in flight at its
//!   admission (never more admitted than the limit then);
//! - the in-flight count is exactly the runs alive (no permit leaks on any exit path);
//! - waiters never exceed the queue's size, and a waiter is admitted only into a free place;
//! - at the end, with everything ended or dropped, nothing is in flight or queued.
#![allow(clippy::unwrap_used)]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::Poll;
use std::time::Duration;

use common::{DependencyError, builder, poll_once};
use hystrix::testing::TestRegistry;
use hystrix::{AdaptiveLimitSnapshot, EventType, Outcome};
use proptest::prelude::*;

#[derive(Debug, Clone, Copy)]
enum Ends {
    Value,
    Failure,
    Overload,
    Panic,
}

#[derive(Debug, Clone)]
enum Step {
    /// An execution whose run takes `ms` (the timeout is 100 ms), then ends so.
    Start { ms: u64, ends: Ends },
    /// Drops the `n`-th execution still pending (modulo their number).
    Cancel(usize),
    /// Moves the clock and polls every pending execution.
    Advance(u64),
    /// Sets `maxConcurrentRequests` (the cap over the limit).
    Cap(u32),
    /// Sets `execution.isolation.adaptive.maxLimit`.
    MaxLimit(u32),
}

fn step() -> impl Strategy<Value = Step> {
    let ends = prop_oneof![
        4 => Just(Ends::Value),
        1 => Just(Ends::Failure),
        1 => Just(Ends::Overload),
        1 => Just(Ends::Panic),
    ];
    prop_oneof![
        6 => (0u64..150, ends).prop_map(|(ms, ends)| Step::Start { ms, ends }),
        1 => (0usize..16).prop_map(Step::Cancel),
        3 => (1u64..60).prop_map(Step::Advance),
        1 => (0u32..8).prop_map(Step::Cap),
        1 => (1u32..8).prop_map(Step::MaxLimit),
    ]
}

type Run = Pin<Box<dyn Future<Output = Result<u32, DependencyError>> + Send>>;
type Execution<'c> = Pin<Box<dyn Future<Output = Outcome<u32, DependencyError>> + 'c>>;

/// Counts itself alive from its run's first poll until the run is dropped.
struct Alive(Arc<AtomicU32>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What each run sees at its first poll, right after its admission: the in-flight count and
/// the limit then. Shared by the runs of one case.
type Admitted = Arc<std::sync::Mutex<Vec<AdaptiveLimitSnapshot>>>;

fn run(
    test: &TestRegistry,
    alive: &Arc<AtomicU32>,
    seen: (
        &Admitted,
        Arc<dyn Fn() -> AdaptiveLimitSnapshot + Send + Sync>,
    ),
    ms: u64,
    ends: Ends,
) -> Run {
    let (clock, alive) = (Arc::clone(test.registry().clock()), Arc::clone(alive));
    let (admitted, snapshot) = (Arc::clone(seen.0), seen.1);
    Box::pin(async move {
        admitted.lock().unwrap().push(snapshot());
        alive.fetch_add(1, Ordering::SeqCst);
        let _alive = Alive(alive);
        hystrix::clock::sleep(&clock, Duration::from_millis(ms)).await;
        match ends {
            Ends::Value => Ok(1),
            Ends::Failure => Err(DependencyError("500")),
            Ends::Overload => Err(DependencyError("503")),
            Ends::Panic => panic!("the run panicked"),
        }
    })
}

fn check(steps: &[Step], max_wait_ms: u64) {
    let test = TestRegistry::new();
    let key = format!("Model{max_wait_ms}");
    let cmd = builder(&key)
        .property("execution.isolation.adaptive.enabled", true)
        .property("execution.isolation.adaptive.algorithm", "AIMD")
        .property("execution.isolation.adaptive.initialLimit", 3)
        .property("execution.isolation.adaptive.maxLimit", 6)
        .property(
            "execution.isolation.adaptive.maxWaitInMilliseconds",
            max_wait_ms,
        )
        .property("execution.isolation.adaptive.maxQueueSize", 2)
        .property("execution.isolation.thread.timeoutInMilliseconds", 100)
        .semaphore_max_concurrent_requests(5)
        // The breaker stays out: its short-circuits would hide the limit's decisions.
        .circuit_breaker_enabled(false)
        .classify_retry(common::overload_on_503)
        .build_in(test.registry())
        .unwrap();
    let props = test.registry().properties();
    let alive = Arc::new(AtomicU32::new(0));
    let mut pending: Vec<Execution<'_>> = Vec::new();
    let snapshot = || cmd.metrics().adaptive_limit().unwrap();
    let admitted: Admitted = Arc::default();
    let shared = cmd.clone();
    let seen: Arc<dyn Fn() -> AdaptiveLimitSnapshot + Send + Sync> =
        Arc::new(move || shared.metrics().adaptive_limit().unwrap());
    for step in steps {
        match *step {
            Step::Start { ms, ends } => {
                let before = snapshot();
                let was_alive = alive.load(Ordering::SeqCst);
                let mut execution: Execution<'_> = Box::pin(
                    cmd.run_async(run(&test, &alive, (&admitted, Arc::clone(&seen)), ms, ends))
                        .execute_async_outcome(),
                );
                let polled = poll_once(execution.as_mut());
                let admitted = alive.load(Ordering::SeqCst) > was_alive
                    || matches!(&polled, Poll::Ready(o) if !o.execution_result().execution_events().contains(EventType::LimitRejected) && !o.execution_result().execution_events().contains(EventType::SemaphoreRejected));
                if before.queued == 0 {
                    // Nobody waits: admitted exactly when a place was free.
                    assert_eq!(admitted, before.in_flight < before.limit, "{before:?}");
                } else {
                    // Waiters go first: a newcomer never jumps the queue into a free place.
                    assert!(!admitted || before.in_flight < before.limit, "{before:?}");
                }
                if polled.is_pending() {
                    pending.push(execution);
                }
            }
            Step::Cancel(n) => {
                if !pending.is_empty() {
                    let n = n % pending.len();
                    drop(pending.remove(n));
                }
            }
            Step::Advance(ms) => {
                test.clock().advance(Duration::from_millis(ms));
                pending.retain_mut(|execution| poll_once(execution.as_mut()).is_pending());
            }
            Step::Cap(cap) => {
                props
                    .set(
                        &format!(
                            "hystrix.command.{key}.execution.isolation.semaphore.maxConcurrentRequests"
                        ),
                        cap,
                    )
                    .unwrap();
            }
            Step::MaxLimit(max) => {
                let initial =
                    format!("hystrix.command.{key}.execution.isolation.adaptive.initialLimit");
                let maximum =
                    format!("hystrix.command.{key}.execution.isolation.adaptive.maxLimit");
                props
                    .set_all([(initial.as_str(), 1), (maximum.as_str(), max)])
                    .unwrap();
            }
        }
        // Every run admitted during the step (at once or from the queue) found a place.
        for at_admission in admitted.lock().unwrap().drain(..) {
            assert!(
                at_admission.in_flight <= at_admission.limit,
                "after {step:?}: admitted beyond the limit: {at_admission:?}"
            );
        }
        let now = snapshot();
        assert_eq!(
            now.in_flight,
            alive.load(Ordering::SeqCst),
            "after {step:?}"
        );
        assert!(now.queued <= 2, "after {step:?}: {now:?}");
    }
    drop(pending);
    let end = snapshot();
    assert_eq!((end.in_flight, end.queued), (0, 0), "{end:?}");
    assert_eq!(alive.load(Ordering::SeqCst), 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn admitted_only_below_the_limit_and_nothing_leaks(
        steps in prop::collection::vec(step(), 1..60),
    ) {
        check(&steps, 0);
    }

    #[test]
    fn waiters_take_free_places_only_and_nothing_leaks(
        steps in prop::collection::vec(step(), 1..60),
    ) {
        check(&steps, 40);
    }
}
