//! One execution of a command: its run function, per-call options and the mode that consumes it.

use std::future::{Future, Ready, ready};
use std::marker::PhantomData;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::command::future::{ExecuteAsync, ExecuteAsyncOutcome, RunFuture};
use crate::command::pipeline::{self, CallOptions};
use crate::command::{Classify, Command, Outcome};
use crate::error::{BoxError, HystrixError};

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A blocking run function, `FnOnce() -> Result<T, E>` (see [`Command::run`]).
#[derive(Debug)]
pub struct Blocking<F>(pub(crate) F);

/// A blocking run function that receives a cancellation token (see
/// [`Command::run_cancellable`]).
#[derive(Debug)]
pub struct Cancellable<F>(pub(crate) F);

/// An async run, a `Future<Output = Result<T, E>>` (see [`Command::run_async`]).
#[derive(Debug)]
pub struct Async<Fut>(pub(crate) Fut);

/// A run function of any kind: names its value and error types.
pub trait RunFn: sealed::Sealed {
    /// The value of a successful run.
    type Output;
    /// The run's error type.
    type Error;
}

/// A run function that blocks the thread it runs on.
pub trait BlockingRun: RunFn {
    /// Whether the run takes a cancellation token.
    #[doc(hidden)]
    const CANCELLABLE: bool;
    /// Runs it; `token` is `Some` iff `CANCELLABLE`.
    #[doc(hidden)]
    fn call(self, token: Option<CancellationToken>) -> Result<Self::Output, Self::Error>;
}

impl<F> sealed::Sealed for Blocking<F> {}
impl<F, T, E> RunFn for Blocking<F>
where
    F: FnOnce() -> Result<T, E>,
{
    type Output = T;
    type Error = E;
}
impl<F, T, E> BlockingRun for Blocking<F>
where
    F: FnOnce() -> Result<T, E>,
{
    const CANCELLABLE: bool = false;
    #[inline]
    fn call(self, _token: Option<CancellationToken>) -> Result<T, E> {
        (self.0)()
    }
}

impl<F> sealed::Sealed for Cancellable<F> {}
impl<F, T, E> RunFn for Cancellable<F>
where
    F: FnOnce(CancellationToken) -> Result<T, E>,
{
    type Output = T;
    type Error = E;
}
impl<F, T, E> BlockingRun for Cancellable<F>
where
    F: FnOnce(CancellationToken) -> Result<T, E>,
{
    const CANCELLABLE: bool = true;
    fn call(self, token: Option<CancellationToken>) -> Result<T, E> {
        (self.0)(token.unwrap_or_default())
    }
}

impl<Fut> sealed::Sealed for Async<Fut> {}
impl<Fut, T, E> RunFn for Async<Fut>
where
    Fut: Future<Output = Result<T, E>>,
{
    type Output = T;
    type Error = E;
}

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
pub trait BlockingFallback<T, E>: sealed::Sealed {
    /// Whether a fallback was given (if not: FALLBACK_MISSING without taking a permit).
    #[doc(hidden)]
    fn is_present(&self) -> bool;
    /// Runs it; `None` means "no fallback after all" (FALLBACK_MISSING).
    #[doc(hidden)]
    fn call(self, error: &HystrixError<E>) -> Option<Result<T, BoxError>>;
}

/// A fallback usable by an async execution: synchronous or async.
pub trait AsyncFallback<T, E>: sealed::Sealed {
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

impl sealed::Sealed for NoFallback {}
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

impl<F, FE> sealed::Sealed for FallbackFn<F, FE> {}
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

impl<F, Fut> sealed::Sealed for FallbackAsyncFn<F, Fut> {}
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

impl<'c, C, R> Execution<'c, C, R, NoFallback> {
    pub(crate) fn new(command: &'c Command<C>, run: R) -> Self {
        Execution {
            command,
            run,
            fallback: NoFallback,
            options: CallOptions::default(),
        }
    }

    /// The fallback for this call: runs (on the calling thread) when the run fails, panics, times
    /// out, is short-circuited or rejected, with the error that happened. Its value is returned
    /// instead (FALLBACK_SUCCESS); its error or panic is kept beside the run's in the returned
    /// error (FALLBACK_FAILURE). It is bounded by `fallback.isolation.semaphore.
    /// maxConcurrentRequests` and skipped when `fallback.enabled` is false. Not used for bad
    /// requests and ignored errors.
    ///
    /// The fallback should not call the network; if it must, make it another command.
    pub fn fallback<F, FE>(self, fallback: F) -> Execution<'c, C, R, FallbackFn<F, FE>>
    where
        R: RunFn,
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
}

impl<'c, C, Fut> Execution<'c, C, Async<Fut>, NoFallback> {
    /// An async fallback for this call, as [`fallback`](Execution::fallback) but returning a
    /// future (e.g. another command's execution). The closure sees the error synchronously;
    /// the future it returns must not borrow it.
    pub fn fallback_async<F, FFut, FE>(
        self,
        fallback: F,
    ) -> Execution<'c, C, Async<Fut>, FallbackAsyncFn<F, FFut>>
    where
        Async<Fut>: RunFn,
        F: FnOnce(&HystrixError<<Async<Fut> as RunFn>::Error>) -> FFut,
        FFut: Future<Output = Result<<Async<Fut> as RunFn>::Output, FE>>,
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

impl<C, R, FB> Execution<'_, C, R, FB> {
    /// Overrides the timeout for this call only (rounded up to whole milliseconds; zero is refused
    /// when executed), instead of
    /// `execution.isolation.thread.timeoutInMilliseconds`. `execution.timeout.enabled = false`
    /// still turns timeouts off.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.timeout_ms = Some(crate::config::ceil_millis(timeout));
        self
    }

    /// A cache key for this call. It is recorded on the execution; the request cache that reads
    /// it needs a request context (Hystrix's `getCacheKey()`).
    pub fn cache_key(mut self, key: impl Into<String>) -> Self {
        self.options.cache_key = Some(key.into());
        self
    }
}

impl<C, R, FB> Execution<'_, C, R, FB>
where
    R: BlockingRun,
    FB: BlockingFallback<R::Output, R::Error>,
    C: Classify<R::Error>,
{
    /// Runs the execution on this thread and returns the value (from the run or the fallback)
    /// or the error.
    ///
    /// Under SEMAPHORE isolation the run executes on the calling thread and keeps its permit
    /// until it returns; at the deadline a cancellable run's token is cancelled, and a run that
    /// returns after the deadline is a TIMEOUT whose value is discarded (SPEC Part A 12).
    ///
    /// # Errors
    /// A [`HystrixError`] whose [`failure_type`](HystrixError::failure_type) says what happened
    /// when neither the run nor a fallback produced a value.
    pub fn execute(self) -> Result<R::Output, HystrixError<R::Error>> {
        self.execute_outcome().into_response()
    }

    /// As [`execute`](Execution::execute), also returning the [`ExecutionResult`](crate::ExecutionResult)
    /// (events, times).
    pub fn execute_outcome(self) -> Outcome<R::Output, R::Error> {
        pipeline::run_blocking(
            self.command.state(),
            self.command.classifier(),
            self.run,
            self.fallback,
            &self.options,
        )
    }
}

impl<'c, C, Fut, FB> Execution<'c, C, Async<Fut>, FB>
where
    Fut: RunFuture,
    FB: AsyncFallback<Fut::Ok, Fut::Error>,
    C: Classify<Fut::Error>,
{
    /// Runs the execution when awaited (cold: nothing happens before the first poll) and returns
    /// the value (from the run or the fallback) or the error.
    ///
    /// The run future is polled in the awaiting task; at the deadline it is dropped (TIMEOUT),
    /// which frees its permit at once, and the fallback is polled in its place.
    ///
    /// The future borrows the command; to spawn it as a task, move a clone of the command into
    /// the task: `tokio::spawn(async move { cmd.run_async(f).execute_async().await })`.
    ///
    /// # Cancel safety
    /// Dropping the returned future before it completes drops the run (and fallback) future,
    /// releases every permit, and, if it had been polled, records CANCELLED.
    ///
    /// # Errors
    /// As [`execute`](Execution::execute).
    pub fn execute_async(self) -> ExecuteAsync<'c, C, Fut, FB> {
        ExecuteAsync::new(self.execute_async_outcome())
    }

    /// As [`execute_async`](Execution::execute_async), resolving to the [`Outcome`] (response
    /// and [`ExecutionResult`](crate::ExecutionResult)).
    pub fn execute_async_outcome(self) -> ExecuteAsyncOutcome<'c, C, Fut, FB> {
        ExecuteAsyncOutcome::new(
            self.command.state(),
            self.command.classifier(),
            self.run.0,
            self.fallback,
            self.options,
        )
    }
}
