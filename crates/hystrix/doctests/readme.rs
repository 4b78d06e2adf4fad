//! What the README's Rust snippets of hystrix-rs leave out, to run each as a doc test (see
//! build.rs): a prelude, then one section per snippet, named by the snippet's
//! `<!-- doctest: NAME -->` line; `// [README snippet]` is where the snippet goes.
//!
//! The prelude brings in the crate root and std, nothing else of hystrix: a snippet that
//! names a hystrix item outside the root imports it itself, so its readers can.

use hystrix::*;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::time::{Duration, SystemTime};

/// The error of the made-up dependencies below.
#[derive(Debug)]
struct MyError;

impl std::fmt::Display for MyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dependency failed")
    }
}

impl std::error::Error for MyError {}

// doctest: quick-start-blocking
#[derive(Clone)]
struct UserClient;

impl UserClient {
    fn get_user_name(&self, id: u64) -> Result<String, MyError> {
        Ok(format!("user {id}"))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = UserClient;
    // [README snippet]
    assert_eq!(name, "user 42");
    Ok(())
}

// doctest: quick-start-async
struct PriceClient;

impl PriceClient {
    async fn price(&self, item: u64) -> Result<u64, MyError> {
        Ok(item * 100)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let get_price = Command::builder("GetPrice").group("Pricing").build()?;
    let (client, item) = (PriceClient, 7);
    // [README snippet]
    assert_eq!(price, 700);
    Ok(())
}

// doctest: tower-layer feature=tower
// The tower crate, not the glob-imported hystrix::tower module.
use ::tower;
use axum::body::Body;
use axum::http::{Request, Response};
use tower::{Service, ServiceExt};

#[derive(Clone, Debug, PartialEq)]
struct Price(Option<u64>);

impl Price {
    fn unknown() -> Self {
        Price(None)
    }
}

fn degraded_response(err: &HystrixError<BoxError>) -> Response<Body> {
    Response::new(Body::from(format!("degraded: {err}")))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let get_price = Command::builder("GetPrice").group("Pricing").build()?;
    let price_client = tower::service_fn(|item: u64| async move {
        if item == 0 {
            Err(MyError)
        } else {
            Ok(Price(Some(item * 100)))
        }
    });
    // [README snippet]
    let mut svc = svc;
    assert_eq!(svc.ready().await?.call(7).await?, Price(Some(700)));
    assert_eq!(svc.ready().await?.call(0).await?, Price::unknown());

    let http = tower::service_fn(|_: Request<Body>| async {
        Err::<Response<Body>, BoxError>("connection refused".into())
    });
    let mut per_host = tower::ServiceBuilder::new().layer(layer).service(http);
    let request = Request::get("http://example.com/").body(Body::empty())?;
    let response = per_host.ready().await?.call(request).await?;
    assert!(response.status().is_success());
    Ok(())
}

// doctest: stream-command
struct Feed;

impl Feed {
    fn subscribe(
        &self,
        symbol: &str,
    ) -> impl futures::Stream<Item = Result<u64, MyError>> + Send + 'static {
        let prices = if symbol == "ACME" {
            vec![Ok(1), Ok(2), Ok(3), Err(MyError)]
        } else {
            vec![]
        };
        futures::stream::iter(prices)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (feed, symbol, last_known) = (Feed, "ACME", 0);
    // [README snippet]
    let events = result.map(|result| format!("[{}]", result.execution_events()));
    assert_eq!(
        events.as_deref(),
        Some("[EMITx3, FAILURE, FALLBACK_EMIT, FALLBACK_SUCCESS]")
    );
    Ok(())
}

// doctest: configuration no_run feature=reload
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // [README snippet]
    drop(watcher);
    Ok(())
}

// doctest: breaker-and-metrics
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let get_user = Command::builder("GetUser")
        .group("UserService")
        .build_in(&Registry::new())?;
    // [README snippet]
    assert!(get_user.circuit_breaker().is_open());
    Ok(())
}

// doctest: cloud-pattern
#[derive(Debug)]
struct HttpError {
    status: u16,
    retry_after: Option<String>,
}

fn ping_health() -> bool {
    true
}

fn requeue(_description: String) {}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let registry = Registry::new();
    let f = || Ok::<_, HttpError>("rated");
    let g = || Ok::<_, std::io::Error>("fetched");
    let (request_json, host) = (r#"{"rating": 5}"#, "api.example.com");
    // [README snippet]
    Ok(())
}

// doctest: retry
#[derive(Debug)]
enum ApiError {
    Busy { retry_after: Duration },
    NotFound,
    Down,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for ApiError {}

/// Fails twice (down, then busy for 200 ms), then answers.
#[derive(Clone, Default)]
struct UserClient(std::sync::Arc<std::sync::atomic::AtomicU32>);

impl UserClient {
    async fn get_user(&self, id: u64) -> Result<String, ApiError> {
        match self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => Err(ApiError::Down),
            1 => Err(ApiError::Busy {
                retry_after: Duration::from_millis(200),
            }),
            2 if id == 0 => Err(ApiError::NotFound),
            _ => Ok(format!("user {id}")),
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let client = UserClient::default();
    // [README snippet]
    // Attempts at 0 ms, after 50 ms (backoff), and after 200 ms (the Retry-After wins over 100).
    let driver = std::thread::spawn({
        let test = test.clone();
        move || {
            for _ in 0..2 {
                test.advance_to_next_timer_when_pending(1).unwrap();
            }
        }
    });
    let outcome = futures::executor::block_on(outcome);
    driver.join().unwrap();
    assert_eq!(outcome.response().as_ref().unwrap(), "user 7");
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS, FAILUREx2, RETRYx2"
    );
    assert_eq!(outcome.execution_result().total_time_ms(), 250);
    Ok(())
}

// doctest: hedging
/// Replica 1 answers in 500 ms, replica 2 in 5 ms (on the registry's clock).
#[derive(Clone)]
struct Replicas {
    clock: std::sync::Arc<dyn hystrix::clock::Clock>,
    calls: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl Replicas {
    async fn search(&self, query: &str) -> Result<String, std::io::Error> {
        let replica = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let ms = if replica == 1 { 500 } else { 5 };
        hystrix::clock::sleep(&self.clock, Duration::from_millis(ms)).await;
        Ok(format!("{query}: results from replica {replica}"))
    }
}

/// Polls `future` to its end, moving the manual clock to the next timer whenever it waits.
fn drive<F: std::future::Future>(test: &testing::TestRegistry, future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = futures::task::noop_waker();
    loop {
        let mut cx = std::task::Context::from_waker(&waker);
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        test.clock().advance_to_next_timer().unwrap();
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let replicas = Replicas {
        clock: std::sync::Arc::clone(test.registry().clock()),
        calls: Default::default(),
    };
    let context = hystrix::context::RequestContext::new();
    let _entered = context.enter();
    // [README snippet]
    let outcome = drive(&test, outcome);
    assert_eq!(outcome.response().as_ref().unwrap(), "rust: results from replica 2");
    assert_eq!(outcome.execution_result().total_time_ms(), 25);
    assert_eq!(context.request_log().to_string(), "Search[SUCCESS, HEDGE, HEDGE_CANCELLED][5ms]");
    Ok(())
}

// doctest: adaptive-limits
/// A payment gateway whose charges take 100 ms of the registry's clock.
struct Gateway {
    clock: std::sync::Arc<dyn hystrix::clock::Clock>,
}

impl Gateway {
    fn charge(&self, id: u32) -> impl std::future::Future<Output = Result<String, std::io::Error>> + Send + 'static {
        let clock = std::sync::Arc::clone(&self.clock);
        async move {
            hystrix::clock::sleep(&clock, Duration::from_millis(100)).await;
            Ok(format!("charge {id} done"))
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let gateway = Gateway {
        clock: std::sync::Arc::clone(test.registry().clock()),
    };
    // [README snippet]
    // The clock has not moved: both charges are still in flight.
    drop(in_flight);
    Ok(())
}

// doctest: priorities
/// A backend whose calls take 100 ms of the registry's clock.
struct SlowBackend {
    clock: std::sync::Arc<dyn hystrix::clock::Clock>,
}

impl SlowBackend {
    fn call(&self) -> impl std::future::Future<Output = Result<&'static str, MyError>> + Send + 'static {
        let clock = std::sync::Arc::clone(&self.clock);
        async move {
            hystrix::clock::sleep(&clock, Duration::from_millis(100)).await;
            Ok("results")
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let backend = SlowBackend {
        clock: std::sync::Arc::clone(test.registry().clock()),
    };
    // [README snippet]
    assert_eq!(found, "results");
    let _ = layer;
    drop(held);
    Ok(())
}

// doctest: throttling
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    // [README snippet]
    Ok(())
}

// doctest: chaos
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // [README snippet]
    Ok(())
}

// doctest: breaker-windows
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    // [README snippet]
    Ok(())
}

// doctest: request-context
use std::net::SocketAddr;

fn get(backend: SocketAddr, id: u32) -> Result<String, MyError> {
    if backend.port() == 2 {
        Err(MyError)
    } else {
        Ok(format!("movie {id}"))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let registry = Registry::new();
    let semaphore = |key: &str| {
        Command::builder(key)
            .group("Movies")
            .isolation(IsolationStrategy::Semaphore)
            .build_in(&registry)
    };
    let (get_title, get_rating) = (semaphore("GetTitle")?, semaphore("GetRating")?);
    let (catalog, ratings, id): (SocketAddr, SocketAddr, u32) =
        (([127, 0, 0, 1], 1).into(), ([127, 0, 0, 1], 2).into(), 7);
    // [README snippet]
    assert_eq!(
        ctx.request_log().to_string(),
        "GetTitle[SUCCESS][0ms], GetRating[FAILURE, FALLBACK_SUCCESS][0ms]"
    );
    Ok(())
}

// doctest: request-cache
#[derive(Debug, PartialEq)]
struct User(u32);

fn fetch_user(id: u32) -> Result<User, MyError> {
    Ok(User(id))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let get_user = Command::builder("GetUser")
        .group("UserService")
        .build_in(&Registry::new())?;
    // [README snippet]
    assert!(std::sync::Arc::ptr_eq(&user, &again));
    Ok(())
}

// doctest: collapser
use std::net::SocketAddr;

async fn fetch_ratings(_backend: SocketAddr, ids: Vec<u32>) -> Result<HashMap<u32, f64>, MyError> {
    Ok(ids
        .into_iter()
        .map(|id| (id, f64::from(id) / 2.0))
        .collect())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let get_ratings = Command::builder("GetRatings")
        .group("Ratings")
        .isolation(IsolationStrategy::Semaphore)
        .build_in(&Registry::new())?;
    let addr: SocketAddr = ([127, 0, 0, 1], 7).into();
    // [README snippet]
    assert_eq!(*rating, 3.5);
    Ok(())
}

// doctest: metrics-facade feature=metrics
fn main() {
    // [README snippet]
    drop(registry);
}
