//! Executions with a cache key: the request cache's modes.
//!
//! The first execution of a (command key, cache key) in a request context runs and leaves its
//! outcome in the context's cache; later ones, and those that arrive while it runs, share that
//! outcome with RESPONSE_FROM_CACHE. Responses are shared behind `Arc`
//! ([`SharedResponse`]), so the modes here return `Arc<T>` and `Arc<HystrixError<E>>`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;

use crate::command::execution::{AsyncFallback, BlockingFallback, Execution, NoFallback};
use crate::command::future::ExecuteAsyncOutcome;
use crate::command::handle::{CachedObserved, CachedQueued, ToObservable};
use crate::command::pipeline;
use crate::command::run::{Async, Blocking, CancelLink, Cancellable, RunFn};
use crate::command::{Classify, ExecutionResult, Outcome};
use crate::context::{
    CacheOwner, CachedOutcome, Claim, Entry, Lookup, RequestContext, RequestLogEntry,
    SharedResponse, Wait,
};
use crate::error::{BoxError, Cause, Detail, FailureType, HystrixError};
use crate::event::EventType;
use crate::registry::{CommandState, EagerGuard};

/// An [`Execution`] with a cache key (Hystrix's `getCacheKey()`), from
/// [`Execution::cache_key`]: within one [`RequestContext`] the first execution of the key runs
/// and every later one — or one arriving while it runs — shares its outcome instead of running
/// (RESPONSE_FROM_CACHE). Every outcome is shared: values, fallback values and errors (failures,
/// timeouts, rejections), as Hystrix does, until the request ends or
/// [`Command::clear_cache`](crate::Command::clear_cache).
///
/// The modes are those of an execution, returning a [`SharedResponse`]
/// (`Result<Arc<T>, Arc<HystrixError<E>>>`), since one response may go to many callers; `T`
/// and `E` must be `Send + Sync`.
///
/// A cache hit has no breaker check, permit or timeout of its own; its
/// [`ExecutionResult`] holds the shared execution's events plus RESPONSE_FROM_CACHE, and metrics
/// count only RESPONSE_FROM_CACHE for it. With `requestCache.enabled` false the execution runs
/// as if it had no cache key. With it true (the default) a request context must be current:
/// otherwise the execution does not run and ends in [`FailureType::NoRequestContext`] (Hystrix's
/// "Request caching is not available. Maybe you need to initialize the HystrixRequestContext?").
///
/// ```
/// use hystrix::context::RequestContext;
/// use hystrix::testing::TestRegistry;
/// use hystrix::{Command, IsolationStrategy};
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// let test = TestRegistry::new(); // a manual clock: the times logged are exact
/// let get_user = Command::builder("GetUser")
///     .group("Users")
///     .isolation(IsolationStrategy::Semaphore)
///     .build_in(test.registry())?;
/// let calls = Arc::new(AtomicU32::new(0));
/// let fetch = |calls: &Arc<AtomicU32>| {
///     let calls = Arc::clone(calls);
///     move || {
///         calls.fetch_add(1, Ordering::Relaxed);
///         Ok::<_, std::io::Error>("ada".to_string())
///     }
/// };
///
/// let ctx = RequestContext::new();
/// let _entered = ctx.enter();
/// let first = get_user.run(fetch(&calls)).cache_key("user-7").execute()?;
/// let second = get_user.run(fetch(&calls)).cache_key("user-7").execute()?; // from the cache
/// assert_eq!((first.as_str(), second.as_str()), ("ada", "ada"));
/// assert_eq!(calls.load(Ordering::Relaxed), 1);
/// # drop(_entered);
/// assert_eq!(
///     ctx.request_log().to_string(),
///     "GetUser[SUCCESS][0ms], GetUser[SUCCESS, RESPONSE_FROM_CACHE][0ms]"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "an execution does nothing until consumed by a mode such as execute()"]
pub struct CachedExecution<'c, C, R, FB> {
    execution: Execution<'c, C, R, FB>,
    cache_key: String,
}

impl<C, R, FB> std::fmt::Debug for CachedExecution<'_, C, R, FB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedExecution")
            .field("execution", &self.execution)
            .field("cache_key", &self.cache_key)
            .finish()
    }
}

impl<'c, C, R, FB> CachedExecution<'c, C, R, FB> {
    pub(crate) fn new(execution: Execution<'c, C, R, FB>, cache_key: String) -> Self {
        CachedExecution {
            execution,
            cache_key,
        }
    }

    /// The cache key.
    pub fn key(&self) -> &str {
        &self.cache_key
    }

    /// As [`Execution::timeout`].
    pub fn timeout(self, timeout: Duration) -> Self {
        self.map(|execution| execution.timeout(timeout))
    }

    /// As [`Execution::breaker_key`].
    pub fn breaker_key(self, key: impl Into<Arc<str>>) -> Self {
        self.map(|execution| execution.breaker_key(key))
    }

    /// As [`Execution::journal`].
    pub fn journal(self, description: impl Into<String>) -> Self {
        self.map(|execution| execution.journal(description))
    }

    fn map<C2, R2, FB2>(
        self,
        f: impl FnOnce(Execution<'c, C, R, FB>) -> Execution<'c, C2, R2, FB2>,
    ) -> CachedExecution<'c, C2, R2, FB2> {
        CachedExecution {
            execution: f(self.execution),
            cache_key: self.cache_key,
        }
    }
}

impl<'c, C, R: RunFn> CachedExecution<'c, C, R, NoFallback> {
    /// As [`Execution::fallback`]; its value is shared like the run's.
    pub fn fallback<F, FE>(
        self,
        fallback: F,
    ) -> CachedExecution<'c, C, R, crate::command::FallbackFn<F, FE>>
    where
        F: FnOnce(&HystrixError<R::Error>) -> Result<R::Output, FE>,
        FE: Into<BoxError>,
    {
        self.map(|execution| execution.fallback(fallback))
    }

    /// As [`Execution::fallback_async`]; its value is shared like the run's.
    pub fn fallback_async<F, FFut, FE>(
        self,
        fallback: F,
    ) -> CachedExecution<'c, C, R, crate::command::FallbackAsyncFn<F, FFut>>
    where
        F: FnOnce(&HystrixError<R::Error>) -> FFut,
        FFut: Future<Output = Result<R::Output, FE>>,
        FE: Into<BoxError>,
    {
        self.map(|execution| execution.fallback_async(fallback))
    }
}

impl<'c, C, R, FB> CachedExecution<'c, C, R, FB> {
    /// Runs the execution's own blocking mode `execute` through the cache, on this thread.
    fn blocking<T, E>(
        self,
        execute: impl FnOnce(Execution<'c, C, R, FB>) -> Outcome<T, E>,
    ) -> CachedOutcome<T, E>
    where
        T: Send + Sync + 'static,
        E: Send + Sync + 'static,
    {
        let state = Arc::clone(self.execution.command().state_arc());
        let execution = self.execution;
        pipeline::block_on(CachedFuture::new(state, Some(self.cache_key), async move {
            execute(execution)
        }))
    }
}

macro_rules! cached_blocking_execute {
    ($kind:ident, $($run:tt)*) => {
        impl<C, F, T, E, FB> CachedExecution<'_, C, $kind<F>, FB>
        where
            F: $($run)* + Send + 'static,
            T: Send + Sync + 'static,
            E: Send + Sync + 'static,
            FB: BlockingFallback<T, E> + AsyncFallback<T, E>,
            C: Classify<E>,
        {
            /// As [`Execution::execute`], through the request cache: runs on a miss; on a hit
            /// returns the shared response (waiting, on this thread, for an identical execution
            /// still running).
            ///
            /// # Errors
            /// The shared error of the execution that ran; [`FailureType::NoRequestContext`]
            /// with no request context current.
            pub fn execute(self) -> SharedResponse<T, E> {
                self.execute_outcome().into_response()
            }

            /// As [`execute`](Self::execute), also returning the [`ExecutionResult`].
            pub fn execute_outcome(self) -> CachedOutcome<T, E> {
                self.blocking(|execution| execution.execute_outcome())
            }
        }
    };
}
cached_blocking_execute!(Blocking, FnOnce() -> Result<T, E>);
cached_blocking_execute!(Cancellable, FnOnce(crate::CancellationToken) -> Result<T, E>);

impl<C, Fut, T, E, FB> CachedExecution<'_, C, Async<Fut>, FB>
where
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + Sync + 'static,
    E: Send + Sync + 'static,
    FB: AsyncFallback<T, E>,
    C: Classify<E>,
{
    /// As the async run's [`Execution::execute`] (refused on a thread a tokio runtime drives), through the
    /// request cache.
    ///
    /// # Errors
    /// As [`execute_async`](CachedExecution::execute_async).
    pub fn execute(self) -> SharedResponse<T, E> {
        self.execute_outcome().into_response()
    }

    /// As [`execute`](Self::execute), also returning the [`ExecutionResult`].
    pub fn execute_outcome(self) -> CachedOutcome<T, E> {
        self.blocking(|execution| execution.execute_outcome())
    }
}

impl<C, R, FB> CachedExecution<'_, C, R, FB>
where
    R: RunFn,
    R::Output: Send + Sync + 'static,
    R::Error: Send + Sync + 'static,
    FB: AsyncFallback<R::Output, R::Error> + Send + 'static,
    FB::Future: Send + 'static,
    C: Classify<R::Error> + Clone + Send + Sync + 'static,
{
    /// As [`Execution::execute_async`], through the request cache: cold; on a miss the run
    /// executes in this future; on a hit it resolves to the shared response (awaiting an
    /// identical execution still running). The request context is the one current when it is
    /// first polled.
    ///
    /// The future owns what it needs (a clone of the command's classifier, the fallback), so
    /// that a run others wait for can go on without it: the classifier must be `Clone`, and
    /// the fallback and its future `Send + 'static`, as for [`queue`](CachedExecution::queue).
    ///
    /// # Cancel safety
    /// Dropping the future of the execution that runs while other executions wait for it
    /// does not cancel the run: it goes on, on the registry's executor, and they get its
    /// outcome; it is recorded once, with that outcome, when it ends. Dropped
    /// while nobody waits, it is cancelled (as [`Execution::execute_async`]) and its entry
    /// leaves the cache. A dropped waiting hit records RESPONSE_FROM_CACHE and CANCELLED and
    /// changes nothing for the others. See [`CachedFuture`].
    ///
    /// # Errors
    /// The shared error of the execution that ran; [`FailureType::NoRequestContext`] with no
    /// request context current.
    pub fn execute_async(self) -> CachedResponse<CachedExecuteAsync<C, R, FB>> {
        CachedResponse::new(self.execute_async_outcome())
    }

    /// As [`execute_async`](CachedExecution::execute_async), resolving to the
    /// [`CachedOutcome`] (response and [`ExecutionResult`]).
    pub fn execute_async_outcome(self) -> CachedExecuteAsync<C, R, FB> {
        let (state, execution) = self.execution.into_owned();
        CachedFuture::detachable(state, Some(self.cache_key), execution)
    }

    /// As [`Execution::to_observable`]: a cold one-item stream of the shared response.
    pub fn to_observable(self) -> ToObservable<CachedResponse<CachedExecuteAsync<C, R, FB>>> {
        ToObservable::new(self.execute_async())
    }

    /// As [`Execution::queue`], through the request cache: the cache is looked up now, in the
    /// request context current here; on a miss the execution starts now (its first steps on
    /// this thread, the rest on the registry's executor) and its outcome is shared when it
    /// ends, even if the handle was dropped; on a hit the handle resolves to the shared
    /// response. Dropping the handle detaches it; [`cancel`](CachedQueued::cancel) cancels,
    /// except a run other executions wait for, which goes on for them (see
    /// [`execute_async`](CachedExecution::execute_async)).
    pub fn queue(self) -> CachedQueued<R::Output, R::Error> {
        let (state, execution, link) = self.execution.into_owned_linked();
        let future = CachedFuture::detachable(Arc::clone(&state), Some(self.cache_key), execution)
            .with_cancel_link(link.clone());
        CachedQueued::start(&state, future, link)
    }

    /// As [`Execution::observe`], through the request cache: eager as
    /// [`queue`](CachedExecution::queue); a one-item stream of the shared response.
    pub fn observe(self) -> CachedObserved<R::Output, R::Error> {
        CachedObserved::new(self.queue())
    }
}

/// The future of an async execution through the request cache (see [`CachedFuture`]).
pub type CachedExecuteAsync<C, R, FB> =
    CachedFuture<<R as RunFn>::Output, <R as RunFn>::Error, ExecuteAsyncOutcome<'static, C, R, FB>>;

pin_project! {
    /// The future of an execution through the request cache: what
    /// [`CachedExecution::execute_async_outcome`] returns. Cold: the cache is looked up in the
    /// request context current at its first poll. On a miss it polls the execution's own
    /// (cold) future `Fut` and shares its outcome; on a hit it waits for the shared outcome
    /// and `Fut` is dropped unpolled (nothing recorded for it).
    ///
    /// # Cancel safety
    /// Dropping the future of the execution that runs (the owner of the cache entry) while
    /// other executions wait for its outcome does not cancel the run: it goes on, on the
    /// registry's executor, in the owner's request context, and its outcome goes to the waiters
    /// and the cache. It is recorded once, with its own outcome (say SUCCESS),
    /// when it ends; the owner's drop records nothing. If the waiters leave too before it ends,
    /// it is cancelled when the last one leaves (as Hystrix's cached observable unsubscribes
    /// from the command when its last subscriber leaves). Dropped while nobody waits, it is
    /// cancelled (CANCELLED, permits freed) and its entry leaves the cache. Only if the
    /// registry's executor is gone (shut down) is a waited-for run cancelled too; its waiters
    /// then look again and the first runs its own run function. A dropped waiter records
    /// RESPONSE_FROM_CACHE and CANCELLED (as Hystrix counts an unsubscribed cache hit) and
    /// changes nothing for the others.
    ///
    /// A hand-written state machine with plain type parameters, so it is `Send` whenever its
    /// parts are (see the `command::future` module on `async` blocks and error types).
    #[must_use = "futures do nothing unless polled"]
    pub struct CachedFuture<T, E, Fut> {
        #[pin]
        execution: Slot<Fut>,
        state: Arc<CommandState>,
        cache_key: Option<String>,
        phase: CachedPhase<T, E>,
        // Moves the owner's running execution to the executor; `None` where the execution
        // cannot move (it borrows, or a blocking caller waits for it anyway).
        detach: Option<Detach<T, E, Fut>>,
        // The handle's link to a queued pool task (`queue()`, `observe()`).
        link: Option<Arc<CancelLink>>,
    }

    impl<T, E, Fut> PinnedDrop for CachedFuture<T, E, Fut> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            match std::mem::replace(this.phase, CachedPhase::Done) {
                CachedPhase::Waiting { wait, context, start_ms } => {
                    drop(wait);
                    cancelled_hit(this.state, &context, start_ms);
                }
                CachedPhase::Running { claim: Some(claim) } => {
                    let waited = claim.entry().has_waiters()
                        && !this.link.as_ref().is_some_and(|link| link.withdrew());
                    if waited
                        && let Some(detach) = this.detach
                        && let SlotOwned::Boxed { execution } =
                            this.execution.as_mut().project_replace(Slot::Empty)
                    {
                        detach(execution, claim, this.state);
                        return;
                    }
                    // Cancelled (recorded) before its entry is abandoned and waiters look again.
                    this.execution.set(Slot::Empty);
                    drop(claim);
                }
                _ => {}
            }
        }
    }
}

pin_project! {
    /// The execution a [`CachedFuture`] may run.
    #[project = SlotProj]
    #[project_replace = SlotOwned]
    enum Slot<Fut> {
        // Not started; it can still move.
        Cold { execution: Fut },
        // Polled in place (no other execution can wait for it).
        Here { #[pin] execution: Fut },
        // The owner of a cache entry's: boxed, so it can move to the executor if its caller
        // leaves while others wait for it.
        Boxed { execution: Pin<Box<Fut>> },
        // Done, or never to run (a hit).
        Empty,
    }
}

/// Moves an owner's running execution, with its claim, to the registry's executor.
type Detach<T, E, Fut> = fn(Pin<Box<Fut>>, Claim<T, E>, &CommandState);

enum CachedPhase<T, E> {
    /// Not polled yet.
    Start,
    /// A hit: waiting for another execution's outcome, since `start_ms`.
    Waiting {
        wait: Wait<T, E>,
        context: RequestContext,
        start_ms: u64,
    },
    /// A miss (or no caching): the own execution runs; its outcome goes to the claim.
    Running { claim: Option<Claim<T, E>> },
    /// The outcome was returned.
    Done,
}

impl<T, E, Fut> std::fmt::Debug for CachedFuture<T, E, Fut> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedFuture")
            .field("cache_key", &self.cache_key)
            .finish_non_exhaustive()
    }
}

impl<T, E, Fut> CachedFuture<T, E, Fut> {
    /// `execution` through the cache under `cache_key` (`None`: not cached, shared anyway).
    /// Its caller waits for it to the end (a blocking execution): it never has to move.
    pub(crate) fn new(state: Arc<CommandState>, cache_key: Option<String>, execution: Fut) -> Self {
        CachedFuture {
            execution: Slot::Cold { execution },
            state,
            cache_key,
            phase: CachedPhase::Start,
            detach: None,
            link: None,
        }
    }

    /// Withdraws nothing through `link` while others wait for this owner's outcome.
    pub(crate) fn with_cancel_link(mut self, link: Option<Arc<CancelLink>>) -> Self {
        self.link = link;
        self
    }
}

impl<T, E, Fut> CachedFuture<T, E, Fut>
where
    T: Send + Sync + 'static,
    E: Send + Sync + 'static,
    Fut: Future<Output = Outcome<T, E>> + Send + 'static,
{
    /// As [`new`](CachedFuture::new), for an execution whose caller may leave: if it is
    /// dropped while others wait for its outcome, the execution goes on on the registry's
    /// executor.
    pub(crate) fn detachable(
        state: Arc<CommandState>,
        cache_key: Option<String>,
        execution: Fut,
    ) -> Self {
        let mut future = Self::new(state, cache_key, execution);
        future.detach = Some(detach::<T, E, Fut>);
        future
    }
}

/// Goes on with an owner's execution on the registry's executor, in the entry's request
/// context, and shares its outcome; without an executor (shut down) it is dropped, which
/// cancels it and abandons the entry.
fn detach<T, E, Fut>(execution: Pin<Box<Fut>>, claim: Claim<T, E>, state: &CommandState)
where
    T: Send + Sync + 'static,
    E: Send + Sync + 'static,
    Fut: Future<Output = Outcome<T, E>> + Send + 'static,
{
    let Some(executor) = state.env.executor() else {
        return;
    };
    let entry = Arc::clone(claim.entry());
    let task = executor.spawn(Detached {
        context: claim.context().clone(),
        execution: Some(execution),
        claim: Some(claim),
        _in_flight: state.env.eager_started(),
    });
    entry.went_on_in(task.abort_handle());
}

/// An owner's execution going on without its caller: polled, and dropped (if aborted or the
/// executor stops), inside the entry's request context, so its end is logged in that request.
struct Detached<T, E, Fut> {
    context: RequestContext,
    execution: Option<Pin<Box<Fut>>>,
    claim: Option<Claim<T, E>>,
    /// The registry's shutdown waits for it, as for eager executions.
    _in_flight: EagerGuard,
}

impl<T, E, Fut> Future for Detached<T, E, Fut>
where
    T: Send + Sync + 'static,
    E: Send + Sync + 'static,
    Fut: Future<Output = Outcome<T, E>>,
{
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let _in_request = this.context.enter();
        let (Some(execution), Some(claim)) = (&mut this.execution, &this.claim) else {
            return Poll::Ready(());
        };
        let running = RunningHere::enter(claim.entry());
        let outcome = std::task::ready!(execution.as_mut().poll(cx));
        drop(running);
        this.execution = None;
        if let Some(claim) = this.claim.take() {
            settle(claim, share(outcome));
        }
        Poll::Ready(())
    }
}

impl<T, E, Fut> Drop for Detached<T, E, Fut> {
    fn drop(&mut self) {
        // Unfinished (aborted: its last waiter left; or its executor stopped): cancelled in
        // its request, then its entry is abandoned.
        let _in_request = self.context.enter();
        self.execution = None;
        self.claim = None;
    }
}

/// Publishes `outcome` to the claim's waiters, unless the execution was refused before any
/// step (a misuse: not kept; the waiters look again).
fn settle<T, E>(claim: Claim<T, E>, outcome: CachedOutcome<T, E>) -> CachedOutcome<T, E> {
    if outcome.result.events.is_empty() {
        drop(claim);
    } else {
        claim.publish(&outcome);
    }
    outcome
}

impl<T, E, Fut> Future for CachedFuture<T, E, Fut>
where
    T: Send + Sync + 'static,
    E: Send + Sync + 'static,
    Fut: Future<Output = Outcome<T, E>>,
{
    type Output = CachedOutcome<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.phase {
                CachedPhase::Start => {
                    let enabled = this.state.properties.load().request_cache_enabled;
                    let cache_key = match this.cache_key {
                        Some(cache_key) if enabled => cache_key,
                        _ => {
                            *this.phase = CachedPhase::Running { claim: None };
                            start(this.execution.as_mut(), false);
                            continue;
                        }
                    };
                    let Some(context) = RequestContext::current() else {
                        *this.phase = CachedPhase::Done;
                        return Poll::Ready(refused(no_request_context(
                            this.state,
                            "has a cache key",
                        )));
                    };
                    let start_ms = this.state.env.clock.now_ms();
                    match look_up(this.state, context, cache_key, start_ms) {
                        Ok(phase) => {
                            *this.phase = phase;
                            self::owns(this.phase, this.execution.as_mut(), this.detach, this.link);
                        }
                        Err(refusal) => {
                            *this.phase = CachedPhase::Done;
                            return Poll::Ready(refusal);
                        }
                    }
                }
                CachedPhase::Waiting {
                    wait,
                    context,
                    start_ms,
                } => match Pin::new(wait).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(shared)) => {
                        let outcome = hit(this.state, context, shared, *start_ms);
                        *this.phase = CachedPhase::Done;
                        return Poll::Ready(outcome);
                    }
                    Poll::Ready(None) => {
                        // Its execution was dropped before it ended: look again; the first to
                        // look runs its own execution.
                        let (context, start_ms) = (context.clone(), *start_ms);
                        let cache_key = this.cache_key.as_deref().unwrap_or_default();
                        match look_up(this.state, context, cache_key, start_ms) {
                            Ok(phase) => {
                                *this.phase = phase;
                                self::owns(
                                    this.phase,
                                    this.execution.as_mut(),
                                    this.detach,
                                    this.link,
                                );
                            }
                            Err(refusal) => {
                                *this.phase = CachedPhase::Done;
                                return Poll::Ready(refusal);
                            }
                        }
                    }
                },
                CachedPhase::Running { claim } => {
                    // While it runs here, an identical execution inside it must not wait for it.
                    let running = claim
                        .as_ref()
                        .map(|claim| RunningHere::enter(claim.entry()));
                    let polled = match this.execution.as_mut().project() {
                        SlotProj::Here { execution } => execution.poll(cx),
                        SlotProj::Boxed { execution } => execution.as_mut().poll(cx),
                        SlotProj::Cold { .. } | SlotProj::Empty => {
                            unreachable!("a running execution was started")
                        }
                    };
                    drop(running);
                    let outcome = share(std::task::ready!(polled));
                    this.execution.set(Slot::Empty);
                    let outcome = match claim.take() {
                        Some(claim) => settle(claim, outcome),
                        None => outcome,
                    };
                    *this.phase = CachedPhase::Done;
                    return Poll::Ready(outcome);
                }
                CachedPhase::Done => panic!("a cached execution was polled after it completed"),
            }
        }
    }
}

/// Starts the execution in `slot`: boxed if it may have to move, in place otherwise.
fn start<Fut>(mut slot: Pin<&mut Slot<Fut>>, boxed: bool) {
    if let SlotOwned::Cold { execution } = slot.as_mut().project_replace(Slot::Empty) {
        slot.set(if boxed {
            Slot::Boxed {
                execution: Box::pin(execution),
            }
        } else {
            Slot::Here { execution }
        });
    }
}

/// After a lookup: an owner (a miss) starts its execution, boxed if it can move, and tells a
/// handle's link to leave its pool task alone while others wait for the outcome.
fn owns<T, E, Fut>(
    phase: &CachedPhase<T, E>,
    slot: Pin<&mut Slot<Fut>>,
    detach: &Option<Detach<T, E, Fut>>,
    link: &Option<Arc<CancelLink>>,
) where
    T: Send + Sync + 'static,
    E: Send + Sync + 'static,
{
    if let CachedPhase::Running { claim: Some(claim) } = phase {
        start(slot, detach.is_some());
        if let Some(link) = link {
            let entry = Arc::clone(claim.entry());
            link.keep_while(move || entry.has_waiters());
        }
    }
}

/// Looks `cache_key` up in `context`: the phase that follows, or the refusal of an entry of
/// another type.
fn look_up<T, E>(
    state: &CommandState,
    context: RequestContext,
    cache_key: &str,
    start_ms: u64,
) -> Result<CachedPhase<T, E>, CachedOutcome<T, E>>
where
    T: Send + Sync + 'static,
    E: Send + Sync + 'static,
{
    match context
        .cache()
        .lookup(&context, CacheOwner::Command(state.key.clone()), cache_key)
    {
        None => Err(refused(other_type(state, cache_key))),
        Some(Lookup::Hit(entry)) if RunningHere::contains(&entry) => {
            Err(refused(HystrixError::misuse(
                state.key.clone(),
                format!(
                    "was executed with cache key {cache_key:?} inside the run of the execution \
                     that has this cache key, which would wait for itself forever; give the inner \
                     execution another cache key"
                ),
            )))
        }
        Some(Lookup::Miss(claim)) => Ok(CachedPhase::Running { claim: Some(claim) }),
        Some(Lookup::Hit(entry)) => Ok(CachedPhase::Waiting {
            wait: entry.wait(),
            context,
            start_ms,
        }),
    }
}

pin_project! {
    /// A future that resolves to the response of a [`CachedFuture`]: what
    /// [`CachedExecution::execute_async`] returns.
    #[must_use = "futures do nothing unless polled"]
    pub struct CachedResponse<F> {
        #[pin]
        inner: F,
    }
}

impl<F> std::fmt::Debug for CachedResponse<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedResponse").finish_non_exhaustive()
    }
}

impl<F> CachedResponse<F> {
    pub(crate) fn new(inner: F) -> Self {
        CachedResponse { inner }
    }
}

impl<F, T, E> Future for CachedResponse<F>
where
    F: Future<Output = CachedOutcome<T, E>>,
{
    type Output = SharedResponse<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project()
            .inner
            .poll(cx)
            .map(CachedOutcome::into_response)
    }
}

thread_local! {
    /// The entries whose executions this thread is running now (innermost last).
    static RUNNING_HERE: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Marks an entry's execution as running on this thread while it is polled here.
struct RunningHere(usize);

impl RunningHere {
    fn address<T, E>(entry: &Arc<Entry<T, E>>) -> usize {
        Arc::as_ptr(entry).cast::<()>() as usize
    }

    fn enter<T, E>(entry: &Arc<Entry<T, E>>) -> Self {
        let address = Self::address(entry);
        RUNNING_HERE.with(|running| running.borrow_mut().push(address));
        RunningHere(address)
    }

    fn contains<T, E>(entry: &Arc<Entry<T, E>>) -> bool {
        let address = Self::address(entry);
        RUNNING_HERE.with(|running| running.borrow().contains(&address))
    }
}

impl Drop for RunningHere {
    fn drop(&mut self) {
        RUNNING_HERE.with(|running| {
            let mut running = running.borrow_mut();
            if let Some(at) = running.iter().rposition(|&address| address == self.0) {
                running.remove(at);
            }
        });
    }
}

/// The outcome of the execution that ran, shared.
pub(crate) fn share<T, E>(outcome: Outcome<T, E>) -> CachedOutcome<T, E> {
    let (response, result) = outcome.into_parts();
    CachedOutcome {
        response: response.map(Arc::new).map_err(Arc::new),
        result,
    }
}

/// An execution refused before any step (not counted, not cached).
fn refused<T, E>(error: HystrixError<E>) -> CachedOutcome<T, E> {
    CachedOutcome {
        response: Err(Arc::new(error)),
        result: ExecutionResult::empty(),
    }
}

/// A hit dropped before the shared outcome came (its caller left): RESPONSE_FROM_CACHE and
/// CANCELLED, counted and logged as such (Hystrix's unsubscribed cache hit).
fn cancelled_hit(state: &CommandState, context: &RequestContext, start_ms: u64) {
    let now_ms = state.env.clock.now_ms();
    state.record_cache_hit(now_ms, true);
    state.env.hook(|hook| {
        hook.on_cache_hit(&state.key);
        hook.on_unsubscribe(&state.key);
    });
    if state.properties.hot().load().request_log_enabled() {
        let mut events = crate::event::EventCounts::new();
        events.add(EventType::ResponseFromCache);
        events.add(EventType::Cancelled);
        context.log(RequestLogEntry::new(
            state.key.clone(),
            events,
            now_ms.saturating_sub(start_ms),
        ));
    }
}

/// A hit: `shared`'s response, its events plus RESPONSE_FROM_CACHE; counted as a hit only.
fn hit<T, E>(
    state: &CommandState,
    context: &RequestContext,
    shared: CachedOutcome<T, E>,
    start_ms: u64,
) -> CachedOutcome<T, E> {
    let now_ms = state.env.clock.now_ms();
    let mut events = shared.result.events;
    events.add(EventType::ResponseFromCache);
    state.record_cache_hit(now_ms, false);
    state.env.hook(|hook| hook.on_cache_hit(&state.key));
    if state.properties.hot().load().request_log_enabled() {
        context.log(RequestLogEntry::new(state.key.clone(), events, 0));
    }
    CachedOutcome {
        response: shared.response,
        result: ExecutionResult {
            events,
            start_ms,
            execution_time_ms: None,
            total_time_ms: now_ms.saturating_sub(start_ms),
            isolation: shared.result.isolation,
            executed_in_thread: false,
        },
    }
}

/// The error of a request-scoped feature used with no request context current; `what` says
/// what the command did, e.g. "has a cache key".
pub(crate) fn no_request_context<E>(state: &CommandState, what: &str) -> HystrixError<E> {
    let or_off = if what == CLEARING {
        ""
    } else {
        ", or turn the cache off with requestCache.enabled=false"
    };
    HystrixError::new(
        FailureType::NoRequestContext,
        state.key.clone(),
        Cause::None,
    )
    .with_detail(Detail::Message(
        format!(
            "{what}, but no request context is current, so request caching is not available: \
             open one around the request with RequestContext::new().scope(future).await \
             (async) or RequestContext::new().enter() (sync){or_off}"
        )
        .into(),
    ))
}

/// What [`Command::clear_cache`](crate::Command::clear_cache) says it could not do.
pub(crate) const CLEARING: &str = "could not clear a cache key";

fn other_type<E>(state: &CommandState, cache_key: &str) -> HystrixError<E> {
    HystrixError::misuse(
        state.key.clone(),
        format!(
            "has a cache entry for cache key {cache_key:?} in this request with another \
             response or error type: two definitions share this command key with different \
             types; give them different command keys"
        ),
    )
}
