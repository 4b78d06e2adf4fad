//! Blocking calls on threads a tokio runtime drives (issue 20, item 3): a blocking run's
//! `execute()` there warns once per command key; on tokio's blocking pool (`spawn_blocking`) it
//! neither warns nor is refused, and neither are an async run's `execute()` and a handle's
//! `get()` there (before the fix, both were refused on any thread with a runtime handle).

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::DependencyError;
use hystrix::testing::TestRegistry;
use hystrix::{Command, FailureType, IsolationStrategy};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Warnings of target `hystrix::command`: (command key, message).
#[derive(Default)]
struct Warnings(Mutex<Vec<(String, String)>>);

struct Fields(BTreeMap<&'static str, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }
}

struct Collect(Arc<Warnings>);

impl Subscriber for Collect {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.is_event() && *metadata.level() == Level::WARN
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if event.metadata().target() != "hystrix::command" {
            return;
        }
        let mut fields = Fields(BTreeMap::new());
        event.record(&mut fields);
        let command = fields.0.remove("command").unwrap_or_default();
        let message = fields.0.remove("message").unwrap_or_default();
        self.0.0.lock().unwrap().push((command, message));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// The process-wide collector (pool and runtime threads log through the global default).
fn warnings() -> &'static Arc<Warnings> {
    static WARNINGS: OnceLock<Arc<Warnings>> = OnceLock::new();
    WARNINGS.get_or_init(|| {
        let warnings = Arc::new(Warnings::default());
        tracing::subscriber::set_global_default(Collect(Arc::clone(&warnings))).unwrap();
        warnings
    })
}

/// The warnings logged for command `key` so far.
fn warnings_of(key: &str) -> Vec<String> {
    warnings()
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(command, _)| command == key)
        .map(|(_, message)| message.clone())
        .collect()
}

fn command(test: &TestRegistry, key: &str, isolation: IsolationStrategy) -> Command {
    Command::builder(key)
        .group(key)
        .isolation(isolation)
        .timeout(Duration::from_secs(60))
        .build_in(test.registry())
        .unwrap()
}

fn runtime(multi_thread: bool) -> tokio::runtime::Runtime {
    let mut builder = if multi_thread {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.worker_threads(2).enable_all().build().unwrap()
}

fn ok(value: u32) -> impl FnOnce() -> Result<u32, DependencyError> + Send + use<> {
    move || Ok(value)
}

#[test]
fn a_blocking_execute_on_a_worker_thread_warns_once_per_command_key() {
    warnings();
    let test = TestRegistry::new();
    let rt = runtime(true);
    for (key, isolation) in [
        ("WarnSemaphore", IsolationStrategy::Semaphore),
        ("WarnThread", IsolationStrategy::Thread),
    ] {
        let cmd = command(&test, key, isolation);
        for round in 0..3 {
            let cmd = cmd.clone();
            // A task on a worker thread.
            let value = rt
                .block_on(rt.spawn(async move { cmd.run(ok(round)).execute() }))
                .unwrap();
            assert_eq!(value.unwrap(), round);
        }
        let logged = warnings_of(key);
        assert_eq!(logged.len(), 1, "{key}: {logged:?}");
        assert_eq!(
            logged[0],
            format!(
                "hystrix: command {key} ran a blocking execute() inside async code a tokio \
                 runtime drives (a task, or a block_on future); it blocks the thread polling it \
                 for up to the command's timeout, and on a runtime worker every task queued \
                 there waits. In async code use execute_async().await or queue(), or call \
                 execute() inside tokio::task::spawn_blocking. (Logged once per command key.)"
            )
        );
    }
}

#[test]
fn a_blocking_execute_inside_block_on_warns() {
    warnings();
    let test = TestRegistry::new();
    let cmd = command(&test, "WarnBlockOn", IsolationStrategy::Semaphore);
    let rt = runtime(false);
    assert_eq!(rt.block_on(async { cmd.run(ok(7)).execute() }).unwrap(), 7);
    assert_eq!(warnings_of("WarnBlockOn").len(), 1);
}

#[test]
fn spawn_blocking_and_plain_threads_do_not_warn() {
    warnings();
    let test = TestRegistry::new();
    for multi_thread in [false, true] {
        let rt = runtime(multi_thread);
        for (key, isolation) in [
            ("QuietSemaphore", IsolationStrategy::Semaphore),
            ("QuietThread", IsolationStrategy::Thread),
        ] {
            let cmd = command(&test, key, isolation);
            let in_pool = cmd.clone();
            let value = rt
                .block_on(rt.spawn_blocking(move || in_pool.run(ok(3)).execute()))
                .unwrap();
            assert_eq!(value.unwrap(), 3);
            // A thread that only entered the runtime's context is no runtime thread either.
            let _entered = rt.enter();
            assert_eq!(cmd.run(ok(4)).execute().unwrap(), 4);
        }
    }
    assert_eq!(cmd_warnings(), 0);

    fn cmd_warnings() -> usize {
        warnings_of("QuietSemaphore").len() + warnings_of("QuietThread").len()
    }
}

#[test]
fn an_async_run_and_a_handle_can_be_waited_on_from_spawn_blocking() {
    let test = TestRegistry::new();
    let cmd = Command::builder("AsyncFromBlockingPool")
        .group("AsyncFromBlockingPool")
        .timeout(Duration::from_secs(60))
        .build_in(test.registry())
        .unwrap();
    for multi_thread in [false, true] {
        let rt = runtime(multi_thread);
        let in_pool = cmd.clone();
        let (executed, got) = rt
            .block_on(rt.spawn_blocking(move || {
                let executed = in_pool
                    .run_async(async { Ok::<_, DependencyError>(5) })
                    .execute();
                let got = in_pool
                    .run_async(async { Ok::<_, DependencyError>(6) })
                    .queue()
                    .get();
                (executed, got)
            }))
            .unwrap();
        assert_eq!((executed.unwrap(), got.unwrap()), (5, 6));
        // On a worker thread, still refused.
        let on_worker = cmd.clone();
        let refused = rt
            .block_on(rt.spawn(async move {
                on_worker
                    .run_async(async { Ok::<_, DependencyError>(1) })
                    .execute()
            }))
            .unwrap();
        assert_eq!(refused.unwrap_err().failure_type(), FailureType::Misuse);
    }
}
