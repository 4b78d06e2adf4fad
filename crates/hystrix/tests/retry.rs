//! Retry through the breaker, with budgets: exact values on the manual clock.
#![allow(clippy::unwrap_used)]

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use common::{DependencyError, builder, drive, poll_once, retrying};
use hystrix::clock::Clock;
use hystrix::retry::RetryAnswer;
use hystrix::testing::TestRegistry;
use hystrix::{Command, EventType, FailureType, IsolationStrategy};

/// A factory of async runs answering from `script` in order (true: Ok), recording on the
/// registry's clock when each attempt ran.
#[allow(clippy::type_complexity)]
fn scripted(
    test: &TestRegistry,
    script: &[bool],
) -> (
    impl FnMut() -> std::pin::Pin<Box<dyn Future<Output = Result<u32, DependencyError>> + Send>>
    + Send
    + 'static,
    Arc<Mutex<Vec<u64>>>,
) {
    let times = Arc::new(Mutex::new(Vec::new()));
    let script: Vec<bool> = script.to_vec();
    let clock = test.clock().clone();
    let calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&times);
    let make = move || {
        let n = calls.fetch_add(1, Ordering::SeqCst) as usize;
        let ok = script.get(n).copied().unwrap_or(false);
        let (seen, clock) = (Arc::clone(&seen), clock.clone());
        // Records when the attempt runs (polled), not when it is made.
        Box::pin(async move {
            seen.lock().unwrap().push(clock.now_ms());
            if ok {
                Ok(n as u32)
            } else {
                Err(DependencyError("down"))
            }
        }) as std::pin::Pin<Box<dyn Future<Output = _> + Send>>
    };
    (make, times)
}

#[test]
fn exponential_delays_on_the_clock_and_the_request_log_counts_repeats() {
    let test = TestRegistry::new();
    let cmd = retrying(&test, "Delays", 4);
    let (make, times) = scripted(&test, &[false, false, false, true]);
    let outcome = drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    assert_eq!(*outcome.response().as_ref().unwrap(), 3);
    // 100 ms, then doubled: 200, 400.
    assert_eq!(*times.lock().unwrap(), [0, 100, 300, 700]);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS, FAILUREx3, RETRYx3"
    );
    assert_eq!(
        outcome
            .execution_result()
            .execution_events()
            .count(EventType::Failure),
        3
    );
    assert_eq!(outcome.execution_result().total_time_ms(), 700);
    // The last attempt's run time; the caller waited 700 ms.
    assert_eq!(outcome.execution_result().execution_time_ms(), Some(0));
}

#[test]
fn full_jitter_delays_repeat_exactly_with_the_registry_seed() {
    let run = || {
        let test = TestRegistry::new();
        let cmd = builder("Jitter")
            .property("retry.maxAttempts", 5)
            .property("retry.backoff.jitter", "FULL")
            .property("retry.backoff.initialInMilliseconds", 1_000)
            .property("execution.isolation.thread.timeoutInMilliseconds", 60_000)
            .build_in(test.registry())
            .unwrap();
        let (make, times) = scripted(&test, &[false; 5]);
        let err = drive(&test, cmd.run_async_retryable(make).execute_async()).unwrap_err();
        assert_eq!(err.attempts(), 5);
        times.lock().unwrap().clone()
    };
    let first = run();
    assert_eq!(first, run());
    let delays: Vec<u64> = first.windows(2).map(|w| w[1] - w[0]).collect();
    for (n, delay) in delays.iter().enumerate() {
        assert!(*delay <= 1_000 << n, "{delays:?}");
    }
    // Full jitter does spread them (not all at the cap).
    assert_ne!(delays, [1_000, 2_000, 2_000, 2_000]);
}

#[test]
fn the_breaker_opening_mid_sequence_stops_it() {
    let test = TestRegistry::new();
    let cmd = builder("Opens")
        .property("retry.maxAttempts", 5)
        .property("retry.backoff.initialInMilliseconds", 600)
        .property("retry.backoff.multiplier", 1)
        .property("circuitBreaker.requestVolumeThreshold", 2)
        .property("execution.isolation.thread.timeoutInMilliseconds", 10_000)
        .build_in(test.registry())
        .unwrap();
    let (make, times) = scripted(&test, &[false; 5]);
    let outcome = drive(
        &test,
        cmd.run_async_retryable(make)
            .fallback(|_| Ok::<_, DependencyError>(0))
            .execute_async_outcome(),
    );
    assert_eq!(*outcome.response().as_ref().unwrap(), 0);
    // Two attempts failed (at 0 and 600 ms), each a request for health: at 1 200 ms the
    // breaker trips on them and refuses the third; no retry follows a short-circuit.
    assert_eq!(*times.lock().unwrap(), [0, 600]);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "FAILUREx2, SHORT_CIRCUITED, FALLBACK_SUCCESS, RETRYx2"
    );
    assert!(cmd.is_circuit_breaker_open());
}

#[test]
fn each_attempt_is_a_request_for_health_when_it_happens() {
    let test = TestRegistry::new();
    let cmd = retrying(&test, "Health", 3);
    let (make, _) = scripted(&test, &[false, false, false]);
    let err = drive(&test, cmd.run_async_retryable(make).execute_async()).unwrap_err();
    assert_eq!(err.attempts(), 3);
    assert_eq!(err.failure_type(), FailureType::CommandException);
    // Attempts at 0, 100 and 300 ms; the health buckets of 500 ms complete at 500.
    test.advance(Duration::from_millis(200));
    let health = cmd.metrics().health_counts();
    assert_eq!((health.total_requests, health.error_count), (3, 3));
    test.advance(Duration::from_millis(10_000));
    let metrics = cmd.metrics();
    assert_eq!(metrics.rolling_count(EventType::Failure), 3);
    assert_eq!(metrics.rolling_count(EventType::Retry), 2);
    assert_eq!(metrics.rolling_count(EventType::FallbackMissing), 1);
}

#[test]
fn a_retry_after_longer_than_the_deadline_goes_to_the_fallback_at_once() {
    let test = TestRegistry::new();
    let cmd = builder("RetryAfter")
        .property("retry.maxAttempts", 3)
        .classify_retry(|_: &DependencyError| RetryAnswer::retry().after(Duration::from_secs(2)))
        .build_in(test.registry())
        .unwrap();
    let (make, times) = scripted(&test, &[false, true]);
    let mut future = pin!(
        cmd.run_async_retryable(make)
            .fallback(|_| Ok::<_, DependencyError>(7))
            .execute_async_outcome()
    );
    // The execution timeout is 1 000 ms: a 2 s minimum delay cannot fit. No sleep at all.
    let Poll::Ready(outcome) = poll_once(future.as_mut()) else {
        panic!("the execution should end at once");
    };
    assert_eq!(*outcome.response().as_ref().unwrap(), 7);
    assert_eq!(*times.lock().unwrap(), [0]);
    assert_eq!(test.clock().pending_timers(), 0);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "FAILURE, FALLBACK_SUCCESS"
    );
}

#[test]
fn a_retry_after_that_fits_sets_the_delay() {
    let test = TestRegistry::new();
    let cmd = builder("RetryAfterFits")
        .property("retry.maxAttempts", 2)
        .property("execution.isolation.thread.timeoutInMilliseconds", 5_000)
        .classify_retry(|_: &DependencyError| {
            RetryAnswer::retry().after(Duration::from_millis(1_500))
        })
        .build_in(test.registry())
        .unwrap();
    let (make, times) = scripted(&test, &[false, true]);
    let value = drive(&test, cmd.run_async_retryable(make).execute_async()).unwrap();
    assert_eq!(value, 1);
    assert_eq!(*times.lock().unwrap(), [0, 1_500]);
}

#[test]
fn errors_that_say_no_and_bad_requests_are_not_retried() {
    let test = TestRegistry::new();
    let cmd = builder("SaysNo")
        .property("retry.maxAttempts", 3)
        .classify(|e: &DependencyError| {
            if e.0 == "bad" {
                hystrix::Class::BadRequest
            } else {
                hystrix::Class::Failure
            }
        })
        .classify_retry(|e: &DependencyError| {
            if e.0 == "final" {
                RetryAnswer::never()
            } else {
                RetryAnswer::retry()
            }
        })
        .build_in(test.registry())
        .unwrap();
    for (answer, events) in [
        ("final", "FAILURE, FALLBACK_MISSING"),
        ("bad", "BAD_REQUEST"),
    ] {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&calls);
        let outcome = drive(
            &test,
            cmd.run_async_retryable(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                std::future::ready(Err::<u32, _>(DependencyError(answer)))
            })
            .execute_async_outcome(),
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{answer}");
        assert_eq!(
            outcome.execution_result().execution_events().to_string(),
            events
        );
        assert_eq!(outcome.response().as_ref().unwrap_err().attempts(), 1);
    }
}

#[test]
fn the_budget_refuses_at_the_exact_count() {
    let test = TestRegistry::new();
    // No share of requests, one retry per second of a 10 s window: 10 retries.
    let cmd = builder("Budget")
        .property("retry.maxAttempts", 2)
        .property("retry.budget.percent", 0)
        .property("retry.budget.minPerSecond", 1)
        .property("retry.backoff.initialInMilliseconds", 0)
        .build_in(test.registry())
        .unwrap();
    let mut refused_at = None;
    for n in 0..15 {
        let (make, _) = scripted(&test, &[false, false]);
        let outcome = drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
        if outcome
            .execution_result()
            .execution_events()
            .contains(EventType::RetryBudgetExhausted)
            && refused_at.is_none()
        {
            refused_at = Some(n);
            assert_eq!(
                outcome.execution_result().execution_events().to_string(),
                "FAILURE, FALLBACK_MISSING, RETRY_BUDGET_EXHAUSTED"
            );
            assert_eq!(outcome.response().as_ref().unwrap_err().attempts(), 1);
        }
    }
    assert_eq!(refused_at, Some(10));
    let budget = cmd.retry_budget().unwrap();
    assert_eq!(
        (budget.requests, budget.retries, budget.allowed),
        (15, 10, 10)
    );
    test.advance(Duration::from_millis(10_000));
    let metrics = cmd.metrics();
    assert_eq!(metrics.rolling_count(EventType::Retry), 10);
    assert_eq!(metrics.rolling_count(EventType::RetryBudgetExhausted), 5);
}

#[test]
fn dropping_the_execution_during_a_delay_stops_everything() {
    let test = TestRegistry::new();
    let cmd = retrying(&test, "Dropped", 3);
    let (make, times) = scripted(&test, &[false, true]);
    {
        let mut future = pin!(cmd.run_async_retryable(make).execute_async_outcome());
        assert!(poll_once(future.as_mut()).is_pending());
        assert_eq!(test.clock().pending_timers(), 1);
    }
    // The delay's timer is gone; nothing else runs when its time comes.
    assert_eq!(test.clock().pending_timers(), 0);
    test.advance(Duration::from_millis(1_000));
    assert_eq!(*times.lock().unwrap(), [0]);
    let metrics = cmd.metrics();
    assert_eq!(metrics.rolling_count(EventType::Cancelled), 1);
    assert_eq!(metrics.rolling_count(EventType::Failure), 1);
    assert_eq!(metrics.current_concurrent_execution_count(), 0);
}

#[test]
fn a_failed_half_open_trial_re_opens_the_breaker_and_is_not_retried() {
    let test = TestRegistry::new();
    let cmd = retrying(&test, "Trial", 3);
    test.force_open("Trial").unwrap();
    test.clear_forced("Trial").unwrap();
    cmd.circuit_breaker().force_open();
    test.advance(Duration::from_millis(5_001));
    let (make, _) = scripted(&test, &[false, true]);
    {
        let mut future = pin!(cmd.run_async_retryable(make).execute_async_outcome());
        // The trial fails, the breaker re-opens; the execution abandons at once.
        let Poll::Ready(outcome) = poll_once(future.as_mut()) else {
            panic!("a failed trial re-opens the breaker: no retry");
        };
        assert_eq!(
            outcome.execution_result().execution_events().to_string(),
            "FAILURE, FALLBACK_MISSING"
        );
    }
    assert!(cmd.is_circuit_breaker_open());
}

#[test]
fn rejections_are_retried_only_with_on_rejection() {
    for (on_rejection, events) in [
        (false, "SEMAPHORE_REJECTED, FALLBACK_MISSING"),
        (true, "SUCCESS, SEMAPHORE_REJECTED, RETRY"),
    ] {
        let test = TestRegistry::new();
        let cmd = builder("Rejected")
            .property("retry.maxAttempts", 2)
            .property("retry.onRejection", on_rejection)
            .property("execution.isolation.semaphore.maxConcurrentRequests", 1)
            .build_in(test.registry())
            .unwrap();
        // Holds the only permit until released.
        let (tx, rx) = futures::channel::oneshot::channel::<()>();
        let mut holder = pin!(
            cmd.run_async(async move {
                let _ = rx.await;
                Ok::<_, DependencyError>(0)
            })
            .execute_async()
        );
        assert!(poll_once(holder.as_mut()).is_pending());
        let (make, _) = scripted(&test, &[true, true]);
        let mut future = pin!(cmd.run_async_retryable(make).execute_async_outcome());
        let first = poll_once(future.as_mut());
        tx.send(()).unwrap();
        assert!(poll_once(holder.as_mut()).is_ready());
        let outcome = match first {
            Poll::Ready(outcome) => outcome,
            Poll::Pending => drive(&test, future),
        };
        assert_eq!(
            outcome.execution_result().execution_events().to_string(),
            events,
            "{on_rejection}"
        );
    }
}

#[test]
fn no_retry_makes_one_attempt() {
    let test = TestRegistry::new();
    let cmd = retrying(&test, "NoRetry", 3);
    let (make, times) = scripted(&test, &[false, true]);
    let outcome = drive(
        &test,
        cmd.run_async_retryable(make)
            .no_retry()
            .execute_async_outcome(),
    );
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "FAILURE, FALLBACK_MISSING"
    );
    assert_eq!(*times.lock().unwrap(), [0]);
    assert_eq!(cmd.retry_budget(), None);
}

#[test]
fn a_retry_property_on_a_run_that_cannot_be_retried_is_ignored() {
    let test = TestRegistry::new();
    let cmd = retrying(&test, "Single", 3);
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let outcome = cmd
        .run(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Err::<u32, _>(DependencyError("down"))
        })
        .execute_outcome();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "FAILURE, FALLBACK_MISSING"
    );
}

/// A blocking `execute()` under SEMAPHORE waits out its delays on its own thread, parked on
/// the clock: another thread moves the clock once the delay's timer is pending.
#[test]
fn a_blocking_execution_parks_its_thread_through_the_delays() {
    let test = TestRegistry::new();
    let cmd = retrying(&test, "Parked", 3);
    let clock = test.clock().clone();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&calls);
    let worker = std::thread::spawn(move || {
        cmd.run_retryable(move || {
            let seen = Arc::clone(&seen);
            let clock = clock.clone();
            move || {
                let mut seen = seen.lock().unwrap();
                seen.push(clock.now_ms());
                if seen.len() < 3 {
                    Err(DependencyError("down"))
                } else {
                    Ok(seen.len())
                }
            }
        })
        .execute_outcome()
    });
    for _ in 0..2 {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while test.clock().pending_timers() == 0 {
            assert!(std::time::Instant::now() < deadline, "no delay timer");
            std::thread::sleep(Duration::from_millis(1));
        }
        let next = test.clock().next_timer_deadline_ms().unwrap();
        test.clock().advance_ms(next - test.clock().now_ms());
    }
    let outcome = worker.join().unwrap();
    assert_eq!(*outcome.response().as_ref().unwrap(), 3);
    assert_eq!(*calls.lock().unwrap(), [0, 100, 300]);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS, FAILUREx2, RETRYx2"
    );
}

/// Under THREAD isolation each attempt has its own deadline (the execution timeout ÷
/// attempts by default): a hung first attempt times out at 500 ms and the second answers.
#[test]
fn a_timed_out_thread_attempt_is_retried_within_the_execution_deadline() {
    let test = TestRegistry::new();
    let cmd = Command::builder("Hung")
        .group("Test")
        .isolation(IsolationStrategy::Thread)
        .property("retry.maxAttempts", 2)
        .property("retry.backoff.initialInMilliseconds", 0)
        .build_in(test.registry())
        .unwrap();
    let attempt = Arc::new(AtomicU32::new(0));
    let worker = {
        let cmd = cmd.clone();
        let attempt = Arc::clone(&attempt);
        std::thread::spawn(move || {
            cmd.run_cancellable_retryable(move || {
                let attempt = Arc::clone(&attempt);
                move |token: hystrix::CancellationToken| {
                    if attempt.fetch_add(1, Ordering::SeqCst) == 0 {
                        // Hangs until its attempt's deadline cancels the token.
                        while !token.is_cancelled() {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        Err(DependencyError("hung"))
                    } else {
                        Ok(2)
                    }
                }
            })
            .execute_outcome()
        })
    };
    // The first attempt runs on a pool thread (not still queued) with its deadline armed.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while attempt.load(Ordering::SeqCst) == 0 || test.clock().next_timer_deadline_ms() != Some(500)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no running attempt with a 500 ms deadline"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    test.advance(Duration::from_millis(500));
    let outcome = worker.join().unwrap();
    assert_eq!(*outcome.response().as_ref().unwrap(), 2);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS, TIMEOUT, RETRY"
    );
}

#[test]
fn queue_retries_on_the_executor() {
    let test = TestRegistry::new();
    let cmd = builder("Queued")
        .property("retry.maxAttempts", 3)
        .property("retry.backoff.initialInMilliseconds", 0)
        .build_in(test.registry())
        .unwrap();
    let (make, times) = scripted(&test, &[false, false, true]);
    let value = cmd.run_async_retryable(make).queue().get().unwrap();
    assert_eq!(value, 2);
    assert_eq!(*times.lock().unwrap(), [0, 0, 0]);
}

#[test]
fn retry_properties_are_validated_with_their_names() {
    let test = TestRegistry::new();
    for (name, value, reason) in [
        ("retry.maxAttempts", "0", "must be at least 1"),
        ("retry.maxAttempts", "101", "must be at most 100"),
        ("retry.backoff.multiplier", "0.5", "at least 1.0"),
        (
            "retry.backoff.jitter",
            "HALF",
            "expected NONE, FULL or DECORRELATED",
        ),
        ("retry.budget.windowInMilliseconds", "15", "multiple of 10"),
        ("retry.budget.percent", "101", "percentage"),
    ] {
        let err = builder("Invalid")
            .property(name, value)
            .build_in(test.registry())
            .unwrap_err()
            .to_string();
        assert!(err.contains(name) && err.contains(reason), "{name}: {err}");
    }
    let err = builder("Invalid")
        .property("retry.backoff.initialInMilliseconds", 500)
        .property("retry.backoff.maxInMilliseconds", 100)
        .build_in(test.registry())
        .unwrap_err()
        .to_string();
    assert!(err.contains("retry.backoff.maxInMilliseconds"), "{err}");
}

#[test]
fn a_named_budget_is_shared_by_the_keys_naming_it() {
    let test = TestRegistry::new();
    let make_cmd = |key: &str| {
        builder(key)
            .property("retry.maxAttempts", 2)
            .property("retry.budget.name", "search")
            .property("retry.budget.percent", 0)
            .property("retry.budget.minPerSecond", 1)
            .property("retry.backoff.initialInMilliseconds", 0)
            .build_in(test.registry())
            .unwrap()
    };
    let (a, b) = (make_cmd("SearchA"), make_cmd("SearchB"));
    for cmd in [&a, &b].into_iter().cycle().take(12) {
        let (make, _) = scripted(&test, &[false, false]);
        let _ = drive(&test, cmd.run_async_retryable(make).execute_async());
    }
    let shared = a.retry_budget().unwrap();
    assert_eq!(shared, b.retry_budget().unwrap());
    assert_eq!((shared.requests, shared.retries), (12, 10));
}

/// Regression: a factory that panics when making a later attempt ends the attempts at once (it
/// went back to the attempt loop and spent every remaining attempt on RETRY and delays).
#[test]
fn a_panicking_factory_ends_the_attempts() {
    let test = TestRegistry::new();
    let cmd = retrying(&test, "PanickingFactory", 4);
    let made = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&made);
    let outcome = drive(
        &test,
        cmd.run_async_retryable(move || {
            if counted.fetch_add(1, Ordering::SeqCst) == 1 {
                panic!("cannot make another request");
            }
            std::future::ready(Err::<u32, _>(DependencyError("down")))
        })
        .fallback(|_| Ok::<_, DependencyError>(9))
        .execute_async_outcome(),
    );
    assert_eq!(*outcome.response().as_ref().unwrap(), 9);
    assert_eq!(made.load(Ordering::SeqCst), 2);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "FAILURE, FALLBACK_SUCCESS, RETRY"
    );
    assert_eq!(test.clock().now_ms(), 100);
}

/// Regression (fresh user): a 503 with Retry-After trips the breaker for longer than the
/// delay; waiting out the delay only to be short-circuited wasted the caller's time and the
/// budget. The retry now waits for the breaker's trial too, or goes to the fallback at once.
#[test]
fn a_retry_after_waits_for_the_breaker_it_tripped_or_gives_up_at_once() {
    for (sleep_window_ms, events, at_ms) in [
        // The breaker stays open 5 s: past the 1 s deadline, the fallback at once.
        (5_000, "FAILURE, FALLBACK_SUCCESS", 0),
        // Open for max(100, 200) ms: the retry is its trial at 201 ms.
        (100, "SUCCESS, FAILURE, RETRY", 201),
    ] {
        let test = TestRegistry::new();
        let cmd = builder("TripsOn503")
            .property("retry.maxAttempts", 3)
            .circuit_breaker_sleep_window(Duration::from_millis(sleep_window_ms))
            .classify(|_: &DependencyError| hystrix::Class::TripNow {
                min_open: Some(Duration::from_millis(200)),
            })
            .classify_retry(|_: &DependencyError| {
                RetryAnswer::retry().after(Duration::from_millis(200))
            })
            .build_in(test.registry())
            .unwrap();
        let (make, times) = scripted(&test, &[false, true]);
        let outcome = drive(
            &test,
            cmd.run_async_retryable(make)
                .fallback(|_| Ok::<_, DependencyError>(7))
                .execute_async_outcome(),
        );
        let got = outcome.execution_result().execution_events().to_string();
        assert_eq!(got, events, "sleep window {sleep_window_ms}");
        assert_eq!(
            test.clock().now_ms(),
            at_ms,
            "sleep window {sleep_window_ms}"
        );
        assert_eq!(times.lock().unwrap().len(), 1 + usize::from(at_ms > 0));
    }
}

/// Regression (fresh user): with `execution.timeout.enabled=false`, an explicit
/// `retry.attemptTimeoutInMilliseconds` was ignored; it now bounds each attempt.
#[test]
fn an_explicit_attempt_timeout_applies_without_an_execution_timeout() {
    let test = TestRegistry::new();
    let cmd = builder("NoExecutionTimeout")
        .timeout_enabled(false)
        .property("retry.maxAttempts", 2)
        .property("retry.attemptTimeoutInMilliseconds", 100)
        .property("retry.backoff.initialInMilliseconds", 0)
        .build_in(test.registry())
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let outcome = drive(
        &test,
        cmd.run_async_retryable(move || {
            let first = counted.fetch_add(1, Ordering::SeqCst) == 0;
            Box::pin(async move {
                if first {
                    std::future::pending::<()>().await;
                }
                Ok::<u32, DependencyError>(2)
            }) as std::pin::Pin<Box<dyn Future<Output = _> + Send>>
        })
        .execute_async_outcome(),
    );
    assert_eq!(*outcome.response().as_ref().unwrap(), 2_u32);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS, TIMEOUT, RETRY"
    );
    assert_eq!(test.clock().now_ms(), 100);
}

/// Regression (fresh user): `.classify(..)` after `.classify_retry(..)` dropped the retry
/// answers; the builder's order no longer matters.
#[test]
fn classify_after_classify_retry_keeps_the_retry_answers() {
    let test = TestRegistry::new();
    let cmd = builder("OrderOfClassifiers")
        .property("retry.maxAttempts", 3)
        .classify_retry(|_: &DependencyError| RetryAnswer::never())
        .classify(|_: &DependencyError| hystrix::Class::Failure)
        .build_in(test.registry())
        .unwrap();
    let (make, times) = scripted(&test, &[false, false, false]);
    let err = drive(&test, cmd.run_async_retryable(make).execute_async()).unwrap_err();
    assert_eq!(err.attempts(), 1);
    assert_eq!(times.lock().unwrap().len(), 1);
}
