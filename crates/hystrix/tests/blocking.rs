//! `execute()` of blocking runs under SEMAPHORE isolation: every row of SPEC §3.9 that applies,
//! timeouts on the manual clock, permits, panics and the fallback semaphore.
//!
//! A blocking SEMAPHORE run executes on the calling thread, so a run that advances the manual
//! clock itself stands for a slow dependency, deterministically.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::{DependencyError, builder, command, names, slow};
use hystrix::testing::TestRegistry;
use hystrix::{CancellationToken, Class, EventType, FailureType, FallbackFailure, HystrixError};

type Error = HystrixError<DependencyError>;

fn ok(value: u32) -> Result<u32, DependencyError> {
    Ok(value)
}

fn boom() -> Result<u32, DependencyError> {
    Err(DependencyError("boom"))
}

#[test]
fn success_returns_the_value_with_its_times() {
    let test = TestRegistry::new();
    let cmd = command(&test, "Success");
    let outcome = cmd.run(slow(&test, 7, 42)).execute_outcome();
    let result = *outcome.execution_result();
    assert_eq!(outcome.into_response().unwrap(), 42);
    assert_eq!(names(result.execution_events()), ["SUCCESS"]);
    assert!(result.is_successful_execution());
    assert!(!result.is_response_from_fallback());
    assert_eq!(result.execution_time_ms(), Some(7));
    assert_eq!(result.total_time_ms(), 7);
    assert_eq!(result.start_ms(), 0);
    assert!(!result.is_executed_in_thread());
}

#[test]
fn failure_with_fallback_returns_the_fallback_value() {
    let test = TestRegistry::new();
    let cmd = command(&test, "FailFallback");
    let outcome = cmd
        .run(boom)
        .fallback(|err: &Error| {
            assert_eq!(err.failure_type(), FailureType::CommandException);
            assert_eq!(err.cause(), Some(&DependencyError("boom")));
            Ok::<_, DependencyError>(7)
        })
        .execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_SUCCESS"]
    );
    assert!(outcome.execution_result().is_failed_execution());
    assert!(outcome.execution_result().is_response_from_fallback());
    assert_eq!(outcome.into_response().unwrap(), 7);
}

#[test]
fn failure_without_fallback_is_a_command_exception() {
    let test = TestRegistry::new();
    let cmd = command(&test, "FailNoFallback");
    let outcome = cmd.run(boom).execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_MISSING"]
    );
    let err = outcome.into_response().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::CommandException);
    assert_eq!(err.command_key().as_str(), "FailNoFallback");
    assert!(matches!(
        err.fallback_failure(),
        Some(FallbackFailure::Missing)
    ));
    assert_eq!(
        err.to_string(),
        "command FailNoFallback failed: boom and no fallback available"
    );
    assert_eq!(err.into_cause(), Some(DependencyError("boom")));
}

#[test]
fn failure_with_failing_fallback_keeps_both_errors() {
    let test = TestRegistry::new();
    let cmd = command(&test, "FailFallbackFails");
    let outcome = cmd
        .run(boom)
        .fallback(|_: &Error| Err::<u32, _>(DependencyError("cache empty")))
        .execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_FAILURE"]
    );
    let err = outcome.into_response().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::CommandException);
    assert_eq!(err.cause(), Some(&DependencyError("boom")));
    assert_eq!(err.fallback_error().unwrap().to_string(), "cache empty");
    assert_eq!(
        err.to_string(),
        "command FailFallbackFails failed: boom and fallback failed: cache empty"
    );
}

#[test]
fn run_past_the_deadline_is_a_timeout_and_its_value_is_discarded() {
    let test = TestRegistry::new();
    let cmd = command(&test, "Slow");
    let outcome = cmd.run(slow(&test, 1000, 42)).execute_outcome();
    let result = *outcome.execution_result();
    assert_eq!(
        names(result.execution_events()),
        ["TIMEOUT", "FALLBACK_MISSING"]
    );
    assert!(result.is_response_timed_out());
    assert_eq!(result.execution_time_ms(), Some(1000));
    let err = outcome.into_response().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Timeout);
    assert_eq!(err.timeout_ms(), Some(1000));
    assert!(err.cause().is_none());
    assert_eq!(
        err.to_string(),
        "command Slow timed out after 1000 ms and no fallback available (tune \
         hystrix.command.Slow.execution.isolation.thread.timeoutInMilliseconds or add a fallback)"
    );
}

#[test]
fn run_just_inside_the_deadline_succeeds() {
    let test = TestRegistry::new();
    let cmd = command(&test, "JustInTime");
    let value = cmd.run(slow(&test, 999, 42)).execute().unwrap();
    assert_eq!(value, 42);
}

#[test]
fn timeout_with_fallback_returns_the_fallback_value() {
    let test = TestRegistry::new();
    let cmd = command(&test, "SlowFallback");
    let outcome = cmd
        .run(slow(&test, 1500, 42))
        .fallback(|err: &Error| {
            assert!(err.is_timeout());
            test.advance(Duration::from_millis(5));
            Ok::<_, DependencyError>(1)
        })
        .execute_outcome();
    let result = *outcome.execution_result();
    assert_eq!(
        names(result.execution_events()),
        ["TIMEOUT", "FALLBACK_SUCCESS"]
    );
    assert_eq!(result.execution_time_ms(), Some(1500));
    assert_eq!(result.total_time_ms(), 1505);
    assert_eq!(outcome.into_response().unwrap(), 1);
}

#[test]
fn timeout_cancels_the_token_of_a_cancellable_run() {
    let test = TestRegistry::new();
    let cmd = builder("Cancellable")
        .timeout(Duration::from_millis(200))
        .build_in(test.registry())
        .unwrap();
    let (seen_tx, seen_rx) = mpsc::channel();
    let outcome = cmd
        .run_cancellable({
            let test = test.clone();
            move |token: CancellationToken| {
                seen_tx.send(("start", token.is_cancelled())).unwrap();
                test.advance(Duration::from_millis(199));
                seen_tx.send(("199 ms", token.is_cancelled())).unwrap();
                test.advance(Duration::from_millis(1));
                seen_tx.send(("200 ms", token.is_cancelled())).unwrap();
                ok(42)
            }
        })
        .execute_outcome();
    assert_eq!(
        seen_rx.try_iter().collect::<Vec<_>>(),
        [("start", false), ("199 ms", false), ("200 ms", true)]
    );
    // The late value was discarded.
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["TIMEOUT", "FALLBACK_MISSING"]
    );
    assert_eq!(outcome.into_response().unwrap_err().timeout_ms(), Some(200));
    assert_eq!(test.clock().pending_timers(), 0);
}

#[test]
fn token_is_left_alone_without_interrupt_on_timeout() {
    let test = TestRegistry::new();
    let cmd = builder("NoInterrupt")
        .timeout(Duration::from_millis(100))
        .property("execution.isolation.thread.interruptOnTimeout", false)
        .build_in(test.registry())
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let err = cmd
        .run_cancellable({
            let test = test.clone();
            move |token: CancellationToken| {
                test.advance(Duration::from_millis(150));
                tx.send(token.is_cancelled()).unwrap();
                ok(1)
            }
        })
        .execute()
        .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Timeout);
    assert!(!rx.recv().unwrap());
}

#[test]
fn a_finished_cancellable_run_leaves_no_timer_behind() {
    let test = TestRegistry::new();
    let cmd = command(&test, "QuickCancellable");
    let value = cmd
        .run_cancellable(|token: CancellationToken| {
            assert!(!token.is_cancelled());
            ok(3)
        })
        .execute()
        .unwrap();
    assert_eq!(value, 3);
    assert_eq!(test.clock().pending_timers(), 0);
}

#[test]
fn disabled_timeout_lets_a_run_take_any_time() {
    let test = TestRegistry::new();
    let cmd = builder("NoTimeout")
        .timeout_enabled(false)
        .build_in(test.registry())
        .unwrap();
    let outcome = cmd.run(slow(&test, 60_000, 5)).execute_outcome();
    assert_eq!(outcome.execution_result().execution_time_ms(), Some(60_000));
    assert_eq!(outcome.into_response().unwrap(), 5);
}

#[test]
fn per_call_timeout_overrides_the_property() {
    let test = TestRegistry::new();
    let cmd = command(&test, "PerCall");
    let err = cmd
        .run(slow(&test, 50, 1))
        .timeout(Duration::from_millis(50))
        .execute()
        .unwrap_err();
    assert_eq!(err.timeout_ms(), Some(50));
    let err = cmd
        .run(|| ok(1))
        .timeout(Duration::ZERO)
        .execute()
        .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Misuse);
    assert_eq!(
        err.to_string(),
        "command PerCall was given a per-call timeout of 0 ms; use at least 1 ms, or turn \
         timeouts off with execution.timeout.enabled=false"
    );
}

#[test]
fn force_open_short_circuits_without_running() {
    let test = TestRegistry::new();
    let cmd = command(&test, "Forced");
    test.force_open("Forced").unwrap();
    assert!(cmd.is_circuit_breaker_open());
    let outcome = cmd
        .run(|| -> Result<u32, DependencyError> { panic!("must not run") })
        .execute_outcome();
    let result = *outcome.execution_result();
    assert_eq!(
        names(result.execution_events()),
        ["SHORT_CIRCUITED", "FALLBACK_MISSING"]
    );
    assert!(result.is_response_short_circuited());
    assert_eq!(result.execution_time_ms(), None);
    let err = outcome.into_response().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    assert_eq!(err.trip_cause().unwrap().to_string(), "forced open");
    assert!(err.is_rejection());
    assert_eq!(
        err.to_string(),
        "command Forced short-circuited (circuit open: forced open) and no fallback available \
         (forced open by hystrix.command.Forced.circuitBreaker.forceOpen)"
    );

    let value = cmd
        .run(|| ok(1))
        .fallback(|err: &Error| {
            assert_eq!(err.failure_type(), FailureType::ShortCircuit);
            Ok::<_, DependencyError>(99)
        })
        .execute_outcome();
    assert_eq!(
        names(value.execution_result().execution_events()),
        ["SHORT_CIRCUITED", "FALLBACK_SUCCESS"]
    );
    assert_eq!(value.into_response().unwrap(), 99);
}

#[test]
fn force_open_wins_over_force_closed_and_a_disabled_breaker_ignores_both() {
    let test = TestRegistry::new();
    let cmd = command(&test, "Flags");
    test.force_closed("Flags").unwrap();
    assert_eq!(cmd.run(|| ok(1)).execute().unwrap(), 1);
    assert!(!cmd.is_circuit_breaker_open());
    test.force_open("Flags").unwrap();
    assert_eq!(
        cmd.run(|| ok(1)).execute().unwrap_err().failure_type(),
        FailureType::ShortCircuit
    );
    test.registry()
        .properties()
        .set("hystrix.command.Flags.circuitBreaker.enabled", false)
        .unwrap();
    assert_eq!(cmd.run(|| ok(2)).execute().unwrap(), 2);
    assert!(!cmd.is_circuit_breaker_open());
    assert_eq!(
        test.registry().is_circuit_breaker_open("Flags"),
        Some(false)
    );
}

#[test]
fn zero_permits_reject_every_execution() {
    let test = TestRegistry::new();
    let cmd = builder("KillSwitch")
        .semaphore_max_concurrent_requests(0)
        .build_in(test.registry())
        .unwrap();
    let outcome = cmd.run(|| ok(1)).execute_outcome();
    let result = *outcome.execution_result();
    assert_eq!(
        names(result.execution_events()),
        ["SEMAPHORE_REJECTED", "FALLBACK_MISSING"]
    );
    assert!(result.is_response_semaphore_rejected());
    assert!(result.is_response_rejected());
    let err = outcome.into_response().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::RejectedSemaphoreExecution);
    assert_eq!(
        err.to_string(),
        "command KillSwitch could not acquire a semaphore for execution (limit of 0 concurrent \
         executions reached) and no fallback available (tune \
         hystrix.command.KillSwitch.execution.isolation.semaphore.maxConcurrentRequests or add \
         a fallback)"
    );
}

/// Starts a blocking execution on another thread whose run waits for `release`; returns once
/// the run is running.
fn start_held_execution(
    cmd: &hystrix::Command,
    release: mpsc::Receiver<()>,
) -> thread::JoinHandle<Result<u32, Error>> {
    let cmd = cmd.clone();
    let (started_tx, started_rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        cmd.run(move || {
            started_tx.send(()).unwrap();
            release.recv().unwrap();
            ok(10)
        })
        .execute()
    });
    started_rx.recv().unwrap();
    handle
}

#[test]
fn permits_are_held_while_a_blocking_run_is_still_going() {
    let test = TestRegistry::new();
    let cmd = builder("Held")
        .semaphore_max_concurrent_requests(1)
        .build_in(test.registry())
        .unwrap();
    let (release, rx) = mpsc::channel();
    let held = start_held_execution(&cmd, rx);

    let metrics = cmd.metrics();
    assert_eq!(metrics.current_concurrent_execution_count(), 1);
    let rejected = cmd.run(|| ok(2)).execute().unwrap_err();
    assert_eq!(
        rejected.failure_type(),
        FailureType::RejectedSemaphoreExecution
    );

    release.send(()).unwrap();
    assert_eq!(held.join().unwrap().unwrap(), 10);
    let metrics = cmd.metrics();
    assert_eq!(metrics.current_concurrent_execution_count(), 0);
    assert_eq!(cmd.run(|| ok(3)).execute().unwrap(), 3);
}

#[test]
fn raising_the_semaphore_limit_at_run_time_admits_more() {
    let test = TestRegistry::new();
    let cmd = builder("Grow")
        .semaphore_max_concurrent_requests(1)
        .build_in(test.registry())
        .unwrap();
    let (release, rx) = mpsc::channel();
    let held = start_held_execution(&cmd, rx);
    assert!(cmd.run(|| ok(2)).execute().is_err());

    test.registry()
        .properties()
        .set(
            "hystrix.command.Grow.execution.isolation.semaphore.maxConcurrentRequests",
            2,
        )
        .unwrap();
    assert_eq!(cmd.run(|| ok(2)).execute().unwrap(), 2);

    release.send(()).unwrap();
    held.join().unwrap().unwrap();
    assert_eq!(
        cmd.metrics().cumulative_count(EventType::SemaphoreRejected),
        1
    );
}

#[test]
fn full_fallback_semaphore_rejects_the_fallback() {
    let test = TestRegistry::new();
    let cmd = builder("FallbackFull")
        .fallback_semaphore_max_concurrent_requests(1)
        .build_in(test.registry())
        .unwrap();
    let (started_tx, started_rx) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    let holder = {
        let cmd = cmd.clone();
        thread::spawn(move || {
            cmd.run(boom)
                .fallback(move |_: &Error| {
                    started_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                    Ok::<_, DependencyError>(1)
                })
                .execute()
        })
    };
    started_rx.recv().unwrap();

    let outcome = cmd
        .run(boom)
        .fallback(|_: &Error| Ok::<_, DependencyError>(2))
        .execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_REJECTION"]
    );
    let err = outcome.into_response().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::RejectedSemaphoreFallback);
    assert_eq!(err.cause(), Some(&DependencyError("boom")));
    assert_eq!(
        err.to_string(),
        "command FallbackFull failed: boom and fallback execution rejected (limit of 1 \
         concurrent fallbacks reached) (tune hystrix.command.FallbackFull.fallback.isolation.\
         semaphore.maxConcurrentRequests)"
    );

    release.send(()).unwrap();
    assert_eq!(holder.join().unwrap().unwrap(), 1);
}

#[test]
fn disabled_fallback_is_not_called_and_only_the_notifier_hears_of_it() {
    let notifier = common::RecordingNotifier::default();
    let clock = hystrix::clock::ManualClock::new();
    let registry = hystrix::Registry::builder()
        .clock(clock)
        .event_notifier(notifier.clone())
        .build();
    let cmd = builder("NoFallbackAllowed")
        .fallback_enabled(false)
        .build_in(&registry)
        .unwrap();
    let outcome = cmd
        .run(boom)
        .fallback(|_: &Error| -> Result<u32, DependencyError> { panic!("must not run") })
        .execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE"]
    );
    let err = outcome.into_response().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::CommandException);
    assert!(matches!(
        err.fallback_failure(),
        Some(FallbackFailure::Disabled)
    ));
    assert_eq!(
        err.to_string(),
        "command NoFallbackAllowed failed: boom and fallback disabled"
    );
    assert_eq!(
        notifier.take(),
        [
            "NoFallbackAllowed:FAILURE",
            "NoFallbackAllowed:FALLBACK_DISABLED",
            // The caller gets an error after fallback handling (SPEC §10).
            "NoFallbackAllowed:EXCEPTION_THROWN",
            "NoFallbackAllowed:executed SEMAPHORE 0ms [FAILURE]",
        ]
    );
    let metrics = cmd.metrics();
    assert_eq!(metrics.cumulative_count(EventType::FallbackDisabled), 0);
    assert_eq!(metrics.cumulative_count(EventType::Failure), 1);
    // The caller got an error: that counts as an exception thrown.
    assert_eq!(metrics.cumulative_count(EventType::ExceptionThrown), 1);
}

#[test]
fn bad_request_skips_the_fallback() {
    let test = TestRegistry::new();
    let cmd = builder("BadRequest")
        .classify(|e: &DependencyError| {
            if e.0 == "invalid id" {
                Class::BadRequest
            } else {
                Class::Failure
            }
        })
        .build_in(test.registry())
        .unwrap();
    let outcome = cmd
        .run(|| Err::<u32, _>(DependencyError("invalid id")))
        .fallback(|_: &Error| -> Result<u32, DependencyError> { panic!("must not run") })
        .execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["BAD_REQUEST"]
    );
    assert!(outcome.execution_result().is_bad_request());
    let err = outcome.into_response().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::BadRequest);
    assert_eq!(err.cause(), Some(&DependencyError("invalid id")));
    assert!(err.fallback_failure().is_none());
    assert_eq!(
        err.to_string(),
        "command BadRequest rejected the request as bad: invalid id"
    );
    let metrics = cmd.metrics();
    assert_eq!(metrics.cumulative_count(EventType::BadRequest), 1);
    assert_eq!(metrics.cumulative_count(EventType::ExceptionThrown), 1);
    // Other errors still count as failures.
    assert_eq!(
        cmd.run(boom).execute().unwrap_err().failure_type(),
        FailureType::CommandException
    );
}

#[test]
fn ignored_error_is_returned_without_fallback() {
    let test = TestRegistry::new();
    let cmd = builder("Ignored")
        .classify(|_: &DependencyError| Class::Ignored)
        .build_in(test.registry())
        .unwrap();
    let outcome = cmd
        .run(|| Err::<u32, _>(DependencyError("not found")))
        .fallback(|_: &Error| -> Result<u32, DependencyError> { panic!("must not run") })
        .execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["IGNORED"]
    );
    let err = outcome.into_response().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Ignored);
    assert_eq!(
        err.to_string(),
        "command Ignored returned an ignored error: not found"
    );
    assert_eq!(
        cmd.metrics().cumulative_count(EventType::ExceptionThrown),
        0
    );
}

#[test]
fn panicking_classifier_counts_the_error_as_a_failure() {
    let test = TestRegistry::new();
    let cmd = builder("ClassifierPanics")
        .classify(|_: &DependencyError| -> Class { panic!("classifier bug") })
        .build_in(test.registry())
        .unwrap();
    let outcome = cmd.run(boom).execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_MISSING"]
    );
}

#[test]
fn panic_in_run_is_a_failure_with_its_message() {
    let test = TestRegistry::new();
    let cmd = command(&test, "RunPanics");
    let outcome = cmd
        .run(|| -> Result<u32, DependencyError> { panic!("kaboom {}", 7) })
        .execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_MISSING"]
    );
    let err = outcome.into_response().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::CommandException);
    assert_eq!(err.panic_message(), Some("kaboom 7"));
    assert!(err.cause().is_none());
    assert_eq!(
        err.to_string(),
        "command RunPanics panicked: kaboom 7 and no fallback available"
    );

    let value = cmd
        .run(|| -> Result<u32, DependencyError> { panic!("again") })
        .fallback(|err: &Error| {
            assert_eq!(err.panic_message(), Some("again"));
            Ok::<_, DependencyError>(5)
        })
        .execute()
        .unwrap();
    assert_eq!(value, 5);
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
}

#[test]
fn panic_in_fallback_is_a_fallback_failure() {
    let test = TestRegistry::new();
    let cmd = command(&test, "FallbackPanics");
    let outcome = cmd
        .run(boom)
        .fallback(|_: &Error| -> Result<u32, DependencyError> { panic!("fallback kaboom") })
        .execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_FAILURE"]
    );
    let err = outcome.into_response().unwrap_err();
    assert!(matches!(
        err.fallback_failure(),
        Some(FallbackFailure::Panicked(msg)) if msg == "fallback kaboom"
    ));
    assert_eq!(err.cause(), Some(&DependencyError("boom")));
    // The fallback permit came back.
    let value = cmd
        .run(boom)
        .fallback(|_: &Error| Ok::<_, DependencyError>(1))
        .execute()
        .unwrap();
    assert_eq!(value, 1);
}

#[test]
fn cumulative_counters_count_every_event_once() {
    let test = TestRegistry::new();
    let cmd = command(&test, "Counted");
    for _ in 0..3 {
        cmd.run(|| ok(1)).execute().unwrap();
    }
    cmd.run(boom).execute().unwrap_err();
    cmd.run(boom)
        .fallback(|_: &Error| Ok::<_, DependencyError>(1))
        .execute()
        .unwrap();
    cmd.run(boom)
        .fallback(|_: &Error| Err::<u32, _>(DependencyError("no")))
        .execute()
        .unwrap_err();
    let metrics = test.registry().command_metrics("Counted").unwrap();
    let count = |e| metrics.cumulative_count(e);
    assert_eq!(count(EventType::Success), 3);
    assert_eq!(count(EventType::Failure), 3);
    assert_eq!(count(EventType::FallbackMissing), 1);
    assert_eq!(count(EventType::FallbackSuccess), 1);
    assert_eq!(count(EventType::FallbackFailure), 1);
    assert_eq!(count(EventType::ExceptionThrown), 2);
    assert_eq!(count(EventType::Timeout), 0);
}

#[test]
fn notifier_hears_events_in_order_and_its_panics_change_nothing() {
    struct Panicking;
    impl hystrix::EventNotifier for Panicking {
        fn mark_event(&self, _: EventType, _: &hystrix::CommandKey) {
            panic!("notifier bug");
        }
    }
    let notifier = common::RecordingNotifier::default();
    let registry = hystrix::Registry::builder()
        .clock(hystrix::clock::ManualClock::new())
        .event_notifier(notifier.clone())
        .build();
    let cmd = builder("Notified").build_in(&registry).unwrap();
    cmd.run(boom)
        .fallback(|_: &Error| Ok::<_, DependencyError>(1))
        .execute()
        .unwrap();
    assert_eq!(
        notifier.take(),
        [
            "Notified:FAILURE",
            "Notified:FALLBACK_SUCCESS",
            "Notified:executed SEMAPHORE 0ms [FAILURE, FALLBACK_SUCCESS]",
        ]
    );

    let registry = hystrix::Registry::builder()
        .event_notifier(Panicking)
        .build();
    let cmd = builder("NotifierPanics").build_in(&registry).unwrap();
    assert_eq!(cmd.run(|| ok(4)).execute().unwrap(), 4);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Success), 1);
}

/// A clock whose time stands still while the test fires its timers by hand: stands for a coarse
/// clock that has not caught up with the timer thread yet.
#[derive(Default, Clone)]
struct StillClock {
    timers: std::sync::Arc<std::sync::Mutex<Vec<hystrix::clock::TimerTask>>>,
}

impl std::fmt::Debug for StillClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StillClock")
    }
}

impl StillClock {
    fn fire_all(&self) {
        let tasks = std::mem::take(&mut *self.timers.lock().unwrap());
        for task in tasks {
            task();
        }
    }
}

impl hystrix::clock::Clock for StillClock {
    fn now_ms(&self) -> u64 {
        0
    }
    fn epoch_ms(&self) -> u64 {
        0
    }
    fn schedule(
        &self,
        deadline_ms: u64,
        task: hystrix::clock::TimerTask,
    ) -> hystrix::clock::TimerId {
        let mut timers = self.timers.lock().unwrap();
        timers.push(task);
        hystrix::clock::TimerId::new(deadline_ms, timers.len() as u64)
    }
    fn cancel(&self, _id: hystrix::clock::TimerId) -> bool {
        false
    }
}

#[test]
fn a_token_cancelled_by_the_deadline_timer_is_a_timeout_even_before_the_clock_shows_it() {
    let clock = StillClock::default();
    let registry = hystrix::Registry::builder().clock(clock.clone()).build();
    let cmd = builder("CoarseClock").build_in(&registry).unwrap();
    let outcome = cmd
        .run_cancellable({
            let clock = clock.clone();
            move |token: CancellationToken| {
                clock.fire_all();
                assert!(token.is_cancelled());
                Err::<u32, _>(DependencyError("stopped: cancelled"))
            }
        })
        .execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["TIMEOUT", "FALLBACK_MISSING"]
    );
    assert_eq!(outcome.execution_result().execution_time_ms(), Some(0));
}

#[test]
fn a_panic_payload_whose_drop_panics_stays_inside_the_library() {
    struct Bomb;
    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("payload drop");
        }
    }
    let test = TestRegistry::new();
    let cmd = command(&test, "Bomb");
    let outcome = cmd
        .run(|| -> Result<u32, DependencyError> { std::panic::panic_any(Bomb) })
        .execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_MISSING"]
    );
    assert_eq!(
        outcome.into_response().unwrap_err().panic_message(),
        Some("panic with a non-string payload")
    );
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
}
