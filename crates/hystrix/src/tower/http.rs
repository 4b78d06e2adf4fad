//! The layer over HTTP services (features `tower` and `http`): responses judged by their
//! status ([`HystrixLayer::classify_http`]) and the layer's errors answered as HTTP responses
//! ([`HystrixLayer::errors_as_responses`]).

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tower::layer::util::Stack;
use tower::{Layer, Service};

use super::{CommandSource, HystrixLayer, HystrixService, LayerResponses};
use crate::command::{Class, Classify, Command};
use crate::error::HystrixError;
use crate::http::{classify_head, classify_status, error_response};
use crate::isolation::priority::Priority;
use crate::retry::RetryAnswer;

/// Responses are judged by their status: a layer after
/// [`classify_http`](HystrixLayer::classify_http).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClassifyHttp;

impl<Src, FB, Rt, Cl> HystrixLayer<Src, FB, Rt, Cl> {
    /// Judges each `http::Response` of the wrapped service by its status, as
    /// [`http::classify_status`](crate::http::classify_status) does, instead of counting every
    /// `Ok` response as a success (for services whose response is `http::Response<B>`: an
    /// axum handler, hyper's client):
    ///
    /// | status | counts as | retried (with [`retry_with`](HystrixLayer::retry_with)) | the caller gets |
    /// |---|---|---|---|
    /// | below 400 | SUCCESS | no | the response |
    /// | 503 with `Retry-After` | FAILURE, and the breaker opens now for at least the delay ([`Class::TripNow`]) | as the breaker's trial once the delay has passed, if that fits in the call's deadline | the fallback's response, else this response |
    /// | other 5xx, 408, 429 | FAILURE | yes, not before its `Retry-After` | the fallback's response, else this response |
    /// | other 4xx | BAD_REQUEST (not counted, no fallback) | no | this response |
    ///
    /// A response that is a failure counts in the breaker's error percentage, and is retried
    /// like an error of the service: within `retry.maxAttempts`, the retry budget and the
    /// deadlines, with its `Retry-After` (seconds or an HTTP date) as the least delay before
    /// the next attempt; a delay that does not fit in the call's deadline (its timeout) ends
    /// the call at once. Whether a request may be sent again is the clone hook's decision
    /// ([`IdempotentHttp`](crate::tower::IdempotentHttp) refuses a POST), not the status's.
    ///
    /// **What the caller gets**: when the call's final outcome is a failure response, the
    /// fallback's response if the layer has a fallback and it succeeds; otherwise (no
    /// fallback, or the fallback failed or was rejected) the backend's response itself,
    /// unchanged, body included, so a proxy never loses it. Either way it counts as a FAILURE
    /// (with FALLBACK_MISSING, FALLBACK_SUCCESS, ... as for any failure) in the metrics, the
    /// events and the request log. A 4xx response is returned as is (BAD_REQUEST). The layer's
    /// error stays [`HystrixError<E>`] over the service's error `E`: it is left for failures
    /// that have no response (the service's errors, timeouts, short-circuits, rejections).
    ///
    /// A fallback function sees the run's error as an [`HttpFailure`]: the service's error,
    /// or the failure response ([`HttpFailure::response`]), so `fallback_fn` takes a
    /// `&HystrixError<HttpFailure<E, B>>`. The request cache
    /// ([`cache_key`](HystrixLayer::cache_key)) is not available on such a layer (a streaming
    /// body cannot be shared). The command's own classifier
    /// ([`classify`](crate::CommandBuilder::classify),
    /// [`classify_retry`](crate::CommandBuilder::classify_retry)) still answers for the
    /// service's errors; responses are judged by their status alone. The other builder calls
    /// (fallbacks, `retry_with`, `priority_with`, `breaker_key`) can come before or after this
    /// one; [`errors_as_responses`](HystrixLayer::errors_as_responses) comes last.
    ///
    /// ```
    /// use hystrix::testing::TestRegistry;
    /// use hystrix::tower::HystrixLayer;
    /// use hystrix::{Command, EventType, IsolationStrategy};
    /// use tower::{Layer, Service, ServiceExt, service_fn};
    ///
    /// let test = TestRegistry::new();
    /// let command = Command::builder("Prices")
    ///     .group("Prices")
    ///     .isolation(IsolationStrategy::Semaphore)
    ///     .build_in(test.registry())?;
    /// let backend = service_fn(|request: http::Request<String>| async move {
    ///     let status = if request.uri().path() == "/broken" { 500 } else { 200 };
    ///     http::Response::builder()
    ///         .status(status)
    ///         .body(format!("{} answered {status}", request.uri().path()))
    /// });
    /// let mut svc = HystrixLayer::new(command.clone()).classify_http().layer(backend);
    ///
    /// futures::executor::block_on(async {
    ///     let request = http::Request::get("/broken").body(String::new())?;
    ///     let response = svc.ready().await?.call(request).await?;
    ///     // No fallback: the backend's response, counted as a failure.
    ///     assert_eq!(response.status(), 500);
    ///     assert_eq!(response.body(), "/broken answered 500");
    ///     let request = http::Request::get("/fine").body(String::new())?;
    ///     assert_eq!(svc.ready().await?.call(request).await?.status(), 200);
    ///     Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// })?;
    /// let metrics = command.metrics();
    /// assert_eq!(metrics.cumulative_count(EventType::Failure), 1);
    /// assert_eq!(metrics.cumulative_count(EventType::FallbackMissing), 1);
    /// assert_eq!(metrics.cumulative_count(EventType::Success), 1);
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn classify_http(self) -> HystrixLayer<Src, FB, Rt, ClassifyHttp> {
        HystrixLayer {
            source: self.source,
            fallback: self.fallback,
            retry: self.retry,
            class: ClassifyHttp,
        }
    }

    /// Answers the layer's errors as HTTP responses, so the service never fails (its error
    /// is [`Infallible`]) and goes straight into axum's `Router::route_service` or
    /// `Router::layer`, without `HandleErrorLayer`. Call it last: it wraps this layer in
    /// [`ErrorResponsesLayer`] (tower's `Stack`).
    ///
    /// An error becomes an empty response (`B::default()`) with the status of
    /// [`http::error_status`](crate::http::error_status): 503 for a short-circuit or a
    /// rejection, 504 for a timeout, 500 for a misuse, 502 for any other failure (the
    /// service's error with no fallback, or with a fallback that failed). No `Retry-After` is
    /// added. Responses, including failure responses passed through by
    /// [`classify_http`](HystrixLayer::classify_http), are returned unchanged.
    ///
    /// ```
    /// use hystrix::testing::TestRegistry;
    /// use hystrix::tower::HystrixLayer;
    /// use hystrix::{Command, IsolationStrategy};
    /// use std::convert::Infallible;
    /// use tower::{Layer, Service, ServiceExt, service_fn};
    ///
    /// let test = TestRegistry::new();
    /// let command = Command::builder("Quotes")
    ///     .group("Quotes")
    ///     .isolation(IsolationStrategy::Semaphore)
    ///     .build_in(test.registry())?;
    /// let handler = service_fn(|_: http::Request<String>| async {
    ///     Err::<http::Response<String>, _>(std::io::Error::other("connection refused"))
    /// });
    /// let mut svc = HystrixLayer::new(command.clone())
    ///     .classify_http()
    ///     .errors_as_responses()
    ///     .layer(handler);
    /// futures::executor::block_on(async {
    ///     let request = http::Request::get("/quote/1").body(String::new()).unwrap();
    ///     let response: Result<_, Infallible> = svc.ready().await?.call(request).await;
    ///     assert_eq!(response?.status(), 502);
    ///     command.circuit_breaker().force_open();
    ///     let request = http::Request::get("/quote/1").body(String::new()).unwrap();
    ///     assert_eq!(svc.ready().await?.call(request).await?.status(), 503);
    ///     Ok::<(), Infallible>(())
    /// })?;
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn errors_as_responses(self) -> Stack<Self, ErrorResponsesLayer> {
        Stack::new(self, ErrorResponsesLayer)
    }
}

/// The run's error of a layer with [`classify_http`](HystrixLayer::classify_http), as its
/// fallback function sees it: the wrapped service's error, or a response whose status is an
/// error (4xx or 5xx).
pub enum HttpFailure<E, B> {
    /// The wrapped service's error.
    Error(E),
    /// A response whose status is 4xx or 5xx.
    Response(http::Response<B>),
}

impl<E, B> HttpFailure<E, B> {
    /// The failure response, if the service answered one.
    pub fn response(&self) -> Option<&http::Response<B>> {
        match self {
            HttpFailure::Response(response) => Some(response),
            HttpFailure::Error(_) => None,
        }
    }

    /// The service's error, if it returned one.
    pub fn error(&self) -> Option<&E> {
        match self {
            HttpFailure::Error(error) => Some(error),
            HttpFailure::Response(_) => None,
        }
    }
}

impl<E: fmt::Debug, B> fmt::Debug for HttpFailure<E, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpFailure::Error(error) => f.debug_tuple("Error").field(error).finish(),
            HttpFailure::Response(response) => {
                f.debug_tuple("Response").field(&response.status()).finish()
            }
        }
    }
}

impl<E: fmt::Display, B> fmt::Display for HttpFailure<E, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpFailure::Error(error) => error.fmt(f),
            HttpFailure::Response(response) => write!(f, "answered {}", response.status()),
        }
    }
}

impl<E: std::error::Error + 'static, B> std::error::Error for HttpFailure<E, B> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HttpFailure::Error(error) => Some(error),
            HttpFailure::Response(_) => None,
        }
    }
}

impl<S, Src, FB, Rt> LayerResponses<S, Src, FB, Rt> for ClassifyHttp {
    type Service = HttpService<S, Src, FB, Rt>;

    fn service(service: HystrixService<S, Src, FB, Rt>) -> Self::Service {
        HttpService {
            service: HystrixService {
                inner: StatusAsError(service.inner),
                source: HttpSource(service.source),
                fallback: service.fallback,
                retry: service.retry,
            },
        }
    }
}

/// A service whose calls are executions of a command that judges the responses' statuses;
/// made by [`HystrixLayer::classify_http`].
#[derive(Clone)]
pub struct HttpService<S, Src, FB, Rt> {
    service: HystrixService<StatusAsError<S>, HttpSource<Src>, FB, Rt>,
}

impl<S, Src, FB, Rt> fmt::Debug for HttpService<S, Src, FB, Rt> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpService").finish_non_exhaustive()
    }
}

impl<S, Req, B, Src, FB, Rt> Service<Req> for HttpService<S, Src, FB, Rt>
where
    S: Service<Req, Response = http::Response<B>>,
    HystrixService<StatusAsError<S>, HttpSource<Src>, FB, Rt>:
        Service<Req, Response = http::Response<B>, Error = HystrixError<HttpFailure<S::Error, B>>>,
{
    type Response = http::Response<B>;
    type Error = HystrixError<S::Error>;
    type Future = HttpResponseFuture<
        <HystrixService<StatusAsError<S>, HttpSource<Src>, FB, Rt> as Service<Req>>::Future,
    >;

    /// Always ready, as [`HystrixService`].
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Req) -> Self::Future {
        HttpResponseFuture {
            future: self.service.call(request),
        }
    }
}

pin_project! {
    /// The future of an [`HttpService`] call: a failure response that no fallback replaced
    /// is the call's response.
    #[must_use = "futures do nothing unless polled"]
    pub struct HttpResponseFuture<F> {
        #[pin]
        future: F,
    }
}

impl<F> fmt::Debug for HttpResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpResponseFuture").finish_non_exhaustive()
    }
}

impl<F, E, B> Future for HttpResponseFuture<F>
where
    F: Future<Output = Result<http::Response<B>, HystrixError<HttpFailure<E, B>>>>,
{
    type Output = Result<http::Response<B>, HystrixError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let error = match std::task::ready!(self.project().future.poll(cx)) {
            Ok(response) => return Poll::Ready(Ok(response)),
            Err(error) => error,
        };
        Poll::Ready(
            match error.try_map_cause(|cause| match cause {
                HttpFailure::Error(error) => Ok(error),
                HttpFailure::Response(response) => Err(response),
            }) {
                Ok(error) => Err(error),
                Err(response) => Ok(response),
            },
        )
    }
}

/// The wrapped service of an [`HttpService`]: its failure responses are errors.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct StatusAsError<S>(S);

impl<S, Req, B> Service<Req> for StatusAsError<S>
where
    S: Service<Req, Response = http::Response<B>>,
{
    type Response = http::Response<B>;
    type Error = HttpFailure<S::Error, B>;
    type Future = StatusAsErrorFuture<S::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx).map_err(HttpFailure::Error)
    }

    #[inline]
    fn call(&mut self, request: Req) -> Self::Future {
        StatusAsErrorFuture {
            future: self.0.call(request),
        }
    }
}

pin_project! {
    /// A call of the wrapped service of an [`HttpService`].
    #[doc(hidden)]
    pub struct StatusAsErrorFuture<F> {
        #[pin]
        future: F,
    }
}

impl<F, E, B> Future for StatusAsErrorFuture<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
{
    type Output = Result<http::Response<B>, HttpFailure<E, B>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(match std::task::ready!(self.project().future.poll(cx)) {
            Ok(response) => match classify_status(response.status().as_u16(), None, true).0 {
                // Below 400: not an error of any kind.
                Class::Ignored => Ok(response),
                _ => Err(HttpFailure::Response(response)),
            },
            Err(error) => Err(HttpFailure::Error(error)),
        })
    }
}

/// The command source of an [`HttpService`]: the layer's, with its classifier judging
/// failure responses too.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct HttpSource<Src>(Src);

impl<Src, Req> CommandSource<Req> for HttpSource<Src>
where
    Src: CommandSource<Req>,
{
    type Classifier = HttpClassify<Src::Classifier>;

    #[inline]
    fn command_for(&self, request: &Req) -> Result<Command<Self::Classifier>, (String, String)> {
        self.0
            .command_for(request)
            .map(|command| command.map_classifier(HttpClassify))
    }

    #[inline]
    fn breaker_key_for(&self, request: &Req) -> Option<Arc<str>> {
        self.0.breaker_key_for(request)
    }

    #[inline]
    fn priority_for(&self, request: &Req) -> Priority {
        self.0.priority_for(request)
    }
}

/// The classifier of an [`HttpService`]'s command: failure responses by their status
/// ([`http::classify_status`](crate::http::classify_status); the clone hook decides about
/// idempotency), the service's errors by the command's classifier.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct HttpClassify<C>(C);

impl<C, E, B> Classify<HttpFailure<E, B>> for HttpClassify<C>
where
    C: Classify<E>,
{
    fn classify(&self, failure: &HttpFailure<E, B>) -> Class {
        match failure {
            HttpFailure::Error(error) => self.0.classify(error),
            HttpFailure::Response(response) => {
                classify_head(response.status(), response.headers(), true).0
            }
        }
    }

    fn retry(&self, failure: &HttpFailure<E, B>) -> RetryAnswer {
        match failure {
            HttpFailure::Error(error) => self.0.retry(error),
            HttpFailure::Response(response) => {
                classify_head(response.status(), response.headers(), true).1
            }
        }
    }
}

/// Middleware that answers the errors of a service of HTTP responses with responses (see
/// [`HystrixLayer::errors_as_responses`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct ErrorResponsesLayer;

impl<S> Layer<S> for ErrorResponsesLayer {
    type Service = ErrorResponses<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ErrorResponses(inner)
    }
}

/// A service whose errors are answered with responses: `S`'s `HystrixError`s become empty
/// responses with [`http::error_status`](crate::http::error_status)'s status; made by
/// [`ErrorResponsesLayer`] over a layer's service ([`AlwaysReady`]).
#[derive(Debug, Clone)]
pub struct ErrorResponses<S>(S);

/// A service whose [`poll_ready`](Service::poll_ready) is always `Ready(Ok(()))` and
/// reserves nothing, so that it may be called without being polled ready: the layer's
/// [`HystrixService`] and [`HttpService`]. [`ErrorResponses`] wraps such services only (it has
/// no response to answer a readiness error with).
pub trait AlwaysReady {}

impl<S, Src, FB, Rt> AlwaysReady for HystrixService<S, Src, FB, Rt> {}

impl<S, Src, FB, Rt> AlwaysReady for HttpService<S, Src, FB, Rt> {}

impl<S, Req, E, B> Service<Req> for ErrorResponses<S>
where
    S: Service<Req, Response = http::Response<B>, Error = HystrixError<E>> + AlwaysReady,
    B: Default,
{
    type Response = http::Response<B>;
    type Error = Infallible;
    type Future = ErrorResponseFuture<S::Future>;

    /// Always ready, as the service it wraps.
    #[inline]
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    #[inline]
    fn call(&mut self, request: Req) -> Self::Future {
        ErrorResponseFuture {
            future: self.0.call(request),
        }
    }
}

pin_project! {
    /// The future of an [`ErrorResponses`] call.
    #[must_use = "futures do nothing unless polled"]
    pub struct ErrorResponseFuture<F> {
        #[pin]
        future: F,
    }
}

impl<F> fmt::Debug for ErrorResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ErrorResponseFuture")
            .finish_non_exhaustive()
    }
}

impl<F, E, B> Future for ErrorResponseFuture<F>
where
    F: Future<Output = Result<http::Response<B>, HystrixError<E>>>,
    B: Default,
{
    type Output = Result<http::Response<B>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(Ok(
            match std::task::ready!(self.project().future.poll(cx)) {
                Ok(response) => response,
                Err(error) => error_response(&error),
            },
        ))
    }
}
