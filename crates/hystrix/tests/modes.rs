//! SPEC §3.9: what each execution mode surfaces, for every row that applies, in all five modes
//! (`execute`, `execute_async`, `to_observable`, `queue`, `observe`), for blocking and async runs
//! under THREAD and SEMAPHORE isolation. Each case uses a command key of its own, so its
//! metrics hold exactly its events.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::DependencyError;
use futures::StreamExt;
use futures::executor::block_on;
use hystrix::command::{Async, AsyncFallback, Blocking, BlockingFallback, Cancellable, RunFn};
use hystrix::testing::TestRegistry;
use hystrix::{
    AllFailures, Class, Command, EventType, Execution, FailureType, HystrixError, IsolationStrategy,
};

type Error = HystrixError<DependencyError>;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Execute,
    ExecuteAsync,
    ToObservable,
    Queue,
    Observe,
}

const MODES: [Mode; 5] = [
    Mode::Execute,
    Mode::ExecuteAsync,
    Mode::ToObservable,
    Mode::Queue,
    Mode::Observe,
];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    BlockingThread,
    BlockingSemaphore,
    AsyncSemaphore,
    AsyncThread,
}

const KINDS: [Kind; 4] = [
    Kind::BlockingThread,
    Kind::BlockingSemaphore,
    Kind::AsyncSemaphore,
    Kind::AsyncThread,
];

impl Kind {
    fn isolation(self) -> IsolationStrategy {
        match self {
            Kind::BlockingThread | Kind::AsyncThread => IsolationStrategy::Thread,
            Kind::BlockingSemaphore | Kind::AsyncSemaphore => IsolationStrategy::Semaphore,
        }
    }

    fn blocking(self) -> bool {
        matches!(self, Kind::BlockingThread | Kind::BlockingSemaphore)
    }
}

/// Consumes an execution in a mode and returns what the caller sees.
trait Drive {
    fn drive(self, mode: Mode) -> Result<u32, Error>;
}

fn drive_async<R, FB>(
    execution: Execution<'_, AllFailures, R, FB>,
    mode: Mode,
) -> Result<u32, Error>
where
    R: RunFn<Output = u32, Error = DependencyError>,
    FB: AsyncFallback<u32, DependencyError> + Send + 'static,
    FB::Future: Send + 'static,
{
    match mode {
        Mode::ExecuteAsync => block_on(execution.execute_async()),
        Mode::ToObservable => {
            let mut stream = std::pin::pin!(execution.to_observable());
            let item = block_on(stream.next()).unwrap();
            assert!(block_on(stream.next()).is_none(), "one item, then the end");
            item
        }
        Mode::Queue => execution.queue().get(),
        Mode::Observe => {
            let mut stream = execution.observe();
            let item = block_on(stream.next()).unwrap();
            assert!(block_on(stream.next()).is_none(), "one item, then the end");
            item
        }
        Mode::Execute => unreachable!("execute() is driven by the run kind"),
    }
}

macro_rules! blocking_drive {
    ($kind:ident, $($f:tt)*) => {
        impl<F, FB> Drive for Execution<'_, AllFailures, $kind<F>, FB>
        where
            F: $($f)* + Send + 'static,
            FB: BlockingFallback<u32, DependencyError>
                + AsyncFallback<u32, DependencyError>
                + Send
                + 'static,
            FB::Future: Send + 'static,
        {
            fn drive(self, mode: Mode) -> Result<u32, Error> {
                match mode {
                    Mode::Execute => self.execute(),
                    mode => drive_async(self, mode),
                }
            }
        }
    };
}
blocking_drive!(Blocking, FnOnce() -> Result<u32, DependencyError>);
blocking_drive!(Cancellable, FnOnce(hystrix::CancellationToken) -> Result<u32, DependencyError>);

impl<Fut, FB> Drive for Execution<'_, AllFailures, Async<Fut>, FB>
where
    Fut: Future<Output = Result<u32, DependencyError>> + Send + 'static,
    FB: AsyncFallback<u32, DependencyError> + Send + 'static,
    FB::Future: Send + 'static,
{
    fn drive(self, mode: Mode) -> Result<u32, Error> {
        match mode {
            Mode::Execute => self.execute(),
            mode => drive_async(self, mode),
        }
    }
}

/// One case: a fresh registry and a command of `kind` for it.
struct Case {
    test: TestRegistry,
    command: Command,
    label: String,
}

impl Case {
    fn new(
        row: &str,
        kind: Kind,
        mode: Mode,
        configure: impl FnOnce(hystrix::CommandBuilder) -> hystrix::CommandBuilder,
    ) -> Self {
        let test = TestRegistry::new();
        let key = format!("{row}-{kind:?}-{mode:?}");
        let builder = Command::builder(&key)
            .group(format!("Pool-{row}"))
            .isolation(kind.isolation());
        let command = configure(builder).build_in(test.registry()).unwrap();
        Case {
            test,
            command,
            label: key,
        }
    }

    /// The events counted for this case's command, in Hystrix's order.
    fn events(&self) -> Vec<&'static str> {
        let metrics = self.command.metrics();
        EventType::ALL
            .iter()
            .filter(|e| **e != EventType::ExceptionThrown && metrics.cumulative_count(**e) > 0)
            .map(|e| e.name())
            .collect()
    }
}

/// Runs `execution` in `mode` for each kind: `$blocking` and `$async_run` are the run for
/// blocking and async kinds; `$decorate` adds options to the execution.
macro_rules! run_case {
    ($case:expr, $kind:expr, $mode:expr, $blocking:expr, $async_run:expr, |$e:ident| $decorate:expr) => {
        if $kind.blocking() {
            let $e = $case.command.run($blocking);
            $decorate.drive($mode)
        } else {
            let $e = $case.command.run_async($async_run);
            $decorate.drive($mode)
        }
    };
}

fn each_case(mut check: impl FnMut(Kind, Mode)) {
    for kind in KINDS {
        for mode in MODES {
            check(kind, mode);
        }
    }
}

#[test]
fn success_returns_the_value() {
    each_case(|kind, mode| {
        let case = Case::new("Success", kind, mode, |b| b);
        let response = run_case!(case, kind, mode, || Ok(7), async { Ok(7) }, |e| e);
        assert_eq!(response.unwrap(), 7, "{}", case.label);
        assert_eq!(case.events(), ["SUCCESS"], "{}", case.label);
    });
}

#[test]
fn failure_with_fallback_returns_the_fallback_value() {
    each_case(|kind, mode| {
        let case = Case::new("FailFallback", kind, mode, |b| b);
        let response = run_case!(
            case,
            kind,
            mode,
            || Err(DependencyError("boom")),
            async { Err(DependencyError("boom")) },
            |e| e.fallback(|_: &Error| Ok::<_, DependencyError>(70))
        );
        assert_eq!(response.unwrap(), 70, "{}", case.label);
        assert_eq!(
            case.events(),
            ["FAILURE", "FALLBACK_SUCCESS"],
            "{}",
            case.label
        );
    });
}

#[test]
fn failure_without_fallback_is_a_command_exception() {
    each_case(|kind, mode| {
        let case = Case::new("FailNoFallback", kind, mode, |b| b);
        let err = run_case!(
            case,
            kind,
            mode,
            || Err(DependencyError("boom")),
            async { Err(DependencyError("boom")) },
            |e| e
        )
        .unwrap_err();
        assert_eq!(
            err.failure_type(),
            FailureType::CommandException,
            "{}",
            case.label
        );
        assert_eq!(err.cause(), Some(&DependencyError("boom")));
        assert_eq!(
            case.events(),
            ["FAILURE", "FALLBACK_MISSING"],
            "{}",
            case.label
        );
    });
}

#[test]
fn failure_with_failing_fallback_keeps_both_errors() {
    each_case(|kind, mode| {
        let case = Case::new("FailFallbackFails", kind, mode, |b| b);
        let err = run_case!(
            case,
            kind,
            mode,
            || Err(DependencyError("boom")),
            async { Err(DependencyError("boom")) },
            |e| e.fallback(|_: &Error| Err::<u32, _>(DependencyError("no cache")))
        )
        .unwrap_err();
        assert_eq!(
            err.failure_type(),
            FailureType::CommandException,
            "{}",
            case.label
        );
        assert_eq!(err.fallback_error().unwrap().to_string(), "no cache");
        assert_eq!(
            case.events(),
            ["FAILURE", "FALLBACK_FAILURE"],
            "{}",
            case.label
        );
    });
}

#[test]
fn timeout_without_fallback_is_a_timeout_error() {
    each_case(|kind, mode| {
        let case = Case::new("Timeout", kind, mode, |b| {
            b.timeout(Duration::from_millis(50))
        });
        // Another thread moves time once the execution's deadline timer exists.
        let clock = case.test.clock().clone();
        let advancer = std::thread::spawn(move || {
            while clock.pending_timers() == 0 {
                std::thread::yield_now();
            }
            clock.advance(Duration::from_millis(50));
        });
        let response = if kind.blocking() {
            // Stops when its token is cancelled at the deadline.
            case.command
                .run_cancellable(|token: hystrix::CancellationToken| {
                    while !token.is_cancelled() {
                        std::thread::yield_now();
                    }
                    Ok::<u32, DependencyError>(1)
                })
                .drive(mode)
        } else {
            case.command
                .run_async(std::future::pending::<Result<u32, DependencyError>>())
                .drive(mode)
        };
        advancer.join().unwrap();
        let err = response.unwrap_err();
        assert_eq!(err.failure_type(), FailureType::Timeout, "{}", case.label);
        assert_eq!(err.timeout_ms(), Some(50));
        assert_eq!(
            case.events(),
            ["TIMEOUT", "FALLBACK_MISSING"],
            "{}",
            case.label
        );
    });
}

#[test]
fn short_circuit_without_fallback_is_refused_at_once() {
    each_case(|kind, mode| {
        let case = Case::new("ShortCircuit", kind, mode, |b| b);
        case.test.force_open(&case.label).unwrap();
        let err = run_case!(case, kind, mode, || Ok(1), async { Ok(1) }, |e| e).unwrap_err();
        assert_eq!(
            err.failure_type(),
            FailureType::ShortCircuit,
            "{}",
            case.label
        );
        assert_eq!(
            case.events(),
            ["SHORT_CIRCUITED", "FALLBACK_MISSING"],
            "{}",
            case.label
        );
    });
}

#[test]
fn rejection_without_fallback_names_the_bulkhead() {
    each_case(|kind, mode| {
        let case = Case::new("Rejected", kind, mode, |b| {
            b.semaphore_max_concurrent_requests(0)
        });
        // A pool rejects once its registry is shut down; a semaphore of 0 rejects everything.
        case.test.registry().shutdown();
        let err = run_case!(case, kind, mode, || Ok(1), async { Ok(1) }, |e| e).unwrap_err();
        let (failure_type, event) = match kind.isolation() {
            IsolationStrategy::Thread => {
                (FailureType::RejectedThreadExecution, "THREAD_POOL_REJECTED")
            }
            IsolationStrategy::Semaphore => (
                FailureType::RejectedSemaphoreExecution,
                "SEMAPHORE_REJECTED",
            ),
        };
        assert_eq!(err.failure_type(), failure_type, "{}", case.label);
        assert_eq!(case.events(), [event, "FALLBACK_MISSING"], "{}", case.label);
    });
}

#[test]
fn a_full_fallback_semaphore_rejects_the_fallback() {
    each_case(|kind, mode| {
        let case = Case::new("FallbackFull", kind, mode, |b| {
            b.fallback_semaphore_max_concurrent_requests(0)
        });
        let err = run_case!(
            case,
            kind,
            mode,
            || Err(DependencyError("boom")),
            async { Err(DependencyError("boom")) },
            |e| e.fallback(|_: &Error| Ok::<_, DependencyError>(1))
        )
        .unwrap_err();
        assert_eq!(
            err.failure_type(),
            FailureType::RejectedSemaphoreFallback,
            "{}",
            case.label
        );
        assert_eq!(
            case.events(),
            ["FAILURE", "FALLBACK_REJECTION"],
            "{}",
            case.label
        );
    });
}

#[test]
fn a_disabled_fallback_is_not_called() {
    each_case(|kind, mode| {
        let case = Case::new("FallbackDisabled", kind, mode, |b| {
            b.fallback_enabled(false)
        });
        let err = run_case!(
            case,
            kind,
            mode,
            || Err(DependencyError("boom")),
            async { Err(DependencyError("boom")) },
            |e| e.fallback(|_: &Error| -> Result<u32, DependencyError> { panic!("not called") })
        )
        .unwrap_err();
        assert_eq!(
            err.failure_type(),
            FailureType::CommandException,
            "{}",
            case.label
        );
        assert!(err.to_string().ends_with("and fallback disabled"), "{err}");
        assert_eq!(case.events(), ["FAILURE"], "{}", case.label);
    });
}

#[test]
fn a_bad_request_is_returned_without_fallback() {
    each_case(|kind, mode| {
        let test = TestRegistry::new();
        let key = format!("BadRequest-{kind:?}-{mode:?}");
        let command = Command::builder(&key)
            .group("Pool-BadRequest")
            .isolation(kind.isolation())
            .classify(|_: &DependencyError| Class::BadRequest)
            .build_in(test.registry())
            .unwrap();
        let err = if kind.blocking() {
            let execution = command
                .run(|| Err::<u32, _>(DependencyError("bad")))
                .fallback(|_: &Error| -> Result<u32, DependencyError> { panic!("not called") });
            match mode {
                Mode::Execute => execution.execute(),
                Mode::ExecuteAsync => block_on(execution.execute_async()),
                Mode::ToObservable => {
                    block_on(std::pin::pin!(execution.to_observable()).next()).unwrap()
                }
                Mode::Queue => execution.queue().get(),
                Mode::Observe => block_on(execution.observe().next()).unwrap(),
            }
        } else {
            let execution = command.run_async(async { Err::<u32, _>(DependencyError("bad")) });
            match mode {
                Mode::Execute => execution.execute(),
                Mode::ExecuteAsync => block_on(execution.execute_async()),
                Mode::ToObservable => {
                    block_on(std::pin::pin!(execution.to_observable()).next()).unwrap()
                }
                Mode::Queue => execution.queue().get(),
                Mode::Observe => block_on(execution.observe().next()).unwrap(),
            }
        }
        .unwrap_err();
        assert_eq!(err.failure_type(), FailureType::BadRequest, "{key}");
        let metrics = command.metrics();
        assert_eq!(metrics.cumulative_count(EventType::BadRequest), 1, "{key}");
        assert_eq!(
            metrics.cumulative_count(EventType::ExceptionThrown),
            1,
            "{key}"
        );
    });
}

#[test]
fn queue_returns_an_already_resolved_handle_where_hystrix_throws_from_queue() {
    let test = TestRegistry::new();
    let cmd = Command::builder("ResolvedAtOnce")
        .group("Resolved")
        .build_in(test.registry())
        .unwrap();
    test.force_open("ResolvedAtOnce").unwrap();
    let handle = cmd.run(|| Ok::<_, DependencyError>(1)).queue();
    assert!(handle.is_done());
    assert!(!handle.cancel());
    assert_eq!(
        handle.get().unwrap_err().failure_type(),
        FailureType::ShortCircuit
    );

    // A blocking run under SEMAPHORE runs inside queue() on the caller's thread.
    let here = Command::builder("RunsHere")
        .group("Resolved")
        .isolation(IsolationStrategy::Semaphore)
        .build_in(test.registry())
        .unwrap();
    let caller = std::thread::current().id();
    let handle = here
        .run(move || Ok::<_, DependencyError>(std::thread::current().id() == caller))
        .queue();
    assert!(handle.is_done());
    assert!(handle.get().unwrap());
}

#[test]
fn to_observable_is_cold_and_observe_is_eager() {
    let test = TestRegistry::new();
    let cmd = Command::builder("Temperature")
        .group("Streams")
        .build_in(test.registry())
        .unwrap();
    let cold = cmd
        .run_async(async { Ok::<_, DependencyError>(1) })
        .to_observable();
    assert_eq!(cmd.metrics().cumulative_count(EventType::Success), 0);
    drop(cold);
    assert_eq!(cmd.metrics().cumulative_count(EventType::Success), 0);

    let hot = cmd
        .run_async(async { Ok::<_, DependencyError>(2) })
        .observe();
    // Nobody polled it, yet it ran (an async SEMAPHORE run that is ready completes at once).
    assert_eq!(cmd.metrics().cumulative_count(EventType::Success), 1);
    drop(hot);

    let blocking = Command::builder("Detach")
        .group("Streams")
        .build_in(test.registry())
        .unwrap();
    let (release, release_rx) = std::sync::mpsc::channel::<()>();
    let observed = blocking
        .run(move || {
            let _ = release_rx.recv();
            Ok::<_, DependencyError>(3)
        })
        .observe();
    drop(observed); // detaches: the run goes on
    release.send(()).unwrap();
    while blocking.metrics().cumulative_count(EventType::Success) == 0 {
        std::thread::yield_now();
    }
}

#[test]
fn execute_of_an_async_run_inside_a_runtime_is_refused() {
    let test = TestRegistry::new();
    let cmd = Command::builder("InRuntime")
        .group("Refused")
        .build_in(test.registry())
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let err = runtime.block_on(async {
        cmd.run_async(async { Ok::<_, DependencyError>(1) })
            .execute()
    });
    let err = err.unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Misuse);
    assert_eq!(
        err.to_string(),
        "command InRuntime was executed with execute() on a thread a tokio runtime drives, \
         which it would block; use execute_async().await or queue(), or call execute() inside \
         tokio::task::spawn_blocking"
    );
    assert_eq!(cmd.metrics().cumulative_count(EventType::Success), 0);
}
