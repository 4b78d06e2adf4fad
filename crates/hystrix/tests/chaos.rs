//! Chaos injection (POLICIES §5): faults, delays and hangs injected by configuration after
//! isolation and before the run, on every kind of run and isolation, with exact times on the
//! manual clock, seeded rates, and the registry's switch.
#![allow(clippy::unwrap_used)]

mod common;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::Poll;
use std::time::Duration;

use common::{DependencyError, builder, drive, poll_once};
use futures::StreamExt;
use futures::executor::block_on;
use futures::stream;
use hystrix::clock::{Clock, ManualClock};
use hystrix::testing::TestRegistry;
use hystrix::{
    Command, ConfigError, EventType, FailureType, HystrixError, IsolationStrategy, PropertyValue,
    Registry,
};

type Answer = Result<u32, HystrixError<DependencyError>>;

/// A command of `isolation` with these properties (room for 20 000 at once, timeout 1 s).
fn chaotic(
    test: &TestRegistry,
    key: &str,
    isolation: IsolationStrategy,
    props: &[(&str, PropertyValue)],
) -> Command {
    let mut b = Command::builder(key)
        .group(format!("{key}Group"))
        .isolation(isolation)
        .thread_pool_core_size(4)
        .property(
            "execution.isolation.semaphore.maxConcurrentRequests",
            20_000,
        )
        .property("execution.isolation.thread.timeoutInMilliseconds", 1_000)
        .property("chaos.enabled", true);
    for (name, value) in props {
        b = b.property(name, value.clone());
    }
    b.build_in(test.registry()).unwrap()
}

/// A run that counts its calls and answers 7.
fn counted(calls: &Arc<AtomicU32>) -> impl FnOnce() -> Result<u32, DependencyError> + Send + use<> {
    let calls = Arc::clone(calls);
    move || {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok(7)
    }
}

/// A factory of async runs that count their calls and answer 7 (for retry and hedging).
fn counted_attempts(
    calls: &Arc<AtomicU32>,
) -> impl FnMut() -> std::pin::Pin<Box<dyn Future<Output = Result<u32, DependencyError>> + Send>>
+ Send
+ use<> {
    let calls = Arc::clone(calls);
    move || {
        let calls = Arc::clone(&calls);
        Box::pin(async move {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(7)
        })
    }
}

/// Waits (up to 10 s of real time) for a pool thread to show what it did; no time passes on
/// the clock.
fn wait_until(mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Executes `cmd` blocking on another thread (its run counts its calls), moving the clock by
/// `first_ms` once the execution waits on it (its injected wait's timer and, under THREAD,
/// the caller's deadline), then by `then_ms`: the outcome, and how often the run was called.
fn execute_on_clock(
    test: &TestRegistry,
    cmd: &Command,
    isolation: IsolationStrategy,
    first_ms: u64,
    then_ms: u64,
) -> (hystrix::Outcome<u32, DependencyError>, u32) {
    let calls = Arc::new(AtomicU32::new(0));
    let run = counted(&calls);
    let caller = {
        let cmd = cmd.clone();
        std::thread::spawn(move || cmd.run(run).execute_outcome())
    };
    let timers = match isolation {
        IsolationStrategy::Thread => 2,
        IsolationStrategy::Semaphore => 1,
    };
    test.advance_when_pending(timers, Duration::from_millis(first_ms))
        .unwrap();
    test.advance(Duration::from_millis(then_ms));
    let outcome = caller.join().unwrap();
    (outcome, calls.load(Ordering::SeqCst))
}

fn events(cmd_result: &hystrix::ExecutionResult) -> String {
    cmd_result.execution_events().to_string()
}

fn fault(percent: u32) -> [(&'static str, PropertyValue); 1] {
    [("chaos.fault.ratePercentage", percent.into())]
}

// ------------------------------------------------------------------------------------------------
// The registry's switch and the properties' rules

#[test]
fn chaos_is_refused_unless_the_registry_allows_it() {
    let registry = Registry::builder().clock(ManualClock::new()).build();
    let props = registry.properties();
    for name in [
        "hystrix.command.GetUser.chaos.enabled",
        "hystrix.command.default.chaos.enabled",
    ] {
        let err = props.set(name, true).unwrap_err();
        let ConfigError::InvalidValue {
            name: refused,
            reason,
            ..
        } = &err
        else {
            panic!("unexpected error: {err}");
        };
        assert_eq!(refused, name);
        assert!(
            reason.contains("RegistryBuilder::allow_chaos(true)"),
            "{reason}"
        );
    }
    // The rates alone inject nothing and are accepted; false is accepted too.
    props
        .set("hystrix.command.GetUser.chaos.fault.ratePercentage", 100)
        .unwrap();
    props
        .set("hystrix.command.GetUser.chaos.enabled", false)
        .unwrap();
    // A definition that asks for it is refused the same way.
    let err = builder("GetOrder")
        .property("chaos.enabled", true)
        .build_in(&registry)
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid value `true` for `hystrix.command.GetOrder.chaos.enabled`"),
        "{err}"
    );
    // Without the switch, the rates set above inject nothing.
    let calls = Arc::new(AtomicU32::new(0));
    let cmd = builder("GetUser").build_in(&registry).unwrap();
    assert_eq!(cmd.run(counted(&calls)).execute().unwrap(), 7);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    let allowed = Registry::builder()
        .clock(ManualClock::new())
        .allow_chaos(true)
        .build();
    allowed
        .properties()
        .set("hystrix.command.GetUser.chaos.enabled", true)
        .unwrap();
}

#[cfg(feature = "config-files")]
#[test]
fn a_stray_chaos_line_in_a_properties_file_is_refused() {
    let registry = Registry::builder().clock(ManualClock::new()).build();
    let path = std::env::temp_dir().join(format!("chaos-{}.properties", std::process::id()));
    std::fs::write(&path, "hystrix.command.default.chaos.enabled=true\n").unwrap();
    let err = registry
        .properties()
        .load_file(&path)
        .unwrap_err()
        .to_string();
    std::fs::remove_file(&path).unwrap();
    assert!(
        err.contains("hystrix.command.default.chaos.enabled")
            && err.contains("RegistryBuilder::allow_chaos(true)"),
        "{err}"
    );
}

#[test]
fn the_rates_are_percentages_and_a_hang_needs_a_timeout() {
    let test = TestRegistry::new();
    let props = test.registry().properties();
    let refused = |name: &str, value: PropertyValue| {
        props
            .set(&format!("hystrix.command.K.{name}"), value)
            .unwrap_err()
            .to_string()
    };
    assert!(refused("chaos.fault.ratePercentage", 100.5.into()).contains("from 0 to 100"));
    assert!(refused("chaos.latency.ratePercentage", (-1.0).into()).contains("from 0 to 100"));
    props
        .set("hystrix.command.K.chaos.fault.ratePercentage", 60)
        .unwrap();
    let err = refused("chaos.hang.ratePercentage", 50.into());
    assert!(
        err.contains("must not pass 100 with chaos.fault.ratePercentage (60 %)"),
        "{err}"
    );
    props
        .set("hystrix.command.K.chaos.hang.ratePercentage", 40)
        .unwrap();
    let err = refused("execution.timeout.enabled", false.into());
    assert_eq!(
        err,
        "invalid value `false` for `hystrix.command.K.execution.timeout.enabled`: must be true \
         while chaos.hang.ratePercentage (40 %) is above 0: a hung run ends only at its timeout"
    );
    // A key whose builder turned timeouts off: a hang rate for every key names the conflict.
    builder("NoTimeout")
        .timeout_enabled(false)
        .build_in(test.registry())
        .unwrap();
    let err = props
        .set("hystrix.command.default.chaos.hang.ratePercentage", 10)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "conflicts with `hystrix.command.NoTimeout.execution.timeout.enabled` = false"
        ),
        "{err}"
    );
    // A delay ends, whatever the timeout: at most an hour.
    let err = refused("chaos.latency.inMilliseconds", 3_600_001.into());
    assert!(err.contains("must be at most 3600000 ms"), "{err}");
    // Fractions are rates too.
    props
        .set("hystrix.command.K.chaos.latency.ratePercentage", 0.5)
        .unwrap();
}

// ------------------------------------------------------------------------------------------------
// Faults

#[test]
fn an_injected_fault_replaces_the_run_of_every_kind_under_both_isolations() {
    let test = TestRegistry::new();
    for isolation in [IsolationStrategy::Semaphore, IsolationStrategy::Thread] {
        let cmd = chaotic(
            &test,
            &format!("Fault{isolation:?}"),
            isolation,
            &fault(100),
        );
        let calls = Arc::new(AtomicU32::new(0));
        let fallback = |err: &HystrixError<DependencyError>| {
            assert_eq!(err.failure_type(), FailureType::InjectedFault);
            assert!(err.is_injected_fault());
            Ok::<_, DependencyError>(1)
        };
        // Blocking.
        let outcome = cmd
            .run(counted(&calls))
            .fallback(fallback)
            .execute_outcome();
        assert_eq!(*outcome.response().as_ref().unwrap(), 1);
        assert_eq!(
            events(outcome.execution_result()),
            "FAILURE, FALLBACK_SUCCESS, CHAOS_INJECTED"
        );
        // Blocking, driven as a future (under SEMAPHORE: called in the future's poll).
        let outcome = block_on(cmd.run(counted(&calls)).execute_async_outcome());
        assert!(outcome.response().as_ref().unwrap_err().is_injected_fault());
        assert_eq!(
            events(outcome.execution_result()),
            "FAILURE, FALLBACK_MISSING, CHAOS_INJECTED"
        );
        // Cancellable.
        let c = Arc::clone(&calls);
        let answer = cmd
            .run_cancellable(move |_token| {
                c.fetch_add(1, Ordering::SeqCst);
                Ok::<u32, DependencyError>(7)
            })
            .fallback(fallback)
            .execute();
        assert_eq!(answer.unwrap(), 1);
        // Async, blocking on it and polled.
        let c = Arc::clone(&calls);
        let run = async move {
            c.fetch_add(1, Ordering::SeqCst);
            Ok::<u32, DependencyError>(7)
        };
        assert_eq!(cmd.run_async(run).fallback(fallback).execute().unwrap(), 1);
        let c = Arc::clone(&calls);
        let run = async move {
            c.fetch_add(1, Ordering::SeqCst);
            Ok::<u32, DependencyError>(7)
        };
        // Nothing waits for the clock: a fault is at once.
        let outcome = block_on(cmd.run_async(run).execute_async_outcome());
        let err = outcome.response().as_ref().unwrap_err();
        assert_eq!(err.failure_type(), FailureType::InjectedFault);
        assert_eq!(
            err.to_string(),
            format!(
                "command Fault{isolation:?} failed with a fault injected by chaos \
                 (chaos.fault.ratePercentage) and no fallback available"
            )
        );
        assert_eq!(
            events(outcome.execution_result()),
            "FAILURE, FALLBACK_MISSING, CHAOS_INJECTED"
        );
        // A stream, ended before its first value.
        let c = Arc::clone(&calls);
        let run = stream::once(async move {
            c.fetch_add(1, Ordering::SeqCst);
            Ok::<u32, DependencyError>(7)
        })
        .boxed();
        let mut observed = Box::pin(cmd.run_stream(run).to_observable());
        let items: Vec<_> = block_on(observed.by_ref().collect::<Vec<_>>());
        assert_eq!(items.len(), 1);
        assert_eq!(
            items[0].as_ref().unwrap_err().failure_type(),
            FailureType::InjectedFault
        );
        assert_eq!(
            events(&observed.execution_result().unwrap()),
            "FAILURE, FALLBACK_MISSING, CHAOS_INJECTED"
        );

        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "{isolation:?}: no run called"
        );
        let metrics = cmd.metrics();
        assert_eq!(metrics.cumulative_count(EventType::ChaosInjected), 6);
        assert_eq!(metrics.cumulative_count(EventType::Failure), 6);
        // A pool's task counts itself out after its caller sees its end.
        wait_until(|| cmd.metrics().current_concurrent_execution_count() == 0);
    }
}

#[test]
fn injected_faults_open_the_breaker_as_real_failures() {
    let test = TestRegistry::new();
    let cmd = chaotic(
        &test,
        "Trips",
        IsolationStrategy::Semaphore,
        &[
            ("chaos.fault.ratePercentage", 100.into()),
            ("circuitBreaker.requestVolumeThreshold", 5.into()),
        ],
    );
    let calls = Arc::new(AtomicU32::new(0));
    for _ in 0..5 {
        assert!(
            cmd.run(counted(&calls))
                .execute()
                .unwrap_err()
                .is_injected_fault()
        );
    }
    // The next health check (500 ms) sees 5 failures of 5.
    test.advance(Duration::from_millis(500));
    let err = cmd.run(counted(&calls)).execute().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[test]
fn retry_retries_an_injected_fault_as_a_failure() {
    let test = TestRegistry::new();
    let cmd = chaotic(
        &test,
        "Retried",
        IsolationStrategy::Semaphore,
        &[
            ("chaos.fault.ratePercentage", 100.into()),
            ("retry.maxAttempts", 3.into()),
            (
                "execution.isolation.thread.timeoutInMilliseconds",
                10_000.into(),
            ),
        ],
    );
    let calls = Arc::new(AtomicU32::new(0));
    let make = counted_attempts(&calls);
    let outcome = drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    let err = outcome.response().as_ref().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::InjectedFault);
    assert_eq!(err.attempts(), 3);
    assert_eq!(
        events(outcome.execution_result()),
        "FAILUREx3, FALLBACK_MISSING, RETRYx2, CHAOS_INJECTEDx3"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // Turned off at run time (dynamic), the next execution runs at once.
    test.registry()
        .properties()
        .set("hystrix.command.Retried.chaos.enabled", false)
        .unwrap();
    let make = counted_attempts(&calls);
    let outcome = drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    assert_eq!(*outcome.response().as_ref().unwrap(), 7);
    assert_eq!(events(outcome.execution_result()), "SUCCESS");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[cfg(feature = "tower")]
#[test]
fn the_tower_layer_injects_before_the_inner_service() {
    use tower::{Layer, Service, ServiceExt};
    let test = TestRegistry::new();
    let cmd = chaotic(&test, "Layer", IsolationStrategy::Semaphore, &fault(100));
    let calls = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&calls);
    let inner = tower::service_fn(move |req: u32| {
        c.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<u32, DependencyError>(req) }
    });
    let mut svc = hystrix::tower::HystrixLayer::new(cmd.clone()).layer(inner);
    let answer = drive(&test, async {
        svc.ready().await.unwrap();
        svc.call(5).await
    });
    assert!(answer.unwrap_err().is_injected_fault());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(cmd.metrics().cumulative_count(EventType::ChaosInjected), 1);
}

// ------------------------------------------------------------------------------------------------
// Latency and hangs on the manual clock

#[test]
fn an_injected_delay_holds_the_permit_on_the_clock_then_the_run_goes_on() {
    let test = TestRegistry::new();
    let cmd = chaotic(
        &test,
        "Delayed",
        IsolationStrategy::Semaphore,
        &[
            ("chaos.latency.ratePercentage", 100.into()),
            ("chaos.latency.inMilliseconds", 300.into()),
        ],
    );
    // Async, polled here: pending for exactly 300 ms, holding its permit.
    let calls = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&calls);
    let run = async move {
        c.fetch_add(1, Ordering::SeqCst);
        Ok::<u32, DependencyError>(7)
    };
    let mut future = Box::pin(cmd.run_async(run).execute_async_outcome());
    assert!(poll_once(future.as_mut()).is_pending());
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 1);
    test.advance(Duration::from_millis(299));
    assert!(poll_once(future.as_mut()).is_pending());
    assert_eq!(calls.load(Ordering::SeqCst), 0, "not before the delay ends");
    test.advance(Duration::from_millis(1));
    let Poll::Ready(outcome) = poll_once(future.as_mut()) else {
        panic!("ready at 300 ms");
    };
    assert_eq!(*outcome.response().as_ref().unwrap(), 7);
    assert_eq!(
        events(outcome.execution_result()),
        "SUCCESS, CHAOS_INJECTED"
    );
    assert_eq!(outcome.execution_result().execution_time_ms(), Some(300));
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);

    // Blocking, on the caller's thread (SEMAPHORE) and on a pool thread (THREAD).
    for isolation in [IsolationStrategy::Semaphore, IsolationStrategy::Thread] {
        let cmd = chaotic(
            &test,
            &format!("DelayedBlocking{isolation:?}"),
            isolation,
            &[
                ("chaos.latency.ratePercentage", 100.into()),
                ("chaos.latency.inMilliseconds", 300.into()),
            ],
        );
        let (outcome, calls) = execute_on_clock(&test, &cmd, isolation, 300, 0);
        assert_eq!(*outcome.response().as_ref().unwrap(), 7, "{isolation:?}");
        assert_eq!(
            events(outcome.execution_result()),
            "SUCCESS, CHAOS_INJECTED"
        );
        assert_eq!(outcome.execution_result().execution_time_ms(), Some(300));
        assert_eq!(calls, 1);
    }
}

#[test]
fn a_delay_past_the_deadline_times_out_exactly_there_without_calling_the_run() {
    let test = TestRegistry::new();
    for isolation in [IsolationStrategy::Semaphore, IsolationStrategy::Thread] {
        let cmd = chaotic(
            &test,
            &format!("TooSlow{isolation:?}"),
            isolation,
            &[
                ("chaos.latency.ratePercentage", 100.into()),
                ("chaos.latency.inMilliseconds", 5_000.into()),
            ],
        );
        let start = test.clock().now_ms();
        let (outcome, calls) = execute_on_clock(&test, &cmd, isolation, 1_000, 0);
        let err = outcome.response().as_ref().unwrap_err();
        assert_eq!(err.failure_type(), FailureType::Timeout, "{isolation:?}");
        assert_eq!(err.timeout_ms(), Some(1_000));
        assert_eq!(
            events(outcome.execution_result()),
            "TIMEOUT, FALLBACK_MISSING, CHAOS_INJECTED"
        );
        assert_eq!(outcome.execution_result().total_time_ms(), 1_000);
        assert_eq!(test.clock().now_ms() - start, 1_000);
        assert_eq!(calls, 0);
        // Under THREAD the pool thread ends its wait at the same instant, on its own.
        wait_until(|| cmd.metrics().current_concurrent_execution_count() == 0);
    }
}

#[test]
fn a_hang_ends_exactly_at_the_timeout_and_frees_its_permit_and_its_thread() {
    let test = TestRegistry::new();
    for isolation in [IsolationStrategy::Semaphore, IsolationStrategy::Thread] {
        let cmd = chaotic(
            &test,
            &format!("Hangs{isolation:?}"),
            isolation,
            &[("chaos.hang.ratePercentage", 100.into())],
        );
        // Still waiting at 999 ms; a timeout at 1 000.
        let (outcome, calls) = execute_on_clock(&test, &cmd, isolation, 999, 1);
        assert_eq!(
            outcome.response().as_ref().unwrap_err().failure_type(),
            FailureType::Timeout
        );
        assert_eq!(
            events(outcome.execution_result()),
            "TIMEOUT, FALLBACK_MISSING, CHAOS_INJECTED"
        );
        assert_eq!(outcome.execution_result().total_time_ms(), 1_000);
        assert_eq!(calls, 0);
        wait_until(|| cmd.metrics().current_concurrent_execution_count() == 0);
        if isolation == IsolationStrategy::Thread {
            // The pool thread is free again: a call without chaos runs on it.
            test.registry()
                .properties()
                .set(
                    &format!("hystrix.command.Hangs{isolation:?}.chaos.enabled"),
                    false,
                )
                .unwrap();
            let calls = Arc::new(AtomicU32::new(0));
            assert_eq!(cmd.run(counted(&calls)).execute().unwrap(), 7);
        }
    }
}

#[test]
fn a_hung_async_run_ends_when_dropped_and_gives_its_permit_back() {
    let test = TestRegistry::new();
    let cmd = chaotic(
        &test,
        "HangsAsync",
        IsolationStrategy::Semaphore,
        &[
            ("chaos.hang.ratePercentage", 100.into()),
            (
                "execution.isolation.semaphore.maxConcurrentRequests",
                1.into(),
            ),
        ],
    );
    let mut hung = Box::pin(
        cmd.run_async(async { Ok::<u32, DependencyError>(7) })
            .execute_async_outcome(),
    );
    assert!(poll_once(hung.as_mut()).is_pending());
    test.advance(Duration::from_millis(500));
    assert!(poll_once(hung.as_mut()).is_pending());
    // The bulkhead is full while it hangs.
    let err = cmd
        .run_async(async { Ok::<u32, DependencyError>(7) })
        .execute();
    assert_eq!(
        err.unwrap_err().failure_type(),
        FailureType::RejectedSemaphoreExecution
    );
    drop(hung);
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
    test.registry()
        .properties()
        .set("hystrix.command.HangsAsync.chaos.enabled", false)
        .unwrap();
    let answer: Answer = cmd.run_async(async { Ok(7) }).execute();
    assert_eq!(answer.unwrap(), 7);
    let metrics = cmd.metrics();
    assert_eq!(metrics.cumulative_count(EventType::Cancelled), 1);
    // Its end was never decided: the injection is counted as it is dropped.
    assert_eq!(metrics.cumulative_count(EventType::ChaosInjected), 1);
}

#[test]
fn a_stream_is_delayed_or_hangs_before_its_first_value() {
    let test = TestRegistry::new();
    for isolation in [IsolationStrategy::Semaphore, IsolationStrategy::Thread] {
        let key = format!("Stream{isolation:?}");
        let cmd = chaotic(
            &test,
            &key,
            isolation,
            &[
                ("chaos.latency.ratePercentage", 100.into()),
                ("chaos.latency.inMilliseconds", 200.into()),
            ],
        );
        // Timers while it waits: the injected wait's, and under SEMAPHORE the first value's
        // deadline (under THREAD the run's task on the pool judges it later).
        let timers = if isolation == IsolationStrategy::Thread {
            1
        } else {
            2
        };
        // Consumed on another thread, so that a pool's task can arm its timer meanwhile.
        let consume = |values: Vec<u32>| {
            let cmd = cmd.clone();
            std::thread::spawn(move || {
                let run = stream::iter(values.into_iter().map(Ok::<u32, DependencyError>));
                let mut observed = Box::pin(cmd.run_stream(run.boxed()).to_observable());
                let items: Vec<_> =
                    futures::executor::block_on(observed.by_ref().collect::<Vec<_>>());
                (items, observed.execution_result().unwrap())
            })
        };
        let consumer = consume(vec![1, 2]);
        test.advance_when_pending(timers, Duration::from_millis(200))
            .unwrap();
        let (items, result) = consumer.join().unwrap();
        assert_eq!(
            items.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(events(&result), "EMITx2, SUCCESS, CHAOS_INJECTED");
        assert_eq!(result.total_time_ms(), 200, "{isolation:?}");

        let hang = format!("hystrix.command.{key}.chaos.hang.ratePercentage");
        test.registry().properties().set(&hang, 100).unwrap();
        let consumer = consume(vec![1]);
        test.advance_when_pending(timers, Duration::from_millis(1_000))
            .unwrap();
        let (items, result) = consumer.join().unwrap();
        assert_eq!(
            items[0].as_ref().unwrap_err().failure_type(),
            FailureType::Timeout
        );
        assert_eq!(events(&result), "TIMEOUT, FALLBACK_MISSING, CHAOS_INJECTED");
        assert_eq!(result.total_time_ms(), 1_000, "{isolation:?}");
        wait_until(|| cmd.metrics().current_concurrent_execution_count() == 0);
    }
}

// ------------------------------------------------------------------------------------------------
// Rates

/// Whether `count` of `n` draws is within 4.5 standard deviations of a rate of `percent`.
fn within_binomial_bounds(count: u32, n: u32, percent: f64) -> bool {
    let (n, p) = (f64::from(n), percent / 100.0);
    let sigma = (n * p * (1.0 - p)).sqrt();
    (f64::from(count) - n * p).abs() <= 4.5 * sigma
}

#[test]
fn rates_over_ten_thousand_seeded_calls_are_within_binomial_bounds() {
    const N: u32 = 10_000;
    let test = TestRegistry::new();
    let cmd = chaotic(
        &test,
        "Rates",
        IsolationStrategy::Semaphore,
        &[
            ("chaos.fault.ratePercentage", 10.into()),
            ("chaos.hang.ratePercentage", 5.into()),
            ("chaos.latency.ratePercentage", 20.into()),
            ("chaos.latency.inMilliseconds", 100.into()),
            ("circuitBreaker.enabled", false.into()),
        ],
    );
    let mut pending = Vec::new();
    let (mut ok_at_once, mut faults) = (0, 0);
    for _ in 0..N {
        let mut future = Box::pin(
            cmd.run_async(async { Ok::<u32, DependencyError>(7) })
                .execute_async(),
        );
        match poll_once(future.as_mut()) {
            Poll::Ready(Ok(_)) => ok_at_once += 1,
            Poll::Ready(Err(err)) if err.is_injected_fault() => faults += 1,
            Poll::Ready(Err(err)) => panic!("unexpected: {err}"),
            Poll::Pending => pending.push(future),
        }
    }
    // At 100 ms the delays end: a delayed run answers, a delayed fault fails.
    test.advance(Duration::from_millis(100));
    let (mut delayed, mut hung) = (0, 0);
    let mut still = Vec::new();
    for mut future in pending {
        match poll_once(future.as_mut()) {
            Poll::Ready(Ok(_)) => delayed += 1,
            Poll::Ready(Err(err)) if err.is_injected_fault() => {
                delayed += 1;
                faults += 1;
            }
            Poll::Ready(Err(err)) => panic!("unexpected: {err}"),
            Poll::Pending => still.push(future),
        }
    }
    // At the deadline the hangs time out.
    test.advance(Duration::from_millis(900));
    for mut future in still {
        match poll_once(future.as_mut()) {
            Poll::Ready(Err(err)) if err.failure_type() == FailureType::Timeout => hung += 1,
            other => panic!("a hang ends as a timeout: {:?}", other.map(|r| r.is_ok())),
        }
    }
    println!("faults {faults}, hangs {hung}, delayed {delayed}, untouched {ok_at_once} of {N}");
    assert!(within_binomial_bounds(faults, N, 10.0), "faults {faults}");
    assert!(within_binomial_bounds(hung, N, 5.0), "hangs {hung}");
    // A hang is not delayed first: a delay is seen on 20 % of the attempts that do not hang.
    assert!(
        within_binomial_bounds(delayed, N, 20.0 * 0.95),
        "delayed {delayed}"
    );
    // Untouched: neither delayed nor replaced.
    assert!(
        within_binomial_bounds(ok_at_once, N, 80.0 * 0.85),
        "untouched {ok_at_once}"
    );
    assert_eq!(
        cmd.metrics().cumulative_count(EventType::ChaosInjected),
        u64::from(N - ok_at_once)
    );
    // The seed repeats the draws exactly: the same registry seed, the same counts.
    let again = TestRegistry::new();
    let cmd = chaotic(&again, "Rates", IsolationStrategy::Semaphore, &fault(10));
    let repeated = (0..N)
        .filter(|_| cmd.run(|| Ok::<u32, DependencyError>(7)).execute().is_err())
        .count();
    let first = TestRegistry::new();
    let cmd = chaotic(&first, "Rates", IsolationStrategy::Semaphore, &fault(10));
    let once = (0..N)
        .filter(|_| cmd.run(|| Ok::<u32, DependencyError>(7)).execute().is_err())
        .count();
    assert_eq!(repeated, once);
    assert!(within_binomial_bounds(
        u32::try_from(once).unwrap(),
        N,
        10.0
    ));
}

// ------------------------------------------------------------------------------------------------
// What observers see

/// A registry on a manual clock that allows chaos, with a recording event notifier.
fn observed_registry() -> (ManualClock, common::RecordingNotifier, Registry) {
    let clock = ManualClock::new();
    let notifier = common::RecordingNotifier::default();
    let registry = Registry::builder()
        .clock(clock.clone())
        .event_notifier(notifier.clone())
        .allow_chaos(true)
        .random_seed(0)
        .build();
    (clock, notifier, registry)
}

#[test]
fn the_request_log_and_the_notifier_see_each_injection() {
    let (_clock, notifier, registry) = observed_registry();
    let cmd = builder("Logged")
        .property("chaos.enabled", true)
        .property("chaos.fault.ratePercentage", 100)
        .property("retry.maxAttempts", 2)
        .property("retry.backoff.initialInMilliseconds", 0)
        .build_in(&registry)
        .unwrap();
    let ctx = hystrix::context::RequestContext::new();
    let _entered = ctx.enter();
    let make = || async { Ok::<u32, DependencyError>(7) };
    let answer = futures::executor::block_on(
        cmd.run_async_retryable(make)
            .fallback(|_err: &HystrixError<DependencyError>| Ok::<_, DependencyError>(1))
            .execute_async(),
    );
    assert_eq!(answer.unwrap(), 1);
    assert_eq!(
        ctx.request_log().to_string(),
        "Logged[FAILUREx2, FALLBACK_SUCCESS, RETRY, CHAOS_INJECTEDx2][0ms]"
    );
    let seen = notifier.take();
    assert_eq!(
        seen.iter()
            .filter(|line| *line == "Logged:CHAOS_INJECTED")
            .count(),
        2,
        "{seen:?}"
    );
}

#[test]
fn each_hedge_is_drawn_for_on_its_own() {
    let test = TestRegistry::new();
    let cmd = chaotic(
        &test,
        "Hedged",
        IsolationStrategy::Semaphore,
        &[
            ("chaos.hang.ratePercentage", 100.into()),
            ("hedging.maxAttempts", 2.into()),
            ("hedging.delayInMilliseconds", 100.into()),
        ],
    );
    let calls = Arc::new(AtomicU32::new(0));
    let make = counted_attempts(&calls);
    // Both attempts hang: the hedge starts at 100 ms, both end at the deadline.
    let outcome = drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    assert_eq!(
        outcome.response().as_ref().unwrap_err().failure_type(),
        FailureType::Timeout
    );
    assert_eq!(outcome.execution_result().total_time_ms(), 1_000);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(cmd.metrics().cumulative_count(EventType::ChaosInjected), 2);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Hedge), 1);
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
}

#[test]
fn a_hedge_race_counts_the_injected_attempt_that_lost() {
    let test = TestRegistry::new();
    let cmd = chaotic(
        &test,
        "HedgedDelay",
        IsolationStrategy::Semaphore,
        &[
            ("chaos.latency.ratePercentage", 100.into()),
            ("chaos.latency.inMilliseconds", 100.into()),
            ("hedging.maxAttempts", 2.into()),
            ("hedging.delayInMilliseconds", 20.into()),
        ],
    );
    let calls = Arc::new(AtomicU32::new(0));
    let make = counted_attempts(&calls);
    // The first attempt waits until 100 ms, the hedge (from 20 ms) until 120: the first wins.
    let outcome = drive(&test, cmd.run_async_retryable(make).execute_async_outcome());
    assert_eq!(*outcome.response().as_ref().unwrap(), 7);
    assert_eq!(outcome.execution_result().total_time_ms(), 100);
    assert_eq!(
        events(outcome.execution_result()),
        "SUCCESS, HEDGE, HEDGE_CANCELLED, CHAOS_INJECTEDx2"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the loser never called its run"
    );
}

#[test]
fn the_notifier_hears_of_an_injection_as_it_begins_and_once() {
    let (clock, notifier, registry) = observed_registry();
    let cmd = builder("Heard")
        .property("chaos.enabled", true)
        .property("chaos.latency.ratePercentage", 100)
        .property("chaos.latency.inMilliseconds", 300)
        .build_in(&registry)
        .unwrap();
    let chaos_events = |seen: &[String]| {
        seen.iter()
            .filter(|line| *line == "Heard:CHAOS_INJECTED")
            .count()
    };
    let mut future = Box::pin(
        cmd.run_async(async { Ok::<u32, DependencyError>(7) })
            .execute_async_outcome(),
    );
    assert!(poll_once(future.as_mut()).is_pending());
    // Still waiting: the notifier already heard of it (a live view counts it in this phase).
    assert_eq!(chaos_events(&notifier.take()), 1);
    clock.advance(Duration::from_millis(300));
    let Poll::Ready(outcome) = poll_once(future.as_mut()) else {
        panic!("ready at 300 ms");
    };
    assert_eq!(
        events(outcome.execution_result()),
        "SUCCESS, CHAOS_INJECTED"
    );
    // Not told a second time when the attempt's end is decided.
    assert_eq!(chaos_events(&notifier.take()), 0);
}
