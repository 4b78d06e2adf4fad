//! The setup of the Rust snippets of docs/http.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`. A section with the `http`
//! feature imports `::http`, the http crate, over the glob-imported `hystrix::http` module
//! (without the feature there is no http crate to import).

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
    // [snippet]
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

// doctest: http-one-liners feature=http
#[allow(unused_imports)]
use ::http;
use ::tower;
use tower::Layer;

fn main() -> Result<(), BoxError> {
    let command = Command::builder("OneLiners").group("Http").build()?;
    // [snippet]
    let backend = tower::service_fn(|_: http::Request<String>| async {
        Ok::<_, MyError>(http::Response::new(String::new()))
    });
    // Each line changes the layer's type, and so what its service does.
    let _server = server.layer(backend.clone());
    let _client = client.layer(backend);
    Ok(())
}

// doctest: http-axum-server feature=http
#[allow(unused_imports)]
use ::http;
use ::tower;
use axum::body::Body;
use axum::extract::{Path, Request};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Router, response::IntoResponse, response::Response};
use tower::ServiceExt;

/// Answers the backend's 500 for item 0, a price otherwise.
async fn quote(Path(item): Path<u64>) -> Response {
    match item {
        0 => (StatusCode::INTERNAL_SERVER_ERROR, "database down").into_response(),
        item => format!("{}", item * 100).into_response(),
    }
}

async fn send(app: &Router, path: &str) -> Result<(u16, String), BoxError> {
    let request = Request::get(path).body(Body::empty())?;
    let response = app.clone().oneshot(request).await?;
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), 1024).await?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // [snippet]
    assert_eq!(send(&app, "/quote/7").await?, (200, "700".to_owned()));
    // A route without the layer: no command, no 503 below.
    assert_eq!(send(&app, "/health").await?, (200, "ok".to_owned()));
    // A 500 of the handler is counted as a failure, and returned with its body.
    assert_eq!(send(&app, "/quote/0").await?, (500, "database down".to_owned()));
    breaker.force_open();
    assert_eq!(send(&app, "/quote/7").await?, (503, String::new()));
    assert_eq!(send(&app, "/health").await?, (200, "ok".to_owned()));
    Ok(())
}

// doctest: http-hyper-client feature=http
#[allow(unused_imports)]
use ::http;
use ::tower;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tower::{Service, ServiceExt};

/// A backend on 127.0.0.1 that answers every request 503 "busy" (no Retry-After) and counts
/// them; its address.
async fn busy_backend(calls: Arc<AtomicU32>) -> std::io::Result<std::net::SocketAddr> {
    let app = axum::Router::new().fallback(move || {
        calls.fetch_add(1, Ordering::SeqCst);
        async { (axum::http::StatusCode::SERVICE_UNAVAILABLE, "busy") }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let calls = Arc::new(AtomicU32::new(0));
    let backend = busy_backend(Arc::clone(&calls)).await?;
    // [snippet]
    let url = format!("http://{backend}/stock/7");
    let get = Request::get(url.as_str()).body(Full::default())?;
    let response = client.ready().await?.call(get).await?;
    assert_eq!(response.into_body(), "unavailable: 503 Service Unavailable");
    assert_eq!(calls.swap(0, Ordering::SeqCst), 2, "a GET: two attempts");
    let post = Request::post(url.as_str()).body(Full::default())?;
    let response = client.ready().await?.call(post).await?;
    assert_eq!(response.into_body(), "unavailable: 503 Service Unavailable");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "a POST: one");
    let metrics = Registry::global().command_metrics(&format!("Http-{backend}"));
    assert_eq!(metrics.map(|m| m.cumulative_count(EventType::Failure)), Some(3));
    Ok(())
}

// doctest: http-reqwest feature=http
#[allow(unused_imports)]
use ::http;
use std::sync::{Arc, Mutex};

/// A stand-in for reqwest's `Client`, `RequestBuilder`, `Response` and `Error` (its
/// `status()` and `headers()` are the `http` crate's types): answers the queued responses in
/// turn.
mod reqwest {
    use std::sync::Mutex;

    pub struct Client(pub Mutex<Vec<http::Response<String>>>);

    pub struct RequestBuilder<'c>(&'c Client);

    pub struct Response(http::Response<String>);

    #[derive(Debug)]
    pub struct Error;

    impl Client {
        pub fn get(&self, _url: &str) -> RequestBuilder<'_> {
            RequestBuilder(self)
        }
    }

    impl RequestBuilder<'_> {
        pub async fn send(self) -> Result<Response, Error> {
            let mut queue = self.0.0.lock().map_err(|_| Error)?;
            if queue.is_empty() {
                return Err(Error);
            }
            Ok(Response(queue.remove(0)))
        }
    }

    impl Response {
        pub fn status(&self) -> http::StatusCode {
            self.0.status()
        }

        pub fn headers(&self) -> &http::HeaderMap {
            self.0.headers()
        }

        pub async fn text(self) -> Result<String, Error> {
            Ok(self.0.into_body())
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let answer = |status: u16, retry_after: Option<&str>, body: &str| {
        let mut response = http::Response::builder().status(status);
        if let Some(delay) = retry_after {
            response = response.header("retry-after", delay);
        }
        response.body(body.to_owned())
    };
    let clients = Arc::new(reqwest::Client(Mutex::new(vec![
        answer(200, None, "ada")?,
        answer(404, None, "no such user")?,
        answer(503, Some("30"), "maintenance")?,
    ])));
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let client = Arc::clone(&clients);
        // [snippet]
        outcomes.push(match name {
            Ok(name) => name,
            Err(err) => err.failure_type().name().to_owned(),
        });
        if outcomes.len() == 3 {
            assert!(get_user.circuit_breaker().is_open(), "the 503 + Retry-After tripped it");
        }
    }
    assert_eq!(outcomes, ["ada", "BAD_REQUEST_EXCEPTION", "COMMAND_EXCEPTION"]);
    Ok(())
}

// doctest: http-idempotency feature=http
#[allow(unused_imports)]
use ::http;
use ::tower;
use hystrix::testing::TestRegistry;
use hystrix::tower::HystrixLayer;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tower::{Layer, Service, ServiceExt};

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let test = TestRegistry::new();
    let command = Command::builder("Orders")
        .group("Http")
        .isolation(IsolationStrategy::Semaphore)
        .property("retry.maxAttempts", 3)
        .property("retry.backoff.initialInMilliseconds", 0)
        .build_in(test.registry())?;
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let backend = tower::service_fn(move |_: http::Request<String>| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { http::Response::builder().status(502).body(String::new()) }
    });
    let body = String::new();
    // [snippet]
    let mut svc = HystrixLayer::new(command)
        .classify_http()
        .retry_with(IdempotentHttp)
        .layer(backend);
    let mut attempts = async |request: http::Request<String>| -> Result<u32, BoxError> {
        let before = calls.load(Ordering::SeqCst);
        svc.ready().await?.call(request).await?;
        Ok(calls.load(Ordering::SeqCst) - before)
    };
    assert_eq!(attempts(report).await?, 1);
    assert_eq!(attempts(order).await?, 3);
    assert_eq!(attempts(http::Request::post("/orders").body(String::new())?).await?, 1);
    assert_eq!(attempts(http::Request::get("/orders/7").body(String::new())?).await?, 3);
    Ok(())
}
