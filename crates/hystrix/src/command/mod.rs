//! Commands: the definition of a protected dependency call, and its executions.
//!
//! A [`Command`] is built once per dependency call site and holds pre-resolved handles to its
//! key's shared state (breaker, semaphores, metrics, live properties), so an execution does no
//! lookup by name. Each call creates an [`Execution`] from a run function and consumes it with
//! one mode:
//!
//! - [`run`](Command::run): a blocking `FnOnce() -> Result<T, E>`;
//! - [`run_cancellable`](Command::run_cancellable): a blocking
//!   `FnOnce(CancellationToken) -> Result<T, E>` whose token is cancelled at the timeout;
//! - [`run_async`](Command::run_async): a `Future<Output = Result<T, E>>`;
//! - [`run_stream`](Command::run_stream): a `Stream<Item = Result<T, E>>` (Hystrix's
//!   `HystrixObservableCommand`), consumed by `to_observable()` or `observe()`.
//!
//! ```
//! use hystrix::{Command, IsolationStrategy, Registry};
//! use std::time::Duration;
//!
//! let registry = Registry::new();
//! let get_user = Command::builder("GetUser")
//!     .group("UserService")
//!     .isolation(IsolationStrategy::Semaphore)
//!     .timeout(Duration::from_millis(500))
//!     .build_in(&registry)?;
//!
//! let name = get_user
//!     .run(|| Err::<String, _>("connection refused"))
//!     .fallback(|_err| Ok::<_, std::convert::Infallible>("anonymous".to_string()))
//!     .execute()
//!     // A `&str` cause is not a std::error::Error; boxing it makes the error one, for `?`.
//!     .map_err(hystrix::HystrixError::into_boxed)?;
//! assert_eq!(name, "anonymous");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cached;
mod execution;
mod future;
mod handle;
mod hystrix_command;
mod keyed;
mod outcome;
mod pipeline;
pub(crate) mod run;
mod runtime_thread;
mod stream;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use cached::{CachedExecuteAsync, CachedExecution, CachedFuture, CachedResponse};
pub use execution::{
    AsyncFallback, BlockingFallback, Execution, FallbackAsyncFn, FallbackFn, NoFallback,
};
#[cfg(feature = "tower")]
pub(crate) use future::StateRef;
pub use future::{ExecuteAsync, ExecuteAsyncOutcome, ExecutionFuture, OutcomeResponse};
pub(crate) use handle::block_safely;
pub use handle::{CachedObserved, CachedQueued, Observed, QueuedExecution, ToObservable};
pub use hystrix_command::{HystrixAsyncCommand, HystrixCommand};
pub use keyed::{KeyedCommands, KeyedCommandsBuilder};
pub use outcome::{ExecutionResult, Outcome};
pub(crate) use pipeline::{block_on, panic_message, poll_caught};
pub use run::{Async, Blocking, Cancellable, Interrupt, RunFn};
pub(crate) use runtime_thread::driven_by_runtime;
pub use stream::{
    ExecutionStream, FallbackStreamFn, NoFallbackStream, ObservedStream, STREAM_BUFFER_CAPACITY,
    StreamExecution, StreamFallback,
};
#[cfg(feature = "tower")]
pub(crate) use {pipeline::CallOptions, run::sealed::Sealed};

use crate::circuit::journal::JournalConfig;
use crate::circuit::{Backoff, BreakerSpec, HealthProbe};
use crate::config::{
    CommandLayer, CommandProperties, IsolationStrategy, LayerError, PropertyValue, ThreadPoolLayer,
};
use crate::error::ConfigError;
use crate::key::{CommandKey, GroupKey, ThreadPoolKey};
use crate::registry::{CommandState, Registry};

/// How an error returned by a run counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Class {
    /// A failure of the dependency: FAILURE, counts against health, the fallback runs. The
    /// default.
    Failure,
    /// The caller's request was bad (Hystrix's `HystrixBadRequestException`): BAD_REQUEST, not
    /// counted in health, no fallback, the error is returned as is.
    BadRequest,
    /// A business error from a healthy dependency (e.g. "not found"): IGNORED, counts as a
    /// success for health, no fallback, the error is returned as is.
    Ignored,
    /// A failure that also opens the breaker at once (accelerated tripping), for
    /// at least `min_open` if given, e.g. an HTTP 503 with `Retry-After` (see
    /// [`http::retry_after`](crate::http::retry_after)). FAILURE, the fallback runs; the breaker
    /// stays open for the larger of `min_open` and its usual open duration (the sleep window,
    /// or the [`Backoff`]'s). Only an execution admitted by the
    /// breaker's current state trips it (a trial re-opens it); one admitted earlier that ends
    /// while the breaker is OPEN makes the opening last at least `min_open` from now (of
    /// concurrent Retry-Afters, the longest wins).
    TripNow {
        /// The least time to stay open (rounded up to whole ms); `None`: the usual duration.
        min_open: Option<std::time::Duration>,
    },
}

/// Decides the [`Class`] of a run's error of type `E`, and whether another attempt may follow
/// it.
pub trait Classify<E> {
    /// The class of `error`, for the breaker and the fallback.
    fn classify(&self, error: &E) -> Class;

    /// Whether an attempt that failed with `error` may be retried, and not before when
    /// (only asked of retryable runs with `retry.maxAttempts` over 1, for errors whose class
    /// is a failure). Default: [`RetryAnswer::retry`](crate::retry::RetryAnswer::retry).
    fn retry(&self, error: &E) -> crate::retry::RetryAnswer {
        let _ = error;
        crate::retry::RetryAnswer::retry()
    }

    /// The retry-answer function set with [`CommandBuilder::classify_retry`], kept when
    /// [`CommandBuilder::classify`] comes after it.
    #[doc(hidden)]
    fn retry_answers(&self) -> Option<RetryFn<E>> {
        None
    }
}

/// The default classifier: every error is a [`Class::Failure`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllFailures;

impl<E, C: Classify<E> + ?Sized> Classify<E> for &C {
    #[inline]
    fn classify(&self, error: &E) -> Class {
        (**self).classify(error)
    }

    fn retry(&self, error: &E) -> crate::retry::RetryAnswer {
        (**self).retry(error)
    }

    fn retry_answers(&self) -> Option<RetryFn<E>> {
        (**self).retry_answers()
    }
}

impl<E> Classify<E> for AllFailures {
    #[inline]
    fn classify(&self, _error: &E) -> Class {
        Class::Failure
    }
}

/// The class function of a [`Classifier`].
type ClassFn<E> = Arc<dyn Fn(&E) -> Class + Send + Sync>;
/// The retry-answer function of a [`Classifier`].
#[doc(hidden)]
pub type RetryFn<E> = Arc<dyn Fn(&E) -> crate::retry::RetryAnswer + Send + Sync>;

/// A classifier for errors of type `E`, set with [`CommandBuilder::classify`] (the class) and
/// [`CommandBuilder::classify_retry`] (the retry answer).
pub struct Classifier<E>(ClassFn<E>, Option<RetryFn<E>>);

impl<E> Clone for Classifier<E> {
    fn clone(&self) -> Self {
        Classifier(Arc::clone(&self.0), self.1.clone())
    }
}

impl<E> fmt::Debug for Classifier<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Classifier(..)")
    }
}

impl<E> Classify<E> for Classifier<E> {
    #[inline]
    fn classify(&self, error: &E) -> Class {
        (self.0)(error)
    }

    fn retry(&self, error: &E) -> crate::retry::RetryAnswer {
        self.1
            .as_ref()
            .map_or_else(crate::retry::RetryAnswer::retry, |retry| retry(error))
    }

    fn retry_answers(&self) -> Option<RetryFn<E>> {
        self.1.clone()
    }
}

/// A validated command definition: cheap to clone, shareable across threads.
///
/// `C` is its error classifier: [`AllFailures`] unless set with [`CommandBuilder::classify`], in
/// which case runs must return that classifier's error type.
///
/// Two definitions with the same command key (in one registry) share one breaker, semaphore,
/// metrics and properties, as in Hystrix.
pub struct Command<C = AllFailures> {
    state: Arc<CommandState>,
    classifier: C,
}

impl<C: Clone> Clone for Command<C> {
    fn clone(&self) -> Self {
        Command {
            state: Arc::clone(&self.state),
            classifier: self.classifier.clone(),
        }
    }
}

impl<C> fmt::Debug for Command<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Command")
            .field("key", &self.state.key)
            .field("group", &self.state.group)
            .field("thread_pool_key", &self.state.thread_pool_key)
            .finish_non_exhaustive()
    }
}

impl Command {
    /// Starts a definition for `key`. A group ([`CommandBuilder::group`]) is required.
    pub fn builder(key: impl Into<String>) -> CommandBuilder {
        CommandBuilder {
            key: key.into(),
            group: None,
            thread_pool_key: None,
            layer: CommandLayer::default(),
            pool_layer: ThreadPoolLayer::default(),
            error: None,
            classifier: AllFailures,
            breaker: BreakerSpec::default(),
            retry_backoff: None,
        }
    }
}

impl<C> Command<C> {
    /// The command key.
    pub fn key(&self) -> &CommandKey {
        &self.state.key
    }

    /// The group key.
    pub fn group(&self) -> &GroupKey {
        &self.state.group
    }

    /// The thread-pool key (the group's name unless set, or overridden by
    /// `threadPoolKeyOverride`).
    pub fn thread_pool_key(&self) -> &ThreadPoolKey {
        &self.state.thread_pool_key
    }

    /// A snapshot of the key's live properties.
    pub fn properties(&self) -> CommandProperties {
        (**self.state.properties.load()).clone()
    }

    /// A snapshot of the key's metrics.
    pub fn metrics(&self) -> crate::CommandMetrics {
        self.state.metrics()
    }

    /// A snapshot of the gauges of the command's thread pool; `None` until a THREAD-isolated
    /// execution created it.
    pub fn thread_pool_metrics(&self) -> Option<crate::ThreadPoolMetrics> {
        self.state
            .thread_pool_if_created()
            .map(|pool| pool.metrics())
    }

    /// Removes the request cache's entry of `cache_key` for this command in the current
    /// [`RequestContext`](crate::context::RequestContext) (Hystrix's
    /// `HystrixRequestCache.clear`); returns whether there was one. The next execution with
    /// this cache key runs anew; one still running answers those already waiting for it.
    ///
    /// # Errors
    /// [`FailureType::NoRequestContext`](crate::FailureType::NoRequestContext) when no request
    /// context is current.
    pub fn clear_cache(
        &self,
        cache_key: &str,
    ) -> Result<bool, crate::HystrixError<std::convert::Infallible>> {
        let Some(context) = crate::context::RequestContext::current() else {
            return Err(cached::no_request_context(&self.state, cached::CLEARING));
        };
        Ok(context.clear_cache(&self.state.key, cache_key))
    }

    /// The command key's circuit breaker, to look at and override by hand.
    pub fn circuit_breaker(&self) -> crate::circuit::CircuitBreakerHandle {
        crate::circuit::CircuitBreakerHandle::new(Arc::clone(&self.state))
    }

    /// The keyed breaker of `breaker_key`; `None` if the command has no keyed breakers
    /// ([`CommandBuilder::breaker_per_key`]) or none for this key (never used, evicted, or
    /// served by the overflow breaker). A look does not make one nor count as a use. With
    /// [`OVERFLOW_BREAKER_KEY`](crate::circuit::OVERFLOW_BREAKER_KEY), the overflow breaker.
    pub fn keyed_circuit_breaker(
        &self,
        breaker_key: &str,
    ) -> Option<crate::circuit::CircuitBreakerHandle> {
        let keyed = self.state.extras.keyed.as_ref()?.find(breaker_key)?;
        Some(crate::circuit::CircuitBreakerHandle::keyed(
            Arc::clone(&self.state),
            keyed,
        ))
    }

    /// The keys of the keyed breakers kept now, most recently used first (empty without
    /// [`CommandBuilder::breaker_per_key`]; the overflow breaker is not listed).
    pub fn keyed_circuit_breaker_keys(&self) -> Vec<Arc<str>> {
        self.state
            .extras
            .keyed
            .as_ref()
            .map_or_else(Vec::new, |keyed| keyed.keys())
    }

    /// The number of keyed breakers kept now (0 without
    /// [`CommandBuilder::breaker_per_key`]; the overflow breaker not counted).
    pub fn keyed_circuit_breaker_count(&self) -> usize {
        self.state
            .extras
            .keyed
            .as_ref()
            .map_or(0, |keyed| keyed.len())
    }

    /// The journal's counts (journalled, replayed, dropped, pending); `None` without
    /// [`CommandBuilder::journal`].
    pub fn journal_counts(&self) -> Option<crate::circuit::journal::JournalCounts> {
        self.state
            .extras
            .journal
            .as_ref()
            .map(|journal| journal.counts())
    }

    /// Whether the circuit is open now (Hystrix's `isCircuitBreakerOpen()`).
    pub fn is_circuit_breaker_open(&self) -> bool {
        self.circuit_breaker().is_open()
    }

    /// An execution of a blocking run function, consumed by a mode such as
    /// [`execute`](Execution::execute).
    ///
    /// The run may move to a pool thread (THREAD isolation, the default for blocking runs), so
    /// it and its result are `Send + 'static`, as for `std::thread::spawn`: move what it needs
    /// into it (clone an `Arc`d client). A panic in `run` is caught and treated as a FAILURE
    /// with the panic message kept.
    pub fn run<F, T, E>(&self, run: F) -> Execution<'_, C, Blocking<F>, NoFallback>
    where
        F: FnOnce() -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        Execution::new(self, Blocking(run))
    }

    /// An execution of a blocking run function that receives a
    /// [`CancellationToken`](crate::CancellationToken), cancelled when the execution times out
    /// (if `execution.isolation.thread.interruptOnTimeout`, default true) or its queued handle is
    /// cancelled (if `interruptOnFutureCancel`). A run that checks it can stop early; one that
    /// ignores it keeps its permit or pool thread until it returns.
    pub fn run_cancellable<F, T, E>(&self, run: F) -> Execution<'_, C, Cancellable<F>, NoFallback>
    where
        F: FnOnce(crate::CancellationToken) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        Execution::new(self, Cancellable(run))
    }

    /// An execution of an async run, consumed by a mode such as
    /// [`execute_async`](Execution::execute_async). At the timeout the future is dropped
    /// (real cancellation). A future that blocks its thread instead of awaiting
    /// cannot be interrupted: the deadline is noticed at its next `Pending`, and a value it
    /// returns without ever yielding after the deadline is a TIMEOUT.
    ///
    /// Under THREAD isolation the future is spawned on the pool's own runtime, so it and its
    /// result are `Send + 'static`, as for `tokio::spawn`.
    pub fn run_async<Fut, T, E>(&self, run: Fut) -> Execution<'_, C, Async<Fut>, NoFallback>
    where
        Fut: std::future::Future<Output = Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        Execution::new(self, Async(run))
    }

    /// A retryable execution of blocking runs: `make` makes each attempt's run, a
    /// `FnOnce() -> Result<T, E>` as for [`run`](Command::run) (a run cannot be called twice,
    /// and a timed-out attempt may still own its closure on a pool thread). Making a run must
    /// not start it; the first run is made now. Attempts follow `retry.*` (see the
    /// [`retry`](crate::retry) module); with `retry.maxAttempts` at 1 (the default) this is
    /// exactly [`run`](Command::run). A panicking `make` ends the attempts.
    ///
    /// Under SEMAPHORE isolation a blocking `execute()` waits out the delays between attempts
    /// on its own thread, on the registry's clock.
    ///
    /// ```
    /// use hystrix::testing::TestRegistry;
    /// use hystrix::{Command, EventType, IsolationStrategy};
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// let test = TestRegistry::new();
    /// let get = Command::builder("GetUser")
    ///     .group("Users")
    ///     .isolation(IsolationStrategy::Semaphore)
    ///     .property("retry.maxAttempts", 3)
    ///     .property("retry.backoff.initialInMilliseconds", 0)
    ///     .build_in(test.registry())?;
    ///
    /// // Fails twice, then answers.
    /// let calls = Arc::new(AtomicU32::new(0));
    /// let outcome = get
    ///     .run_retryable(move || {
    ///         let calls = Arc::clone(&calls);
    ///         move || match calls.fetch_add(1, Ordering::SeqCst) {
    ///             0 | 1 => Err("busy"),
    ///             _ => Ok("ada"),
    ///         }
    ///     })
    ///     .execute_outcome();
    /// let events = outcome.execution_result().execution_events();
    /// assert_eq!(events.to_string(), "SUCCESS, FAILUREx2, RETRYx2");
    /// assert_eq!(outcome.into_response().unwrap(), "ada");
    /// # Ok::<(), hystrix::ConfigError>(())
    /// ```
    pub fn run_retryable<M, F, T, E>(
        &self,
        make: M,
    ) -> Execution<'_, C, crate::retry::Retrying<M, Blocking<F>>, NoFallback>
    where
        M: FnMut() -> F + Send + 'static,
        F: FnOnce() -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        Execution::new(self, crate::retry::Retrying::new(make, Blocking))
    }

    /// A retryable execution of cancellable blocking runs: as
    /// [`run_retryable`](Command::run_retryable), each run a
    /// `FnOnce(CancellationToken) -> Result<T, E>` as for
    /// [`run_cancellable`](Command::run_cancellable), whose token is cancelled at its
    /// attempt's deadline.
    pub fn run_cancellable_retryable<M, F, T, E>(
        &self,
        make: M,
    ) -> Execution<'_, C, crate::retry::Retrying<M, Cancellable<F>>, NoFallback>
    where
        M: FnMut() -> F + Send + 'static,
        F: FnOnce(crate::CancellationToken) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        Execution::new(self, crate::retry::Retrying::new(make, Cancellable))
    }

    /// A retryable execution of async runs: `make` makes each attempt's future (cold: nothing
    /// runs until the attempt polls it), e.g.
    /// `move || { let client = client.clone(); async move { client.get(id).await } }`.
    /// Otherwise as [`run_retryable`](Command::run_retryable) and
    /// [`run_async`](Command::run_async); the delays between attempts are timers on the
    /// registry's clock.
    ///
    /// ```
    /// use hystrix::testing::TestRegistry;
    /// use hystrix::Command;
    ///
    /// let test = TestRegistry::new();
    /// let get = Command::builder("GetUser")
    ///     .group("Users")
    ///     .property("retry.maxAttempts", 2)
    ///     .property("retry.backoff.initialInMilliseconds", 0)
    ///     .build_in(test.registry())?;
    /// let err = futures::executor::block_on(
    ///     get.run_async_retryable(|| async { Err::<(), _>("down") }).execute_async(),
    /// )
    /// .unwrap_err();
    /// assert_eq!(err.attempts(), 2);
    /// # Ok::<(), hystrix::ConfigError>(())
    /// ```
    pub fn run_async_retryable<M, Fut, T, E>(
        &self,
        make: M,
    ) -> Execution<'_, C, crate::retry::Retrying<M, Async<Fut>>, NoFallback>
    where
        M: FnMut() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        Execution::new(self, crate::retry::Retrying::new(make, Async))
    }

    /// The counts of the command's retry budget now (its own, or the named one it shares), or
    /// `None` before its first retry-enabled execution.
    pub fn retry_budget(&self) -> Option<crate::retry::RetryBudgetCounts> {
        let budget = self.state.retry.budget_if_made()?;
        let props = self.state.properties.load();
        Some(budget.counts(
            self.state.env.clock.now_ms(),
            props.retry_budget_percent,
            props.retry_budget_min_per_second,
        ))
    }

    /// An execution of a stream command (Hystrix's `HystrixObservableCommand`): `run` is a
    /// lazy `Stream<Item = Result<T, E>>` whose values are delivered as they come, consumed by
    /// [`to_observable`](StreamExecution::to_observable) (cold) or
    /// [`observe`](StreamExecution::observe) (hot). Each value is an EMIT; the run's end is the
    /// SUCCESS; an error (classified as for any run), panic or timeout after some values leaves
    /// them delivered and is followed by the
    /// [`fallback_stream`](StreamExecution::fallback_stream)'s values, or one final `Err`.
    ///
    /// The timeout (`execution.isolation.thread.timeoutInMilliseconds`, or
    /// [`StreamExecution::timeout`]) bounds the time to the first value, as in Hystrix; an
    /// [`idle_timeout`](StreamExecution::idle_timeout) may bound the gaps after it. Isolation
    /// is SEMAPHORE unless THREAD is set explicitly: the permit is held until
    /// the run stream ends. Under THREAD the stream is driven on the pool's own runtime, so it
    /// and its items are `Send + 'static`, as for `tokio::spawn`; it runs at most
    /// [`STREAM_BUFFER_CAPACITY`] values ahead of its consumer. Both timeouts measure the run,
    /// not the consumer (see [`StreamExecution`'s "Timeouts"](StreamExecution#timeouts)).
    ///
    /// ```
    /// use futures::StreamExt;
    /// use hystrix::{Command, HystrixError, Registry};
    ///
    /// let registry = Registry::new();
    /// let prices = Command::builder("Prices").group("Market").build_in(&registry)?;
    ///
    /// let ticks = futures::stream::iter([Ok(101), Ok(102), Err("feed lost")]);
    /// let items: Vec<_> = futures::executor::block_on(
    ///     prices
    ///         .run_stream(ticks)
    ///         .fallback_stream(|_err: &HystrixError<&str>| {
    ///             futures::stream::iter([Ok::<_, std::convert::Infallible>(100)])
    ///         })
    ///         .to_observable()
    ///         .collect(),
    /// );
    /// // The run's values, then the fallback's: [EMITx2, FAILURE, FALLBACK_EMIT, FALLBACK_SUCCESS].
    /// let values: Vec<i32> = items.into_iter().map(Result::unwrap).collect();
    /// assert_eq!(values, [101, 102, 100]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run_stream<S, T, E>(&self, run: S) -> StreamExecution<'_, C, S, NoFallback>
    where
        S: futures_core::Stream<Item = Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        StreamExecution::new(self, run)
    }

    pub(crate) fn state_arc(&self) -> &Arc<CommandState> {
        &self.state
    }

    pub(crate) fn classifier(&self) -> &C {
        &self.classifier
    }

    /// The shared state and the classifier, for an execution that owns them.
    #[cfg(feature = "tower")]
    pub(crate) fn into_parts(self) -> (Arc<CommandState>, C) {
        (self.state, self.classifier)
    }

    /// The same command with its classifier wrapped by `f`.
    #[cfg(all(feature = "tower", feature = "http"))]
    pub(crate) fn map_classifier<C2>(self, f: impl FnOnce(C) -> C2) -> Command<C2> {
        Command {
            state: self.state,
            classifier: f(self.classifier),
        }
    }
}

/// Builds a [`Command`]: keys, properties given in code, and the error classifier.
///
/// Property values given here sit at Hystrix's "instance default from code" level: they hide the
/// dynamic global default (`hystrix.command.default.*`) and are overridden only by the dynamic
/// per-key value (`hystrix.command.<Key>.*`). Invalid values are reported by
/// [`build`](CommandBuilder::build) with the property's full name.
#[must_use = "a builder does nothing until built"]
pub struct CommandBuilder<C = AllFailures> {
    key: String,
    group: Option<String>,
    thread_pool_key: Option<String>,
    layer: CommandLayer,
    pool_layer: ThreadPoolLayer,
    error: Option<ConfigError>,
    classifier: C,
    breaker: BreakerSpec,
    retry_backoff: Option<crate::retry::BackoffFn>,
}

impl<C> fmt::Debug for CommandBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandBuilder")
            .field("key", &self.key)
            .field("group", &self.group)
            .field("thread_pool_key", &self.thread_pool_key)
            .field("layer", &self.layer)
            .finish_non_exhaustive()
    }
}

impl<C> CommandBuilder<C> {
    /// The group key (required, as in Hystrix): groups commands for reporting and is the default
    /// thread-pool key.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// The thread-pool key (default: the group's name).
    pub fn thread_pool_key(mut self, key: impl Into<String>) -> Self {
        self.thread_pool_key = Some(key.into());
        self
    }

    /// Sets a property by its Hystrix name (without the `hystrix.command.<Key>.` prefix), e.g.
    /// `.property("circuitBreaker.errorThresholdPercentage", 40)`. Strings are parsed.
    /// An unknown name or invalid value makes [`build`](CommandBuilder::build) fail.
    pub fn property(mut self, name: &str, value: impl Into<PropertyValue>) -> Self {
        let value = value.into();
        let outcome = self.layer.set(name, &value, true);
        self.note(outcome, "command", name, &value);
        self
    }

    /// Sets a property of the command's thread pool by its Hystrix name (without the
    /// `hystrix.threadpool.<Key>.` prefix), e.g. `.thread_pool_property("coreSize", 4)`, as
    /// Hystrix's `andThreadPoolPropertiesDefaults`. Commands sharing a pool share these values
    /// (different values conflict at build).
    pub fn thread_pool_property(mut self, name: &str, value: impl Into<PropertyValue>) -> Self {
        let value = value.into();
        let outcome = self.pool_layer.set(name, &value, true);
        self.note(outcome, "threadpool", name, &value);
        self
    }

    /// `coreSize` of the command's thread pool (default 10 threads).
    pub fn thread_pool_core_size(self, threads: u32) -> Self {
        self.thread_pool_property("coreSize", threads)
    }

    /// `maxQueueSize` of the command's thread pool (default -1: no queue, hand-off).
    pub fn thread_pool_max_queue_size(self, size: i32) -> Self {
        self.thread_pool_property("maxQueueSize", size)
    }

    /// Keeps the first error of a builder value, to report at build.
    fn note(
        &mut self,
        outcome: Result<(), LayerError>,
        kind: &str,
        name: &str,
        value: &PropertyValue,
    ) {
        if self.error.is_some() {
            return;
        }
        let owner = match kind {
            "threadpool" => self
                .thread_pool_key
                .as_deref()
                .or(self.group.as_deref())
                .unwrap_or("<pool>"),
            _ => &self.key,
        };
        let full_name = format!("hystrix.{kind}.{owner}.{name}");
        self.error = match outcome {
            // Builder values are per key, so every property may be set here.
            Ok(()) | Err(LayerError::InstanceOnly) => None,
            Err(err) => Some(crate::config::layer_error(err, &full_name, value)),
        };
    }

    /// `execution.isolation.strategy`: THREAD or SEMAPHORE (default: THREAD for blocking runs,
    /// SEMAPHORE for async and stream runs).
    pub fn isolation(self, strategy: IsolationStrategy) -> Self {
        self.property("execution.isolation.strategy", strategy.name())
    }

    /// `execution.isolation.thread.timeoutInMilliseconds` (default 1000 ms); rounded up to whole
    /// milliseconds, at least 1.
    pub fn timeout(self, timeout: Duration) -> Self {
        self.property("execution.isolation.thread.timeoutInMilliseconds", timeout)
    }

    /// `execution.timeout.enabled` (default true).
    pub fn timeout_enabled(self, enabled: bool) -> Self {
        self.property("execution.timeout.enabled", enabled)
    }

    /// `execution.isolation.semaphore.maxConcurrentRequests` (default 10; 0 rejects all).
    pub fn semaphore_max_concurrent_requests(self, permits: u32) -> Self {
        self.property(
            "execution.isolation.semaphore.maxConcurrentRequests",
            permits,
        )
    }

    /// `fallback.isolation.semaphore.maxConcurrentRequests` (default 10; 0 rejects all).
    pub fn fallback_semaphore_max_concurrent_requests(self, permits: u32) -> Self {
        self.property(
            "fallback.isolation.semaphore.maxConcurrentRequests",
            permits,
        )
    }

    /// `fallback.enabled` (default true).
    pub fn fallback_enabled(self, enabled: bool) -> Self {
        self.property("fallback.enabled", enabled)
    }

    /// `circuitBreaker.enabled` (default true).
    pub fn circuit_breaker_enabled(self, enabled: bool) -> Self {
        self.property("circuitBreaker.enabled", enabled)
    }

    /// `circuitBreaker.requestVolumeThreshold` (default 20 requests).
    pub fn circuit_breaker_request_volume_threshold(self, requests: u32) -> Self {
        self.property("circuitBreaker.requestVolumeThreshold", requests)
    }

    /// `circuitBreaker.errorThresholdPercentage` (default 50, percent 0-100).
    pub fn circuit_breaker_error_threshold_percentage(self, percent: u32) -> Self {
        self.property("circuitBreaker.errorThresholdPercentage", percent)
    }

    /// `circuitBreaker.sleepWindowInMilliseconds` (default 5000 ms).
    pub fn circuit_breaker_sleep_window(self, window: Duration) -> Self {
        self.property("circuitBreaker.sleepWindowInMilliseconds", window)
    }

    /// How long the breaker stays open at each opening (default [`Backoff::constant`]: the
    /// sleep window, as Hystrix). Like the extras below, it is fixed by the key's first
    /// definition in a registry: a later definition may leave the extras out (it shares the
    /// first one's), but one that asks for different ones fails with
    /// [`ConfigError::ConflictingDefinition`].
    pub fn open_backoff(mut self, backoff: Backoff) -> Self {
        self.breaker.backoff = backoff;
        self
    }

    /// A health probe the open breaker calls at an interval; a healthy answer moves it to
    /// HALF_OPEN at once (see [`HealthProbe`]). None by default.
    pub fn health_probe(mut self, probe: HealthProbe) -> Self {
        self.breaker.probe = Some(probe);
        self
    }

    /// Journals short-circuited calls that carry a description
    /// ([`Execution::journal`](crate::Execution::journal)) and hands them to the replay
    /// function after the breaker closes, oldest first, at a bounded rate (see
    /// [`JournalConfig`]). Off by default.
    pub fn journal(mut self, journal: JournalConfig) -> Self {
        self.breaker.journal = Some(journal);
        self
    }

    /// Takes part in the registry's shared state store (see
    /// [`RegistryBuilder::state_store`](crate::RegistryBuilder::state_store)). Off by default;
    /// building fails with [`ConfigError::InvalidValue`] if the registry has no store, and if
    /// `circuitBreaker.window.type` is `COUNT` or `CONSECUTIVE` (the store's payload carries a
    /// TIME window's counts only).
    pub fn shared_state(mut self, shared: bool) -> Self {
        self.breaker.shared = shared;
        self
    }

    /// One breaker per key (host, shard, tenant...) besides the command's own: a call that
    /// names a key with [`Execution::breaker_key`](crate::Execution::breaker_key) is admitted
    /// and judged by that key's breaker alone, made CLOSED on first use, with its own health
    /// window (as the command's: `metrics.rollingStats.timeInMilliseconds` in buckets of
    /// `metrics.healthSnapshot.intervalInMilliseconds`) and the command's breaker properties
    /// and backoff. Metrics, bulkhead, timeout and fallback stay the command's. Probes, the
    /// journal and the shared store apply to the command's own breaker only (calls through
    /// keyed breakers are not journalled).
    ///
    /// Memory is bounded: at most `max_keys` breakers are kept (an idle one takes under 512
    /// bytes), plus one overflow breaker. Each keyed breaker keeps its own window of the
    /// command's `circuitBreaker.window.type`; building fails with
    /// [`ConfigError::InvalidValue`] for a COUNT `circuitBreaker.window.size` over 200. An evicted key starts CLOSED again, so a sick key is
    /// never forgotten early:
    ///
    /// - An OPEN or HALF_OPEN breaker is never evicted before its open period (the sleep
    ///   window, grown by the [`open_backoff`](Self::open_backoff) or a
    ///   [`Class::TripNow`] minimum such as a Retry-After) and its trial (at most max(sleep
    ///   window, timeout) after it started) have ended.
    /// - To make room for a new key, the least recently used CLOSED breaker is evicted; only
    ///   when none is CLOSED, the least recently used one whose open period and trial have
    ///   ended.
    /// - Keys unused for longer than `idle` are evicted, except such OPEN or HALF_OPEN ones,
    ///   which go once idle and past their open period and trial.
    /// - When every breaker kept is OPEN or HALF_OPEN within its open period or trial, a new
    ///   key is not kept and evicts nothing: its calls go through the command's **overflow
    ///   breaker**, one breaker shared by all such keys (with its own health window; its key is
    ///   [`OVERFLOW_BREAKER_KEY`](crate::circuit::OVERFLOW_BREAKER_KEY), and a warning is
    ///   logged once per such episode). A healthy new host is served, a sick one trips the
    ///   overflow breaker, and as soon as a breaker closes or its open period ends, new keys
    ///   get breakers of their own again.
    ///
    /// A call through a keyed breaker costs a short lock and a hash lookup; the OPEN and
    /// HALF_OPEN breakers are looked through only when one of them may have become evictable
    /// (its open period or trial ended, or it closed).
    pub fn breaker_per_key(
        mut self,
        max_keys: std::num::NonZeroUsize,
        idle: Option<Duration>,
    ) -> Self {
        self.breaker.keyed = Some((max_keys, idle.map(crate::config::ceil_millis)));
        self
    }

    /// Sets how the run's errors of type `E` count: [`Class::Failure`] (the
    /// default), [`Class::BadRequest`] or [`Class::Ignored`]. Runs of the built command must
    /// then return `Result<_, E>`.
    ///
    /// ```
    /// use hystrix::{Class, Command, FailureType, IsolationStrategy, Registry};
    ///
    /// #[derive(Debug)]
    /// struct HttpError(u16);
    ///
    /// let registry = Registry::new();
    /// let get = Command::builder("GetItem")
    ///     .group("Catalog")
    ///     .isolation(IsolationStrategy::Semaphore)
    ///     .classify(|e: &HttpError| if e.0 == 404 { Class::Ignored } else { Class::Failure })
    ///     .build_in(&registry)?;
    /// let err = get.run(|| Err::<(), _>(HttpError(404))).execute().unwrap_err();
    /// assert_eq!(err.failure_type(), FailureType::Ignored);
    /// # Ok::<(), hystrix::ConfigError>(())
    /// ```
    pub fn classify<E, F>(self, classify: F) -> CommandBuilder<Classifier<E>>
    where
        C: Classify<E>,
        F: Fn(&E) -> Class + Send + Sync + 'static,
    {
        let retry_answers = self.classifier.retry_answers();
        CommandBuilder {
            key: self.key,
            group: self.group,
            thread_pool_key: self.thread_pool_key,
            layer: self.layer,
            pool_layer: self.pool_layer,
            error: self.error,
            classifier: Classifier(Arc::new(classify), retry_answers),
            breaker: self.breaker,
            retry_backoff: self.retry_backoff,
        }
    }

    /// Sets how the command's errors answer the retry question: whether an attempt that
    /// failed with the error may be retried, and not before when (e.g. `Retry-After`; see
    /// [`http::classify_status`](crate::http::classify_status)). Used by retryable runs
    /// ([`Command::run_retryable`] and the like) when `retry.maxAttempts` is over 1. Without
    /// [`classify`](CommandBuilder::classify), every error is a [`Class::Failure`].
    ///
    /// ```
    /// use hystrix::retry::RetryAnswer;
    /// use hystrix::testing::TestRegistry;
    /// use hystrix::{Command, IsolationStrategy};
    ///
    /// #[derive(Debug)]
    /// enum ApiError { Unavailable, Invalid }
    ///
    /// let test = TestRegistry::new();
    /// let get = Command::builder("GetItem")
    ///     .group("Catalog")
    ///     .isolation(IsolationStrategy::Semaphore)
    ///     .property("retry.maxAttempts", 3)
    ///     .property("retry.backoff.initialInMilliseconds", 0)
    ///     .classify_retry(|e: &ApiError| match e {
    ///         ApiError::Unavailable => RetryAnswer::retry(),
    ///         ApiError::Invalid => RetryAnswer::never(),
    ///     })
    ///     .build_in(test.registry())?;
    /// let err = get
    ///     .run_retryable(|| || Err::<(), _>(ApiError::Invalid))
    ///     .execute()
    ///     .unwrap_err();
    /// assert_eq!(err.attempts(), 1);
    /// let err = get
    ///     .run_retryable(|| || Err::<(), _>(ApiError::Unavailable))
    ///     .execute()
    ///     .unwrap_err();
    /// assert_eq!(err.attempts(), 3);
    /// # Ok::<(), hystrix::ConfigError>(())
    /// ```
    pub fn classify_retry<E, F>(self, retry: F) -> CommandBuilder<Classifier<E>>
    where
        C: Classify<E> + Send + Sync + 'static,
        F: Fn(&E) -> crate::retry::RetryAnswer + Send + Sync + 'static,
    {
        let class = self.classifier;
        CommandBuilder {
            key: self.key,
            group: self.group,
            thread_pool_key: self.thread_pool_key,
            layer: self.layer,
            pool_layer: self.pool_layer,
            error: self.error,
            classifier: Classifier(
                Arc::new(move |error: &E| class.classify(error)),
                Some(Arc::new(retry)),
            ),
            breaker: self.breaker,
            retry_backoff: self.retry_backoff,
        }
    }

    /// Replaces the retry delays of the `retry.backoff.*` properties with `delay`, called
    /// with the number of the retry (1 for the first) and the previous delay
    /// ([`Duration::ZERO`] before the first); it returns the delay before that retry. A
    /// minimum delay from the error's [`RetryAnswer`](crate::retry::RetryAnswer) still
    /// applies. A panicking function counts as no delay.
    ///
    /// The function belongs to the key's state: only the first definition of the key in a
    /// registry may give one (a later definition that gives one fails with
    /// [`ConfigError::ConflictingDefinition`]; clone the [`Command`] instead).
    pub fn retry_backoff(
        mut self,
        delay: impl Fn(u32, Duration) -> Duration + Send + Sync + 'static,
    ) -> Self {
        self.retry_backoff = Some(Arc::new(delay));
        self
    }

    /// Builds the definition in the [global registry](Registry::global).
    ///
    /// # Errors
    /// As [`build_in`](CommandBuilder::build_in).
    pub fn build(self) -> Result<Command<C>, ConfigError> {
        self.build_in(Registry::global())
    }

    /// Builds the definition in `registry`, creating the key's state on first definition.
    ///
    /// # Errors
    /// - [`ConfigError::InvalidKey`] for an empty or reserved key;
    /// - [`ConfigError::MissingGroupKey`] without a group;
    /// - [`ConfigError::UnknownProperty`] / [`ConfigError::InvalidValue`] for a bad property,
    ///   named in full;
    /// - [`ConfigError::ConflictingDefinition`] if the key already exists here with a different
    ///   group, thread-pool key or property value.
    pub fn build_in(self, registry: &Registry) -> Result<Command<C>, ConfigError> {
        let key = CommandKey::new(&self.key)?;
        if let Some(err) = self.error {
            return Err(err);
        }
        let group = match &self.group {
            Some(group) => GroupKey::new(group)?,
            None => {
                return Err(ConfigError::MissingGroupKey {
                    key: self.key.clone(),
                });
            }
        };
        let thread_pool_key = self.thread_pool_key.map(ThreadPoolKey::new).transpose()?;
        let state = registry.command_state(
            key,
            group,
            thread_pool_key,
            self.layer,
            self.pool_layer,
            self.breaker,
        )?;
        if let Some(backoff) = self.retry_backoff
            && state.retry.backoff.set(backoff).is_err()
        {
            return Err(ConfigError::ConflictingDefinition {
                key: self.key,
                what: "retry backoff function".into(),
                existing: "a function given by an earlier definition".into(),
                requested: "another function (clone the Command instead of defining it again)"
                    .into(),
            });
        }
        Ok(Command {
            state,
            classifier: self.classifier,
        })
    }
}
