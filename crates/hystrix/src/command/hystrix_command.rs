//! Hystrix's subclass style: a command as a type implementing a trait.

use std::future::{Future, Ready, ready};

use crate::command::execution::{AsyncFallback, Blocking, BlockingFallback, sealed};
use crate::command::future::ExecuteAsyncOutcome;
use crate::command::pipeline::{self, CallOptions};
use crate::command::{Class, Classify, Command, Outcome};
use crate::error::{BoxError, HystrixError};

/// A command in Hystrix's subclass style: a value holding its arguments, whose `run` calls the
/// dependency and whose optional `fallback`, `classify` and `cache_key` refine it. It executes
/// through the same pipeline as [`Command::run`].
///
/// `run` and `fallback` take `&self`, so a fallback can read the command's fields after the run,
/// as Hystrix's `getFallback()` does.
///
/// ```
/// use hystrix::{Command, HystrixCommand, HystrixError, IsolationStrategy, Registry};
/// use hystrix::BoxError;
///
/// struct GetGreeting<'a> {
///     command: &'a Command,
///     name: String,
/// }
///
/// impl HystrixCommand for GetGreeting<'_> {
///     type Response = String;
///     type Error = std::io::Error;
///
///     fn command(&self) -> &Command {
///         self.command
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
/// let command = Command::builder("GetGreeting")
///     .group("Greetings")
///     .isolation(IsolationStrategy::Semaphore)
///     .build_in(&registry)?;
/// let greeting = GetGreeting { command: &command, name: "Ada".into() }.execute()?;
/// assert_eq!(greeting, "Hello, Ada!");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait HystrixCommand: Sized {
    /// The value a successful run (or fallback) returns.
    type Response;
    /// The run's error type.
    type Error;

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

    /// The request-cache key (Hystrix's `getCacheKey()`; default none).
    fn cache_key(&self) -> Option<String> {
        None
    }

    /// Executes on this thread; see [`Execution::execute`](crate::Execution::execute).
    ///
    /// # Errors
    /// A [`HystrixError`] when neither the run nor the fallback produced a value.
    fn execute(self) -> Result<Self::Response, HystrixError<Self::Error>> {
        self.execute_outcome().into_response()
    }

    /// As [`execute`](HystrixCommand::execute), also returning the execution result.
    fn execute_outcome(self) -> Outcome<Self::Response, Self::Error> {
        let options = CallOptions {
            cache_key: self.cache_key(),
            ..CallOptions::default()
        };
        pipeline::run_blocking(
            self.command().state(),
            &ByTrait(&self),
            Blocking(|| self.run()),
            ByTrait(&self),
            &options,
        )
    }
}

/// The async form of [`HystrixCommand`]: `run` returns a future.
pub trait HystrixAsyncCommand: Sized {
    /// The value a successful run (or fallback) returns.
    type Response;
    /// The run's error type.
    type Error;

    /// The definition this command executes under.
    fn command(&self) -> &Command;

    /// Calls the dependency. At the timeout the future is dropped.
    fn run(&self) -> impl Future<Output = Result<Self::Response, Self::Error>> + Send;

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

    /// The request-cache key (default none).
    fn cache_key(&self) -> Option<String> {
        None
    }

    /// Executes when awaited; see [`Execution::execute_async`](crate::Execution::execute_async)
    /// (cold; dropping it cancels).
    fn execute_async(
        self,
    ) -> impl Future<Output = Result<Self::Response, HystrixError<Self::Error>>> + Send
    where
        Self: Send + Sync,
        Self::Response: Send,
        Self::Error: Send,
    {
        async move { self.execute_async_outcome().await.into_response() }
    }

    /// As [`execute_async`](HystrixAsyncCommand::execute_async), also returning the execution
    /// result.
    fn execute_async_outcome(
        self,
    ) -> impl Future<Output = Outcome<Self::Response, Self::Error>> + Send
    where
        Self: Send + Sync,
        Self::Response: Send,
        Self::Error: Send,
    {
        async move {
            let options = CallOptions {
                cache_key: self.cache_key(),
                ..CallOptions::default()
            };
            let classifier = ByAsyncTrait(&self);
            ExecuteAsyncOutcome::new(
                self.command().state(),
                &classifier,
                self.run(),
                ByAsyncTrait(&self),
                options,
            )
            .await
        }
    }
}

/// Adapts a trait-style command's `classify` and `fallback` to the pipeline.
struct ByTrait<'a, H>(&'a H);

impl<H: HystrixCommand> Classify<H::Error> for ByTrait<'_, H> {
    fn classify(&self, error: &H::Error) -> Class {
        HystrixCommand::classify(self.0, error)
    }
}

impl<H> sealed::Sealed for ByTrait<'_, H> {}

impl<H: HystrixCommand> BlockingFallback<H::Response, H::Error> for ByTrait<'_, H> {
    fn is_present(&self) -> bool {
        true
    }
    fn call(self, error: &HystrixError<H::Error>) -> Option<Result<H::Response, BoxError>> {
        HystrixCommand::fallback(self.0, error)
    }
}

/// The async trait's adapter (a distinct type, so both traits can be implemented by one type).
struct ByAsyncTrait<'a, H>(&'a H);

impl<H: HystrixAsyncCommand> Classify<H::Error> for ByAsyncTrait<'_, H> {
    fn classify(&self, error: &H::Error) -> Class {
        HystrixAsyncCommand::classify(self.0, error)
    }
}

impl<H> sealed::Sealed for ByAsyncTrait<'_, H> {}

impl<H: HystrixAsyncCommand> AsyncFallback<H::Response, H::Error> for ByAsyncTrait<'_, H> {
    type Error = BoxError;
    type Future = Ready<Result<H::Response, BoxError>>;
    fn is_present(&self) -> bool {
        true
    }
    fn call(self, error: &HystrixError<H::Error>) -> Option<Self::Future> {
        HystrixAsyncCommand::fallback(self.0, error).map(ready)
    }
}
