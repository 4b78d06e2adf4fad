//! The `tracing` span of each execution: `hystrix.execution` at DEBUG, target
//! `hystrix::command`, with the command, group and thread-pool keys, the outcome and the
//! latency in ms; user code (run and fallback, here, on a pool thread or across async polls)
//! runs inside it, as a child of the caller's span; no subscriber interest, no span.

#![allow(clippy::unwrap_used)]

mod common;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;
use std::time::Duration;

use common::{DependencyError, builder, poll_once};
use futures::StreamExt;
use hystrix::testing::TestRegistry;
use hystrix::{Command, IsolationStrategy};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// What the subscriber saw of one span.
#[derive(Debug, Clone)]
struct SpanData {
    metadata: &'static Metadata<'static>,
    name: &'static str,
    target: &'static str,
    level: Level,
    parent: Option<u64>,
    fields: BTreeMap<&'static str, String>,
}

/// Collects spans, their fields, and which span each event was emitted in.
#[derive(Default)]
struct Collector {
    spans: Mutex<BTreeMap<u64, SpanData>>,
    /// (message, the span current when it was emitted)
    events: Mutex<Vec<(String, Option<u64>)>>,
    next_id: AtomicU64,
}

thread_local! {
    static STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    /// This test thread wants no `hystrix` spans (as a subscriber filtering them out).
    static HYSTRIX_OFF: Cell<bool> = const { Cell::new(false) };
}

struct Fields<'a>(&'a mut BTreeMap<&'static str, String>);

impl Visit for Fields<'_> {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name(), value.to_string());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }
}

fn current() -> Option<u64> {
    STACK.with(|stack| stack.borrow().last().copied())
}

struct Forward(Arc<Collector>);

impl Subscriber for Forward {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> tracing_core::Interest {
        // Asked at every callsite use, so a thread can turn hystrix spans off.
        tracing_core::Interest::sometimes()
    }
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        !(metadata.target().starts_with("hystrix") && HYSTRIX_OFF.with(Cell::get))
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.0.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let mut fields = BTreeMap::new();
        span.record(&mut Fields(&mut fields));
        let parent = if span.is_root() {
            None
        } else {
            span.parent().map(Id::into_u64).or_else(current)
        };
        self.0.spans.lock().unwrap().insert(
            id,
            SpanData {
                metadata: span.metadata(),
                name: span.metadata().name(),
                target: span.metadata().target(),
                level: *span.metadata().level(),
                parent,
                fields,
            },
        );
        Id::from_u64(id)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some(data) = self.0.spans.lock().unwrap().get_mut(&span.into_u64()) {
            values.record(&mut Fields(&mut data.fields));
        }
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let message = fields.remove("message").unwrap_or_default();
        self.0.events.lock().unwrap().push((message, current()));
    }
    fn enter(&self, span: &Id) {
        STACK.with(|stack| stack.borrow_mut().push(span.into_u64()));
    }
    fn exit(&self, _: &Id) {
        STACK.with(|stack| {
            stack.borrow_mut().pop();
        });
    }
    fn current_span(&self) -> tracing_core::span::Current {
        match current() {
            Some(id) => {
                let metadata = self.0.spans.lock().unwrap()[&id].metadata;
                tracing_core::span::Current::new(Id::from_u64(id), metadata)
            }
            None => tracing_core::span::Current::none(),
        }
    }
}

/// The process's collector (installed once for this test binary).
fn collector() -> &'static Arc<Collector> {
    static INSTALLED: OnceLock<Arc<Collector>> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let collector = Arc::new(Collector::default());
        tracing::subscriber::set_global_default(Forward(Arc::clone(&collector))).unwrap();
        collector
    })
}

/// The execution spans of `command` (oldest first).
fn execution_spans(command: &str) -> Vec<(u64, SpanData)> {
    collector()
        .spans
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, data)| {
            data.name == "hystrix.execution"
                && data.fields.get("command").map(String::as_str) == Some(command)
        })
        .map(|(id, data)| (*id, data.clone()))
        .collect()
}

/// The span each event with this message was emitted in.
fn spans_of_events(message: &str) -> Vec<Option<u64>> {
    collector()
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, _)| m == message)
        .map(|(_, span)| *span)
        .collect()
}

fn fields(data: &SpanData) -> Vec<(&'static str, &str)> {
    data.fields.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[test]
fn a_blocking_execution_has_a_debug_span_with_keys_outcome_and_latency() {
    collector();
    let test = TestRegistry::new();
    let cmd = builder("SpanSync")
        .group("Users")
        .build_in(test.registry())
        .unwrap();
    let clock = test.clock().clone();
    let request = tracing::info_span!("request");
    let request_id = request.id().unwrap().into_u64();
    let _in_request = request.enter();
    let value = cmd
        .run(move || {
            tracing::info!("sync run working");
            clock.advance(Duration::from_millis(7));
            Ok::<_, DependencyError>(1)
        })
        .execute()
        .unwrap();
    assert_eq!(value, 1);

    let spans = execution_spans("SpanSync");
    assert_eq!(spans.len(), 1);
    let (id, span) = &spans[0];
    assert_eq!(span.target, "hystrix::command");
    assert_eq!(span.level, Level::DEBUG);
    assert_eq!(span.parent, Some(request_id));
    assert_eq!(
        fields(span),
        [
            ("command", "SpanSync"),
            ("group", "Users"),
            ("latency_ms", "7"),
            ("outcome", "SUCCESS"),
            ("thread_pool", "Users"),
        ]
    );
    assert_eq!(spans_of_events("sync run working"), [Some(*id)]);
}

#[test]
fn the_outcome_names_every_event_and_the_fallback_runs_in_the_span() {
    collector();
    let test = TestRegistry::new();
    let cmd = builder("SpanFallback").build_in(test.registry()).unwrap();
    let value = cmd
        .run(|| Err::<u32, _>(DependencyError("down")))
        .fallback(|_| {
            tracing::info!("fallback serving");
            Ok::<_, DependencyError>(0)
        })
        .execute()
        .unwrap();
    assert_eq!(value, 0);
    test.force_open("SpanFallback").unwrap();
    let err = cmd.run(|| Ok::<u32, DependencyError>(1)).execute();
    assert!(err.is_err());

    let spans = execution_spans("SpanFallback");
    assert_eq!(spans.len(), 2);
    assert_eq!(spans[0].1.fields["outcome"], "FAILURE, FALLBACK_SUCCESS");
    assert_eq!(spans[0].1.fields["latency_ms"], "0");
    assert_eq!(spans[0].1.parent, None);
    assert_eq!(
        spans[1].1.fields["outcome"],
        "SHORT_CIRCUITED, FALLBACK_MISSING"
    );
    assert_eq!(spans_of_events("fallback serving"), [Some(spans[0].0)]);
}

#[test]
fn an_async_run_is_in_the_span_at_every_poll() {
    collector();
    let test = TestRegistry::new();
    let cmd = builder("SpanAsync").build_in(test.registry()).unwrap();
    let clock = test.clock().clone();
    let (tx, rx) = futures::channel::oneshot::channel::<()>();
    let mut future = Box::pin(
        cmd.run_async(async move {
            tracing::info!("async before await");
            rx.await.unwrap();
            tracing::info!("async after await");
            Ok::<_, DependencyError>(2)
        })
        .execute_async(),
    );
    assert!(poll_once(future.as_mut()).is_pending());
    // Between polls the span is not current on this thread.
    tracing::info!("between polls");
    assert_eq!(spans_of_events("between polls"), [None]);
    clock.advance(Duration::from_millis(12));
    tx.send(()).unwrap();
    assert!(matches!(poll_once(future.as_mut()), Poll::Ready(Ok(2))));

    let spans = execution_spans("SpanAsync");
    assert_eq!(spans.len(), 1);
    let (id, span) = &spans[0];
    assert_eq!(span.fields["outcome"], "SUCCESS");
    assert_eq!(span.fields["latency_ms"], "12");
    assert_eq!(spans_of_events("async before await"), [Some(*id)]);
    assert_eq!(spans_of_events("async after await"), [Some(*id)]);
}

#[test]
fn a_thread_isolated_run_is_in_the_span_on_the_pool_thread() {
    collector();
    let test = TestRegistry::new();
    let cmd = Command::builder("SpanPooled")
        .group("Pooled")
        .thread_pool_key("SpanPool")
        .isolation(IsolationStrategy::Thread)
        .timeout(Duration::from_secs(60))
        .build_in(test.registry())
        .unwrap();
    let thread = cmd
        .run(|| {
            tracing::info!("on the pool");
            Ok::<_, DependencyError>(std::thread::current().name().unwrap_or("").to_owned())
        })
        .execute()
        .unwrap();
    assert!(thread.starts_with("hystrix-SpanPool-"), "{thread}");

    let spans = execution_spans("SpanPooled");
    assert_eq!(spans.len(), 1);
    let (id, span) = &spans[0];
    assert_eq!(span.fields["thread_pool"], "SpanPool");
    assert_eq!(span.fields["outcome"], "SUCCESS");
    assert_eq!(spans_of_events("on the pool"), [Some(*id)]);
}

#[test]
fn a_stream_command_polls_its_run_in_the_span() {
    collector();
    let test = TestRegistry::new();
    let cmd = builder("SpanStream").build_in(test.registry()).unwrap();
    let run = futures::stream::iter([1u32, 2]).map(|value| {
        tracing::info!("stream value");
        Ok::<_, DependencyError>(value)
    });
    let values: Vec<_> =
        futures::executor::block_on(cmd.run_stream(run).to_observable().collect::<Vec<_>>());
    assert_eq!(values.len(), 2);

    let spans = execution_spans("SpanStream");
    assert_eq!(spans.len(), 1);
    let (id, span) = &spans[0];
    assert_eq!(span.fields["outcome"], "EMITx2, SUCCESS");
    assert_eq!(spans_of_events("stream value"), [Some(*id), Some(*id)]);
}

#[test]
fn without_interest_there_is_no_span_and_user_code_stays_in_the_callers_span() {
    collector();
    HYSTRIX_OFF.with(|off| off.set(true));
    let test = TestRegistry::new();
    let cmd = builder("SpanOff").build_in(test.registry()).unwrap();
    let request = tracing::info_span!("request");
    let request_id = request.id().unwrap().into_u64();
    let _in_request = request.enter();
    cmd.run(|| {
        tracing::info!("run without a hystrix span");
        Ok::<_, DependencyError>(())
    })
    .execute()
    .unwrap();
    HYSTRIX_OFF.with(|off| off.set(false));
    assert!(execution_spans("SpanOff").is_empty());
    assert_eq!(
        spans_of_events("run without a hystrix span"),
        [Some(request_id)]
    );
}

#[test]
fn each_attempt_of_a_retried_execution_has_a_child_span_with_its_number() {
    collector();
    let test = TestRegistry::new();
    let cmd = builder("SpanRetry")
        .group("Users")
        .isolation(IsolationStrategy::Semaphore)
        .property("retry.maxAttempts", 3)
        .property("retry.backoff.initialInMilliseconds", 0)
        .build_in(test.registry())
        .unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let value = cmd
        .run_retryable(move || {
            let calls = Arc::clone(&calls);
            move || {
                tracing::info!("retried run working");
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0 | 1 => Err(DependencyError("down")),
                    n => Ok(n),
                }
            }
        })
        .execute()
        .unwrap();
    assert_eq!(value, 2);
    let spans = execution_spans("SpanRetry");
    assert_eq!(spans.len(), 1);
    let execution = spans[0].0;
    let attempts: Vec<(u64, String)> = collector()
        .spans
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, data)| data.name == "hystrix.attempt" && data.parent == Some(execution))
        .map(|(id, data)| (*id, data.fields["attempt"].clone()))
        .collect();
    let numbers: Vec<&str> = attempts.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(numbers, ["1", "2", "3"]);
    // Each run's event was emitted inside its own attempt's span.
    let ids: Vec<Option<u64>> = attempts.iter().map(|(id, _)| Some(*id)).collect();
    assert_eq!(spans_of_events("retried run working"), ids);
}

#[test]
fn each_attempt_of_a_hedged_execution_has_a_span_and_the_execution_names_the_winner() {
    collector();
    let test = TestRegistry::new();
    let cmd = builder("SpanHedge")
        .property("hedging.maxAttempts", 2)
        .property("hedging.delayInMilliseconds", 100)
        .build_in(test.registry())
        .unwrap();
    let clock = Arc::clone(test.registry().clock());
    let calls = Arc::new(AtomicU64::new(0));
    let future = cmd
        .run_async_retryable(move || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            let clock = Arc::clone(&clock);
            async move {
                tracing::info!("hedged run working");
                let ms = if n == 0 { 500 } else { 10 };
                hystrix::clock::sleep(&clock, Duration::from_millis(ms)).await;
                Ok::<_, DependencyError>(n)
            }
        })
        .execute_async();
    assert_eq!(common::drive(&test, future).unwrap(), 1);
    let spans = execution_spans("SpanHedge");
    assert_eq!(spans.len(), 1);
    let (execution, data) = &spans[0];
    // The hedge (attempt 2) won.
    assert_eq!(data.fields["attempt"], "2");
    let attempts: Vec<(u64, String)> = collector()
        .spans
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, data)| data.name == "hystrix.attempt" && data.parent == Some(*execution))
        .map(|(id, data)| (*id, data.fields["attempt"].clone()))
        .collect();
    let numbers: Vec<&str> = attempts.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(numbers, ["1", "2"]);
    let ids: Vec<Option<u64>> = attempts.iter().map(|(id, _)| Some(*id)).collect();
    assert_eq!(spans_of_events("hedged run working"), ids);
}

#[test]
fn a_run_that_cannot_be_hedged_warns_once_even_when_it_succeeds() {
    collector();
    let test = TestRegistry::new();
    let cmd = builder("HedgeIgnored")
        .property("hedging.maxAttempts", 2)
        .build_in(test.registry())
        .unwrap();
    for _ in 0..3 {
        futures::executor::block_on(
            cmd.run_async(async { Ok::<_, DependencyError>(1) })
                .execute_async(),
        )
        .unwrap();
    }
    let warnings = collector()
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|(message, _)| {
            message.starts_with(
                "HedgeIgnored: hedging.maxAttempts is over 1 but this run cannot be hedged",
            )
        })
        .count();
    assert_eq!(warnings, 1);
}

/// The adaptive limit's INFO event (target `hystrix::limit`) comes once the limit has moved
/// by a tenth of the value last logged (at least 1): from 20, not at 21, at 22.
#[test]
fn the_adaptive_limit_is_logged_once_it_moved_a_tenth_of_the_last_logged_value() {
    collector();
    let test = TestRegistry::new();
    let cmd = builder("LimitLog")
        .property("execution.isolation.adaptive.enabled", true)
        .property("execution.isolation.adaptive.algorithm", "AIMD")
        .property("execution.isolation.adaptive.initialLimit", 20)
        .property("execution.isolation.adaptive.windowSize", 1)
        .semaphore_max_concurrent_requests(100)
        .build_in(test.registry())
        .unwrap();
    let logged = || spans_of_events("adaptive concurrency limit moved").len();
    // `concurrent` runs of 10 ms started at once: the last starts with `concurrent` in flight,
    // the only sample with enough in flight (twice it at least the limit) for AIMD to add 1.
    let round = |concurrent: usize| {
        let clock = Arc::clone(test.registry().clock());
        let mut runs: Vec<_> = (0..concurrent)
            .map(|_| {
                let clock = Arc::clone(&clock);
                Box::pin(
                    cmd.run_async(async move {
                        hystrix::clock::sleep(&clock, Duration::from_millis(10)).await;
                        Ok::<u32, DependencyError>(1)
                    })
                    .execute_async(),
                )
            })
            .collect();
        for run in &mut runs {
            assert!(poll_once(run.as_mut()).is_pending());
        }
        test.advance(Duration::from_millis(10));
        for run in &mut runs {
            assert!(matches!(poll_once(run.as_mut()), Poll::Ready(Ok(1))));
        }
        cmd.metrics().adaptive_limit().unwrap().limit
    };
    assert_eq!((round(10), logged()), (21, 0));
    assert_eq!((round(11), logged()), (22, 1));
}
