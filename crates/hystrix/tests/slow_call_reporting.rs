//! SLOW_CALL where every event is reported (POLICIES §0.4): the rolling and cumulative
//! counters, the request log (in the log's event order, counted per attempt) and the event
//! notifier, with exact values on the manual clock.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{DependencyError, RecordingNotifier, builder, slow};
use hystrix::clock::ManualClock;
use hystrix::context::RequestContext;
use hystrix::testing::TestRegistry;
use hystrix::{Command, EventType, Registry};

/// A SEMAPHORE command whose calls over 100 ms are slow, in `registry`.
fn slow_calls(registry: &Registry, key: &str) -> Command {
    builder(key)
        .property(
            "circuitBreaker.slowCall.durationThresholdInMilliseconds",
            100,
        )
        .build_in(registry)
        .unwrap()
}

#[test]
fn a_slow_call_is_in_the_request_log_beside_its_outcome() {
    let test = TestRegistry::new();
    let cmd = slow_calls(test.registry(), "Slow");
    let ctx = RequestContext::new();
    {
        let _entered = ctx.enter();
        cmd.run(slow(&test, 150, 1)).execute().unwrap();
        cmd.run(slow(&test, 150, 1)).execute().unwrap();
        cmd.run(slow(&test, 100, 1)).execute().unwrap();
        // A slow failure answered by the fallback.
        let clock = test.clone();
        let value = cmd
            .run(move || {
                clock.advance(Duration::from_millis(120));
                Err::<u32, _>(DependencyError("down"))
            })
            .fallback(|_| Ok::<u32, DependencyError>(0))
            .execute()
            .unwrap();
        assert_eq!(value, 0);
    }
    assert_eq!(
        ctx.request_log().to_string(),
        "Slow[SUCCESS, SLOW_CALL][300ms]x2, Slow[SUCCESS][100ms], \
         Slow[FAILURE, FALLBACK_SUCCESS, SLOW_CALL][120ms]"
    );
    test.advance(Duration::from_millis(1_000));
    let metrics = cmd.metrics();
    assert_eq!(metrics.rolling_count(EventType::SlowCall), 3);
    assert_eq!(metrics.cumulative_count(EventType::SlowCall), 3);
}

#[test]
fn each_slow_attempt_of_a_retried_execution_is_counted_in_the_log() {
    let test = TestRegistry::new();
    let cmd = builder("SlowRetried")
        .property(
            "circuitBreaker.slowCall.durationThresholdInMilliseconds",
            100,
        )
        .property("retry.maxAttempts", 2)
        .property("retry.backoff.initialInMilliseconds", 0)
        .build_in(test.registry())
        .unwrap();
    let ctx = RequestContext::new();
    {
        let _entered = ctx.enter();
        let clock = test.clone();
        let mut attempt = 0;
        let value = cmd
            .run_retryable(move || {
                attempt += 1;
                let ok = attempt > 1;
                let clock = clock.clone();
                move || {
                    clock.advance(Duration::from_millis(150));
                    if ok {
                        Ok(7)
                    } else {
                        Err(DependencyError("down"))
                    }
                }
            })
            .execute()
            .unwrap();
        assert_eq!(value, 7);
    }
    // Both attempts were slow; the time is the last attempt's run, as for any retried
    // execution.
    assert_eq!(
        ctx.request_log().to_string(),
        "SlowRetried[SUCCESS, FAILURE, RETRY, SLOW_CALLx2][150ms]"
    );
    test.advance(Duration::from_millis(1_000));
    assert_eq!(cmd.metrics().cumulative_count(EventType::SlowCall), 2);
}

#[test]
fn the_notifier_hears_of_slow_calls() {
    let notifier = RecordingNotifier::default();
    let clock = ManualClock::new();
    let registry = Registry::builder()
        .clock(clock.clone())
        .event_notifier(notifier.clone())
        .build();
    let cmd = slow_calls(&registry, "Heard");
    let run = |ms: u64| {
        let clock = clock.clone();
        move || {
            clock.advance_ms(ms);
            Ok::<u32, DependencyError>(1)
        }
    };
    cmd.run(run(150)).execute().unwrap();
    cmd.run(run(50)).execute().unwrap();
    assert_eq!(
        notifier.take(),
        [
            "Heard:SUCCESS",
            "Heard:SLOW_CALL",
            "Heard:executed SEMAPHORE 150ms [SUCCESS, SLOW_CALL]",
            "Heard:SUCCESS",
            "Heard:executed SEMAPHORE 50ms [SUCCESS]",
        ]
    );
}
