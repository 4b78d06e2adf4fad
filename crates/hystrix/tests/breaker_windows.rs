//! Richer breakers (POLICIES §4): slow calls (resilience4j), slow calls counted while still
//! running, and the COUNT and CONSECUTIVE windows (resilience4j's COUNT_BASED, gobreaker's
//! consecutive failures), with exact trip times on the manual clock, and the combinations the
//! builder refuses.
#![allow(clippy::unwrap_used)]

mod common;

use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use common::{DependencyError, builder, poll_once, slow};
use hystrix::circuit::store::InMemoryStateStore;
use hystrix::clock::{Clock, ManualClock};
use hystrix::testing::TestRegistry;
use hystrix::{
    Command, ConfigError, EventType, FailureType, HealthCounts, PropertyValue, Registry, Status,
};

type Pending<'c> = Pin<Box<dyn Future<Output = hystrix::Outcome<u32, DependencyError>> + 'c>>;

fn ok() -> Result<u32, DependencyError> {
    Ok(1)
}

fn down() -> Result<u32, DependencyError> {
    Err(DependencyError("down"))
}

fn advance_to(test: &TestRegistry, ms: u64) {
    let now = test.clock().now_ms();
    assert!(ms >= now, "time goes forward only");
    test.advance(Duration::from_millis(ms - now));
}

/// A SEMAPHORE command with these properties (and room for 200 at once).
fn with(test: &TestRegistry, key: &str, props: &[(&str, PropertyValue)]) -> Command {
    let mut b = builder(key).property("execution.isolation.semaphore.maxConcurrentRequests", 200);
    for (name, value) in props {
        b = b.property(name, value.clone());
    }
    b.build_in(test.registry()).unwrap()
}

/// Starts an async execution that never ends by itself (until dropped).
fn hang(cmd: &Command) -> Pending<'_> {
    let mut future: Pending<'_> = Box::pin(
        cmd.run_async(std::future::pending::<Result<u32, DependencyError>>())
            .execute_async_outcome(),
    );
    assert!(
        poll_once(future.as_mut()).is_pending(),
        "admitted and running"
    );
    future
}

fn cause(cmd: &Command) -> String {
    cmd.circuit_breaker().trip_cause().unwrap().to_string()
}

#[test]
fn slow_calls_trip_a_time_window_at_the_next_health_check() {
    let test = TestRegistry::new();
    let cmd = with(
        &test,
        "Slow",
        &[
            ("circuitBreaker.requestVolumeThreshold", 4.into()),
            (
                "circuitBreaker.slowCall.durationThresholdInMilliseconds",
                100.into(),
            ),
            ("circuitBreaker.slowCall.rateThresholdPercentage", 50.into()),
        ],
    );
    // 0-100 ms: exactly the threshold is not slow; 100-201 ms: one ms over is.
    let outcome = cmd.run(slow(&test, 100, 1)).execute_outcome();
    assert!(
        !outcome
            .execution_result()
            .execution_events()
            .contains(EventType::SlowCall)
    );
    let outcome = cmd.run(slow(&test, 101, 1)).execute_outcome();
    let events = outcome.execution_result().execution_events();
    assert_eq!(common::names(events), ["SUCCESS", "SLOW_CALL"]);
    // A failure that was slow is both.
    let outcome = cmd
        .run({
            let test = test.clone();
            move || {
                test.advance(Duration::from_millis(150));
                down()
            }
        })
        .execute_outcome();
    let events = outcome.execution_result().execution_events();
    assert!(events.contains(EventType::Failure) && events.contains(EventType::SlowCall));
    cmd.run(ok).execute().unwrap();
    // 4 requests, 2 slow (50 %), 1 error (25 %): the bucket ends at 500 ms.
    advance_to(&test, 499);
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    advance_to(&test, 500);
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    assert_eq!(
        cmd.circuit_breaker().health_counts(),
        HealthCounts::with_slow_calls(4, 1, 2)
    );
    assert_eq!(
        cause(&cmd),
        "slow calls: 50% of 4 requests took longer than 100 ms in the last 10000 ms \
         (circuitBreaker.slowCall.rateThresholdPercentage 50%)"
    );
    let metrics = cmd.metrics();
    assert_eq!(metrics.cumulative_count(EventType::SlowCall), 2);
    let err = cmd.run(ok).execute().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::ShortCircuit);
}

#[test]
fn slow_calls_are_off_by_default_and_below_the_rate_do_not_trip() {
    let test = TestRegistry::new();
    let off = with(
        &test,
        "Off",
        &[
            ("circuitBreaker.requestVolumeThreshold", 2.into()),
            ("execution.timeout.enabled", false.into()),
        ],
    );
    for _ in 0..3 {
        off.run(slow(&test, 5_000, 1)).execute().unwrap();
    }
    assert_eq!(off.metrics().cumulative_count(EventType::SlowCall), 0);
    let below = with(
        &test,
        "Below",
        &[
            ("circuitBreaker.requestVolumeThreshold", 4.into()),
            ("execution.timeout.enabled", false.into()),
            (
                "circuitBreaker.slowCall.durationThresholdInMilliseconds",
                10.into(),
            ),
            ("circuitBreaker.slowCall.rateThresholdPercentage", 75.into()),
        ],
    );
    for ms in [11, 11, 0, 0] {
        below.run(slow(&test, ms, 1)).execute().unwrap();
    }
    test.advance(Duration::from_millis(500));
    assert_eq!(below.circuit_breaker().status(), Status::Closed);
    assert_eq!(
        below.circuit_breaker().health_counts().slow_call_percentage,
        50
    );
}

/// The in-flight tracker: hung attempts count as slow at the first health check after every
/// one of them ran past the threshold, before any of them ends.
#[test]
fn hung_calls_trip_the_breaker_before_they_end() {
    let test = TestRegistry::new();
    let props = |in_flight: bool| {
        vec![
            ("circuitBreaker.requestVolumeThreshold", 4.into()),
            ("execution.timeout.enabled", false.into()),
            (
                "circuitBreaker.slowCall.durationThresholdInMilliseconds",
                100.into(),
            ),
            ("circuitBreaker.slowCall.rateThresholdPercentage", 50.into()),
            ("circuitBreaker.slowCall.countInFlight", in_flight.into()),
        ]
    };
    let counted = with(&test, "Hangs", &props(true));
    let ignored = with(&test, "HangsUncounted", &props(false));
    let mut hung = Vec::new();
    for cmd in [&counted, &ignored] {
        for _ in 0..4 {
            hung.push(hang(cmd));
        }
    }
    // Started in the health interval 0-499 ms: the last could have started at 499 ms, so all
    // have run longer than 100 ms from 600 ms on.
    advance_to(&test, 599);
    assert_eq!(counted.circuit_breaker().status(), Status::Closed);
    // The check at 599 ms was this interval's: the next is at 1000 ms.
    advance_to(&test, 999);
    assert_eq!(counted.circuit_breaker().status(), Status::Closed);
    advance_to(&test, 1000);
    assert_eq!(counted.circuit_breaker().status(), Status::Open);
    assert_eq!(
        cause(&counted),
        "slow calls: 100% of 4 requests took longer than 100 ms in the last 10000 ms, 4 of \
         them still running (circuitBreaker.slowCall.rateThresholdPercentage 50%)"
    );
    // Without counting in flight, nothing ended: nothing counted.
    advance_to(&test, 60_000);
    assert_eq!(ignored.circuit_breaker().status(), Status::Closed);
    assert_eq!(ignored.circuit_breaker().health_counts().total_requests, 0);
    // Dropped, they are CANCELLED: no SLOW_CALL event (a cancelled call says nothing of the
    // dependency), and the slots they held are free.
    drop(hung);
    assert_eq!(counted.metrics().cumulative_count(EventType::Cancelled), 4);
    assert_eq!(counted.metrics().cumulative_count(EventType::SlowCall), 0);
}

#[test]
fn a_hung_call_is_a_slow_call_running_then_the_request_it_was() {
    let test = TestRegistry::new();
    let cmd = with(
        &test,
        "EndsLate",
        &[
            ("circuitBreaker.requestVolumeThreshold", 100.into()),
            (
                "execution.isolation.thread.timeoutInMilliseconds",
                3_000.into(),
            ),
            (
                "circuitBreaker.slowCall.durationThresholdInMilliseconds",
                200.into(),
            ),
        ],
    );
    let mut running = hang(&cmd);
    // Started in 0-499 ms, it has surely run past 200 ms from 700 ms on: counted at the
    // first check after that (here at 999 ms, the 500-999 ms interval's), in that bucket.
    advance_to(&test, 999);
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    assert_eq!(
        cmd.circuit_breaker().health_counts(),
        HealthCounts::new(0, 0)
    );
    // In the window once that bucket completed: a slow call running, not yet a request (so
    // it never lowers the error percentage).
    advance_to(&test, 1_000);
    let running_slow = HealthCounts::new(0, 0).with_slow_in_flight(1);
    assert_eq!(cmd.circuit_breaker().health_counts(), running_slow);
    assert_eq!(
        (
            running_slow.slow_call_count,
            running_slow.slow_call_percentage
        ),
        (1, 100)
    );
    // It times out at 3000 ms: a TIMEOUT and a SLOW_CALL event; from the end of its bucket on
    // it is the request it was, a failed and slow one, counted once.
    advance_to(&test, 3_000);
    let Poll::Ready(outcome) = poll_once(running.as_mut()) else {
        panic!("timed out");
    };
    let events = outcome.execution_result().execution_events();
    assert!(events.contains(EventType::Timeout) && events.contains(EventType::SlowCall));
    advance_to(&test, 3_500);
    assert_eq!(
        cmd.circuit_breaker().health_counts(),
        HealthCounts::with_slow_calls(1, 1, 1)
    );
    assert_eq!(cmd.metrics().cumulative_count(EventType::SlowCall), 1);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Timeout), 1);
}

#[test]
fn a_count_window_trips_at_the_call_that_tips_it() {
    let test = TestRegistry::new();
    let cmd = with(
        &test,
        "Count",
        &[
            ("circuitBreaker.window.type", "COUNT".into()),
            ("circuitBreaker.window.size", 5.into()),
        ],
    );
    // The volume is min(requestVolumeThreshold 20, window.size 5).
    for call in [down, down, ok, ok] {
        let _ = cmd.run(call).execute();
    }
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    // F F S S S: 40 %; then F replaces F (40 %), F replaces F... the last five are S S S F F.
    for call in [ok, down, down] {
        let _ = cmd.run(call).execute();
        assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    }
    assert_eq!(
        cmd.circuit_breaker().health_counts(),
        HealthCounts::new(5, 2)
    );
    // S S F F F: 60 % at this call's end, no time passing.
    let _ = cmd.run(down).execute();
    assert_eq!(test.clock().now_ms(), 0);
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    assert_eq!(
        cause(&cmd),
        "60% of the last 5 calls failed (circuitBreaker.errorThresholdPercentage 50%); last \
         failure: FAILURE"
    );
    // A trial's success closes it and empties the window.
    test.advance(Duration::from_millis(5_001));
    cmd.run(ok).execute().unwrap();
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    assert_eq!(
        cmd.circuit_breaker().health_counts(),
        HealthCounts::new(0, 0)
    );
}

#[test]
fn a_consecutive_window_trips_at_the_nth_failure_in_a_row() {
    let test = TestRegistry::new();
    let cmd = with(
        &test,
        "Consecutive",
        &[
            ("circuitBreaker.window.type", "CONSECUTIVE".into()),
            ("circuitBreaker.window.consecutiveFailures", 3.into()),
        ],
    );
    for call in [down, down, ok, down, down] {
        let _ = cmd.run(call).execute();
    }
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    assert_eq!(
        cmd.circuit_breaker().health_counts(),
        HealthCounts::new(2, 2)
    );
    let _ = cmd.run(down).execute();
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    assert_eq!(
        cause(&cmd),
        "3 failures or slow calls in a row (circuitBreaker.window.consecutiveFailures 3); \
         last failure: FAILURE"
    );
    // Dynamic: a lower threshold applies at the next call.
    test.registry()
        .properties()
        .set(
            "hystrix.command.Consecutive.circuitBreaker.window.consecutiveFailures",
            1,
        )
        .unwrap();
    test.advance(Duration::from_millis(5_001));
    cmd.run(ok).execute().unwrap();
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    let _ = cmd.run(down).execute();
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
}

#[test]
fn slow_calls_count_in_a_consecutive_run_and_in_a_count_window() {
    let test = TestRegistry::new();
    let slow_ms = (
        "circuitBreaker.slowCall.durationThresholdInMilliseconds",
        PropertyValue::from(50),
    );
    let consecutive = with(
        &test,
        "SlowRun",
        &[
            ("circuitBreaker.window.type", "CONSECUTIVE".into()),
            ("circuitBreaker.window.consecutiveFailures", 2.into()),
            slow_ms.clone(),
        ],
    );
    let _ = consecutive.run(down).execute();
    consecutive.run(slow(&test, 51, 1)).execute().unwrap();
    assert_eq!(consecutive.circuit_breaker().status(), Status::Open);
    let count = with(
        &test,
        "SlowCount",
        &[
            ("circuitBreaker.window.type", "COUNT".into()),
            ("circuitBreaker.window.size", 4.into()),
            ("circuitBreaker.slowCall.rateThresholdPercentage", 75.into()),
            slow_ms,
        ],
    );
    for ms in [51, 0, 51] {
        count.run(slow(&test, ms, 1)).execute().unwrap();
    }
    assert_eq!(count.circuit_breaker().status(), Status::Closed);
    count.run(slow(&test, 51, 1)).execute().unwrap();
    assert_eq!(count.circuit_breaker().status(), Status::Open);
    assert_eq!(
        count.circuit_breaker().health_counts(),
        HealthCounts::with_slow_calls(4, 0, 3)
    );
    assert!(
        cause(&count).starts_with("slow calls: 75% of the last 4 calls took longer than 50 ms")
    );
}

#[test]
fn keyed_breakers_keep_their_own_count_and_consecutive_windows() {
    let test = TestRegistry::new();
    let cmd = builder("KeyedRun")
        .property("circuitBreaker.window.type", "CONSECUTIVE")
        .property("circuitBreaker.window.consecutiveFailures", 2)
        .breaker_per_key(NonZeroUsize::new(10).unwrap(), None)
        .build_in(test.registry())
        .unwrap();
    for key in ["a", "b", "a"] {
        let _ = cmd.run(down).breaker_key(key).execute();
    }
    assert_eq!(
        cmd.keyed_circuit_breaker("a").unwrap().status(),
        Status::Open
    );
    assert_eq!(
        cmd.keyed_circuit_breaker("b").unwrap().status(),
        Status::Closed
    );
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    let slow_keyed = builder("KeyedSlow")
        .property("circuitBreaker.requestVolumeThreshold", 2)
        .property(
            "circuitBreaker.slowCall.durationThresholdInMilliseconds",
            10,
        )
        .breaker_per_key(NonZeroUsize::new(10).unwrap(), None)
        .build_in(test.registry())
        .unwrap();
    for _ in 0..2 {
        slow_keyed
            .run(slow(&test, 11, 1))
            .breaker_key("host")
            .execute()
            .unwrap();
    }
    advance_to(&test, test.clock().now_ms().div_ceil(500) * 500);
    let host = slow_keyed.keyed_circuit_breaker("host").unwrap();
    assert_eq!(host.status(), Status::Open);
    assert_eq!(host.health_counts(), HealthCounts::with_slow_calls(2, 0, 2));
}

fn refusal(result: Result<Command, ConfigError>) -> (String, String) {
    match result {
        Err(ConfigError::InvalidValue { name, reason, .. }) => (name, reason),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn the_builder_refuses_what_a_window_cannot_keep() {
    let test = TestRegistry::new();
    // A keyed breaker keeps one byte per call of a COUNT window: at most 200.
    let keyed = |key: &str, size: u32| {
        builder(key)
            .property("circuitBreaker.window.type", "COUNT")
            .property("circuitBreaker.window.size", size)
            .breaker_per_key(NonZeroUsize::new(10).unwrap(), None)
            .build_in(test.registry())
    };
    assert!(keyed("Keyed200", 200).is_ok());
    let (name, reason) = refusal(keyed("Keyed201", 201));
    assert_eq!(name, "hystrix.command.Keyed201.circuitBreaker.window.size");
    assert!(
        reason.starts_with("must be at most 200 with keyed breakers"),
        "{reason}"
    );
    // A shared state store carries a TIME window's counts only.
    let clock = ManualClock::new();
    let registry = Registry::builder()
        .clock(clock.clone())
        .state_store(InMemoryStateStore::new(Arc::new(clock)))
        .state_store_sync_interval(None)
        .build();
    for kind in ["COUNT", "CONSECUTIVE"] {
        let (name, reason) = refusal(
            builder("Shared")
                .shared_state(true)
                .property("circuitBreaker.window.type", kind)
                .build_in(&registry),
        );
        assert_eq!(name, "hystrix.command.Shared.circuitBreaker.window.type");
        assert!(
            reason.starts_with("a shared state store carries a TIME window"),
            "{reason}"
        );
    }
    assert!(
        builder("Shared")
            .shared_state(true)
            .build_in(&registry)
            .is_ok()
    );
    // Values out of range name the property.
    for (name, value, reason) in [
        (
            "circuitBreaker.window.type",
            PropertyValue::from("SLIDING"),
            "expected TIME, COUNT or CONSECUTIVE",
        ),
        ("circuitBreaker.window.size", 0.into(), "must be at least 1"),
        (
            "circuitBreaker.window.size",
            65_536.into(),
            "must be at most 65535",
        ),
        (
            "circuitBreaker.window.consecutiveFailures",
            0.into(),
            "must be at least 1",
        ),
        (
            "circuitBreaker.slowCall.rateThresholdPercentage",
            0.into(),
            "must be a percentage from 1 to 100",
        ),
    ] {
        let err = builder("Bad")
            .property(name, value)
            .build_in(test.registry())
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains(name) && text.contains(reason), "{text}");
    }
}

/// Found by the breaker model (tests/breaker_model.rs): attempts admitted before a close and
/// still running are counted as slow requests in the new generation's window at the first
/// health check after they run past the threshold, and trip the breaker just closed. Only the
/// outcomes of the current generation count, and a close empties the window.
#[test]
fn hung_calls_admitted_before_a_close_do_not_count_after_it() {
    let test = TestRegistry::new();
    let cmd = with(
        &test,
        "HungAcrossClose",
        &[
            ("circuitBreaker.requestVolumeThreshold", 4.into()),
            ("execution.timeout.enabled", false.into()),
            (
                "circuitBreaker.slowCall.durationThresholdInMilliseconds",
                100.into(),
            ),
            ("circuitBreaker.slowCall.rateThresholdPercentage", 50.into()),
        ],
    );
    let hung: Vec<_> = (0..4).map(|_| hang(&cmd)).collect();
    // A close (by hand here; a trial's success closes the same way) starts a new generation
    // with an empty window.
    cmd.circuit_breaker().force_close();
    // Started in 0-499 ms, they have all run past 100 ms from 600 ms on.
    advance_to(&test, 600);
    assert_eq!(
        cmd.circuit_breaker().health_counts(),
        HealthCounts::new(0, 0)
    );
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    advance_to(&test, 1_000);
    assert_eq!(
        cmd.circuit_breaker().health_counts(),
        HealthCounts::new(0, 0)
    );
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    drop(hung);
}

/// Found by the breaker model: a COUNT window is checked at a success's end too, so the
/// success that completes the volume trips it at once (as resilience4j's count window).
#[test]
fn a_success_that_completes_the_volume_trips_a_count_window_at_once() {
    let test = TestRegistry::new();
    let cmd = with(
        &test,
        "CountVolume",
        &[
            ("circuitBreaker.window.type", "COUNT".into()),
            ("circuitBreaker.window.size", 5.into()),
            ("circuitBreaker.requestVolumeThreshold", 4.into()),
        ],
    );
    for call in [down, down, down] {
        let _ = cmd.run(call).execute();
    }
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    cmd.run(ok).execute().unwrap();
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    assert_eq!(
        cause(&cmd),
        "75% of the last 4 calls failed (circuitBreaker.errorThresholdPercentage 50%); last \
         failure: FAILURE"
    );
}

/// Found by a new user's trial: counting hung calls as slow while running must never hide
/// their timeouts from the error rate. Every 50 ms one call hangs until its 1000 ms timeout
/// and one succeeds: the breaker opens on the errors at the same time whether slow calls are
/// off, on, or on and counted in flight (a slow call running is a request of the slow-call
/// rate only; once it times out it is a failed request).
#[test]
fn counting_slow_calls_in_flight_never_hides_timeouts_from_the_error_rate() {
    let opened_at = |slow_ms: u64, in_flight: bool| {
        let test = TestRegistry::new();
        let cmd = with(
            &test,
            "HidesNothing",
            &[
                (
                    "execution.isolation.semaphore.maxConcurrentRequests",
                    1_000.into(),
                ),
                ("circuitBreaker.errorThresholdPercentage", 40.into()),
                (
                    "circuitBreaker.slowCall.durationThresholdInMilliseconds",
                    slow_ms.into(),
                ),
                ("circuitBreaker.slowCall.countInFlight", in_flight.into()),
            ],
        );
        let mut hung = Vec::new();
        for step in 0..100u64 {
            advance_to(&test, step * 50);
            hung.retain_mut(|call: &mut Pending<'_>| poll_once(call.as_mut()).is_pending());
            if cmd.circuit_breaker().status() == Status::Open {
                return Some((test.clock().now_ms(), cause(&cmd)));
            }
            hung.push(hang(&cmd));
            cmd.run(ok).execute().unwrap();
        }
        None
    };
    let off = opened_at(0, false).unwrap();
    assert_eq!(off.0, 3_000);
    assert!(off.1.starts_with("40% of 100 requests failed"), "{}", off.1);
    assert_eq!(opened_at(100, false).unwrap(), off);
    assert_eq!(opened_at(100, true).unwrap(), off);
}

/// Found by a new user's trial: a stream command is judged on the time to its first value
/// (as its timeout), so a healthy long-lived feed is not a slow call.
#[test]
fn a_stream_is_slow_only_if_its_first_value_is() {
    use futures::StreamExt;
    let test = TestRegistry::new();
    let cmd = with(
        &test,
        "Feed",
        &[(
            "circuitBreaker.slowCall.durationThresholdInMilliseconds",
            100.into(),
        )],
    );
    // Values every `gap_ms`, three of them.
    let feed = |gap_ms: u64| {
        let test = test.clone();
        futures::stream::unfold(0u32, move |n| {
            let test = test.clone();
            async move {
                if n == 3 {
                    return None;
                }
                test.advance(Duration::from_millis(gap_ms));
                Some((Ok::<u32, DependencyError>(n), n + 1))
            }
        })
        .boxed()
    };
    for (gap_ms, slow) in [(80, 0), (101, 1)] {
        let values: Vec<_> =
            futures::executor::block_on(cmd.run_stream(feed(gap_ms)).to_observable().collect());
        assert_eq!(values.len(), 3);
        assert_eq!(
            cmd.metrics().cumulative_count(EventType::SlowCall),
            slow,
            "values every {gap_ms} ms"
        );
    }
}

/// Found by a new user's trial: calls that start after a close, in the health interval of the
/// close, are counted slow while running like any (those admitted before it are not).
#[test]
fn hung_calls_started_just_after_a_close_reopen_the_breaker() {
    let test = TestRegistry::new();
    let cmd = with(
        &test,
        "HangsAfterClose",
        &[
            ("circuitBreaker.requestVolumeThreshold", 2.into()),
            ("execution.timeout.enabled", false.into()),
            (
                "circuitBreaker.slowCall.durationThresholdInMilliseconds",
                100.into(),
            ),
        ],
    );
    // Admitted before the close, in its interval: left out.
    let before = hang(&cmd);
    advance_to(&test, 5_100);
    cmd.circuit_breaker().force_close();
    advance_to(&test, 5_101);
    let after: Vec<_> = (0..2).map(|_| hang(&cmd)).collect();
    // Started in 5000-5499 ms: all past 100 ms from 5600 ms on; the check of the 5500-5999
    // interval at 5999 counts the two started after the close, not the one before.
    advance_to(&test, 5_999);
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    assert_eq!(
        cause(&cmd),
        "slow calls: 100% of 2 requests took longer than 100 ms in the last 10000 ms, 2 of them \
         still running (circuitBreaker.slowCall.rateThresholdPercentage 100%)"
    );
    drop((before, after));
}

/// An attempt tracked in flight that ends after slow calls were turned off, and is retried
/// once they are on again, leaves the tracker: no phantom slow call is counted later.
#[test]
fn an_attempt_ended_while_slow_calls_were_off_leaves_no_phantom() {
    let test = TestRegistry::new();
    let cmd = builder("Phantom")
        .property("retry.maxAttempts", 2)
        .property("execution.isolation.thread.timeoutInMilliseconds", 10_000)
        .property(
            "circuitBreaker.slowCall.durationThresholdInMilliseconds",
            100,
        )
        .build_in(test.registry())
        .unwrap();
    let set_slow = |ms: u64| {
        test.registry()
            .properties()
            .set(
                "hystrix.command.Phantom.circuitBreaker.slowCall.durationThresholdInMilliseconds",
                ms,
            )
            .unwrap();
    };
    let mut attempts = 0;
    let make = move || {
        attempts += 1;
        let first = attempts == 1;
        async move {
            if first {
                std::future::pending::<()>().await;
            }
            Ok::<u32, DependencyError>(7)
        }
    };
    let mut execution = Box::pin(cmd.run_async_retryable(make).execute_async_outcome());
    assert!(
        poll_once(execution.as_mut()).is_pending(),
        "the first attempt hangs"
    );
    set_slow(0);
    // The first attempt's timeout: 10 s / 2 attempts; then a 100 ms delay.
    advance_to(&test, 5_000);
    assert!(
        poll_once(execution.as_mut()).is_pending(),
        "waiting to retry"
    );
    set_slow(100);
    advance_to(&test, 5_100);
    let Poll::Ready(outcome) = poll_once(execution.as_mut()) else {
        panic!("the second attempt answers");
    };
    assert_eq!(*outcome.response().as_ref().unwrap(), 7);
    advance_to(&test, 6_000);
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    advance_to(&test, 7_000);
    assert_eq!(
        cmd.circuit_breaker().health_counts().slow_calls_in_flight,
        0
    );
}
