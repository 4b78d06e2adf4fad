//! An axum gateway whose `/quote/{item}` handler is protected by a `HystrixLayer`, in front of
//! a flaky price backend. Everything runs on 127.0.0.1.
//!
//! Run with `cargo run --example tower_axum_server`.
//!
//! The handler calls the backend over HTTP; a 5xx answer is an error, so the command sees it.
//! Three phases of traffic go through the gateway:
//! 1. the backend is healthy: every quote is a 200;
//! 2. the backend fails: the first calls get 502 (they reached it), then the breaker opens and
//!    the gateway answers 503 at once without calling the backend;
//! 3. the backend recovers: after the sleep window one trial call goes through, succeeds, and
//!    the breaker closes: 200s again.
//!
//! The errors reach axum's `HandleErrorLayer`, which maps each failure type to a status code.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use hystrix::tower::HystrixLayer;
use hystrix::{BoxError, Command, FailureType, HystrixError, Registry, Status};
use tokio::net::TcpListener;
use tower::{ServiceBuilder, service_fn};

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// The backend: healthy or failing, and how many calls it saw.
#[derive(Default)]
struct Backend {
    failing: AtomicBool,
    calls: AtomicU64,
}

async fn price(State(backend): State<Arc<Backend>>, Path(item): Path<u64>) -> Response {
    backend.calls.fetch_add(1, Ordering::Relaxed);
    if backend.failing.load(Ordering::Relaxed) {
        (StatusCode::INTERNAL_SERVER_ERROR, "database down").into_response()
    } else {
        format!("{}", item * 100).into_response()
    }
}

async fn serve(router: Router) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(addr)
}

/// The backend answered with a server error.
#[derive(Debug)]
struct BackendError(StatusCode);

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "backend answered {}", self.0)
    }
}

impl std::error::Error for BackendError {}

/// The protected handler: fetch the price from the backend; a 5xx is an error.
async fn quote(
    client: HttpClient,
    backend: SocketAddr,
    request: Request,
) -> Result<Response, BoxError> {
    let item = request
        .uri()
        .path()
        .trim_start_matches("/quote/")
        .to_owned();
    let uri = format!("http://{backend}/price/{item}").parse::<hyper::Uri>()?;
    let answer = client.get(uri).await?;
    let status = answer.status();
    if status.is_server_error() {
        return Err(Box::new(BackendError(status)));
    }
    let body = answer.into_body().collect().await?.to_bytes();
    Ok((
        status,
        format!("quote for {item}: {}", String::from_utf8_lossy(&body)),
    )
        .into_response())
}

/// Each failure type of the layer's error becomes a status code.
async fn to_response(err: HystrixError<BoxError>) -> Response {
    let status = match err.failure_type() {
        FailureType::ShortCircuit => StatusCode::SERVICE_UNAVAILABLE,
        FailureType::Timeout => StatusCode::GATEWAY_TIMEOUT,
        FailureType::RejectedSemaphoreExecution | FailureType::RejectedThreadExecution => {
            StatusCode::TOO_MANY_REQUESTS
        }
        _ => StatusCode::BAD_GATEWAY,
    };
    (status, err.to_string()).into_response()
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let backend = Arc::new(Backend::default());
    let backend_addr = serve(
        Router::new()
            .route("/price/{item}", get(price))
            .with_state(Arc::clone(&backend)),
    )
    .await?;

    let registry = Registry::new();
    let command = Command::builder("GetQuote")
        .group("Quotes")
        .timeout(Duration::from_millis(2000))
        .semaphore_max_concurrent_requests(20)
        .circuit_breaker_request_volume_threshold(10)
        .circuit_breaker_sleep_window(Duration::from_millis(1000))
        .build_in(&registry)?;
    let breaker = command.circuit_breaker();
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();

    let handler = {
        let client = client.clone();
        service_fn(move |request: Request| quote(client.clone(), backend_addr, request))
    };
    let protected = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(to_response))
        .layer(HystrixLayer::new(command.clone()))
        .service(handler);
    let gateway = serve(Router::new().route_service("/quote/{item}", protected)).await?;
    println!("backend on {backend_addr}, gateway on {gateway}");

    let call = |item: u64| {
        let client = client.clone();
        async move {
            let uri = format!("http://{gateway}/quote/{item}").parse::<hyper::Uri>()?;
            Ok::<_, BoxError>(client.get(uri).await?.status().as_u16())
        }
    };

    // 1. Healthy.
    let mut healthy = BTreeMap::new();
    for item in 0..30 {
        *healthy.entry(call(item).await?).or_insert(0) += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    println!("1. backend healthy:    status codes {healthy:?}");
    check(
        healthy.keys().eq([&200]),
        "every quote succeeds while the backend is healthy",
    )?;

    // 2. Failing, until the breaker has been open for a while.
    backend.failing.store(true, Ordering::Relaxed);
    let before = backend.calls.load(Ordering::Relaxed);
    let mut failing = BTreeMap::new();
    let (mut short_circuited, deadline) = (0, Instant::now() + Duration::from_secs(10));
    while short_circuited < 50 && Instant::now() < deadline {
        let status = call(1).await?;
        *failing.entry(status).or_insert(0) += 1;
        if status == 503 {
            short_circuited += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let reached = backend.calls.load(Ordering::Relaxed) - before;
    let sent: u64 = failing.values().sum();
    println!(
        "2. backend failing:    status codes {failing:?}; the backend saw {reached} of {sent} \
         calls, breaker {:?}",
        breaker.status()
    );
    println!(
        "   trip cause: {}",
        breaker
            .trip_cause()
            .map(|c| c.to_string())
            .unwrap_or_default()
    );
    check(
        short_circuited == 50,
        "the breaker opens and answers 503 at once",
    )?;
    check(
        reached < sent,
        "short-circuited calls never reach the backend",
    )?;

    // 3. Recovered: the first call after the sleep window is the trial; it closes the breaker.
    backend.failing.store(false, Ordering::Relaxed);
    let mut recovered = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while breaker.status() != Status::Closed && Instant::now() < deadline {
        *recovered.entry(call(2).await?).or_insert(0) += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for item in 0..10 {
        *recovered.entry(call(item).await?).or_insert(0) += 1;
    }
    println!(
        "3. backend recovered:  status codes {recovered:?}, breaker {:?}",
        breaker.status()
    );
    check(
        breaker.status() == Status::Closed,
        "a successful trial closes the breaker",
    )?;

    let metrics = command.metrics();
    println!(
        "GetQuote totals: {} successes, {} failures, {} short-circuited",
        metrics.cumulative_count(hystrix::EventType::Success),
        metrics.cumulative_count(hystrix::EventType::Failure),
        metrics.cumulative_count(hystrix::EventType::ShortCircuited),
    );
    Ok(())
}

/// Fails the example (non-zero exit) when the behaviour it shows did not happen.
fn check(ok: bool, what: &str) -> Result<(), BoxError> {
    if ok {
        Ok(())
    } else {
        Err(format!("expected: {what}").into())
    }
}
