//! An axum gateway whose `/quote/{item}` handler is protected by a `HystrixLayer`, in front of
//! a flaky price backend. Everything runs on 127.0.0.1.
//!
//! Run with `cargo run --features http --example tower_axum_server`.
//!
//! The handler is a plain axum handler: it forwards the backend's answer, status and body. The
//! layer judges the responses by their status (`classify_http`: a 5xx is a failure) and
//! answers its own errors with a status (`errors_as_responses`: 503 when short-circuited), so
//! it goes into `Router::layer` as is, without `HandleErrorLayer`. Four phases of traffic go
//! through the gateway:
//! 1. the backend is healthy: every quote is a 200;
//! 2. the backend fails: the first calls get its 500 and its body (they reached it, and each
//!    counts as a failure), then the breaker opens and the gateway answers 503 at once
//!    without calling the backend;
//! 3. the backend recovers: after the sleep window one trial call goes through, succeeds, and
//!    the breaker closes: 200s again;
//! 4. the backend is overloaded and answers 503 with `Retry-After: 5`: that one answer opens
//!    the breaker at once, and the backend sees no other call for 5 s.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::http::header::RETRY_AFTER;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use hystrix::tower::HystrixLayer;
use hystrix::{BoxError, Command, Registry, Status};
use tokio::net::TcpListener;

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

const HEALTHY: u8 = 0;
const FAILING: u8 = 1;
const OVERLOADED: u8 = 2;

/// The backend: healthy, failing or overloaded, and how many calls it saw.
#[derive(Default)]
struct Backend {
    state: AtomicU8,
    calls: AtomicU64,
}

impl Backend {
    fn set(&self, state: u8) {
        self.state.store(state, Ordering::Relaxed);
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

async fn price(State(backend): State<Arc<Backend>>, Path(item): Path<u64>) -> Response {
    backend.calls.fetch_add(1, Ordering::Relaxed);
    match backend.state.load(Ordering::Relaxed) {
        FAILING => (StatusCode::INTERNAL_SERVER_ERROR, "database down").into_response(),
        OVERLOADED => (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", "5")],
            "overloaded",
        )
            .into_response(),
        _ => format!("{}", item * 100).into_response(),
    }
}

async fn serve(router: Router) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(addr)
}

/// The gateway's state: the HTTP client and the backend's address.
#[derive(Clone)]
struct Gateway {
    client: HttpClient,
    backend: SocketAddr,
}

/// The protected handler: fetches the price from the backend and answers with the backend's
/// status, body and `Retry-After`, whatever they are (the layer judges the status).
async fn quote(
    State(gateway): State<Gateway>,
    Path(item): Path<u64>,
) -> Result<Response, (StatusCode, String)> {
    let bad_gateway = |err: &dyn std::fmt::Display| (StatusCode::BAD_GATEWAY, err.to_string());
    let uri = format!("http://{}/price/{item}", gateway.backend)
        .parse::<hyper::Uri>()
        .map_err(|err| bad_gateway(&err))?;
    let answer = gateway
        .client
        .get(uri)
        .await
        .map_err(|err| bad_gateway(&err))?;
    let status = answer.status();
    let retry_after = answer.headers().get(RETRY_AFTER).cloned();
    let body = answer
        .into_body()
        .collect()
        .await
        .map_err(|err| bad_gateway(&err))?
        .to_bytes();
    let mut response = (
        status,
        format!("quote for {item}: {}", String::from_utf8_lossy(&body)),
    )
        .into_response();
    if let Some(retry_after) = retry_after {
        response.headers_mut().insert(RETRY_AFTER, retry_after);
    }
    Ok(response)
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

    let app = Router::new()
        .route("/quote/{item}", get(quote))
        .layer(
            HystrixLayer::new(command.clone())
                .classify_http() // a 5xx is a failure; 503 + Retry-After trips at once
                .errors_as_responses(), // short-circuited: 503, timed out: 504, ...
        )
        .with_state(Gateway {
            client: client.clone(),
            backend: backend_addr,
        });
    let gateway = serve(app).await?;
    println!("backend on {backend_addr}, gateway on {gateway}");

    // A call of the gateway: its status and body.
    let call = |item: u64| {
        let client = client.clone();
        async move {
            let uri = format!("http://{gateway}/quote/{item}").parse::<hyper::Uri>()?;
            let response = client.get(uri).await?;
            let status = response.status().as_u16();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, BoxError>((status, String::from_utf8_lossy(&body).into_owned()))
        }
    };

    // 1. Healthy.
    let mut healthy = BTreeMap::new();
    for item in 0..30 {
        *healthy.entry(call(item).await?.0).or_insert(0) += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    println!("1. backend healthy:    status codes {healthy:?}");
    check(
        healthy.keys().eq([&200]),
        "every quote succeeds while the backend is healthy",
    )?;

    // 2. Failing, until the breaker has been open for a while.
    backend.set(FAILING);
    let before = backend.calls();
    let mut failing = BTreeMap::new();
    let mut bodies = BTreeMap::new();
    let (mut short_circuited, deadline) = (0, Instant::now() + Duration::from_secs(10));
    while short_circuited < 50 && Instant::now() < deadline {
        let (status, body) = call(1).await?;
        *failing.entry(status).or_insert(0) += 1;
        bodies.entry(status).or_insert(body);
        if status == 503 {
            short_circuited += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let reached = backend.calls() - before;
    let sent: u64 = failing.values().sum();
    println!(
        "2. backend failing:    status codes {failing:?}; the backend saw {reached} of {sent} \
         calls, breaker {:?}",
        breaker.status()
    );
    println!("   a 500's body: {:?}", bodies.get(&500));
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
        failing.get(&500) == Some(&reached),
        "every call that reached the backend got its 500",
    )?;
    check(
        bodies.get(&500).map(String::as_str) == Some("quote for 1: database down"),
        "the backend's 500 reaches the client with its body",
    )?;
    check(
        reached < sent,
        "short-circuited calls never reach the backend",
    )?;

    // 3. Recovered: the first call after the sleep window is the trial; it closes the breaker.
    backend.set(HEALTHY);
    let mut recovered = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while breaker.status() != Status::Closed && Instant::now() < deadline {
        *recovered.entry(call(2).await?.0).or_insert(0) += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for item in 0..10 {
        *recovered.entry(call(item).await?.0).or_insert(0) += 1;
    }
    println!(
        "3. backend recovered:  status codes {recovered:?}, breaker {:?}",
        breaker.status()
    );
    check(
        breaker.status() == Status::Closed,
        "a successful trial closes the breaker",
    )?;

    // 4. Overloaded: one 503 with Retry-After: 5 opens the breaker at once.
    backend.set(OVERLOADED);
    let before = backend.calls();
    let mut overloaded = BTreeMap::new();
    for item in 0..20 {
        *overloaded.entry(call(item).await?.0).or_insert(0) += 1;
    }
    let reached = backend.calls() - before;
    println!(
        "4. backend overloaded: status codes {overloaded:?}; the backend saw {reached} of 20 \
         calls, breaker {:?}",
        breaker.status()
    );
    check(
        reached == 1 && breaker.status() == Status::Open,
        "one 503 with Retry-After opens the breaker at once",
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
