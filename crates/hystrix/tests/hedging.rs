//! Hedging: exact values on the manual clock.
#![allow(clippy::unwrap_used)]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{DependencyError, builder, drive, poll_once};
use hystrix::testing::TestRegistry;
use hystrix::{Command, EventType, HystrixError, IsolationStrategy};

type Attempt = Pin<Box<dyn Future<Output = Result<u32, DependencyError>> + Send>>;

/// What a factory's attempts did: when each started (registry clock, ms) and how many were
/// dropped before they ended (cancelled).
#[derive(Clone, Default)]
struct Seen {
    started: Arc<Mutex<Vec<u64>>>,
    dropped: Arc<AtomicU32>,
}

impl Seen {
    fn started(&self) -> Vec<u64> {
        self.started.lock().unwrap().clone()
    }

    fn dropped(&self) -> u32 {
        self.dropped.load(Ordering::SeqCst)
    }
}

/// Counts a drop unless disarmed (the attempt ended).
struct DropGuard(Option<Arc<AtomicU32>>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        if let Some(dropped) = self.0.take() {
            dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A factory of async runs: attempt `n` takes `script[n].0` ms of the registry's clock, then
/// answers `Ok(n)` (or fails when `script[n].1` is false).
fn timed(
    test: &TestRegistry,
    script: &[(u64, bool)],
) -> (impl FnMut() -> Attempt + Send + use<>, Seen) {
    let script: Vec<(u64, Option<&'static str>)> = script
        .iter()
        .map(|&(ms, ok)| (ms, (!ok).then_some("down")))
        .collect();
    timed_errors(test, &script)
}

/// As [`timed`], attempt `n` failing with `DependencyError(message)` when `script[n].1` is
/// `Some(message)`.
fn timed_errors(
    test: &TestRegistry,
    script: &[(u64, Option<&'static str>)],
) -> (impl FnMut() -> Attempt + Send + use<>, Seen) {
    let seen = Seen::default();
    let script = script.to_vec();
    let clock = Arc::clone(test.registry().clock());
    let calls = Arc::new(AtomicU32::new(0));
    let record = seen.clone();
    let make = move || {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let (ms, error) = script.get(n as usize).copied().unwrap_or((0, None));
        let (record, clock) = (record.clone(), Arc::clone(&clock));
        Box::pin(async move {
            record.started.lock().unwrap().push(clock.now_ms());
            let mut guard = DropGuard(Some(Arc::clone(&record.dropped)));
            hystrix::clock::sleep(&clock, Duration::from_millis(ms)).await;
            guard.0 = None;
            match error {
                None => Ok(n),
                Some(message) => Err(DependencyError(message)),
            }
        }) as Attempt
    };
    (make, seen)
}

/// A SEMAPHORE command hedging up to `attempts` attempts after `delay_ms` (timeout 10 s).
fn hedging(test: &TestRegistry, key: &str, attempts: u32, delay_ms: u64) -> Command {
    builder(key)
        .property("hedging.maxAttempts", attempts)
        .property("hedging.delayInMilliseconds", delay_ms)
        .property("execution.isolation.thread.timeoutInMilliseconds", 10_000)
        .build_in(test.registry())
        .unwrap()
}

#[test]
fn the_hedge_starts_at_the_delay_wins_and_the_slow_attempt_is_cancelled() {
    let test = TestRegistry::new();
    let cmd = hedging(&test, "HedgeWins", 2, 100);
    let (make, seen) = timed(&test, &[(500, true), (50, true)]);
    let outcome = drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    assert_eq!(*outcome.response().as_ref().unwrap(), 1);
    assert_eq!(seen.started(), [0, 100]);
    assert_eq!(seen.dropped(), 1);
    let result = outcome.execution_result();
    assert_eq!(
        result.execution_events().to_string(),
        "SUCCESS, HEDGE, HEDGE_CANCELLED"
    );
    assert_eq!(result.total_time_ms(), 150);
    // The winner's run.
    assert_eq!(result.execution_time_ms(), Some(50));
    // Nothing is left waiting: the loser's timer and the next hedge's are gone.
    assert_eq!(test.clock().advance_to_next_timer(), None);
    // Rolling counts read completed buckets (1 s).
    test.clock().advance(Duration::from_secs(1));
    let metrics = cmd.metrics();
    assert_eq!(metrics.rolling_count(EventType::Hedge), 1);
    assert_eq!(metrics.rolling_count(EventType::HedgeCancelled), 1);
    assert_eq!(metrics.rolling_count(EventType::Success), 1);
    assert_eq!(metrics.current_concurrent_execution_count(), 0);
}

#[test]
fn the_first_attempt_wins_when_it_ends_first() {
    let test = TestRegistry::new();
    let cmd = hedging(&test, "FirstWins", 2, 100);
    let (make, seen) = timed(&test, &[(150, true), (500, true)]);
    let outcome = drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    assert_eq!(*outcome.response().as_ref().unwrap(), 0);
    assert_eq!(seen.started(), [0, 100]);
    assert_eq!(seen.dropped(), 1);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS, HEDGE, HEDGE_CANCELLED"
    );
    assert_eq!(outcome.execution_result().total_time_ms(), 150);
}

#[test]
fn no_hedge_for_an_attempt_that_ends_before_the_delay() {
    let test = TestRegistry::new();
    let cmd = hedging(&test, "Fast", 3, 100);
    let (make, seen) = timed(&test, &[(99, true)]);
    let outcome = drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    assert_eq!(seen.started(), [0]);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS"
    );
    assert_eq!(test.clock().advance_to_next_timer(), None);
}

#[test]
fn three_attempts_each_one_delay_apart() {
    let test = TestRegistry::new();
    let cmd = hedging(&test, "Three", 3, 100);
    let (make, seen) = timed(&test, &[(1_000, true), (1_000, true), (10, true)]);
    let outcome = drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    assert_eq!(*outcome.response().as_ref().unwrap(), 2);
    assert_eq!(seen.started(), [0, 100, 200]);
    assert_eq!(seen.dropped(), 2);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS, HEDGEx2, HEDGE_CANCELLEDx2"
    );
    assert_eq!(outcome.execution_result().total_time_ms(), 210);
}

#[test]
fn no_hedge_while_the_breaker_is_open() {
    let test = TestRegistry::new();
    let cmd = hedging(&test, "Open", 2, 100);
    let (make, seen) = timed(&test, &[(500, true), (10, true)]);
    let mut future = std::pin::pin!(cmd.run_async_retryable(make).execute_async_outcome());
    assert!(poll_once(future.as_mut()).is_pending());
    cmd.circuit_breaker().force_open();
    let outcome = drive(&test, future);
    // Skipped silently: the first attempt's value, no SHORT_CIRCUITED on it.
    assert_eq!(*outcome.response().as_ref().unwrap(), 0);
    assert_eq!(seen.started(), [0]);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS"
    );
    assert_eq!(outcome.execution_result().total_time_ms(), 500);
}

#[test]
fn no_hedge_without_a_free_permit() {
    let test = TestRegistry::new();
    let cmd = builder("OnePermit")
        .property("hedging.maxAttempts", 2)
        .property("hedging.delayInMilliseconds", 100)
        .semaphore_max_concurrent_requests(1)
        .build_in(test.registry())
        .unwrap();
    let (make, seen) = timed(&test, &[(500, true), (10, true)]);
    let outcome = drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    assert_eq!(*outcome.response().as_ref().unwrap(), 0);
    assert_eq!(seen.started(), [0]);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS"
    );
    assert_eq!(cmd.metrics().rolling_count(EventType::SemaphoreRejected), 0);
    // A hedge refused a permit spends no retry budget.
    let budget = cmd.retry_budget().unwrap();
    assert_eq!((budget.requests, budget.retries), (1, 0));
}

#[test]
fn a_failed_attempt_leaves_the_race_to_the_others_then_the_fallback() {
    let test = TestRegistry::new();
    let cmd = hedging(&test, "AllFail", 2, 100);
    let (make, seen) = timed(&test, &[(200, false), (150, false)]);
    let outcome = drive(
        &test,
        cmd.run_async_retryable(make)
            .fallback(|_err: &HystrixError<DependencyError>| Ok::<_, DependencyError>(7))
            .execute_async_outcome(),
    );
    assert_eq!(*outcome.response().as_ref().unwrap(), 7);
    assert_eq!(seen.started(), [0, 100]);
    assert_eq!(seen.dropped(), 0);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "FAILUREx2, FALLBACK_SUCCESS, HEDGE"
    );
    assert_eq!(outcome.execution_result().total_time_ms(), 250);
    // Each attempt is one request for health (the health buckets of 500 ms complete at 500).
    test.clock().advance(Duration::from_millis(500));
    let health = cmd.metrics().health_counts();
    assert_eq!((health.total_requests, health.error_count), (2, 2));
}

#[test]
fn a_failed_first_attempt_and_a_winning_hedge() {
    let test = TestRegistry::new();
    let cmd = hedging(&test, "FailThenWin", 2, 100);
    let (make, _seen) = timed(&test, &[(200, false), (150, true)]);
    let outcome = drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    assert_eq!(*outcome.response().as_ref().unwrap(), 1);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS, FAILURE, HEDGE"
    );
    test.clock().advance(Duration::from_millis(500));
    let health = cmd.metrics().health_counts();
    assert_eq!((health.total_requests, health.error_count), (2, 1));
}

#[test]
fn without_a_fallback_the_error_says_how_many_attempts_were_made() {
    let test = TestRegistry::new();
    let cmd = hedging(&test, "NoFallback", 2, 100);
    let (make, _seen) = timed(&test, &[(200, false), (150, false)]);
    let err = drive(&test, cmd.run_async_retryable(make).execute_async()).unwrap_err();
    assert_eq!(err.attempts(), 2);
}

#[test]
fn dropping_the_execution_cancels_every_attempt() {
    let test = TestRegistry::new();
    let cmd = hedging(&test, "Dropped", 2, 100);
    let (make, seen) = timed(&test, &[(500, true), (500, true)]);
    {
        let mut future = Box::pin(cmd.run_async_retryable(make).execute_async_outcome());
        assert!(poll_once(future.as_mut()).is_pending());
        test.clock().advance_to_next_timer();
        assert!(poll_once(future.as_mut()).is_pending());
        assert_eq!(seen.started(), [0, 100]);
        assert_eq!(cmd.metrics().current_concurrent_execution_count(), 2);
    }
    assert_eq!(seen.dropped(), 2);
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
    assert_eq!(test.clock().advance_to_next_timer(), None);
    test.clock().advance(Duration::from_secs(1));
    assert_eq!(cmd.metrics().rolling_count(EventType::Cancelled), 1);
    assert_eq!(cmd.metrics().rolling_count(EventType::Hedge), 1);
    assert_eq!(cmd.metrics().rolling_count(EventType::HedgeCancelled), 0);
}

#[test]
fn hedges_spend_the_retry_budget_and_stop_when_it_is_spent() {
    let test = TestRegistry::new();
    // 0 % of requests, and 1 retry per second over a 1 s window: one hedge in the window.
    let cmd = builder("Budget")
        .property("hedging.maxAttempts", 2)
        .property("hedging.delayInMilliseconds", 100)
        .property("retry.budget.percent", 0)
        .property("retry.budget.minPerSecond", 1)
        .property("retry.budget.windowInMilliseconds", 1_000)
        .build_in(test.registry())
        .unwrap();
    let (make, seen) = timed(&test, &[(500, true), (10, true), (500, true), (10, true)]);
    let make = Arc::new(Mutex::new(make));
    let factory = || {
        let make = Arc::clone(&make);
        move || (make.lock().unwrap())()
    };
    let first = drive(
        &test,
        cmd.run_async_retryable(factory()).execute_async_outcome(),
    );
    assert_eq!(
        first.execution_result().execution_events().to_string(),
        "SUCCESS, HEDGE, HEDGE_CANCELLED"
    );
    let budget = cmd.retry_budget().unwrap();
    assert_eq!((budget.requests, budget.retries, budget.allowed), (1, 1, 1));
    let second = drive(
        &test,
        cmd.run_async_retryable(factory()).execute_async_outcome(),
    );
    // The budget refused: no hedge, the slow attempt's value.
    assert_eq!(
        second.execution_result().execution_events().to_string(),
        "SUCCESS"
    );
    assert_eq!(*second.response().as_ref().unwrap(), 2);
    assert_eq!(seen.started(), [0, 100, 110]);
}

#[test]
fn the_adaptive_delay_is_the_percentile_of_first_attempts_after_one_health_interval() {
    let test = TestRegistry::new();
    // Health interval 500 ms (the default); delay 300 ms until there is data.
    let cmd = builder("Adaptive")
        .property("hedging.maxAttempts", 2)
        .property("hedging.delayInMilliseconds", 300)
        .property("hedging.delayPercentile", 50.0)
        .property("execution.isolation.thread.timeoutInMilliseconds", 10_000)
        .build_in(test.registry())
        .unwrap();
    // Four first attempts of 20, 40, 60 and 80 ms in the first interval: no hedge (< 300 ms).
    for ms in [20, 40, 60, 80] {
        let (make, _) = timed(&test, &[(ms, true)]);
        let outcome = drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
        assert_eq!(
            outcome.execution_result().execution_events().to_string(),
            "SUCCESS"
        );
    }
    assert_eq!(test.registry().clock().now_ms(), 200);
    // Still in the first interval: the fixed delay.
    let (make, seen) = timed(&test, &[(400, true), (10, true)]);
    drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    assert_eq!(seen.started(), [200, 500]);
    // The next interval: the median of 20, 40, 60, 80 and the 310 ms just cancelled.
    test.clock().advance(Duration::from_millis(490));
    let (make, seen) = timed(&test, &[(400, true), (10, true)]);
    drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    assert_eq!(seen.started(), [1_000, 1_060]);
}

#[test]
fn a_blocking_run_under_semaphore_is_not_hedged() {
    let test = TestRegistry::new();
    let cmd = hedging(&test, "BlockingHere", 2, 100);
    let calls = Arc::new(AtomicU32::new(0));
    let made = Arc::clone(&calls);
    let slow = test.clone();
    let outcome = cmd
        .run_retryable(move || {
            made.fetch_add(1, Ordering::SeqCst);
            let slow = slow.clone();
            move || {
                slow.advance(Duration::from_millis(500));
                Ok::<_, DependencyError>(1)
            }
        })
        .execute_outcome();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS"
    );
}

#[test]
fn a_blocking_hedge_on_the_pool_wins_and_the_loser_sees_its_token_cancelled() {
    let test = TestRegistry::new();
    let cmd = builder("BlockingPool")
        .isolation(IsolationStrategy::Thread)
        .property("hedging.maxAttempts", 2)
        .property("hedging.delayInMilliseconds", 100)
        .property("execution.isolation.thread.timeoutInMilliseconds", 10_000)
        .build_in(test.registry())
        .unwrap();
    let (cancelled_tx, cancelled_rx) = std::sync::mpsc::channel();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let mut future = Box::pin(
        cmd.run_cancellable_retryable(common::first_run_hangs(started_tx, cancelled_tx))
            .execute_async_outcome(),
    );
    assert!(poll_once(future.as_mut()).is_pending());
    // The first attempt runs on a pool thread before the delay passes.
    started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(test.clock().advance_to_next_timer(), Some(100));
    let outcome = futures::executor::block_on(future);
    assert_eq!(*outcome.response().as_ref().unwrap(), 1);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS, HEDGE, HEDGE_CANCELLED"
    );
    // The first attempt saw its token cancelled.
    cancelled_rx.recv_timeout(Duration::from_secs(10)).unwrap();
}

#[test]
fn invalid_hedging_properties_are_refused_with_their_name() {
    let test = TestRegistry::new();
    for (name, value, reason) in [
        ("hedging.maxAttempts", 0.0, "at least 1"),
        ("hedging.maxAttempts", 11.0, "at most 10"),
        ("hedging.delayPercentile", 100.0, "below 100"),
        ("hedging.delayPercentile", -1.0, "above 0"),
    ] {
        let builder = builder("Invalid");
        let builder = if name == "hedging.maxAttempts" {
            builder.property(name, value as u32)
        } else {
            builder.property(name, value)
        };
        let err = builder.build_in(test.registry()).unwrap_err().to_string();
        assert!(err.contains(name) && err.contains(reason), "{err}");
    }
}

#[test]
fn no_retry_turns_hedging_off_for_the_call() {
    let test = TestRegistry::new();
    let cmd = hedging(&test, "NoRetry", 2, 100);
    let (make, seen) = timed(&test, &[(500, true), (10, true)]);
    let outcome = drive(
        &test,
        cmd.run_async_retryable(make)
            .no_retry()
            .execute_async_outcome(),
    );
    assert_eq!(seen.started(), [0]);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS"
    );
}

#[test]
fn a_hedge_the_pool_refuses_spends_no_budget_and_makes_no_run() {
    let test = TestRegistry::new();
    let cmd = builder("PoolFull")
        .isolation(IsolationStrategy::Thread)
        .thread_pool_core_size(1)
        .property("hedging.maxAttempts", 2)
        .property("hedging.delayInMilliseconds", 100)
        .property("execution.isolation.thread.timeoutInMilliseconds", 300)
        .build_in(test.registry())
        .unwrap();
    let made = Arc::new(AtomicU32::new(0));
    let count = Arc::clone(&made);
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let future = cmd
        .run_cancellable_retryable(move || {
            count.fetch_add(1, Ordering::SeqCst);
            let started = started_tx.clone();
            move |token: hystrix::CancellationToken| {
                started.send(()).unwrap();
                // Holds the pool's only thread until the execution times out.
                while !token.is_cancelled() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok::<_, DependencyError>(0)
            }
        })
        .execute_async_outcome();
    let mut future = Box::pin(future);
    assert!(poll_once(future.as_mut()).is_pending());
    started_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let outcome = drive(&test, future);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "TIMEOUT, FALLBACK_MISSING"
    );
    // The pool refused the hedge: no run was made for it, no budget spent on it.
    assert_eq!(made.load(Ordering::SeqCst), 1);
    let budget = cmd.retry_budget().unwrap();
    assert_eq!((budget.requests, budget.retries), (1, 0));
}

/// A command hedging once after 20 ms and retrying once at once; "busy" errors ask for 2 s
/// (overload), "bad" ones must not be retried.
fn hedging_and_retrying(
    test: &TestRegistry,
    key: &str,
    hedges: u32,
) -> Command<hystrix::Classifier<DependencyError>> {
    builder(key)
        .property("hedging.maxAttempts", hedges)
        .property("hedging.delayInMilliseconds", 20)
        .property("retry.maxAttempts", 2)
        .property("retry.backoff.initialInMilliseconds", 0)
        .property("execution.isolation.thread.timeoutInMilliseconds", 10_000)
        .classify_retry(|err: &DependencyError| match err.0 {
            "busy" => hystrix::retry::RetryAnswer::retry()
                .after(Duration::from_secs(2))
                .overloaded(),
            "bad" => hystrix::retry::RetryAnswer::never(),
            _ => hystrix::retry::RetryAnswer::retry(),
        })
        .build_in(test.registry())
        .unwrap()
}

#[test]
fn a_retry_after_from_one_attempt_is_kept_when_another_fails_later() {
    let test = TestRegistry::new();
    let cmd = hedging_and_retrying(&test, "KeepRetryAfter", 2);
    // The first attempt fails at 30 ms; the hedge (from 20 ms) asked for 2 s at 25 ms.
    let (make, seen) = timed_errors(&test, &[(30, Some("down")), (5, Some("busy")), (0, None)]);
    let outcome = drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    assert_eq!(*outcome.response().as_ref().unwrap(), 2);
    // The round ends at 30 ms; the retry waits the 2 s asked for from then.
    assert_eq!(seen.started(), [0, 20, 2_030]);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS, FAILUREx2, RETRY, HEDGE"
    );
}

#[test]
fn an_attempt_that_says_never_ends_the_hedging_and_the_retries() {
    let test = TestRegistry::new();
    let cmd = hedging_and_retrying(&test, "Never", 3);
    // The hedge (from 20 ms) says never at 25 ms: no third attempt at 40 ms.
    let (make, seen) = timed_errors(&test, &[(100, Some("down")), (5, Some("bad")), (1, None)]);
    let outcome = drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    assert_eq!(seen.started(), [0, 20]);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "FAILUREx2, FALLBACK_MISSING, HEDGE"
    );
    assert_eq!(outcome.execution_result().total_time_ms(), 100);
}

#[test]
fn a_factory_that_panics_ends_the_hedges_of_the_round() {
    let test = TestRegistry::new();
    let cmd = hedging(&test, "PanickingFactory", 3, 20);
    let (mut make, seen) = timed(&test, &[(500, true), (0, true), (5, true)]);
    let mut calls = 0;
    let factory = move || {
        calls += 1;
        assert!(calls != 2, "the factory fails once");
        make()
    };
    let outcome = drive(
        &test,
        cmd.run_async_retryable(factory).execute_async_outcome(),
    );
    assert_eq!(*outcome.response().as_ref().unwrap(), 0);
    assert_eq!(seen.started(), [0]);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS"
    );
}

#[test]
fn the_adaptive_delay_waits_for_enough_first_attempts_for_its_percentile() {
    let test = TestRegistry::new();
    // p99 needs 100 first attempts: one of 1 ms is not data.
    let cmd = builder("OneSample")
        .property("hedging.maxAttempts", 2)
        .property("hedging.delayInMilliseconds", 300)
        .property("hedging.delayPercentile", 99.0)
        .build_in(test.registry())
        .unwrap();
    let (make, _) = timed(&test, &[(1, true)]);
    drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    test.clock().advance(Duration::from_millis(999));
    let (make, seen) = timed(&test, &[(400, true), (10, true)]);
    drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    assert_eq!(seen.started(), [1_000, 1_300]);
}

#[test]
fn a_blocking_hedge_does_not_queue_behind_the_attempt_it_races() {
    let test = TestRegistry::new();
    let cmd = builder("QueuedBehind")
        .isolation(IsolationStrategy::Thread)
        .thread_pool_core_size(1)
        .thread_pool_property("maxQueueSize", 5)
        .property("hedging.maxAttempts", 2)
        .property("hedging.delayInMilliseconds", 20)
        .property("execution.isolation.thread.timeoutInMilliseconds", 10_000)
        .build_in(test.registry())
        .unwrap();
    let made = Arc::new(AtomicU32::new(0));
    let count = Arc::clone(&made);
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = Arc::new(Mutex::new(release_rx));
    let mut future = Box::pin(
        cmd.run_retryable(move || {
            let n = count.fetch_add(1, Ordering::SeqCst);
            let (started, release) = (started_tx.clone(), Arc::clone(&release_rx));
            move || {
                started.send(n).unwrap();
                if n == 0 {
                    release.lock().unwrap().recv().unwrap();
                }
                Ok::<_, DependencyError>(n)
            }
        })
        .execute_async_outcome(),
    );
    assert!(poll_once(future.as_mut()).is_pending());
    assert_eq!(started_rx.recv_timeout(Duration::from_secs(10)).unwrap(), 0);
    // The pool's only thread is busy: the hedge would wait in the queue, so it is skipped.
    assert_eq!(test.clock().advance_to_next_timer(), Some(20));
    assert!(poll_once(future.as_mut()).is_pending());
    release_tx.send(()).unwrap();
    let outcome = futures::executor::block_on(future);
    assert_eq!(*outcome.response().as_ref().unwrap(), 0);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS"
    );
    assert_eq!(made.load(Ordering::SeqCst), 1);
}
