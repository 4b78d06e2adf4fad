//! A command with a breaker per key: the stream and `/metrics` show its keys' open breakers and
//! its errors over all keys (its own breaker's health window stays empty by design).

#![allow(clippy::unwrap_used)]

mod common;

use std::num::NonZeroUsize;

use common::Boom;
use hystrix::testing::TestRegistry;
use hystrix::{Command, IsolationStrategy};
use hystrix_dashboard::Dashboard;
use hystrix_dashboard::stream::command_json;
use serde_json::Value;

#[test]
fn open_keys_and_errors_over_all_keys_are_shown() {
    let test = TestRegistry::new();
    let cmd = Command::builder("PerHost")
        .group("Hosts")
        .isolation(IsolationStrategy::Semaphore)
        .breaker_per_key(NonZeroUsize::new(100).unwrap(), None)
        .build_in(test.registry())
        .unwrap();
    for _ in 0..20 {
        cmd.run(|| Err::<u32, _>(Boom))
            .breaker_key("down.example")
            .execute()
            .unwrap_err();
        cmd.run(|| Ok::<_, Boom>(1))
            .breaker_key("up.example")
            .execute()
            .unwrap();
    }
    // The health snapshot (500 ms) trips down.example; a completed 1 s bucket shows the counts.
    test.advance(std::time::Duration::from_millis(1000));
    cmd.run(|| Ok::<_, Boom>(1))
        .breaker_key("down.example")
        .execute()
        .unwrap_err();
    assert_eq!(
        test.registry().open_breaker_keys("PerHost").unwrap(),
        ["down.example"]
    );
    assert_eq!(test.registry().open_breaker_keys("Nobody"), None);

    let message: Value =
        serde_json::from_str(&command_json(test.registry(), "PerHost").unwrap()).unwrap();
    assert_eq!(message["isCircuitBreakerOpen"], true);
    assert_eq!(message["openBreakerKeys"], 1);
    assert_eq!(message["requestCount"], 40);
    assert_eq!(message["errorCount"], 20);
    assert_eq!(message["errorPercentage"], 50);
    assert_eq!(message["rollingCountFailure"], 20);

    let text = Dashboard::builder(test.registry().clone())
        .build()
        .render_metrics();
    for line in [
        "hystrix_circuit_breaker_open_keys{command=\"PerHost\",group=\"Hosts\"} 1",
        "hystrix_command_error_ratio{command=\"PerHost\",group=\"Hosts\"} 0.5",
    ] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
    }
}

#[test]
fn a_command_without_keyed_breakers_has_no_open_keys_field() {
    let test = TestRegistry::new();
    common::semaphore_command(&test, "Plain", "G");
    let message: Value =
        serde_json::from_str(&command_json(test.registry(), "Plain").unwrap()).unwrap();
    assert!(message.get("openBreakerKeys").is_none());
    let text = Dashboard::builder(test.registry().clone())
        .build()
        .render_metrics();
    assert!(!text.contains("hystrix_circuit_breaker_open_keys{"));
}

#[test]
fn slow_calls_over_all_keys_are_shown() {
    let test = TestRegistry::new();
    let cmd = Command::builder("SlowPerHost")
        .group("Hosts")
        .isolation(IsolationStrategy::Semaphore)
        .breaker_per_key(NonZeroUsize::new(100).unwrap(), None)
        .property(
            "circuitBreaker.slowCall.durationThresholdInMilliseconds",
            100,
        )
        .build_in(test.registry())
        .unwrap();
    // 3 calls on one key, 1 on another; the slow ones: 150 ms on each key.
    for (host, ms) in [
        ("a.example", 150),
        ("a.example", 10),
        ("a.example", 10),
        ("b.example", 150),
    ] {
        let clock = test.clone();
        cmd.run(move || {
            clock.advance(std::time::Duration::from_millis(ms));
            Ok::<_, Boom>(1)
        })
        .breaker_key(host)
        .execute()
        .unwrap();
    }
    test.advance(std::time::Duration::from_millis(1000));
    let message: Value =
        serde_json::from_str(&command_json(test.registry(), "SlowPerHost").unwrap()).unwrap();
    assert_eq!(message["requestCount"], 4);
    assert_eq!(message["rollingCountSlowCall"], 2);
    assert_eq!(message["slowCallCount"], 2);
    assert_eq!(message["slowCallPercentage"], 50);
    let text = Dashboard::builder(test.registry().clone())
        .build()
        .render_metrics();
    let line = "hystrix_command_slow_call_ratio{command=\"SlowPerHost\",group=\"Hosts\"} 0.5";
    assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
}
