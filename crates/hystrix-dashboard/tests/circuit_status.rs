//! The stream's `circuitBreakerStatus` (ours, beside Hystrix's `isCircuitBreakerOpen`, which is
//! true in both OPEN and HALF_OPEN): what a page needs to tell a breaker refusing every call from
//! one letting trials through.

#![allow(clippy::unwrap_used)]

mod common;

use std::num::NonZeroUsize;
use std::time::Duration;

use common::Boom;
use hystrix::testing::TestRegistry;
use hystrix::{Command, CommandBuilder, FailureType, IsolationStrategy};
use hystrix_dashboard::stream::command_json;
use serde_json::Value;

/// `isCircuitBreakerOpen` and `circuitBreakerStatus` of `key` now.
fn circuit(test: &TestRegistry, key: &str) -> (bool, String) {
    let message: Value =
        serde_json::from_str(&command_json(test.registry(), key).unwrap()).unwrap();
    (
        message["isCircuitBreakerOpen"].as_bool().unwrap(),
        message["circuitBreakerStatus"].as_str().unwrap().to_owned(),
    )
}

fn state(open: bool, status: &str) -> (bool, String) {
    (open, status.to_owned())
}

/// A SEMAPHORE command that trips at 5 requests, stays open 1000 ms, and closes after 2
/// successful trials of the 2 it lets through.
fn two_trials(key: &str) -> CommandBuilder {
    Command::builder(key)
        .group("G")
        .isolation(IsolationStrategy::Semaphore)
        .circuit_breaker_request_volume_threshold(5)
        .circuit_breaker_sleep_window(Duration::from_millis(1000))
        .property("circuitBreaker.halfOpen.permittedRequests", 2)
        .property("circuitBreaker.halfOpen.successThreshold", 2)
}

#[test]
fn status_follows_the_breaker_from_closed_to_open_half_open_and_closed() {
    let test = TestRegistry::new();
    let cmd = two_trials("Trials").build_in(test.registry()).unwrap();
    assert_eq!(circuit(&test, "Trials"), state(false, "CLOSED"));
    for _ in 0..6 {
        cmd.run(|| Err::<u32, _>(Boom)).execute().unwrap_err();
    }
    test.advance(Duration::from_millis(500));
    assert_eq!(circuit(&test, "Trials"), state(true, "OPEN"));
    // Past the open period the breaker stays OPEN until a call is let through as a trial.
    test.advance(Duration::from_millis(1001));
    assert_eq!(circuit(&test, "Trials"), state(true, "OPEN"));
    cmd.run(|| Ok::<_, Boom>(1)).execute().unwrap();
    assert_eq!(circuit(&test, "Trials"), state(true, "HALF_OPEN"));
    cmd.run(|| Ok::<_, Boom>(1)).execute().unwrap();
    assert_eq!(circuit(&test, "Trials"), state(false, "CLOSED"));
}

#[test]
fn the_sticky_force_properties_decide_the_status() {
    let test = TestRegistry::new();
    let cmd = two_trials("Forced").build_in(test.registry()).unwrap();
    test.force_open("Forced").unwrap();
    assert_eq!(circuit(&test, "Forced"), state(true, "OPEN"));
    test.clear_forced("Forced").unwrap();

    // HALF_OPEN, then held open: every call is refused, so the status is OPEN.
    for _ in 0..6 {
        cmd.run(|| Err::<u32, _>(Boom)).execute().unwrap_err();
    }
    test.advance(Duration::from_millis(500));
    assert_eq!(circuit(&test, "Forced"), state(true, "OPEN"));
    test.advance(Duration::from_millis(1001));
    cmd.run(|| Ok::<_, Boom>(1)).execute().unwrap();
    assert_eq!(circuit(&test, "Forced"), state(true, "HALF_OPEN"));
    test.force_open("Forced").unwrap();
    assert_eq!(circuit(&test, "Forced"), state(true, "OPEN"));
    // Held closed: every call is let through, so the status is CLOSED.
    test.clear_forced("Forced").unwrap();
    test.force_closed("Forced").unwrap();
    assert_eq!(circuit(&test, "Forced"), state(false, "CLOSED"));
}

#[test]
fn with_a_breaker_per_key_open_keys_outrank_half_open_ones() {
    let test = TestRegistry::new();
    let cmd = two_trials("PerHost")
        .breaker_per_key(NonZeroUsize::new(10).unwrap(), None)
        .build_in(test.registry())
        .unwrap();
    let call = |host: &'static str, ok: bool| {
        cmd.run(move || if ok { Ok(1) } else { Err(Boom) })
            .breaker_key(host)
            .execute()
    };
    // 6 failures; the next call, once their health bucket (500 ms) ended, is short-circuited.
    let trip = |host: &'static str| {
        for _ in 0..6 {
            call(host, false).unwrap_err();
        }
        test.advance(Duration::from_millis(500));
        assert_eq!(
            call(host, true).unwrap_err().failure_type(),
            FailureType::ShortCircuit
        );
    };
    trip("a.example");
    assert_eq!(circuit(&test, "PerHost"), state(true, "OPEN"));

    // a.example lets a trial through (HALF_OPEN); then b.example trips (OPEN).
    test.advance(Duration::from_millis(1001));
    call("a.example", true).unwrap();
    assert_eq!(circuit(&test, "PerHost"), state(true, "HALF_OPEN"));
    trip("b.example");
    assert_eq!(circuit(&test, "PerHost"), state(true, "OPEN"));
}
