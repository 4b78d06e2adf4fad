//! hyper-util's HTTP client as a tower `Service`, wrapped in a keyed `HystrixLayer`: one
//! command, and so one circuit breaker, per host. Everything runs on 127.0.0.1.
//!
//! Run with `cargo run --features http --example tower_http_client`.
//!
//! Two loopback services play two hosts, `inventory` and `reviews`. A product page fetches
//! both, product after product. The layer judges each response by its status
//! (`classify_http`), retries GETs once (`retry_with(IdempotentHttp)`, `retry.maxAttempts`
//! 2) and degrades a failed part of the page (its fallback):
//! 1. `reviews` answers 503: each GET is tried twice, the pages render without reviews, and
//!    the reviews breaker opens (then its calls are skipped at once) while `inventory` keeps
//!    being called normally;
//! 2. `reviews` recovers: after the sleep window a trial closes its breaker;
//! 3. `inventory` is overloaded and answers 503 with `Retry-After: 5`: that one answer opens
//!    its breaker at once, for at least 5 s, and it sees no other call meanwhile (the retry
//!    would have to wait past the call's 2 s timeout, so the fallback answers at once);
//! 4. a POST that gets a 503 is sent once, never retried.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper::body::{Bytes, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use hystrix::command::KeyedCommands;
use hystrix::tower::{HttpFailure, HystrixLayer, IdempotentHttp};
use hystrix::{BoxError, Command, EventType, HystrixError, IsolationStrategy, Registry, Status};
use tokio::net::TcpListener;
use tower::{Service, ServiceBuilder, ServiceExt};

const UP: u8 = 0;
const DOWN: u8 = 1;
const OVERLOADED: u8 = 2;

/// A loopback host: answers `body`, 503 while DOWN, 503 with `Retry-After: 5` while
/// OVERLOADED; counts the calls it sees.
#[derive(Default)]
struct Host {
    body: &'static str,
    state: AtomicU8,
    calls: AtomicU64,
}

impl Host {
    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

async fn answer(State(host): State<Arc<Host>>) -> Response {
    host.calls.fetch_add(1, Ordering::Relaxed);
    match host.state.load(Ordering::Relaxed) {
        DOWN => (StatusCode::SERVICE_UNAVAILABLE, "down").into_response(),
        OVERLOADED => (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", "5")],
            "overloaded",
        )
            .into_response(),
        _ => host.body.into_response(),
    }
}

async fn start(host: &Arc<Host>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let router = Router::new()
        .route("/{*path}", any(answer))
        .with_state(Arc::clone(host));
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(addr)
}

/// Reads the body within the call (so the command's timeout covers it too): a response of
/// text, which a fallback can make as well.
async fn buffered(
    response: hyper::Response<Incoming>,
) -> Result<hyper::Response<String>, BoxError> {
    let (parts, body) = response.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(hyper::Response::from_parts(
        parts,
        String::from_utf8_lossy(&body).into_owned(),
    ))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let inventory = Arc::new(Host {
        body: "12 in stock",
        ..Host::default()
    });
    let reviews = Arc::new(Host {
        body: "4.5 stars",
        ..Host::default()
    });
    let (inventory_addr, reviews_addr) = (start(&inventory).await?, start(&reviews).await?);

    let registry = Registry::new();
    // One command per host, made on first use.
    let per_host = KeyedCommands::builder(|host| {
        Command::builder(format!("Http-{host}"))
            .group("Http")
            .isolation(IsolationStrategy::Semaphore)
            .timeout(Duration::from_millis(2000))
            .circuit_breaker_request_volume_threshold(10)
            .circuit_breaker_sleep_window(Duration::from_millis(300))
            .property("retry.maxAttempts", 2)
            .property("retry.backoff.initialInMilliseconds", 5)
    })
    .registry(&registry)
    .build();
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut http = ServiceBuilder::new()
        .layer(
            // The key is borrowed from the request: no allocation per call.
            HystrixLayer::keyed(per_host.clone(), |request: &Request<Empty<Bytes>>| {
                request
                    .uri()
                    .authority()
                    .map_or("no-authority", |authority| authority.as_str())
                    .into()
            })
            .classify_http() // 5xx, 408, 429 are failures; 503 + Retry-After trips at once
            .retry_with(IdempotentHttp) // GETs may be retried, POSTs never
            .fallback_fn(|err: &HystrixError<HttpFailure<BoxError, String>>| {
                // Degrade: the page renders without this part.
                let why = match err.cause().and_then(HttpFailure::response) {
                    Some(response) => response.status().to_string(),
                    None => err.failure_type().to_string(),
                };
                Ok::<_, BoxError>(hyper::Response::new(format!("(unavailable: {why})")))
            }),
        )
        .and_then(buffered)
        .service(client);

    let mut send = async |request: Request<Empty<Bytes>>| {
        let response = http.ready().await?.call(request).await?;
        Ok::<_, BoxError>(response.into_body())
    };
    let get = |addr: SocketAddr, path: String| {
        Request::get(format!("http://{addr}/{path}")).body(Empty::new())
    };

    let breaker = |addr: SocketAddr| {
        registry
            .circuit_breaker(&format!("Http-{addr}"))
            .map(|b| b.status())
    };
    let metrics = |addr: SocketAddr| registry.command_metrics(&format!("Http-{addr}"));
    let count = |addr: SocketAddr, event| metrics(addr).map_or(0, |m| m.cumulative_count(event));
    let mut pages: Vec<String> = Vec::new();
    let mut product = 0;
    let mut page = async |pages: &mut Vec<String>| -> Result<(), BoxError> {
        let stock = send(get(inventory_addr, format!("stock/{product}"))?).await?;
        let stars = send(get(reviews_addr, format!("reviews/{product}"))?).await?;
        pages.push(format!("product {product:>3}: {stock:<38} | {stars}"));
        product += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(())
    };

    // 1. Reviews down: pages render without them; the reviews breaker opens.
    reviews.state.store(DOWN, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(10);
    while pages.iter().filter(|p| p.contains("SHORTCIRCUIT")).count() < 10
        && Instant::now() < deadline
    {
        page(&mut pages).await?;
    }
    let tripped_after = pages.len();
    let failed_calls = pages
        .iter()
        .filter(|p| p.ends_with("503 Service Unavailable)"))
        .count() as u64;
    println!("1. reviews down:");
    for index in [0, 1, tripped_after - 2, tripped_after - 1] {
        println!("   {}", pages[index]);
    }
    println!(
        "   reviews saw {} calls for {failed_calls} failed pages (each GET tried twice), \
         breaker {:?}",
        reviews.calls(),
        breaker(reviews_addr)
    );
    // The call during which the breaker opened may have made one attempt only.
    check(
        (2 * failed_calls..=2 * failed_calls + 1).contains(&reviews.calls()),
        "each failed GET was sent twice (one retry)",
    )?;
    check(
        count(reviews_addr, EventType::ShortCircuited) > 0
            && breaker(inventory_addr) == Some(Status::Closed),
        "the reviews breaker opens, inventory's stays closed",
    )?;

    // 2. Reviews back: after the sleep window a trial closes the breaker.
    reviews.state.store(UP, Ordering::Relaxed);
    while breaker(reviews_addr) != Some(Status::Closed) && Instant::now() < deadline {
        page(&mut pages).await?;
    }
    for _ in 0..3 {
        page(&mut pages).await?;
    }
    println!("2. reviews recovered:");
    println!("   {}", pages[pages.len() - 1]);
    check(
        breaker(reviews_addr) == Some(Status::Closed),
        "the reviews breaker closes after it recovers",
    )?;
    check(
        pages.last().is_some_and(|page| page.ends_with("4.5 stars")),
        "the last page has its reviews again",
    )?;

    // 3. Inventory overloaded: one 503 with Retry-After: 5 opens its breaker for 5 s.
    inventory.state.store(OVERLOADED, Ordering::Relaxed);
    let (before, since) = (inventory.calls(), Instant::now());
    let first = pages.len();
    while since.elapsed() < Duration::from_millis(800) {
        page(&mut pages).await?;
    }
    let seen = inventory.calls() - before;
    println!("3. inventory overloaded (503, Retry-After: 5):");
    println!("   {}", pages[first]);
    println!("   {}", pages[pages.len() - 1]);
    println!(
        "   inventory saw {seen} call(s) in 800 ms ({} pages), breaker {:?}",
        pages.len() - first,
        breaker(inventory_addr)
    );
    check(
        seen == 1,
        "one 503 with Retry-After opens the breaker at once, not retried",
    )?;
    check(
        breaker(inventory_addr) == Some(Status::Open),
        "the inventory breaker stays open for the Retry-After",
    )?;

    // 4. A POST answered 503 is sent once.
    reviews.state.store(DOWN, Ordering::Relaxed);
    let before = reviews.calls();
    let post = Request::post(format!("http://{reviews_addr}/reviews/1")).body(Empty::new())?;
    let answer = send(post).await?;
    println!(
        "4. POST to reviews while down: {answer}, reviews saw {} call(s)",
        reviews.calls() - before
    );
    check(reviews.calls() - before == 1, "a POST is never retried")?;

    println!(
        "reviews: {} failures, {} short-circuited, {} retries, {} fallbacks; commands per host: \
         {:?}",
        count(reviews_addr, EventType::Failure),
        count(reviews_addr, EventType::ShortCircuited),
        count(reviews_addr, EventType::Retry),
        count(reviews_addr, EventType::FallbackSuccess),
        per_host.keys()
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
