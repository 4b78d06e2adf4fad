//! What the stream and eager modes return: [`QueuedExecution`] (`queue()`), [`Observed`]
//! (`observe()`) and [`ToObservable`] (`to_observable()`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_core::Stream;
use parking_lot::{Condvar, Mutex};
use pin_project_lite::pin_project;

use crate::clock::Clock;
use crate::command::execution::AsyncFallback;
use crate::command::future::{ExecuteAsyncOutcome, StateRef};
use crate::command::pipeline::CallOptions;
use crate::command::run::RunFn;
use crate::command::{Classify, ExecutionResult, Outcome};
use crate::config::{IsolationStrategy, ceil_millis};
use crate::error::{Cause, Detail, FailureType, HystrixError};
use crate::event::{EventCounts, EventType};
use crate::key::CommandKey;
use crate::registry::CommandState;

/// Where an eager execution leaves its outcome for its handle.
struct Completion<T, E> {
    slot: Mutex<Slot<T, E>>,
    ready: Condvar,
}

struct Slot<T, E> {
    outcome: Option<Outcome<T, E>>,
    done: bool,
    waker: Option<Waker>,
    /// `cancel()` was called (a cancellation is then the caller's, not the executor's).
    cancelled_by_caller: bool,
}

impl<T, E> Completion<T, E> {
    fn new() -> Self {
        Completion {
            slot: Mutex::new(Slot {
                outcome: None,
                done: false,
                waker: None,
                cancelled_by_caller: false,
            }),
            ready: Condvar::new(),
        }
    }

    /// Stores the outcome (the first one wins) and wakes every waiter.
    fn complete(&self, outcome: Outcome<T, E>) {
        let mut slot = self.slot.lock();
        if slot.done {
            return;
        }
        slot.outcome = Some(outcome);
        slot.done = true;
        let waker = slot.waker.take();
        drop(slot);
        self.ready.notify_all();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// Completes the handle with CANCELLED if the spawned execution ends without an outcome
/// (cancelled, or dropped by an executor shutting down): nothing submitted is lost.
struct CompleteOnDrop<T, E> {
    completion: Arc<Completion<T, E>>,
    key: CommandKey,
}

impl<T, E> Drop for CompleteOnDrop<T, E> {
    fn drop(&mut self) {
        let by_caller = self.completion.slot.lock().cancelled_by_caller;
        let reason = if by_caller {
            "was cancelled"
        } else {
            "was cancelled: the registry's executor stopped before it ended (the registry was \
             shut down, or the runtime given as its executor is gone)"
        };
        self.completion
            .complete(cancelled(self.key.clone(), reason));
    }
}

/// The outcome of an execution that was cancelled before it ended.
fn cancelled<T, E>(key: CommandKey, reason: &'static str) -> Outcome<T, E> {
    let mut events = EventCounts::new();
    events.add(EventType::Cancelled);
    Outcome {
        response: Err(HystrixError::new(FailureType::Cancelled, key, Cause::None)
            .with_detail(Detail::Message(reason.into()))),
        result: ExecutionResult {
            events,
            start_ms: 0,
            execution_time_ms: None,
            total_time_ms: 0,
            isolation: IsolationStrategy::Semaphore,
            executed_in_thread: false,
        },
    }
}

/// Runs a blocking wait: as is outside tokio, through `block_in_place` on a multi-threaded
/// runtime, refused on a current-thread runtime.
fn block_safely<R>(wait: impl FnOnce() -> R) -> Result<R, &'static str> {
    match tokio::runtime::Handle::try_current() {
        Err(_) => Ok(wait()),
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread => {
            Err(
                "was waited on with a blocking get() inside a current-thread tokio runtime, \
                 which could not run anything meanwhile; await the handle instead",
            )
        }
        Ok(_) => Ok(tokio::task::block_in_place(wait)),
    }
}

/// The handle of a started execution (Hystrix's `Future` from `queue()`): a `Future` of the
/// response, with a blocking [`get`](QueuedExecution::get), a bounded
/// [`get_timeout`](QueuedExecution::get_timeout) and [`cancel`](QueuedExecution::cancel).
///
/// Dropping the handle detaches it, like a `JoinHandle`: the execution goes on and is counted;
/// only its response is lost.
#[must_use = "dropping the handle detaches it; the execution goes on without anyone to answer"]
pub struct QueuedExecution<T, E> {
    completion: Arc<Completion<T, E>>,
    task: Option<tokio::task::AbortHandle>,
    clock: Arc<dyn Clock>,
    key: CommandKey,
}

impl<T, E> fmt::Debug for QueuedExecution<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuedExecution")
            .field("done", &self.is_done())
            .finish_non_exhaustive()
    }
}

impl<T, E> QueuedExecution<T, E>
where
    T: Send + 'static,
    E: Send + 'static,
{
    /// Takes the execution's first steps on this thread; what is left runs on the registry's
    /// executor.
    pub(crate) fn start<K, R, FB>(
        state: Arc<CommandState>,
        classifier: K,
        run: R,
        fallback: FB,
        options: CallOptions,
    ) -> Self
    where
        R: RunFn<Output = T, Error = E>,
        FB: AsyncFallback<T, E> + Send + 'static,
        FB::Future: Send + 'static,
        K: Classify<E> + Send + Sync + 'static,
    {
        let completion = Arc::new(Completion::new());
        let mut future = Box::pin(ExecuteAsyncOutcome::new(
            StateRef::Owned(Arc::clone(&state)),
            classifier,
            run,
            fallback,
            options,
        ));
        // The first steps run here, inside the executor's runtime: timers and I/O a run
        // registers belong to the runtime that goes on driving it. Any waker registered here is
        // replaced at the task's first poll.
        let executor = state.env.executor();
        let entered = executor.as_ref().map(tokio::runtime::Handle::enter);
        let mut cx = Context::from_waker(Waker::noop());
        let first = future.as_mut().poll(&mut cx);
        drop(entered);
        let task = match first {
            Poll::Ready(outcome) => {
                completion.complete(outcome);
                None
            }
            Poll::Pending => {
                let guard = CompleteOnDrop {
                    completion: Arc::clone(&completion),
                    key: state.key.clone(),
                };
                let in_flight = state.env.eager_started();
                // The caller's request context and span go on with the execution.
                let carried = crate::context::Carried::capture(
                    crate::context::RequestContext::current_if_any().as_ref(),
                );
                let task = carried.scope(async move {
                    let outcome = future.await;
                    guard.completion.complete(outcome);
                    drop(in_flight);
                });
                executor.map(|handle| handle.spawn(task).abort_handle())
            }
        };
        QueuedExecution {
            completion,
            task,
            clock: Arc::clone(&state.env.clock),
            key: state.key.clone(),
        }
    }
}

impl<T, E> QueuedExecution<T, E> {
    /// Whether the response is there.
    pub fn is_done(&self) -> bool {
        self.completion.slot.lock().done
    }

    /// Blocks this thread until the response is there, and returns it.
    ///
    /// # Errors
    /// As [`Execution::execute`](crate::Execution::execute);
    /// [`FailureType::Cancelled`] after [`cancel`](QueuedExecution::cancel).
    pub fn get(self) -> Result<T, HystrixError<E>> {
        self.get_outcome().into_response()
    }

    /// As [`get`](QueuedExecution::get), with the [`ExecutionResult`].
    ///
    /// Inside a multi-threaded tokio runtime the wait goes through `block_in_place`; inside a
    /// current-thread runtime it is refused ([`FailureType::Misuse`]: that runtime could not run
    /// anything meanwhile, maybe the execution itself); await the handle there.
    pub fn get_outcome(self) -> Outcome<T, E> {
        let completion = &self.completion;
        let waited = block_safely(|| {
            let mut slot = completion.slot.lock();
            loop {
                if let Some(outcome) = slot.outcome.take() {
                    return outcome;
                }
                completion.ready.wait(&mut slot);
            }
        });
        waited.unwrap_or_else(|refused| Outcome {
            response: Err(HystrixError::misuse(self.key.clone(), refused)),
            result: ExecutionResult::empty(),
        })
    }

    /// Cancels the execution if it has not ended (Hystrix's `Future.cancel`): its future is
    /// dropped, which records CANCELLED, frees its permits and removes a queued pool task; a run
    /// already on a pool thread keeps it until it returns (its token is cancelled if
    /// `execution.isolation.thread.interruptOnFutureCancel`). The handle then resolves to a
    /// [`FailureType::Cancelled`] error. Returns whether there was anything to cancel.
    pub fn cancel(&self) -> bool {
        match &self.task {
            Some(task) if !self.is_done() => {
                self.completion.slot.lock().cancelled_by_caller = true;
                task.abort();
                true
            }
            _ => false,
        }
    }
}

impl<T: Send + 'static, E: Send + 'static> QueuedExecution<T, E> {
    /// Waits up to `timeout` (on the registry's clock) for the response. `None` if it is not
    /// there yet; the handle stays usable. Waiting longer never changes the execution's own
    /// timeout.
    ///
    /// # Errors
    /// As [`get`](QueuedExecution::get), inside the `Some`.
    pub fn get_timeout(&mut self, timeout: Duration) -> Option<Result<T, HystrixError<E>>> {
        let wait = || self.wait_timeout(timeout);
        match block_safely(wait) {
            Ok(response) => response,
            Err(refused) => Some(Err(HystrixError::misuse(self.key.clone(), refused))),
        }
    }

    fn wait_timeout(&self, timeout: Duration) -> Option<Result<T, HystrixError<E>>> {
        let expired = Arc::new(AtomicBool::new(false));
        let (flag, completion) = (Arc::clone(&expired), Arc::clone(&self.completion));
        let timer = self.clock.schedule(
            self.clock.now_ms().saturating_add(ceil_millis(timeout)),
            Box::new(move || {
                flag.store(true, Ordering::Release);
                let _slot = completion.slot.lock();
                completion.ready.notify_all();
            }),
        );
        let mut slot = self.completion.slot.lock();
        let response = loop {
            if let Some(outcome) = slot.outcome.take() {
                break Some(outcome.into_response());
            }
            if expired.load(Ordering::Acquire) {
                break None;
            }
            self.completion.ready.wait(&mut slot);
        };
        drop(slot);
        self.clock.cancel(timer);
        response
    }
}

impl<T, E> Future for QueuedExecution<T, E> {
    type Output = Result<T, HystrixError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = self.completion.slot.lock();
        match slot.outcome.take() {
            Some(outcome) => Poll::Ready(outcome.into_response()),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// The stream of an eagerly started execution (Hystrix's `observe()`): yields the response once,
/// then ends. Dropping it detaches, as a [`QueuedExecution`].
#[must_use = "dropping the stream detaches it; the execution goes on without anyone to answer"]
pub struct Observed<T, E> {
    handle: Option<QueuedExecution<T, E>>,
}

impl<T, E> fmt::Debug for Observed<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observed")
            .field("handle", &self.handle)
            .finish()
    }
}

impl<T, E> Observed<T, E> {
    pub(crate) fn new(handle: QueuedExecution<T, E>) -> Self {
        Observed {
            handle: Some(handle),
        }
    }

    /// Cancels the execution if it has not ended; see [`QueuedExecution::cancel`].
    pub fn cancel(&self) -> bool {
        self.handle.as_ref().is_some_and(QueuedExecution::cancel)
    }
}

impl<T, E> Stream for Observed<T, E> {
    type Item = Result<T, HystrixError<E>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(handle) = self.handle.as_mut() else {
            return Poll::Ready(None);
        };
        let response = std::task::ready!(Pin::new(handle).poll(cx));
        self.handle = None;
        Poll::Ready(Some(response))
    }
}

pin_project! {
    /// The cold stream of an execution (Hystrix's `toObservable()`): nothing runs until it is
    /// polled; it yields the response once, then ends. Dropping it cancels, as
    /// [`ExecuteAsync`].
    #[must_use = "streams do nothing unless polled"]
    pub struct ToObservable<F> {
        #[pin]
        execution: F,
        done: bool,
    }
}

impl<F> ToObservable<F> {
    pub(crate) fn new(execution: F) -> Self {
        ToObservable {
            execution,
            done: false,
        }
    }
}

impl<F, T, E> Stream for ToObservable<F>
where
    F: Future<Output = Result<T, HystrixError<E>>>,
{
    type Item = Result<T, HystrixError<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.project();
        if *this.done {
            return Poll::Ready(None);
        }
        let response = std::task::ready!(this.execution.poll(cx));
        *this.done = true;
        Poll::Ready(Some(response))
    }
}
