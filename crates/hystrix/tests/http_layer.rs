//! The tower layer over HTTP services (features `tower` and `http`), on the manual clock:
//! `classify_http` judges responses by their status (5xx counted and retried, 503 with
//! Retry-After trips at once, 4xx a bad request, a failure response passed through when no
//! fallback replaces it) and `errors_as_responses` answers the layer's errors with statuses.
#![cfg(all(feature = "tower", feature = "http"))]
#![allow(clippy::unwrap_used)]

mod common;

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{builder, drive, poll_once, retrying};
use futures::executor::block_on;
use hystrix::clock::Clock;
use hystrix::command::KeyedCommands;
use hystrix::context::RequestContext;
use hystrix::testing::TestRegistry;
use hystrix::tower::{HttpFailure, HystrixLayer, IdempotentHttp};
use hystrix::{Command, EventType, FailureType, HealthCounts, HystrixError};
use tower::{Layer, Service, ServiceExt, service_fn};

type Request = http::Request<String>;
type Response = http::Response<String>;

/// A backend that answers every request with `status` (and `headers`), its body naming the
/// status and the call's number, and counts its calls; `at` notes the manual clock's time of
/// each call.
#[derive(Clone)]
struct Backend {
    status: Arc<AtomicU32>,
    headers: &'static [(&'static str, &'static str)],
    calls: Arc<AtomicU32>,
    at: Arc<Mutex<Vec<u64>>>,
    test: TestRegistry,
}

impl Backend {
    fn new(test: &TestRegistry, status: u16) -> Self {
        Backend {
            status: Arc::new(AtomicU32::new(u32::from(status))),
            headers: &[],
            calls: Arc::default(),
            at: Arc::default(),
            test: test.clone(),
        }
    }

    fn with_headers(mut self, headers: &'static [(&'static str, &'static str)]) -> Self {
        self.headers = headers;
        self
    }

    fn answer(&self, status: u16) {
        self.status.store(u32::from(status), Ordering::SeqCst);
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }

    fn service(
        &self,
    ) -> impl Service<
        Request,
        Response = Response,
        Error = std::io::Error,
        Future = impl Future<Output = Result<Response, std::io::Error>> + Send + use<>,
    > + Clone
    + Send
    + use<> {
        let backend = self.clone();
        service_fn(move |request: Request| {
            let n = backend.calls.fetch_add(1, Ordering::SeqCst) + 1;
            backend
                .at
                .lock()
                .unwrap()
                .push(backend.test.clock().now_ms());
            let status = backend.status.load(Ordering::SeqCst);
            let mut response = http::Response::builder().status(status as u16);
            for (name, value) in backend.headers {
                response = response.header(*name, *value);
            }
            let response = response
                .body(format!("{} {status} #{n}", request.method()))
                .map_err(std::io::Error::other);
            async move { response }
        })
    }
}

fn get(path: &str) -> Request {
    http::Request::get(path).body(String::new()).unwrap()
}

fn call<S>(test: &TestRegistry, svc: &mut S, request: Request) -> Result<Response, S::Error>
where
    S: Service<Request, Response = Response>,
{
    drive(test, async { svc.ready().await?.call(request).await })
}

/// The cumulative counts of `events`.
fn counts<const N: usize>(cmd: &Command, events: [EventType; N]) -> [u64; N] {
    let metrics = cmd.metrics();
    events.map(|event| metrics.cumulative_count(event))
}

fn health(errors: u64, total: u64) -> HealthCounts {
    HealthCounts {
        total_requests: total,
        error_count: errors,
        error_percentage: (errors * 100).checked_div(total).unwrap_or(0) as u32,
        ..HealthCounts::default()
    }
}

#[test]
fn five_hundreds_are_failures_and_trip_the_breaker_at_the_volume_threshold() {
    let test = TestRegistry::new();
    let cmd = builder("Prices").build_in(test.registry()).unwrap();
    let backend = Backend::new(&test, 500);
    let mut svc = HystrixLayer::new(cmd.clone())
        .classify_http()
        .layer(backend.service());

    // circuitBreaker.requestVolumeThreshold: 20 by default; 19 failures are not enough.
    for n in 1..=19 {
        let response = call(&test, &mut svc, get("/price")).unwrap();
        assert_eq!(response.status(), 500);
        assert_eq!(response.body(), &format!("GET 500 #{n}"));
    }
    test.advance(Duration::from_millis(500));
    assert_eq!(cmd.metrics().health_counts(), health(19, 19));
    assert!(!cmd.circuit_breaker().is_open());

    call(&test, &mut svc, get("/price")).unwrap();
    test.advance(Duration::from_millis(500));
    assert_eq!(cmd.metrics().health_counts(), health(20, 20));
    let err = call(&test, &mut svc, get("/price")).unwrap_err();
    assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    assert_eq!(backend.calls(), 20, "the short-circuited call never left");
    assert_eq!(
        counts(
            &cmd,
            [
                EventType::Failure,
                EventType::Success,
                EventType::ShortCircuited
            ]
        ),
        [20, 0, 1]
    );
}

#[test]
fn a_503_with_retry_after_opens_the_breaker_at_once_for_the_delay() {
    let test = TestRegistry::new();
    // Sleep window 5 s (the default): the Retry-After of 30 s is longer.
    let cmd = builder("Quotes").build_in(test.registry()).unwrap();
    let backend = Backend::new(&test, 503).with_headers(&[("retry-after", "30")]);
    let mut svc = HystrixLayer::new(cmd.clone())
        .classify_http()
        .layer(backend.service());

    let response = call(&test, &mut svc, get("/quote")).unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "30");
    assert!(cmd.circuit_breaker().is_open(), "one response opened it");
    assert_eq!(cmd.metrics().cumulative_count(EventType::Failure), 1);

    backend.answer(200);
    test.advance(Duration::from_millis(29_999));
    let err = call(&test, &mut svc, get("/quote")).unwrap_err();
    assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    assert_eq!(backend.calls(), 1);

    // Open for 30 s: as Hystrix's sleep window, the trial comes once they have passed.
    test.advance(Duration::from_millis(1));
    let err = call(&test, &mut svc, get("/quote")).unwrap_err();
    assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    test.advance(Duration::from_millis(1));
    let response = call(&test, &mut svc, get("/quote")).unwrap();
    assert_eq!(response.status(), 200, "the trial after 30 s");
    assert_eq!(backend.calls(), 2);
    assert!(!cmd.circuit_breaker().is_open());
}

#[test]
fn a_404_is_a_bad_request_returned_as_is_and_the_breaker_is_untouched() {
    let test = TestRegistry::new();
    let cmd = builder("Users").build_in(test.registry()).unwrap();
    let backend = Backend::new(&test, 404);
    let mut svc = HystrixLayer::new(cmd.clone())
        .fallback_fn(|_: &HystrixError<HttpFailure<std::io::Error, String>>| {
            Ok::<_, Infallible>(http::Response::new("fallback".to_owned()))
        })
        .classify_http()
        .layer(backend.service());
    for n in 1..=30 {
        let response = call(&test, &mut svc, get("/users/ada")).unwrap();
        assert_eq!(response.status(), 404);
        assert_eq!(response.body(), &format!("GET 404 #{n}"), "no fallback");
    }
    test.advance(Duration::from_millis(500));
    assert_eq!(cmd.metrics().health_counts(), health(0, 0));
    assert!(!cmd.circuit_breaker().is_open());
    assert_eq!(
        counts(
            &cmd,
            [
                EventType::BadRequest,
                EventType::Failure,
                EventType::FallbackSuccess
            ]
        ),
        [30, 0, 0]
    );
}

#[test]
fn a_get_answered_503_is_retried_a_post_is_not() {
    let test = TestRegistry::new();
    let cmd = retrying(&test, "Orders", 3);
    let backend = Backend::new(&test, 503);
    let mut svc = HystrixLayer::new(cmd.clone())
        .retry_with(IdempotentHttp)
        .classify_http()
        .layer(backend.service());

    let response = call(&test, &mut svc, get("/orders/7")).unwrap();
    assert_eq!(backend.calls(), 3, "a GET: three attempts");
    assert_eq!(response.status(), 503);
    assert_eq!(response.body(), "GET 503 #3", "the last attempt's response");

    let post = http::Request::post("/orders")
        .body("{}".to_owned())
        .unwrap();
    let response = call(&test, &mut svc, post).unwrap();
    assert_eq!(backend.calls(), 4, "a POST: one attempt");
    assert_eq!(response.body(), "POST 503 #4");
    assert_eq!(counts(&cmd, [EventType::Failure, EventType::Retry]), [4, 2]);
}

#[test]
fn a_429_is_retried_no_sooner_than_its_retry_after() {
    let test = TestRegistry::new();
    let cmd = retrying(&test, "Search", 2);
    let backend = Backend::new(&test, 429).with_headers(&[("retry-after", "2")]);
    let mut svc = HystrixLayer::new(cmd.clone())
        .retry_with(IdempotentHttp)
        .classify_http()
        .layer(backend.service());
    let start = test.clock().now_ms();
    let response = call(&test, &mut svc, get("/search?q=x")).unwrap();
    assert_eq!(response.status(), 429);
    let at: Vec<u64> = backend
        .at
        .lock()
        .unwrap()
        .iter()
        .map(|t| t - start)
        .collect();
    assert_eq!(at, [0, 2000]);
}

#[test]
fn a_failure_response_passes_through_unless_a_fallback_replaces_it() {
    let test = TestRegistry::new();
    let cmd = builder("Gateway").build_in(test.registry()).unwrap();
    let backend = Backend::new(&test, 502);
    let mut plain = HystrixLayer::new(cmd.clone())
        .classify_http()
        .layer(backend.service());
    let context = RequestContext::new();
    let response =
        block_on(context.scope(async { plain.ready().await?.call(get("/")).await })).unwrap();
    assert_eq!(response.status(), 502);
    assert_eq!(response.body(), "GET 502 #1");
    assert_eq!(
        context.request_log().to_string(),
        "Gateway[FAILURE, FALLBACK_MISSING][0ms]"
    );

    // The fallback sees the failure response.
    let mut with_fallback = HystrixLayer::new(cmd.clone())
        .fallback_fn(|err: &HystrixError<HttpFailure<std::io::Error, String>>| {
            let status = err
                .cause()
                .and_then(HttpFailure::response)
                .map(|r| r.status());
            Ok::<_, Infallible>(http::Response::new(format!("cached, backend {status:?}")))
        })
        .classify_http()
        .layer(backend.service());
    let context = RequestContext::new();
    let response =
        block_on(context.scope(async { with_fallback.ready().await?.call(get("/")).await }))
            .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.body(), "cached, backend Some(502)");
    assert_eq!(
        context.request_log().to_string(),
        "Gateway[FAILURE, FALLBACK_SUCCESS][0ms]"
    );

    // A fallback that fails: the backend's response is still what the caller gets.
    let mut failing_fallback = HystrixLayer::new(cmd.clone())
        .fallback_fn(|_: &HystrixError<HttpFailure<std::io::Error, String>>| {
            Err::<Response, _>(std::io::Error::other("cache down"))
        })
        .classify_http()
        .layer(backend.service());
    let context = RequestContext::new();
    let response =
        block_on(context.scope(async { failing_fallback.ready().await?.call(get("/")).await }))
            .unwrap();
    assert_eq!(response.status(), 502);
    assert_eq!(response.body(), "GET 502 #3");
    assert_eq!(
        context.request_log().to_string(),
        "Gateway[FAILURE, FALLBACK_FAILURE][0ms]"
    );
}

#[test]
fn the_service_errors_stay_typed_errors() {
    let test = TestRegistry::new();
    let cmd = builder("Refused").build_in(test.registry()).unwrap();
    let mut svc = HystrixLayer::new(cmd.clone())
        .classify_http()
        .layer(service_fn(|_: Request| async {
            Err::<Response, _>(std::io::Error::other("connection refused"))
        }));
    let err = call(&test, &mut svc, get("/")).unwrap_err();
    assert_eq!(err.failure_type(), FailureType::CommandException);
    assert_eq!(err.cause().unwrap().to_string(), "connection refused");
}

#[test]
fn errors_as_responses_answers_each_failure_with_its_status() {
    let test = TestRegistry::new();
    let cmd = builder("Front")
        .semaphore_max_concurrent_requests(1)
        .build_in(test.registry())
        .unwrap();
    // The backend never answers "/slow", fails "/refused", answers 500 on "/broken".
    let backend = service_fn(|request: Request| async move {
        match request.uri().path() {
            "/slow" => std::future::pending().await,
            "/refused" => Err(std::io::Error::other("connection refused")),
            "/broken" => Ok(http::Response::builder()
                .status(500)
                .body("broken".to_owned())
                .unwrap()),
            _ => Ok(http::Response::new("ok".to_owned())),
        }
    });
    let mut svc = HystrixLayer::new(cmd.clone())
        .classify_http()
        .errors_as_responses()
        .layer(backend);
    fn status<S>(test: &TestRegistry, svc: &mut S, path: &str) -> (u16, String)
    where
        S: Service<Request, Response = Response, Error = Infallible>,
    {
        let response = call(test, svc, get(path)).unwrap_or_else(|never| match never {});
        (response.status().as_u16(), response.into_body())
    }

    assert_eq!(status(&test, &mut svc, "/"), (200, "ok".into()));
    assert_eq!(status(&test, &mut svc, "/broken"), (500, "broken".into()));
    assert_eq!(status(&test, &mut svc, "/refused"), (502, String::new()));
    // The timeout, 1000 ms on the manual clock.
    assert_eq!(status(&test, &mut svc, "/slow"), (504, String::new()));

    // The only permit held by a call in flight: a rejection.
    let mut held = Box::pin(svc.call(get("/slow")));
    assert!(poll_once(held.as_mut()).is_pending());
    assert_eq!(status(&test, &mut svc, "/"), (503, String::new()));
    drop(held);

    cmd.circuit_breaker().force_open();
    assert_eq!(status(&test, &mut svc, "/"), (503, String::new()));
    assert_eq!(cmd.metrics().cumulative_count(EventType::ShortCircuited), 1);

    // A key no command can be made for: this server's own fault.
    let commands = KeyedCommands::builder(builder)
        .registry(test.registry())
        .build();
    let mut keyed = HystrixLayer::keyed(commands, |_: &Request| "".into())
        .errors_as_responses()
        .layer(service_fn(|_: Request| async {
            Ok::<_, std::io::Error>(http::Response::new(String::new()))
        }));
    assert_eq!(status(&test, &mut keyed, "/"), (500, String::new()));
}

/// The one-line axum server: the layered handler goes straight into `route_service`.
#[test]
fn an_axum_router_takes_the_layered_handler() {
    let test = TestRegistry::new();
    let cmd: Command = builder("Axum").build_in(test.registry()).unwrap();
    let handler = service_fn(|_: axum::extract::Request| async {
        Err::<axum::response::Response, _>(std::io::Error::other("down"))
    });
    let router = axum::Router::new().route_service(
        "/",
        HystrixLayer::new(cmd)
            .classify_http()
            .errors_as_responses()
            .layer(handler),
    );
    let request = axum::extract::Request::get("/")
        .body(axum::body::Body::empty())
        .unwrap();
    let response = block_on(router.oneshot(request)).unwrap();
    assert_eq!(response.status(), 502);
}
