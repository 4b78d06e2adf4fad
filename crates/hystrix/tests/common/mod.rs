//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hystrix::testing::TestRegistry;
use hystrix::{Command, CommandBuilder, CommandKey, EventNotifier, EventType, IsolationStrategy};

/// A run error with a message, as a real client would return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DependencyError(pub &'static str);

impl std::fmt::Display for DependencyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for DependencyError {}

/// A blocking run that takes `ms` of manual time, then returns `value`: it advances the clock
/// itself (a SEMAPHORE run executes on the caller's thread, so this stands for a slow dependency,
/// deterministically).
pub fn slow(
    test: &TestRegistry,
    ms: u64,
    value: u32,
) -> impl FnOnce() -> Result<u32, DependencyError> + Send + 'static {
    let test = test.clone();
    move || {
        test.advance(std::time::Duration::from_millis(ms));
        Ok(value)
    }
}

/// A retry classifier for which a `"503"` error says overload (a drop for adaptive limits)
/// and any other error is plainly retryable.
pub fn overload_on_503(e: &DependencyError) -> hystrix::retry::RetryAnswer {
    if e.0 == "503" {
        hystrix::retry::RetryAnswer::retry().overloaded()
    } else {
        hystrix::retry::RetryAnswer::retry()
    }
}

/// A builder for a SEMAPHORE command in group "Test".
pub fn builder(key: &str) -> CommandBuilder {
    Command::builder(key)
        .group("Test")
        .isolation(IsolationStrategy::Semaphore)
}

/// A SEMAPHORE command with default properties in `test`'s registry.
pub fn command(test: &TestRegistry, key: &str) -> Command {
    builder(key).build_in(test.registry()).unwrap()
}

/// The events as Hystrix names, in order.
pub fn names(events: hystrix::EventCounts) -> Vec<&'static str> {
    events.iter().map(EventType::name).collect()
}

/// Polls a future once with a no-op waker (deterministic stepping of async executions).
pub fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>) -> Poll<F::Output> {
    let waker = futures::task::noop_waker();
    future.poll(&mut Context::from_waker(&waker))
}

/// Records every notifier call as text.
#[derive(Clone, Default)]
pub struct RecordingNotifier(pub Arc<Mutex<Vec<String>>>);

impl RecordingNotifier {
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl EventNotifier for RecordingNotifier {
    fn mark_event(&self, event: EventType, key: &CommandKey) {
        self.0.lock().unwrap().push(format!("{key}:{event}"));
    }

    fn mark_command_execution(
        &self,
        key: &CommandKey,
        isolation: IsolationStrategy,
        execution_time_ms: u64,
        events: &hystrix::EventCounts,
    ) {
        self.0.lock().unwrap().push(format!(
            "{key}:executed {isolation} {execution_time_ms}ms {events:?}"
        ));
    }
}

/// Threads of this process whose name starts with `prefix` (Linux: /proc/self/task).
pub fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end().starts_with(prefix))
        .count()
}

/// Records every circuit-breaker event as a line of text (`Key[/breaker key] what`).
#[derive(Clone, Default)]
pub struct BreakerEvents(pub Arc<Mutex<Vec<String>>>);

impl hystrix::CircuitBreakerListener for BreakerEvents {
    fn on_event(&self, event: &hystrix::CircuitBreakerEvent) {
        use hystrix::circuit::BreakerEventKind as Kind;
        let who = match &event.breaker_key {
            Some(key) => format!("{}/{key}", event.command_key),
            None => event.command_key.to_string(),
        };
        let what = match &event.kind {
            Kind::Opened {
                cause,
                open_duration_ms,
                ..
            } => format!("opened for {open_duration_ms} ms: {cause}"),
            Kind::HalfOpened { by_probe: false } => "half-open".to_owned(),
            Kind::HalfOpened { by_probe: true } => "half-open by probe".to_owned(),
            Kind::Closed { by_store: false } => "closed".to_owned(),
            Kind::Closed { by_store: true } => "closed by store".to_owned(),
            Kind::ForcedOpen => "forced open".to_owned(),
            Kind::ForcedClosed => "forced closed".to_owned(),
            Kind::Reset => "reset".to_owned(),
            Kind::Journalled(entry) => format!("journalled {}", entry.description),
            Kind::Replayed(entry) => format!("replayed {}", entry.description),
            Kind::JournalDropped(entry) => format!("journal dropped {}", entry.description),
            other => format!("{other:?}"),
        };
        self.0.lock().unwrap().push(format!("{who} {what}"));
    }
}

impl BreakerEvents {
    /// The events recorded since the last call.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// Polls `future` to its end, moving `test`'s manual clock to the next timer whenever it waits
/// (an execution waiting on a retry delay or a deadline).
pub fn drive<F: Future>(test: &TestRegistry, future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(output) = poll_once(future.as_mut()) {
            return output;
        }
        test.clock()
            .advance_to_next_timer()
            .expect("a waiting execution has a timer");
    }
}

/// A SEMAPHORE command retrying up to `attempts` times (execution timeout 10 s; the default
/// backoff of 100 ms, doubled).
pub fn retrying(test: &TestRegistry, key: &str, attempts: u32) -> Command {
    builder(key)
        .property("retry.maxAttempts", attempts)
        .property("execution.isolation.thread.timeoutInMilliseconds", 10_000)
        .build_in(test.registry())
        .unwrap()
}

/// A cancellable run for a hedged first attempt that loses.
pub type HangingRun =
    Box<dyn FnOnce(hystrix::CancellationToken) -> Result<u32, DependencyError> + Send>;

/// A factory of cancellable runs for hedging on a pool: run 0 sends `()` on `started` when it
/// runs, hangs until its token is cancelled (it loses the race), then sends `()` on
/// `cancelled` and returns 0; every later run answers its number at once.
pub fn first_run_hangs(
    started: std::sync::mpsc::Sender<()>,
    cancelled: std::sync::mpsc::Sender<()>,
) -> impl FnMut() -> HangingRun + Send + 'static {
    let mut made = 0;
    move || {
        let n = made;
        made += 1;
        let (started, cancelled) = (started.clone(), cancelled.clone());
        Box::new(move |token: hystrix::CancellationToken| {
            if n > 0 {
                return Ok(n);
            }
            started.send(()).unwrap();
            while !token.is_cancelled() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            cancelled.send(()).unwrap();
            Ok(0)
        })
    }
}
