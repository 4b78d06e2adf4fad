//! Commands as tower middleware (feature `tower`, on by default).
//!
//! [`HystrixLayer`] wraps any [`Service`] so that each call is an execution of a command: the
//! circuit breaker, the bulkhead (the command's semaphore, or under THREAD isolation its pool's
//! runtime), the timeout, the fallback, metrics and events all apply, as for
//! [`Command::run_async`](crate::Command::run_async). The command is one for the whole layer
//! ([`HystrixLayer::new`]) or one per request key ([`HystrixLayer::keyed`], e.g. per host or
//! route, each key with its own breaker).
//!
//! Readiness: [`poll_ready`](Service::poll_ready) is always ready and holds nothing; the inner
//! service's readiness is awaited inside the execution, within its permit and its timeout. An
//! open breaker or a full bulkhead refuses the call at once (the future is ready at its first
//! poll) with a typed error, so load is shed as with tower's `LoadShed`.
//!
//! [`RequestContextLayer`] opens a request context per call (for the request cache, the request
//! log and REQUEST-scoped collapsers under it).
//!
//! A known limit of the compiler: `tokio::spawn(async move { svc.oneshot(req).await })` over a
//! `HystrixService` whose inner error is tower's `BoxError` fails to prove the task `Send`
//! ("higher-ranked lifetime error"); call the service with `svc.ready().await?.call(req)` in
//! the task instead (as the tests do), or use a concrete error type.
//!
//! The error is [`HystrixError<E>`] over the inner service's error `E`: match
//! [`failure_type`](HystrixError::failure_type) (short-circuit, rejection, timeout, ...) and
//! read the inner error with [`cause`](HystrixError::cause). It converts into tower's
//! `BoxError` with `?` or `Into`.
//!
//! **Retry** is an explicit opt-in, [`HystrixLayer::retry_with`], because each attempt needs its
//! own copy of the request: a clone hook ([`CloneRequest`], as tower's retry
//! `Policy::clone_request`) says whether a request can be sent again and makes the copies.
//! Without it a call makes one attempt whatever `retry.maxAttempts` says (and a key that sets
//! it logs once that the property is ignored). With it the attempts are the command's own
//! attempt loop: each attempt goes through the breaker, the attempt deadline and the bulkhead,
//! the delays, budget, events and the one fallback are the command's (see the
//! [`retry`](crate::retry) module). A request the hook refuses (`None`) makes one attempt:
//! that is the per-call opt-out. With the `http` feature, `IdempotentHttp` is a ready hook for
//! `http::Request`s: it refuses non-idempotent methods and requests marked [`NoRetry`].
//!
//! **HTTP** (feature `http`): by itself the layer sees errors only, so an `Ok` response with a
//! status of 500 is a success. `classify_http` judges `http::Response`s by their status
//! (5xx, 408 and 429 are failures, a 503 with `Retry-After` opens the breaker at once, other
//! 4xx are bad requests; a failure response no fallback replaced is returned as it came), and
//! `errors_as_responses` answers the layer's own errors with statuses (503, 504, 502), so the
//! service's error is `Infallible` and axum's `Router` takes it as is.
//!
//! **Hedging** takes the same opt-in: with `retry_with`, `hedging.maxAttempts` over 1 races
//! another copy of a slow call's request against it (see the [`hedging`](crate::hedging)
//! module); a request the hook refuses is not hedged either.
//!
//! ```
//! use hystrix::tower::HystrixLayer;
//! use hystrix::{Command, FailureType, IsolationStrategy, Registry};
//! use tower::{Service, ServiceExt, service_fn};
//!
//! # futures::executor::block_on(async {
//! let registry = Registry::new();
//! let command = Command::builder("Echo")
//!     .group("Echo")
//!     .isolation(IsolationStrategy::Semaphore)
//!     .build_in(&registry)?;
//! let echo = service_fn(|name: String| async move {
//!     if name.is_empty() { Err(std::io::Error::other("no name")) } else { Ok(name) }
//! });
//! let mut svc = tower::ServiceBuilder::new()
//!     .layer(HystrixLayer::new(command).fallback_value("anonymous".to_string()))
//!     .service(echo);
//!
//! assert_eq!(svc.ready().await?.call("ada".into()).await?, "ada");
//! // The inner error goes to the fallback.
//! assert_eq!(svc.ready().await?.call(String::new()).await?, "anonymous");
//! # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! # }).unwrap();
//! ```

use std::borrow::Cow;
use std::fmt;
use std::future::{Future, Ready, ready};
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::command::run::Start;
use crate::command::{
    Async, AsyncFallback, CachedFuture, CachedResponse, CallOptions, Classify, Command,
    ExecuteAsync, ExecuteAsyncOutcome, ExecutionFuture, KeyedCommands, NoFallback, OutcomeResponse,
    RunFn, Sealed, StateRef,
};
use crate::context::RequestContext;
use crate::error::{BoxError, HystrixError};
use crate::isolation::priority::Priority;
use crate::isolation::thread_pool::{Rejection, ThreadPool};
use crate::key::CommandKey;
use crate::retry::Again;

#[cfg(feature = "http")]
mod http;
#[cfg(feature = "http")]
pub use http::{
    AlwaysReady, ClassifyHttp, ErrorResponseFuture, ErrorResponses, ErrorResponsesLayer,
    HttpFailure, HttpResponseFuture, HttpService,
};

/// Middleware that runs every call of the wrapped service as an execution of a command.
///
/// `Src` is where the command comes from ([`Command`] or [`ByKey`]); `FB` the fallback
/// ([`NoFallback`], [`FallbackValue`], [`FallbackFn`] or [`FallbackService`]); `Rt` whether
/// calls may be retried ([`OneAttempt`], the default, or [`RetryWith`], see
/// [`retry_with`](HystrixLayer::retry_with)); `Cl` how responses count ([`OkIsSuccess`], the
/// default: every `Ok` response is a success; with the `http` feature `ClassifyHttp`, see
/// `classify_http`).
#[derive(Clone)]
pub struct HystrixLayer<Src, FB = NoFallback, Rt = OneAttempt, Cl = OkIsSuccess> {
    source: Src,
    fallback: FB,
    retry: Rt,
    class: Cl,
}

/// Every `Ok` response of the wrapped service is a success: a layer without `classify_http`
/// (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct OkIsSuccess;

/// How a layer makes the service of each wrapped service: the [`HystrixService`] itself
/// ([`OkIsSuccess`]), or with the `http` feature one that judges the responses' statuses
/// (`ClassifyHttp`).
pub trait LayerResponses<S, Src, FB, Rt> {
    /// The service the layer makes.
    #[doc(hidden)]
    type Service;

    /// The service the layer makes of `service`.
    #[doc(hidden)]
    fn service(service: HystrixService<S, Src, FB, Rt>) -> Self::Service;
}

impl<S, Src, FB, Rt> LayerResponses<S, Src, FB, Rt> for OkIsSuccess {
    type Service = HystrixService<S, Src, FB, Rt>;

    #[inline]
    fn service(service: HystrixService<S, Src, FB, Rt>) -> Self::Service {
        service
    }
}

impl<Src, FB, Rt, Cl> fmt::Debug for HystrixLayer<Src, FB, Rt, Cl> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HystrixLayer").finish_non_exhaustive()
    }
}

impl<C> HystrixLayer<Command<C>> {
    /// Every call is an execution of `command`.
    pub fn new(command: Command<C>) -> Self {
        HystrixLayer {
            source: command,
            fallback: NoFallback,
            retry: OneAttempt,
            class: OkIsSuccess,
        }
    }
}

impl<C, F, Req> HystrixLayer<ByKey<C, F, Req>>
where
    F: for<'r> Fn(&'r Req) -> Cow<'r, str>,
{
    /// Every call is an execution of the command of its request's key: `key_fn` names the key
    /// (a host, a route), borrowed from the request or owned (`host.into()`,
    /// `format!(..).into()`), and `commands` makes and keeps one definition per key, so each
    /// key has its own breaker, bulkhead and metrics. A key that cannot be built (e.g. an empty
    /// name) ends the call in a [`FailureType::Misuse`](crate::FailureType::Misuse) error.
    pub fn keyed(commands: KeyedCommands<C>, key_fn: F) -> Self {
        HystrixLayer {
            source: ByKey {
                commands,
                key_fn,
                _request: PhantomData,
            },
            fallback: NoFallback,
            retry: OneAttempt,
            class: OkIsSuccess,
        }
    }
}

impl<C, FB, Rt, Cl> HystrixLayer<Command<C>, FB, Rt, Cl> {
    /// Each call goes through the keyed breaker that `key_fn` names for its request (a host, a
    /// shard, a tenant; borrowed or owned), so one failing host opens its own breaker while
    /// the others' calls go on; the command must have keyed breakers
    /// ([`CommandBuilder::breaker_per_key`](crate::command::CommandBuilder::breaker_per_key)),
    /// otherwise every call ends in a misuse error. Metrics, bulkhead, timeout and fallback
    /// stay the command's.
    pub fn breaker_key<F, Req>(self, key_fn: F) -> HystrixLayer<BreakerByKey<C, F, Req>, FB, Rt, Cl>
    where
        F: for<'r> Fn(&'r Req) -> Cow<'r, str>,
    {
        HystrixLayer {
            source: BreakerByKey {
                command: self.source,
                key_fn,
                _request: PhantomData,
            },
            fallback: self.fallback,
            retry: self.retry,
            class: self.class,
        }
    }
}

impl<Src, FB, Rt, Cl> HystrixLayer<Src, FB, Rt, Cl> {
    /// Gives each call the [`Priority`] that `priority_fn` reads from its request (a header, a
    /// route, the caller's identity), as [`Execution::priority`](crate::Execution::priority):
    /// under the command's priority reserves
    /// (`execution.isolation.priority.*.reservedPercentage`) SHEDDABLE calls are refused first
    /// and CRITICAL calls last. Call it before [`cache_key`](HystrixLayer::cache_key).
    /// `priority_fn` runs in `Service::call`, on the caller's task: a panic in it reaches the
    /// caller (nothing is taken before it runs).
    ///
    /// ```
    /// use hystrix::tower::HystrixLayer;
    /// use hystrix::testing::TestRegistry;
    /// use hystrix::{Command, IsolationStrategy, Priority};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let test = TestRegistry::new();
    /// let command = Command::builder("Search")
    ///     .group("Catalog")
    ///     .isolation(IsolationStrategy::Semaphore)
    ///     .property("execution.isolation.priority.critical.reservedPercentage", 20)
    ///     .property("execution.isolation.priority.normal.reservedPercentage", 30)
    ///     .build_in(test.registry())?;
    /// // Prefetches are SHEDDABLE, checkouts CRITICAL, the rest NORMAL.
    /// let layer = HystrixLayer::new(command).priority_with(|path: &String| {
    ///     if path.starts_with("/checkout") {
    ///         Priority::Critical
    ///     } else if path.starts_with("/prefetch") {
    ///         Priority::Sheddable
    ///     } else {
    ///         Priority::Normal
    ///     }
    /// });
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn priority_with<F, Req>(
        self,
        priority_fn: F,
    ) -> HystrixLayer<Prioritized<Src, F, Req>, FB, Rt, Cl>
    where
        F: Fn(&Req) -> Priority,
    {
        HystrixLayer {
            source: Prioritized {
                source: self.source,
                priority_fn,
                _request: PhantomData,
            },
            fallback: self.fallback,
            retry: self.retry,
            class: self.class,
        }
    }
}

/// The request cache, for layers whose `Ok` responses are all successes.
impl<Src, FB, Rt> HystrixLayer<Src, FB, Rt> {
    /// Turns on the request cache for the calls: `key_fn` gives a request's cache key
    /// (Hystrix's `getCacheKey()`; `None`: that call is not cached). Within one
    /// [`RequestContext`] current where the call's future is
    /// polled (e.g. opened per incoming request by [`RequestContextLayer`]), the first call of
    /// a key runs and later ones share its outcome (see
    /// [`CachedExecution`](crate::command::CachedExecution)); with no context current a keyed
    /// call ends in [`FailureType::NoRequestContext`](crate::FailureType::NoRequestContext).
    /// The service's response becomes `Arc<S::Response>` and its error
    /// `Arc<HystrixError<S::Error>>`, since one outcome may answer many calls: use it over
    /// services whose responses can be read through a shared reference (a typed client's
    /// values); an HTTP response with a streaming body cannot be shared this way, so cache at
    /// the level of the decoded value instead. With [`retry_with`](HystrixLayer::retry_with)
    /// the execution that runs retries, and its final outcome is what is shared.
    pub fn cache_key<K, Req>(self, key_fn: K) -> CachedLayer<Src, FB, K, Rt>
    where
        K: Fn(&Req) -> Option<String>,
    {
        CachedLayer {
            layer: self,
            key_fn: Arc::new(key_fn),
        }
    }
}

impl<Src, FB, Rt, Cl> HystrixLayer<Src, FB, Rt, Cl> {
    /// On failure (error, timeout, short-circuit, rejection) answer with a clone of `value`.
    pub fn fallback_value<T: Clone>(self, value: T) -> HystrixLayer<Src, FallbackValue<T>, Rt, Cl> {
        HystrixLayer {
            source: self.source,
            fallback: FallbackValue(value),
            retry: self.retry,
            class: self.class,
        }
    }

    /// On failure answer with `f(&error)`; its error becomes the call's FALLBACK_FAILURE.
    pub fn fallback_fn<F>(self, f: F) -> HystrixLayer<Src, FallbackFn<F>, Rt, Cl> {
        HystrixLayer {
            source: self.source,
            fallback: FallbackFn(Arc::new(f)),
            retry: self.retry,
            class: self.class,
        }
    }

    /// On failure send the same request to `service` (a secondary backend, a cache); needs
    /// the request to be `Clone` (it is cloned before each call). Its readiness is awaited
    /// within the fallback.
    pub fn fallback_service<S2>(
        self,
        service: S2,
    ) -> HystrixLayer<Src, FallbackService<S2>, Rt, Cl> {
        HystrixLayer {
            source: self.source,
            fallback: FallbackService(service),
            retry: self.retry,
            class: self.class,
        }
    }

    /// Lets the calls be retried: each call's execution makes up to `retry.maxAttempts`
    /// attempts (the command's property, default 1: no retry), each a call of a fresh clone of
    /// the inner service (the service must be `Clone`) after its readiness, with its own copy
    /// of the request made by `hook` (tower's retry `Policy::clone_request`).
    ///
    /// `hook` is any `Fn(&Req) -> Option<Req>` (or a [`CloneRequest`], such as
    /// `IdempotentHttp` with the `http` feature). It is asked once when the call is made, on
    /// the request: `None` says this request must not be sent twice, and the call makes one
    /// attempt (the per-call opt-out; no RETRY, no warning); `Some(copy)` keeps the copy, and
    /// each later attempt sends `hook(&copy)`. The first attempt sends the request itself. With
    /// `retry.maxAttempts` at 1 when the call is made the hook is not asked at all. A hook
    /// should answer for its copy as it answered for the request: one that refuses (or panics
    /// on) its own copy sends the kept copy itself in that attempt, and no later attempt of
    /// the call reaches the service. For requests that carry extensions, [`NoRetry`] is the
    /// usual way to mark one for the hook (`IdempotentHttp` honours it).
    ///
    /// What is retried, the delays, the retry budget, the attempt and execution deadlines,
    /// the events (`RETRY`, `RETRY_BUDGET_EXHAUSTED`, `FAILUREx2` in the request log) and the
    /// single fallback after the last attempt are the command's attempt loop, exactly as for
    /// [`Command::run_async_retryable`](crate::Command::run_async_retryable): only errors of
    /// the inner service and timeouts are retried (rejections with `retry.onRejection`),
    /// never a short-circuit, and nothing once the breaker is open; the command's
    /// [`classify_retry`](crate::CommandBuilder::classify_retry) answers for the inner
    /// service's errors. Each attempt is one request for the breaker and the metrics.
    ///
    /// Without this opt-in every call makes one attempt whatever `retry.maxAttempts` says (a
    /// key that sets it over 1 logs once that it is ignored).
    ///
    /// The same opt-in lets calls be hedged: with `hedging.maxAttempts` over 1, a call still
    /// running after the hedging delay gets another call of a fresh clone of the service with
    /// `hook(&copy)` beside it, and the first acceptable answer wins (see the
    /// [`hedging`](crate::hedging) module). A request the hook refuses is not hedged.
    ///
    /// ```
    /// use hystrix::context::RequestContext;
    /// use hystrix::testing::TestRegistry;
    /// use hystrix::tower::HystrixLayer;
    /// use hystrix::{Command, IsolationStrategy};
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use tower::{Layer, Service, ServiceExt, service_fn};
    ///
    /// let test = TestRegistry::new();
    /// let command = Command::builder("GetUser")
    ///     .group("Users")
    ///     .isolation(IsolationStrategy::Semaphore)
    ///     .property("retry.maxAttempts", 3)
    ///     .property("retry.backoff.initialInMilliseconds", 0)
    ///     .build_in(test.registry())?;
    /// // A backend that fails twice, then answers.
    /// let calls = Arc::new(AtomicU32::new(0));
    /// let backend = service_fn(move |id: String| {
    ///     let n = calls.fetch_add(1, Ordering::SeqCst);
    ///     async move {
    ///         if n < 2 { Err(std::io::Error::other("busy")) } else { Ok(format!("user {id}")) }
    ///     }
    /// });
    /// let mut svc = HystrixLayer::new(command)
    ///     .retry_with(|id: &String| Some(id.clone()))
    ///     .layer(backend);
    ///
    /// let context = RequestContext::new();
    /// let user = futures::executor::block_on(
    ///     context.scope(async { svc.ready().await?.call("ada".into()).await }),
    /// )?;
    /// assert_eq!(user, "user ada");
    /// assert_eq!(
    ///     context.request_log().to_string(),
    ///     "GetUser[SUCCESS, FAILUREx2, RETRYx2][0ms]"
    /// );
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn retry_with<H>(self, hook: H) -> HystrixLayer<Src, FB, RetryWith<H>, Cl> {
        HystrixLayer {
            source: self.source,
            fallback: self.fallback,
            retry: RetryWith(Arc::new(hook)),
            class: self.class,
        }
    }
}

impl<S, Src: Clone, FB: Clone, Rt: Clone, Cl> Layer<S> for HystrixLayer<Src, FB, Rt, Cl>
where
    Cl: LayerResponses<S, Src, FB, Rt>,
{
    type Service = Cl::Service;

    fn layer(&self, inner: S) -> Self::Service {
        Cl::service(HystrixService {
            inner,
            source: self.source.clone(),
            fallback: self.fallback.clone(),
            retry: self.retry.clone(),
        })
    }
}

/// A service whose calls are executions of a command; made by [`HystrixLayer`].
#[derive(Clone)]
pub struct HystrixService<S, Src, FB = NoFallback, Rt = OneAttempt> {
    inner: S,
    source: Src,
    fallback: FB,
    retry: Rt,
}

impl<S, Src, FB, Rt> fmt::Debug for HystrixService<S, Src, FB, Rt> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HystrixService").finish_non_exhaustive()
    }
}

impl<S, Src, FB, Rt> HystrixService<S, Src, FB, Rt> {
    /// Lets the calls be retried, with `hook` making each attempt's copy of the request: as
    /// [`HystrixLayer::retry_with`].
    pub fn retry_with<H>(self, hook: H) -> HystrixService<S, Src, FB, RetryWith<H>> {
        HystrixService {
            inner: self.inner,
            source: self.source,
            fallback: self.fallback,
            retry: RetryWith(Arc::new(hook)),
        }
    }
}

/// Where a call's command comes from.
pub trait CommandSource<Req>: Clone {
    /// The command's error classifier.
    type Classifier;

    /// The command for `request`.
    ///
    /// # Errors
    /// The key's text and why no command could be made for it.
    #[doc(hidden)]
    fn command_for(&self, request: &Req) -> Result<Command<Self::Classifier>, (String, String)>;

    /// The keyed breaker the call of `request` goes through, if any.
    #[doc(hidden)]
    #[inline]
    fn breaker_key_for(&self, _request: &Req) -> Option<Arc<str>> {
        None
    }

    /// The priority of the call of `request`.
    #[doc(hidden)]
    #[inline]
    fn priority_for(&self, _request: &Req) -> Priority {
        Priority::Normal
    }
}

/// The calls of another source, each with the priority its request gives (see
/// [`HystrixLayer::priority_with`]).
pub struct Prioritized<Src, F, Req> {
    source: Src,
    priority_fn: F,
    _request: PhantomData<fn(&Req)>,
}

impl<Src: Clone, F: Clone, Req> Clone for Prioritized<Src, F, Req> {
    fn clone(&self) -> Self {
        Prioritized {
            source: self.source.clone(),
            priority_fn: self.priority_fn.clone(),
            _request: PhantomData,
        }
    }
}

impl<Src: fmt::Debug, F, Req> fmt::Debug for Prioritized<Src, F, Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prioritized")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl<Src, F, Req> CommandSource<Req> for Prioritized<Src, F, Req>
where
    Src: CommandSource<Req>,
    F: Fn(&Req) -> Priority + Clone,
{
    type Classifier = Src::Classifier;

    #[inline]
    fn command_for(&self, request: &Req) -> Result<Command<Self::Classifier>, (String, String)> {
        self.source.command_for(request)
    }

    #[inline]
    fn breaker_key_for(&self, request: &Req) -> Option<Arc<str>> {
        self.source.breaker_key_for(request)
    }

    #[inline]
    fn priority_for(&self, request: &Req) -> Priority {
        (self.priority_fn)(request)
    }
}

impl<C: Clone, Req> CommandSource<Req> for Command<C> {
    type Classifier = C;

    #[inline]
    fn command_for(&self, _request: &Req) -> Result<Command<C>, (String, String)> {
        Ok(self.clone())
    }
}

/// A command per request key (see [`HystrixLayer::keyed`]).
pub struct ByKey<C, F, Req> {
    commands: KeyedCommands<C>,
    key_fn: F,
    _request: PhantomData<fn(&Req)>,
}

impl<C, F: Clone, Req> Clone for ByKey<C, F, Req> {
    fn clone(&self) -> Self {
        ByKey {
            commands: self.commands.clone(),
            key_fn: self.key_fn.clone(),
            _request: PhantomData,
        }
    }
}

impl<C, F, Req> fmt::Debug for ByKey<C, F, Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ByKey")
            .field("commands", &self.commands)
            .finish_non_exhaustive()
    }
}

impl<C, F, Req> CommandSource<Req> for ByKey<C, F, Req>
where
    C: Clone,
    F: for<'r> Fn(&'r Req) -> Cow<'r, str> + Clone,
{
    type Classifier = C;

    fn command_for(&self, request: &Req) -> Result<Command<C>, (String, String)> {
        let key = (self.key_fn)(request);
        self.commands
            .get(&key)
            .map_err(|err| (key.into_owned(), err.to_string()))
    }
}

/// One command, with a keyed breaker per request key (see [`HystrixLayer::breaker_key`]).
pub struct BreakerByKey<C, F, Req> {
    command: Command<C>,
    key_fn: F,
    _request: PhantomData<fn(&Req)>,
}

impl<C: Clone, F: Clone, Req> Clone for BreakerByKey<C, F, Req> {
    fn clone(&self) -> Self {
        BreakerByKey {
            command: self.command.clone(),
            key_fn: self.key_fn.clone(),
            _request: PhantomData,
        }
    }
}

impl<C, F, Req> fmt::Debug for BreakerByKey<C, F, Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerByKey")
            .field("command", &self.command)
            .finish_non_exhaustive()
    }
}

impl<C, F, Req> CommandSource<Req> for BreakerByKey<C, F, Req>
where
    C: Clone,
    F: for<'r> Fn(&'r Req) -> Cow<'r, str> + Clone,
{
    type Classifier = C;

    #[inline]
    fn command_for(&self, _request: &Req) -> Result<Command<C>, (String, String)> {
        Ok(self.command.clone())
    }

    fn breaker_key_for(&self, request: &Req) -> Option<Arc<str>> {
        Some(Arc::from(&*(self.key_fn)(request)))
    }
}

/// How a layer answers when a call fails.
pub trait LayerFallback<Req, T, E>: Clone {
    /// The fallback of one call.
    #[doc(hidden)]
    type Call: AsyncFallback<T, E>;

    /// The fallback for the call of `request` (taken before the request goes to the service).
    #[doc(hidden)]
    fn for_request(&self, request: &Req) -> Self::Call;
}

impl<Req, T, E> LayerFallback<Req, T, E> for NoFallback {
    type Call = NoFallback;

    #[inline]
    fn for_request(&self, _request: &Req) -> NoFallback {
        NoFallback
    }
}

/// A fallback value, cloned for each failed call ([`HystrixLayer::fallback_value`]).
#[derive(Debug, Clone)]
pub struct FallbackValue<T>(T);

impl<T> Sealed for FallbackValue<T> {}

impl<T, E> AsyncFallback<T, E> for FallbackValue<T> {
    type Error = BoxError;
    type Future = Ready<Result<T, BoxError>>;

    fn is_present(&self) -> bool {
        true
    }

    fn call(self, _error: &HystrixError<E>) -> Option<Self::Future> {
        Some(ready(Ok(self.0)))
    }
}

impl<Req, T: Clone, E> LayerFallback<Req, T, E> for FallbackValue<T> {
    type Call = FallbackValue<T>;

    fn for_request(&self, _request: &Req) -> FallbackValue<T> {
        self.clone()
    }
}

/// A fallback function of the error ([`HystrixLayer::fallback_fn`]).
pub struct FallbackFn<F>(Arc<F>);

impl<F> Clone for FallbackFn<F> {
    fn clone(&self) -> Self {
        FallbackFn(Arc::clone(&self.0))
    }
}

impl<F> fmt::Debug for FallbackFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FallbackFn(..)")
    }
}

impl<F> Sealed for FallbackFn<F> {}

impl<F, T, E, FE> AsyncFallback<T, E> for FallbackFn<F>
where
    F: Fn(&HystrixError<E>) -> Result<T, FE>,
    FE: Into<BoxError>,
{
    type Error = FE;
    type Future = Ready<Result<T, FE>>;

    fn is_present(&self) -> bool {
        true
    }

    fn call(self, error: &HystrixError<E>) -> Option<Self::Future> {
        Some(ready((self.0)(error)))
    }
}

impl<F, Req, T, E, FE> LayerFallback<Req, T, E> for FallbackFn<F>
where
    F: Fn(&HystrixError<E>) -> Result<T, FE>,
    FE: Into<BoxError>,
{
    type Call = FallbackFn<F>;

    fn for_request(&self, _request: &Req) -> FallbackFn<F> {
        self.clone()
    }
}

/// A fallback service, called with a clone of the request ([`HystrixLayer::fallback_service`]).
#[derive(Debug, Clone)]
pub struct FallbackService<S>(S);

/// The fallback service and the request of one call.
#[doc(hidden)]
#[derive(Debug)]
pub struct FallbackServiceCall<S, Req> {
    service: S,
    request: Req,
}

impl<S, Req> Sealed for FallbackServiceCall<S, Req> {}

impl<S, Req, T, E> AsyncFallback<T, E> for FallbackServiceCall<S, Req>
where
    S: Service<Req, Response = T>,
    S::Error: Into<BoxError>,
{
    type Error = S::Error;
    type Future = ServiceCall<S, Req, S::Future>;

    fn is_present(&self) -> bool {
        true
    }

    fn call(self, _error: &HystrixError<E>) -> Option<Self::Future> {
        Some(ServiceCall::new(self.service, self.request))
    }
}

impl<S, Req, T, E> LayerFallback<Req, T, E> for FallbackService<S>
where
    S: Service<Req, Response = T> + Clone,
    S::Error: Into<BoxError>,
    Req: Clone,
{
    type Call = FallbackServiceCall<S, Req>;

    fn for_request(&self, request: &Req) -> Self::Call {
        FallbackServiceCall {
            service: self.0.clone(),
            request: request.clone(),
        }
    }
}

impl<S, Req, Src, FB, Rt> Service<Req> for HystrixService<S, Src, FB, Rt>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
    Req: Send + 'static,
    Src: CommandSource<Req>,
    Src::Classifier: Classify<S::Error>,
    FB: LayerFallback<Req, S::Response, S::Error>,
    Rt: LayerRetry<S, Req>,
{
    type Response = S::Response;
    type Error = HystrixError<S::Error>;
    type Future = ResponseFuture<
        ExecuteAsync<'static, Src::Classifier, Rt::Run, FB::Call>,
        HystrixError<S::Error>,
    >;

    /// Always ready: permits are taken when a call executes, and the inner service's readiness
    /// is awaited inside the execution (in each attempt).
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Req) -> Self::Future {
        match self.start(request) {
            Ok(execution) => ResponseFuture {
                state: ResponseState::Running {
                    execution: OutcomeResponse::new(execution),
                },
            },
            Err(error) => ResponseFuture {
                state: ResponseState::Refused { error: Some(error) },
            },
        }
    }
}

/// The execution future of one call of a [`HystrixService`].
type CallExecution<S, Req, C, FB, Rt> =
    ExecuteAsyncOutcome<'static, C, <Rt as LayerRetry<S, Req>>::Run, FB>;

/// The execution of one call, or why none could be made.
type CallStart<S, Req, C, FB, Rt> =
    Result<CallExecution<S, Req, C, FB, Rt>, HystrixError<<S as Service<Req>>::Error>>;

impl<S, Src, FB, Rt> HystrixService<S, Src, FB, Rt> {
    /// The execution of the call of `request` (cold); the misuse error if no command could be
    /// made for the request's key.
    #[inline]
    fn start<Req>(&mut self, request: Req) -> CallStart<S, Req, Src::Classifier, FB::Call, Rt>
    where
        S: Service<Req> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Response: Send + 'static,
        S::Error: Send + 'static,
        Req: Send + 'static,
        Src: CommandSource<Req>,
        Src::Classifier: Classify<S::Error>,
        FB: LayerFallback<Req, S::Response, S::Error>,
        Rt: LayerRetry<S, Req>,
    {
        let command = self
            .source
            .command_for(&request)
            .map_err(|(key, reason)| refused(&key, &reason))?;
        let fallback = self.fallback.for_request(&request);
        let mut options = CallOptions::default()
            .with_breaker_key(self.source.breaker_key_for(&request))
            .with_priority(self.source.priority_for(&request));
        let (state, classifier) = command.into_parts();
        // The clone serves this call: its readiness is awaited by the execution (tower's
        // pattern for services that call their inner service from their future).
        let (run, one_attempt) = self.retry.run_for(&self.inner, request, || {
            let hot = state.properties.hot();
            hot.retry_max_attempts().max(hot.hedging_max_attempts())
        });
        if one_attempt {
            options = options.with_no_retry();
        }
        Ok(ExecutionFuture::new(
            StateRef::Owned(state),
            classifier,
            run,
            fallback,
            options,
        ))
    }
}

// ------------------------------------------------------------------------------------------------
// Retry

/// How a layer makes the run of a call: one attempt ([`OneAttempt`]) or a retryable run whose
/// later attempts send copies of the request ([`RetryWith`]).
pub trait LayerRetry<S, Req>: Clone
where
    S: Service<Req>,
{
    /// The run of one call.
    #[doc(hidden)]
    type Run: RunFn<Output = S::Response, Error = S::Error>;

    /// The run of the call of `request` through a clone of `service`, and whether the call
    /// makes one attempt only; `max_attempts` reads the larger of `retry.maxAttempts` and
    /// `hedging.maxAttempts` now.
    #[doc(hidden)]
    fn run_for(
        &self,
        service: &S,
        request: Req,
        max_attempts: impl FnOnce() -> u32,
    ) -> (Self::Run, bool);
}

/// Every call makes one attempt, whatever `retry.maxAttempts` says: a layer without
/// [`retry_with`](HystrixLayer::retry_with) (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct OneAttempt;

impl<S, Req> LayerRetry<S, Req> for OneAttempt
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
    Req: Send + 'static,
{
    type Run = Async<ServiceCall<S, Req, S::Future>>;

    #[inline]
    fn run_for(
        &self,
        service: &S,
        request: Req,
        _max_attempts: impl FnOnce() -> u32,
    ) -> (Self::Run, bool) {
        // A run that cannot be retried: the execution warns once if the key asks for retries.
        (Async(ServiceCall::new(service.clone(), request)), false)
    }
}

/// Calls may be retried, with this clone hook making the copies of the request (see
/// [`HystrixLayer::retry_with`]). Cheap to clone: the hook is shared.
pub struct RetryWith<H>(Arc<H>);

impl<H> Clone for RetryWith<H> {
    fn clone(&self) -> Self {
        RetryWith(Arc::clone(&self.0))
    }
}

impl<H> fmt::Debug for RetryWith<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RetryWith(..)")
    }
}

/// Makes the copies of a request that later attempts send (tower's retry
/// `Policy::clone_request`, shared by all calls, so `&self`). Implemented by every
/// `Fn(&Req) -> Option<Req>`; with the `http` feature, by `IdempotentHttp` for
/// `http::Request`s.
pub trait CloneRequest<Req> {
    /// A copy of `request` to send again, or `None` if it must not be sent twice (not
    /// idempotent, a body that cannot be copied, or marked by its caller).
    fn clone_request(&self, request: &Req) -> Option<Req>;
}

impl<Req, F> CloneRequest<Req> for F
where
    F: Fn(&Req) -> Option<Req>,
{
    #[inline]
    fn clone_request(&self, request: &Req) -> Option<Req> {
        self(request)
    }
}

impl<S, Req, H> LayerRetry<S, Req> for RetryWith<H>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
    Req: Send + 'static,
    H: CloneRequest<Req> + Send + Sync + 'static,
{
    type Run = RetryCall<S, Req, S::Future, H>;

    fn run_for(
        &self,
        service: &S,
        request: Req,
        max_attempts: impl FnOnce() -> u32,
    ) -> (Self::Run, bool) {
        // Asked once, before the first attempt: `None` is this call's opt-out.
        let kept = if max_attempts() > 1 {
            self.0.clone_request(&request)
        } else {
            None
        };
        let one_attempt = kept.is_none();
        let again = kept.map(|kept| Kept {
            service: service.clone(),
            request: kept,
            hook: Arc::clone(&self.0),
        });
        let run = RetryCall {
            first: Async(ServiceCall::new(service.clone(), request)),
            again: Some(RetryAttempts {
                kept: again,
                _future: PhantomData,
            }),
        };
        (run, one_attempt)
    }
}

/// The run of a call that may be retried: the first attempt's call, and what makes the later
/// ones (taken out by the execution when it starts).
#[doc(hidden)]
pub struct RetryCall<S, Req, Fut, H> {
    first: Async<ServiceCall<S, Req, Fut>>,
    again: Option<RetryAttempts<S, Req, Fut, H>>,
}

impl<S, Req, Fut, H> fmt::Debug for RetryCall<S, Req, Fut, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RetryCall(..)")
    }
}

/// The later attempts of a call: a clone of the service and the kept copy of the request.
#[doc(hidden)]
pub struct RetryAttempts<S, Req, Fut, H> {
    kept: Option<Kept<S, Req, H>>,
    _future: PhantomData<fn() -> Fut>,
}

impl<S, Req, Fut, H> fmt::Debug for RetryAttempts<S, Req, Fut, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RetryAttempts(..)")
    }
}

struct Kept<S, Req, H> {
    service: S,
    request: Req,
    hook: Arc<H>,
}

impl<S, Req, Fut, H> Again for RetryAttempts<S, Req, Fut, H>
where
    S: Service<Req, Future = Fut> + Clone + Send + 'static,
    Fut: Future<Output = Result<S::Response, S::Error>> + Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
    Req: Send + 'static,
    H: CloneRequest<Req> + Send + Sync + 'static,
{
    type Run = Async<ServiceCall<S, Req, Fut>>;
    const RETRIES: bool = true;
    type Racing = crate::hedging::RaceSlot<<Self::Run as RunFn>::Running, S::Error>;

    fn next(&mut self) -> Option<Self::Run> {
        let kept = self.kept.as_mut()?;
        let copy = catch_unwind(AssertUnwindSafe(|| kept.hook.clone_request(&kept.request)));
        let (service, request) = match copy {
            Ok(Some(copy)) => (kept.service.clone(), copy),
            // A hook that refuses (or panics on) its own copy: the kept copy goes, and this
            // attempt is the last one that can be made.
            _ => {
                let Some(kept) = self.kept.take() else {
                    unreachable!("matched Some above")
                };
                (kept.service, kept.request)
            }
        };
        Some(Async(ServiceCall::new(service, request)))
    }
}

impl<S, Req, Fut, H> crate::command::run::sealed::Sealed for RetryCall<S, Req, Fut, H> {}

impl<S, Req, Fut, H> RunFn for RetryCall<S, Req, Fut, H>
where
    S: Service<Req, Future = Fut> + Clone + Send + 'static,
    Fut: Future<Output = Result<S::Response, S::Error>> + Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
    Req: Send + 'static,
    H: CloneRequest<Req> + Send + Sync + 'static,
{
    type Output = S::Response;
    type Error = S::Error;
    type Running = <Async<ServiceCall<S, Req, Fut>> as RunFn>::Running;
    type Again = RetryAttempts<S, Req, Fut, H>;
    const BLOCKING: bool = false;

    fn take_again(&mut self) -> Self::Again {
        self.again.take().unwrap_or(RetryAttempts {
            kept: None,
            _future: PhantomData,
        })
    }

    fn start_here(self, start: Start<'_>) -> Self::Running {
        self.first.start_here(start)
    }

    fn start_on_pool(
        self,
        start: Start<'_>,
        pool: &ThreadPool,
    ) -> Result<Self::Running, Rejection> {
        self.first.start_on_pool(start, pool)
    }
}

/// A request extension saying "send this request once": with `IdempotentHttp` (feature
/// `http`) as the clone hook, a request carrying it
/// (`request.extensions_mut().insert(NoRetry)`) makes one attempt, whatever its method and
/// `retry.maxAttempts`. A hook of your own over a request type with extensions can honour it
/// too (`request.extensions().get::<NoRetry>().is_some()` → `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct NoRetry;

/// A request extension saying "this request may be sent again", for a method that is not
/// idempotent by itself (e.g. a POST carrying an idempotency key): `IdempotentHttp` (feature
/// `http`) then copies it for later attempts. Insert it with
/// `request.extensions_mut().insert(Idempotent)`; [`NoRetry`] wins over it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Idempotent;

/// The clone hook for `http::Request<B>` (hyper, axum, reqwest's `http` conversions; feature
/// `http`): a copy of the request (method, URI, version, headers, extensions and a clone of
/// the body, so `B: Clone`, e.g. `Full<Bytes>`, `String`), or `None`, one attempt, for a
/// request whose method is not idempotent (POST, PATCH, CONNECT, unknown methods; see
/// [`http::is_idempotent`](crate::http::is_idempotent)) unless it carries [`Idempotent`], and
/// for one that carries [`NoRetry`]. A body that cannot be cloned (a streaming one) needs a
/// hook of its own (e.g. one that buffers the body first); a hook of your own can call this
/// one for the checks.
///
/// ```
/// use hystrix::testing::TestRegistry;
/// use hystrix::tower::{CloneRequest, HystrixLayer, IdempotentHttp, NoRetry};
/// use hystrix::{Command, IsolationStrategy};
/// use tower::{Layer, Service, ServiceExt, service_fn};
///
/// let get = http::Request::get("http://users/ada").body(String::new())?;
/// assert!(IdempotentHttp.clone_request(&get).is_some());
/// let post = http::Request::post("http://users").body("ada".to_string())?;
/// assert!(IdempotentHttp.clone_request(&post).is_none());
/// let mut once = get.clone();
/// once.extensions_mut().insert(NoRetry);
/// assert!(IdempotentHttp.clone_request(&once).is_none());
///
/// let test = TestRegistry::new();
/// let command = Command::builder("Users")
///     .group("Users")
///     .isolation(IsolationStrategy::Semaphore)
///     .property("retry.maxAttempts", 2)
///     .property("retry.backoff.initialInMilliseconds", 0)
///     .build_in(test.registry())?;
/// let backend = service_fn(|_: http::Request<String>| async {
///     Err::<http::Response<String>, _>(std::io::Error::other("reset"))
/// });
/// let mut svc = HystrixLayer::new(command).retry_with(IdempotentHttp).layer(backend);
/// futures::executor::block_on(async {
///     let err = svc.ready().await?.call(get).await.unwrap_err();
///     assert_eq!(err.attempts(), 2);
///     let err = svc.ready().await?.call(post).await.unwrap_err();
///     assert_eq!(err.attempts(), 1); // a POST is sent once
///     Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[cfg(feature = "http")]
#[derive(Debug, Clone, Copy, Default)]
pub struct IdempotentHttp;

#[cfg(feature = "http")]
impl<B: Clone> CloneRequest<::http::Request<B>> for IdempotentHttp {
    fn clone_request(&self, request: &::http::Request<B>) -> Option<::http::Request<B>> {
        let extensions = request.extensions();
        let repeatable = extensions.get::<Idempotent>().is_some()
            || crate::http::is_idempotent(request.method().as_str());
        (repeatable && extensions.get::<NoRetry>().is_none()).then(|| request.clone())
    }
}

/// Middleware that runs each call in a new [`RequestContext`] (as Hystrix's
/// `HystrixRequestContextServletFilter`), so request-scoped features work for everything the
/// call does: the request cache, the request log, REQUEST-scoped collapsers. Put it outermost
/// on a server (one context per incoming request). When a call ends its request log is
/// emitted as a `tracing` event at debug level (target `hystrix::request_log`, field
/// `request_log`, Hystrix's one-line format).
///
/// ```
/// use hystrix::context::RequestContext;
/// use hystrix::tower::RequestContextLayer;
/// use tower::{Layer, Service, ServiceExt, service_fn};
///
/// # futures::executor::block_on(async {
/// let mut svc = RequestContextLayer.layer(service_fn(|_: ()| async {
///     Ok::<_, std::convert::Infallible>(RequestContext::current().is_some())
/// }));
/// assert!(svc.ready().await?.call(()).await?);
/// # Ok::<(), std::convert::Infallible>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestContextLayer;

impl<S> Layer<S> for RequestContextLayer {
    type Service = RequestContextService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestContextService { inner }
    }
}

/// A service whose calls each run in a new [`RequestContext`]; made by
/// [`RequestContextLayer`].
#[derive(Debug, Clone)]
pub struct RequestContextService<S> {
    inner: S,
}

impl<S, Req> Service<Req> for RequestContextService<S>
where
    S: Service<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = InContext<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let context = RequestContext::new();
        let future = {
            let _entered = context.enter();
            self.inner.call(request)
        };
        InContext { future, context }
    }
}

pin_project! {
    /// A call's future polled inside its request context (see [`RequestContextLayer`]).
    #[must_use = "futures do nothing unless polled"]
    pub struct InContext<F> {
        #[pin]
        future: F,
        context: RequestContext,
    }
}

impl<F> fmt::Debug for InContext<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InContext").finish_non_exhaustive()
    }
}

impl<F: Future> Future for InContext<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let output = {
            let _entered = this.context.enter();
            std::task::ready!(this.future.poll(cx))
        };
        tracing::debug!(
            target: "hystrix::request_log",
            request_log = %this.context.request_log(),
            "request ended"
        );
        Poll::Ready(output)
    }
}

/// A layer whose calls go through the request cache ([`HystrixLayer::cache_key`]).
pub struct CachedLayer<Src, FB, K, Rt = OneAttempt> {
    layer: HystrixLayer<Src, FB, Rt>,
    key_fn: Arc<K>,
}

impl<Src: Clone, FB: Clone, K, Rt: Clone> Clone for CachedLayer<Src, FB, K, Rt> {
    fn clone(&self) -> Self {
        CachedLayer {
            layer: self.layer.clone(),
            key_fn: Arc::clone(&self.key_fn),
        }
    }
}

impl<Src, FB, K, Rt> fmt::Debug for CachedLayer<Src, FB, K, Rt> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedLayer").finish_non_exhaustive()
    }
}

impl<S, Src: Clone, FB: Clone, K, Rt: Clone> Layer<S> for CachedLayer<Src, FB, K, Rt> {
    type Service = CachedService<S, Src, FB, K, Rt>;

    fn layer(&self, inner: S) -> Self::Service {
        CachedService {
            service: self.layer.layer(inner),
            key_fn: Arc::clone(&self.key_fn),
        }
    }
}

/// A service whose calls are executions of a command through the request cache; made by
/// [`HystrixLayer::cache_key`]. Responses and errors are shared behind `Arc`.
pub struct CachedService<S, Src, FB, K, Rt = OneAttempt> {
    service: HystrixService<S, Src, FB, Rt>,
    key_fn: Arc<K>,
}

impl<S: Clone, Src: Clone, FB: Clone, K, Rt: Clone> Clone for CachedService<S, Src, FB, K, Rt> {
    fn clone(&self) -> Self {
        CachedService {
            service: self.service.clone(),
            key_fn: Arc::clone(&self.key_fn),
        }
    }
}

impl<S, Src, FB, K, Rt> fmt::Debug for CachedService<S, Src, FB, K, Rt> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedService").finish_non_exhaustive()
    }
}

impl<S, Req, Src, FB, K, Rt> Service<Req> for CachedService<S, Src, FB, K, Rt>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + Sync + 'static,
    S::Error: Send + Sync + 'static,
    Req: Send + 'static,
    Src: CommandSource<Req>,
    Src::Classifier: Classify<S::Error> + Send + 'static,
    FB: LayerFallback<Req, S::Response, S::Error>,
    FB::Call: Send + 'static,
    <FB::Call as AsyncFallback<S::Response, S::Error>>::Future: Send + 'static,
    K: Fn(&Req) -> Option<String>,
    Rt: LayerRetry<S, Req>,
{
    type Response = Arc<S::Response>;
    type Error = Arc<HystrixError<S::Error>>;
    type Future = ResponseFuture<
        CachedResponse<
            CachedFuture<
                S::Response,
                S::Error,
                CallExecution<S, Req, Src::Classifier, FB::Call, Rt>,
            >,
        >,
        Arc<HystrixError<S::Error>>,
    >;

    /// Always ready, as [`HystrixService`].
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let cache_key = (self.key_fn)(&request);
        match self.service.start(request) {
            Ok(execution) => ResponseFuture {
                state: ResponseState::Running {
                    execution: CachedResponse::new(CachedFuture::detachable(
                        Arc::clone(execution.command_state()),
                        cache_key,
                        execution,
                    )),
                },
            },
            Err(error) => ResponseFuture {
                state: ResponseState::Refused {
                    error: Some(Arc::new(error)),
                },
            },
        }
    }
}

pin_project! {
    /// One call of a service: waits for it to be ready, then calls it and awaits the response.
    /// Tower's `Oneshot`, but with the service's future as a plain parameter: `Oneshot`'s
    /// `S: Service<Req>` bound on the type would make the compiler prove that service's bounds
    /// again, lifetimes erased, for every `async` block that awaits a call, which fails for
    /// `BoxError`-producing services (see the `command::future` module).
    #[project = ServiceCallProj]
    #[doc(hidden)]
    pub enum ServiceCall<S, Req, Fut> {
        Waiting { service: S, request: Option<Req> },
        Calling { #[pin] future: Fut },
    }
}

impl<S, Req, Fut> ServiceCall<S, Req, Fut> {
    fn new(service: S, request: Req) -> Self {
        ServiceCall::Waiting {
            service,
            request: Some(request),
        }
    }
}

impl<S, Req, Fut> fmt::Debug for ServiceCall<S, Req, Fut> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceCall").finish_non_exhaustive()
    }
}

impl<S, Req, Fut> Future for ServiceCall<S, Req, Fut>
where
    S: Service<Req, Future = Fut>,
    Fut: Future<Output = Result<S::Response, S::Error>>,
{
    type Output = Result<S::Response, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project() {
                ServiceCallProj::Waiting { service, request } => {
                    if let Err(err) = std::task::ready!(service.poll_ready(cx)) {
                        return Poll::Ready(Err(err));
                    }
                    let Some(request) = request.take() else {
                        unreachable!("a call leaves Waiting when it takes its request")
                    };
                    let future = service.call(request);
                    self.set(ServiceCall::Calling { future });
                }
                ServiceCallProj::Calling { future } => return future.poll(cx),
            }
        }
    }
}

pin_project! {
    /// The future of a [`HystrixService`] (or [`CachedService`]) call: the execution, cold
    /// until polled, cancelled when dropped (permits released, CANCELLED recorded); `Err` is
    /// the service's error type.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<F, Err> {
        #[pin]
        state: ResponseState<F, Err>,
    }
}

pin_project! {
    #[project = ResponseStateProj]
    enum ResponseState<F, Err> {
        Running {
            #[pin]
            execution: F,
        },
        Refused {
            error: Option<Err>,
        },
    }
}

/// No command could be made for the request's key.
fn refused<E>(key: &str, reason: &str) -> HystrixError<E> {
    let command_key = CommandKey::new(key)
        .or_else(|_| CommandKey::new("(invalid key)"))
        .unwrap_or_else(|_| unreachable!("a valid placeholder key"));
    let message = format!("could not be made for request key `{key}`: {reason}");
    HystrixError::misuse(command_key, message)
}

impl<F, Err> fmt::Debug for ResponseFuture<F, Err> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, T, Err> Future for ResponseFuture<F, Err>
where
    F: Future<Output = Result<T, Err>>,
{
    type Output = Result<T, Err>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            ResponseStateProj::Running { execution } => execution.poll(cx),
            ResponseStateProj::Refused { error } => match error.take() {
                Some(error) => Poll::Ready(Err(error)),
                None => Poll::Pending, // polled after completion
            },
        }
    }
}
