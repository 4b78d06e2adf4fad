//! hyper-util's HTTP client as a tower `Service`, wrapped in a keyed `HystrixLayer`: one
//! command, and so one circuit breaker, per host. Everything runs on 127.0.0.1.
//!
//! Run with `cargo run --example tower_http_client`.
//!
//! Two loopback services play two hosts: `inventory` answers, `reviews` fails with 503 for a
//! while. A product page fetches both, product after product. The layer's key function picks
//! the command by the request's host, so the failing `reviews` host trips its own breaker and
//! is then skipped at once (the page renders without reviews: the fallback), while `inventory`
//! keeps being called normally. When `reviews` recovers, its breaker's trial closes it again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper::body::{Bytes, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use hystrix::command::KeyedCommands;
use hystrix::tower::HystrixLayer;
use hystrix::{BoxError, Command, HystrixError, IsolationStrategy, Registry, Status};
use tokio::net::TcpListener;
use tower::{Service, ServiceBuilder, ServiceExt};

/// A loopback host: answers `body`, or 503 while `down`; counts the calls it sees.
#[derive(Default)]
struct Host {
    body: &'static str,
    down: AtomicBool,
    calls: AtomicU64,
}

async fn answer(State(host): State<Arc<Host>>) -> Response {
    host.calls.fetch_add(1, Ordering::Relaxed);
    if host.down.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "overloaded").into_response()
    } else {
        host.body.into_response()
    }
}

async fn start(host: &Arc<Host>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let router = Router::new()
        .route("/{*path}", get(answer))
        .with_state(Arc::clone(host));
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(addr)
}

/// A server error is an error for the breaker; otherwise the body as text.
async fn read_body(response: hyper::Response<Incoming>) -> Result<String, BoxError> {
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    let text = String::from_utf8_lossy(&body).into_owned();
    if status.is_server_error() {
        return Err(format!("{status}: {text}").into());
    }
    Ok(text)
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
            .fallback_fn(|err: &HystrixError<BoxError>| {
                // Degrade: the page renders without this part.
                Ok::<_, BoxError>(format!("(unavailable: {})", err.failure_type()))
            }),
        )
        .and_then(read_body)
        .service(client);

    let mut get = async |addr: SocketAddr, path: String| {
        let request = Request::get(format!("http://{addr}/{path}")).body(Empty::new())?;
        http.ready()
            .await?
            .call(request)
            .await
            .map_err(BoxError::from)
    };

    let breaker = |addr: SocketAddr| {
        registry
            .circuit_breaker(&format!("Http-{addr}"))
            .map(|b| b.status())
    };
    let mut pages: Vec<String> = Vec::new();
    let mut product = 0;
    let mut page = async |pages: &mut Vec<String>| -> Result<(), BoxError> {
        let stock = get(inventory_addr, format!("stock/{product}")).await?;
        let stars = get(reviews_addr, format!("reviews/{product}")).await?;
        pages.push(format!("product {product:>3}: {stock:<12} | {stars}"));
        product += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(())
    };

    // Reviews down: pages render without them; the reviews breaker opens.
    reviews.down.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(10);
    while pages.iter().filter(|p| p.contains("SHORTCIRCUIT")).count() < 10
        && Instant::now() < deadline
    {
        page(&mut pages).await?;
    }
    let tripped_after = pages.len();
    // Reviews back: after the sleep window a trial closes the breaker.
    reviews.down.store(false, Ordering::Relaxed);
    while breaker(reviews_addr) != Some(Status::Closed) && Instant::now() < deadline {
        page(&mut pages).await?;
    }
    for _ in 0..5 {
        page(&mut pages).await?;
    }
    let shown = [
        0,
        1,
        tripped_after - 2,
        tripped_after - 1,
        pages.len() - 2,
        pages.len() - 1,
    ];
    for index in shown {
        println!("{}", pages[index]);
    }
    let total = pages.len() as u64;

    let metrics = |addr: SocketAddr| registry.command_metrics(&format!("Http-{addr}"));
    let (inv, rev) = (metrics(inventory_addr), metrics(reviews_addr));
    let count = |m: &Option<hystrix::CommandMetrics>, event| {
        m.as_ref().map_or(0, |m| m.cumulative_count(event))
    };
    println!(
        "inventory: {} calls seen, breaker {:?}, {} successes",
        inventory.calls.load(Ordering::Relaxed),
        breaker(inventory_addr),
        count(&inv, hystrix::EventType::Success)
    );
    println!(
        "reviews:   {} calls seen of {total}, breaker {:?}, {} failures, {} short-circuited, {} \
         fallbacks",
        reviews.calls.load(Ordering::Relaxed),
        breaker(reviews_addr),
        count(&rev, hystrix::EventType::Failure),
        count(&rev, hystrix::EventType::ShortCircuited),
        count(&rev, hystrix::EventType::FallbackSuccess)
    );
    println!("commands per host: {:?}", per_host.keys());

    check(
        count(&inv, hystrix::EventType::Success) == total,
        "inventory, a healthy host, is never affected by the other host's breaker",
    )?;
    check(
        count(&rev, hystrix::EventType::ShortCircuited) > 0
            && reviews.calls.load(Ordering::Relaxed) < total,
        "the reviews breaker opens and short-circuited calls never reach it",
    )?;
    check(
        breaker(reviews_addr) == Some(Status::Closed),
        "the reviews breaker closes after it recovers",
    )?;
    check(
        pages.last().is_some_and(|page| page.ends_with("4.5 stars")),
        "the last page has its reviews again",
    )?;
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
