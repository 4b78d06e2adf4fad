//! Stream commands (Hystrix's `HystrixObservableCommand`, SPEC §3.9 and Part A 20): values,
//! failures and fallback streams, timeouts to the first value and between values, panics,
//! short-circuits, rejections, cancellation and what metrics and the request log see.
//!
//! Most behaviours are checked in both modes: cold (`to_observable`, polled here) and hot
//! (`observe`, driven on the registry's executor). Time moves only on the manual clock.

#![allow(clippy::unwrap_used)]

mod common;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use common::{DependencyError, builder, command};
use futures::executor::block_on;
use futures::stream::{self, BoxStream, Stream, StreamExt};
use hystrix::command::{STREAM_BUFFER_CAPACITY, StreamExecution, StreamFallback};
use hystrix::context::RequestContext;
use hystrix::testing::TestRegistry;
use hystrix::{
    Class, Classify, EventType, ExecutionResult, FailureType, FallbackFailure, HystrixError,
    IsolationStrategy,
};

type Error = HystrixError<DependencyError>;
type Item = Result<u32, Error>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `to_observable()`, polled on this thread.
    Cold,
    /// `observe()`, driven on the registry's executor.
    Hot,
}

const MODES: [Mode; 2] = [Mode::Cold, Mode::Hot];

/// A run stream of these results, then its end.
fn values(items: &[Result<u32, &'static str>]) -> BoxStream<'static, Result<u32, DependencyError>> {
    let items: Vec<_> = items
        .iter()
        .map(|item| item.map_err(DependencyError))
        .collect();
    stream::iter(items).boxed()
}

/// A run stream of these values that then never ends.
fn then_hang(items: &'static [u32]) -> BoxStream<'static, Result<u32, DependencyError>> {
    stream::iter(items.iter().copied().map(Ok))
        .chain(stream::pending())
        .boxed()
}

/// A fallback stream of these values (its error type is the fallback's own).
fn fallback_of(
    items: &'static [u32],
) -> impl FnOnce(&Error) -> BoxStream<'static, Result<u32, DependencyError>> + Send + 'static {
    move |_err| stream::iter(items.iter().copied().map(Ok)).boxed()
}

/// Consumes the execution in `mode` (the clock moves by `advance` once the execution waits
/// for it, if given) and returns every item and the execution result.
fn drain<C, S, FB>(
    test: &TestRegistry,
    mode: Mode,
    execution: StreamExecution<'_, C, S, FB>,
    advance: Option<Duration>,
) -> (Vec<Item>, ExecutionResult)
where
    S: Stream<Item = Result<u32, DependencyError>> + Send + 'static,
    FB: StreamFallback<u32, DependencyError> + Send + 'static,
    FB::Stream: Send + 'static,
    C: Classify<DependencyError> + Clone + Send + Sync + 'static,
{
    match mode {
        Mode::Cold => {
            let mut stream = Box::pin(execution.to_observable());
            let mut items = Vec::new();
            if let Some(advance) = advance {
                while let Poll::Ready(item) = poll_next_once(stream.as_mut()) {
                    items.push(item.expect("the stream waits for the clock"));
                }
                test.advance(advance);
            }
            items.extend(block_on(stream.by_ref().collect::<Vec<_>>()));
            (items, stream.execution_result().unwrap())
        }
        Mode::Hot => {
            let mut stream = execution.observe();
            if let Some(advance) = advance {
                test.advance(advance);
            }
            let items = block_on(stream.by_ref().collect::<Vec<_>>());
            (items, stream.execution_result().unwrap())
        }
    }
}

/// The values of `items`, which must hold no error.
fn ok_values(items: Vec<Item>) -> Vec<u32> {
    items
        .into_iter()
        .map(|item| item.unwrap_or_else(|err| panic!("unexpected error: {err}")))
        .collect()
}

/// Polls a stream once with a no-op waker (deterministic stepping).
fn poll_next_once<S: Stream + ?Sized>(stream: Pin<&mut S>) -> Poll<Option<S::Item>> {
    let waker = futures::task::noop_waker();
    stream.poll_next(&mut std::task::Context::from_waker(&waker))
}

/// The values of `items` up to the first error, and that error.
fn split(items: Vec<Item>) -> (Vec<u32>, Option<Error>) {
    let mut values = Vec::new();
    for item in items {
        match item {
            Ok(value) => values.push(value),
            Err(err) => return (values, Some(err)),
        }
    }
    (values, None)
}

fn events(result: &ExecutionResult) -> String {
    format!("{:?}", result.execution_events())
}

/// Sets its flag when dropped: shows when a run stream is dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Waits (up to 5 s of real time) for work on another thread to show.
fn wait_until(mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "timed out waiting"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn values_then_end_are_emits_and_a_success() {
    for mode in MODES {
        let test = TestRegistry::new();
        let cmd = command(&test, "Prices");
        let (items, result) = drain(
            &test,
            mode,
            cmd.run_stream(values(&[Ok(1), Ok(2), Ok(3)])),
            None,
        );
        assert_eq!(ok_values(items), [1, 2, 3], "{mode:?}");
        assert_eq!(events(&result), "[EMITx3, SUCCESS]", "{mode:?}");
        assert_eq!(result.execution_events().count(EventType::Emit), 3);
        assert_eq!(result.execution_time_ms(), Some(0));
        assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
    }
}

#[test]
fn values_before_a_failure_stay_delivered_and_the_fallback_stream_follows() {
    for mode in MODES {
        let test = TestRegistry::new();
        let cmd = command(&test, "Quotes");
        let execution = cmd
            .run_stream(values(&[Ok(1), Ok(2), Err("feed lost")]))
            .fallback_stream(|err: &Error| {
                assert_eq!(err.failure_type(), FailureType::CommandException);
                assert_eq!(err.cause(), Some(&DependencyError("feed lost")));
                stream::iter([Ok::<u32, DependencyError>(10), Ok(11)])
            });
        let (items, result) = drain(&test, mode, execution, None);
        assert_eq!(ok_values(items), [1, 2, 10, 11], "{mode:?}");
        assert_eq!(
            events(&result),
            "[EMITx2, FAILURE, FALLBACK_EMITx2, FALLBACK_SUCCESS]",
            "{mode:?}"
        );
        assert!(result.is_response_from_fallback());
    }
}

#[test]
fn a_failure_without_fallback_ends_with_one_error() {
    for mode in MODES {
        let test = TestRegistry::new();
        let cmd = command(&test, "NoFallback");
        let (items, result) = drain(
            &test,
            mode,
            cmd.run_stream(values(&[Ok(1), Err("feed lost"), Ok(99)])),
            None,
        );
        assert_eq!(items.len(), 2, "{mode:?}: the stream ends after the error");
        let (values, err) = split(items);
        assert_eq!(values, [1]);
        let err = err.unwrap();
        assert_eq!(err.failure_type(), FailureType::CommandException);
        assert_eq!(err.cause(), Some(&DependencyError("feed lost")));
        assert!(matches!(
            err.fallback_failure(),
            Some(FallbackFailure::Missing)
        ));
        assert_eq!(events(&result), "[EMIT, FAILURE, FALLBACK_MISSING]");
    }
}

#[test]
fn a_failing_fallback_stream_is_a_fallback_failure_after_its_values() {
    for mode in MODES {
        let test = TestRegistry::new();
        let cmd = command(&test, "FallbackFails");
        let execution = cmd
            .run_stream(values(&[Ok(1), Err("feed lost")]))
            .fallback_stream(|_err: &Error| {
                stream::iter([Ok(10), Err(DependencyError("cache down"))])
            });
        let (items, result) = drain(&test, mode, execution, None);
        let (values, err) = split(items);
        assert_eq!(values, [1, 10], "{mode:?}");
        let err = err.unwrap();
        assert_eq!(err.failure_type(), FailureType::CommandException);
        assert_eq!(err.cause(), Some(&DependencyError("feed lost")));
        assert_eq!(err.fallback_error().unwrap().to_string(), "cache down");
        assert_eq!(
            events(&result),
            "[EMIT, FAILURE, FALLBACK_EMIT, FALLBACK_FAILURE]"
        );
    }
}

#[test]
fn no_first_value_before_the_timeout_is_a_timeout_and_the_run_is_dropped() {
    for mode in MODES {
        let test = TestRegistry::new();
        let cmd = builder("Slow")
            .timeout(Duration::from_millis(250))
            .build_in(test.registry())
            .unwrap();
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = DropFlag(Arc::clone(&dropped));
        let run = stream::pending::<Result<u32, DependencyError>>().map(move |item| {
            let _flag = &flag;
            item
        });
        let execution = cmd.run_stream(run).fallback_stream(|err: &Error| {
            assert_eq!(err.failure_type(), FailureType::Timeout);
            assert_eq!(err.timeout_ms(), Some(250));
            stream::iter([Ok::<u32, DependencyError>(7), Ok(8)])
        });
        let (items, result) = drain(&test, mode, execution, Some(Duration::from_millis(250)));
        assert_eq!(ok_values(items), [7, 8], "{mode:?}");
        assert_eq!(
            events(&result),
            "[TIMEOUT, FALLBACK_EMITx2, FALLBACK_SUCCESS]"
        );
        assert_eq!(result.execution_time_ms(), Some(250));
        assert!(
            dropped.load(Ordering::SeqCst),
            "{mode:?}: the run is dropped"
        );
        assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
        assert_eq!(test.clock().pending_timers(), 0);
    }
}

#[test]
fn the_timeout_bounds_only_the_first_value() {
    let test = TestRegistry::new();
    let cmd = builder("OnceThenSlow")
        .timeout(Duration::from_millis(100))
        .build_in(test.registry())
        .unwrap();
    let (tx, rx) = futures::channel::mpsc::unbounded::<Result<u32, DependencyError>>();
    tx.unbounded_send(Ok(1)).unwrap();
    let mut stream = Box::pin(cmd.run_stream(rx).to_observable());
    assert!(matches!(
        poll_next_once(stream.as_mut()),
        Poll::Ready(Some(Ok(1)))
    ));
    assert!(poll_next_once(stream.as_mut()).is_pending());
    assert_eq!(
        test.clock().pending_timers(),
        0,
        "no timer after the first value"
    );
    test.advance(Duration::from_secs(60));
    tx.unbounded_send(Ok(2)).unwrap();
    drop(tx);
    let rest: Vec<_> = block_on(stream.by_ref().collect());
    assert_eq!(ok_values(rest), [2]);
    let result = stream.execution_result().unwrap();
    assert_eq!(events(&result), "[EMITx2, SUCCESS]");
    assert_eq!(result.execution_time_ms(), Some(60_000));
}

#[test]
fn a_gap_longer_than_the_idle_timeout_is_a_timeout_after_the_values_before() {
    for mode in MODES {
        let test = TestRegistry::new();
        let cmd = command(&test, "Idle");
        let execution = cmd
            .run_stream(then_hang(&[1]))
            .idle_timeout(Duration::from_millis(40))
            .fallback_stream(|err: &Error| {
                assert_eq!(err.failure_type(), FailureType::Timeout);
                assert_eq!(err.timeout_ms(), Some(40));
                stream::iter([Ok::<u32, DependencyError>(10), Ok(11)])
            });
        let (items, result) = drain(&test, mode, execution, Some(Duration::from_millis(40)));
        assert_eq!(ok_values(items), [1, 10, 11], "{mode:?}");
        assert_eq!(
            events(&result),
            "[EMIT, TIMEOUT, FALLBACK_EMITx2, FALLBACK_SUCCESS]"
        );
        assert_eq!(result.execution_time_ms(), Some(40));
    }
}

#[test]
fn a_zero_idle_timeout_is_refused() {
    let test = TestRegistry::new();
    let cmd = command(&test, "ZeroIdle");
    let items: Vec<_> = block_on(
        cmd.run_stream(values(&[Ok(1)]))
            .idle_timeout(Duration::ZERO)
            .to_observable()
            .collect(),
    );
    let (values, err) = split(items);
    assert!(values.is_empty());
    assert_eq!(err.unwrap().failure_type(), FailureType::Misuse);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Emit), 0);
}

#[test]
fn a_panic_in_the_run_stream_is_a_failure_with_its_message() {
    for mode in MODES {
        let test = TestRegistry::new();
        let cmd = command(&test, "Panics");
        let run = stream::iter([Ok(1)])
            .chain(stream::poll_fn(
                |_| -> Poll<Option<Result<u32, DependencyError>>> { panic!("feed exploded") },
            ))
            .boxed();
        let (items, result) = drain(&test, mode, cmd.run_stream(run), None);
        let (values, err) = split(items);
        assert_eq!(values, [1], "{mode:?}");
        let err = err.unwrap();
        assert_eq!(err.failure_type(), FailureType::CommandException);
        assert_eq!(err.panic_message(), Some("feed exploded"));
        assert_eq!(events(&result), "[EMIT, FAILURE, FALLBACK_MISSING]");
    }
}

#[test]
fn a_panicking_fallback_stream_is_a_fallback_failure() {
    let test = TestRegistry::new();
    let cmd = command(&test, "FallbackPanics");
    let items: Vec<_> = block_on(
        cmd.run_stream(values(&[Err("down")]))
            .fallback_stream(|_err: &Error| {
                stream::poll_fn(|_| -> Poll<Option<Result<u32, DependencyError>>> {
                    panic!("fallback exploded")
                })
            })
            .to_observable()
            .collect(),
    );
    let (_, err) = split(items);
    assert!(matches!(
        err.unwrap().fallback_failure(),
        Some(FallbackFailure::Panicked(message)) if message == "fallback exploded"
    ));
    assert_eq!(
        cmd.metrics().cumulative_count(EventType::FallbackFailure),
        1
    );
}

#[test]
fn a_short_circuit_goes_to_the_fallback_stream_without_running() {
    for mode in MODES {
        let test = TestRegistry::new();
        let cmd = command(&test, "Open");
        cmd.circuit_breaker().force_open();
        let ran = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ran);
        let run = stream::once(async move {
            flag.store(true, Ordering::SeqCst);
            Ok::<u32, DependencyError>(1)
        });
        let execution = cmd.run_stream(run).fallback_stream(|err: &Error| {
            assert_eq!(err.failure_type(), FailureType::ShortCircuit);
            stream::iter([Ok::<u32, DependencyError>(5), Ok(6)])
        });
        let (items, result) = drain(&test, mode, execution, None);
        assert_eq!(ok_values(items), [5, 6], "{mode:?}");
        assert_eq!(
            events(&result),
            "[SHORT_CIRCUITED, FALLBACK_EMITx2, FALLBACK_SUCCESS]"
        );
        assert_eq!(result.execution_time_ms(), None);
        assert!(!ran.load(Ordering::SeqCst));
    }
}

#[test]
fn an_open_stream_holds_its_permit_so_the_next_is_semaphore_rejected() {
    for mode in MODES {
        let test = TestRegistry::new();
        let cmd = builder("OnePermit")
            .semaphore_max_concurrent_requests(1)
            .timeout_enabled(false)
            .build_in(test.registry())
            .unwrap();
        let mut held = Box::pin(cmd.run_stream(then_hang(&[1])).to_observable());
        assert!(matches!(
            poll_next_once(held.as_mut()),
            Poll::Ready(Some(Ok(1)))
        ));
        assert!(poll_next_once(held.as_mut()).is_pending());
        assert_eq!(cmd.metrics().current_concurrent_execution_count(), 1);

        let execution = cmd
            .run_stream(values(&[Ok(1)]))
            .fallback_stream(|err: &Error| {
                assert_eq!(err.failure_type(), FailureType::RejectedSemaphoreExecution);
                stream::iter([Ok::<u32, DependencyError>(0)])
            });
        let (items, result) = drain(&test, mode, execution, None);
        assert_eq!(ok_values(items), [0], "{mode:?}");
        assert_eq!(
            events(&result),
            "[SEMAPHORE_REJECTED, FALLBACK_EMIT, FALLBACK_SUCCESS]"
        );

        drop(held);
        assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
        let (items, _) = drain(&test, mode, cmd.run_stream(values(&[Ok(2)])), None);
        assert_eq!(ok_values(items), [2], "{mode:?}: the permit is free again");
    }
}

#[test]
fn dropping_a_cold_stream_midway_cancels_it_and_frees_its_permit() {
    let test = TestRegistry::new();
    let cmd = command(&test, "Dropped");
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(Arc::clone(&dropped));
    let run = then_hang(&[1, 2]).map(move |item| {
        let _flag = &flag;
        item
    });
    let mut stream = Box::pin(cmd.run_stream(run).to_observable());
    assert!(matches!(
        poll_next_once(stream.as_mut()),
        Poll::Ready(Some(Ok(1)))
    ));
    assert!(matches!(
        poll_next_once(stream.as_mut()),
        Poll::Ready(Some(Ok(2)))
    ));
    assert!(poll_next_once(stream.as_mut()).is_pending());
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 1);
    test.advance(Duration::from_millis(30));

    drop(stream);
    assert!(dropped.load(Ordering::SeqCst));
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
    assert_eq!(test.clock().pending_timers(), 0);
    let metrics = cmd.metrics();
    assert_eq!(metrics.cumulative_count(EventType::Emit), 2);
    assert_eq!(metrics.cumulative_count(EventType::Cancelled), 1);
    assert_eq!(metrics.cumulative_count(EventType::Success), 0);
}

#[test]
fn a_cold_stream_dropped_unpolled_records_nothing() {
    let test = TestRegistry::new();
    let cmd = command(&test, "Unpolled");
    drop(cmd.run_stream(values(&[Ok(1)])).to_observable());
    assert_eq!(cmd.metrics().cumulative_count(EventType::Cancelled), 0);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Emit), 0);
}

#[test]
fn observe_starts_at_once_and_cancel_stops_it() {
    let test = TestRegistry::new();
    let cmd = builder("Hot")
        .timeout_enabled(false)
        .build_in(test.registry())
        .unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(Arc::clone(&dropped));
    let run = then_hang(&[1, 2]).map(move |item| {
        let _flag = &flag;
        item
    });
    let mut observed = cmd.run_stream(run).observe();
    // Nobody polled it, yet it runs: it holds its permit, its ready values wait in its buffer.
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 1);
    assert_eq!(observed.execution_result(), None);

    assert!(observed.cancel());
    let items: Vec<_> = block_on(observed.by_ref().collect());
    let (values, err) = split(items);
    assert_eq!(values, [1, 2]);
    assert_eq!(err.unwrap().failure_type(), FailureType::Cancelled);
    let result = observed.execution_result().unwrap();
    assert_eq!(events(&result), "[EMITx2, CANCELLED]");
    assert!(dropped.load(Ordering::SeqCst));
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
    assert!(!observed.cancel(), "nothing left to cancel");
}

#[test]
fn a_dropped_observed_stream_detaches_and_the_execution_is_counted() {
    let test = TestRegistry::new();
    let cmd = command(&test, "Detached");
    let (tx, rx) = futures::channel::mpsc::unbounded::<Result<u32, DependencyError>>();
    let observed = cmd.run_stream(rx).observe();
    drop(observed);
    tx.unbounded_send(Ok(1)).unwrap();
    drop(tx);
    wait_until(|| cmd.metrics().cumulative_count(EventType::Success) == 1);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Emit), 1);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Cancelled), 0);
}

#[test]
fn a_bad_request_ends_the_stream_without_fallback() {
    for mode in MODES {
        let test = TestRegistry::new();
        let cmd = builder("BadInput")
            .classify(|_: &DependencyError| Class::BadRequest)
            .build_in(test.registry())
            .unwrap();
        let called = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&called);
        let execution = cmd
            .run_stream(values(&[Ok(1), Err("no such symbol")]))
            .fallback_stream(move |_err: &Error| {
                flag.store(true, Ordering::SeqCst);
                stream::iter([Ok::<u32, DependencyError>(0)])
            });
        let (items, result) = drain(&test, mode, execution, None);
        let (values, err) = split(items);
        assert_eq!(values, [1], "{mode:?}");
        let err = err.unwrap();
        assert_eq!(err.failure_type(), FailureType::BadRequest);
        assert_eq!(err.cause(), Some(&DependencyError("no such symbol")));
        assert_eq!(events(&result), "[EMIT, BAD_REQUEST]");
        assert!(!called.load(Ordering::SeqCst));
    }
}

#[test]
fn rolling_counts_count_every_emit_and_fallback_emit() {
    let test = TestRegistry::new();
    let cmd = command(&test, "Counted");
    for _ in 0..2 {
        let _ = block_on(
            cmd.run_stream(values(&[Ok(1), Ok(2), Ok(3)]))
                .to_observable()
                .collect::<Vec<_>>(),
        );
    }
    let _ = block_on(
        cmd.run_stream(values(&[Ok(1), Ok(2), Err("down")]))
            .fallback_stream(fallback_of(&[10, 11]))
            .to_observable()
            .collect::<Vec<_>>(),
    );
    test.advance(Duration::from_millis(1000));
    let metrics = cmd.metrics();
    assert_eq!(metrics.rolling_count(EventType::Emit), 8);
    assert_eq!(metrics.rolling_count(EventType::Success), 2);
    assert_eq!(metrics.rolling_count(EventType::Failure), 1);
    assert_eq!(metrics.rolling_count(EventType::FallbackEmit), 2);
    assert_eq!(metrics.rolling_count(EventType::FallbackSuccess), 1);
    assert_eq!(metrics.rolling_count(EventType::ExceptionThrown), 0);
    let health = metrics.health_counts();
    assert_eq!((health.total_requests, health.error_count), (3, 1));
}

#[test]
fn the_request_log_shows_a_stream_execution_once() {
    let test = TestRegistry::new();
    let prices = command(&test, "Prices");
    let clock = test.clock().clone();
    let ctx = RequestContext::new();
    {
        let _entered = ctx.enter();
        let run = stream::iter([1, 2, 3]).then(move |value| {
            clock.advance_ms(5);
            async move { Ok::<u32, DependencyError>(value) }
        });
        let items: Vec<_> = block_on(prices.run_stream(run).to_observable().collect());
        assert_eq!(ok_values(items), [1, 2, 3]);
    }
    assert_eq!(
        ctx.request_log().to_string(),
        "Prices[EMITx3, SUCCESS][15ms]"
    );
}

#[test]
fn thread_isolation_drives_the_stream_on_the_pool() {
    for mode in MODES {
        let test = TestRegistry::new();
        let cmd = builder("OnPool")
            .isolation(IsolationStrategy::Thread)
            .build_in(test.registry())
            .unwrap();
        let run = stream::iter([1, 2, 3]).map(|value| {
            let name = std::thread::current().name().unwrap_or("").to_owned();
            assert!(name.starts_with("hystrix-Test-async-"), "ran on {name}");
            Ok::<u32, DependencyError>(value)
        });
        let (items, result) = drain(&test, mode, cmd.run_stream(run), None);
        assert_eq!(ok_values(items), [1, 2, 3], "{mode:?}");
        assert_eq!(events(&result), "[EMITx3, SUCCESS]");
        assert!(result.is_executed_in_thread());
    }
}

#[test]
fn thread_isolation_rejects_when_the_pool_is_busy_and_frees_the_slot_on_drop() {
    let test = TestRegistry::new();
    let cmd = builder("BusyPool")
        .isolation(IsolationStrategy::Thread)
        .thread_pool_core_size(1)
        .timeout_enabled(false)
        .build_in(test.registry())
        .unwrap();
    let mut held = Box::pin(cmd.run_stream(then_hang(&[])).to_observable());
    assert!(poll_next_once(held.as_mut()).is_pending());

    let items: Vec<_> = block_on(
        cmd.run_stream(values(&[Ok(1)]))
            .fallback_stream(|err: &Error| {
                assert_eq!(err.failure_type(), FailureType::RejectedThreadExecution);
                stream::iter([Ok::<u32, DependencyError>(0)])
            })
            .to_observable()
            .collect(),
    );
    assert_eq!(ok_values(items), [0]);

    drop(held);
    wait_for_free_pool(&test);
    let items: Vec<_> = block_on(cmd.run_stream(values(&[Ok(2)])).to_observable().collect());
    assert_eq!(ok_values(items), [2]);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Cancelled), 1);
    assert_eq!(
        cmd.metrics()
            .cumulative_count(EventType::ThreadPoolRejected),
        1
    );
}

#[test]
fn stream_executions_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let test = TestRegistry::new();
    let cmd = command(&test, "Sendable");
    let cold = cmd.run_stream(values(&[Ok(1)])).to_observable();
    assert_send(&cold);
    let hot = cmd.run_stream(values(&[Ok(1)])).observe();
    assert_send(&hot);
    let _: Pin<Box<dyn Stream<Item = Item> + Send + '_>> = Box::pin(cold);
}

#[test]
fn the_fallback_stream_holds_its_permit_until_it_ends() {
    for mode in MODES {
        let test = TestRegistry::new();
        let cmd = builder("OneFallback")
            .fallback_semaphore_max_concurrent_requests(1)
            .build_in(test.registry())
            .unwrap();
        let mut held = Box::pin(
            cmd.run_stream(values(&[Err("down")]))
                .fallback_stream(|_err: &Error| then_hang(&[9]))
                .to_observable(),
        );
        assert!(matches!(
            poll_next_once(held.as_mut()),
            Poll::Ready(Some(Ok(9)))
        ));
        assert!(poll_next_once(held.as_mut()).is_pending());

        let execution = cmd
            .run_stream(values(&[Err("down")]))
            .fallback_stream(fallback_of(&[1]));
        let (items, result) = drain(&test, mode, execution, None);
        let (delivered, err) = split(items);
        assert!(delivered.is_empty(), "{mode:?}");
        assert_eq!(
            err.unwrap().failure_type(),
            FailureType::RejectedSemaphoreFallback
        );
        assert_eq!(events(&result), "[FAILURE, FALLBACK_REJECTION]");

        drop(held);
        let execution = cmd
            .run_stream(values(&[Err("down")]))
            .fallback_stream(fallback_of(&[1]));
        let (items, _) = drain(&test, mode, execution, None);
        assert_eq!(
            ok_values(items),
            [1],
            "{mode:?}: the fallback permit is free again"
        );
    }
}

#[test]
fn a_half_open_trial_that_delivered_values_before_its_drop_closes_the_breaker() {
    let test = TestRegistry::new();
    let cmd = builder("Trial")
        .timeout_enabled(false)
        .build_in(test.registry())
        .unwrap();
    cmd.circuit_breaker().force_open();
    // Past the sleep window: the next execution is the half-open trial.
    test.advance(Duration::from_millis(5001));
    let mut trial = Box::pin(cmd.run_stream(then_hang(&[1])).to_observable());
    assert!(matches!(
        poll_next_once(trial.as_mut()),
        Poll::Ready(Some(Ok(1)))
    ));
    assert!(poll_next_once(trial.as_mut()).is_pending());
    assert_eq!(cmd.circuit_breaker().status(), hystrix::Status::HalfOpen);

    drop(trial);
    assert_eq!(cmd.circuit_breaker().status(), hystrix::Status::Closed);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Cancelled), 1);
}

#[test]
fn a_half_open_trial_dropped_before_any_value_gives_its_slot_back() {
    let test = TestRegistry::new();
    let cmd = builder("SilentTrial")
        .timeout_enabled(false)
        .build_in(test.registry())
        .unwrap();
    cmd.circuit_breaker().force_open();
    // Past the sleep window: the next execution is the half-open trial.
    test.advance(Duration::from_millis(5001));
    let mut trial = Box::pin(cmd.run_stream(then_hang(&[])).to_observable());
    assert!(poll_next_once(trial.as_mut()).is_pending());
    drop(trial);
    assert_eq!(cmd.circuit_breaker().status(), hystrix::Status::HalfOpen);
    // The next execution is the trial.
    let items: Vec<_> = block_on(cmd.run_stream(values(&[Ok(1)])).to_observable().collect());
    assert_eq!(ok_values(items), [1]);
    assert_eq!(cmd.circuit_breaker().status(), hystrix::Status::Closed);
}

// ------------------------------------------------------------------------------------------------
// THREAD isolation: bounded buffer, backpressure, stopping; timeouts judged where the run is
// waited on.

/// A builder for a THREAD-isolated command on a pool of one thread ("Test").
fn on_one_thread(key: &str) -> hystrix::CommandBuilder {
    builder(key)
        .isolation(IsolationStrategy::Thread)
        .thread_pool_core_size(1)
}

/// The next item of `stream`, waiting (up to 5 s of real time) for the pool to deliver it.
fn next_item<S: Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
    let mut item = None;
    wait_until(|| match poll_next_once(Pin::new(&mut *stream)) {
        Poll::Ready(next) => {
            item = Some(next);
            true
        }
        Poll::Pending => false,
    });
    item.unwrap()
}

/// Every item of `stream` up to its end, each waited for as by [`next_item`].
fn rest<S: Stream + Unpin>(stream: &mut S) -> Vec<S::Item> {
    std::iter::from_fn(|| next_item(stream)).collect()
}

/// Once the pool task waits for the run with its one deadline `ms` ahead on the manual clock:
/// checks that nothing comes 1 ms before it, moves the clock to it, and returns what follows.
fn rest_after_pool_deadline<S: Stream + Unpin>(
    test: &TestRegistry,
    stream: &mut S,
    ms: u64,
) -> Vec<S::Item> {
    wait_until(|| test.clock().pending_timers() == 1);
    test.advance(Duration::from_millis(ms - 1));
    assert!(poll_next_once(Pin::new(&mut *stream)).is_pending());
    test.advance(Duration::from_millis(1));
    rest(stream)
}

/// A run stream that is always ready and never ends, counting the values it produced.
fn endless(produced: &Arc<AtomicUsize>) -> BoxStream<'static, Result<u32, DependencyError>> {
    let produced = Arc::clone(produced);
    stream::repeat(7)
        .map(move |value| {
            produced.fetch_add(1, Ordering::SeqCst);
            Ok(value)
        })
        .boxed()
}

/// These values, then (when asked for the next step, so after they were all handed on) sets
/// `asked` and ends.
fn values_then_mark(
    items: &'static [u32],
    asked: &Arc<AtomicBool>,
) -> BoxStream<'static, Result<u32, DependencyError>> {
    let asked = Arc::clone(asked);
    stream::iter(items.iter().copied().map(Ok))
        .chain(stream::poll_fn(move |_| {
            asked.store(true, Ordering::SeqCst);
            Poll::Ready(None)
        }))
        .boxed()
}

/// Waits until the "Test" pool has no active task (its slot was given back).
fn wait_for_free_pool(test: &TestRegistry) {
    wait_until(|| {
        test.registry()
            .thread_pool_metrics("Test")
            .is_some_and(|pool| pool.current_active_count == 0)
    });
}

#[test]
fn thread_isolation_dropping_an_always_ready_stream_stops_it_and_frees_its_slot() {
    let test = TestRegistry::new();
    let cmd = on_one_thread("Endless")
        .timeout_enabled(false)
        .build_in(test.registry())
        .unwrap();
    let produced = Arc::new(AtomicUsize::new(0));
    let mut stream = Box::pin(cmd.run_stream(endless(&produced)).to_observable());
    assert!(matches!(next_item(&mut stream), Some(Ok(7))));
    // The pool task fills the buffer while nobody reads, then waits for room.
    wait_until(|| produced.load(Ordering::SeqCst) > STREAM_BUFFER_CAPACITY);

    drop(stream);
    wait_for_free_pool(&test);
    // The slot is free: the next THREAD execution on this one-thread pool runs.
    let mut next = Box::pin(cmd.run_stream(values(&[Ok(2)])).to_observable());
    let items = rest(&mut next);
    assert_eq!(ok_values(items), [2]);
    assert_eq!(events(&next.execution_result().unwrap()), "[EMIT, SUCCESS]");
    // What was produced: the value taken, a full buffer, at most one more in flight.
    let produced = produced.load(Ordering::SeqCst);
    assert!(
        produced <= STREAM_BUFFER_CAPACITY + 2,
        "{produced} values produced for a consumer that took one"
    );
    assert_eq!(cmd.metrics().cumulative_count(EventType::Cancelled), 1);
    assert_eq!(
        cmd.metrics()
            .cumulative_count(EventType::ThreadPoolRejected),
        0
    );
}

#[test]
fn thread_isolation_a_live_slow_consumer_holds_the_run_back() {
    let test = TestRegistry::new();
    let cmd = on_one_thread("Backpressure")
        .timeout_enabled(false)
        .build_in(test.registry())
        .unwrap();
    let produced = Arc::new(AtomicUsize::new(0));
    let mut stream = Box::pin(cmd.run_stream(endless(&produced)).to_observable());
    for taken in 1..=3 {
        assert!(matches!(next_item(&mut stream), Some(Ok(7))));
        // The run goes on only as far as the buffer has room.
        wait_until(|| produced.load(Ordering::SeqCst) >= taken + STREAM_BUFFER_CAPACITY);
        let now = produced.load(Ordering::SeqCst);
        assert!(
            now <= taken + STREAM_BUFFER_CAPACITY + 1,
            "{now} values produced for a consumer that took {taken}"
        );
    }
    drop(stream);
    wait_for_free_pool(&test);
}

#[test]
fn observe_cancel_stops_an_always_ready_thread_isolated_stream() {
    let test = TestRegistry::new();
    let cmd = on_one_thread("EndlessHot")
        .timeout_enabled(false)
        .build_in(test.registry())
        .unwrap();
    let produced = Arc::new(AtomicUsize::new(0));
    let mut observed = cmd.run_stream(endless(&produced)).observe();
    assert!(matches!(next_item(&mut observed), Some(Ok(7))));
    assert!(observed.cancel());
    wait_for_free_pool(&test);
    wait_until(|| observed.execution_result().is_some());
    assert_eq!(
        observed
            .execution_result()
            .unwrap()
            .execution_events()
            .count(EventType::Cancelled),
        1
    );
    let mut next = Box::pin(cmd.run_stream(values(&[Ok(2)])).to_observable());
    assert_eq!(ok_values(rest(&mut next)), [2]);
}

#[test]
fn a_slow_consumer_of_ready_values_is_not_an_idle_timeout() {
    for isolation in [IsolationStrategy::Semaphore, IsolationStrategy::Thread] {
        let test = TestRegistry::new();
        let cmd = builder("SlowReader")
            .isolation(isolation)
            .build_in(test.registry())
            .unwrap();
        let mut stream = Box::pin(
            cmd.run_stream(values(&[Ok(1), Ok(2), Ok(3)]))
                .idle_timeout(Duration::from_millis(100))
                .to_observable(),
        );
        let mut taken = Vec::new();
        while let Some(item) = next_item(&mut stream) {
            taken.push(item);
            // The consumer takes 150 ms per value: its own time, not a gap of the run.
            test.advance(Duration::from_millis(150));
        }
        assert_eq!(ok_values(taken), [1, 2, 3], "{isolation:?}");
        let result = stream.execution_result().unwrap();
        assert_eq!(events(&result), "[EMITx3, SUCCESS]", "{isolation:?}");
    }
}

#[test]
fn thread_isolation_a_first_value_produced_in_time_but_read_late_is_in_time() {
    let test = TestRegistry::new();
    let cmd = on_one_thread("ReadLate")
        .timeout(Duration::from_millis(100))
        .build_in(test.registry())
        .unwrap();
    let asked = Arc::new(AtomicBool::new(false));
    let mut stream = Box::pin(
        cmd.run_stream(values_then_mark(&[1, 2], &asked))
            .to_observable(),
    );
    // The first poll starts the run on the pool; it hands both values on at 0 ms.
    let mut items = Vec::new();
    if let Poll::Ready(Some(item)) = poll_next_once(stream.as_mut()) {
        items.push(item);
    }
    wait_until(|| asked.load(Ordering::SeqCst));
    // The consumer reads them 150 ms later, past the 100 ms timeout.
    test.advance(Duration::from_millis(150));
    items.extend(rest(&mut stream));
    assert_eq!(ok_values(items), [1, 2]);
    let result = stream.execution_result().unwrap();
    assert_eq!(events(&result), "[EMITx2, SUCCESS]");
}

#[test]
fn thread_isolation_no_first_value_before_the_timeout_is_a_timeout() {
    let test = TestRegistry::new();
    let cmd = on_one_thread("SlowOnPool")
        .timeout(Duration::from_millis(250))
        .build_in(test.registry())
        .unwrap();
    let mut stream = Box::pin(
        cmd.run_stream(then_hang(&[]))
            .fallback_stream(fallback_of(&[7]))
            .to_observable(),
    );
    assert!(poll_next_once(stream.as_mut()).is_pending());
    assert_eq!(
        ok_values(rest_after_pool_deadline(&test, &mut stream, 250)),
        [7]
    );
    let result = stream.execution_result().unwrap();
    assert_eq!(
        events(&result),
        "[TIMEOUT, FALLBACK_EMIT, FALLBACK_SUCCESS]"
    );
    wait_for_free_pool(&test);
    assert_eq!(test.clock().pending_timers(), 0);
}

#[test]
fn thread_isolation_a_gap_longer_than_the_idle_timeout_is_a_timeout() {
    let test = TestRegistry::new();
    let cmd = on_one_thread("IdleOnPool")
        .build_in(test.registry())
        .unwrap();
    let mut stream = Box::pin(
        cmd.run_stream(then_hang(&[1]))
            .idle_timeout(Duration::from_millis(40))
            .fallback_stream(|err: &Error| {
                assert_eq!(err.failure_type(), FailureType::Timeout);
                assert_eq!(err.timeout_ms(), Some(40));
                stream::iter([Ok::<u32, DependencyError>(10)])
            })
            .to_observable(),
    );
    assert!(matches!(next_item(&mut stream), Some(Ok(1))));
    // The run is pending on the pool: its idle deadline (now + 40 ms) is armed there.
    assert_eq!(
        ok_values(rest_after_pool_deadline(&test, &mut stream, 40)),
        [10]
    );
    let result = stream.execution_result().unwrap();
    assert_eq!(
        events(&result),
        "[EMIT, TIMEOUT, FALLBACK_EMIT, FALLBACK_SUCCESS]"
    );
    wait_for_free_pool(&test);
}

#[test]
fn semaphore_the_idle_deadline_starts_when_the_run_is_found_pending() {
    let test = TestRegistry::new();
    let cmd = command(&test, "IdleArmed");
    let (tx, rx) = futures::channel::mpsc::unbounded::<Result<u32, DependencyError>>();
    tx.unbounded_send(Ok(1)).unwrap();
    let mut stream = Box::pin(
        cmd.run_stream(rx)
            .idle_timeout(Duration::from_millis(100))
            .to_observable(),
    );
    assert!(matches!(
        poll_next_once(stream.as_mut()),
        Poll::Ready(Some(Ok(1)))
    ));
    // The consumer comes back 500 ms later: only now does the run's gap start.
    test.advance(Duration::from_millis(500));
    assert!(poll_next_once(stream.as_mut()).is_pending());
    test.advance(Duration::from_millis(99));
    tx.unbounded_send(Ok(2)).unwrap();
    assert!(matches!(
        poll_next_once(stream.as_mut()),
        Poll::Ready(Some(Ok(2)))
    ));
    // A real gap: pending at the deadline.
    assert!(poll_next_once(stream.as_mut()).is_pending());
    test.advance(Duration::from_millis(100));
    let (values, err) = split(block_on(stream.by_ref().collect()));
    assert!(values.is_empty());
    assert_eq!(err.unwrap().failure_type(), FailureType::Timeout);
    let result = stream.execution_result().unwrap();
    assert_eq!(events(&result), "[EMITx2, TIMEOUT, FALLBACK_MISSING]");
    assert_eq!(result.execution_time_ms(), Some(699));
}

#[test]
fn timeout_errors_say_which_timeout_passed() {
    let test = TestRegistry::new();
    let cmd = command(&test, "Ticks");
    let first_error = |execution: Vec<Item>| split(execution).1.unwrap();

    let idle = first_error(
        drain(
            &test,
            Mode::Cold,
            cmd.run_stream(then_hang(&[1]))
                .idle_timeout(Duration::from_millis(250)),
            Some(Duration::from_millis(250)),
        )
        .0,
    );
    assert_eq!(
        idle.to_string(),
        "command Ticks timed out waiting 250 ms for its next value (idle timeout) and no \
         fallback available"
    );
    assert_eq!(
        (idle.failure_type(), idle.timeout_ms(), idle.is_timeout()),
        (FailureType::Timeout, Some(250), true)
    );

    let per_call = first_error(
        drain(
            &test,
            Mode::Cold,
            cmd.run_stream(then_hang(&[]))
                .timeout(Duration::from_millis(250)),
            Some(Duration::from_millis(250)),
        )
        .0,
    );
    assert_eq!(
        per_call.to_string(),
        "command Ticks timed out after 250 ms (the timeout given to this call) and no fallback \
         available"
    );
    assert_eq!(
        (per_call.timeout_ms(), per_call.is_timeout()),
        (Some(250), true)
    );

    let slow = builder("Quotes")
        .timeout(Duration::from_millis(250))
        .build_in(test.registry())
        .unwrap();
    let property = first_error(
        drain(
            &test,
            Mode::Cold,
            slow.run_stream(then_hang(&[])),
            Some(Duration::from_millis(250)),
        )
        .0,
    );
    assert_eq!(
        property.to_string(),
        "command Quotes timed out after 250 ms and no fallback available (tune \
         hystrix.command.Quotes.execution.isolation.thread.timeoutInMilliseconds or add a \
         fallback)"
    );
}
