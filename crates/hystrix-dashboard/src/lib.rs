//! The Hystrix dashboard stream and Prometheus metrics for [`hystrix`], as an [axum] router.
//!
//! - `GET /hystrix.stream`: Server-Sent Events in Hystrix's exact format, for the Hystrix
//!   Dashboard and Turbine: every `hystrix.stream.dashboard.intervalInMilliseconds` (500 ms by
//!   default, [`DashboardBuilder::interval`]) one `data: <json>\n\n` per command key
//!   (`HystrixCommand`), then per thread pool (`HystrixThreadPool`), then per collapser
//!   (`HystrixCollapser`); a `ping: \n\n` heartbeat on connect and every 500 ms
//!   ([`DashboardBuilder::heartbeat`]). One sampler task serves every client; at most
//!   `hystrix.config.stream.maxConcurrentConnections` (5, [`DashboardBuilder::max_connections`])
//!   clients at once, the next gets `503 MaxConcurrentConnections reached: 5`. A `?delay=`
//!   query is accepted and ignored (as Hystrix 1.5). The messages are in [`stream`].
//! - The messages of Hystrix 1.5's other streams: [`utilization`], [`configuration`] and
//!   [`requests`].
//! - `GET /metrics`: Prometheus text exposition rendered from registry snapshots (no global
//!   metrics recorder needed); names and meanings in [`prometheus`].
//!
//! Mount it into your app (two lines):
//!
//! ```
//! use hystrix::Registry;
//!
//! let app = axum::Router::new()
//!     .route("/", axum::routing::get(|| async { "hello" }))
//!     .merge(hystrix_dashboard::router(Registry::global().clone()));
//! # let _ = app;
//! ```
//!
//! Or tune it, or serve it on its own port (bound to 127.0.0.1 unless told otherwise):
//!
//! ```no_run
//! use std::time::Duration;
//! use hystrix::Registry;
//! use hystrix_dashboard::Dashboard;
//!
//! # async fn run() -> std::io::Result<()> {
//! Dashboard::builder(Registry::global().clone())
//!     .interval(Duration::from_millis(1000))
//!     .max_connections(10)
//!     .build()
//!     .serve(7979) // http://127.0.0.1:7979/hystrix.stream and /metrics
//!     .await
//! # }
//! ```
#![deny(missing_docs)]

pub mod configuration;
pub mod prometheus;
pub mod requests;
pub mod stream;
pub mod utilization;

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hystrix::Registry;
use tokio::sync::broadcast;

/// The heartbeat frame Hystrix writes (`ping: ` and a blank line).
pub const PING: &str = "ping: \n\n";

/// Default of `hystrix.stream.dashboard.intervalInMilliseconds`.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(500);

/// Default of `hystrix.config.stream.maxConcurrentConnections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 5;

/// The `/hystrix.stream` and `/metrics` routes for `registry`, with the defaults (500 ms
/// interval, 5 stream clients). Same as `Dashboard::builder(registry).build().router()`.
pub fn router(registry: Registry) -> Router {
    Dashboard::builder(registry).build().router()
}

/// Options for a [`Dashboard`].
#[derive(Debug, Clone)]
pub struct DashboardBuilder {
    registry: Registry,
    interval: Duration,
    heartbeat: Duration,
    max_connections: usize,
    bind_ip: IpAddr,
}

impl DashboardBuilder {
    /// How often the stream samples the registry
    /// (`hystrix.stream.dashboard.intervalInMilliseconds`); default 500 ms, at least 1 ms.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval.max(Duration::from_millis(1));
        self
    }

    /// How often each stream client gets `ping: \n\n` (also sent on connect); default 500 ms,
    /// at least 1 ms. Turbine expects one at least every 3 s; a failed write frees the slot.
    pub fn heartbeat(mut self, heartbeat: Duration) -> Self {
        self.heartbeat = heartbeat.max(Duration::from_millis(1));
        self
    }

    /// Stream clients served at once (`hystrix.config.stream.maxConcurrentConnections`);
    /// default 5. Past it, a client gets 503 `MaxConcurrentConnections reached: <n>`.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// The address [`Dashboard::serve`] binds; default 127.0.0.1 (loopback only).
    pub fn bind_ip(mut self, ip: IpAddr) -> Self {
        self.bind_ip = ip;
        self
    }

    /// The dashboard.
    pub fn build(self) -> Dashboard {
        Dashboard {
            shared: Arc::new(Shared {
                registry: self.registry,
                interval: self.interval,
                heartbeat: self.heartbeat,
                max_connections: self.max_connections,
                bind_ip: self.bind_ip,
                connections: AtomicUsize::new(0),
                ticks: Mutex::new(None),
            }),
        }
    }

    /// Shortcut for `build().router()`.
    pub fn router(self) -> Router {
        self.build().router()
    }
}

/// The stream and metrics endpoints of one registry. Cheap to clone (a shared handle).
#[derive(Debug, Clone)]
pub struct Dashboard {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    registry: Registry,
    interval: Duration,
    heartbeat: Duration,
    max_connections: usize,
    bind_ip: IpAddr,
    /// Stream clients connected now.
    connections: AtomicUsize,
    /// The sampler's channel while it runs (it stops when its last client leaves).
    ticks: Mutex<Option<broadcast::Sender<Bytes>>>,
}

impl Dashboard {
    /// Options, starting from the defaults.
    pub fn builder(registry: Registry) -> DashboardBuilder {
        DashboardBuilder {
            registry,
            interval: DEFAULT_INTERVAL,
            heartbeat: Duration::from_millis(500),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            bind_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }

    /// The routes `GET /hystrix.stream` and `GET /metrics`, to serve or to
    /// [`merge`](Router::merge) into an app.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/hystrix.stream", get(stream_handler))
            .route("/metrics", get(metrics_handler))
            .with_state(Arc::clone(&self.shared))
    }

    /// Stream clients connected now.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Acquire)
    }

    /// The Prometheus text `/metrics` serves now (see [`prometheus`]).
    pub fn render_metrics(&self) -> String {
        prometheus::render(&self.shared.registry)
    }

    /// Serves [`router`](Self::router) on `bind_ip:port` (127.0.0.1 by default) until the
    /// process ends or an I/O error.
    ///
    /// # Errors
    /// The address cannot be bound, or accepting fails.
    pub async fn serve(self, port: u16) -> std::io::Result<()> {
        let listener =
            tokio::net::TcpListener::bind(SocketAddr::new(self.shared.bind_ip, port)).await?;
        axum::serve(listener, self.router()).await
    }
}

async fn metrics_handler(State(shared): State<Arc<Shared>>) -> Response {
    let text = prometheus::render(&shared.registry);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// A stream client's slot: freed when the response body (which owns it) is dropped.
struct Slot(Arc<Shared>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::AcqRel);
    }
}

fn take_slot(shared: &Arc<Shared>) -> Option<Slot> {
    shared
        .connections
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < shared.max_connections).then_some(n + 1)
        })
        .ok()
        .map(|_| Slot(Arc::clone(shared)))
}

/// Subscribes to the sampler, starting it if no client is connected.
fn subscribe(shared: &Arc<Shared>) -> broadcast::Receiver<Bytes> {
    let mut ticks = shared.ticks.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(sender) = ticks.as_ref() {
        return sender.subscribe();
    }
    let (sender, receiver) = broadcast::channel(4);
    *ticks = Some(sender.clone());
    tokio::spawn(sampler(Arc::downgrade(shared), sender, shared.interval));
    receiver
}

/// One task for every client: renders a tick per interval and broadcasts it; ends when no
/// client is left (or the dashboard is gone).
async fn sampler(shared: Weak<Shared>, sender: broadcast::Sender<Bytes>, every: Duration) {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        {
            // Under the lock a new client cannot subscribe between the check and the stop.
            let mut ticks = shared.ticks.lock().unwrap_or_else(|p| p.into_inner());
            if sender.receiver_count() == 0 {
                *ticks = None;
                return;
            }
        }
        let frame = stream::frame(&stream::sample(&shared.registry));
        if !frame.is_empty() {
            let _ = sender.send(Bytes::from(frame));
        }
    }
}

struct Connection {
    ticks: broadcast::Receiver<Bytes>,
    ping: tokio::time::Interval,
    first: bool,
    _slot: Slot,
}

async fn stream_handler(State(shared): State<Arc<Shared>>) -> Response {
    let Some(slot) = take_slot(&shared) else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "MaxConcurrentConnections reached: {}",
                shared.max_connections
            ),
        )
            .into_response();
    };
    let mut ping = tokio::time::interval_at(
        tokio::time::Instant::now() + shared.heartbeat,
        shared.heartbeat,
    );
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let connection = Connection {
        ticks: subscribe(&shared),
        ping,
        first: true,
        _slot: slot,
    };
    let body = futures_util::stream::unfold(connection, |mut c| async move {
        if c.first {
            c.first = false;
            return Some((Ok::<_, Infallible>(Bytes::from_static(PING.as_bytes())), c));
        }
        loop {
            tokio::select! {
                tick = c.ticks.recv() => match tick {
                    Ok(frame) => return Some((Ok(frame), c)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = c.ping.tick() => {
                    return Some((Ok(Bytes::from_static(PING.as_bytes())), c));
                }
            }
        }
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream;charset=UTF-8"),
            (
                header::CACHE_CONTROL,
                "no-cache, no-store, max-age=0, must-revalidate",
            ),
            (header::PRAGMA, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}
