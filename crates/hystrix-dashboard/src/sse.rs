//! The Server-Sent Events plumbing every stream shares (as Hystrix's
//! `HystrixSampleSseServlet`): per stream a connection counter limited by
//! `hystrix.config.stream.maxConcurrentConnections`, one sampler task shared by its clients
//! (started by the first, stopped when the last leaves), `ping: \n\n` on connect and every
//! heartbeat, and shutdown.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use hystrix::Registry;
use hystrix::context::{RequestLog, RequestLogSubscription, subscribe_request_logs};
use tokio::sync::{Notify, broadcast, mpsc, watch};

use crate::turbine::{Cluster, Run};
use crate::{PING, requests};

/// Frames a periodic sampler keeps for a client that has not taken them yet; past it the
/// client skips to the newest (it lags; the sampler never waits for it).
const TICK_BACKLOG: usize = 4;

/// Request messages kept for a client that has not taken them yet (requests come in bursts).
const REQUEST_BACKLOG: usize = 256;

/// Finished request logs waiting for the requests sampler; past it, logs are dropped rather
/// than slow down the code that ends a request.
const REQUEST_QUEUE: usize = 1024;

/// What a stream sends.
pub(crate) enum Schedule {
    /// The messages rendered from the registry, every interval.
    Every(Duration, Registry, fn(&Registry) -> Vec<String>),
    /// A message per finished request context.
    RequestLogs,
    /// A cluster's merged messages, every interval, read from its instances while the
    /// stream runs.
    Cluster(Duration, Arc<Cluster>),
}

impl Schedule {
    fn backlog(&self) -> usize {
        match self {
            Schedule::Every(..) | Schedule::Cluster(..) => TICK_BACKLOG,
            Schedule::RequestLogs => REQUEST_BACKLOG,
        }
    }

    /// A running source of frames.
    fn start(&self) -> Source {
        match self {
            Schedule::Every(every, registry, render) => {
                Source::Every(ticking(*every), registry.clone(), *render)
            }
            Schedule::Cluster(every, cluster) => Source::Cluster(ticking(*every), cluster.start()),
            Schedule::RequestLogs => {
                let (sender, logs) = mpsc::channel(REQUEST_QUEUE);
                let subscription = subscribe_request_logs(move |log| {
                    let _ = sender.try_send(log);
                });
                Source::RequestLogs {
                    logs,
                    _listening: subscription,
                }
            }
        }
    }
}

/// An interval that waits for a late tick rather than bursting.
fn ticking(every: Duration) -> tokio::time::Interval {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval
}

/// A sampler's source of frames.
enum Source {
    Every(
        tokio::time::Interval,
        Registry,
        fn(&Registry) -> Vec<String>,
    ),
    /// The cluster's run, stopped when this is dropped.
    Cluster(tokio::time::Interval, Arc<Run>),
    /// Logs handed over by the listener, which is removed when this is dropped.
    RequestLogs {
        logs: mpsc::Receiver<Arc<RequestLog>>,
        _listening: RequestLogSubscription,
    },
}

impl Source {
    /// Waits for the next sample and frames it (empty when there is nothing to send).
    async fn next_frame(&mut self) -> String {
        match self {
            Source::Every(interval, registry, render) => {
                interval.tick().await;
                frame(&render(registry))
            }
            Source::Cluster(interval, run) => {
                interval.tick().await;
                frame(&run.tick())
            }
            Source::RequestLogs { logs, .. } => match logs.recv().await {
                Some(log) => frame(&[requests::requests_json(&log)]),
                // The listener owns the sender and lives as long as this: never reached.
                None => std::future::pending().await,
            },
        }
    }
}

/// Messages framed as Server-Sent Events: `data: <json>\n\n` each.
pub(crate) fn frame(messages: &[String]) -> String {
    let mut out = String::with_capacity(messages.iter().map(|m| m.len() + 8).sum());
    for message in messages {
        out.push_str("data: ");
        out.push_str(message);
        out.push_str("\n\n");
    }
    out
}

/// One stream: its clients, its sampler, its limits.
pub(crate) struct Feed {
    schedule: Schedule,
    max_connections: usize,
    heartbeat: Duration,
    /// Clients connected now.
    clients: AtomicUsize,
    /// The sampler's channel while it runs.
    ticks: Mutex<Option<broadcast::Sender<Bytes>>>,
    /// Told when the last client leaves, so the sampler stops at once.
    idle: Notify,
    /// Becomes true when the dashboard shuts down.
    shutdown: watch::Receiver<bool>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("clients", &self.clients())
            .field("max_connections", &self.max_connections)
            .finish_non_exhaustive()
    }
}

impl Feed {
    pub(crate) fn new(
        schedule: Schedule,
        max_connections: usize,
        heartbeat: Duration,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        Feed {
            schedule,
            max_connections,
            heartbeat,
            clients: AtomicUsize::new(0),
            ticks: Mutex::new(None),
            idle: Notify::new(),
            shutdown,
        }
    }

    /// Clients connected now.
    pub(crate) fn clients(&self) -> usize {
        self.clients.load(Ordering::Acquire)
    }

    fn ticks(&self) -> MutexGuard<'_, Option<broadcast::Sender<Bytes>>> {
        self.ticks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A client's slot: freed when the response body (which owns it) is dropped.
struct Slot(Arc<Feed>);

impl Drop for Slot {
    fn drop(&mut self) {
        if self.0.clients.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_one();
        }
    }
}

fn take_slot(feed: &Arc<Feed>) -> Option<Slot> {
    feed.clients
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < feed.max_connections).then_some(n + 1)
        })
        .ok()
        .map(|_| Slot(Arc::clone(feed)))
}

/// Subscribes to the feed's sampler, starting it if no client is connected.
fn subscribe(feed: &Arc<Feed>) -> broadcast::Receiver<Bytes> {
    let mut ticks = feed.ticks();
    if let Some(sender) = ticks.as_ref() {
        return sender.subscribe();
    }
    let (sender, receiver) = broadcast::channel(feed.schedule.backlog());
    *ticks = Some(sender.clone());
    tokio::spawn(sampler(Arc::clone(feed), sender, feed.schedule.start()));
    receiver
}

/// One task for every client of a feed: sends each sample; ends when no client is left, or at
/// shutdown.
async fn sampler(feed: Arc<Feed>, sender: broadcast::Sender<Bytes>, mut source: Source) {
    let mut shutdown = feed.shutdown.clone();
    loop {
        let frame = tokio::select! {
            frame = source.next_frame() => Some(frame),
            () = feed.idle.notified() => None,
            _ = shutdown.changed() => {
                *feed.ticks() = None;
                return;
            }
        };
        {
            // Under the lock a new client cannot subscribe between the check and the stop.
            let mut ticks = feed.ticks();
            if sender.receiver_count() == 0 {
                *ticks = None;
                return;
            }
        }
        if let Some(frame) = frame.filter(|frame| !frame.is_empty()) {
            let _ = sender.send(Bytes::from(frame));
        }
    }
}

/// One client's stream. Field order matters: the receiver is dropped before the slot, so the
/// sampler, told by the slot, sees the client gone.
struct Connection {
    ticks: broadcast::Receiver<Bytes>,
    ping: tokio::time::Interval,
    first: bool,
    shutdown: watch::Receiver<bool>,
    _slot: Slot,
}

impl Connection {
    /// The next chunk of the body; `None` ends it.
    async fn next(&mut self) -> Option<Bytes> {
        if *self.shutdown.borrow() {
            return None;
        }
        if std::mem::take(&mut self.first) {
            return Some(Bytes::from_static(PING.as_bytes()));
        }
        loop {
            tokio::select! {
                tick = self.ticks.recv() => match tick {
                    Ok(frame) => return Some(frame),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = self.ping.tick() => return Some(Bytes::from_static(PING.as_bytes())),
                _ = self.shutdown.changed() => return None,
            }
        }
    }
}

fn unavailable(body: String) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
}

/// The handler of a stream's route.
pub(crate) async fn serve(State(feed): State<Arc<Feed>>) -> Response {
    if *feed.shutdown.borrow() {
        return unavailable("Service has been shut down.".to_owned());
    }
    let Some(slot) = take_slot(&feed) else {
        return unavailable(format!(
            "MaxConcurrentConnections reached: {}",
            feed.max_connections
        ));
    };
    let mut ping =
        tokio::time::interval_at(tokio::time::Instant::now() + feed.heartbeat, feed.heartbeat);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let connection = Connection {
        ticks: subscribe(&feed),
        ping,
        first: true,
        shutdown: feed.shutdown.clone(),
        _slot: slot,
    };
    let body = futures_util::stream::unfold(connection, |mut connection| async move {
        let chunk = connection.next().await?;
        Some((Ok::<_, Infallible>(chunk), connection))
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
