//! The request cache (SPEC §3.3, §7): one run per (command key, cache key) per request context,
//! every outcome shared behind `Arc` with RESPONSE_FROM_CACHE, in-flight duplicates joined,
//! `requestCache.enabled`, `clear`, and the error without a context.

#![allow(clippy::unwrap_used)]

mod common;

use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::Poll;
use std::time::Duration;

use common::{DependencyError, RecordingNotifier, builder, names, poll_once};
use hystrix::context::{CachedOutcome, RequestContext};
use hystrix::testing::TestRegistry;
use hystrix::{Command, EventType, FailureType, HystrixCommand, IsolationStrategy, Registry};

/// A run function that counts its calls and returns `value`.
fn counted(
    calls: &Arc<AtomicU32>,
    value: u32,
) -> impl FnOnce() -> Result<u32, DependencyError> + Send + use<> {
    let calls = Arc::clone(calls);
    move || {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok(value)
    }
}

/// An async run that counts its call and returns `value`.
fn counted_async(
    calls: &Arc<AtomicU32>,
    value: u32,
) -> impl std::future::Future<Output = Result<u32, DependencyError>> + Send + use<> {
    let run = counted(calls, value);
    async move { run() }
}

/// A cached execution's outcome future, boxed.
type Pending =
    Pin<Box<dyn std::future::Future<Output = CachedOutcome<u32, DependencyError>> + Send>>;

/// Two executions of cache key "k" in the current request context, each polled once: the
/// owner runs `run` (and must not be done yet), the waiter joins it.
fn owner_and_waiter(
    cmd: &Command,
    run: impl std::future::Future<Output = Result<u32, DependencyError>> + Send + 'static,
    waiter_run: impl std::future::Future<Output = Result<u32, DependencyError>> + Send + 'static,
) -> (Pending, Pending) {
    let mut owner: Pending = Box::pin(cmd.run_async(run).cache_key("k").execute_async_outcome());
    let mut waiter: Pending = Box::pin(
        cmd.run_async(waiter_run)
            .cache_key("k")
            .execute_async_outcome(),
    );
    assert!(poll_once(owner.as_mut()).is_pending());
    assert!(poll_once(waiter.as_mut()).is_pending());
    (owner, waiter)
}

/// An async run that counts its call and answers with what is sent on the returned sender.
fn answered_later(
    calls: &Arc<AtomicU32>,
) -> (
    futures::channel::oneshot::Sender<u32>,
    impl std::future::Future<Output = Result<u32, DependencyError>> + Send + use<>,
) {
    let (send, receive) = futures::channel::oneshot::channel::<u32>();
    let calls = Arc::clone(calls);
    let run = async move {
        calls.fetch_add(1, Ordering::SeqCst);
        receive.await.map_err(|_| DependencyError("sender dropped"))
    };
    (send, run)
}

#[test]
fn a_cache_key_runs_once_per_context_and_later_executions_share_the_value() {
    let test = TestRegistry::new();
    let get_user = builder("GetUser").build_in(test.registry()).unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let ctx = RequestContext::new();
    let _entered = ctx.enter();

    let first = get_user
        .run(counted(&calls, 7))
        .cache_key("u1")
        .execute_outcome();
    let second = get_user
        .run(counted(&calls, 8))
        .cache_key("u1")
        .execute_outcome();
    let other = get_user
        .run(counted(&calls, 9))
        .cache_key("u2")
        .execute()
        .unwrap();

    assert_eq!(calls.load(Ordering::SeqCst), 2, "u1 ran once, u2 once");
    let (first_value, second_value) = (
        first.response().as_ref().unwrap(),
        second.response().as_ref().unwrap(),
    );
    assert_eq!((**first_value, **second_value, *other), (7, 7, 9));
    assert!(Arc::ptr_eq(first_value, second_value), "one shared value");
    assert_eq!(
        names(first.execution_result().execution_events()),
        ["SUCCESS"]
    );
    assert!(!first.is_response_from_cache());
    assert_eq!(
        names(second.execution_result().execution_events()),
        ["SUCCESS", "RESPONSE_FROM_CACHE"]
    );
    assert!(second.is_response_from_cache());
    assert_eq!(second.execution_result().execution_time_ms(), None);
    assert!(!second.execution_result().is_executed_in_thread());

    // Metrics: the hit adds only RESPONSE_FROM_CACHE (the original is not counted twice).
    let metrics = get_user.metrics();
    assert_eq!(metrics.cumulative_count(EventType::Success), 2);
    assert_eq!(metrics.cumulative_count(EventType::ResponseFromCache), 1);
    assert_eq!(
        ctx.request_log().to_string(),
        "GetUser[SUCCESS][0ms]x2, GetUser[SUCCESS, RESPONSE_FROM_CACHE][0ms]"
    );
    let hits: Vec<bool> = ctx
        .request_log()
        .entries()
        .iter()
        .map(|entry| entry.is_cache_hit())
        .collect();
    assert_eq!(hits, [false, true, false], "u1, u1 from the cache, u2");
}

#[test]
fn a_new_context_has_an_empty_cache_and_command_keys_do_not_collide() {
    let test = TestRegistry::new();
    let get_user = builder("GetUser").build_in(test.registry()).unwrap();
    let get_order = builder("GetOrder").build_in(test.registry()).unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    for _request in 0..2 {
        let ctx = RequestContext::new();
        let _entered = ctx.enter();
        for _ in 0..3 {
            assert_eq!(
                *get_user
                    .run(counted(&calls, 1))
                    .cache_key("k")
                    .execute()
                    .unwrap(),
                1
            );
            // The same cache key under another command key is another entry.
            assert_eq!(
                *get_order
                    .run(counted(&calls, 2))
                    .cache_key("k")
                    .execute()
                    .unwrap(),
                2
            );
        }
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        4,
        "one run per command key per request"
    );
    assert_eq!(
        get_user
            .metrics()
            .cumulative_count(EventType::ResponseFromCache),
        4
    );
}

#[test]
fn failures_timeouts_and_short_circuits_are_cached_too() {
    let test = TestRegistry::new();
    let flaky = builder("Flaky")
        .timeout(Duration::from_millis(100))
        .build_in(test.registry())
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let ctx = RequestContext::new();
    let _entered = ctx.enter();

    // A failure without fallback: the error is shared.
    let failing = {
        let calls = Arc::clone(&calls);
        move || {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<u32, _>(DependencyError("down"))
        }
    };
    let first = flaky.run(failing).cache_key("fail").execute_outcome();
    let again = flaky
        .run(counted(&calls, 1))
        .cache_key("fail")
        .execute_outcome();
    let (first_err, again_err) = (
        first.response().as_ref().unwrap_err(),
        again.response().as_ref().unwrap_err(),
    );
    assert!(Arc::ptr_eq(first_err, again_err));
    assert_eq!(again_err.failure_type(), FailureType::CommandException);
    assert_eq!(again_err.cause(), Some(&DependencyError("down")));
    assert_eq!(
        names(again.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_MISSING", "RESPONSE_FROM_CACHE"]
    );

    // A timeout (the run outlives its 100 ms on the manual clock) with a fallback value.
    let clock = test.clock().clone();
    let slow = {
        let calls = Arc::clone(&calls);
        move || {
            calls.fetch_add(1, Ordering::SeqCst);
            clock.advance_ms(150);
            Ok::<u32, DependencyError>(1)
        }
    };
    let timed_out = flaky
        .run(slow)
        .fallback(|err| {
            assert!(err.is_timeout());
            Ok::<u32, DependencyError>(99)
        })
        .cache_key("slow")
        .execute()
        .unwrap();
    let hit = flaky
        .run(counted(&calls, 1))
        .cache_key("slow")
        .execute_outcome();
    assert_eq!((*timed_out, **hit.response().as_ref().unwrap()), (99, 99));
    assert_eq!(
        names(hit.execution_result().execution_events()),
        ["TIMEOUT", "FALLBACK_SUCCESS", "RESPONSE_FROM_CACHE"]
    );

    // A short-circuit stays cached after the breaker closes again.
    test.force_open("Flaky").unwrap();
    let refused = flaky.run(counted(&calls, 1)).cache_key("open").execute();
    test.clear_forced("Flaky").unwrap();
    let still = flaky.run(counted(&calls, 1)).cache_key("open").execute();
    assert_eq!(
        refused.unwrap_err().failure_type(),
        FailureType::ShortCircuit
    );
    assert_eq!(still.unwrap_err().failure_type(), FailureType::ShortCircuit);

    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "only the failing and the slow run ran"
    );
    assert_eq!(
        ctx.request_log().to_string(),
        "Flaky[FAILURE, FALLBACK_MISSING][0ms], \
         Flaky[FAILURE, FALLBACK_MISSING, RESPONSE_FROM_CACHE][0ms], \
         Flaky[TIMEOUT, FALLBACK_SUCCESS][150ms], \
         Flaky[TIMEOUT, FALLBACK_SUCCESS, RESPONSE_FROM_CACHE][0ms], \
         Flaky[SHORT_CIRCUITED, FALLBACK_MISSING][0ms], \
         Flaky[SHORT_CIRCUITED, FALLBACK_MISSING, RESPONSE_FROM_CACHE][0ms]"
    );
}

#[test]
fn concurrent_identical_async_executions_share_one_run() {
    let test = TestRegistry::new();
    let get_user = builder("GetUser").build_in(test.registry()).unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let (send, run) = answered_later(&calls);
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    let mut owner = pin!(
        get_user
            .run_async(run)
            .cache_key("u1")
            .execute_async_outcome()
    );
    let mut joined = pin!(
        get_user
            .run_async(async { Ok::<u32, DependencyError>(0) })
            .cache_key("u1")
            .execute_async_outcome()
    );
    assert!(
        poll_once(owner.as_mut()).is_pending(),
        "the run waits on the channel"
    );
    assert!(
        poll_once(joined.as_mut()).is_pending(),
        "joins the running execution"
    );
    send.send(42).unwrap();
    let Poll::Ready(owner) = poll_once(owner.as_mut()) else {
        panic!("the run completed")
    };
    let Poll::Ready(joined) = poll_once(joined.as_mut()) else {
        panic!("the shared outcome is there")
    };
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(Arc::ptr_eq(
        owner.response().as_ref().unwrap(),
        joined.response().as_ref().unwrap()
    ));
    assert_eq!(**joined.response().as_ref().unwrap(), 42);
    assert_eq!(
        names(joined.execution_result().execution_events()),
        ["SUCCESS", "RESPONSE_FROM_CACHE"]
    );
}

#[test]
fn concurrent_identical_blocking_executions_on_two_threads_share_one_run() {
    let test = TestRegistry::new();
    let get_user = builder("GetUser").build_in(test.registry()).unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<u32>();
    let ctx = RequestContext::new();

    let owner = {
        let (ctx, get_user, calls) = (ctx.clone(), get_user.clone(), Arc::clone(&calls));
        std::thread::spawn(move || {
            let _entered = ctx.enter();
            get_user
                .run(move || {
                    calls.fetch_add(1, Ordering::SeqCst);
                    started_tx.send(()).unwrap();
                    Ok::<u32, DependencyError>(release_rx.recv().unwrap())
                })
                .cache_key("u1")
                .execute()
                .unwrap()
        })
    };
    started_rx.recv().unwrap();
    let joiner = {
        let (ctx, get_user, calls) = (ctx.clone(), get_user.clone(), Arc::clone(&calls));
        std::thread::spawn(move || {
            let _entered = ctx.enter();
            get_user
                .run(counted(&calls, 0))
                .cache_key("u1")
                .execute_outcome()
        })
    };
    // The joiner is waiting (or about to look up the running entry): release the run.
    release_tx.send(5).unwrap();
    let owner = owner.join().unwrap();
    let joined = joiner.join().unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(Arc::ptr_eq(&owner, joined.response().as_ref().unwrap()));
    assert!(joined.is_response_from_cache());
}

#[test]
fn when_the_running_execution_is_dropped_unwatched_it_is_cancelled_and_the_next_one_runs_anew() {
    let test = TestRegistry::new();
    let get_user = builder("GetUser").build_in(test.registry()).unwrap();
    let ctx = RequestContext::new();
    let _entered = ctx.enter();

    let mut owner = Box::pin(
        get_user
            .run_async(std::future::pending::<Result<u32, DependencyError>>())
            .cache_key("u1")
            .execute_async_outcome(),
    );
    assert!(poll_once(owner.as_mut()).is_pending());
    drop(owner); // nobody waits: cancelled, and its entry leaves the cache
    let outcome = get_user
        .run(|| Ok::<u32, DependencyError>(3))
        .cache_key("u1")
        .execute_outcome();
    assert_eq!(**outcome.response().as_ref().unwrap(), 3);
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["SUCCESS"]
    );
    assert_eq!(
        ctx.request_log().to_string(),
        "GetUser[CANCELLED][0ms], GetUser[SUCCESS][0ms]"
    );
}

// Issue 20, item 2 (SPEC Part A 5): a cache run others wait for goes on when its caller leaves.
// Before the change, the waiter ran a second run of its own, and a dropped waiter left no trace.

/// Command "GetUser" and, in a new request context (entered), the owner and a waiter of cache
/// key "k": the owner's run waits for `send`; both count their runs in `calls`.
struct Pair {
    test: TestRegistry,
    get_user: Command,
    calls: Arc<AtomicU32>,
    send: futures::channel::oneshot::Sender<u32>,
    ctx: RequestContext,
    _entered: hystrix::context::ContextGuard,
    owner: Pending,
    waiter: Pending,
}

impl Pair {
    fn started() -> Self {
        let test = TestRegistry::new();
        let get_user = builder("GetUser").build_in(test.registry()).unwrap();
        let calls = Arc::new(AtomicU32::new(0));
        let (send, run) = answered_later(&calls);
        let ctx = RequestContext::new();
        let _entered = ctx.enter();
        let (owner, waiter) = owner_and_waiter(&get_user, run, counted_async(&calls, 0));
        Pair {
            test,
            get_user,
            calls,
            send,
            ctx,
            _entered,
            owner,
            waiter,
        }
    }
}

#[test]
fn a_dropped_owner_s_run_goes_on_for_its_waiters_once() {
    let Pair {
        test,
        get_user,
        calls,
        send,
        ctx,
        _entered,
        owner,
        waiter,
    } = Pair::started();
    test.advance(Duration::from_millis(30));
    drop(owner); // its run goes on, on the registry's executor
    assert_eq!(get_user.metrics().cumulative_count(EventType::Cancelled), 0);
    send.send(42).unwrap();

    let outcome = futures::executor::block_on(waiter);
    assert_eq!(**outcome.response().as_ref().unwrap(), 42);
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["SUCCESS", "RESPONSE_FROM_CACHE"]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1, "exactly one run");
    // The owner's execution is recorded once, with its own outcome, in its request.
    let metrics = get_user.metrics();
    assert_eq!(metrics.cumulative_count(EventType::Success), 1);
    assert_eq!(metrics.cumulative_count(EventType::ResponseFromCache), 1);
    assert_eq!(metrics.cumulative_count(EventType::Cancelled), 0);
    assert_eq!(
        ctx.request_log().to_string(),
        "GetUser[SUCCESS][30ms], GetUser[SUCCESS, RESPONSE_FROM_CACHE][0ms]"
    );
}

/// Found by a fresh user's trial: a run that went on for its waiters ran to its end after they
/// had all left too. Now it is cancelled when the last waiter leaves, as Hystrix's cached
/// observable unsubscribes from the command. Failed before the fix: the run was not cancelled.
#[test]
fn a_run_that_went_on_for_its_waiters_is_cancelled_when_the_last_one_leaves() {
    let Pair {
        test: _test,
        get_user,
        calls,
        send,
        ctx,
        _entered,
        owner,
        waiter,
    } = Pair::started();
    drop(owner); // goes on, for the waiter
    drop(waiter); // the last one: the run stops
    // The executor drops the aborted task on one of its threads; the bound turns a run that
    // is never cancelled into a failure instead of a hang.
    let cancelled = || get_user.metrics().cumulative_count(EventType::Cancelled);
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    while cancelled() < 2 {
        assert!(
            std::time::Instant::now() < give_up,
            "the run was not cancelled"
        );
        std::thread::yield_now();
    }
    assert!(send.send(1).is_err(), "the run was dropped");
    assert_eq!(get_user.metrics().cumulative_count(EventType::Success), 0);
    assert_eq!(
        ctx.request_log().to_string(),
        "GetUser[RESPONSE_FROM_CACHE, CANCELLED][0ms], GetUser[CANCELLED][0ms]"
    );
    // Its entry left the cache: the next execution runs anew.
    let later = get_user
        .run(counted(&calls, 5))
        .cache_key("k")
        .execute_outcome();
    assert_eq!(**later.response().as_ref().unwrap(), 5);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[test]
fn a_dropped_waiter_counts_as_a_cancelled_cache_hit_and_the_run_goes_on() {
    let clock = hystrix::clock::ManualClock::new();
    let notifier = RecordingNotifier::default();
    let registry = Registry::builder()
        .clock(clock.clone())
        .event_notifier(notifier.clone())
        .build();
    let get_user = builder("GetUser").build_in(&registry).unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let (send, run) = answered_later(&calls);
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    let (mut owner, waiter) = owner_and_waiter(&get_user, run, counted_async(&calls, 0));
    clock.advance(Duration::from_millis(5));
    notifier.take();
    drop(waiter);
    let metrics = get_user.metrics();
    assert_eq!(metrics.cumulative_count(EventType::ResponseFromCache), 1);
    assert_eq!(metrics.cumulative_count(EventType::Cancelled), 1);
    assert_eq!(
        ctx.request_log().to_string(),
        "GetUser[RESPONSE_FROM_CACHE, CANCELLED][5ms]"
    );
    send.send(7).unwrap();
    let Poll::Ready(outcome) = poll_once(owner.as_mut()) else {
        panic!("the owner's run answered")
    };
    assert_eq!(**outcome.response().as_ref().unwrap(), 7);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        ctx.request_log().to_string(),
        "GetUser[RESPONSE_FROM_CACHE, CANCELLED][5ms], GetUser[SUCCESS][5ms]"
    );
    let heard = notifier.take();
    assert_eq!(
        heard[..3],
        [
            "GetUser:RESPONSE_FROM_CACHE",
            "GetUser:CANCELLED",
            "GetUser:executed SEMAPHORE 0ms [RESPONSE_FROM_CACHE, CANCELLED]",
        ],
        "{heard:?}"
    );
}

#[test]
fn without_an_executor_a_dropped_owner_is_cancelled_and_its_waiter_runs_its_own() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let registry = Registry::builder()
        .executor(runtime.handle().clone())
        .build();
    drop(runtime);
    let get_user = builder("GetUser").build_in(&registry).unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    let (owner, mut waiter) =
        owner_and_waiter(&get_user, std::future::pending(), counted_async(&calls, 3));
    drop(owner);
    let Poll::Ready(outcome) = poll_once(waiter.as_mut()) else {
        panic!("the waiter ran its own run")
    };
    assert_eq!(**outcome.response().as_ref().unwrap(), 3);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(get_user.metrics().cumulative_count(EventType::Cancelled), 1);
}

/// Keeps `cmd`'s pool thread busy with a run that answers 0 once released: returns its handle
/// and the release.
fn hold_the_pool(
    cmd: &Command,
) -> (
    hystrix::command::QueuedExecution<u32, DependencyError>,
    std::sync::mpsc::Sender<()>,
) {
    let (started_tx, started) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = cmd
        .run(move || {
            started_tx.send(()).unwrap();
            release_rx.recv().unwrap();
            Ok::<u32, DependencyError>(0)
        })
        .queue();
    started.recv().unwrap();
    (holder, release)
}

#[test]
fn cancel_of_a_queued_owner_with_a_waiter_lets_the_run_go_on() {
    let test = TestRegistry::new();
    // THREAD isolation on a pool of one thread, held busy: the owner's run waits in the queue.
    let get_user = Command::builder("GetUser")
        .group("Users")
        .thread_pool_property("coreSize", 1)
        .thread_pool_property("maxQueueSize", 5)
        .timeout(Duration::from_secs(60))
        .build_in(test.registry())
        .unwrap();
    let (holder, release) = hold_the_pool(&get_user);
    let calls = Arc::new(AtomicU32::new(0));
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    let owner = get_user.run(counted(&calls, 9)).cache_key("k").queue();
    let waiter = get_user.run(counted(&calls, 0)).cache_key("k").queue();
    assert_eq!(
        get_user.thread_pool_metrics().unwrap().current_queue_size,
        1
    );

    assert!(owner.cancel());
    // Others wait for it: it stays queued.
    assert_eq!(
        get_user.thread_pool_metrics().unwrap().current_queue_size,
        1
    );
    assert_eq!(
        owner.get().unwrap_err().failure_type(),
        FailureType::Cancelled
    );
    release.send(()).unwrap();
    assert_eq!(holder.get().unwrap(), 0);
    let outcome = waiter.get_outcome();
    assert_eq!(**outcome.response().as_ref().unwrap(), 9);
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["SUCCESS", "RESPONSE_FROM_CACHE"]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Nobody waits: cancel() withdraws the queued run at once, as without a cache key.
    let (holder, release) = hold_the_pool(&get_user);
    let alone = get_user.run(counted(&calls, 8)).cache_key("other").queue();
    assert_eq!(
        get_user.thread_pool_metrics().unwrap().current_queue_size,
        1
    );
    assert!(alone.cancel());
    assert_eq!(
        get_user.thread_pool_metrics().unwrap().current_queue_size,
        0
    );
    release.send(()).unwrap();
    assert_eq!(holder.get().unwrap(), 0);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn without_a_request_context_a_cache_key_is_a_clear_error_and_nothing_runs() {
    let test = TestRegistry::new();
    let get_user = builder("GetUser").build_in(test.registry()).unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let err = get_user
        .run(counted(&calls, 1))
        .cache_key("u1")
        .execute()
        .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::NoRequestContext);
    assert_eq!(
        err.to_string(),
        "command GetUser has a cache key, but no request context is current, so request \
         caching is not available: open one around the request with \
         RequestContext::new().scope(future).await (async) or RequestContext::new().enter() \
         (sync), or turn the cache off with requestCache.enabled=false"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(get_user.metrics().cumulative_count(EventType::Success), 0);
    let cleared = get_user.clear_cache("u1").unwrap_err();
    assert_eq!(cleared.failure_type(), FailureType::NoRequestContext);
}

#[test]
fn request_cache_enabled_false_runs_every_execution_without_needing_a_context() {
    let test = TestRegistry::new();
    let get_user = builder("GetUser")
        .property("requestCache.enabled", false)
        .build_in(test.registry())
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    for value in [1, 2] {
        let got = get_user
            .run(counted(&calls, value))
            .cache_key("u1")
            .execute()
            .unwrap();
        assert_eq!(*got, value);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        get_user
            .metrics()
            .cumulative_count(EventType::ResponseFromCache),
        0
    );
}

#[test]
fn clear_removes_one_entry_so_the_next_execution_runs_anew() {
    let test = TestRegistry::new();
    let get_user = builder("GetUser").build_in(test.registry()).unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    let execute = |value| {
        *get_user
            .run(counted(&calls, value))
            .cache_key("u1")
            .execute()
            .unwrap()
    };
    assert_eq!(execute(1), 1);
    assert_eq!(execute(2), 1);
    assert!(get_user.clear_cache("u1").unwrap());
    assert!(!get_user.clear_cache("u1").unwrap());
    assert_eq!(execute(3), 3);
    assert!(ctx.clear_cache(get_user.key(), "u1"));
    assert_eq!(execute(4), 4);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[test]
fn the_notifier_hears_a_hit_as_response_from_cache_only() {
    let notifier = RecordingNotifier::default();
    let registry = Registry::builder().event_notifier(notifier.clone()).build();
    let get_user = builder("GetUser").build_in(&registry).unwrap();
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    get_user
        .run(|| Ok::<u32, DependencyError>(1))
        .cache_key("u1")
        .execute()
        .unwrap();
    notifier.take();
    get_user
        .run(|| Ok::<u32, DependencyError>(1))
        .cache_key("u1")
        .execute()
        .unwrap();
    let heard = notifier.take();
    assert_eq!(heard.len(), 2, "{heard:?}");
    assert_eq!(heard[0], "GetUser:RESPONSE_FROM_CACHE");
    assert!(
        heard[1].starts_with("GetUser:executed SEMAPHORE 0ms"),
        "{heard:?}"
    );
}

#[test]
fn thread_isolated_and_async_scoped_executions_use_the_cache() {
    let test = TestRegistry::new();
    let pooled = Command::builder("Pooled")
        .group("Test")
        .isolation(IsolationStrategy::Thread)
        .build_in(test.registry())
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let ctx = RequestContext::new();
    let values = futures::executor::block_on(ctx.scope(async {
        let first = pooled
            .run(counted(&calls, 1))
            .cache_key("k")
            .execute_async()
            .await
            .unwrap();
        let second = pooled
            .run_async(async { Ok::<u32, DependencyError>(2) })
            .cache_key("k")
            .execute_async()
            .await
            .unwrap();
        (*first, *second)
    }));
    assert_eq!(values, (1, 1));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        ctx.request_log().to_string(),
        "Pooled[SUCCESS][0ms], Pooled[SUCCESS, RESPONSE_FROM_CACHE][0ms]"
    );
}

#[test]
fn two_definitions_of_one_key_with_different_types_get_a_misuse_error() {
    let test = TestRegistry::new();
    let as_number = builder("Shared").build_in(test.registry()).unwrap();
    let as_text = builder("Shared").build_in(test.registry()).unwrap();
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    as_number
        .run(|| Ok::<u32, DependencyError>(1))
        .cache_key("k")
        .execute()
        .unwrap();
    let err = as_text
        .run(|| Ok::<String, DependencyError>("one".into()))
        .cache_key("k")
        .execute()
        .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Misuse);
    assert!(
        err.to_string()
            .contains("with another response or error type")
    );
}

struct GetGreeting {
    command: Command,
    name: &'static str,
    calls: Arc<AtomicU32>,
}

impl HystrixCommand for GetGreeting {
    type Response = String;
    type Error = DependencyError;

    fn command(&self) -> &Command {
        &self.command
    }

    fn run(&self) -> Result<String, DependencyError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(format!("Hello, {}!", self.name))
    }

    fn cache_key(&self) -> Option<String> {
        Some(self.name.to_owned())
    }
}

#[test]
fn a_trait_command_uses_its_cache_key_in_execute_cached() {
    let test = TestRegistry::new();
    let command = builder("Greet").build_in(test.registry()).unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let greet = |name| GetGreeting {
        command: command.clone(),
        name,
        calls: Arc::clone(&calls),
    };
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    assert_eq!(*greet("Ada").execute_cached().unwrap(), "Hello, Ada!");
    assert_eq!(*greet("Ada").execute_cached().unwrap(), "Hello, Ada!");
    assert_eq!(*greet("Bob").execute_cached().unwrap(), "Hello, Bob!");
    // The owned-response modes do not use the cache.
    assert_eq!(greet("Ada").execute().unwrap(), "Hello, Ada!");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[test]
fn queue_and_observe_look_up_at_once_and_a_detached_run_still_fills_the_cache() {
    let test = TestRegistry::new();
    let get_user = builder("GetUser").build_in(test.registry()).unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let (send, run) = answered_later(&calls);
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    let owner = get_user.run_async(run).cache_key("u1").queue();
    assert!(!owner.is_done(), "the run waits on the channel");
    let observed = get_user
        .run_async(async { Ok::<u32, DependencyError>(0) })
        .cache_key("u1")
        .observe();
    let mut queued_hit = get_user
        .run_async(async { Ok::<u32, DependencyError>(0) })
        .cache_key("u1")
        .queue();
    assert!(
        queued_hit.get_timeout(Duration::ZERO).is_none(),
        "still waiting"
    );
    drop(owner); // detached: the execution goes on and fills the cache
    send.send(9).unwrap();

    let items: Vec<_> = futures::executor::block_on_stream(observed).collect();
    assert_eq!(items.len(), 1);
    assert_eq!(*items[0].as_ref().unwrap().as_ref(), 9);
    assert_eq!(*queued_hit.get().unwrap(), 9);
    let later = get_user
        .run(counted(&calls, 1))
        .cache_key("u1")
        .execute()
        .unwrap();
    assert_eq!(*later, 9);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        get_user
            .metrics()
            .cumulative_count(EventType::ResponseFromCache),
        3
    );
    assert_eq!(
        ctx.request_log().to_string(),
        "GetUser[SUCCESS][0ms], GetUser[SUCCESS, RESPONSE_FROM_CACHE][0ms]x3"
    );
}

#[test]
fn an_execution_that_needs_its_own_cache_key_inside_its_run_gets_an_error_not_a_hang() {
    let test = TestRegistry::new();
    let get_user = builder("GetUser").build_in(test.registry()).unwrap();
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    let inner = get_user.clone();
    let outer = get_user
        .run(move || {
            let err = inner
                .run(|| Ok::<u32, DependencyError>(1))
                .cache_key("k")
                .execute()
                .unwrap_err();
            assert_eq!(err.failure_type(), FailureType::Misuse);
            assert_eq!(
                err.to_string(),
                "command GetUser was executed with cache key \"k\" inside the run of the \
                 execution that has this cache key, which would wait for itself forever; give the \
                 inner execution another cache key"
            );
            Ok::<u32, DependencyError>(2)
        })
        .cache_key("k")
        .execute()
        .unwrap();
    assert_eq!(*outer, 2);
    // The async form of the blocking modes also gives the execution result.
    let hit = get_user
        .run_async(async { Ok::<u32, DependencyError>(3) })
        .cache_key("k")
        .execute_outcome();
    assert_eq!(**hit.response().as_ref().unwrap(), 2);
    assert!(hit.is_response_from_cache());
}

#[test]
fn clearing_without_a_context_does_not_advise_turning_the_cache_off() {
    let test = TestRegistry::new();
    let get_user = builder("GetUser").build_in(test.registry()).unwrap();
    assert_eq!(
        get_user.clear_cache("u1").unwrap_err().to_string(),
        "command GetUser could not clear a cache key, but no request context is current, so \
         request caching is not available: open one around the request with \
         RequestContext::new().scope(future).await (async) or RequestContext::new().enter() \
         (sync)"
    );
}
