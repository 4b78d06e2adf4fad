//! The server of [`Dashboard::serve`](crate::Dashboard::serve): an accept loop with a connection
//! cap, and HTTP/1.1 (hyper) over sockets with a request-read, an idle and a write timeout.
//!
//! `axum::serve` has no such limits, and a request timeout layer would cut the streams, which
//! are responses that never end: so the limits are on the connection, not on the request.

mod socket;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tower::ServiceExt;

use socket::{RequestBody, RequestClock, Socket};

/// How often, at most, the server logs that it is at its connection limit.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The server's limits (see the builder's methods for each one's meaning and default).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) connections: usize,
    pub(crate) request_read: Duration,
    pub(crate) idle: Duration,
    pub(crate) write: Duration,
}

impl Limits {
    /// The `DEFAULT_*` limits of the crate, with the default write timeout.
    pub(crate) fn default_limits() -> Limits {
        Limits {
            connections: crate::DEFAULT_CONNECTION_LIMIT,
            request_read: crate::DEFAULT_REQUEST_READ_TIMEOUT,
            idle: crate::DEFAULT_IDLE_TIMEOUT,
            write: crate::DEFAULT_WRITE_TIMEOUT,
        }
    }
}

/// Serves `router` on `listener` within `limits`, until the process ends.
pub(crate) async fn serve(listener: TcpListener, router: Router, limits: Limits) {
    let permits = Arc::new(Semaphore::new(
        limits.connections.min(Semaphore::MAX_PERMITS),
    ));
    let mut warned: Option<Instant> = None;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                accept_failed(err).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            // Closed at once: a client left in the backlog would wait in vain, and answering
            // would cost what the cap is there to save.
            drop(stream);
            if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                warned = Some(Instant::now());
                tracing::warn!(
                    target: "hystrix::dashboard",
                    "hystrix dashboard: {} connections open, the limit: closing new ones until \
                     one ends (logged at most once a minute)",
                    limits.connections
                );
            }
            continue;
        };
        tokio::spawn(serve_connection(
            stream,
            peer,
            router.clone(),
            limits,
            permit,
        ));
    }
}

/// As `axum::serve`: a failed accept that concerns one connection is skipped; any other (such
/// as too many open files) is logged and retried a second later, when connections may have
/// ended.
async fn accept_failed(err: io::Error) {
    if matches!(
        err.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(target: "hystrix::dashboard", "hystrix dashboard: accept failed: {err}");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// One connection, holding its `permit` until it ends: its requests go to `router`, with the
/// peer address as `ConnectInfo<SocketAddr>` (which the admin routes check).
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    limits: Limits,
    _permit: OwnedSemaphorePermit,
) {
    let clock = RequestClock::opened_at(Instant::now());
    let socket = Socket::new(stream, limits, Arc::clone(&clock));
    let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
        let (mut parts, body) = request.into_parts();
        parts.extensions.insert(ConnectInfo(peer));
        let request = hyper::Request::from_parts(parts, RequestBody::new(body, Arc::clone(&clock)));
        router.clone().oneshot(request)
    });
    let served = http1::Builder::new()
        // hyper's clock would also run while a kept-alive connection waits for its next
        // request: the socket's clocks time requests instead.
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(socket), service)
        .await;
    if let Err(err) = served {
        tracing::debug!(
            target: "hystrix::dashboard",
            %peer,
            "hystrix dashboard: connection ended: {err}"
        );
    }
}
