//! Client-side adaptive throttling in commands (`execution.throttle.*`, Google SRE book,
//! "Handling Overload"): the probability from the window's requests and accepts, seeded
//! draws, the rolling window, properties changed at run time, THROTTLED to the fallback and
//! not a health error, retries counted once per attempt. Exact values on the manual clock
//! with the test registry's fixed seed.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{DependencyError, builder, overload_on_503};
use hystrix::retry::RetryAnswer;
use hystrix::testing::TestRegistry;
use hystrix::{
    Classifier, Command, EventType, FailureType, HealthCounts, HystrixError, Status,
    ThrottleSnapshot,
};

/// A command with throttling on at `multiplier` (K), its 503 errors overload.
fn throttled(
    test: &TestRegistry,
    key: &str,
    multiplier: f64,
) -> Command<Classifier<DependencyError>> {
    builder(key)
        .property("execution.throttle.enabled", true)
        .property("execution.throttle.multiplier", multiplier)
        .classify_retry(overload_on_503)
        .build_in(test.registry())
        .unwrap()
}

fn set(test: &TestRegistry, key: &str, name: &str, value: impl Into<hystrix::PropertyValue>) {
    test.registry()
        .properties()
        .set(&format!("hystrix.command.{key}.{name}"), value)
        .unwrap();
}

/// Runs `cmd` once, blocking, answering `Ok(1)` or the error `error`; the fallback answers 99.
fn call<C: hystrix::Classify<DependencyError> + Send + Sync + 'static>(
    cmd: &Command<C>,
    error: Option<&'static str>,
) -> hystrix::Outcome<u32, DependencyError> {
    cmd.run(move || error.map_or(Ok(1), |e| Err(DependencyError(e))))
        .fallback(fallback)
        .execute_outcome()
}

/// The events of [`call`].
fn events_of<C: hystrix::Classify<DependencyError> + Send + Sync + 'static>(
    cmd: &Command<C>,
    error: Option<&'static str>,
) -> hystrix::EventCounts {
    call(cmd, error).execution_result().execution_events()
}

fn fallback(_: &HystrixError<DependencyError>) -> Result<u32, DependencyError> {
    Ok(99)
}

/// An empty window.
const EMPTY: ThrottleSnapshot = ThrottleSnapshot {
    requests: 0,
    accepts: 0,
    probability: 0.0,
};

fn snapshot<C>(cmd: &Command<C>) -> ThrottleSnapshot {
    cmd.metrics().throttle().unwrap()
}

/// `accepts` successes then `requests - accepts` overload errors, with K so high that none is
/// throttled; then K is set to `multiplier`.
fn counted(
    test: &TestRegistry,
    key: &str,
    requests: u32,
    accepts: u32,
    multiplier: f64,
) -> Command<Classifier<DependencyError>> {
    let cmd = throttled(test, key, 1_000.0);
    for i in 0..requests {
        assert!(!events_of(&cmd, (i >= accepts).then_some("503")).contains(EventType::Throttled));
    }
    set(test, key, "execution.throttle.multiplier", multiplier);
    cmd
}

#[test]
fn the_probability_follows_the_windows_requests_and_accepts() {
    let test = TestRegistry::new();
    let cmd = counted(&test, "Probability", 10, 3, 2.0);
    assert_eq!(
        snapshot(&cmd),
        ThrottleSnapshot {
            requests: 10,
            accepts: 3,
            probability: (10.0 - 2.0 * 3.0) / 11.0,
        }
    );
    // A failure that is not an overload, and a timeout, are accepts.
    let cmd = builder("Accepts")
        .property("execution.throttle.enabled", true)
        .property("execution.isolation.thread.timeoutInMilliseconds", 50)
        .classify_retry(overload_on_503)
        .build_in(test.registry())
        .unwrap();
    call(&cmd, Some("500"));
    let clock = test.clone();
    let outcome = cmd
        .run(move || {
            clock.advance(Duration::from_millis(60));
            Ok::<_, DependencyError>(1)
        })
        .execute_outcome();
    assert!(outcome.execution_result().is_response_timed_out());
    call(&cmd, Some("503"));
    assert_eq!(
        snapshot(&cmd),
        ThrottleSnapshot {
            requests: 3,
            accepts: 2,
            probability: 0.0,
        }
    );
}

#[test]
fn off_it_counts_nothing_and_reports_none() {
    let test = TestRegistry::new();
    let cmd = builder("Off")
        .classify_retry(overload_on_503)
        .build_in(test.registry())
        .unwrap();
    for _ in 0..5 {
        call(&cmd, Some("503"));
    }
    assert_eq!(cmd.metrics().throttle(), None);
    // Turned on at run time: the window starts with what runs from now on.
    set(&test, "Off", "execution.throttle.enabled", true);
    assert_eq!(snapshot(&cmd), EMPTY);
    call(&cmd, Some("503"));
    assert_eq!(snapshot(&cmd).requests, 1);
    // Off again: no draw, every call runs.
    set(&test, "Off", "execution.throttle.enabled", false);
    for _ in 0..20 {
        assert_eq!(
            events_of(&cmd, Some("503")).to_string(),
            "FAILURE, FALLBACK_SUCCESS"
        );
    }
}

#[test]
fn a_throttled_attempt_goes_to_its_fallback_and_is_not_a_health_error() {
    let test = TestRegistry::new();
    // A success then 4 overload errors (below the breaker's volume of 20): a probability of
    // (5 - 1)/6 with K = 1.
    let cmd = counted(&test, "Fallback", 5, 1, 1.0);
    assert_eq!(snapshot(&cmd).probability, 4.0 / 6.0);
    // Healthy again: what runs succeeds, what is throttled goes to the fallback.
    let mut ran = 0u64;
    let mut throttled = 0u64;
    for _ in 0..50 {
        let outcome = call(&cmd, None);
        match outcome
            .execution_result()
            .execution_events()
            .to_string()
            .as_str()
        {
            "SUCCESS" => ran += 1,
            "FALLBACK_SUCCESS, THROTTLED" => {
                assert_eq!(*outcome.response().as_ref().unwrap(), 99);
                throttled += 1;
            }
            other => panic!("unexpected events {other}"),
        }
    }
    // Exact with the test registry's seed.
    assert_eq!((ran, throttled), (18, 32));
    let refused = loop {
        let outcome = cmd.run(|| Ok::<u32, DependencyError>(1)).execute_outcome();
        if let Err(err) = outcome.into_response() {
            break err;
        }
    };
    assert_eq!(refused.failure_type(), FailureType::Throttled);
    assert!(refused.is_rejection());
    let message = refused.to_string();
    assert!(
        message.contains("was throttled") && message.contains("with probability 0."),
        "{message}"
    );
    assert!(
        message.contains("execution.throttle.multiplier"),
        "{message}"
    );

    test.clock().advance(Duration::from_secs(1));
    let metrics = cmd.metrics();
    assert_eq!(metrics.rolling_count(EventType::Throttled), throttled + 1);
    // Only what ran is a request for health: the 4 errors and the successes.
    assert_eq!(metrics.rolling_count(EventType::Failure), 4);
    assert_eq!(
        metrics.health_counts(),
        HealthCounts::new(4 + metrics.rolling_count(EventType::Success), 4)
    );
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
}

/// How many of `calls` overloaded calls are throttled, on a fresh registry (seed 0), after
/// 10 requests of which 5 accepts and K = 1.5.
fn throttled_of(calls: u32) -> u32 {
    let test = TestRegistry::new();
    let cmd = counted(&test, "Seeded", 10, 5, 1.5);
    (0..calls)
        .filter(|_| events_of(&cmd, Some("503")).contains(EventType::Throttled))
        .count() as u32
}

#[test]
fn with_a_fixed_seed_the_throttled_attempts_repeat_exactly() {
    assert_eq!(throttled_of(200), 177);
    assert_eq!(throttled_of(200), 177);
}

#[test]
fn over_ten_thousand_draws_the_count_lies_within_its_binomial_bounds() {
    let test = TestRegistry::new();
    // 2000 accepts, then K = 1 and every call that runs is an overload: each call adds one
    // request whatever its draw, so call i (from 0) is throttled with the known probability
    // (2000 + i - 2000) / (2000 + i + 1), independently of the others.
    let cmd = counted(&test, "Binomial", 2_000, 2_000, 1.0);
    let n = 10_000u32;
    let throttled = (0..n)
        .filter(|_| events_of(&cmd, Some("503")).contains(EventType::Throttled))
        .count() as f64;
    let p = |i: u32| f64::from(i) / f64::from(2_001 + i);
    let mean: f64 = (0..n).map(p).sum();
    let variance: f64 = (0..n).map(|i| p(i) * (1.0 - p(i))).sum();
    let sd = variance.sqrt();
    // Mean ≈ 6 416, sd ≈ 44: within 4 sd (a chance of about 1 in 15 000 to miss with a fair
    // generator; with the fixed seed the count is the same at every run).
    assert!(
        (throttled - mean).abs() <= 4.0 * sd,
        "{throttled} throttled, expected {mean:.0} ± {:.0}",
        4.0 * sd
    );
    let counts = snapshot(&cmd);
    assert_eq!((counts.requests, counts.accepts), (12_000, 2_000));
}

#[test]
fn old_counts_roll_out_of_the_window() {
    let test = TestRegistry::new();
    let cmd = counted(&test, "Rolling", 10, 3, 2.0);
    // The default window: 120 000 ms in 20 buckets of 6 000 ms, the filling one included.
    test.clock().advance(Duration::from_millis(119_999));
    assert_eq!(snapshot(&cmd).requests, 10);
    test.clock().advance(Duration::from_millis(1));
    assert_eq!(snapshot(&cmd), EMPTY);
    // A shorter window at run time starts empty, and rolls in its own buckets.
    call(&cmd, Some("503"));
    set(
        &test,
        "Rolling",
        "execution.throttle.windowInMilliseconds",
        1_000,
    );
    set(&test, "Rolling", "execution.throttle.numBuckets", 10);
    assert_eq!(snapshot(&cmd).requests, 0);
    call(&cmd, Some("503"));
    test.clock().advance(Duration::from_millis(999));
    assert_eq!(snapshot(&cmd).requests, 1);
    test.clock().advance(Duration::from_millis(1));
    assert_eq!(snapshot(&cmd).requests, 0);
}

#[test]
fn a_change_of_the_multiplier_takes_effect_at_the_next_attempt() {
    let test = TestRegistry::new();
    let cmd = counted(&test, "Multiplier", 10, 4, 2.0);
    assert_eq!(snapshot(&cmd).probability, 2.0 / 11.0);
    set(&test, "Multiplier", "execution.throttle.multiplier", 1.0);
    assert_eq!(snapshot(&cmd).probability, 6.0 / 11.0);
    set(&test, "Multiplier", "execution.throttle.multiplier", 3.0);
    assert_eq!(snapshot(&cmd).probability, 0.0);
    for _ in 0..20 {
        assert_eq!(events_of(&cmd, None).to_string(), "SUCCESS");
    }
}

#[test]
fn execute_async_is_throttled_too() {
    let test = TestRegistry::new();
    let cmd = counted(&test, "Async", 10, 1, 2.0);
    let mut events = Vec::new();
    for _ in 0..5 {
        let outcome = futures::executor::block_on(
            cmd.run_async(async { Err::<u32, _>(DependencyError("503")) })
                .fallback(fallback)
                .execute_async_outcome(),
        );
        events.push(outcome.execution_result().execution_events().to_string());
    }
    // p = 8/11 at first: exact with the seed.
    assert_eq!(
        events,
        [
            "FAILURE, FALLBACK_SUCCESS",
            "FAILURE, FALLBACK_SUCCESS",
            "FALLBACK_SUCCESS, THROTTLED",
            "FALLBACK_SUCCESS, THROTTLED",
            "FAILURE, FALLBACK_SUCCESS",
        ]
    );
    assert_eq!(snapshot(&cmd).requests, 15);
}

#[test]
fn each_attempt_of_a_retried_execution_is_one_request() {
    let test = TestRegistry::new();
    let cmd = builder("Retried")
        .property("execution.throttle.enabled", true)
        .property("retry.maxAttempts", 3)
        .property("retry.onRejection", true)
        .property("execution.isolation.thread.timeoutInMilliseconds", 10_000)
        .classify_retry(|_: &DependencyError| RetryAnswer::retry().overloaded())
        .build_in(test.registry())
        .unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let mut attempts = 0;
    for _ in 0..30 {
        let runs = Arc::clone(&runs);
        let outcome = common::drive(
            &test,
            cmd.run_async_retryable(move || {
                let runs = Arc::clone(&runs);
                // Counted when it runs (a throttled attempt's run is made, never polled).
                async move {
                    runs.fetch_add(1, Ordering::Relaxed);
                    Err::<u32, _>(DependencyError("503"))
                }
            })
            .execute_async_outcome(),
        );
        attempts += outcome.into_response().unwrap_err().attempts();
    }
    let counts = snapshot(&cmd);
    test.clock().advance(Duration::from_secs(1));
    let metrics = cmd.metrics();
    let throttled = metrics.rolling_count(EventType::Throttled);
    // Every attempt, run or throttled, is one request; none is an accept.
    assert_eq!(
        u64::from(runs.load(Ordering::Relaxed)) + throttled,
        u64::from(attempts)
    );
    assert_eq!(counts.requests, u64::from(attempts));
    assert_eq!(counts.accepts, 0);
    assert!(throttled > 0);
}

#[test]
fn invalid_throttling_properties_are_refused_with_their_name() {
    let test = TestRegistry::new();
    let refused = |name: &str, value: hystrix::PropertyValue, reason: &str| {
        let err = builder("Invalid")
            .property(name, value)
            .build_in(test.registry())
            .unwrap_err()
            .to_string();
        assert!(err.contains(name) && err.contains(reason), "{err}");
    };
    refused("execution.throttle.multiplier", 0.5.into(), "at least 1.0");
    refused(
        "execution.throttle.multiplier",
        f64::INFINITY.into(),
        "finite",
    );
    refused(
        "execution.throttle.windowInMilliseconds",
        0u64.into(),
        "at least 1 ms",
    );
    refused("execution.throttle.numBuckets", 0u32.into(), "at least 1");
    refused(
        "execution.throttle.numBuckets",
        7u32.into(),
        "must divide execution.throttle.windowInMilliseconds (120000 ms) evenly",
    );
    // And at run time: the change is refused, the value in force stays.
    let cmd = throttled(&test, "Valid", 2.0);
    let err = test
        .registry()
        .properties()
        .set("hystrix.command.Valid.execution.throttle.multiplier", 0.9)
        .unwrap_err()
        .to_string();
    assert!(err.contains("execution.throttle.multiplier"), "{err}");
    call(&cmd, Some("503"));
    assert_eq!(snapshot(&cmd).probability, 0.5);
}

#[test]
fn a_stream_command_is_throttled_too() {
    use futures::StreamExt;

    let test = TestRegistry::new();
    // p = (10 - 1) / 11 at first.
    let cmd = counted(&test, "Stream", 10, 1, 1.0);
    let mut throttled = 0;
    for _ in 0..10 {
        let mut values = cmd
            .run_stream(futures::stream::iter([Ok::<u32, DependencyError>(1)]))
            .fallback_stream(|_| futures::stream::iter([Ok::<u32, DependencyError>(99)]))
            .to_observable();
        let got: Vec<u32> =
            futures::executor::block_on((&mut values).map(Result::unwrap).collect());
        let events = values.execution_result().unwrap().execution_events();
        if events.contains(EventType::Throttled) {
            assert_eq!(got, [99]);
            assert_eq!(
                events.to_string(),
                "FALLBACK_EMIT, FALLBACK_SUCCESS, THROTTLED"
            );
            throttled += 1;
        } else {
            assert_eq!(got, [1]);
        }
    }
    // Exact with the seed; each execution is one request.
    assert_eq!(throttled, 9);
    assert_eq!(snapshot(&cmd).requests, 20);
    assert_eq!(snapshot(&cmd).accepts, 1 + 10 - throttled);
}

#[cfg(feature = "tower")]
#[test]
fn the_tower_layer_is_throttled_too() {
    use tower::{Layer, Service, ServiceExt};

    let test = TestRegistry::new();
    // The key's counts, through a definition whose errors say overload: p = (10 - 1) / 11.
    counted(&test, "Tower", 10, 1, 1.0);
    let plain = builder("Tower").build_in(test.registry()).unwrap();
    let inner = tower::service_fn(|_: u32| async { Ok::<_, hystrix::BoxError>(1u32) });
    let mut svc = hystrix::tower::HystrixLayer::new(plain.clone()).layer(inner);
    let mut throttled = 0;
    for request in 0..10 {
        match futures::executor::block_on(async { svc.ready().await?.call(request).await }) {
            Ok(value) => assert_eq!(value, 1),
            Err(err) => {
                assert_eq!(err.failure_type(), FailureType::Throttled);
                throttled += 1;
            }
        }
    }
    assert_eq!(throttled, 8);
    assert_eq!(snapshot(&plain).requests, 20);
}

#[test]
fn the_properties_come_from_environment_variables_and_files_too() {
    let test = TestRegistry::new();
    let properties = test.registry().properties();
    properties
        .load_env_from([
            (
                "HYSTRIX__command__Sourced__execution__throttle__enabled",
                "true",
            ),
            (
                "HYSTRIX__command__Sourced__execution__throttle__multiplier",
                "1.5",
            ),
        ])
        .unwrap();
    #[cfg(feature = "config-files")]
    properties
        .load_text(
            "app.properties",
            hystrix::config::FileFormat::Properties,
            "hystrix.command.Sourced.execution.throttle.windowInMilliseconds=60000\n\
             hystrix.command.Sourced.execution.throttle.numBuckets=12\n",
        )
        .unwrap();
    let props = properties.command(&hystrix::CommandKey::new("Sourced").unwrap());
    assert!(props.execution_throttle_enabled);
    assert_eq!(props.execution_throttle_multiplier, 1.5);
    #[cfg(feature = "config-files")]
    assert_eq!(
        (
            props.execution_throttle_window_in_milliseconds,
            props.execution_throttle_num_buckets
        ),
        (60_000, 12)
    );
    let cmd = throttled(&test, "Sourced", 1.5);
    call(&cmd, Some("503"));
    assert_eq!(snapshot(&cmd).probability, 0.5);
}

#[test]
fn a_hedge_is_drawn_for_and_a_throttled_one_is_skipped() {
    let test = TestRegistry::new();
    let cmd = builder("Hedged")
        .property("execution.throttle.enabled", true)
        .property("execution.throttle.multiplier", 1_000.0)
        .property("hedging.maxAttempts", 2)
        .property("hedging.delayInMilliseconds", 100)
        .property("execution.isolation.thread.timeoutInMilliseconds", 10_000)
        .classify_retry(overload_on_503)
        .build_in(test.registry())
        .unwrap();
    // 5 requests, 4 accepts, then K = 1: p = 1/6 at first.
    for error in [None, None, None, None, Some("503")] {
        call(&cmd, error);
    }
    set(&test, "Hedged", "execution.throttle.multiplier", 1.0);
    let clock = Arc::clone(test.registry().clock());
    let mut events = Vec::new();
    for _ in 0..6 {
        let clock = Arc::clone(&clock);
        let made = Arc::new(AtomicU32::new(0));
        // The first attempt takes 500 ms, a hedge 50 ms; both answer.
        let outcome = common::drive(
            &test,
            cmd.run_async_retryable(move || {
                let ms = if made.fetch_add(1, Ordering::Relaxed) == 0 {
                    500
                } else {
                    50
                };
                let clock = Arc::clone(&clock);
                async move {
                    hystrix::clock::sleep(&clock, Duration::from_millis(ms)).await;
                    Ok::<u32, DependencyError>(1)
                }
            })
            .execute_async_outcome(),
        );
        events.push(outcome.execution_result().execution_events().to_string());
    }
    // Exact with the seed: a throttled hedge leaves the first attempt to finish alone; a
    // throttled first attempt ends the execution (no fallback here).
    assert_eq!(
        events,
        [
            "SUCCESS",
            "SUCCESS",
            "SUCCESS",
            "SUCCESS, HEDGE, HEDGE_CANCELLED",
            "SUCCESS, HEDGE, HEDGE_CANCELLED",
            "FALLBACK_MISSING, THROTTLED",
        ]
    );
    // Requests: a first attempt and its throttled hedge, 2 each (one accept); a won hedge, 1
    // (an accept; the cancelled loser never ended, so it is not counted); a throttled first
    // attempt, 1.
    let counts = snapshot(&cmd);
    assert_eq!(
        (counts.requests, counts.accepts),
        (5 + 3 * 2 + 2 + 1, 4 + 3 + 2)
    );
}
