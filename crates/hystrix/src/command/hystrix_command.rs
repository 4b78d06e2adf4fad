//! Hystrix's subclass style: a command as a type implementing a trait.

use std::future::{Future, Ready, ready};
use std::sync::Arc;

use crate::command::cached::{CachedFuture, CachedResponse};
use crate::command::execution::{AsyncFallback, BlockingFallback, execute_blocking};
use crate::command::future::{ExecuteAsyncOutcome, StateRef};
use crate::command::handle::{Observed, QueuedExecution};
use crate::command::pipeline::CallOptions;
use crate::command::pipeline::block_on;
use crate::command::run::sealed::Sealed;
use crate::command::run::{Async, Blocking};
use crate::command::{Class, Classify, Command, Outcome};
use crate::context::{CachedOutcome, SharedResponse};
use crate::error::{BoxError, HystrixError};

/// A command in Hystrix's subclass style: a value holding its arguments, whose `run` calls the
/// dependency and whose optional `fallback`, `classify` and `cache_key` refine it. It executes
/// through the same pipeline as [`Command::run`].
///
/// `run` and `fallback` take `&self`, so a fallback can read the command's fields after the run,
/// as Hystrix's `getFallback()` does. Under THREAD isolation (the default) `run` is called on a
/// pool thread, so the type is `Send + Sync + 'static`.
///
/// ```
/// use hystrix::{BoxError, Command, HystrixCommand, HystrixError, Registry};
///
/// struct GetGreeting {
///     command: Command,
///     name: String,
/// }
///
/// impl HystrixCommand for GetGreeting {
///     type Response = String;
///     type Error = std::io::Error;
///
///     fn command(&self) -> &Command {
///         &self.command
///     }
///
///     fn run(&self) -> Result<String, std::io::Error> {
///         Err(std::io::Error::other("greeting service down"))
///     }
///
///     fn fallback(&self, _error: &HystrixError<std::io::Error>) -> Option<Result<String, BoxError>> {
///         Some(Ok(format!("Hello, {}!", self.name)))
///     }
/// }
///
/// let registry = Registry::new();
/// let command = Command::builder("GetGreeting").group("Greetings").build_in(&registry)?;
/// let greeting = GetGreeting { command, name: "Ada".into() }.execute()?;
/// assert_eq!(greeting, "Hello, Ada!");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait HystrixCommand: Sized + Send + Sync + 'static {
    /// The value a successful run (or fallback) returns.
    type Response: Send + 'static;
    /// The run's error type.
    type Error: Send + 'static;

    /// The definition this command executes under (keys, properties, shared state). Its own
    /// classifier is not used: the trait's [`classify`](HystrixCommand::classify) decides.
    fn command(&self) -> &Command;

    /// Calls the dependency (Hystrix's `run()`). A panic is caught and counts as a failure.
    fn run(&self) -> Result<Self::Response, Self::Error>;

    /// The fallback (Hystrix's `getFallback()`): `None` (the default) means there is none
    /// (FALLBACK_MISSING). Called on failure, timeout, short-circuit and rejection.
    fn fallback(
        &self,
        error: &HystrixError<Self::Error>,
    ) -> Option<Result<Self::Response, BoxError>> {
        let _ = error;
        None
    }

    /// How a run error counts (default: [`Class::Failure`]).
    fn classify(&self, error: &Self::Error) -> Class {
        let _ = error;
        Class::Failure
    }

    /// The request-cache key (Hystrix's `getCacheKey()`; default none), used by
    /// [`execute_cached`](HystrixCommand::execute_cached) (the other modes return an owned
    /// response and do not use the cache).
    fn cache_key(&self) -> Option<String> {
        None
    }

    /// Executes through the request cache under [`cache_key`](HystrixCommand::cache_key), as
    /// [`CachedExecution::execute`](crate::command::CachedExecution::execute); without a cache
    /// key, as [`execute`](HystrixCommand::execute) with the response behind `Arc`.
    ///
    /// # Errors
    /// As [`execute`](HystrixCommand::execute), shared;
    /// [`FailureType::NoRequestContext`](crate::FailureType::NoRequestContext) with a cache key
    /// and no request context current.
    fn execute_cached(self) -> SharedResponse<Self::Response, Self::Error>
    where
        Self::Response: Sync,
        Self::Error: Sync,
    {
        self.execute_cached_outcome().into_response()
    }

    /// As [`execute_cached`](HystrixCommand::execute_cached), also returning the execution
    /// result.
    fn execute_cached_outcome(self) -> CachedOutcome<Self::Response, Self::Error>
    where
        Self::Response: Sync,
        Self::Error: Sync,
    {
        let state = Arc::clone(self.command().state_arc());
        let cache_key = self.cache_key();
        block_on(CachedFuture::new(state, cache_key, async move {
            self.execute_outcome()
        }))
    }

    /// Executes and waits; see [`Execution::execute`](crate::Execution::execute).
    ///
    /// # Errors
    /// A [`HystrixError`] when neither the run nor the fallback produced a value.
    fn execute(self) -> Result<Self::Response, HystrixError<Self::Error>> {
        self.execute_outcome().into_response()
    }

    /// As [`execute`](HystrixCommand::execute), also returning the execution result.
    fn execute_outcome(self) -> Outcome<Self::Response, Self::Error> {
        let (state, this, options) = prepare(self);
        let run = Blocking({
            let this = Arc::clone(&this);
            move || this.run()
        });
        execute_blocking(
            &state,
            &ByTrait(Arc::clone(&this)),
            run,
            ByTrait(this),
            options,
        )
    }

    /// Starts it now and returns a handle; see [`Execution::queue`](crate::Execution::queue).
    fn queue(self) -> QueuedExecution<Self::Response, Self::Error> {
        let (state, this, options) = prepare(self);
        let run = Blocking({
            let this = Arc::clone(&this);
            move || this.run()
        });
        QueuedExecution::start(
            state,
            ByTrait(Arc::clone(&this)),
            run,
            ByTrait(this),
            options,
        )
    }

    /// Starts it now and returns a one-item stream; see
    /// [`Execution::observe`](crate::Execution::observe).
    fn observe(self) -> Observed<Self::Response, Self::Error> {
        Observed::new(self.queue())
    }
}

/// The async form of [`HystrixCommand`]: `run` returns a future. SEMAPHORE isolation by default
/// (polled in the awaiting task); under THREAD the future is spawned on the pool's runtime, so
/// it must not borrow `self` (clone what it needs into it).
pub trait HystrixAsyncCommand: Sized + Send + Sync + 'static {
    /// The value a successful run (or fallback) returns.
    type Response: Send + 'static;
    /// The run's error type.
    type Error: Send + 'static;

    /// The definition this command executes under.
    fn command(&self) -> &Command;

    /// Calls the dependency. At the timeout the future is dropped.
    fn run(&self) -> impl Future<Output = Result<Self::Response, Self::Error>> + Send + 'static;

    /// The fallback: `None` (the default) means there is none (FALLBACK_MISSING).
    fn fallback(
        &self,
        error: &HystrixError<Self::Error>,
    ) -> Option<Result<Self::Response, BoxError>> {
        let _ = error;
        None
    }

    /// How a run error counts (default: [`Class::Failure`]).
    fn classify(&self, error: &Self::Error) -> Class {
        let _ = error;
        Class::Failure
    }

    /// The request-cache key (default none), used by
    /// [`execute_cached_async`](HystrixAsyncCommand::execute_cached_async).
    fn cache_key(&self) -> Option<String> {
        None
    }

    /// Executes through the request cache under [`cache_key`](HystrixAsyncCommand::cache_key)
    /// when awaited, as
    /// [`CachedExecution::execute_async`](crate::command::CachedExecution::execute_async);
    /// without a cache key, as [`execute_async`](HystrixAsyncCommand::execute_async) with the
    /// response behind `Arc`.
    fn execute_cached_async(
        self,
    ) -> impl Future<Output = SharedResponse<Self::Response, Self::Error>> + Send
    where
        Self::Response: Sync,
        Self::Error: Sync,
    {
        let state = Arc::clone(self.command().state_arc());
        let cache_key = self.cache_key();
        CachedResponse::new(CachedFuture::detachable(
            state,
            cache_key,
            self.execute_async_outcome(),
        ))
    }

    /// Executes when awaited; see [`Execution::execute_async`](crate::Execution::execute_async)
    /// (cold; dropping it cancels).
    fn execute_async(
        self,
    ) -> impl Future<Output = Result<Self::Response, HystrixError<Self::Error>>> + Send {
        async move { self.execute_async_outcome().await.into_response() }
    }

    /// Starts it now and returns a handle; see [`Execution::queue`](crate::Execution::queue).
    fn queue(self) -> QueuedExecution<Self::Response, Self::Error> {
        let options = CallOptions::default();
        let state = Arc::clone(self.command().state_arc());
        let run = Async(self.run());
        let this = Arc::new(self);
        QueuedExecution::start(
            state,
            ByAsyncTrait(Arc::clone(&this)),
            run,
            ByAsyncTrait(this),
            options,
        )
    }

    /// Starts it now and returns a one-item stream; see
    /// [`Execution::observe`](crate::Execution::observe).
    fn observe(self) -> Observed<Self::Response, Self::Error> {
        Observed::new(self.queue())
    }

    /// As [`execute_async`](HystrixAsyncCommand::execute_async), also returning the execution
    /// result.
    fn execute_async_outcome(
        self,
    ) -> impl Future<Output = Outcome<Self::Response, Self::Error>> + Send {
        async move {
            let options = CallOptions::default();
            let state = Arc::clone(self.command().state_arc());
            let run = Async(self.run());
            let this = Arc::new(self);
            ExecuteAsyncOutcome::new(
                StateRef::Borrowed(&state),
                ByAsyncTrait(Arc::clone(&this)),
                run,
                ByAsyncTrait(this),
                options,
            )
            .await
        }
    }
}

/// The command's state, the command shared for the run and fallback, and its options.
fn prepare<H: HystrixCommand>(
    command: H,
) -> (Arc<crate::registry::CommandState>, Arc<H>, CallOptions) {
    let state = Arc::clone(command.command().state_arc());
    let options = CallOptions::default();
    (state, Arc::new(command), options)
}

/// Adapts a trait-style command's `classify` and `fallback` to the pipeline.
struct ByTrait<H>(Arc<H>);

impl<H: HystrixCommand> Classify<H::Error> for ByTrait<H> {
    fn classify(&self, error: &H::Error) -> Class {
        HystrixCommand::classify(&*self.0, error)
    }
}

impl<H> Sealed for ByTrait<H> {}

impl<H: HystrixCommand> BlockingFallback<H::Response, H::Error> for ByTrait<H> {
    fn is_present(&self) -> bool {
        true
    }
    fn call(self, error: &HystrixError<H::Error>) -> Option<Result<H::Response, BoxError>> {
        HystrixCommand::fallback(&*self.0, error)
    }
}

impl<H: HystrixCommand> AsyncFallback<H::Response, H::Error> for ByTrait<H> {
    type Error = BoxError;
    type Future = Ready<Result<H::Response, BoxError>>;
    fn is_present(&self) -> bool {
        true
    }
    fn call(self, error: &HystrixError<H::Error>) -> Option<Self::Future> {
        HystrixCommand::fallback(&*self.0, error).map(ready)
    }
}

/// The async trait's adapter (a distinct type, so both traits can be implemented by one type).
struct ByAsyncTrait<H>(Arc<H>);

impl<H: HystrixAsyncCommand> Classify<H::Error> for ByAsyncTrait<H> {
    fn classify(&self, error: &H::Error) -> Class {
        HystrixAsyncCommand::classify(&*self.0, error)
    }
}

impl<H> Sealed for ByAsyncTrait<H> {}

impl<H: HystrixAsyncCommand> AsyncFallback<H::Response, H::Error> for ByAsyncTrait<H> {
    type Error = BoxError;
    type Future = Ready<Result<H::Response, BoxError>>;
    fn is_present(&self) -> bool {
        true
    }
    fn call(self, error: &HystrixError<H::Error>) -> Option<Self::Future> {
        HystrixAsyncCommand::fallback(&*self.0, error).map(ready)
    }
}
