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
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::command::{
    Async, AsyncFallback, CachedFuture, CachedResponse, CallOptions, Classify, Command,
    ExecuteAsync, ExecuteAsyncOutcome, ExecutionFuture, KeyedCommands, NoFallback, OutcomeResponse,
    Sealed, StateRef,
};
use crate::context::RequestContext;
use crate::error::{BoxError, HystrixError};
use crate::key::CommandKey;

/// Middleware that runs every call of the wrapped service as an execution of a command.
///
/// `Src` is where the command comes from ([`Command`] or [`ByKey`]); `FB` the fallback
/// ([`NoFallback`], [`FallbackValue`], [`FallbackFn`] or [`FallbackService`]).
#[derive(Clone)]
pub struct HystrixLayer<Src, FB = NoFallback> {
    source: Src,
    fallback: FB,
}

impl<Src, FB> fmt::Debug for HystrixLayer<Src, FB> {
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
        }
    }
}

impl<C, FB> HystrixLayer<Command<C>, FB> {
    /// Each call goes through the keyed breaker that `key_fn` names for its request (a host, a
    /// shard, a tenant; borrowed or owned), so one failing host opens its own breaker while
    /// the others' calls go on; the command must have keyed breakers
    /// ([`CommandBuilder::breaker_per_key`](crate::command::CommandBuilder::breaker_per_key)),
    /// otherwise every call ends in a misuse error. Metrics, bulkhead, timeout and fallback
    /// stay the command's.
    pub fn breaker_key<F, Req>(self, key_fn: F) -> HystrixLayer<BreakerByKey<C, F, Req>, FB>
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
        }
    }
}

impl<Src, FB> HystrixLayer<Src, FB> {
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
    /// the level of the decoded value instead.
    pub fn cache_key<K, Req>(self, key_fn: K) -> CachedLayer<Src, FB, K>
    where
        K: Fn(&Req) -> Option<String>,
    {
        CachedLayer {
            layer: self,
            key_fn: Arc::new(key_fn),
        }
    }

    /// On failure (error, timeout, short-circuit, rejection) answer with a clone of `value`.
    pub fn fallback_value<T: Clone>(self, value: T) -> HystrixLayer<Src, FallbackValue<T>> {
        HystrixLayer {
            source: self.source,
            fallback: FallbackValue(value),
        }
    }

    /// On failure answer with `f(&error)`; its error becomes the call's FALLBACK_FAILURE.
    pub fn fallback_fn<F>(self, f: F) -> HystrixLayer<Src, FallbackFn<F>> {
        HystrixLayer {
            source: self.source,
            fallback: FallbackFn(Arc::new(f)),
        }
    }

    /// On failure send the same request to `service` (a secondary backend, a cache); needs
    /// the request to be `Clone` (it is cloned before each call). Its readiness is awaited
    /// within the fallback.
    pub fn fallback_service<S2>(self, service: S2) -> HystrixLayer<Src, FallbackService<S2>> {
        HystrixLayer {
            source: self.source,
            fallback: FallbackService(service),
        }
    }
}

impl<S, Src: Clone, FB: Clone> Layer<S> for HystrixLayer<Src, FB> {
    type Service = HystrixService<S, Src, FB>;

    fn layer(&self, inner: S) -> Self::Service {
        HystrixService {
            inner,
            source: self.source.clone(),
            fallback: self.fallback.clone(),
        }
    }
}

/// A service whose calls are executions of a command; made by [`HystrixLayer`].
#[derive(Clone)]
pub struct HystrixService<S, Src, FB = NoFallback> {
    inner: S,
    source: Src,
    fallback: FB,
}

impl<S, Src, FB> fmt::Debug for HystrixService<S, Src, FB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HystrixService").finish_non_exhaustive()
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

impl<S, Req, Src, FB> Service<Req> for HystrixService<S, Src, FB>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
    Req: Send + 'static,
    Src: CommandSource<Req>,
    Src::Classifier: Classify<S::Error>,
    FB: LayerFallback<Req, S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = HystrixError<S::Error>;
    type Future = ResponseFuture<
        ExecuteAsync<'static, Src::Classifier, Async<ServiceCall<S, Req, S::Future>>, FB::Call>,
        HystrixError<S::Error>,
    >;

    /// Always ready: permits are taken when a call executes, and the inner service's readiness
    /// is awaited inside the execution.
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
type CallExecution<S, Req, C, FB> =
    ExecuteAsyncOutcome<'static, C, Async<ServiceCall<S, Req, <S as Service<Req>>::Future>>, FB>;

/// The execution of one call, or why none could be made.
type CallStart<S, Req, C, FB> =
    Result<CallExecution<S, Req, C, FB>, HystrixError<<S as Service<Req>>::Error>>;

impl<S, Src, FB> HystrixService<S, Src, FB> {
    /// The execution of the call of `request` (cold); the misuse error if no command could be
    /// made for the request's key.
    #[inline]
    fn start<Req>(&mut self, request: Req) -> CallStart<S, Req, Src::Classifier, FB::Call>
    where
        S: Service<Req> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Response: Send + 'static,
        S::Error: Send + 'static,
        Req: Send + 'static,
        Src: CommandSource<Req>,
        Src::Classifier: Classify<S::Error>,
        FB: LayerFallback<Req, S::Response, S::Error>,
    {
        let command = self
            .source
            .command_for(&request)
            .map_err(|(key, reason)| refused(&key, &reason))?;
        let fallback = self.fallback.for_request(&request);
        let options =
            CallOptions::default().with_breaker_key(self.source.breaker_key_for(&request));
        // The clone serves this call: its readiness is awaited by the execution (tower's
        // pattern for services that call their inner service from their future).
        let run = Async(ServiceCall::new(self.inner.clone(), request));
        let (state, classifier) = command.into_parts();
        Ok(ExecutionFuture::new(
            StateRef::Owned(state),
            classifier,
            run,
            fallback,
            options,
        ))
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
pub struct CachedLayer<Src, FB, K> {
    layer: HystrixLayer<Src, FB>,
    key_fn: Arc<K>,
}

impl<Src: Clone, FB: Clone, K> Clone for CachedLayer<Src, FB, K> {
    fn clone(&self) -> Self {
        CachedLayer {
            layer: self.layer.clone(),
            key_fn: Arc::clone(&self.key_fn),
        }
    }
}

impl<Src, FB, K> fmt::Debug for CachedLayer<Src, FB, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedLayer").finish_non_exhaustive()
    }
}

impl<S, Src: Clone, FB: Clone, K> Layer<S> for CachedLayer<Src, FB, K> {
    type Service = CachedService<S, Src, FB, K>;

    fn layer(&self, inner: S) -> Self::Service {
        CachedService {
            service: self.layer.layer(inner),
            key_fn: Arc::clone(&self.key_fn),
        }
    }
}

/// A service whose calls are executions of a command through the request cache; made by
/// [`HystrixLayer::cache_key`]. Responses and errors are shared behind `Arc`.
pub struct CachedService<S, Src, FB, K> {
    service: HystrixService<S, Src, FB>,
    key_fn: Arc<K>,
}

impl<S: Clone, Src: Clone, FB: Clone, K> Clone for CachedService<S, Src, FB, K> {
    fn clone(&self) -> Self {
        CachedService {
            service: self.service.clone(),
            key_fn: Arc::clone(&self.key_fn),
        }
    }
}

impl<S, Src, FB, K> fmt::Debug for CachedService<S, Src, FB, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedService").finish_non_exhaustive()
    }
}

impl<S, Req, Src, FB, K> Service<Req> for CachedService<S, Src, FB, K>
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
{
    type Response = Arc<S::Response>;
    type Error = Arc<HystrixError<S::Error>>;
    type Future = ResponseFuture<
        CachedResponse<
            CachedFuture<S::Response, S::Error, CallExecution<S, Req, Src::Classifier, FB::Call>>,
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
