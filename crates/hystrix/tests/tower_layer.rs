//! The tower layer against `tower-test` mock services, on the manual clock: each call is an
//! execution (breaker, bulkhead, timeout, fallback, metrics), readiness holds nothing, refusals
//! are immediate, cancellation frees permits, and keyed layers give each key its own breaker.
#![cfg(feature = "tower")]
#![allow(clippy::unwrap_used)]

mod common;

use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use common::{builder, drive, poll_once, retrying};
use futures::executor::block_on;
use hystrix::command::KeyedCommands;
use hystrix::testing::TestRegistry;
use hystrix::tower::HystrixLayer;
use hystrix::{BoxError, Command, EventType, FailureType, HystrixError, IsolationStrategy};
use tower::{Layer, Service, ServiceExt, service_fn};
use tower_test::mock;

type Error = HystrixError<BoxError>;
type Call = Pin<Box<dyn Future<Output = Result<String, Error>>>>;

/// A SEMAPHORE command in `test`'s registry (timeout 1000 ms on the manual clock).
fn command(test: &TestRegistry, key: &str) -> Command {
    builder(key).build_in(test.registry()).unwrap()
}

/// Calls `svc` (ready at once) and polls the call once.
fn start<S>(svc: &mut S, request: &str) -> (Call, Poll<Result<String, Error>>)
where
    S: Service<String, Response = String, Error = Error>,
    S::Future: 'static,
{
    let waker = futures::task::noop_waker();
    assert!(
        svc.poll_ready(&mut Context::from_waker(&waker)).is_ready(),
        "always ready"
    );
    let mut call: Call = Box::pin(svc.call(request.to_owned()));
    let first = poll_once(call.as_mut());
    (call, first)
}

/// A finished call as comparable text: `Some(Ok(value))` or `Some(Err(message))`.
fn done(poll: Poll<Result<String, Error>>) -> Option<Result<String, String>> {
    match poll {
        Poll::Ready(result) => Some(result.map_err(|err| err.to_string())),
        Poll::Pending => None,
    }
}

fn io_error(message: &str) -> BoxError {
    Box::new(std::io::Error::other(message.to_owned()))
}

#[test]
fn a_call_is_an_execution_and_the_inner_error_stays_typed() {
    let test = TestRegistry::new();
    let cmd = command(&test, "Mocked");
    let (inner, mut handle) = mock::pair::<String, String>();
    let mut svc = HystrixLayer::new(cmd.clone()).layer(inner);

    let (mut call, first) = start(&mut svc, "hello");
    assert!(first.is_pending());
    let (request, reply) = block_on(handle.next_request()).unwrap();
    assert_eq!(request, "hello");
    reply.send_response("world".to_owned());
    assert_eq!(done(poll_once(call.as_mut())), Some(Ok("world".to_owned())));

    let (mut call, _) = start(&mut svc, "again");
    let (_, reply) = block_on(handle.next_request()).unwrap();
    reply.send_error(io_error("backend down"));
    let Poll::Ready(Err(err)) = poll_once(call.as_mut()) else {
        panic!("the inner error ends the call");
    };
    assert_eq!(err.failure_type(), FailureType::CommandException);
    let cause = err.cause().unwrap();
    assert_eq!(cause.to_string(), "backend down");
    assert!(cause.downcast_ref::<std::io::Error>().is_some());
    // Into tower's BoxError, and back.
    let boxed: BoxError = err.into();
    let back = boxed.downcast_ref::<Error>().unwrap();
    assert_eq!(back.command_key().as_str(), "Mocked");

    let metrics = cmd.metrics();
    assert_eq!(metrics.cumulative_count(EventType::Success), 1);
    assert_eq!(metrics.cumulative_count(EventType::Failure), 1);
}

#[test]
fn an_open_breaker_refuses_at_once_without_calling_the_service() {
    let test = TestRegistry::new();
    let (inner, mut handle) = mock::pair::<String, String>();
    let mut svc = HystrixLayer::new(command(&test, "Open")).layer(inner);
    test.force_open("Open").unwrap();
    let (_, first) = start(&mut svc, "hello");
    let Poll::Ready(Err(err)) = first else {
        panic!("refused at the first poll");
    };
    assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    assert!(
        handle.poll_request().is_pending(),
        "the service saw nothing"
    );
}

#[test]
fn readiness_holds_no_permit_and_a_full_bulkhead_refuses_at_once() {
    let test = TestRegistry::new();
    let cmd = builder("Bulkhead")
        .semaphore_max_concurrent_requests(1)
        .build_in(test.registry())
        .unwrap();
    let (inner, mut handle) = mock::pair::<String, String>();
    let mut first_svc = HystrixLayer::new(cmd.clone()).layer(inner);
    let mut second_svc = first_svc.clone();
    let waker = futures::task::noop_waker();
    for _ in 0..100 {
        assert!(
            second_svc
                .poll_ready(&mut Context::from_waker(&waker))
                .is_ready()
        );
    }
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);

    let (mut held, first) = start(&mut first_svc, "one");
    assert!(first.is_pending());
    let (_, refused) = start(&mut second_svc, "two");
    let Poll::Ready(Err(err)) = refused else {
        panic!("refused at the first poll");
    };
    assert_eq!(err.failure_type(), FailureType::RejectedSemaphoreExecution);

    let (_, reply) = block_on(handle.next_request()).unwrap();
    reply.send_response("done".to_owned());
    assert!(poll_once(held.as_mut()).is_ready());
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
}

#[test]
fn the_timeout_covers_waiting_for_the_inner_services_readiness() {
    let test = TestRegistry::new();
    let cmd = command(&test, "NotReady");
    let (inner, mut handle) = mock::pair::<String, String>();
    handle.allow(0);
    let mut svc = HystrixLayer::new(cmd.clone()).layer(inner);
    let (mut call, first) = start(&mut svc, "waits");
    assert!(first.is_pending());
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 1);
    test.advance(Duration::from_millis(1000));
    let Poll::Ready(Err(err)) = poll_once(call.as_mut()) else {
        panic!("timed out");
    };
    assert!(err.is_timeout());
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
    assert!(
        handle.poll_request().is_pending(),
        "the request was never sent"
    );
}

#[test]
fn dropping_a_call_cancels_it_and_frees_its_permit() {
    let test = TestRegistry::new();
    let cmd = builder("Dropped")
        .semaphore_max_concurrent_requests(1)
        .build_in(test.registry())
        .unwrap();
    let (inner, mut handle) = mock::pair::<String, String>();
    let mut svc = HystrixLayer::new(cmd.clone()).layer(inner);
    let (call, _) = start(&mut svc, "abandoned");
    let (_, reply) = block_on(handle.next_request()).unwrap();
    drop(call);
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Cancelled), 1);
    drop(reply);
    // The permit is free: the next call runs.
    let (mut next, _) = start(&mut svc, "next");
    let (_, reply) = block_on(handle.next_request()).unwrap();
    reply.send_response("ok".to_owned());
    assert_eq!(done(poll_once(next.as_mut())), Some(Ok("ok".to_owned())));
}

#[test]
fn fallbacks_a_value_a_function_of_the_error_or_another_service() {
    let test = TestRegistry::new();
    let failing = service_fn(|_: String| async { Err::<String, BoxError>(io_error("down")) });

    let mut by_value = HystrixLayer::new(command(&test, "ByValue"))
        .fallback_value("cached".to_owned())
        .layer(failing);
    assert_eq!(
        done(start(&mut by_value, "x").1),
        Some(Ok("cached".to_owned()))
    );

    let mut by_fn = HystrixLayer::new(command(&test, "ByFn"))
        .fallback_fn(|err: &Error| {
            Ok::<_, BoxError>(format!("{} ({})", err.failure_type(), err.cause().unwrap()))
        })
        .layer(failing);
    assert_eq!(
        done(start(&mut by_fn, "x").1),
        Some(Ok("COMMAND_EXCEPTION (down)".to_owned()))
    );

    let (secondary, mut handle) = mock::pair::<String, String>();
    let mut by_service = HystrixLayer::new(command(&test, "ByService"))
        .fallback_service(secondary)
        .layer(failing);
    let (mut call, first) = start(&mut by_service, "same request");
    assert!(first.is_pending());
    let (request, reply) = block_on(handle.next_request()).unwrap();
    assert_eq!(request, "same request");
    reply.send_response("from the secondary".to_owned());
    assert_eq!(
        done(poll_once(call.as_mut())),
        Some(Ok("from the secondary".to_owned()))
    );
    let metrics = test.registry().command_metrics("ByService").unwrap();
    assert_eq!(metrics.cumulative_count(EventType::FallbackSuccess), 1);
}

/// A request to a host.
#[derive(Debug, Clone)]
struct Get {
    host: &'static str,
}

fn per_host(test: &TestRegistry, max_keys: usize) -> KeyedCommands {
    KeyedCommands::builder(|host| {
        Command::builder(format!("Get-{host}"))
            .group("Hosts")
            .isolation(IsolationStrategy::Semaphore)
    })
    .registry(test.registry())
    .max_keys(NonZeroUsize::new(max_keys).unwrap())
    .idle_timeout(Some(Duration::from_secs(60)))
    .build()
}

#[test]
fn a_keyed_layer_gives_each_key_its_own_breaker() {
    let test = TestRegistry::new();
    let inner = service_fn(|get: Get| async move {
        match get.host {
            "down.example" => Err::<&str, BoxError>(io_error("503")),
            host => Ok(host),
        }
    });
    let mut svc =
        HystrixLayer::keyed(per_host(&test, 10), |get: &Get| get.host.into()).layer(inner);
    let mut call =
        |host: &'static str| block_on(async { svc.ready().await?.call(Get { host }).await });
    for _ in 0..20 {
        let err = call("down.example").unwrap_err();
        assert_eq!(err.failure_type(), FailureType::CommandException);
    }
    assert_eq!(call("up.example").unwrap(), "up.example");
    test.advance(Duration::from_millis(500));
    let err = call("down.example").unwrap_err();
    assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    assert_eq!(err.command_key().as_str(), "Get-down.example");
    assert_eq!(call("up.example").unwrap(), "up.example");
    let registry = test.registry();
    assert_eq!(
        registry.is_circuit_breaker_open("Get-down.example"),
        Some(true)
    );
    assert_eq!(
        registry.is_circuit_breaker_open("Get-up.example"),
        Some(false)
    );
}

#[test]
fn a_layer_with_keyed_breakers_trips_one_host_and_keeps_one_command() {
    let test = TestRegistry::new();
    let cmd = builder("Fetch")
        .breaker_per_key(NonZeroUsize::new(10).unwrap(), None)
        .build_in(test.registry())
        .unwrap();
    let inner = service_fn(|get: Get| async move {
        match get.host {
            "down.example" => Err::<&str, BoxError>(io_error("503")),
            host => Ok(host),
        }
    });
    let mut svc = HystrixLayer::new(cmd.clone())
        .breaker_key(|get: &Get| get.host.into())
        .layer(inner);
    let mut call =
        |host: &'static str| block_on(async { svc.ready().await?.call(Get { host }).await });
    for _ in 0..20 {
        call("down.example").unwrap_err();
        assert_eq!(call("up.example").unwrap(), "up.example");
    }
    test.advance(Duration::from_millis(500));
    let err = call("down.example").unwrap_err();
    assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    assert_eq!(err.command_key().as_str(), "Fetch");
    assert_eq!(call("up.example").unwrap(), "up.example");
    assert!(cmd.keyed_circuit_breaker("down.example").unwrap().is_open());
    assert!(!cmd.keyed_circuit_breaker("up.example").unwrap().is_open());
    assert_eq!(cmd.keyed_circuit_breaker_count(), 2);
    test.advance(Duration::from_millis(1000));
    let metrics = cmd.metrics();
    assert_eq!(metrics.rolling_count(EventType::Success), 21);
    assert_eq!(metrics.rolling_count(EventType::ShortCircuited), 1);
}

#[test]
fn a_keyed_layer_keeps_a_bounded_number_of_keys() {
    let test = TestRegistry::new();
    let commands = per_host(&test, 2);
    let inner = service_fn(|get: Get| async move { Ok::<_, BoxError>(get.host) });
    let mut svc = HystrixLayer::keyed(commands.clone(), |get: &Get| get.host.into()).layer(inner);
    let mut call =
        |host: &'static str| block_on(async { svc.ready().await?.call(Get { host }).await });
    call("a").unwrap();
    call("b").unwrap();
    call("a").unwrap();
    call("c").unwrap();
    // b was the least recently used: its definition and its state are gone.
    assert_eq!(commands.keys(), ["c", "a"]);
    let mut keys: Vec<String> = test
        .registry()
        .command_keys()
        .iter()
        .map(|k| k.to_string())
        .collect();
    keys.sort();
    assert_eq!(keys, ["Get-a", "Get-c"]);
    // Idle for more than a minute: evicted at the next use of any key.
    test.advance(Duration::from_secs(61));
    call("c").unwrap();
    assert_eq!(commands.keys(), ["c"]);
}

#[test]
fn a_request_key_that_makes_no_command_is_a_misuse_error() {
    let test = TestRegistry::new();
    let inner = service_fn(|get: Get| async move { Ok::<_, BoxError>(get.host) });
    // A factory that takes the key as the command key as is: an empty key is refused.
    let as_is = KeyedCommands::builder(|host| Command::builder(host).group("Hosts"))
        .registry(test.registry())
        .build();
    let mut svc = HystrixLayer::keyed(as_is, |get: &Get| get.host.into()).layer(inner);
    let mut call =
        |host: &'static str| block_on(async { svc.ready().await?.call(Get { host }).await });
    let err = call("").unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Misuse);
    assert_eq!(
        err.to_string(),
        "command (invalid key) could not be made for request key ``: invalid command key ``: \
         must not be empty"
    );
    assert_eq!(call("x").unwrap(), "x");
}

#[test]
fn under_thread_isolation_the_inner_future_runs_on_the_pool_runtime() {
    let test = TestRegistry::new();
    let cmd = Command::builder("OnPool")
        .group("LayerPool")
        .isolation(IsolationStrategy::Thread)
        .timeout_enabled(false)
        .build_in(test.registry())
        .unwrap();
    let inner = service_fn(|_: ()| async {
        Ok::<_, BoxError>(std::thread::current().name().unwrap_or("").to_owned())
    });
    let mut svc = HystrixLayer::new(cmd).layer(inner);
    let thread = block_on(async { svc.ready().await?.call(()).await }).unwrap();
    assert!(thread.starts_with("hystrix-LayerPool-async-"), "{thread}");
}

#[test]
fn a_cache_key_function_turns_on_the_request_cache_for_the_layers_calls() {
    use hystrix::context::RequestContext;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    let test = TestRegistry::new();
    let calls = Arc::new(AtomicU32::new(0));
    let lookups = {
        let calls = Arc::clone(&calls);
        service_fn(move |id: String| {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if id == "bad" {
                    Err(io_error("no such user"))
                } else {
                    Ok(format!("{id}#{n}"))
                }
            }
        })
    };
    // Requests starting with '-' are not cached.
    let layer = HystrixLayer::new(command(&test, "Lookup"))
        .cache_key(|id: &String| (!id.starts_with('-')).then(|| id.clone()));
    let mut svc = layer.layer(lookups);

    let ctx = RequestContext::new();
    let (a1, a2, b, bad1, bad2, uncached1, uncached2) = block_on(ctx.scope(async {
        let mut call = |id: &str| svc.call(id.to_owned());
        (
            call("a").await.unwrap(),
            call("a").await.unwrap(),
            call("b").await.unwrap(),
            call("bad").await.unwrap_err(),
            call("bad").await.unwrap_err(),
            call("-x").await.unwrap(),
            call("-x").await.unwrap(),
        )
    }));
    assert_eq!(
        (a1.as_str(), a2.as_str(), b.as_str()),
        ("a#1", "a#1", "b#2")
    );
    assert!(Arc::ptr_eq(&a1, &a2));
    assert!(Arc::ptr_eq(&bad1, &bad2), "the failure is shared too");
    assert_eq!(bad2.failure_type(), FailureType::CommandException);
    assert_eq!((uncached1.as_str(), uncached2.as_str()), ("-x#4", "-x#5"));
    assert_eq!(calls.load(Ordering::SeqCst), 5);
    assert_eq!(
        ctx.request_log().to_string(),
        "Lookup[SUCCESS][0ms]x4, Lookup[SUCCESS, RESPONSE_FROM_CACHE][0ms], \
         Lookup[FAILURE, FALLBACK_MISSING][0ms], \
         Lookup[FAILURE, FALLBACK_MISSING, RESPONSE_FROM_CACHE][0ms]"
    );

    // Outside a request context a cached call is refused with the clear error.
    let err = block_on(svc.call("a".to_owned())).unwrap_err();
    assert_eq!(err.failure_type(), FailureType::NoRequestContext);
}

#[test]
fn a_request_context_layer_gives_each_call_its_own_context_and_cache() {
    use hystrix::context::RequestContext;
    use hystrix::tower::RequestContextLayer;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    let test = TestRegistry::new();
    let get_user = command(&test, "GetUser");
    let runs = Arc::new(AtomicU32::new(0));
    let handler = {
        let runs = Arc::clone(&runs);
        service_fn(move |id: String| {
            let (get_user, runs) = (get_user.clone(), Arc::clone(&runs));
            async move {
                // Two lookups of one user in one request: one run.
                for _ in 0..2 {
                    let runs = Arc::clone(&runs);
                    get_user
                        .run(move || {
                            runs.fetch_add(1, Ordering::SeqCst);
                            Ok::<_, BoxError>(1)
                        })
                        .cache_key(id.clone())
                        .execute_async()
                        .await
                        .map_err(|err| err.to_string())?;
                }
                let log = RequestContext::current().map(|ctx| ctx.request_log().to_string());
                Ok::<_, String>(log.unwrap_or_default())
            }
        })
    };
    let mut svc = RequestContextLayer.layer(handler);
    for id in ["a", "b"] {
        let log = block_on(svc.call(id.to_owned())).unwrap();
        assert_eq!(
            log,
            "GetUser[SUCCESS][0ms], GetUser[SUCCESS, RESPONSE_FROM_CACHE][0ms]"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2, "one run per request");
    assert_eq!(
        RequestContext::current(),
        None,
        "the context ends with the call"
    );
}

// ------------------------------------------------------------------------------------------------
// Retry through the layer (`HystrixLayer::retry_with`): the command's attempt loop, each attempt
// a fresh clone of the inner service called after its readiness, with its own copy of the request.

use hystrix::clock::Clock as _;

/// What a [`Flaky`] service saw: each call's request and time, and its readiness polls.
#[derive(Default)]
struct Seen {
    calls: Vec<(String, u64)>,
    ready_polls: u32,
}

/// A hand-written service failing its first `failures` calls, then answering `request#n`;
/// each clone must be polled ready before each call.
#[derive(Clone)]
struct Flaky {
    failures: usize,
    seen: std::sync::Arc<std::sync::Mutex<Seen>>,
    clock: hystrix::clock::ManualClock,
    ready: bool,
}

impl Flaky {
    fn new(test: &TestRegistry, failures: usize) -> Self {
        Flaky {
            failures,
            seen: std::sync::Arc::default(),
            clock: test.clock().clone(),
            ready: false,
        }
    }

    fn calls(&self) -> Vec<(String, u64)> {
        self.seen.lock().unwrap().calls.clone()
    }

    fn ready_polls(&self) -> u32 {
        self.seen.lock().unwrap().ready_polls
    }
}

impl Service<String> for Flaky {
    type Response = String;
    type Error = BoxError;
    type Future = std::future::Ready<Result<String, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.seen.lock().unwrap().ready_polls += 1;
        self.ready = true;
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: String) -> Self::Future {
        assert!(std::mem::take(&mut self.ready), "called without poll_ready");
        let mut seen = self.seen.lock().unwrap();
        let n = seen.calls.len();
        seen.calls.push((request.clone(), self.clock.now_ms()));
        std::future::ready(if n < self.failures {
            Err(io_error("busy"))
        } else {
            Ok(format!("{request}#{n}"))
        })
    }
}

/// A clone hook that counts how often it is asked.
fn counting_hook(
    asked: &std::sync::Arc<std::sync::atomic::AtomicU32>,
) -> impl Fn(&String) -> Option<String> + Send + Sync + 'static {
    let asked = std::sync::Arc::clone(asked);
    move |request: &String| {
        asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(request.clone())
    }
}

#[test]
fn with_retry_a_call_fails_twice_then_answers_on_the_clock() {
    use hystrix::context::RequestContext;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    let test = TestRegistry::new();
    let cmd = retrying(&test, "Retried", 3);
    let backend = Flaky::new(&test, 2);
    let asked = Arc::new(AtomicU32::new(0));
    let mut svc = HystrixLayer::new(cmd.clone())
        .retry_with(counting_hook(&asked))
        .layer(backend.clone());

    let context = RequestContext::new();
    let answer = drive(
        &test,
        context.scope(async { svc.ready().await?.call("ada".to_owned()).await }),
    );
    assert_eq!(answer.unwrap(), "ada#2");
    // Attempts at 0, then after 100 and 200 ms: the command's backoff on the clock.
    assert_eq!(
        backend.calls(),
        [
            ("ada".to_owned(), 0),
            ("ada".to_owned(), 100),
            ("ada".to_owned(), 300)
        ]
    );
    // One readiness poll per attempt, each before its call (asserted by the service).
    assert_eq!(backend.ready_polls(), 3);
    // Asked for the kept copy when the call was made, then once per later attempt.
    assert_eq!(asked.load(Ordering::SeqCst), 3);
    assert_eq!(
        context.request_log().to_string(),
        "Retried[SUCCESS, FAILUREx2, RETRYx2][0ms]"
    );
    let metrics = cmd.metrics();
    assert_eq!(metrics.cumulative_count(EventType::Success), 1);
    assert_eq!(metrics.cumulative_count(EventType::Failure), 2);
    assert_eq!(metrics.cumulative_count(EventType::Retry), 2);
    assert_eq!(cmd.retry_budget().unwrap().retries, 2);
}

#[test]
fn the_fallback_answers_once_after_the_last_attempt() {
    use hystrix::context::RequestContext;

    let test = TestRegistry::new();
    let cmd = retrying(&test, "Exhausted", 3);
    let backend = Flaky::new(&test, usize::MAX);
    let mut svc = HystrixLayer::new(cmd.clone())
        .fallback_value("cached".to_owned())
        .retry_with(|request: &String| Some(request.clone()))
        .layer(backend.clone());
    let context = RequestContext::new();
    let answer = drive(
        &test,
        context.scope(async { svc.ready().await?.call("bob".to_owned()).await }),
    );
    assert_eq!(answer.unwrap(), "cached");
    assert_eq!(backend.calls().len(), 3);
    assert_eq!(
        context.request_log().to_string(),
        "Exhausted[FAILUREx3, FALLBACK_SUCCESS, RETRYx2][0ms]"
    );
    assert_eq!(
        cmd.metrics().cumulative_count(EventType::FallbackSuccess),
        1
    );
}

#[test]
fn a_request_the_hook_refuses_makes_one_attempt() {
    use hystrix::context::RequestContext;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    let test = TestRegistry::new();
    let cmd = retrying(&test, "Refused", 3);
    let backend = Flaky::new(&test, 1);
    let asked = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&asked);
    // Requests starting with "once:" must not be sent twice.
    let mut svc = HystrixLayer::new(cmd.clone())
        .retry_with(move |request: &String| {
            counted.fetch_add(1, Ordering::SeqCst);
            (!request.starts_with("once:")).then(|| request.clone())
        })
        .layer(backend.clone());
    let context = RequestContext::new();
    let err = drive(
        &test,
        context.scope(async { svc.ready().await?.call("once:pay".to_owned()).await }),
    )
    .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::CommandException);
    assert_eq!(err.attempts(), 1);
    assert_eq!(backend.calls(), [("once:pay".to_owned(), 0)]);
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert_eq!(
        context.request_log().to_string(),
        "Refused[FAILURE, FALLBACK_MISSING][0ms]"
    );
    assert_eq!(cmd.metrics().cumulative_count(EventType::Retry), 0);
    assert_eq!(cmd.retry_budget(), None, "not a retry-enabled execution");
}

#[test]
fn without_the_opt_in_a_call_makes_one_attempt_whatever_max_attempts_says() {
    let test = TestRegistry::new();
    let cmd = retrying(&test, "NotOptedIn", 3);
    let backend = Flaky::new(&test, 1);
    let mut svc = HystrixLayer::new(cmd.clone()).layer(backend.clone());
    let err = drive(&test, async {
        svc.ready().await?.call("x".to_owned()).await
    })
    .unwrap_err();
    assert_eq!(err.attempts(), 1);
    assert_eq!(backend.calls(), [("x".to_owned(), 0)]);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Retry), 0);
    assert_eq!(cmd.retry_budget(), None);
}

#[test]
fn with_max_attempts_at_one_the_hook_is_not_asked() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    let test = TestRegistry::new();
    let backend = Flaky::new(&test, 1);
    let asked = Arc::new(AtomicU32::new(0));
    let mut svc = HystrixLayer::new(command(&test, "Single"))
        .retry_with(counting_hook(&asked))
        .layer(backend.clone());
    let err = drive(&test, async {
        svc.ready().await?.call("x".to_owned()).await
    })
    .unwrap_err();
    assert_eq!(err.attempts(), 1);
    assert_eq!(backend.calls().len(), 1);
    assert_eq!(asked.load(Ordering::SeqCst), 0);
}

#[test]
fn an_open_breaker_is_not_retried() {
    let test = TestRegistry::new();
    let cmd = retrying(&test, "OpenRetry", 3);
    let backend = Flaky::new(&test, 0);
    let mut svc = HystrixLayer::new(cmd.clone())
        .retry_with(|request: &String| Some(request.clone()))
        .layer(backend.clone());
    test.force_open("OpenRetry").unwrap();
    let (_, first) = start(&mut svc, "x");
    let Poll::Ready(Err(err)) = first else {
        panic!("refused at the first poll");
    };
    assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    assert_eq!(err.attempts(), 1);
    assert!(backend.calls().is_empty(), "the service saw nothing");
    assert_eq!(backend.ready_polls(), 0);
    assert_eq!(test.clock().pending_timers(), 0, "no delay planned");
    assert_eq!(cmd.metrics().cumulative_count(EventType::Retry), 0);
}

#[test]
fn the_breaker_opening_mid_sequence_stops_the_retries() {
    let test = TestRegistry::new();
    let cmd = builder("OpensMid")
        .property("retry.maxAttempts", 5)
        .property("retry.backoff.initialInMilliseconds", 600)
        .property("retry.backoff.multiplier", 1)
        .property("circuitBreaker.requestVolumeThreshold", 2)
        .property("execution.isolation.thread.timeoutInMilliseconds", 10_000)
        .build_in(test.registry())
        .unwrap();
    let backend = Flaky::new(&test, usize::MAX);
    let mut svc = HystrixLayer::new(cmd.clone())
        .fallback_value("fallback".to_owned())
        .retry_with(|request: &String| Some(request.clone()))
        .layer(backend.clone());
    let context = hystrix::context::RequestContext::new();
    let answer = drive(
        &test,
        context.scope(async { svc.ready().await?.call("x".to_owned()).await }),
    );
    assert_eq!(answer.unwrap(), "fallback");
    // Two attempts (0 and 600 ms) trip the breaker at 1 200 ms: the third is refused.
    assert_eq!(
        backend.calls(),
        [("x".to_owned(), 0), ("x".to_owned(), 600)]
    );
    assert_eq!(
        context.request_log().to_string(),
        "OpensMid[FAILUREx2, SHORT_CIRCUITED, FALLBACK_SUCCESS, RETRYx2][0ms]"
    );
    assert!(cmd.is_circuit_breaker_open());
}

#[test]
fn a_timed_out_attempt_is_dropped_and_the_next_one_answers() {
    let test = TestRegistry::new();
    // Execution timeout 1 000 ms, 2 attempts: each attempt has 500 ms.
    let cmd = builder("AttemptTimeout")
        .property("retry.maxAttempts", 2)
        .build_in(test.registry())
        .unwrap();
    let (inner, mut handle) = mock::pair::<String, String>();
    let mut svc = HystrixLayer::new(cmd.clone())
        .retry_with(|request: &String| Some(format!("{request} (again)")))
        .layer(inner);

    let (mut call, first) = start(&mut svc, "slow");
    assert!(first.is_pending());
    let (request, first_reply) = block_on(handle.next_request()).unwrap();
    assert_eq!(request, "slow");
    test.advance(Duration::from_millis(500));
    assert!(poll_once(call.as_mut()).is_pending(), "waits out the delay");
    assert!(
        handle.poll_request().is_pending(),
        "no attempt during the delay"
    );
    test.advance(Duration::from_millis(100));
    assert!(poll_once(call.as_mut()).is_pending());
    let (request, reply) = block_on(handle.next_request()).unwrap();
    // The hook made a copy when the call was made; the later attempt sends its copy of that.
    assert_eq!(request, "slow (again) (again)");
    // The timed-out attempt was dropped: its late answer goes nowhere.
    first_reply.send_response("late".to_owned());
    reply.send_response("fast".to_owned());
    assert_eq!(done(poll_once(call.as_mut())), Some(Ok("fast".to_owned())));
    let metrics = cmd.metrics();
    assert_eq!(metrics.cumulative_count(EventType::Timeout), 1);
    assert_eq!(metrics.cumulative_count(EventType::Retry), 1);
    assert_eq!(metrics.cumulative_count(EventType::Success), 1);
}

#[test]
fn a_cached_call_retries_once_for_all_its_sharers() {
    use hystrix::context::RequestContext;

    let test = TestRegistry::new();
    let backend = Flaky::new(&test, 1);
    let mut svc = HystrixLayer::new(retrying(&test, "CachedRetry", 2))
        .retry_with(|request: &String| Some(request.clone()))
        .cache_key(|request: &String| Some(request.clone()))
        .layer(backend.clone());
    let context = RequestContext::new();
    let (first, second) = drive(
        &test,
        context.scope(async {
            let first = svc.call("k".to_owned()).await.unwrap();
            let second = svc.call("k".to_owned()).await.unwrap();
            (first, second)
        }),
    );
    assert_eq!((first.as_str(), second.as_str()), ("k#1", "k#1"));
    assert_eq!(backend.calls().len(), 2);
    assert_eq!(
        context.request_log().to_string(),
        "CachedRetry[SUCCESS, FAILURE, RETRY][0ms], \
         CachedRetry[SUCCESS, FAILURE, RESPONSE_FROM_CACHE, RETRY][0ms]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retrying_service_with_box_errors_runs_in_a_spawned_task() {
    use hystrix::Registry;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    let registry = Registry::new();
    let cmd = builder("SpawnedRetry")
        .property("retry.maxAttempts", 2)
        .property("retry.backoff.initialInMilliseconds", 0)
        .build_in(&registry)
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let backend = service_fn(move |x: u32| {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                Err::<u32, BoxError>(io_error("first"))
            } else {
                Ok(x)
            }
        }
    });
    let mut svc = tower::ServiceBuilder::new()
        .layer(HystrixLayer::new(cmd).retry_with(|x: &u32| Some(*x)))
        .service(backend);
    let call = tokio::spawn(async move { svc.ready().await?.call(5).await });
    assert_eq!(call.await.unwrap().unwrap(), 5);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[cfg(feature = "http")]
#[test]
fn idempotent_http_retries_gets_copies_and_sends_posts_once() {
    use hystrix::tower::{Idempotent, IdempotentHttp, NoRetry};
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Debug, PartialEq)]
    struct Tag(&'static str);

    let test = TestRegistry::new();
    let cmd = retrying(&test, "Http", 3);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = Arc::clone(&seen);
    let backend = service_fn(move |request: http::Request<String>| {
        recorded.lock().unwrap().push(format!(
            "{} {} {} {:?} {}",
            request.method(),
            request.uri(),
            request.headers()["x-id"].to_str().unwrap(),
            request.extensions().get::<Tag>(),
            request.body()
        ));
        async { Err::<http::Response<String>, BoxError>(io_error("reset")) }
    });
    let mut svc = HystrixLayer::new(cmd.clone())
        .retry_with(IdempotentHttp)
        .layer(backend);
    let mut send = |request: http::Request<String>| {
        drive(&test, async { svc.ready().await?.call(request).await })
            .unwrap_err()
            .attempts()
    };
    let request = |method: &str| {
        let mut request = http::Request::builder()
            .method(method)
            .uri("http://users/ada")
            .header("x-id", "7")
            .body("body".to_owned())
            .unwrap();
        request.extensions_mut().insert(Tag("t"));
        request
    };

    assert_eq!(send(request("GET")), 3);
    assert_eq!(
        std::mem::take(&mut *seen.lock().unwrap()),
        ["GET http://users/ada 7 Some(Tag(\"t\")) body"; 3]
    );
    assert_eq!(send(request("POST")), 1);
    assert_eq!(send(request("PATCH")), 1);
    let mut marked = request("PUT");
    marked.extensions_mut().insert(NoRetry);
    assert_eq!(send(marked), 1);
    let mut safe_post = request("POST");
    safe_post.extensions_mut().insert(Idempotent);
    assert_eq!(send(safe_post), 3);
    let mut both = request("POST");
    both.extensions_mut().insert(Idempotent);
    both.extensions_mut().insert(NoRetry);
    assert_eq!(send(both), 1);
    assert_eq!(seen.lock().unwrap().len(), 1 + 1 + 1 + 3 + 1);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Retry), 2 + 2);
}

#[test]
fn a_hook_that_refuses_its_own_copy_ends_the_attempts_with_that_copy() {
    use hystrix::context::RequestContext;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    let test = TestRegistry::new();
    let cmd = retrying(&test, "Fickle", 4);
    let backend = Flaky::new(&test, usize::MAX);
    let asked = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&asked);
    // Copies the request once (when the call is made), then refuses.
    let mut svc = HystrixLayer::new(cmd.clone())
        .retry_with(move |request: &String| {
            (counted.fetch_add(1, Ordering::SeqCst) == 0).then(|| format!("{request}'"))
        })
        .layer(backend.clone());
    let context = RequestContext::new();
    let err = drive(
        &test,
        context.scope(async { svc.ready().await?.call("x".to_owned()).await }),
    )
    .unwrap_err();
    assert_eq!(
        backend.calls(),
        [("x".to_owned(), 0), ("x'".to_owned(), 100)]
    );
    // Asked when the call was made, then for the second attempt: refused, so the kept copy
    // went and no later attempt reaches the service (the events of the planned attempts that
    // found no request are the core's accounting, not asserted here).
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    assert_eq!(err.failure_type(), FailureType::CommandException);
    assert_eq!(err.cause().unwrap().to_string(), "busy");
}

/// A backend whose call number `n` takes `latencies_ms[n]` ms of the registry's clock, then
/// answers `request#n`.
fn slow_backend(
    test: &TestRegistry,
    latencies_ms: &'static [u64],
) -> impl Service<String, Response = String, Error = BoxError, Future: Send> + Clone + Send + 'static
{
    let clock = std::sync::Arc::clone(test.registry().clock());
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    service_fn(move |request: String| {
        let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let clock = std::sync::Arc::clone(&clock);
        async move {
            let ms = latencies_ms.get(n).copied().unwrap_or(0);
            hystrix::clock::sleep(&clock, Duration::from_millis(ms)).await;
            Ok::<_, BoxError>(format!("{request}#{n}"))
        }
    })
}

#[test]
fn with_the_opt_in_a_slow_call_is_hedged_and_the_faster_copy_answers() {
    use hystrix::context::RequestContext;

    let test = TestRegistry::new();
    let cmd = builder("Hedged")
        .property("hedging.maxAttempts", 2)
        .property("hedging.delayInMilliseconds", 100)
        .build_in(test.registry())
        .unwrap();
    let mut svc = HystrixLayer::new(cmd.clone())
        .retry_with(|request: &String| Some(request.clone()))
        .layer(slow_backend(&test, &[500, 10]));
    let context = RequestContext::new();
    let answer = drive(
        &test,
        context.scope(async { svc.ready().await?.call("ada".to_owned()).await }),
    );
    assert_eq!(answer.unwrap(), "ada#1");
    assert_eq!(test.registry().clock().now_ms(), 110);
    assert_eq!(
        context.request_log().to_string(),
        "Hedged[SUCCESS, HEDGE, HEDGE_CANCELLED][10ms]"
    );

    // Without the opt-in the call is not hedged.
    let mut once = HystrixLayer::new(cmd).layer(slow_backend(&test, &[500, 10]));
    let answer = drive(&test, async {
        once.ready().await?.call("bob".to_owned()).await
    });
    assert_eq!(answer.unwrap(), "bob#0");
}
