//! The Hystrix metrics streams and Prometheus metrics for [`hystrix`], as an [axum] router.
//! The guide's [observability page](https://github.com/hystrix-rs/hystrix-rs/blob/main/docs/observability.md)
//! shows them in use, with the real Hystrix Dashboard and ours.
//!
//! Routes (the paths of Hystrix's example web app):
//!
//! - `GET /hystrix.stream`: the dashboard stream, for the Hystrix Dashboard and Turbine: every
//!   `hystrix.stream.dashboard.intervalInMilliseconds` (500 ms by default,
//!   [`DashboardBuilder::interval`]) one `data: <json>\n\n` per command key
//!   (`HystrixCommand`), then per thread pool (`HystrixThreadPool`), then per collapser
//!   (`HystrixCollapser`). A `?delay=` query is accepted and ignored (as Hystrix 1.5). The
//!   messages are in [`stream`].
//! - `GET /hystrix/utilization.stream`: every `hystrix.stream.utilization.intervalInMilliseconds`
//!   (500 ms, [`DashboardBuilder::utilization_interval`]) one `HystrixUtilization` message: the
//!   executions and pool tasks active now ([`utilization`]).
//! - `GET /hystrix/config.stream`: every `hystrix.stream.config.intervalInMilliseconds`
//!   (5000 ms, [`DashboardBuilder::config_interval`]) one `HystrixConfig` message: the
//!   properties in force for every command, pool and collapser ([`configuration`]).
//! - `GET /hystrix/requests.stream` (also `/hystrix/request.stream`, the JAX-RS module's
//!   path): one JSON array per request context that ends (its last handle dropped; see
//!   [`subscribe_request_logs`](hystrix::context::subscribe_request_logs)), listing what its
//!   executions did ([`requests`]). Request contexts belong to the process, so every request
//!   of the process is shown, whichever registry its commands are in. Requests that end while
//!   the stream has no client are not kept; if more than 1024 ended requests wait for the
//!   stream's task, the excess is dropped rather than slow the code that ends them.
//! - `GET /metrics`: Prometheus text exposition rendered from registry snapshots (no global
//!   metrics recorder needed); names and meanings in [`prometheus`].
//! - `GET /hystrix/dashboard/`: our web dashboard, a page reading `/hystrix.stream` (a tile
//!   per command, thread pool and collapser; breaker buttons when the admin routes are on),
//!   its files embedded in the binary; details in [`page`].
//! - `GET /turbine.stream?cluster=NAME`, only with a [`turbine::Turbine`]
//!   ([`DashboardBuilder::turbine`], or its own [`Turbine::serve`](turbine::Turbine::serve)):
//!   the fleet view, every instance of a cluster's `/hystrix.stream` merged into one stream
//!   in Turbine's format (`reportingHosts`, sums, counts of open breakers), for the Hystrix
//!   Dashboard and our page.
//! - `/hystrix/admin/...`, only when enabled ([`DashboardBuilder::admin`],
//!   [`DashboardBuilder::admin_token`]): the effective configuration with provenance, run-time
//!   property changes and the breaker override; routes and access rules in [`admin`].
//!
//! Every stream is Server-Sent Events in Hystrix's format (`Content-Type:
//! text/event-stream;charset=UTF-8`, no caching, `ping: \n\n` on connect and every 500 ms,
//! [`DashboardBuilder::heartbeat`]), served by one sampler task per stream that all its clients
//! share (started by the first client, stopped when the last leaves; a slow client skips
//! messages, it never holds up the sampler or other clients). Each stream takes at most
//! `hystrix.config.stream.maxConcurrentConnections` (5, [`DashboardBuilder::max_connections`])
//! clients at once, counted per stream as Hystrix counts per servlet; the next one gets
//! `503 MaxConcurrentConnections reached: 5`. After [`Dashboard::shutdown`] every stream ends
//! and answers `503 Service has been shut down.`. The stream properties are read from the
//! registry once, when [`Dashboard::builder`] is called (as Hystrix reads them at start-up).
//!
//! Mount it into your app (two lines):
//!
//! ```
//! use hystrix::Registry;
//!
//! let app = axum::Router::new()
//!     .route("/", axum::routing::get(|| async { "hello" }))
//!     .merge(hystrix_dashboard::router(Registry::global().clone()));
//! # let _: axum::Router = app; // (axum::serve infers this)
//! ```
//!
//! The router takes the app's state type, so an app with state mounts it the same way:
//!
//! ```
//! use axum::extract::State;
//! use hystrix::Registry;
//!
//! #[derive(Clone)]
//! struct AppState { greeting: &'static str }
//!
//! let app = axum::Router::new()
//!     .route("/", axum::routing::get(|State(s): State<AppState>| async move { s.greeting }))
//!     .merge(hystrix_dashboard::router(Registry::global().clone()))
//!     .with_state(AppState { greeting: "hello" });
//! # let _: axum::Router = app;
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
//!     .serve(7979) // http://127.0.0.1:7979/ (the page), /hystrix.stream, /metrics, ...
//!     .await
//! # }
//! ```
//!
//! [`Dashboard::serve`] guards its port: at most 256 connections
//! ([`connection_limit`](DashboardBuilder::connection_limit)), each request read whole within
//! 10 s of its first byte ([`request_read_timeout`](DashboardBuilder::request_read_timeout)),
//! a connection with nothing moving for 60 s closed
//! ([`idle_timeout`](DashboardBuilder::idle_timeout)), and a client whose writes stay blocked
//! for `hystrix.stream.writeTimeoutInMilliseconds` (1500 ms,
//! [`write_timeout`](DashboardBuilder::write_timeout)) dropped with its stream slot.
//!
//! **Embedding.** An app that serves the router itself gets none of these from `axum::serve`,
//! and must set them itself: a connection cap, header-read and idle timeouts, and a socket
//! write timeout. Without the last, five stream clients that stop reading hold a stream's five
//! slots for as long as they stay connected (a client that stops reading stops hyper from
//! polling the stream, so nothing but a blocked write shows it). Do not put a request timeout
//! layer on the stream routes: a stream is a response that never ends, and it would be cut.
#![deny(missing_docs)]

pub mod admin;
pub mod configuration;
pub mod page;
pub mod prometheus;
pub mod requests;
mod server;
mod sse;
pub mod stream;
pub mod turbine;
pub mod utilization;

/// The Rust snippets of README.md and of the guide (docs/*.md) set up in this crate's
/// `doctests/*.rs`, each a doc test (written by `build.rs`).
#[cfg(doctest)]
mod snippets {
    include!(concat!(env!("OUT_DIR"), "/snippet_doctests.rs"));
}

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hystrix::Registry;
use tokio::sync::watch;

use crate::sse::{Feed, Schedule};

/// The heartbeat frame Hystrix writes (`ping: ` and a blank line).
pub const PING: &str = "ping: \n\n";

/// Hystrix's default of `hystrix.stream.dashboard.intervalInMilliseconds` (the builder's
/// default comes from the registry's properties, which default to this).
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(500);

/// Hystrix's default of `hystrix.config.stream.maxConcurrentConnections` (the builder's
/// default comes from the registry's properties, which default to this).
pub const DEFAULT_MAX_CONNECTIONS: usize = 5;

/// How often a stream client gets [`PING`] by default: 500 ms, Hystrix's poller delay.
const DEFAULT_HEARTBEAT: Duration = Duration::from_millis(500);

/// The default of `hystrix.stream.writeTimeoutInMilliseconds` (the builder's default comes from
/// the registry's properties, which default to this): 1500 ms, three heartbeats.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_millis(1500);

/// Connections [`Dashboard::serve`] keeps open at once by default
/// ([`DashboardBuilder::connection_limit`]): 256. A dashboard needs a few (at most 5 clients
/// per stream, Prometheus scrapes, a browser or two), and each connection is a file
/// descriptor of the process that the application may need: many systems give a process
/// only 1024.
pub const DEFAULT_CONNECTION_LIMIT: usize = 256;

/// How long [`Dashboard::serve`] waits by default for a request to arrive whole, head and body,
/// from its first byte (from the opening, for a connection's first request)
/// ([`DashboardBuilder::request_read_timeout`]): 10 s. A browser, curl or Prometheus sends
/// a request at once; 10 s leaves room for a slow link and bounds clients that send a header
/// a byte at a time to hold connections (slowloris).
pub const DEFAULT_REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`Dashboard::serve`] keeps by default a connection on which no byte moves either
/// way ([`DashboardBuilder::idle_timeout`]): 60 s. A kept-alive connection waiting for its
/// next request is idle; a stream is not (a heartbeat every 500 ms). A browser reuses a
/// connection within this, and an abandoned one goes.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The routes of [`Dashboard::router`] for `registry`, with its stream properties. Same as
/// `Dashboard::builder(registry).build().router()`.
///
/// The router fits any app state: merge it into a `Router<AppState>` before or after its
/// `with_state`.
pub fn router<S>(registry: Registry) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    Dashboard::builder(registry).build().router()
}

/// One of the dashboard's SSE streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StreamKind {
    /// `/hystrix.stream`: command, thread-pool and collapser metrics ([`stream`]).
    Dashboard = 0,
    /// `/hystrix/utilization.stream`: active executions and pool tasks ([`utilization`]).
    Utilization = 1,
    /// `/hystrix/config.stream`: the properties in force ([`configuration`]).
    Config = 2,
    /// `/hystrix/requests.stream`: one message per finished request ([`requests`]).
    Requests = 3,
}

impl StreamKind {
    /// Every stream, in route order.
    pub const ALL: [StreamKind; 4] = [
        StreamKind::Dashboard,
        StreamKind::Utilization,
        StreamKind::Config,
        StreamKind::Requests,
    ];

    /// The stream's path in [`Dashboard::router`].
    pub fn path(self) -> &'static str {
        match self {
            StreamKind::Dashboard => "/hystrix.stream",
            StreamKind::Utilization => "/hystrix/utilization.stream",
            StreamKind::Config => "/hystrix/config.stream",
            StreamKind::Requests => "/hystrix/requests.stream",
        }
    }
}

/// Options for a [`Dashboard`]; the streams' defaults come from the registry's stream properties
/// (`hystrix.stream.*`), read once by [`Dashboard::builder`], and an explicit call overrides its
/// property. The limits of [`Dashboard::serve`] other than the write timeout are options only, with
/// the `DEFAULT_*` constants as defaults.
#[derive(Debug, Clone)]
pub struct DashboardBuilder {
    registry: Registry,
    interval: Duration,
    utilization_interval: Duration,
    config_interval: Duration,
    heartbeat: Duration,
    max_connections: usize,
    bind_ip: IpAddr,
    limits: server::Limits,
    admin: Option<admin::Access>,
    on_admin_change: Option<admin::OnChange>,
    turbine: Option<turbine::Turbine>,
}

impl DashboardBuilder {
    /// Enables the [`admin`] routes for loopback peers only (no token): effective
    /// configuration with provenance, run-time property changes, breaker force-open /
    /// force-close / reset. Off by default.
    pub fn admin(mut self) -> Self {
        self.admin = Some(admin::Access::Loopback);
        self
    }

    /// Enables the [`admin`] routes for any peer that sends `Authorization: Bearer <token>`
    /// (compared in constant time); others get 401.
    ///
    /// # Errors
    /// [`AdminTokenError`](admin::AdminTokenError) for a token shorter than 16 characters or
    /// with anything but visible ASCII characters: a weak or mistyped token never opens the
    /// routes.
    pub fn admin_token(mut self, token: impl Into<String>) -> Result<Self, admin::AdminTokenError> {
        let token = token.into();
        admin::check_token(&token)?;
        self.admin = Some(admin::Access::Token(token.into()));
        Ok(self)
    }

    /// Calls `callback` after each change made through the admin routes (they are also logged
    /// at INFO, target `hystrix::admin`). It runs on the request's task: keep it short.
    pub fn on_admin_change(
        mut self,
        callback: impl Fn(&admin::AdminChange) + Send + Sync + 'static,
    ) -> Self {
        self.on_admin_change = Some(admin::OnChange(Arc::new(callback)));
        self
    }

    /// Serves `turbine`'s merged streams on this dashboard's routes too
    /// (`/turbine.stream?cluster=NAME`, see [`turbine`]), so that one port gives the
    /// instance's own streams and the fleet's. [`Dashboard::shutdown`] shuts it down too.
    pub fn turbine(mut self, turbine: turbine::Turbine) -> Self {
        self.turbine = Some(turbine);
        self
    }

    /// How often `/hystrix.stream` samples the registry, at least 1 ms. Default:
    /// `hystrix.stream.dashboard.intervalInMilliseconds` when [`Dashboard::builder`] was
    /// called (500 ms unless set); this call overrides it.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = at_least_1ms(interval);
        self
    }

    /// How often `/hystrix/utilization.stream` sends a sample, at least 1 ms. Default:
    /// `hystrix.stream.utilization.intervalInMilliseconds` when [`Dashboard::builder`] was
    /// called (500 ms unless set); this call overrides it.
    pub fn utilization_interval(mut self, interval: Duration) -> Self {
        self.utilization_interval = at_least_1ms(interval);
        self
    }

    /// How often `/hystrix/config.stream` sends a sample, at least 1 ms. Default:
    /// `hystrix.stream.config.intervalInMilliseconds` when [`Dashboard::builder`] was called
    /// (5000 ms unless set); this call overrides it.
    pub fn config_interval(mut self, interval: Duration) -> Self {
        self.config_interval = at_least_1ms(interval);
        self
    }

    /// How often each stream client gets `ping: \n\n` (also sent on connect), at least 1 ms;
    /// default 500 ms (Hystrix's poller delay; there is no property for it). Turbine expects
    /// one at least every 3 s; a failed write frees the client's slot.
    pub fn heartbeat(mut self, heartbeat: Duration) -> Self {
        self.heartbeat = at_least_1ms(heartbeat);
        self
    }

    /// Clients each stream serves at once, counted per stream (as Hystrix counts per servlet,
    /// every one limited by the same property). Default:
    /// `hystrix.config.stream.maxConcurrentConnections` when [`Dashboard::builder`] was called
    /// (5 unless set); this call overrides it. Past it, a client gets 503
    /// `MaxConcurrentConnections reached: <n>`; 0 refuses every client.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// The address [`Dashboard::serve`] binds; default 127.0.0.1 (loopback only).
    pub fn bind_ip(mut self, ip: IpAddr) -> Self {
        self.bind_ip = ip;
        self
    }

    /// Connections [`Dashboard::serve`] keeps open at once (each call of it); past it, a new
    /// connection is closed as soon as it is accepted, unanswered, until one ends (a warning is
    /// logged, at most once a minute). Default [`DEFAULT_CONNECTION_LIMIT`] (256); 0 refuses
    /// every connection. Not the stream limit ([`max_connections`](Self::max_connections)),
    /// which counts a stream's clients.
    pub fn connection_limit(mut self, limit: usize) -> Self {
        self.limits.connections = limit;
        self
    }

    /// How long [`Dashboard::serve`] waits for a request to arrive whole, its head and its body,
    /// from its first byte (from the connection's opening, for the first request), at least
    /// 1 ms; then it closes the connection: without an answer while the head is coming; a
    /// handler reading the body (the admin PUT) is told the body could not be read and answers
    /// 400 first. Default
    /// [`DEFAULT_REQUEST_READ_TIMEOUT`] (10 s). A kept-alive connection waiting for its next
    /// request is not reading one: [`idle_timeout`](Self::idle_timeout) applies.
    pub fn request_read_timeout(mut self, timeout: Duration) -> Self {
        self.limits.request_read = at_least_1ms(timeout);
        self
    }

    /// How long [`Dashboard::serve`] keeps a connection on which no byte moves either way, at
    /// least 1 ms: a kept-alive connection waiting for its next request, a request body that
    /// stops coming. Default [`DEFAULT_IDLE_TIMEOUT`] (60 s). A stream sends a heartbeat
    /// ([`heartbeat`](Self::heartbeat)), so keep this above it.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.limits.idle = at_least_1ms(timeout);
        self
    }

    /// How long a write of [`Dashboard::serve`] to a client may stay blocked, at least 1 ms;
    /// then the connection ends, and with it a stream client's slot. A client that stops
    /// reading (a stuck or a malicious one) fills the socket's buffers until writes block:
    /// only this frees its slot. It bounds a stall, not a response: a client that keeps up with
    /// its stream keeps it however long; one that falls behind until the buffers are full sees
    /// old data and is ended too (a dashboard that reconnects gets fresh samples). The bound
    /// starts once the buffers are full, which takes as long as the stream needs to fill them.
    /// Default: `hystrix.stream.writeTimeoutInMilliseconds` when [`Dashboard::builder`] was
    /// called (1500 ms, three heartbeats, unless set); this call overrides it.
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.limits.write = at_least_1ms(timeout);
        self
    }

    /// The dashboard.
    pub fn build(self) -> Dashboard {
        let (shutdown, shut) = watch::channel(false);
        let feed = |schedule| {
            Arc::new(Feed::new(
                schedule,
                self.max_connections,
                self.heartbeat,
                shut.clone(),
            ))
        };
        let feeds = StreamKind::ALL.map(|kind| {
            feed(match kind {
                StreamKind::Dashboard => {
                    Schedule::Every(self.interval, self.registry.clone(), stream::sample)
                }
                StreamKind::Utilization => {
                    Schedule::Every(self.utilization_interval, self.registry.clone(), |r| {
                        vec![utilization::utilization_json(r)]
                    })
                }
                StreamKind::Config => {
                    Schedule::Every(self.config_interval, self.registry.clone(), |r| {
                        vec![configuration::config_json(r)]
                    })
                }
                StreamKind::Requests => Schedule::RequestLogs,
            })
        });
        let admin = self.admin.map(|access| {
            Arc::new(admin::Admin {
                registry: self.registry.clone(),
                access,
                on_change: self.on_admin_change,
            })
        });
        Dashboard {
            shared: Arc::new(Shared {
                admin,
                turbine: self.turbine,
                registry: self.registry,
                bind_ip: self.bind_ip,
                limits: self.limits,
                feeds,
                shutdown,
            }),
        }
    }

    /// Shortcut for `build().router()`.
    pub fn router<S>(self) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        self.build().router()
    }
}

fn at_least_1ms(duration: Duration) -> Duration {
    duration.max(Duration::from_millis(1))
}

/// The streams and metrics endpoints of one registry. Cheap to clone (a shared handle).
#[derive(Debug, Clone)]
pub struct Dashboard {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    registry: Registry,
    /// The admin routes' state, when enabled.
    admin: Option<Arc<admin::Admin>>,
    /// The fleet's streams served here too, if any.
    turbine: Option<turbine::Turbine>,
    bind_ip: IpAddr,
    /// What [`Dashboard::serve`] allows its clients.
    limits: server::Limits,
    /// One per stream, at the index of its [`StreamKind`] (the order of [`StreamKind::ALL`]).
    feeds: [Arc<Feed>; 4],
    /// Set once, by [`Dashboard::shutdown`].
    shutdown: watch::Sender<bool>,
}

impl Dashboard {
    /// Options, starting from `registry`'s stream properties, read now (as Hystrix
    /// reads them once at start-up; changing them later does not change this dashboard):
    /// `hystrix.stream.dashboard.intervalInMilliseconds`,
    /// `hystrix.stream.utilization.intervalInMilliseconds`,
    /// `hystrix.stream.config.intervalInMilliseconds`,
    /// `hystrix.config.stream.maxConcurrentConnections` and
    /// `hystrix.stream.writeTimeoutInMilliseconds`.
    pub fn builder(registry: Registry) -> DashboardBuilder {
        let props = registry.properties().stream();
        DashboardBuilder {
            interval: Duration::from_millis(props.dashboard_interval_in_milliseconds),
            utilization_interval: Duration::from_millis(props.utilization_interval_in_milliseconds),
            config_interval: Duration::from_millis(props.config_interval_in_milliseconds),
            heartbeat: DEFAULT_HEARTBEAT,
            max_connections: usize::try_from(props.max_concurrent_connections)
                .unwrap_or(usize::MAX),
            bind_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            limits: server::Limits {
                connections: DEFAULT_CONNECTION_LIMIT,
                request_read: DEFAULT_REQUEST_READ_TIMEOUT,
                idle: DEFAULT_IDLE_TIMEOUT,
                write: Duration::from_millis(props.write_timeout_in_milliseconds),
            },
            admin: None,
            on_admin_change: None,
            turbine: None,
            registry,
        }
    }

    /// The routes: `GET /hystrix.stream`, `/hystrix/utilization.stream`,
    /// `/hystrix/config.stream`, `/hystrix/requests.stream` (and its alias
    /// `/hystrix/request.stream`), `/metrics` and the [web page](page) under
    /// `/hystrix/dashboard/`, plus the [`admin`] routes when enabled and `/turbine.stream`
    /// with a [turbine](DashboardBuilder::turbine), to
    /// serve or to [`merge`](Router::merge) into an app (with admin routes and no token, serve
    /// the app with `into_make_service_with_connect_info::<SocketAddr>()`).
    ///
    /// The router fits any app state (`Router<S>`): merge it into a `Router<AppState>`. The
    /// server that serves it must bound connections, header reads, idle connections and
    /// blocked writes itself, as [`serve`](Self::serve) does (see the crate's "Embedding").
    pub fn router<S>(&self) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        let route = |kind: StreamKind| get(sse::serve).with_state(self.feed(kind));
        let mut router = Router::new();
        for kind in StreamKind::ALL {
            router = router.route(kind.path(), route(kind));
        }
        router = router
            .route("/hystrix/request.stream", route(StreamKind::Requests))
            .route(
                "/metrics",
                get(metrics_handler).with_state(Arc::clone(&self.shared)),
            )
            .merge(page::routes(
                self.shared.admin.as_ref().map(|admin| admin.access.clone()),
            ));
        if let Some(turbine) = &self.shared.turbine {
            router = router.merge(turbine.router());
        }
        match &self.shared.admin {
            Some(admin) => router.merge(admin::routes(Arc::clone(admin))),
            None => router,
        }
    }

    fn feed(&self, kind: StreamKind) -> Arc<Feed> {
        Arc::clone(&self.shared.feeds[kind as usize])
    }

    /// Clients of `/hystrix.stream` now: its responses being streamed, the number that
    /// [`max_connections`](DashboardBuilder::max_connections) limits (see
    /// [`stream_clients_of`](Self::stream_clients_of) for the other streams). Not TCP
    /// connections: one serving other routes, or idle, is not counted, and
    /// [`connection_limit`](DashboardBuilder::connection_limit) bounds those.
    pub fn stream_clients(&self) -> usize {
        self.stream_clients_of(StreamKind::Dashboard)
    }

    /// Clients of `stream` now, as [`stream_clients`](Self::stream_clients) counts them (both
    /// paths of the requests stream count as one stream).
    pub fn stream_clients_of(&self, stream: StreamKind) -> usize {
        self.feed(stream).clients()
    }

    /// Shuts every stream down (Hystrix's servlet `shutdown()`): every connected stream ends
    /// (its response body closes after the data already sent), the samplers stop, and every
    /// later stream request gets 503 with the body `Service has been shut down.` (as in
    /// Hystrix). `/metrics` keeps working. Irreversible; calling it again does nothing.
    pub fn shutdown(&self) {
        self.shared.shutdown.send_replace(true);
        if let Some(turbine) = &self.shared.turbine {
            turbine.shutdown();
        }
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shut_down(&self) -> bool {
        *self.shared.shutdown.borrow()
    }

    /// The Prometheus text `/metrics` serves now (see [`prometheus`]).
    pub fn render_metrics(&self) -> String {
        prometheus::render(&self.shared.registry)
    }

    /// Serves [`router`](Self::router) on `bind_ip:port` (127.0.0.1 by default), with `/`
    /// redirected to the [web page](page), until the process ends, over HTTP/1.1 within the
    /// builder's limits: at most [`connection_limit`](DashboardBuilder::connection_limit)
    /// connections (256), a request read whole within
    /// [`request_read_timeout`](DashboardBuilder::request_read_timeout) (10 s), a connection
    /// closed after [`idle_timeout`](DashboardBuilder::idle_timeout) (60 s) with nothing
    /// moving, and a connection whose writes stay blocked past
    /// [`write_timeout`](DashboardBuilder::write_timeout) (1500 ms) ended with its stream
    /// slot. A failed accept is logged and retried (a second later when, say, the process has
    /// too many open files).
    ///
    /// Dropping the future stops accepting; connections already open are served to their end.
    ///
    /// # Errors
    /// The address cannot be bound.
    pub async fn serve(self, port: u16) -> std::io::Result<()> {
        let listener =
            tokio::net::TcpListener::bind(SocketAddr::new(self.shared.bind_ip, port)).await?;
        self.serve_on(listener).await
    }

    /// As [`serve`](Self::serve), on a listener bound already (port 0 to let the system pick
    /// one; read it with `listener.local_addr()` first). [`bind_ip`](DashboardBuilder::bind_ip)
    /// does not apply: the listener's address does.
    ///
    /// # Errors
    /// None: it runs until the process ends or the future is dropped (the `Result` is
    /// [`serve`](Self::serve)'s).
    pub async fn serve_on(self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        let router = self.router::<()>().merge(page::root());
        server::serve(listener, router, self.shared.limits).await;
        Ok(())
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
