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
use crate::command::run::{CancelLink, RunFn};
use crate::command::{Classify, ExecutionResult, Outcome};
use crate::config::{IsolationStrategy, ceil_millis};
use crate::context::{CachedOutcome, SharedResponse};
use crate::error::{Cause, Detail, FailureType, HystrixError};
use crate::event::{EventCounts, EventType};
use crate::key::CommandKey;
use crate::registry::CommandState;

/// What an eager execution delivers to its handle: its outcome, which can also tell a
/// cancellation or a refused wait.
pub(crate) trait Delivered: Send + 'static {
    /// The outcome of an execution cancelled before it ended (not counted again).
    fn cancelled(key: CommandKey, reason: &'static str) -> Self;
    /// The refusal of a wait that cannot work here.
    fn refused(key: CommandKey, message: &'static str) -> Self;
}

impl<T: Send + 'static, E: Send + 'static> Delivered for Outcome<T, E> {
    fn cancelled(key: CommandKey, reason: &'static str) -> Self {
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

    fn refused(key: CommandKey, message: &'static str) -> Self {
        Outcome {
            response: Err(HystrixError::misuse(key, message)),
            result: ExecutionResult::empty(),
        }
    }
}

impl<T: Send + Sync + 'static, E: Send + Sync + 'static> Delivered for CachedOutcome<T, E> {
    fn cancelled(key: CommandKey, reason: &'static str) -> Self {
        crate::command::cached::share(Outcome::cancelled(key, reason))
    }

    fn refused(key: CommandKey, message: &'static str) -> Self {
        crate::command::cached::share(Outcome::refused(key, message))
    }
}

/// Where an eager execution leaves its outcome for its handle.
struct Completion<O> {
    slot: Mutex<Slot<O>>,
    ready: Condvar,
}

struct Slot<O> {
    outcome: Option<O>,
    done: bool,
    waker: Option<Waker>,
    /// `cancel()` was called (a cancellation is then the caller's, not the executor's).
    cancelled_by_caller: bool,
}

impl<O> Completion<O> {
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
    fn complete(&self, outcome: O) {
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
struct CompleteOnDrop<O: Delivered> {
    completion: Arc<Completion<O>>,
    key: CommandKey,
}

impl<O: Delivered> Drop for CompleteOnDrop<O> {
    fn drop(&mut self) {
        let by_caller = self.completion.slot.lock().cancelled_by_caller;
        let reason = if by_caller {
            "was cancelled"
        } else {
            "was cancelled: the registry's executor stopped before it ended (the registry was \
             shut down, or the runtime given as its executor is gone)"
        };
        self.completion
            .complete(O::cancelled(self.key.clone(), reason));
    }
}

/// Runs a blocking wait: as is on a thread no tokio runtime drives (outside tokio, or on its
/// blocking pool), through `block_in_place` on a multi-threaded runtime's thread, refused on a
/// current-thread runtime's.
pub(crate) fn block_safely<R>(wait: impl FnOnce() -> R) -> Result<R, &'static str> {
    if !crate::command::driven_by_runtime() {
        return Ok(wait());
    }
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

/// The options of an eager execution, with a link from its handle to its pool task if its
/// run can wait in a pool's queue (a blocking run not under SEMAPHORE isolation).
pub(crate) fn link_queued<R: RunFn>(
    state: &CommandState,
    options: CallOptions,
) -> (CallOptions, Option<Arc<CancelLink>>) {
    let queueable = R::BLOCKING
        && state.properties.hot().load().isolation() != Some(IsolationStrategy::Semaphore);
    if !queueable {
        return (options, None);
    }
    let link = Arc::new(CancelLink::default());
    (options.with_cancel_link(Arc::clone(&link)), Some(link))
}

/// An eagerly started execution and the way to its outcome `O`: what [`QueuedExecution`] and
/// [`CachedQueued`] hold.
struct Eager<O> {
    completion: Arc<Completion<O>>,
    task: Option<tokio::task::AbortHandle>,
    /// Reaches the execution's queued pool task, which `cancel()` withdraws at once.
    link: Option<Arc<CancelLink>>,
    clock: Arc<dyn Clock>,
    key: CommandKey,
}

impl<O: Delivered> Eager<O> {
    /// Takes the first steps of `future` on this thread; what is left runs on the registry's
    /// executor. `link` is the one the execution's options carry, if any.
    fn start<F>(state: &Arc<CommandState>, future: F, link: Option<Arc<CancelLink>>) -> Self
    where
        F: Future<Output = O> + Send + 'static,
    {
        let completion = Arc::new(Completion::new());
        let mut future = Box::pin(future);
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
        Eager {
            completion,
            task,
            link,
            clock: Arc::clone(&state.env.clock),
            key: state.key.clone(),
        }
    }

    fn wait(&self) -> O {
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
        waited.unwrap_or_else(|refused| O::refused(self.key.clone(), refused))
    }

    fn wait_timeout(&self, timeout: Duration) -> Option<O> {
        let wait = || {
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
            let outcome = loop {
                if let Some(outcome) = slot.outcome.take() {
                    break Some(outcome);
                }
                if expired.load(Ordering::Acquire) {
                    break None;
                }
                self.completion.ready.wait(&mut slot);
            };
            drop(slot);
            self.clock.cancel(timer);
            outcome
        };
        match block_safely(wait) {
            Ok(outcome) => outcome,
            Err(refused) => Some(O::refused(self.key.clone(), refused)),
        }
    }
}

impl<O> Eager<O> {
    fn is_done(&self) -> bool {
        self.completion.slot.lock().done
    }

    fn cancel(&self) -> bool {
        match &self.task {
            Some(task) if !self.is_done() => {
                self.completion.slot.lock().cancelled_by_caller = true;
                // A queued pool task leaves the queue now, before the task is dropped on the
                // executor: a run answered CANCELLED never starts.
                if let Some(link) = &self.link {
                    link.cancel();
                }
                task.abort();
                true
            }
            _ => false,
        }
    }

    fn poll_outcome(&self, cx: &mut Context<'_>) -> Poll<O> {
        let mut slot = self.completion.slot.lock();
        match slot.outcome.take() {
            Some(outcome) => Poll::Ready(outcome),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
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
    eager: Eager<Outcome<T, E>>,
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
        let (options, link) = link_queued::<R>(&state, options);
        let future = ExecuteAsyncOutcome::new(
            StateRef::Owned(Arc::clone(&state)),
            classifier,
            run,
            fallback,
            options,
        );
        QueuedExecution {
            eager: Eager::start(&state, future, link),
        }
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
        self.eager.wait()
    }

    /// Waits up to `timeout` (on the registry's clock) for the response. `None` if it is not
    /// there yet; the handle stays usable. Waiting longer never changes the execution's own
    /// timeout.
    ///
    /// # Errors
    /// As [`get`](QueuedExecution::get), inside the `Some`.
    pub fn get_timeout(&mut self, timeout: Duration) -> Option<Result<T, HystrixError<E>>> {
        self.eager.wait_timeout(timeout).map(Outcome::into_response)
    }
}

impl<T, E> QueuedExecution<T, E> {
    /// Whether the response is there.
    pub fn is_done(&self) -> bool {
        self.eager.is_done()
    }

    /// Cancels the execution if it has not ended (Hystrix's `Future.cancel`): a run still waiting
    /// in its pool's queue leaves the queue before `cancel` returns and never starts; then the
    /// execution's future is dropped on the registry's executor, which records CANCELLED and frees
    /// its permits. A run already on a pool thread keeps it until it returns (its token is
    /// cancelled if `execution.isolation.thread.interruptOnFutureCancel`: Rust cannot interrupt a
    /// thread). The handle then resolves to a [`FailureType::Cancelled`] error. Returns whether
    /// there was anything to cancel.
    pub fn cancel(&self) -> bool {
        self.eager.cancel()
    }
}

impl<T, E> Future for QueuedExecution<T, E> {
    type Output = Result<T, HystrixError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.eager.poll_outcome(cx).map(Outcome::into_response)
    }
}

/// The handle of an execution through the request cache started with
/// [`CachedExecution::queue`](crate::command::CachedExecution::queue): as a
/// [`QueuedExecution`], resolving to the shared response.
#[must_use = "dropping the handle detaches it; the execution goes on without anyone to answer"]
pub struct CachedQueued<T, E> {
    eager: Eager<CachedOutcome<T, E>>,
}

impl<T, E> fmt::Debug for CachedQueued<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedQueued")
            .field("done", &self.is_done())
            .finish_non_exhaustive()
    }
}

impl<T, E> CachedQueued<T, E>
where
    T: Send + Sync + 'static,
    E: Send + Sync + 'static,
{
    /// Looks the cache up and takes the execution's first steps on this thread; what is left
    /// runs on the registry's executor.
    pub(crate) fn start<F>(
        state: &Arc<CommandState>,
        future: F,
        link: Option<Arc<CancelLink>>,
    ) -> Self
    where
        F: Future<Output = CachedOutcome<T, E>> + Send + 'static,
    {
        CachedQueued {
            eager: Eager::start(state, future, link),
        }
    }

    /// As [`QueuedExecution::get`], with the shared response.
    ///
    /// # Errors
    /// As [`QueuedExecution::get`], shared.
    pub fn get(self) -> SharedResponse<T, E> {
        self.get_outcome().into_response()
    }

    /// As [`QueuedExecution::get_outcome`].
    pub fn get_outcome(self) -> CachedOutcome<T, E> {
        self.eager.wait()
    }

    /// As [`QueuedExecution::get_timeout`].
    ///
    /// # Errors
    /// As [`get`](CachedQueued::get), inside the `Some`.
    pub fn get_timeout(&mut self, timeout: Duration) -> Option<SharedResponse<T, E>> {
        self.eager
            .wait_timeout(timeout)
            .map(CachedOutcome::into_response)
    }
}

impl<T, E> CachedQueued<T, E> {
    /// Whether the response is there.
    pub fn is_done(&self) -> bool {
        self.eager.is_done()
    }

    /// As [`QueuedExecution::cancel`]: cancels this handle's execution, or, for a hit, its
    /// wait (the shared execution goes on for the others; the hit records RESPONSE_FROM_CACHE
    /// and CANCELLED). The execution that runs is not cancelled while other executions wait
    /// for it: it goes on for them, and only this handle resolves to CANCELLED.
    pub fn cancel(&self) -> bool {
        self.eager.cancel()
    }
}

impl<T, E> Future for CachedQueued<T, E> {
    type Output = SharedResponse<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.eager
            .poll_outcome(cx)
            .map(CachedOutcome::into_response)
    }
}

/// The stream of an eagerly started execution through the request cache
/// ([`CachedExecution::observe`](crate::command::CachedExecution::observe)): yields the shared
/// response once, then ends. Dropping it detaches.
#[must_use = "dropping the stream detaches it; the execution goes on without anyone to answer"]
pub struct CachedObserved<T, E> {
    handle: Option<CachedQueued<T, E>>,
}

impl<T, E> fmt::Debug for CachedObserved<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedObserved")
            .field("handle", &self.handle)
            .finish()
    }
}

impl<T, E> CachedObserved<T, E> {
    pub(crate) fn new(handle: CachedQueued<T, E>) -> Self {
        CachedObserved {
            handle: Some(handle),
        }
    }

    /// Cancels as [`CachedQueued::cancel`].
    pub fn cancel(&self) -> bool {
        self.handle.as_ref().is_some_and(CachedQueued::cancel)
    }
}

impl<T, E> Stream for CachedObserved<T, E> {
    type Item = SharedResponse<T, E>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(handle) = self.handle.as_mut() else {
            return Poll::Ready(None);
        };
        let response = std::task::ready!(Pin::new(handle).poll(cx));
        self.handle = None;
        Poll::Ready(Some(response))
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

impl<F: Future> Stream for ToObservable<F> {
    type Item = F::Output;

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
