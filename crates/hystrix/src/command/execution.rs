//! One execution of a command: its run function, per-call options and the mode that consumes it.
//!
//! | mode | starts | returns | dropping it |
//! |---|---|---|---|
//! | [`execute`](Execution::execute) | now, this thread waits | the value or error | — |
//! | [`execute_async`](Execution::execute_async) | at first poll (cold) | a future | cancels |
//! | [`to_observable`](Execution::to_observable) | at first poll (cold) | a one-item stream | cancels |
//! | [`queue`](Execution::queue) | now (eager) | a handle: future + `get()` | detaches |
//! | [`observe`](Execution::observe) | now (eager) | a one-item stream | detaches |

use std::future::{Future, Ready, ready};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::command::cached::CachedExecution;
use crate::command::future::{ExecuteAsync, ExecuteAsyncOutcome, StateRef};
use crate::command::handle::{Observed, QueuedExecution, ToObservable};
use crate::command::pipeline::{self, CallOptions};
use crate::command::run::{Async, Blocking, BlockingFn, Cancellable, RunFn};
use crate::command::{Classify, Command, Outcome};
use crate::config::IsolationStrategy;
use crate::error::{BoxError, HystrixError};
use crate::registry::CommandState;
use crate::retry::{Again, Retrying};

use crate::command::run::sealed::Sealed;

/// No fallback: a failure ends in FALLBACK_MISSING and the error.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFallback;

/// A synchronous fallback, `FnOnce(&HystrixError<E>) -> Result<T, FE>` (see
/// [`Execution::fallback`]).
pub struct FallbackFn<F, FE> {
    f: F,
    _error: PhantomData<fn() -> FE>,
}

/// An async fallback, `FnOnce(&HystrixError<E>) -> Fut` (see [`Execution::fallback_async`]).
pub struct FallbackAsyncFn<F, Fut> {
    f: F,
    _future: PhantomData<fn() -> Fut>,
}

/// A fallback usable by a blocking execution.
pub trait BlockingFallback<T, E>: Sealed {
    /// Whether a fallback was given (if not: FALLBACK_MISSING without taking a permit).
    #[doc(hidden)]
    fn is_present(&self) -> bool;
    /// Runs it; `None` means "no fallback after all" (FALLBACK_MISSING).
    #[doc(hidden)]
    fn call(self, error: &HystrixError<E>) -> Option<Result<T, BoxError>>;
}

/// A fallback usable by an async execution: synchronous or async.
pub trait AsyncFallback<T, E>: Sealed {
    /// The fallback's error type.
    #[doc(hidden)]
    type Error: Into<BoxError>;
    /// The future it returns.
    #[doc(hidden)]
    type Future: Future<Output = Result<T, Self::Error>>;
    /// Whether a fallback was given.
    #[doc(hidden)]
    fn is_present(&self) -> bool;
    /// Starts it; `None` means "no fallback" (FALLBACK_MISSING).
    #[doc(hidden)]
    fn call(self, error: &HystrixError<E>) -> Option<Self::Future>;
}

impl Sealed for NoFallback {}
impl<T, E> BlockingFallback<T, E> for NoFallback {
    #[inline]
    fn is_present(&self) -> bool {
        false
    }
    fn call(self, _error: &HystrixError<E>) -> Option<Result<T, BoxError>> {
        None
    }
}
impl<T, E> AsyncFallback<T, E> for NoFallback {
    type Error = BoxError;
    type Future = Ready<Result<T, BoxError>>;
    fn is_present(&self) -> bool {
        false
    }
    fn call(self, _error: &HystrixError<E>) -> Option<Self::Future> {
        None
    }
}

impl<F, FE> Sealed for FallbackFn<F, FE> {}
impl<F, T, E, FE> BlockingFallback<T, E> for FallbackFn<F, FE>
where
    F: FnOnce(&HystrixError<E>) -> Result<T, FE>,
    FE: Into<BoxError>,
{
    fn is_present(&self) -> bool {
        true
    }
    fn call(self, error: &HystrixError<E>) -> Option<Result<T, BoxError>> {
        Some((self.f)(error).map_err(Into::into))
    }
}
impl<F, T, E, FE> AsyncFallback<T, E> for FallbackFn<F, FE>
where
    F: FnOnce(&HystrixError<E>) -> Result<T, FE>,
    FE: Into<BoxError>,
{
    type Error = FE;
    type Future = Ready<Result<T, FE>>;
    fn is_present(&self) -> bool {
        true
    }
    fn call(self, error: &HystrixError<E>) -> Option<Self::Future> {
        Some(ready((self.f)(error)))
    }
}

impl<F, Fut> Sealed for FallbackAsyncFn<F, Fut> {}
impl<F, Fut, T, E, FE> AsyncFallback<T, E> for FallbackAsyncFn<F, Fut>
where
    F: FnOnce(&HystrixError<E>) -> Fut,
    Fut: Future<Output = Result<T, FE>>,
    FE: Into<BoxError>,
{
    type Error = FE;
    type Future = Fut;
    fn is_present(&self) -> bool {
        true
    }
    fn call(self, error: &HystrixError<E>) -> Option<Fut> {
        Some((self.f)(error))
    }
}

/// One execution of a [`Command`]: a run function plus per-call options, consumed by exactly one
/// mode, so an execution cannot run twice:
///
/// ```compile_fail,E0382
/// # use hystrix::{Command, IsolationStrategy, Registry};
/// # let registry = Registry::new();
/// # let cmd = Command::builder("Once").group("G")
/// #     .isolation(IsolationStrategy::Semaphore).build_in(&registry).unwrap();
/// let execution = cmd.run(|| Ok::<_, std::io::Error>(1));
/// let first = execution.execute();
/// let second = execution.execute(); // error[E0382]: use of moved value: `execution`
/// ```
#[must_use = "an execution does nothing until consumed by a mode such as execute()"]
pub struct Execution<'c, C, R, FB> {
    command: &'c Command<C>,
    run: R,
    fallback: FB,
    options: CallOptions,
}

impl<C, R, FB> std::fmt::Debug for Execution<'_, C, R, FB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Execution")
            .field("command", &self.command.key())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<'c, C, R: RunFn> Execution<'c, C, R, NoFallback> {
    pub(crate) fn new(command: &'c Command<C>, run: R) -> Self {
        Execution {
            command,
            run,
            fallback: NoFallback,
            options: CallOptions::default(),
        }
    }

    /// The fallback for this call: runs when the run fails, panics, times out, is
    /// short-circuited or rejected, with the error that happened. Its value is returned
    /// instead (FALLBACK_SUCCESS); its error or panic is kept beside the run's in the returned
    /// error (FALLBACK_FAILURE). It is bounded by `fallback.isolation.semaphore.
    /// maxConcurrentRequests` and skipped when `fallback.enabled` is false. Not used for bad
    /// requests and ignored errors.
    ///
    /// It runs where the failure is noticed: on the caller's thread for `execute()` (also after
    /// a THREAD run's timeout), in the awaiting task for the async modes. It should not call
    /// the network; if it must, make it another command.
    pub fn fallback<F, FE>(self, fallback: F) -> Execution<'c, C, R, FallbackFn<F, FE>>
    where
        F: FnOnce(&HystrixError<R::Error>) -> Result<R::Output, FE>,
        FE: Into<BoxError>,
    {
        Execution {
            command: self.command,
            run: self.run,
            fallback: FallbackFn {
                f: fallback,
                _error: PhantomData,
            },
            options: self.options,
        }
    }

    /// An async fallback for this call, as [`fallback`](Execution::fallback) but returning a
    /// future (e.g. another command's execution), for the async modes. The closure sees the
    /// error synchronously; the future it returns must not borrow it.
    pub fn fallback_async<F, FFut, FE>(
        self,
        fallback: F,
    ) -> Execution<'c, C, R, FallbackAsyncFn<F, FFut>>
    where
        F: FnOnce(&HystrixError<R::Error>) -> FFut,
        FFut: Future<Output = Result<R::Output, FE>>,
        FE: Into<BoxError>,
    {
        Execution {
            command: self.command,
            run: self.run,
            fallback: FallbackAsyncFn {
                f: fallback,
                _future: PhantomData,
            },
            options: self.options,
        }
    }
}

impl<'c, C, R, FB> Execution<'c, C, R, FB> {
    /// Overrides the timeout for this call only (rounded up to whole milliseconds; zero is refused
    /// when executed), instead of `execution.isolation.thread.timeoutInMilliseconds`.
    /// `execution.timeout.enabled = false` still turns timeouts off.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options =
            std::mem::take(&mut self.options).with_timeout_ms(crate::config::ceil_millis(timeout));
        self
    }

    /// Goes through the request cache under `key` (Hystrix's `getCacheKey()`): within one
    /// [`RequestContext`](crate::context::RequestContext) the first execution of the key runs
    /// and later ones share its outcome behind `Arc`. See [`CachedExecution`] for the rules.
    pub fn cache_key(self, key: impl Into<String>) -> CachedExecution<'c, C, R, FB> {
        CachedExecution::new(self, key.into())
    }

    /// The command this execution belongs to.
    pub(crate) fn command(&self) -> &'c Command<C> {
        self.command
    }

    /// Goes through the keyed breaker of `key` (a host, shard or tenant) instead of the
    /// command's own breaker; the command must have keyed breakers
    /// ([`CommandBuilder::breaker_per_key`](crate::command::CommandBuilder::breaker_per_key)),
    /// otherwise the execution fails at once with a misuse error.
    pub fn breaker_key(mut self, key: impl Into<std::sync::Arc<str>>) -> Self {
        self.options = std::mem::take(&mut self.options).with_breaker_key(Some(key.into()));
        self
    }

    /// Gives this call a class under pressure (NORMAL by default): where a semaphore admits
    /// executions, lower classes leave the higher classes' reserved share of the bound free
    /// (`execution.isolation.priority.critical.reservedPercentage` and
    /// `execution.isolation.priority.normal.reservedPercentage`, 0 by default), so SHEDDABLE is
    /// refused first and CRITICAL last. Every attempt and hedge of the call has the class. See
    /// [`Priority`](crate::Priority).
    ///
    /// ```
    /// use hystrix::testing::TestRegistry;
    /// use hystrix::{Command, IsolationStrategy, Priority};
    ///
    /// let test = TestRegistry::new();
    /// let command = Command::builder("Checkout")
    ///     .group("Payments")
    ///     .isolation(IsolationStrategy::Semaphore)
    ///     .semaphore_max_concurrent_requests(10)
    ///     // 3 of the 10 places are kept for CRITICAL calls.
    ///     .property("execution.isolation.priority.critical.reservedPercentage", 30)
    ///     .build_in(test.registry())?;
    /// let outcome = command
    ///     .run(|| Ok::<_, std::io::Error>("paid"))
    ///     .priority(Priority::Critical)
    ///     .execute();
    /// assert_eq!(outcome?, "paid");
    /// let by_class = command.metrics().priorities().expect("a reserve is set");
    /// assert_eq!(by_class.critical.admitted, 1);
    /// assert_eq!(by_class.critical_reserved, 3); // 30 % of 10
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn priority(mut self, priority: crate::Priority) -> Self {
        self.options = std::mem::take(&mut self.options).with_priority(priority);
        self
    }

    /// Makes one attempt only for this call, whatever `retry.maxAttempts` says (e.g. a
    /// request that must not be repeated). Only retryable runs
    /// ([`Command::run_retryable`](crate::Command::run_retryable) and the like) retry at all.
    pub fn no_retry(mut self) -> Self {
        self.options = std::mem::take(&mut self.options).with_no_retry();
        self
    }

    /// Marks this call as a collapser's batch of `requests` requests (COLLAPSED × `requests`).
    pub(crate) fn collapsed(mut self, requests: u32) -> Self {
        self.options = std::mem::take(&mut self.options).with_collapsed(requests);
        self
    }

    /// What to journal if this call is short-circuited (with the command key and the time),
    /// for the command's replay function
    /// ([`CommandBuilder::journal`](crate::command::CommandBuilder::journal)); e.g. the request
    /// serialised as JSON. Ignored if the command keeps no journal, and for a call through a
    /// keyed breaker (the journal replays when the command's own breaker closes).
    pub fn journal(mut self, description: impl Into<String>) -> Self {
        self.options = std::mem::take(&mut self.options).with_journal(description.into());
        self
    }
}

/// Runs a blocking execution on this thread: in place under SEMAPHORE (the fast path), or on the
/// pool while this thread waits for it and for its deadline under THREAD.
pub(crate) fn execute_blocking<K, R, FB, T, E>(
    state: &Arc<CommandState>,
    classifier: &K,
    run: R,
    fallback: FB,
    options: CallOptions,
) -> Outcome<T, E>
where
    R: BlockingFn<Output = T, Error = E> + RunFn<Output = T, Error = E>,
    <R as RunFn>::Again: Again<Run: BlockingFn<Output = T, Error = E>>,
    FB: BlockingFallback<T, E> + AsyncFallback<T, E>,
    K: Classify<E>,
{
    let props = state.properties.hot().load();
    let isolation = props.isolation().unwrap_or(IsolationStrategy::Thread);
    // A retry-enabled run deposits in its retry budget even when refused: the full path.
    if !<R::Again as Again>::RETRIES
        && let Some((now_ms, tripped)) = pipeline::refusal(state, &props, &options)
    {
        return pipeline::refused(state, now_ms, isolation, tripped, fallback);
    }
    state.check_blocking_in_runtime();
    match isolation {
        IsolationStrategy::Semaphore => {
            pipeline::run_blocking(state, props, classifier, run, fallback, &options)
        }
        IsolationStrategy::Thread => pipeline::block_on(ExecuteAsyncOutcome::new(
            StateRef::Borrowed(state),
            classifier,
            run,
            fallback,
            options,
        )),
    }
}

macro_rules! blocking_execute {
    ($run_type:ty, [$($extra:tt)*], $($run:tt)*) => {
        impl<C, F, T, E, FB, $($extra)*> Execution<'_, C, $run_type, FB>
        where
            F: $($run)* + Send + 'static,
            T: Send + 'static,
            E: Send + 'static,
            FB: BlockingFallback<T, E> + AsyncFallback<T, E>,
            C: Classify<E>,
        {
            /// Runs the execution and returns the value (from the run or the fallback) or the
            /// error, on this thread.
            ///
            /// THREAD isolation (the default for blocking runs): the run goes to the pool of the
            /// command's thread-pool key and this thread waits for it until the deadline (queue
            /// wait counts). At the deadline a still-queued run leaves the queue and never
            /// starts (a timer on the registry's clock removes it); a running one keeps
            /// its pool thread until it returns (its token is cancelled if
            /// `execution.isolation.thread.interruptOnTimeout`) and its late value is discarded.
            ///
            /// SEMAPHORE isolation: the run executes on this thread and keeps its permit until
            /// it returns; a run that returns after the deadline is a TIMEOUT whose value is
            /// discarded.
            ///
            /// # Blocking inside async code
            /// Either way this thread blocks, for up to the timeout. On a thread a tokio
            /// runtime drives (a worker polling a task, or inside `Runtime::block_on`) that
            /// stalls every task the runtime would run there, so the first such call of each
            /// command key logs a warning (target `hystrix::command`). In async code use
            /// [`execute_async`](Execution::execute_async)`.await` or
            /// [`queue`](Execution::queue), or call `execute()` inside
            /// `tokio::task::spawn_blocking`, whose threads are for blocking and never warn.
            ///
            /// # Errors
            /// A [`HystrixError`] whose [`failure_type`](HystrixError::failure_type) says what
            /// happened when neither the run nor a fallback produced a value.
            pub fn execute(self) -> Result<T, HystrixError<E>> {
                self.execute_outcome().into_response()
            }

            /// As [`execute`](Execution::execute), also returning the
            /// [`ExecutionResult`](crate::ExecutionResult) (events, times).
            pub fn execute_outcome(self) -> Outcome<T, E> {
                execute_blocking(
                    self.command.state_arc(),
                    self.command.classifier(),
                    self.run,
                    self.fallback,
                    self.options,
                )
            }
        }
    };
}
blocking_execute!(Blocking<F>, [], FnOnce() -> Result<T, E>);
blocking_execute!(Cancellable<F>, [], FnOnce(crate::CancellationToken) -> Result<T, E>);
blocking_execute!(
    Retrying<M, Blocking<F>>,
    [M: FnMut() -> F + Send + 'static],
    FnOnce() -> Result<T, E>
);
blocking_execute!(
    Retrying<M, Cancellable<F>>,
    [M: FnMut() -> F + Send + 'static],
    FnOnce(crate::CancellationToken) -> Result<T, E>
);

macro_rules! async_execute {
    ($run_type:ty, [$($extra:tt)*]) => {
impl<C, Fut, T, E, FB, $($extra)*> Execution<'_, C, $run_type, FB>
where
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
    FB: AsyncFallback<T, E>,
    C: Classify<E>,
{
    /// Runs an async execution to its end on this thread and returns its value or error, for
    /// blocking code that must call async code. On a thread a tokio runtime drives (a worker
    /// polling a task, or inside `Runtime::block_on`) it is refused, since blocking that thread
    /// can stall the runtime: use [`execute_async`](Execution::execute_async) there. On tokio's
    /// blocking pool (`spawn_blocking`) it runs. Inside `tokio::task::unconstrained` a worker
    /// cannot be told from a blocking thread, and the call is not refused.
    ///
    /// # Errors
    /// As the blocking [`execute`](Execution::execute); [`FailureType::Misuse`](crate::FailureType::Misuse)
    /// on a thread a tokio runtime drives.
    pub fn execute(self) -> Result<T, HystrixError<E>> {
        self.execute_outcome().into_response()
    }

    /// As [`execute`](Execution::execute), also returning the
    /// [`ExecutionResult`](crate::ExecutionResult). Inside a tokio runtime the refusal is an
    /// outcome with no events, not counted.
    pub fn execute_outcome(self) -> Outcome<T, E> {
        if crate::command::driven_by_runtime() {
            let key = self.command.key().clone();
            return Outcome {
                response: Err(HystrixError::misuse(
                    key,
                    "was executed with execute() on a thread a tokio runtime drives, which it \
                     would block; use execute_async().await or queue(), or call execute() \
                     inside tokio::task::spawn_blocking",
                )),
                result: crate::command::ExecutionResult::empty(),
            };
        }
        // Inside the executor's runtime, so a run using tokio's timers or I/O finds them.
        let executor = self.command.state_arc().env.executor();
        let _entered = executor.as_ref().map(tokio::runtime::Handle::enter);
        pipeline::block_on(self.execute_async_outcome())
    }
}
    };
}
async_execute!(Async<Fut>, []);
async_execute!(Retrying<M, Async<Fut>>, [M: FnMut() -> Fut + Send + 'static]);

impl<'c, C, R, FB> Execution<'c, C, R, FB>
where
    R: RunFn,
    FB: AsyncFallback<R::Output, R::Error>,
    C: Classify<R::Error>,
{
    /// Runs the execution when awaited (cold: nothing happens before the first poll) and returns
    /// the value (from the run or the fallback) or the error.
    ///
    /// SEMAPHORE isolation (the default for async runs): the run is polled in the awaiting task
    /// (a blocking run is called there); at the deadline it is dropped, which frees its permit at
    /// once. THREAD isolation: an async run is spawned on the pool's own runtime, a blocking run
    /// goes to the pool's threads, and the awaiting task waits for it until the deadline.
    ///
    /// The future borrows the command; to spawn it as a task, move a clone of the command into
    /// the task: `tokio::spawn(async move { cmd.run_async(f).execute_async().await })`, or use
    /// [`queue`](Execution::queue).
    ///
    /// # Cancel safety
    /// Dropping the returned future before it completes drops the run (and fallback) future,
    /// releases every permit, and, if it had been polled, records CANCELLED.
    ///
    /// # Errors
    /// As [`execute`](Execution::execute).
    pub fn execute_async(self) -> ExecuteAsync<'c, &'c C, R, FB> {
        ExecuteAsync::new(self.execute_async_outcome())
    }

    /// As [`execute_async`](Execution::execute_async), resolving to the [`Outcome`] (response
    /// and [`ExecutionResult`](crate::ExecutionResult)).
    pub fn execute_async_outcome(self) -> ExecuteAsyncOutcome<'c, &'c C, R, FB> {
        ExecuteAsyncOutcome::new(
            StateRef::Borrowed(self.command.state_arc()),
            self.command.classifier(),
            self.run,
            self.fallback,
            self.options,
        )
    }

    /// A cold one-item stream of the response (Hystrix's `toObservable()`): nothing runs until it
    /// is polled; it yields the value or the error, then ends. Dropping it cancels, as
    /// [`execute_async`](Execution::execute_async).
    pub fn to_observable(self) -> ToObservable<ExecuteAsync<'c, &'c C, R, FB>> {
        ToObservable::new(self.execute_async())
    }
}

impl<C, R, FB> Execution<'_, C, R, FB>
where
    R: RunFn,
    FB: AsyncFallback<R::Output, R::Error> + Send + 'static,
    FB::Future: Send + 'static,
    C: Classify<R::Error> + Clone + Send + Sync + 'static,
{
    /// Starts the execution now and returns a handle to its response (Hystrix's `queue()`): the
    /// handle is a `Future` and has a blocking [`get`](QueuedExecution::get),
    /// [`get_timeout`](QueuedExecution::get_timeout) and [`cancel`](QueuedExecution::cancel).
    ///
    /// The execution takes its first steps on this thread: a short-circuit or rejection (and its
    /// fallback) is decided here, and a blocking run under SEMAPHORE runs here entirely (as in
    /// Hystrix), so the handle comes back already resolved. Otherwise the rest runs on the
    /// registry's executor; its timeout fires even if nobody waits on the handle.
    ///
    /// Dropping the handle detaches it: the execution goes on. Use `cancel()` to stop it.
    pub fn queue(self) -> QueuedExecution<R::Output, R::Error> {
        QueuedExecution::start(
            Arc::clone(self.command.state_arc()),
            self.command.classifier().clone(),
            self.run,
            self.fallback,
            self.options,
        )
    }

    /// Starts the execution now and returns a one-item stream of its response (Hystrix's
    /// `observe()`): eager as [`queue`](Execution::queue); the stream yields the value or the
    /// error, then ends. Dropping it detaches.
    pub fn observe(self) -> Observed<R::Output, R::Error> {
        Observed::new(self.queue())
    }

    /// The execution's future owning its command's state (for a task), and that state.
    /// As [`into_owned`](Execution::into_owned), for an eager execution: with the link from
    /// its handle to its pool task, if its run can wait in a pool's queue.
    #[allow(clippy::type_complexity)]
    pub(crate) fn into_owned_linked(
        mut self,
    ) -> (
        Arc<CommandState>,
        ExecuteAsyncOutcome<'static, C, R, FB>,
        Option<Arc<crate::command::run::CancelLink>>,
    ) {
        let options = std::mem::take(&mut self.options);
        let (options, link) =
            crate::command::handle::link_queued::<R>(self.command.state_arc(), options);
        self.options = options;
        let (state, future) = self.into_owned();
        (state, future, link)
    }

    pub(crate) fn into_owned(self) -> (Arc<CommandState>, ExecuteAsyncOutcome<'static, C, R, FB>) {
        let state = Arc::clone(self.command.state_arc());
        let future = ExecuteAsyncOutcome::new(
            StateRef::Owned(Arc::clone(&state)),
            self.command.classifier().clone(),
            self.run,
            self.fallback,
            self.options,
        );
        (state, future)
    }
}
