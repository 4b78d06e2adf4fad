//! Findings of the adaptive limit simulations (issue 23) in the library's integration, each a
//! minimal test that fails until the library is fixed (ignored so that the suite stays green:
//! `cargo test -p hystrix-rs --all-features --test adaptive_sim_findings -- --ignored`).
//!
//! A drop whose run took no time on the clock does not move a VEGAS or GRADIENT2 limit: an
//! overload error answered at once (a backend whose queue is full, a load balancer's 503) has a
//! run time of 0 µs on the manual clock, and both algorithms ignore a sample of zero run time
//! (as carrying no latency), its drop with it. AIMD, which does not look at the run time,
//! backs off. So a dependency that refuses fast never lowers a VEGAS limit. (On the system
//! clock such a run takes a few µs instead, and VEGAS takes it as a new fastest run time, its
//! `rtt_noload`, before it looks at the drop: the drop is lost there too, and the no-load
//! time is spoiled until the next probe.) The `limit-*` scenarios' VEGAS runs never met a
//! refusal (their limit stayed below workers + queue), so their numbers do not show it.
#![allow(clippy::unwrap_used)]

mod common;

use common::{DependencyError, builder};
use hystrix::retry::RetryAnswer;
use hystrix::testing::TestRegistry;

/// The limit of an adaptive `algorithm` starting at 20 after ten executions that each fail at
/// once (no time passes on the clock) with an error classified as overload.
fn limit_after_ten_instant_overloads(algorithm: &str) -> u32 {
    let test = TestRegistry::new();
    let cmd = builder(&format!("Instant{algorithm}"))
        .property("execution.isolation.adaptive.enabled", true)
        .property("execution.isolation.adaptive.algorithm", algorithm)
        .property("execution.isolation.adaptive.initialLimit", 20)
        .semaphore_max_concurrent_requests(100)
        .circuit_breaker_enabled(false)
        .classify_retry(|_: &DependencyError| RetryAnswer::never().overloaded())
        .build_in(test.registry())
        .unwrap();
    for _ in 0..10 {
        let outcome = common::drive(
            &test,
            cmd.run_async(async { Err::<u32, _>(DependencyError("503")) })
                .execute_async_outcome(),
        );
        assert!(outcome.execution_result().is_failed_execution());
    }
    cmd.metrics().adaptive_limit().unwrap().limit
}

#[test]
fn an_instant_overload_error_lowers_an_aimd_limit() {
    // Passes: 20 x 0.9^10, floored at each step.
    assert!(limit_after_ten_instant_overloads("AIMD") < 20);
}

#[test]
#[ignore = "finding of issue 23's simulations, for the library to fix: run with --ignored"]
fn an_instant_overload_error_lowers_a_vegas_limit() {
    // Fails: the ten drops were ignored (run time 0 µs), the limit is still 20.
    assert!(limit_after_ten_instant_overloads("VEGAS") < 20);
}
