//! Retry under random outcome scripts and settings: whatever happens, an execution makes at
//! most `retry.maxAttempts` attempts, the budget is never exceeded, the fallback runs at most
//! once (exactly once when the execution does not succeed), and no permit or half-open trial
//! slot is left behind.
#![allow(clippy::unwrap_used)]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{DependencyError, builder, drive};
use hystrix::EventType;
use hystrix::testing::TestRegistry;
use proptest::prelude::*;

#[derive(Debug, Clone, Copy)]
enum Attempt {
    Ok,
    Fails,
    Hangs,
    Panics,
}

fn attempt() -> impl Strategy<Value = Attempt> {
    prop_oneof![
        2 => Just(Attempt::Ok),
        4 => Just(Attempt::Fails),
        1 => Just(Attempt::Hangs),
        1 => Just(Attempt::Panics),
    ]
}

#[derive(Debug, Clone)]
struct Settings {
    max_attempts: u32,
    initial_ms: u64,
    jitter: &'static str,
    percent: u32,
    min_per_second: u32,
    timeout_ms: u64,
}

fn settings() -> impl Strategy<Value = Settings> {
    (
        1u32..=5,
        0u64..=300,
        prop_oneof![Just("NONE"), Just("FULL"), Just("DECORRELATED")],
        0u32..=100,
        0u32..=3,
        50u64..=2_000,
    )
        .prop_map(
            |(max_attempts, initial_ms, jitter, percent, min_per_second, timeout_ms)| Settings {
                max_attempts,
                initial_ms,
                jitter,
                percent,
                min_per_second,
                timeout_ms,
            },
        )
}

type Run = Pin<Box<dyn Future<Output = Result<u32, DependencyError>> + Send>>;

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn attempts_budget_fallback_and_permits_hold(
        settings in settings(),
        scripts in prop::collection::vec(prop::collection::vec(attempt(), 1..6), 1..8),
    ) {
        let test = TestRegistry::new();
        let cmd = builder("Model")
            .property("retry.maxAttempts", settings.max_attempts)
            .property("retry.backoff.initialInMilliseconds", settings.initial_ms)
            .property("retry.backoff.maxInMilliseconds", settings.initial_ms.max(1_000))
            .property("retry.backoff.jitter", settings.jitter)
            .property("retry.budget.percent", settings.percent)
            .property("retry.budget.minPerSecond", settings.min_per_second)
            .property("execution.isolation.thread.timeoutInMilliseconds", settings.timeout_ms)
            .property("retry.budget.windowInMilliseconds", 60_000)
            .property("circuitBreaker.requestVolumeThreshold", 3)
            .build_in(test.registry())
            .unwrap();
        for script in scripts {
            let runs = Arc::new(AtomicU32::new(0));
            let made = Arc::new(Mutex::new(script.clone().into_iter()));
            let fallbacks = Arc::new(AtomicU32::new(0));
            let (counted, fallen) = (Arc::clone(&runs), Arc::clone(&fallbacks));
            let outcome = drive(
                &test,
                cmd.run_async_retryable(move || {
                    let next = made.lock().unwrap().next().unwrap_or(Attempt::Fails);
                    let counted = Arc::clone(&counted);
                    Box::pin(async move {
                        counted.fetch_add(1, Ordering::SeqCst);
                        match next {
                            Attempt::Ok => Ok(1_u32),
                            Attempt::Fails => Err(DependencyError("down")),
                            Attempt::Hangs => std::future::pending().await,
                            Attempt::Panics => panic!("the dependency's client panicked"),
                        }
                    }) as Run
                })
                .fallback(move |_| {
                    fallen.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, DependencyError>(0)
                })
                .execute_async_outcome(),
            );
            let events = outcome.execution_result().execution_events();
            let ran = runs.load(Ordering::SeqCst);
            prop_assert!(ran <= settings.max_attempts, "{ran} runs: {events}");
            let attempts = events.count(EventType::Success)
                + events.count(EventType::Failure)
                + events.count(EventType::Timeout)
                + events.count(EventType::ShortCircuited)
                + events.count(EventType::SemaphoreRejected);
            prop_assert!(attempts <= settings.max_attempts, "{events}");
            prop_assert_eq!(events.count(EventType::Retry) + 1, attempts.max(1), "{}", events);
            let succeeded = events.contains(EventType::Success);
            prop_assert_eq!(fallbacks.load(Ordering::SeqCst), u32::from(!succeeded), "{}", events);
            prop_assert_eq!(outcome.response().is_ok(), true);
            prop_assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
            // Every execution stays inside one budget window (60 s): its retries never pass
            // what its requests allow.
            if let Some(budget) = cmd.retry_budget() {
                prop_assert!(budget.retries <= budget.allowed, "{:?}", budget);
            }
        }
        // No trial slot left behind: the breaker looks at the health of the executions above
        // (it may trip now), and once a sleep window has passed a trial is admitted.
        test.advance(Duration::from_millis(6_000));
        let _ = cmd.run(|| Ok::<_, DependencyError>(1)).execute();
        test.advance(Duration::from_millis(6_000));
        let outcome = cmd.run(|| Ok::<_, DependencyError>(1)).no_retry().execute_outcome();
        prop_assert!(
            outcome.execution_result().execution_events().contains(EventType::Success),
            "{:?}",
            outcome.response().as_ref().map_err(|e| e.failure_type())
        );
    }
}
