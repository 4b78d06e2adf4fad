//! `KeyedCommands` and `Registry::remove`: per-key definitions stay bounded, and so do the
//! registry's state and thread pools behind them.
#![allow(clippy::unwrap_used)]

mod common;

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use common::{DependencyError, threads_named};
use hystrix::command::KeyedCommands;
use hystrix::testing::TestRegistry;
use hystrix::{Command, IsolationStrategy};

fn ok() -> Result<u32, DependencyError> {
    Ok(1)
}

/// Waits until `count()` is `expected`; the bound turns a leak into a failure, not a hang.
fn wait_for(expected: usize, count: impl Fn() -> usize) {
    let give_up = Instant::now() + Duration::from_secs(10);
    while count() != expected {
        assert!(
            Instant::now() < give_up,
            "{} threads, expected {expected}",
            count()
        );
        std::thread::yield_now();
    }
}

#[test]
fn evicted_keys_take_their_thread_pools_with_them() {
    let test = TestRegistry::new();
    // A pool per key (the group is the default pool key): Kp-0, Kp-1, ...
    let per_key = KeyedCommands::builder(|key| {
        Command::builder(format!("K-{key}"))
            .group(format!("Kp-{key}"))
            .isolation(IsolationStrategy::Thread)
            .timeout_enabled(false)
    })
    .registry(test.registry())
    .max_keys(NonZeroUsize::new(3).unwrap())
    .build();
    for key in 0..20 {
        let cmd = per_key.get(&key.to_string()).unwrap();
        assert_eq!(cmd.run(ok).execute().unwrap(), 1);
    }
    let registry = test.registry();
    assert_eq!(per_key.keys(), ["19", "18", "17"]);
    assert_eq!(registry.command_keys().len(), 3);
    let pools: Vec<String> = registry
        .thread_pool_keys()
        .iter()
        .map(|k| k.to_string())
        .collect();
    assert_eq!(pools, ["Kp-17", "Kp-18", "Kp-19"]);
    // One thread per remaining pool; the evicted pools' threads ended.
    wait_for(3, || threads_named("hystrix-Kp-"));
}

#[test]
fn names_mapped_to_one_command_key_share_it_until_the_last_is_evicted() {
    let test = TestRegistry::new();
    let per_host = KeyedCommands::builder(|host| {
        Command::builder(format!("Host-{}", host.to_lowercase()))
            .group("Hosts")
            .isolation(IsolationStrategy::Semaphore)
    })
    .registry(test.registry())
    .max_keys(NonZeroUsize::new(2).unwrap())
    .build();
    let upper = per_host.get("API").unwrap();
    per_host.get("api").unwrap();
    upper.circuit_breaker().force_open();
    // "API" is evicted; "api" still holds Host-api, whose state (an open breaker) stays.
    per_host.get("other").unwrap();
    assert_eq!(per_host.keys(), ["other", "api"]);
    assert_eq!(
        test.registry().is_circuit_breaker_open("Host-api"),
        Some(true)
    );
    // Evicting the last name removes the state.
    per_host.get("third").unwrap();
    assert_eq!(test.registry().is_circuit_breaker_open("Host-api"), None);
}

#[test]
fn removing_a_key_keeps_a_pool_other_keys_use() {
    let test = TestRegistry::new();
    let registry = test.registry();
    let define = |key: &str| {
        Command::builder(key)
            .group("SharedPool")
            .isolation(IsolationStrategy::Thread)
            .timeout_enabled(false)
            .build_in(registry)
            .unwrap()
    };
    let (a, b) = (define("A"), define("B"));
    assert_eq!(a.run(ok).execute().unwrap(), 1);
    assert!(registry.remove("A"));
    assert!(registry.thread_pool_metrics("SharedPool").is_some());
    assert_eq!(b.run(ok).execute().unwrap(), 1);
    assert!(registry.remove("B"));
    assert!(registry.thread_pool_metrics("SharedPool").is_none());
    // A definition built before the removal is detached; its pool is gone, so THREAD runs
    // through it are rejected. A new definition gets a new pool.
    let err = b.run(ok).execute().unwrap_err();
    assert_eq!(
        err.failure_type(),
        hystrix::FailureType::RejectedThreadExecution
    );
    assert_eq!(define("B").run(ok).execute().unwrap(), 1);
    assert!(registry.thread_pool_metrics("SharedPool").is_some());
}
