//! Shared test helpers: a registry driven to known counts and a raw HTTP/1.1 client.
#![allow(dead_code, clippy::unwrap_used)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use std::collections::HashMap;

use hystrix::collapser::{Collapser, CollapserScope};
use hystrix::config::PropertyValue;
use hystrix::testing::TestRegistry;
use hystrix::{Command, EventType, FailureType, IsolationStrategy, Outcome};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

#[derive(Debug)]
pub struct Boom;

impl std::fmt::Display for Boom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("boom")
    }
}

impl std::error::Error for Boom {}

/// Command "Mixed" (group "Shop", SEMAPHORE, timeout 100 ms) driven to: 3 successes (20 ms
/// each), 2 failures with a fallback, 1 timeout, 2 short-circuits (forced open), 2 semaphore
/// rejections (permits set to 0); then the clock moves 10 s so the buckets are complete.
pub fn drive_mixed(test: &TestRegistry) {
    let cmd = Command::builder("Mixed")
        .group("Shop")
        .isolation(IsolationStrategy::Semaphore)
        .timeout(Duration::from_millis(100))
        .build_in(test.registry())
        .unwrap();
    for _ in 0..3 {
        let clock = test.clone();
        cmd.run(move || {
            clock.advance(Duration::from_millis(20));
            Ok::<_, Boom>(1)
        })
        .execute()
        .unwrap();
    }
    for _ in 0..2 {
        let value = cmd
            .run(|| Err::<u32, _>(Boom))
            .fallback(|_| Ok::<_, Boom>(7))
            .execute()
            .unwrap();
        assert_eq!(value, 7);
    }
    let clock = test.clone();
    let err = cmd
        .run(move || {
            clock.advance(Duration::from_millis(150));
            Ok::<_, Boom>(1)
        })
        .execute()
        .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Timeout);
    test.force_open("Mixed").unwrap();
    for _ in 0..2 {
        let err = cmd.run(|| Ok::<_, Boom>(1)).execute().unwrap_err();
        assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    }
    test.clear_forced("Mixed").unwrap();
    test.registry()
        .properties()
        .set(
            "hystrix.command.Mixed.execution.isolation.semaphore.maxConcurrentRequests",
            0,
        )
        .unwrap();
    for _ in 0..2 {
        let err = cmd.run(|| Ok::<_, Boom>(1)).execute().unwrap_err();
        assert_eq!(err.failure_type(), FailureType::RejectedSemaphoreExecution);
    }
    test.advance(Duration::from_millis(10_000));
}

/// Command "Retried" (group "Shop", SEMAPHORE, `retry.maxAttempts` 3, no backoff delay, a
/// budget of exactly 2 retries: no share of requests, 1 per second of a 2 s window), driven
/// through retryable runs to: a failure then a success (1 retry); two failures, the second
/// retry refused by the spent budget (1 retry, 1 RETRY_BUDGET_EXHAUSTED, fallback); one failure
/// whose retry is refused (RETRY_BUDGET_EXHAUSTED, fallback). In all: 1 success, 4 failures
/// (each attempt a request), 2 RETRY, 2 RETRY_BUDGET_EXHAUSTED, 2 fallback successes. Then
/// the clock moves 10 s so the buckets are complete.
pub fn drive_retried(test: &TestRegistry) {
    let cmd = Command::builder("Retried")
        .group("Shop")
        .isolation(IsolationStrategy::Semaphore)
        .property("retry.maxAttempts", 3)
        .property("retry.backoff.initialInMilliseconds", 0)
        .property("retry.budget.percent", 0)
        .property("retry.budget.minPerSecond", 1)
        .property("retry.budget.windowInMilliseconds", 2_000)
        .build_in(test.registry())
        .unwrap();
    // Each execution answers from its script, one entry per attempt (true: Ok).
    let scripted = |script: &'static [bool]| {
        let mut attempt = 0;
        move || {
            let ok = script.get(attempt).copied().unwrap_or(false);
            attempt += 1;
            move || if ok { Ok::<u32, Boom>(1) } else { Err(Boom) }
        }
    };
    let outcome = cmd
        .run_retryable(scripted(&[false, true]))
        .execute_outcome();
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS, FAILURE, RETRY"
    );
    for (script, events) in [
        (
            &[false, false][..],
            "FAILUREx2, FALLBACK_SUCCESS, RETRY, RETRY_BUDGET_EXHAUSTED",
        ),
        (
            &[false][..],
            "FAILURE, FALLBACK_SUCCESS, RETRY_BUDGET_EXHAUSTED",
        ),
    ] {
        let outcome = cmd
            .run_retryable(scripted(script))
            .fallback(|_| Ok::<_, Boom>(7))
            .execute_outcome();
        assert_eq!(*outcome.response().as_ref().unwrap(), 7);
        assert_eq!(
            outcome.execution_result().execution_events().to_string(),
            events
        );
    }
    test.advance(Duration::from_millis(10_000));
}

/// Runs `future` to its end on `test`'s manual clock: polls it, and while it waits moves the
/// clock to its next timer.
pub fn on_clock<F: Future>(test: &TestRegistry, future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        test.clock()
            .advance_to_next_timer()
            .expect("a waiting execution has a timer");
    }
}

/// Command "Hedged" (group "Shop", SEMAPHORE, `hedging.maxAttempts` 2 after a fixed 20 ms),
/// driven on the manual clock through async runs that sleep on it: a first attempt of 100 ms
/// whose hedge answers 10 ms after it started (the hedge wins, the first attempt is cancelled);
/// a first attempt failing at 30 ms whose hedge answers 20 ms after it started (the hedge
/// wins, nothing is cancelled). In all: 2 HEDGE, 1 HEDGE_CANCELLED, 2 successes, 1 failure
/// (each attempt that ends is a request). Then the clock moves 10 s so the buckets are
/// complete.
pub fn drive_hedged(test: &TestRegistry) {
    let cmd = Command::builder("Hedged")
        .group("Shop")
        .isolation(IsolationStrategy::Semaphore)
        .property("hedging.maxAttempts", 2)
        .property("hedging.delayInMilliseconds", 20)
        .build_in(test.registry())
        .unwrap();
    // Each attempt sleeps its entry's ms on the clock, then answers (true: Ok).
    for (script, events) in [
        (
            &[(100, true), (10, true)][..],
            "SUCCESS, HEDGE, HEDGE_CANCELLED",
        ),
        (&[(30, false), (20, true)][..], "SUCCESS, FAILURE, HEDGE"),
    ] {
        let clock = Arc::clone(test.registry().clock());
        let mut attempt = 0;
        let execution = cmd
            .run_async_retryable(move || {
                let (ms, ok) = script[attempt];
                attempt += 1;
                let clock = Arc::clone(&clock);
                async move {
                    hystrix::clock::sleep(&clock, Duration::from_millis(ms)).await;
                    if ok { Ok::<u32, Boom>(1) } else { Err(Boom) }
                }
            })
            .execute_async_outcome();
        let outcome = on_clock(test, execution);
        assert_eq!(*outcome.response().as_ref().unwrap(), 1);
        assert_eq!(
            outcome.execution_result().execution_events().to_string(),
            events
        );
    }
    test.advance(Duration::from_millis(10_000));
}

/// An async execution not yet ended.
pub type Execution<'c> = Pin<Box<dyn Future<Output = Outcome<u32, Boom>> + 'c>>;

/// An execution of `cmd` whose async run sleeps `ms` on `test`'s clock, then answers 1.
pub fn sleeping<'c>(test: &TestRegistry, cmd: &'c Command, ms: u64) -> Execution<'c> {
    let clock = Arc::clone(test.registry().clock());
    Box::pin(
        cmd.run_async(async move {
            hystrix::clock::sleep(&clock, Duration::from_millis(ms)).await;
            Ok::<u32, Boom>(1)
        })
        .fallback(|_| Ok::<_, Boom>(7))
        .execute_async_outcome(),
    )
}

/// An execution as [`sleeping`], polled once: admitted (in flight) or waiting for a place.
pub fn held<'c>(test: &TestRegistry, cmd: &'c Command, ms: u64) -> Execution<'c> {
    let mut execution = sleeping(test, cmd, ms);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(execution.as_mut().poll(&mut cx).is_pending());
    execution
}

/// Command "Ranked" (group "Shop", SEMAPHORE, `maxConcurrentRequests` 4, half of it reserved
/// for CRITICAL executions).
pub fn ranked_command(test: &TestRegistry) -> Command {
    Command::builder("Ranked")
        .group("Shop")
        .isolation(IsolationStrategy::Semaphore)
        .semaphore_max_concurrent_requests(4)
        .property(
            "execution.isolation.priority.critical.reservedPercentage",
            50,
        )
        .build_in(test.registry())
        .unwrap()
}

/// Executions of [`ranked_command`] held in flight on the manual clock (runs of 50 ms): two
/// NORMAL admitted, a third NORMAL and a SHEDDABLE refused (the two other places are
/// CRITICAL's) and answered by the fallback, one CRITICAL admitted. Returns the three in flight
/// (CRITICAL 1, NORMAL 2, SHEDDABLE 0; refused: NORMAL 1, SHEDDABLE 1; reserved: CRITICAL 2
/// places, NORMAL 0).
pub fn hold_ranked<'c>(test: &TestRegistry, cmd: &'c Command) -> Vec<Execution<'c>> {
    let mut held = Vec::new();
    for (priority, admitted) in [
        (hystrix::Priority::Normal, true),
        (hystrix::Priority::Normal, true),
        (hystrix::Priority::Normal, false),
        (hystrix::Priority::Sheddable, false),
        (hystrix::Priority::Critical, true),
    ] {
        let clock = Arc::clone(test.registry().clock());
        let mut execution: Execution<'c> = Box::pin(
            cmd.run_async(async move {
                hystrix::clock::sleep(&clock, Duration::from_millis(50)).await;
                Ok::<u32, Boom>(1)
            })
            .fallback(|_| Ok::<_, Boom>(7))
            .priority(priority)
            .execute_async_outcome(),
        );
        let mut cx = Context::from_waker(Waker::noop());
        let pending = execution.as_mut().poll(&mut cx).is_pending();
        assert_eq!(pending, admitted, "{priority}");
        if pending {
            held.push(execution);
        }
    }
    held
}

/// Command "Limited" (group "Shop", SEMAPHORE, `maxConcurrentRequests` 100, an adaptive AIMD
/// limit starting at 2), driven on the manual clock through async runs that sleep on it: two
/// runs of 10 ms in flight reach the limit; three more are refused by it and answered by the
/// fallback (LIMIT_REJECTED, FALLBACK_SUCCESS, at once); the two end, each raising the limit by
/// one (AIMD adds 1 when the in-flight count at the run's admission, itself included, is at
/// least half the limit: 1 of 2, then 2 of 3), to 4. In all: 2 successes, 3 LIMIT_REJECTED, 3
/// fallback successes, none of them a health error. Then the clock moves 10 s so the buckets
/// are complete. Returns the command (limit 4, nothing in flight).
pub fn drive_limited(test: &TestRegistry) -> Command {
    let cmd = Command::builder("Limited")
        .group("Shop")
        .isolation(IsolationStrategy::Semaphore)
        .semaphore_max_concurrent_requests(100)
        .property("execution.isolation.adaptive.enabled", true)
        .property("execution.isolation.adaptive.algorithm", "AIMD")
        .property("execution.isolation.adaptive.initialLimit", 2)
        // One sample per execution (the default window is 20 executions).
        .property("execution.isolation.adaptive.windowSize", 1)
        .build_in(test.registry())
        .unwrap();
    let first = held(test, &cmd, 10);
    let second = held(test, &cmd, 10);
    for _ in 0..3 {
        let outcome = on_clock(test, sleeping(test, &cmd, 10));
        assert_eq!(*outcome.response().as_ref().unwrap(), 7);
        assert_eq!(
            outcome.execution_result().execution_events().to_string(),
            "FALLBACK_SUCCESS, LIMIT_REJECTED"
        );
    }
    test.clock().advance(Duration::from_millis(10));
    for execution in [first, second] {
        let outcome = on_clock(test, execution);
        assert_eq!(
            outcome.execution_result().execution_events().to_string(),
            "SUCCESS"
        );
    }
    let limit = cmd.metrics().adaptive_limit().unwrap();
    assert_eq!((limit.limit, limit.in_flight, limit.queued), (4, 0, 0));
    test.advance(Duration::from_millis(10_000));
    cmd
}

/// Sets "Limited"'s `execution.isolation.adaptive.<name>` at run time.
pub fn set_limited(test: &TestRegistry, name: &str, value: impl Into<PropertyValue>) {
    test.registry()
        .properties()
        .set(
            &format!("hystrix.command.Limited.execution.isolation.adaptive.{name}"),
            value,
        )
        .unwrap();
}

/// With 2 executions of "Limited" in flight of its limit of 4: allows a wait of up to 1 s for
/// a place, and holds 3 more (50 ms runs): 2 fill the limit, 1 waits.
pub fn fill_with_one_waiting<'c>(test: &TestRegistry, cmd: &'c Command) -> Vec<Execution<'c>> {
    set_limited(test, "maxWaitInMilliseconds", 1_000);
    (0..3).map(|_| held(test, cmd, 50)).collect()
}

/// Command "Pooled" (group "Shop", THREAD, pool "ShopPool"): 2 successes on the pool.
pub fn drive_pooled(test: &TestRegistry) {
    let cmd = Command::builder("Pooled")
        .group("Shop")
        .thread_pool_key("ShopPool")
        .isolation(IsolationStrategy::Thread)
        .build_in(test.registry())
        .unwrap();
    for _ in 0..2 {
        cmd.run(|| Ok::<_, Boom>(1)).execute().unwrap();
    }
}

/// A SEMAPHORE command `key` of `group` in `test`'s registry.
pub fn semaphore_command(test: &TestRegistry, key: &str, group: &str) -> Command {
    Command::builder(key)
        .group(group)
        .isolation(IsolationStrategy::Semaphore)
        .build_in(test.registry())
        .unwrap()
}

/// Collapser "GetRating" of `scope` over the SEMAPHORE batch command "GetRatings" (group
/// "Ratings"): a rating is id × 10.
pub fn ratings_collapser(test: &TestRegistry, scope: CollapserScope) -> Collapser<u32, u32, Boom> {
    Collapser::builder("GetRating")
        .scope(scope)
        .build(
            semaphore_command(test, "GetRatings", "Ratings"),
            |ids: Vec<u32>| async move {
                Ok::<_, Boom>(
                    ids.iter()
                        .map(|&id| (id, id * 10))
                        .collect::<HashMap<_, _>>(),
                )
            },
            |ratings: &mut HashMap<u32, u32>, id: &u32| ratings.remove(id),
        )
        .unwrap()
}

/// A raw HTTP/1.1 response being read: status, headers, then a (chunked) body.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
    chunked: bool,
    /// De-chunked body bytes not consumed yet.
    pending: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Reads more body bytes (one chunk).
    async fn fill(&mut self) -> bool {
        if !self.chunked {
            let mut buf = [0u8; 4096];
            let n = self.reader.read(&mut buf).await.unwrap();
            self.pending.extend_from_slice(&buf[..n]);
            return n > 0;
        }
        let mut size = String::new();
        if self.reader.read_line(&mut size).await.unwrap() == 0 {
            return false;
        }
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            return false;
        }
        let mut chunk = vec![0u8; size + 2];
        self.reader.read_exact(&mut chunk).await.unwrap();
        assert_eq!(&chunk[size..], b"\r\n");
        self.pending.extend_from_slice(&chunk[..size]);
        true
    }

    /// The next SSE frame (up to and including its blank line), or `None` at the end.
    pub async fn next_frame(&mut self) -> Option<String> {
        loop {
            if let Some(at) = self.pending.windows(2).position(|w| w == b"\n\n") {
                let frame: Vec<u8> = self.pending.drain(..at + 2).collect();
                return Some(String::from_utf8(frame).unwrap());
            }
            if !self.fill().await {
                return None;
            }
        }
    }

    /// The whole body (for a response with an end: a Content-Length or a last chunk).
    pub async fn body(mut self) -> String {
        if let Some(length) = self.header("content-length") {
            let mut body = vec![0u8; length.parse().unwrap()];
            self.reader.read_exact(&mut body).await.unwrap();
            return String::from_utf8(body).unwrap();
        }
        while self.fill().await {}
        String::from_utf8(self.pending).unwrap()
    }
}

/// Asserts Hystrix's SSE response: 200 and its headers, uncompressed.
pub fn assert_sse_headers(response: &Response) {
    assert_eq!(response.status, 200);
    assert_eq!(
        response.header("content-type"),
        Some("text/event-stream;charset=UTF-8")
    );
    assert_eq!(
        response.header("cache-control"),
        Some("no-cache, no-store, max-age=0, must-revalidate")
    );
    assert_eq!(response.header("pragma"), Some("no-cache"));
    assert_eq!(response.header("content-encoding"), None);
}

/// Sends `GET path` and reads the status line and headers.
pub async fn get(addr: std::net::SocketAddr, path: &str) -> Response {
    get_on(TcpStream::connect(addr).await.unwrap(), path).await
}

/// Sends `GET path` on a connected `stream` and reads the status line and headers.
pub async fn get_on(stream: TcpStream, path: &str) -> Response {
    send_on(
        stream,
        &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n"),
    )
    .await
}

/// Sends the raw `request` on a connected `stream` and reads the status line and headers.
pub async fn send_on(mut stream: TcpStream, request: &str) -> Response {
    stream.write_all(request.as_bytes()).await.unwrap();
    read_response(stream).await
}

/// Reads the status line and headers of the response coming on `stream`.
pub async fn read_response(stream: TcpStream) -> Response {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).await.unwrap();
    let status = line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).await.unwrap();
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        let (name, value) = trimmed.split_once(':').unwrap();
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    let chunked = headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    Response {
        status,
        headers,
        reader,
        chunked,
        pending: Vec::new(),
    }
}

/// Serves `router` on 127.0.0.1:0; returns the address.
pub async fn spawn_server(router: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

/// A bounded wait: every network step of a test gets at most 5 s.
pub async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), future)
        .await
        .expect("timed out after 5 s")
}

/// Serves `router` on a runtime of two workers and runs `test` with its address.
pub fn with_server<F: std::future::Future>(
    router: axum::Router,
    test: impl FnOnce(std::net::SocketAddr) -> F,
) -> F::Output {
    runtime().block_on(async move {
        let addr = spawn_server(router).await;
        test(addr).await
    })
}

/// Waits (at most 5 s, polling every 2 ms) until `done` holds.
pub async fn eventually(mut done: impl FnMut() -> bool) {
    within(async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A command `Throttled` (group `Shop`) with adaptive throttling on, every error an overload:
/// with K = 1 000 (nothing throttled) 1 success and 4 overload errors; then K = 1, a
/// probability of 4/6, and successes until one call is throttled (answered by the fallback).
/// Returns the successes before it: the window then holds 6 + that many requests, 1 + that
/// many accepts.
pub fn drive_throttled(test: &TestRegistry) -> u32 {
    let registry = test.registry();
    let cmd = hystrix::Command::builder("Throttled")
        .group("Shop")
        .isolation(hystrix::IsolationStrategy::Semaphore)
        .property("execution.throttle.enabled", true)
        .property("execution.throttle.multiplier", 1_000.0)
        .classify_retry(|_: &std::io::Error| hystrix::retry::RetryAnswer::retry().overloaded())
        .build_in(registry)
        .unwrap();
    let call = |ok: bool| {
        cmd.run(move || {
            if ok {
                Ok(1)
            } else {
                Err(std::io::Error::other("503"))
            }
        })
        .fallback(|_| Ok::<_, std::io::Error>(0))
        .execute_outcome()
        .execution_result()
        .execution_events()
    };
    for ok in [true, false, false, false, false] {
        assert!(!call(ok).contains(EventType::Throttled));
    }
    registry
        .properties()
        .set(
            "hystrix.command.Throttled.execution.throttle.multiplier",
            1.0,
        )
        .unwrap();
    let mut successes = 0;
    while !call(true).contains(EventType::Throttled) {
        successes += 1;
    }
    successes
}

/// Command `key` (group "Shop", SEMAPHORE) with slow calls over 100 ms and a slow-call rate
/// threshold of 50 %, and `extra` properties, driven on the test clock to: a success of 10 ms,
/// a success of 150 ms (SUCCESS, SLOW_CALL), a failure of 200 ms answered by the fallback
/// (FAILURE, SLOW_CALL, FALLBACK_SUCCESS), a success of exactly 100 ms (not slow); then the
/// clock moves 1 s so the buckets are complete. Health: 4 requests, 1 error (25 %), 2 slow
/// calls (50 %), below the volume threshold of 20: the breaker stays closed.
pub fn drive_slow(test: &TestRegistry, key: &str, extra: &[(&str, PropertyValue)]) -> Command {
    let mut builder = Command::builder(key)
        .group("Shop")
        .isolation(IsolationStrategy::Semaphore)
        .property(
            "circuitBreaker.slowCall.durationThresholdInMilliseconds",
            100,
        )
        .property("circuitBreaker.slowCall.rateThresholdPercentage", 50);
    for (name, value) in extra {
        builder = builder.property(name, value.clone());
    }
    let cmd = builder.build_in(test.registry()).unwrap();
    for (ms, ok, events) in [
        (10, true, "SUCCESS"),
        (150, true, "SUCCESS, SLOW_CALL"),
        (200, false, "FAILURE, FALLBACK_SUCCESS, SLOW_CALL"),
        (100, true, "SUCCESS"),
    ] {
        let clock = test.clone();
        let outcome = cmd
            .run(move || {
                clock.advance(Duration::from_millis(ms));
                if ok { Ok(1) } else { Err(Boom) }
            })
            .fallback(|_| Ok::<_, Boom>(0))
            .execute_outcome();
        assert_eq!(
            outcome.execution_result().execution_events().to_string(),
            events,
            "{ms} ms"
        );
    }
    test.advance(Duration::from_millis(1_000));
    cmd
}

/// Command `key` (group "Shop", SEMAPHORE) with chaos on, driven on the test clock to: 2
/// executions whose run chaos replaced by a fault (`chaos.fault.ratePercentage` 100: FAILURE
/// with an injected fault, answered by the fallback, CHAOS_INJECTED), then, the fault rate set
/// to 0 (chaos still on, injecting nothing), 3 successes of 10 ms. Then chaos is left on at a
/// fault rate of 10 %, a latency rate of 20 % of 100 ms and a hang rate of 5 % (nothing runs
/// after, so nothing more is drawn), and the clock moves 1 s so the buckets are complete.
/// Health: 5 requests, 2 errors (40 %), below the volume threshold: the breaker stays closed.
pub fn drive_chaos(test: &TestRegistry, key: &str) -> Command {
    let cmd = Command::builder(key)
        .group("Shop")
        .isolation(IsolationStrategy::Semaphore)
        .property("chaos.enabled", true)
        .property("chaos.fault.ratePercentage", 100)
        .build_in(test.registry())
        .unwrap();
    let execute = |ms: u64| {
        let clock = test.clone();
        let outcome = cmd
            .run(move || {
                clock.advance(Duration::from_millis(ms));
                Ok::<_, Boom>(1)
            })
            .fallback(|err| {
                Ok::<_, Boom>(if err.failure_type() == FailureType::InjectedFault {
                    0
                } else {
                    2
                })
            })
            .execute_outcome();
        let events = outcome.execution_result().execution_events().to_string();
        (events, *outcome.response().as_ref().unwrap())
    };
    for _ in 0..2 {
        assert_eq!(
            execute(10),
            ("FAILURE, FALLBACK_SUCCESS, CHAOS_INJECTED".to_owned(), 0)
        );
    }
    set_chaos(test, key, "chaos.fault.ratePercentage", 0);
    for _ in 0..3 {
        assert_eq!(execute(10), ("SUCCESS".to_owned(), 1));
    }
    set_chaos(test, key, "chaos.fault.ratePercentage", 10);
    set_chaos(test, key, "chaos.latency.ratePercentage", 20);
    set_chaos(test, key, "chaos.latency.inMilliseconds", 100);
    set_chaos(test, key, "chaos.hang.ratePercentage", 5);
    test.advance(Duration::from_millis(1_000));
    cmd
}

/// Sets command `key`'s property `name` (e.g. `chaos.enabled`) at run time.
pub fn set_chaos(test: &TestRegistry, key: &str, name: &str, value: impl Into<PropertyValue>) {
    test.registry()
        .properties()
        .set(&format!("hystrix.command.{key}.{name}"), value)
        .unwrap();
}

// ------------------------------------------------------------------------------------------------
// Dashboard::serve over real sockets

pub const GET_METRICS: &str = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";

/// Serves `dashboard` with `Dashboard::serve_on` on 127.0.0.1:0; returns the address.
pub async fn serve(dashboard: hystrix_dashboard::Dashboard) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(dashboard.serve_on(listener));
    addr
}

/// A registry of 20 commands: a `/hystrix.stream` sample is some 50 KB, so a client that reads
/// nothing fills its socket's buffers within a few samples.
pub fn registry_with_big_samples() -> TestRegistry {
    let test = TestRegistry::new();
    for i in 0..20 {
        semaphore_command(&test, &format!("Command{i:02}"), "Big");
    }
    test
}

/// Connects with a 4 KB receive buffer (so the server's writes block soon when it reads
/// nothing) and asks for `path`.
pub async fn connect_small(addr: std::net::SocketAddr, path: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .unwrap();
    stream
}

/// Reads (and drops) what `stream` receives until the server closes it (an end or a reset), at
/// most 5 s.
pub async fn until_closed(stream: &mut TcpStream) {
    within(async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => return,
                Ok(_) => {}
                Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => return,
                Err(err) => panic!("{err}"),
            }
        }
    })
    .await;
}

/// Sends `request` on a kept-alive `stream` and reads the answer: its status and body (a
/// `Content-Length` one); `None` if the server closed the connection instead.
pub async fn exchange(stream: &mut TcpStream, request: &str) -> Option<(u16, String)> {
    if stream.write_all(request.as_bytes()).await.is_err() {
        return None;
    }
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    match reader.read_line(&mut line).await {
        Ok(0) => return None,
        Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => return None,
        read => {
            read.unwrap();
        }
    }
    let status = line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut length = 0;
    loop {
        line.clear();
        reader.read_line(&mut line).await.unwrap();
        match line.trim_end().split_once(':') {
            Some((name, value)) if name.eq_ignore_ascii_case("content-length") => {
                length = value.trim().parse().unwrap();
            }
            Some(_) => {}
            None => break,
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).await.unwrap();
    Some((status, String::from_utf8(body).unwrap()))
}

/// A new connection's first exchange, within 5 s.
pub async fn get_metrics(addr: std::net::SocketAddr) -> (TcpStream, Option<(u16, String)>) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let answer = within(exchange(&mut stream, GET_METRICS)).await;
    (stream, answer)
}

/// Waits (at most 5 s) until a new connection is served `GET /metrics` (200): past a connection
/// cap, once the server has seen a connection go.
pub async fn served_again(addr: std::net::SocketAddr) {
    within(async {
        loop {
            if let (_, Some((status, _))) = get_metrics(addr).await {
                break assert_eq!(status, 200);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// Asks for the stream at `path` on a new connection and asserts it is served: 200 with the SSE
/// headers, then a ping first. Returns the response, to read on or to drop.
pub async fn first_ping(addr: std::net::SocketAddr, path: &str) -> Response {
    let mut response = within(get(addr, path)).await;
    assert_sse_headers(&response);
    assert_eq!(
        within(response.next_frame()).await.as_deref(),
        Some("ping: \n\n"),
        "{path}"
    );
    response
}
