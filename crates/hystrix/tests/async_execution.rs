//! `execute_async()` under SEMAPHORE isolation (the default for async runs): the rows of SPEC
//! §3.9 that apply, timeouts on the manual clock, cancellation by drop, and permits.
//!
//! Most tests step the execution future by hand (`poll_once`), so each interleaving of run,
//! timer and caller is chosen by the test, not by a scheduler.

#![allow(clippy::unwrap_used)]

mod common;

use std::future::{Future, pending};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Duration;

use common::{DependencyError, builder, command, names, poll_once};
use hystrix::testing::TestRegistry;
use hystrix::{
    BoxError, Class, Command, EventType, FailureType, FallbackFailure, HystrixAsyncCommand,
    HystrixError, IsolationStrategy,
};

type Error = HystrixError<DependencyError>;

async fn ok(value: u32) -> Result<u32, DependencyError> {
    Ok(value)
}

async fn boom() -> Result<u32, DependencyError> {
    Err(DependencyError("boom"))
}

/// Sets its flag when dropped: shows when a run future is dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A run that never completes and reports when it is dropped.
fn hanging_run(
    dropped: &Arc<AtomicBool>,
) -> impl Future<Output = Result<u32, DependencyError>> + use<> {
    let flag = DropFlag(Arc::clone(dropped));
    async move {
        let _flag = flag;
        pending::<()>().await;
        Ok(0)
    }
}

#[test]
fn ready_run_succeeds_without_arming_a_timer() {
    let test = TestRegistry::new();
    let cmd = command(&test, "Ready");
    let mut execution = pin!(cmd.run_async(ok(5)).execute_async_outcome());
    let Poll::Ready(outcome) = poll_once(execution.as_mut()) else {
        panic!("a ready run completes on the first poll");
    };
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["SUCCESS"]
    );
    assert_eq!(outcome.execution_result().execution_time_ms(), Some(0));
    assert_eq!(outcome.into_response().unwrap(), 5);
    assert_eq!(test.clock().pending_timers(), 0);
}

#[test]
fn pending_run_completes_and_its_timer_is_cancelled() {
    let test = TestRegistry::new();
    let cmd = command(&test, "Later");
    let (tx, rx) = futures::channel::oneshot::channel::<u32>();
    let run = async move { rx.await.map_err(|_| DependencyError("sender dropped")) };
    let mut execution = pin!(cmd.run_async(run).execute_async_outcome());
    assert!(poll_once(execution.as_mut()).is_pending());
    assert_eq!(test.clock().pending_timers(), 1);
    assert_eq!(test.clock().next_timer_deadline_ms(), Some(1000));

    test.advance(Duration::from_millis(300));
    tx.send(9).unwrap();
    let Poll::Ready(outcome) = poll_once(execution.as_mut()) else {
        panic!("the run completed");
    };
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["SUCCESS"]
    );
    assert_eq!(outcome.execution_result().execution_time_ms(), Some(300));
    assert_eq!(outcome.into_response().unwrap(), 9);
    assert_eq!(test.clock().pending_timers(), 0);
}

#[test]
fn deadline_drops_the_run_and_frees_its_permit_before_the_fallback() {
    let test = TestRegistry::new();
    let cmd = builder("Hangs")
        .timeout(Duration::from_millis(250))
        .build_in(test.registry())
        .unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let seen_by_fallback = Arc::new(AtomicBool::new(false));
    let (d, s, c) = (dropped.clone(), seen_by_fallback.clone(), cmd.clone());
    let mut execution = pin!(
        cmd.run_async(hanging_run(&dropped))
            .fallback(move |err: &Error| {
                assert_eq!(err.failure_type(), FailureType::Timeout);
                // The run is gone and its permit free by the time the fallback runs.
                s.store(
                    d.load(Ordering::SeqCst)
                        && c.metrics().current_concurrent_execution_count() == 0,
                    Ordering::SeqCst,
                );
                Ok::<_, DependencyError>(77)
            })
            .execute_async_outcome()
    );
    assert!(poll_once(execution.as_mut()).is_pending());
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 1);

    test.advance(Duration::from_millis(249));
    assert!(poll_once(execution.as_mut()).is_pending());
    assert!(!dropped.load(Ordering::SeqCst));

    test.advance(Duration::from_millis(1));
    let Poll::Ready(outcome) = poll_once(execution.as_mut()) else {
        panic!("timed out at 250 ms");
    };
    assert!(seen_by_fallback.load(Ordering::SeqCst));
    let result = *outcome.execution_result();
    assert_eq!(
        names(result.execution_events()),
        ["TIMEOUT", "FALLBACK_SUCCESS"]
    );
    assert_eq!(result.execution_time_ms(), Some(250));
    assert_eq!(result.total_time_ms(), 250);
    assert_eq!(outcome.into_response().unwrap(), 77);
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
}

#[test]
fn timeout_without_fallback_is_a_timeout_error() {
    let test = TestRegistry::new();
    let cmd = command(&test, "HangsNoFallback");
    let dropped = Arc::new(AtomicBool::new(false));
    let mut execution = pin!(cmd.run_async(hanging_run(&dropped)).execute_async());
    assert!(poll_once(execution.as_mut()).is_pending());
    test.advance(Duration::from_millis(1000));
    let Poll::Ready(Err(err)) = poll_once(execution.as_mut()) else {
        panic!("timed out at 1000 ms");
    };
    assert_eq!(err.failure_type(), FailureType::Timeout);
    assert_eq!(err.timeout_ms(), Some(1000));
    assert!(dropped.load(Ordering::SeqCst));
    let metrics = cmd.metrics();
    assert_eq!(metrics.cumulative_count(EventType::Timeout), 1);
    assert_eq!(metrics.cumulative_count(EventType::FallbackMissing), 1);
}

#[test]
fn dropping_a_started_execution_frees_its_permit_and_records_cancelled() {
    let notifier = common::RecordingNotifier::default();
    let clock = hystrix::clock::ManualClock::new();
    let registry = hystrix::Registry::builder()
        .clock(clock.clone())
        .event_notifier(notifier.clone())
        .build();
    let cmd = builder("Dropped").build_in(&registry).unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    {
        let mut execution = Box::pin(cmd.run_async(hanging_run(&dropped)).execute_async());
        assert!(poll_once(execution.as_mut()).is_pending());
        assert_eq!(cmd.metrics().current_concurrent_execution_count(), 1);
        clock.advance_ms(40);
    }
    assert!(dropped.load(Ordering::SeqCst));
    let metrics = cmd.metrics();
    assert_eq!(metrics.current_concurrent_execution_count(), 0);
    assert_eq!(metrics.cumulative_count(EventType::Cancelled), 1);
    assert_eq!(clock.pending_timers(), 0);
    assert_eq!(
        notifier.take(),
        [
            "Dropped:CANCELLED",
            "Dropped:executed SEMAPHORE 40ms [CANCELLED]"
        ]
    );
}

#[test]
fn dropping_before_the_first_poll_records_nothing() {
    let test = TestRegistry::new();
    let cmd = command(&test, "NeverPolled");
    drop(cmd.run_async(ok(1)).execute_async());
    assert_eq!(cmd.metrics().cumulative_count(EventType::Cancelled), 0);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Success), 0);
}

#[test]
fn failure_rows_match_the_blocking_mode() {
    let test = TestRegistry::new();
    let cmd = command(&test, "AsyncFailures");

    let outcome = futures::executor::block_on(cmd.run_async(boom()).execute_async_outcome());
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_MISSING"]
    );
    assert_eq!(
        outcome.into_response().unwrap_err().failure_type(),
        FailureType::CommandException
    );

    let outcome = futures::executor::block_on(
        cmd.run_async(boom())
            .fallback(|_: &Error| Ok::<_, DependencyError>(3))
            .execute_async_outcome(),
    );
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_SUCCESS"]
    );
    assert_eq!(outcome.into_response().unwrap(), 3);

    let outcome = futures::executor::block_on(
        cmd.run_async(boom())
            .fallback_async(|err: &Error| {
                let key = err.command_key().to_string();
                async move { Err::<u32, _>(format!("{key}: secondary down")) }
            })
            .execute_async_outcome(),
    );
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_FAILURE"]
    );
    let err = outcome.into_response().unwrap_err();
    assert_eq!(
        err.fallback_error().unwrap().to_string(),
        "AsyncFailures: secondary down"
    );

    let err = futures::executor::block_on(
        cmd.run_async(async { panic!("async kaboom") as Result<u32, DependencyError> })
            .execute_async(),
    )
    .unwrap_err();
    assert_eq!(err.panic_message(), Some("async kaboom"));

    let err = futures::executor::block_on(
        cmd.run_async(boom())
            .fallback_async(|_: &Error| async {
                panic!("fallback kaboom") as Result<u32, DependencyError>
            })
            .execute_async(),
    )
    .unwrap_err();
    assert!(matches!(
        err.fallback_failure(),
        Some(FallbackFailure::Panicked(m)) if m == "fallback kaboom"
    ));
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
}

#[test]
fn async_fallback_can_be_another_command() {
    let test = TestRegistry::new();
    let primary = command(&test, "Primary");
    let secondary = command(&test, "Secondary");
    let outcome = futures::executor::block_on(
        primary
            .run_async(boom())
            .fallback_async(|_: &Error| {
                let secondary = secondary.clone();
                async move { secondary.run_async(ok(8)).execute_async().await }
            })
            .execute_async_outcome(),
    );
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_SUCCESS"]
    );
    assert_eq!(outcome.into_response().unwrap(), 8);
    assert_eq!(secondary.metrics().cumulative_count(EventType::Success), 1);
}

#[test]
fn short_circuit_and_classification_in_async_mode() {
    let test = TestRegistry::new();
    let cmd = builder("AsyncClassified")
        .classify(|e: &DependencyError| match e.0 {
            "bad" => Class::BadRequest,
            "gone" => Class::Ignored,
            _ => Class::Failure,
        })
        .build_in(test.registry())
        .unwrap();
    let err = futures::executor::block_on(
        cmd.run_async(async { Err::<u32, _>(DependencyError("bad")) })
            .execute_async(),
    )
    .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::BadRequest);
    let err = futures::executor::block_on(
        cmd.run_async(async { Err::<u32, _>(DependencyError("gone")) })
            .execute_async(),
    )
    .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Ignored);

    test.force_open("AsyncClassified").unwrap();
    let polled = Arc::new(AtomicBool::new(false));
    let p = polled.clone();
    let outcome = futures::executor::block_on(
        cmd.run_async(async move {
            p.store(true, Ordering::SeqCst);
            Ok::<u32, DependencyError>(1)
        })
        .fallback(|_: &Error| Ok::<_, DependencyError>(2))
        .execute_async_outcome(),
    );
    assert!(!polled.load(Ordering::SeqCst));
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["SHORT_CIRCUITED", "FALLBACK_SUCCESS"]
    );
}

#[test]
fn semaphore_saturation_and_a_run_time_limit_change() {
    let test = TestRegistry::new();
    let cmd = builder("AsyncSaturated")
        .semaphore_max_concurrent_requests(2)
        .build_in(test.registry())
        .unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let mut first = Box::pin(cmd.run_async(hanging_run(&dropped)).execute_async());
    let mut second = Box::pin(cmd.run_async(hanging_run(&dropped)).execute_async());
    assert!(poll_once(first.as_mut()).is_pending());
    assert!(poll_once(second.as_mut()).is_pending());

    let mut third = Box::pin(cmd.run_async(ok(3)).execute_async_outcome());
    let Poll::Ready(outcome) = poll_once(third.as_mut()) else {
        panic!("a rejection is immediate");
    };
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["SEMAPHORE_REJECTED", "FALLBACK_MISSING"]
    );

    test.registry()
        .properties()
        .set(
            "hystrix.command.AsyncSaturated.execution.isolation.semaphore.maxConcurrentRequests",
            3,
        )
        .unwrap();
    let mut fourth = Box::pin(cmd.run_async(ok(4)).execute_async());
    assert!(matches!(poll_once(fourth.as_mut()), Poll::Ready(Ok(4))));

    drop((first, second));
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Cancelled), 2);
}

#[test]
fn fallback_semaphore_is_held_by_a_pending_async_fallback() {
    let test = TestRegistry::new();
    let cmd = builder("AsyncFallbackFull")
        .fallback_semaphore_max_concurrent_requests(1)
        .build_in(test.registry())
        .unwrap();
    let mut holder = Box::pin(
        cmd.run_async(boom())
            .fallback_async(|_: &Error| async {
                pending::<()>().await;
                Ok::<u32, DependencyError>(1)
            })
            .execute_async(),
    );
    assert!(poll_once(holder.as_mut()).is_pending());
    let outcome = futures::executor::block_on(
        cmd.run_async(boom())
            .fallback(|_: &Error| Ok::<_, DependencyError>(2))
            .execute_async_outcome(),
    );
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_REJECTION"]
    );
    assert_eq!(
        outcome.into_response().unwrap_err().failure_type(),
        FailureType::RejectedSemaphoreFallback
    );
    // Dropped during its fallback: cancelled, and the fallback permit comes back.
    drop(holder);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Cancelled), 1);
    let value = futures::executor::block_on(
        cmd.run_async(boom())
            .fallback(|_: &Error| Ok::<_, DependencyError>(5))
            .execute_async(),
    );
    assert_eq!(value.unwrap(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawned_execution_times_out_on_the_manual_clock() {
    let test = TestRegistry::new();
    let cmd = builder("Spawned")
        .timeout(Duration::from_millis(100))
        .build_in(test.registry())
        .unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let run = hanging_run(&dropped);
    let task = {
        let cmd = cmd.clone();
        tokio::spawn(async move { cmd.run_async(run).execute_async().await })
    };
    // The timer exists once the run has been polled and found pending.
    while test.clock().pending_timers() == 0 {
        tokio::task::yield_now().await;
    }
    test.advance(Duration::from_millis(100));
    let err = task.await.unwrap().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Timeout);
    assert!(dropped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn trait_style_async_command() {
    struct GetPrice {
        command: Command,
        item: u32,
    }

    impl HystrixAsyncCommand for GetPrice {
        type Response = u32;
        type Error = DependencyError;

        fn command(&self) -> &Command {
            &self.command
        }

        fn run(&self) -> impl Future<Output = Result<u32, DependencyError>> + Send + 'static {
            let item = self.item;
            async move {
                if item == 0 {
                    Err(DependencyError("no such item"))
                } else {
                    Ok(item * 100)
                }
            }
        }

        fn fallback(&self, _: &Error) -> Option<Result<u32, BoxError>> {
            Some(Ok(self.item))
        }

        fn classify(&self, error: &DependencyError) -> Class {
            if error.0 == "no such item" {
                Class::BadRequest
            } else {
                Class::Failure
            }
        }
    }

    let test = TestRegistry::new();
    let command = Command::builder("GetPrice")
        .group("Pricing")
        .isolation(IsolationStrategy::Semaphore)
        .build_in(test.registry())
        .unwrap();
    let price = GetPrice {
        command: command.clone(),
        item: 3,
    }
    .execute_async()
    .await;
    assert_eq!(price.unwrap(), 300);
    let err = GetPrice {
        command: command.clone(),
        item: 0,
    }
    .execute_async()
    .await
    .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::BadRequest);
    test.force_open("GetPrice").unwrap();
    let outcome = GetPrice {
        command: command.clone(),
        item: 4,
    }
    .execute_async_outcome()
    .await;
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["SHORT_CIRCUITED", "FALLBACK_SUCCESS"]
    );
    assert_eq!(outcome.into_response().unwrap(), 4);
}

#[test]
fn async_runs_default_to_semaphore_isolation() {
    let test = TestRegistry::new();
    let cmd = Command::builder("DefaultIsolation")
        .group("Test")
        .build_in(test.registry())
        .unwrap();
    let outcome = futures::executor::block_on(cmd.run_async(ok(1)).execute_async_outcome());
    assert_eq!(
        outcome.execution_result().isolation(),
        IsolationStrategy::Semaphore
    );
}

#[test]
fn short_circuit_and_disabled_fallback_without_a_value_in_async_mode() {
    let test = TestRegistry::new();
    let cmd = builder("AsyncNoValue")
        .fallback_enabled(false)
        .build_in(test.registry())
        .unwrap();
    let outcome = futures::executor::block_on(
        cmd.run_async(boom())
            .fallback(|_: &Error| -> Result<u32, DependencyError> { panic!("must not run") })
            .execute_async_outcome(),
    );
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE"]
    );
    let err = outcome.into_response().unwrap_err();
    assert!(matches!(
        err.fallback_failure(),
        Some(FallbackFailure::Disabled)
    ));

    test.registry()
        .properties()
        .set("hystrix.command.AsyncNoValue.fallback.enabled", true)
        .unwrap();
    test.force_open("AsyncNoValue").unwrap();
    let outcome = futures::executor::block_on(cmd.run_async(ok(1)).execute_async_outcome());
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["SHORT_CIRCUITED", "FALLBACK_MISSING"]
    );
    let err = outcome.into_response().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    assert_eq!(err.trip_cause().unwrap().to_string(), "forced open");
}
