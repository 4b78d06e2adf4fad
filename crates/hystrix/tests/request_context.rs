//! The request context and the request log (SPEC §7): a context per request, opened around
//! sync code with a guard or around a future with a scope, carried with the `tracing` span to
//! pool threads, the pool's runtime and eager executions; the log's Hystrix string.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{DependencyError, builder};
use futures::executor::block_on;
use hystrix::context::{REQUEST_LOG_CAPACITY, RequestContext};
use hystrix::testing::TestRegistry;
use hystrix::{Command, IsolationStrategy};

fn ok() -> Result<u32, DependencyError> {
    Ok(1)
}

fn boom() -> Result<u32, DependencyError> {
    Err(DependencyError("boom"))
}

#[test]
fn a_request_log_folds_identical_executions_in_hystrixs_format() {
    let test = TestRegistry::new();
    let get_user = builder("GetUser").build_in(test.registry()).unwrap();
    let get_ratings = builder("GetRatings").build_in(test.registry()).unwrap();
    let ctx = RequestContext::new();
    {
        let _entered = ctx.enter();
        assert_eq!(RequestContext::current(), Some(ctx.clone()));
        get_user.run(ok).execute().unwrap();
        for _ in 0..2 {
            let rating = get_ratings
                .run(boom)
                .fallback(|_| Ok::<u32, DependencyError>(0))
                .execute()
                .unwrap();
            assert_eq!(rating, 0);
        }
        get_user.run(ok).execute().unwrap();
    }
    assert_eq!(RequestContext::current(), None);
    let log = ctx.request_log();
    assert_eq!(log.entries().len(), 4);
    assert_eq!(
        log.to_string(),
        "GetUser[SUCCESS][0ms]x2, GetRatings[FAILURE, FALLBACK_SUCCESS][0ms]x2"
    );
}

#[test]
fn execution_times_are_summed_when_folded() {
    let test = TestRegistry::new();
    let slow = builder("Slow")
        .timeout_enabled(false)
        .build_in(test.registry())
        .unwrap();
    let clock = test.clock().clone();
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    for ms in [12, 30] {
        let clock = clock.clone();
        slow.run(move || {
            clock.advance_ms(ms);
            Ok::<u32, DependencyError>(1)
        })
        .execute()
        .unwrap();
    }
    assert_eq!(ctx.request_log().to_string(), "Slow[SUCCESS][42ms]x2");
    assert_eq!(ctx.request_log().entries()[1].execution_time_ms, 30);
}

#[test]
fn executions_without_a_context_run_and_are_not_logged() {
    let test = TestRegistry::new();
    let cmd = builder("Loose").build_in(test.registry()).unwrap();
    assert_eq!(RequestContext::current(), None);
    assert_eq!(cmd.run(ok).execute().unwrap(), 1);
    let ctx = RequestContext::new();
    assert_eq!(ctx.request_log().entries().len(), 0);
    assert_eq!(ctx.request_log().to_string(), "");
}

#[test]
fn request_log_enabled_false_keeps_a_command_out_of_the_log() {
    let test = TestRegistry::new();
    let quiet = builder("Quiet")
        .property("requestLog.enabled", false)
        .build_in(test.registry())
        .unwrap();
    let loud = builder("Loud").build_in(test.registry()).unwrap();
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    quiet.run(ok).execute().unwrap();
    loud.run(ok).execute().unwrap();
    assert_eq!(ctx.request_log().to_string(), "Loud[SUCCESS][0ms]");
}

#[test]
fn the_log_keeps_at_most_1000_executions() {
    let test = TestRegistry::new();
    let cmd = builder("Many").build_in(test.registry()).unwrap();
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    for _ in 0..REQUEST_LOG_CAPACITY + 5 {
        cmd.run(ok).execute().unwrap();
    }
    assert_eq!(ctx.request_log().entries().len(), 1000);
    assert_eq!(ctx.request_log().to_string(), "Many[SUCCESS][0ms]x1000");
}

#[test]
fn guards_nest_and_the_inner_of_a_scope_and_a_guard_wins() {
    let outer = RequestContext::new();
    let inner = RequestContext::new();
    let _outer = outer.enter();
    {
        let _inner = inner.enter();
        assert_eq!(RequestContext::current(), Some(inner.clone()));
    }
    assert_eq!(RequestContext::current(), Some(outer.clone()));
    // A scope opened under a guard is the inner one...
    let seen = block_on(inner.scope(async { RequestContext::current() }));
    assert_eq!(seen, Some(inner.clone()));
    // ...and a guard entered inside a scope is the inner one there.
    let (in_guard, after) = block_on(inner.scope(async {
        let third = RequestContext::new();
        let in_guard = {
            let _g = third.enter();
            RequestContext::current() == Some(third.clone())
        };
        (in_guard, RequestContext::current())
    }));
    assert!(in_guard);
    assert_eq!(after, Some(inner));
}

#[test]
fn a_guard_dropped_out_of_order_leaves_only_its_own_entry() {
    let a = RequestContext::new();
    let b = RequestContext::new();
    let guard_a = a.enter();
    let guard_b = b.enter();
    drop(guard_a);
    assert_eq!(RequestContext::current(), Some(b.clone()));
    drop(guard_b);
    assert_eq!(RequestContext::current(), None);
}

#[test]
fn request_log_enabled_is_read_when_the_execution_starts() {
    let test = TestRegistry::new();
    let cmd = builder("Flip")
        .timeout_enabled(false)
        .build_in(test.registry())
        .unwrap();
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    let registry = test.registry().clone();
    cmd.run(move || {
        registry
            .properties()
            .set("hystrix.command.Flip.requestLog.enabled", false)
            .unwrap();
        Ok::<u32, DependencyError>(1)
    })
    .execute()
    .unwrap();
    assert_eq!(ctx.request_log().to_string(), "Flip[SUCCESS][0ms]");
    // Off at the start: not logged, even if switched on before it ends.
    let registry = test.registry().clone();
    cmd.run(move || {
        registry
            .properties()
            .set("hystrix.command.Flip.requestLog.enabled", true)
            .unwrap();
        Ok::<u32, DependencyError>(1)
    })
    .execute()
    .unwrap();
    assert_eq!(ctx.request_log().entries().len(), 1);
}

#[test]
fn an_async_execution_in_a_scope_is_logged_and_sees_its_context() {
    let test = TestRegistry::new();
    let cmd = builder("Async").build_in(test.registry()).unwrap();
    let ctx = RequestContext::new();
    let seen = block_on(ctx.scope(async {
        cmd.run_async(async { Ok::<_, DependencyError>(RequestContext::current()) })
            .execute_async()
            .await
            .unwrap()
    }));
    assert_eq!(seen, Some(ctx.clone()));
    assert_eq!(ctx.request_log().to_string(), "Async[SUCCESS][0ms]");
}

fn thread_isolated(test: &TestRegistry, key: &str) -> Command {
    Command::builder(key)
        .group("Pooled")
        .isolation(IsolationStrategy::Thread)
        .timeout(Duration::from_secs(60))
        .build_in(test.registry())
        .unwrap()
}

#[test]
fn the_context_and_the_span_are_re_entered_on_pool_threads() {
    let spans = TestSubscriber::install();
    let test = TestRegistry::new();
    let cmd = thread_isolated(&test, "Pooled");
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    let span = tracing::info_span!("request", id = 7);
    let _in_span = span.enter();
    let (on_pool, thread) = cmd
        .run(move || {
            let name = std::thread::current().name().unwrap_or("").to_owned();
            Ok::<_, DependencyError>((RequestContext::current(), (name, spans.current())))
        })
        .execute()
        .unwrap();
    assert!(thread.0.starts_with("hystrix-Pooled-"), "{}", thread.0);
    // The run is in the execution's span (tests/tracing_span.rs), a child of "request".
    assert_eq!(thread.1, Some("hystrix.execution"));
    assert_eq!(on_pool, Some(ctx.clone()));
    // An async run on the pool's runtime, too.
    let on_runtime = cmd
        .run_async(async { Ok::<_, DependencyError>(RequestContext::current()) })
        .execute()
        .unwrap();
    assert_eq!(on_runtime, Some(ctx.clone()));
    assert_eq!(ctx.request_log().to_string(), "Pooled[SUCCESS][0ms]x2");
}

/// Queues on `cmd`, inside `ctx`, a run that waits until told through the returned sender and
/// then answers the context current in it.
fn queue_until_told(
    cmd: &Command,
    ctx: &RequestContext,
) -> (
    futures::channel::oneshot::Sender<()>,
    hystrix::command::QueuedExecution<Option<RequestContext>, DependencyError>,
) {
    let (tx, rx) = futures::channel::oneshot::channel::<()>();
    let _entered = ctx.enter();
    let handle = cmd
        .run_async(async move {
            rx.await.unwrap();
            Ok::<_, DependencyError>(RequestContext::current())
        })
        .queue();
    (tx, handle)
}

#[test]
fn an_eager_execution_carries_the_context_to_the_executor() {
    let test = TestRegistry::new();
    let cmd = builder("Eager").build_in(test.registry()).unwrap();
    let ctx = RequestContext::new();
    let (tx, handle) = queue_until_told(&cmd, &ctx);
    // The run finishes on the executor, after the caller left the context.
    tx.send(()).unwrap();
    assert_eq!(handle.get().unwrap(), Some(ctx.clone()));
    assert_eq!(ctx.request_log().to_string(), "Eager[SUCCESS][0ms]");
}

/// A minimal `tracing` subscriber that knows each thread's current span, so a test can see
/// which span user code runs in.
struct TestSubscriber {
    spans: Mutex<Vec<&'static tracing::Metadata<'static>>>,
}

thread_local! {
    static STACK: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The installed subscriber's view of spans.
struct Spans;

impl Spans {
    /// The name of this thread's current span, as `tracing::Span::current()` sees it.
    fn current(&self) -> Option<&'static str> {
        tracing::Span::current()
            .metadata()
            .map(|metadata| metadata.name())
    }
}

impl TestSubscriber {
    /// Installs it as the process's subscriber (once).
    fn install() -> Spans {
        static INSTALLED: std::sync::OnceLock<Arc<TestSubscriber>> = std::sync::OnceLock::new();
        let subscriber = INSTALLED.get_or_init(|| {
            let subscriber = Arc::new(TestSubscriber {
                spans: Mutex::new(Vec::new()),
            });
            tracing::subscriber::set_global_default(Forward(Arc::clone(&subscriber))).unwrap();
            subscriber
        });
        let _ = subscriber;
        Spans
    }
}

struct Forward(Arc<TestSubscriber>);

impl tracing::Subscriber for Forward {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut spans = self.0.spans.lock().unwrap();
        spans.push(span.metadata());
        tracing::span::Id::from_u64(spans.len() as u64)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, span: &tracing::span::Id) {
        STACK.with(|stack| stack.borrow_mut().push(span.into_u64()));
    }
    fn exit(&self, _: &tracing::span::Id) {
        STACK.with(|stack| {
            stack.borrow_mut().pop();
        });
    }
    fn current_span(&self) -> tracing_core::span::Current {
        let Some(id) = STACK.with(|stack| stack.borrow().last().copied()) else {
            return tracing_core::span::Current::none();
        };
        let metadata = self.0.spans.lock().unwrap()[id as usize - 1];
        tracing_core::span::Current::new(tracing::span::Id::from_u64(id), metadata)
    }
}

/// The logs of finished contexts that mention `key` (listeners hear every context of the
/// process, and tests run in parallel), as their strings.
fn hear(
    key: &'static str,
) -> (
    Arc<Mutex<Vec<String>>>,
    hystrix::context::RequestLogSubscription,
) {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&heard);
    let subscription = hystrix::context::subscribe_request_logs(move |log| {
        if log.entries().iter().any(|e| e.command_key.as_str() == key) {
            sink.lock().unwrap().push(log.to_string());
        }
    });
    (heard, subscription)
}

/// A new request context in which `run` ran.
fn request(run: impl FnOnce()) -> RequestContext {
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    run();
    drop(_entered);
    ctx
}

#[test]
fn a_context_publishes_its_log_once_when_its_last_handle_drops() {
    let test = TestRegistry::new();
    let cmd = builder("Published").build_in(test.registry()).unwrap();
    let (heard, subscription) = hear("Published");
    let ctx = request(|| {
        cmd.run(ok).execute().unwrap();
        cmd.run(boom).execute().unwrap_err();
    });
    let clone = ctx.clone();
    drop(ctx);
    assert!(
        heard.lock().unwrap().is_empty(),
        "a clone keeps the request open"
    );
    drop(clone);
    assert_eq!(
        *heard.lock().unwrap(),
        ["Published[SUCCESS][0ms], Published[FAILURE, FALLBACK_MISSING][0ms]"]
    );
    // A context that logged nothing is not published; after unsubscribing nothing is heard.
    drop(RequestContext::new());
    drop(subscription);
    drop(request(|| {
        cmd.run(ok).execute().unwrap();
    }));
    assert_eq!(heard.lock().unwrap().len(), 1);
}

#[test]
fn an_execution_carrying_the_context_keeps_the_request_open_until_it_ends() {
    let test = TestRegistry::new();
    let cmd = builder("Carrying").build_in(test.registry()).unwrap();
    let (heard, _subscription) = hear("Carrying");
    let ctx = RequestContext::new();
    let (tx, handle) = queue_until_told(&cmd, &ctx);
    drop(ctx);
    std::thread::sleep(Duration::from_millis(20));
    assert!(heard.lock().unwrap().is_empty(), "the run still carries it");
    tx.send(()).unwrap();
    // (The answer is the context: dropped at once, it is no longer a handle.)
    assert!(handle.get().unwrap().is_some());
    // The executor's task lets its copy go just after answering: a bounded wait.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while heard.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(*heard.lock().unwrap(), ["Carrying[SUCCESS][0ms]"]);
}

#[test]
fn a_panicking_listener_neither_stops_the_others_nor_reaches_the_dropper() {
    let test = TestRegistry::new();
    let cmd = builder("Panicky").build_in(test.registry()).unwrap();
    let _panics = hystrix::context::subscribe_request_logs(|_| panic!("listener bug"));
    let (heard, _subscription) = hear("Panicky");
    drop(request(|| {
        cmd.run(ok).execute().unwrap();
    }));
    assert_eq!(*heard.lock().unwrap(), ["Panicky[SUCCESS][0ms]"]);
}
