//! THREAD isolation: pools per thread-pool key, saturation, queues and their threshold,
//! `actualMaximumSize`, timeouts that count queue wait, hung runs, panics, async runs on a pool's
//! own runtime, one budget per pool, cancellation and shutdown.
//!
//! Executions that must be in flight at once are started with `queue()`; the test waits for
//! each run to report that it started (a channel), never for time to pass. Time is the manual
//! clock's.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use common::{DependencyError, threads_named};
use hystrix::testing::TestRegistry;
use hystrix::{
    CancellationToken, Command, EventType, FailureType, HystrixError, IsolationStrategy, Registry,
};

type Error = HystrixError<DependencyError>;

/// A THREAD command (the default for blocking runs) on pool `pool` with these pool properties.
fn pooled(test: &TestRegistry, key: &str, pool: &str, pool_props: &[(&str, &str)]) -> Command {
    let mut builder = Command::builder(key).group(pool);
    for (name, value) in pool_props {
        builder = builder.thread_pool_property(name, *value);
    }
    builder.build_in(test.registry()).unwrap()
}

/// A run that reports its thread's name when it starts, then waits to be released.
struct Gate {
    started: mpsc::Receiver<String>,
    release: mpsc::Sender<()>,
}

fn gated(
    value: u32,
) -> (
    impl FnOnce() -> Result<u32, DependencyError> + Send + 'static,
    Gate,
) {
    let (started_tx, started) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    let run = move || {
        started_tx
            .send(std::thread::current().name().unwrap_or("").to_owned())
            .unwrap();
        let _ = release_rx.recv();
        Ok(value)
    };
    (run, Gate { started, release })
}

/// Waits until `condition` holds (other threads make it true; no time passes on the clock).
fn wait_until(mut condition: impl FnMut() -> bool) {
    while !condition() {
        std::thread::yield_now();
    }
}

/// Waits until no thread of this process is named `prefix*`. A joined thread can stay listed
/// by the kernel for an instant after its join; the bound only turns a leak into a failure
/// instead of a hang.
fn wait_for_no_threads_named(prefix: &str) {
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    while threads_named(prefix) > 0 {
        assert!(
            std::time::Instant::now() < give_up,
            "threads {prefix}* leaked"
        );
        std::thread::yield_now();
    }
}

#[test]
fn blocking_runs_default_to_thread_isolation_on_a_named_pool_thread() {
    let test = TestRegistry::new();
    let cmd = Command::builder("OnPool")
        .group("Users")
        .build_in(test.registry())
        .unwrap();
    let outcome = cmd
        .run(|| Ok::<_, DependencyError>(std::thread::current().name().unwrap().to_owned()))
        .execute_outcome();
    let result = *outcome.execution_result();
    assert_eq!(outcome.into_response().unwrap(), "hystrix-Users-1");
    assert_eq!(result.isolation(), IsolationStrategy::Thread);
    assert!(result.is_executed_in_thread());
    assert_eq!(common::names(result.execution_events()), ["SUCCESS"]);
    let pool = cmd.thread_pool_metrics().unwrap();
    assert_eq!(pool.thread_pool_key.as_str(), "Users");
    assert_eq!(
        (
            pool.current_pool_size,
            pool.current_active_count,
            pool.current_completed_task_count
        ),
        (1, 0, 1)
    );
    assert_eq!(test.registry().thread_pool_metrics("Users").unwrap(), pool);
}

#[test]
fn a_full_hand_off_pool_rejects_and_the_fallback_answers() {
    let test = TestRegistry::new();
    let cmd = pooled(&test, "Busy", "BusyPool", &[("coreSize", "2")]);
    let (run_a, gate_a) = gated(1);
    let (run_b, gate_b) = gated(2);
    let a = cmd.run(run_a).queue();
    let b = cmd.run(run_b).queue();
    gate_a.started.recv().unwrap();
    gate_b.started.recv().unwrap();

    let outcome = cmd.run(|| Ok::<_, DependencyError>(3)).execute_outcome();
    assert_eq!(
        common::names(outcome.execution_result().execution_events()),
        ["THREAD_POOL_REJECTED", "FALLBACK_MISSING"]
    );
    assert!(
        outcome
            .execution_result()
            .is_response_thread_pool_rejected()
    );
    assert!(!outcome.execution_result().is_executed_in_thread());
    let err = outcome.into_response().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::RejectedThreadExecution);
    assert_eq!(
        err.to_string(),
        "command Busy could not be queued for execution on thread pool BusyPool (all 2 threads \
         busy and 0 tasks queued) and no fallback available (tune \
         hystrix.threadpool.BusyPool.coreSize or add a fallback)"
    );
    let value = cmd
        .run(|| Ok::<_, DependencyError>(3))
        .fallback(|err: &Error| {
            assert_eq!(err.failure_type(), FailureType::RejectedThreadExecution);
            Ok::<_, DependencyError>(30)
        })
        .execute()
        .unwrap();
    assert_eq!(value, 30);

    gate_a.release.send(()).unwrap();
    gate_b.release.send(()).unwrap();
    assert_eq!((a.get().unwrap(), b.get().unwrap()), (1, 2));
    assert_eq!(
        cmd.metrics()
            .cumulative_count(EventType::ThreadPoolRejected),
        2
    );
    assert_eq!(cmd.metrics().cumulative_count(EventType::Success), 2);
}

#[test]
fn the_queue_rejection_threshold_applies_and_changes_at_run_time() {
    let test = TestRegistry::new();
    let cmd = pooled(
        &test,
        "Queued",
        "QueuePool",
        &[
            ("coreSize", "1"),
            ("maxQueueSize", "10"),
            ("queueSizeRejectionThreshold", "1"),
        ],
    );
    let (run_1, gate_1) = gated(1);
    let (run_2, gate_2) = gated(2);
    let first = cmd.run(run_1).queue();
    gate_1.started.recv().unwrap();
    let second = cmd.run(run_2).queue();
    assert_eq!(cmd.thread_pool_metrics().unwrap().current_queue_size, 1);

    let err = cmd
        .run(|| Ok::<_, DependencyError>(3))
        .execute()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "command Queued could not be queued for execution on thread pool QueuePool \
         (thread-pool queue is at its rejection threshold (1 tasks)) and no fallback available \
         (tune hystrix.threadpool.QueuePool.queueSizeRejectionThreshold or add a fallback)"
    );

    test.registry()
        .properties()
        .set(
            "hystrix.threadpool.QueuePool.queueSizeRejectionThreshold",
            2,
        )
        .unwrap();
    let (run_3, gate_3) = gated(3);
    let third = cmd.run(run_3).queue();
    assert_eq!(cmd.thread_pool_metrics().unwrap().current_queue_size, 2);

    gate_1.release.send(()).unwrap();
    gate_2.release.send(()).unwrap();
    gate_3.release.send(()).unwrap();
    assert_eq!(
        (
            first.get().unwrap(),
            second.get().unwrap(),
            third.get().unwrap()
        ),
        (1, 2, 3)
    );
    // All three ran on the one core thread, in order.
    assert_eq!(gate_2.started.recv().unwrap(), "hystrix-QueuePool-1");
    assert_eq!(gate_3.started.recv().unwrap(), "hystrix-QueuePool-1");
}

#[test]
fn the_pool_grows_to_actual_maximum_size_only_when_allowed() {
    let test = TestRegistry::new();
    let cmd = pooled(
        &test,
        "Grows",
        "GrowPool",
        &[
            ("coreSize", "1"),
            ("maximumSize", "3"),
            ("allowMaximumSizeToDivergeFromCoreSize", "true"),
        ],
    );
    let gates: Vec<_> = (0..3)
        .map(|i| {
            let (run, gate) = gated(i);
            let handle = cmd.run(run).queue();
            gate.started.recv().unwrap();
            (handle, gate)
        })
        .collect();
    let pool = cmd.thread_pool_metrics().unwrap();
    assert_eq!(
        (
            pool.current_pool_size,
            pool.current_maximum_pool_size,
            pool.current_core_pool_size
        ),
        (3, 3, 1)
    );
    let err = cmd
        .run(|| Ok::<_, DependencyError>(9))
        .execute()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("(all 3 threads busy and 0 tasks queued)"),
        "{err}"
    );
    for (handle, gate) in gates {
        gate.release.send(()).unwrap();
        handle.get().unwrap();
    }

    // Without divergence the pool stays at coreSize (Hystrix: core 2, max 8 -> 2).
    let fixed = pooled(
        &test,
        "Fixed",
        "FixedPool",
        &[("coreSize", "2"), ("maximumSize", "8")],
    );
    let (run, gate) = gated(0);
    let (run_2, gate_2) = gated(0);
    let handles = [fixed.run(run).queue(), fixed.run(run_2).queue()];
    gate.started.recv().unwrap();
    gate_2.started.recv().unwrap();
    assert_eq!(
        fixed
            .thread_pool_metrics()
            .unwrap()
            .current_maximum_pool_size,
        2
    );
    assert!(fixed.run(|| Ok::<_, DependencyError>(9)).execute().is_err());
    gate.release.send(()).unwrap();
    gate_2.release.send(()).unwrap();
    for handle in handles {
        handle.get().unwrap();
    }
}

#[test]
fn queue_wait_counts_toward_the_timeout_and_a_queued_run_is_removed() {
    let test = TestRegistry::new();
    let cmd = pooled(
        &test,
        "Waits",
        "WaitPool",
        &[
            ("coreSize", "1"),
            ("maxQueueSize", "5"),
            ("queueSizeRejectionThreshold", "5"),
        ],
    );
    let (hold, gate) = gated(1);
    let holder = cmd.run(hold).timeout(Duration::from_secs(3600)).queue();
    gate.started.recv().unwrap();

    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let queued = cmd
        .run(move || {
            flag.store(true, Ordering::SeqCst);
            Ok::<_, DependencyError>(2)
        })
        .timeout(Duration::from_millis(100))
        .queue();
    assert_eq!(cmd.thread_pool_metrics().unwrap().current_queue_size, 1);

    test.advance(Duration::from_millis(99));
    assert!(!queued.is_done());
    test.advance(Duration::from_millis(1));
    let outcome = queued.get_outcome();
    assert_eq!(
        common::names(outcome.execution_result().execution_events()),
        ["TIMEOUT", "FALLBACK_MISSING"]
    );
    assert_eq!(outcome.execution_result().execution_time_ms(), Some(100));
    assert_eq!(outcome.into_response().unwrap_err().timeout_ms(), Some(100));
    // It left the queue and never runs.
    assert_eq!(cmd.thread_pool_metrics().unwrap().current_queue_size, 0);
    gate.release.send(()).unwrap();
    assert_eq!(holder.get().unwrap(), 1);
    assert!(!ran.load(Ordering::SeqCst));
    assert_eq!(
        cmd.thread_pool_metrics()
            .unwrap()
            .current_completed_task_count,
        1
    );
}

#[test]
fn a_hung_run_keeps_its_thread_while_the_caller_gets_a_timeout() {
    let test = TestRegistry::new();
    let cmd = pooled(&test, "Hangs", "HangPool", &[("coreSize", "1")]);
    let (started_tx, started) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    let (saw_tx, saw) = mpsc::channel();
    let caller = {
        let cmd = cmd.clone();
        std::thread::spawn(move || {
            cmd.run_cancellable(move |token: CancellationToken| {
                started_tx.send(()).unwrap();
                let _ = release_rx.recv(); // ignores the token, as a stuck client would
                saw_tx.send(token.is_cancelled()).unwrap();
                Ok::<_, DependencyError>(7)
            })
            .execute_outcome()
        })
    };
    started.recv().unwrap();
    wait_until(|| test.clock().pending_timers() > 0);
    test.advance(Duration::from_millis(1000));

    // The caller is answered at the deadline ...
    let outcome = caller.join().unwrap();
    assert_eq!(
        common::names(outcome.execution_result().execution_events()),
        ["TIMEOUT", "FALLBACK_MISSING"]
    );
    assert_eq!(outcome.execution_result().execution_time_ms(), Some(1000));
    // ... while the run still holds its pool thread (and counts as running).
    let pool = cmd.thread_pool_metrics().unwrap();
    assert_eq!((pool.current_active_count, pool.current_pool_size), (1, 1));
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 1);
    assert_eq!(
        cmd.run(|| Ok::<_, DependencyError>(1))
            .execute()
            .unwrap_err()
            .failure_type(),
        FailureType::RejectedThreadExecution
    );

    release.send(()).unwrap();
    // interruptOnTimeout (default true) cancelled its token; its late value was discarded.
    assert!(saw.recv().unwrap());
    wait_until(|| cmd.thread_pool_metrics().unwrap().current_active_count == 0);
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Success), 0);
    assert_eq!(
        cmd.run(|| Ok::<_, DependencyError>(1)).execute().unwrap(),
        1
    );
}

#[test]
fn panics_on_a_pool_thread_are_caught_and_the_thread_survives() {
    let test = TestRegistry::new();
    let cmd = pooled(&test, "Panics", "PanicPool", &[("coreSize", "1")]);
    let err = cmd
        .run(|| -> Result<u32, DependencyError> { panic!("boom on the pool") })
        .execute()
        .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::CommandException);
    assert_eq!(err.panic_message(), Some("boom on the pool"));
    let name = cmd
        .run(|| Ok::<_, DependencyError>(std::thread::current().name().unwrap().to_owned()))
        .execute()
        .unwrap();
    assert_eq!(name, "hystrix-PanicPool-1");
    let pool = cmd.thread_pool_metrics().unwrap();
    assert_eq!(
        (pool.current_pool_size, pool.current_largest_pool_size),
        (1, 1)
    );
    assert_eq!(pool.current_completed_task_count, 2);
}

#[test]
fn async_runs_under_thread_isolation_run_on_the_pool_runtime() {
    let test = TestRegistry::new();
    let cmd = Command::builder("AsyncOnPool")
        .group("AsyncPool")
        .isolation(IsolationStrategy::Thread)
        .build_in(test.registry())
        .unwrap();
    let outcome = cmd
        .run_async(async {
            tokio::task::yield_now().await;
            Ok::<_, DependencyError>(std::thread::current().name().unwrap().to_owned())
        })
        .execute_outcome();
    let result = *outcome.execution_result();
    assert!(
        outcome
            .into_response()
            .unwrap()
            .starts_with("hystrix-AsyncPool-async-")
    );
    assert_eq!(result.isolation(), IsolationStrategy::Thread);
    assert!(result.is_executed_in_thread());
    assert_eq!(
        cmd.thread_pool_metrics()
            .unwrap()
            .current_completed_task_count,
        1
    );
}

#[test]
fn a_blocking_async_client_on_one_pool_does_not_slow_another() {
    let test = TestRegistry::new();
    let thread = |key: &str, pool: &str| {
        Command::builder(key)
            .group(pool)
            .isolation(IsolationStrategy::Thread)
            .thread_pool_core_size(1)
            .timeout_enabled(false)
            .build_in(test.registry())
            .unwrap()
    };
    let misbehaving = thread("Misbehaving", "SickPool");
    let healthy = thread("Healthy", "HealthyPool");
    let (started_tx, started) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    // A client that blocks its runtime thread instead of awaiting.
    let stuck = misbehaving
        .run_async(async move {
            started_tx.send(()).unwrap();
            let _ = release_rx.recv();
            Ok::<_, DependencyError>(1)
        })
        .queue();
    started.recv().unwrap();
    let value = healthy
        .run_async(async {
            tokio::task::yield_now().await;
            Ok::<_, DependencyError>(2)
        })
        .execute()
        .unwrap();
    assert_eq!(value, 2);
    assert!(!stuck.is_done());
    release.send(()).unwrap();
    assert_eq!(stuck.get().unwrap(), 1);
}

#[test]
fn blocking_and_async_runs_share_one_pool_budget() {
    let test = TestRegistry::new();
    let async_cmd = Command::builder("AsyncSide")
        .group("SharedPool")
        .isolation(IsolationStrategy::Thread)
        .thread_pool_core_size(1)
        .timeout_enabled(false)
        .build_in(test.registry())
        .unwrap();
    let blocking_cmd = Command::builder("BlockingSide")
        .group("SharedPool")
        .build_in(test.registry())
        .unwrap();
    let pending = async_cmd
        .run_async(std::future::pending::<Result<u32, DependencyError>>())
        .queue();
    wait_until(|| {
        test.registry()
            .thread_pool_metrics("SharedPool")
            .is_some_and(|pool| pool.current_active_count == 1)
    });
    let err = blocking_cmd
        .run(|| Ok::<_, DependencyError>(1))
        .execute()
        .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::RejectedThreadExecution);

    assert!(pending.cancel());
    assert_eq!(
        pending.get().unwrap_err().failure_type(),
        FailureType::Cancelled
    );
    wait_until(|| {
        test.registry()
            .thread_pool_metrics("SharedPool")
            .is_some_and(|pool| pool.current_active_count == 0)
    });
    assert_eq!(
        blocking_cmd
            .run(|| Ok::<_, DependencyError>(1))
            .execute()
            .unwrap(),
        1
    );
    assert_eq!(
        async_cmd.metrics().cumulative_count(EventType::Cancelled),
        1
    );
}

#[test]
fn cancel_stops_an_execution_and_interrupts_only_when_configured() {
    let test = TestRegistry::new();
    for (interrupt, key) in [(false, "NoInterrupt"), (true, "Interrupt")] {
        let cmd = Command::builder(key)
            .group(format!("{key}Pool"))
            .property(
                "execution.isolation.thread.interruptOnFutureCancel",
                interrupt,
            )
            .build_in(test.registry())
            .unwrap();
        let (started_tx, started) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let (saw_tx, saw) = mpsc::channel();
        let handle = cmd
            .run_cancellable(move |token: CancellationToken| {
                started_tx.send(()).unwrap();
                let _ = release_rx.recv();
                saw_tx.send(token.is_cancelled()).unwrap();
                Ok::<_, DependencyError>(1)
            })
            .queue();
        started.recv().unwrap();
        assert!(handle.cancel());
        let outcome = handle.get_outcome();
        assert_eq!(
            outcome.into_response().unwrap_err().failure_type(),
            FailureType::Cancelled
        );
        wait_until(|| cmd.metrics().cumulative_count(EventType::Cancelled) == 1);
        release.send(()).unwrap();
        assert_eq!(saw.recv().unwrap(), interrupt);
    }
}

#[test]
fn a_dropped_handle_detaches_and_the_execution_goes_on() {
    let test = TestRegistry::new();
    let cmd = pooled(&test, "Detached", "DetachPool", &[("coreSize", "1")]);
    let (run, gate) = gated(5);
    drop(cmd.run(run).queue());
    gate.started.recv().unwrap();
    gate.release.send(()).unwrap();
    wait_until(|| cmd.metrics().cumulative_count(EventType::Success) == 1);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Cancelled), 0);
}

#[test]
fn get_timeout_waits_on_the_clock_and_leaves_the_handle_usable() {
    let test = TestRegistry::new();
    let cmd = pooled(&test, "Later", "LaterPool", &[("coreSize", "1")]);
    let (run, gate) = gated(8);
    let mut handle = cmd.run(run).timeout(Duration::from_secs(10)).queue();
    gate.started.recv().unwrap();
    let timers_before = test.clock().pending_timers();
    let clock = test.clock().clone();
    let advancer = std::thread::spawn(move || {
        wait_until(|| clock.pending_timers() > timers_before);
        clock.advance(Duration::from_millis(50));
    });
    assert!(handle.get_timeout(Duration::from_millis(50)).is_none());
    advancer.join().unwrap();
    gate.release.send(()).unwrap();
    assert_eq!(
        handle.get_timeout(Duration::from_secs(1)).unwrap().unwrap(),
        8
    );
}

#[test]
fn shutdown_joins_pool_threads_and_refuses_new_work() {
    let test = TestRegistry::new();
    let cmd = pooled(&test, "ShutMe", "Shut", &[("coreSize", "2")]);
    cmd.run(|| Ok::<_, DependencyError>(1)).execute().unwrap();
    assert_eq!(threads_named("hystrix-Shut-"), 1);
    test.registry().shutdown();
    // shutdown() returned after the threads left; they are joined and gone.
    assert_eq!(cmd.thread_pool_metrics().unwrap().current_pool_size, 0);
    wait_for_no_threads_named("hystrix-Shut-");
    let err = cmd
        .run(|| Ok::<_, DependencyError>(1))
        .execute()
        .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::RejectedThreadExecution);
    assert_eq!(
        err.to_string(),
        "command ShutMe could not be queued for execution on thread pool Shut (the registry is \
         shutting down) and no fallback available"
    );
}

#[test]
fn dropping_an_isolated_registry_joins_its_threads() {
    {
        let registry = Registry::builder()
            .clock(hystrix::clock::ManualClock::new())
            .build();
        let cmd = Command::builder("Dropped")
            .group("Dropped")
            .build_in(&registry)
            .unwrap();
        cmd.run(|| Ok::<_, DependencyError>(1)).execute().unwrap();
        assert_eq!(threads_named("hystrix-Dropped"), 1);
        drop(cmd);
    }
    wait_for_no_threads_named("hystrix-Dropped");
}

#[test]
fn a_queued_execution_times_out_and_falls_back_with_nobody_waiting() {
    let test = TestRegistry::new();
    let cmd = pooled(&test, "Unwatched", "UnwatchedPool", &[("coreSize", "1")]);
    let (fell_back_tx, fell_back) = mpsc::channel();
    let handle = cmd
        .run_cancellable(|token: CancellationToken| {
            while !token.is_cancelled() {
                std::thread::yield_now();
            }
            Ok::<_, DependencyError>(1)
        })
        .timeout(Duration::from_millis(200))
        .fallback(move |err: &Error| {
            fell_back_tx.send(err.failure_type()).unwrap();
            Ok::<_, DependencyError>(2)
        })
        .queue();
    wait_until(|| test.clock().pending_timers() > 0);
    test.advance(Duration::from_millis(200));
    // The fallback ran on the registry's executor; the handle was never polled.
    assert_eq!(fell_back.recv().unwrap(), FailureType::Timeout);
    // The outcome is counted before the handle is completed.
    wait_until(|| handle.is_done());
    assert_eq!(cmd.metrics().cumulative_count(EventType::Timeout), 1);
    assert_eq!(
        cmd.metrics().cumulative_count(EventType::FallbackSuccess),
        1
    );
    assert_eq!(handle.get().unwrap(), 2);
}

// ------------------------------------------------------------------------------------------------
// Found by a new-user trial; each test failed before its fix.

#[test]
fn keep_alive_zero_ends_an_idle_thread_above_core_size_without_deadlock() {
    let test = TestRegistry::new();
    let cmd = pooled(
        &test,
        "KeepAliveZero",
        "KeepAliveZeroPool",
        &[
            ("coreSize", "1"),
            ("maximumSize", "2"),
            ("allowMaximumSizeToDivergeFromCoreSize", "true"),
            ("keepAliveTimeMinutes", "0"),
        ],
    );
    let (run, gate) = gated(1);
    let held = cmd.run(run).queue();
    gate.started.recv().unwrap();
    // A second thread serves this one, then is idle above coreSize: it ends at once.
    assert_eq!(
        cmd.run(|| Ok::<_, DependencyError>(2)).execute().unwrap(),
        2
    );
    wait_until(|| cmd.thread_pool_metrics().unwrap().current_pool_size == 1);
    gate.release.send(()).unwrap();
    assert_eq!(held.get().unwrap(), 1);
}

#[test]
fn lowering_core_size_lets_idle_threads_end_after_keep_alive() {
    let test = TestRegistry::new();
    let cmd = pooled(&test, "Shrinks", "ShrinkPool", &[("coreSize", "2")]);
    let (run_a, gate_a) = gated(1);
    let (run_b, gate_b) = gated(2);
    let handles = [cmd.run(run_a).queue(), cmd.run(run_b).queue()];
    gate_a.started.recv().unwrap();
    gate_b.started.recv().unwrap();
    gate_a.release.send(()).unwrap();
    gate_b.release.send(()).unwrap();
    for handle in handles {
        handle.get().unwrap();
    }
    test.registry()
        .properties()
        .set("hystrix.threadpool.ShrinkPool.coreSize", 1)
        .unwrap();
    // The next schedule wakes the idle threads above the new coreSize; they arm keep-alive.
    cmd.run(|| Ok::<_, DependencyError>(3)).execute().unwrap();
    wait_until(|| test.clock().pending_timers() > 0);
    test.advance(Duration::from_secs(60));
    wait_until(|| cmd.thread_pool_metrics().unwrap().current_pool_size == 1);
}

#[test]
fn thread_runs_do_not_use_up_the_semaphore_of_the_same_key() {
    let test = TestRegistry::new();
    let cmd = Command::builder("Mixed")
        .group("MixedPool")
        .semaphore_max_concurrent_requests(1)
        .build_in(test.registry())
        .unwrap();
    let (run, gate) = gated(1);
    let on_pool = cmd.run(run).queue(); // a blocking run: THREAD
    gate.started.recv().unwrap();
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 1);
    // An async run of the same key: SEMAPHORE, whose one permit is free.
    let value = futures::executor::block_on(
        cmd.run_async(async { Ok::<_, DependencyError>(2) })
            .execute_async(),
    );
    assert_eq!(value.unwrap(), 2);
    gate.release.send(()).unwrap();
    assert_eq!(on_pool.get().unwrap(), 1);
}

#[test]
fn async_runs_using_tokio_work_from_plain_threads() {
    // Real time, but only the outcome is asserted: a 5 ms sleep under a 10 s timeout.
    let registry = Registry::new();
    let cmd = Command::builder("UsesTokio")
        .group("Tokio")
        .timeout(Duration::from_secs(10))
        .build_in(&registry)
        .unwrap();
    let sleepy = || async {
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok::<_, DependencyError>(5)
    };
    assert_eq!(cmd.run_async(sleepy()).execute().unwrap(), 5);
    assert_eq!(cmd.run_async(sleepy()).queue().get().unwrap(), 5);
    let mut stream = cmd.run_async(sleepy()).observe();
    assert_eq!(
        futures::executor::block_on(futures::StreamExt::next(&mut stream))
            .unwrap()
            .unwrap(),
        5
    );
}

#[test]
fn get_inside_a_current_thread_runtime_is_refused_and_works_in_a_multi_threaded_one() {
    let registry = Registry::new();
    let cmd = Command::builder("GetInRuntime")
        .group("GetInRuntime")
        .timeout(Duration::from_secs(10))
        .build_in(&registry)
        .unwrap();
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = current.block_on(async {
        cmd.run_async(async {
            tokio::task::yield_now().await;
            Ok::<_, DependencyError>(1)
        })
        .queue()
        .get()
    });
    let err = err.unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Misuse);
    assert_eq!(
        err.to_string(),
        "command GetInRuntime was waited on with a blocking get() inside a current-thread tokio \
         runtime, which could not run anything meanwhile; await the handle instead"
    );
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let value = multi.block_on(async {
        cmd.run_async(async {
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok::<_, DependencyError>(2)
        })
        .queue()
        .get()
    });
    assert_eq!(value.unwrap(), 2);
}

#[test]
fn shutdown_lets_a_running_pool_task_finish_and_answer_its_handle() {
    let test = TestRegistry::new();
    let cmd = pooled(&test, "Finishes", "FinishPool", &[("coreSize", "1")]);
    let (run, gate) = gated(9);
    let handle = cmd.run(run).queue();
    gate.started.recv().unwrap();
    let registry = test.registry().clone();
    let shutting_down = std::thread::spawn(move || registry.shutdown());
    gate.release.send(()).unwrap();
    shutting_down.join().unwrap();
    assert_eq!(handle.get().unwrap(), 9);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Success), 1);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Cancelled), 0);
}

#[test]
fn a_command_keeps_its_registry_alive() {
    let cmd = Command::builder("Outlives")
        .group("Outlives")
        .build_in(&Registry::new())
        .unwrap();
    assert_eq!(
        cmd.run(|| Ok::<_, DependencyError>(1)).execute().unwrap(),
        1
    );
}

#[test]
fn the_last_command_dropped_on_its_own_pool_thread_does_not_wait_for_itself() {
    let registry = Registry::builder()
        .clock(hystrix::clock::ManualClock::new())
        .shutdown_timeout(Duration::from_secs(3600))
        .build();
    let cmd = Command::builder("SelfDrop")
        .group("SelfDrop")
        .build_in(&registry)
        .unwrap();
    drop(registry);
    let (done_tx, done) = mpsc::channel();
    std::thread::spawn(move || {
        let last = cmd.clone();
        // The run owns the last command: dropping it on the pool thread shuts the pools down.
        let handle = cmd.run(move || {
            drop(last);
            Ok::<_, DependencyError>(1)
        });
        let value = handle.execute();
        drop(cmd);
        done_tx.send(value.unwrap()).unwrap();
    });
    // Waiting for itself would take an hour; the bound only turns a hang into a failure.
    assert_eq!(done.recv_timeout(Duration::from_secs(30)).unwrap(), 1);
}

#[test]
fn a_queued_execution_whose_executor_is_gone_says_why() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let registry = Registry::builder()
        .executor(runtime.handle().clone())
        .build();
    drop(runtime);
    let cmd = Command::builder("NoExecutor")
        .group("NoExecutor")
        .build_in(&registry)
        .unwrap();
    let err = cmd
        .run(|| Ok::<_, DependencyError>(1))
        .queue()
        .get()
        .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Cancelled);
    assert_eq!(
        err.to_string(),
        "command NoExecutor was cancelled: the registry's executor stopped before it ended (the \
         registry was shut down, or the runtime given as its executor is gone)"
    );
}

#[test]
fn an_abandoned_trial_keeps_its_slot_while_its_blocking_run_goes_on() {
    let test = TestRegistry::new();
    let cmd = pooled(&test, "AbandonedTrial", "TrialPool", &[("coreSize", "4")]);
    let breaker = cmd.circuit_breaker();
    breaker.force_open();
    test.advance(Duration::from_millis(5001));
    let (run, gate) = gated(1);
    let mut trial = Box::pin(cmd.run(run).execute_async());
    assert!(common::poll_once(trial.as_mut()).is_pending());
    gate.started.recv().unwrap();
    // The caller gives up (as a client timeout would); the run still calls the dependency.
    drop(trial);
    assert_eq!(breaker.status(), hystrix::Status::HalfOpen);
    for _ in 0..3 {
        let err = cmd
            .run(|| Ok::<u32, DependencyError>(2))
            .execute()
            .unwrap_err();
        assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    }
    // When the run stops, its slot comes back and the next call is the trial.
    gate.release.send(()).unwrap();
    wait_until(|| cmd.run(|| Ok::<u32, DependencyError>(3)).execute().is_ok());
    assert_eq!(breaker.status(), hystrix::Status::Closed);
    let metrics = cmd.metrics();
    assert_eq!(metrics.cumulative_count(EventType::Cancelled), 1);
    assert_eq!(metrics.cumulative_count(EventType::Success), 1);
}

// ------------------------------------------------------------------------------------------------
// Issue 20, item 1: a queued task answered CANCELLED or TIMEOUT never starts. Each test failed
// before its fix (the run was called in about 40 % of the rounds).

/// A run that records that it was called.
fn recorded(ran: &Arc<AtomicBool>) -> impl FnOnce() -> Result<u32, DependencyError> + Send + use<> {
    let ran = Arc::clone(ran);
    move || {
        ran.store(true, Ordering::SeqCst);
        Ok(2)
    }
}

/// Waits until every task queued on `cmd`'s pool so far has been taken: a marker task queued
/// behind them has run (the queue is FIFO).
fn drain_pool(cmd: &Command) {
    assert_eq!(
        cmd.run(|| Ok::<_, DependencyError>(0))
            .queue()
            .get()
            .unwrap(),
        0
    );
}

#[test]
fn a_queued_task_cancelled_by_its_handle_never_runs() {
    let test = TestRegistry::new();
    let cmd = pooled(
        &test,
        "CancelQueued",
        "CancelQueuedPool",
        &[("coreSize", "1"), ("maxQueueSize", "5")],
    );
    for round in 0..300 {
        let (hold, gate) = gated(1);
        let holder = cmd.run(hold).queue();
        gate.started.recv().unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let queued = cmd.run(recorded(&ran)).queue();
        assert_eq!(cmd.thread_pool_metrics().unwrap().current_queue_size, 1);

        assert!(queued.cancel());
        // Out of the queue before cancel() returned, not when the executor drops the task.
        assert_eq!(cmd.thread_pool_metrics().unwrap().current_queue_size, 0);
        gate.release.send(()).unwrap();
        assert_eq!(
            queued.get().unwrap_err().failure_type(),
            FailureType::Cancelled
        );
        assert_eq!(holder.get().unwrap(), 1);
        drain_pool(&cmd);
        assert!(
            !ran.load(Ordering::SeqCst),
            "round {round}: a cancelled task ran"
        );
    }
    assert_eq!(cmd.metrics().cumulative_count(EventType::Cancelled), 300);
}

#[test]
fn a_queued_task_past_its_deadline_never_runs_when_a_thread_frees_at_that_instant() {
    let test = TestRegistry::new();
    // Every round times out twice: the breaker stays out of it.
    let cmd = Command::builder("ExpireQueued")
        .group("ExpireQueuedPool")
        .property("circuitBreaker.enabled", false)
        .thread_pool_property("coreSize", 1)
        .thread_pool_property("maxQueueSize", 5)
        .build_in(test.registry())
        .unwrap();
    for round in 0..300 {
        // The running task ends as soon as its deadline cancels its token: the same instant the
        // queued one's deadline passes.
        let (started_tx, started) = mpsc::channel();
        let holder = cmd
            .run_cancellable(move |token: CancellationToken| {
                started_tx.send(()).unwrap();
                while !token.is_cancelled() {
                    std::thread::yield_now();
                }
                Ok::<_, DependencyError>(1)
            })
            .timeout(Duration::from_millis(100))
            .queue();
        started.recv().unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let queued = cmd
            .run(recorded(&ran))
            .timeout(Duration::from_millis(100))
            .queue();
        assert_eq!(cmd.thread_pool_metrics().unwrap().current_queue_size, 1);

        test.advance(Duration::from_millis(100));
        // Withdrawn by its deadline's timer, inside advance().
        assert_eq!(cmd.thread_pool_metrics().unwrap().current_queue_size, 0);
        assert_eq!(
            queued.get().unwrap_err().failure_type(),
            FailureType::Timeout
        );
        assert_eq!(
            holder.get().unwrap_err().failure_type(),
            FailureType::Timeout
        );
        drain_pool(&cmd);
        assert!(
            !ran.load(Ordering::SeqCst),
            "round {round}: a timed-out task ran"
        );
    }
    assert_eq!(cmd.metrics().cumulative_count(EventType::Timeout), 600);
}

/// Found by a fresh user's trial: a queued run that timed out or was cancelled in the queue was
/// counted as executed in a thread (the pool's threadsExecuted, `is_executed_in_thread`). Failed
/// before the fix: 3 threads executed where 1 ran, and the timed-out one said it ran in a thread.
#[test]
fn runs_that_never_left_the_queue_are_not_counted_as_executed_in_a_thread() {
    let test = TestRegistry::new();
    let cmd = pooled(
        &test,
        "NeverRan",
        "NeverRanPool",
        &[("coreSize", "1"), ("maxQueueSize", "5")],
    );
    let (hold, gate) = gated(1);
    let holder = cmd.run(hold).timeout(Duration::from_secs(3600)).queue();
    gate.started.recv().unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let timed_out = cmd
        .run(recorded(&ran))
        .timeout(Duration::from_millis(50))
        .queue();
    let cancelled = cmd
        .run(recorded(&ran))
        .timeout(Duration::from_secs(3600))
        .queue();
    assert!(cancelled.cancel());
    test.advance(Duration::from_millis(50));
    let outcome = timed_out.get_outcome();
    assert_eq!(
        common::names(outcome.execution_result().execution_events()),
        ["TIMEOUT", "FALLBACK_MISSING"]
    );
    assert!(!outcome.execution_result().is_executed_in_thread());
    gate.release.send(()).unwrap();
    let held = holder.get_outcome();
    assert!(held.execution_result().is_executed_in_thread());
    wait_until(|| cmd.metrics().cumulative_count(EventType::Cancelled) == 1);
    assert!(!ran.load(Ordering::SeqCst));
    let pool = cmd.thread_pool_metrics().unwrap();
    assert_eq!(pool.cumulative_count_threads_executed, 1);
    assert_eq!(pool.current_completed_task_count, 1);
}
