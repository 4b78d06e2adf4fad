//! The backend services: six axum servers on 127.0.0.1, each with a fault the scenario sets.
//!
//! A fault shapes every answer (latency drawn from a distribution, a long tail, a share of
//! `500`s or of hangs, `503` with or without `Retry-After`). Each server serves at most its
//! capacity of calls at once ([`DEFAULT_CAPACITY`] unless the fault lowers it): the others
//! wait for a place before their latency starts, as requests queue at a saturated server. An
//! outage of kind `refused` closes the port
//! itself (the server stops listening, so connections are refused) and opens it again on the
//! same port when the fault is lifted.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

use crate::catalogue::{self, Title};
use crate::scenario::{Backend, DEFAULT_CAPACITY, Fault, HANG, Phase, Reaction};

/// One backend server's shared state.
#[derive(Debug)]
struct Server {
    fault: RwLock<Fault>,
    /// Draws the fault's reactions: seeded, so two instances of a backend started with the
    /// same seed (the protected gateway's and the unprotected twin's) draw the same sequence.
    rng: Mutex<StdRng>,
    /// Whether its port is open.
    up: watch::Sender<bool>,
    /// Calls that reached it.
    calls: AtomicU64,
    /// Calls it answered with an error of its own (500, 503) or let hang.
    errors: AtomicU64,
    /// The places of the calls it serves at once.
    places: Places,
}

/// How many calls a server serves at once: a call takes a place before its fault's reaction
/// and gives it back when answered or dropped (its client gone); without a free place it
/// waits, first come first served.
#[derive(Debug)]
struct Places {
    state: std::sync::Mutex<PlacesState>,
    /// Signalled when a place is given back, a waiter leaves or the capacity grows.
    changed: Notify,
}

#[derive(Debug)]
struct PlacesState {
    /// Places taken.
    taken: u32,
    /// How many may be taken.
    capacity: u32,
    /// The tickets of the calls waiting, in order of arrival.
    waiting: std::collections::BTreeSet<u64>,
    /// The next ticket.
    next: u64,
}

impl Places {
    fn new(capacity: u32) -> Places {
        Places {
            state: std::sync::Mutex::new(PlacesState {
                taken: 0,
                capacity,
                waiting: std::collections::BTreeSet::new(),
                next: 0,
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PlacesState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sets the capacity; waiting calls take the places it adds (calls already served above a
    /// lower capacity finish, and no new one is served until fewer are).
    fn set_capacity(&self, capacity: u32) {
        self.lock().capacity = capacity;
        self.changed.notify_waiters();
    }

    /// Waits until this call is the first waiting and a place is free, and takes it.
    async fn take(&self) -> Place<'_> {
        let ticket = {
            let mut state = self.lock();
            let ticket = state.next;
            state.next += 1;
            state.waiting.insert(ticket);
            Waiting(self, ticket)
        };
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before looking, so a change in between is not missed.
            changed.as_mut().enable();
            {
                let mut state = self.lock();
                if state.taken < state.capacity && state.waiting.first() == Some(&ticket.1) {
                    state.waiting.remove(&ticket.1);
                    state.taken += 1;
                    std::mem::forget(ticket);
                    // The next in line may find a place free too.
                    self.changed.notify_waiters();
                    return Place(self);
                }
            }
            changed.await;
        }
    }
}

/// A call waiting in [`Places`]: leaves the line when dropped (its client gone).
struct Waiting<'a>(&'a Places, u64);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.lock().waiting.remove(&self.1);
        self.0.changed.notify_waiters();
    }
}

/// A place taken in [`Places`], given back when dropped.
struct Place<'a>(&'a Places);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.lock().taken -= 1;
        self.0.changed.notify_waiters();
    }
}

impl Server {
    /// Waits for a place, applies the fault to the call and answers with `answer()` if the
    /// fault lets it.
    async fn answer(&self, answer: impl FnOnce() -> Response) -> Response {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let _place = self.places.take().await;
        let reaction = {
            let fault = self
                .fault
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let mut rng = self
                .rng
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            fault.react(&mut *rng)
        };
        if !matches!(reaction, Reaction::Answer { fail: false, .. }) {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        match reaction {
            Reaction::Unavailable {
                retry_after_s: Some(seconds),
            } => (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, seconds.to_string())],
                "overloaded: retry later",
            )
                .into_response(),
            Reaction::Unavailable {
                retry_after_s: None,
            } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable").into_response(),
            Reaction::Hang => {
                tokio::time::sleep(HANG).await;
                answer()
            }
            Reaction::Answer { delay, fail } => {
                tokio::time::sleep(delay).await;
                if fail {
                    (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
                } else {
                    answer()
                }
            }
        }
    }
}

/// The running backends, one per [`Backend`].
#[derive(Debug)]
pub struct Backends {
    servers: BTreeMap<Backend, (SocketAddr, Arc<Server>)>,
}

impl Backends {
    /// Starts every backend on a free port of 127.0.0.1, healthy (at its
    /// [`Backend::healthy_latency`]); backend number `i` (in [`Backend::ALL`]) draws its
    /// faults' reactions from a generator seeded with `seed + i`, so the n-th call to a backend
    /// meets the same reaction in every instance started with `seed` (given the same fault).
    ///
    /// # Errors
    /// A port cannot be bound.
    pub async fn start_seeded(seed: u64) -> std::io::Result<Backends> {
        let mut servers = BTreeMap::new();
        for (index, backend) in (0u64..).zip(Backend::ALL) {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            let server = Arc::new(Server {
                fault: RwLock::new(Fault {
                    latency: Some(backend.healthy_latency()),
                    ..Fault::default()
                }),
                rng: Mutex::new(StdRng::seed_from_u64(seed.wrapping_add(index))),
                up: watch::Sender::new(true),
                calls: AtomicU64::new(0),
                errors: AtomicU64::new(0),
                places: Places::new(DEFAULT_CAPACITY),
            });
            let router = routes(backend).with_state(Arc::clone(&server));
            tokio::spawn(supervise(addr, listener, router, Arc::clone(&server)));
            servers.insert(backend, (addr, server));
        }
        Ok(Backends { servers })
    }

    /// The address of `backend`.
    pub fn addr(&self, backend: Backend) -> SocketAddr {
        self.servers[&backend].0
    }

    /// Calls that reached `backend` so far.
    pub fn calls(&self, backend: Backend) -> u64 {
        self.servers[&backend].1.calls.load(Ordering::Relaxed)
    }

    /// Calls that `backend` answered with an error of its own (500, 503) or let hang, so far.
    pub fn errors(&self, backend: Backend) -> u64 {
        self.servers[&backend].1.errors.load(Ordering::Relaxed)
    }

    /// Sets every backend's fault to `phase`'s (healthy if it names none; a fault without a
    /// latency keeps the backend's [`Backend::healthy_latency`]) and its capacity, closing the
    /// port of a backend whose outage refuses connections and opening it again when it ends.
    pub fn apply(&self, phase: &Phase) {
        for (backend, (_, server)) in &self.servers {
            let mut fault = phase.fault(*backend);
            fault.latency.get_or_insert(backend.healthy_latency());
            server
                .places
                .set_capacity(fault.capacity.unwrap_or(DEFAULT_CAPACITY));
            let up = !fault.refuses_connections();
            // The fault first: a call that slips in while the port closes is answered 503.
            *server
                .fault
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = fault;
            server
                .up
                .send_if_modified(|was_up| std::mem::replace(was_up, up) != up);
        }
    }
}

fn routes(backend: Backend) -> Router<Arc<Server>> {
    match backend {
        Backend::Catalog => Router::new().route("/titles/{id}", get(title)),
        Backend::Ratings => Router::new().route("/ratings/{ids}", get(ratings)),
        Backend::Recommendations => {
            Router::new().route("/recommendations/{id}", get(recommendations))
        }
        Backend::Availability => Router::new().route("/availability/{id}", get(availability)),
        Backend::Prices | Backend::PricesFixed => Router::new().route("/prices/{id}", get(prices)),
    }
}

async fn title(State(server): State<Arc<Server>>, Path(id): Path<u32>) -> Response {
    server.answer(|| Json(Title::of(id)).into_response()).await
}

/// `GET /ratings/1,2,3`: `{"1": 3.7, "2": 4.9, "3": 3.6}`.
async fn ratings(State(server): State<Arc<Server>>, Path(ids): Path<String>) -> Response {
    let ids: Result<Vec<u32>, _> = ids.split(',').map(str::parse).collect();
    let Ok(ids) = ids else {
        return (
            StatusCode::BAD_REQUEST,
            "ids must be numbers separated by commas",
        )
            .into_response();
    };
    server
        .answer(|| {
            let ratings: BTreeMap<u32, f32> = ids
                .iter()
                .map(|&id| (id, catalogue::rating_of(id)))
                .collect();
            Json(ratings).into_response()
        })
        .await
}

async fn recommendations(State(server): State<Arc<Server>>, Path(id): Path<u32>) -> Response {
    server
        .answer(|| Json(catalogue::recommendations_for(id)).into_response())
        .await
}

async fn availability(State(server): State<Arc<Server>>, Path(id): Path<u32>) -> Response {
    server
        .answer(|| Json(catalogue::availability_of(id)).into_response())
        .await
}

async fn prices(State(server): State<Arc<Server>>, Path(id): Path<u32>) -> Response {
    server
        .answer(|| Json(catalogue::price_of(id)).into_response())
        .await
}

/// Serves `router` on `addr` while the server is up: when it goes down the listener is closed
/// (connections are refused; calls in flight finish), and when it comes back the same port is
/// bound again.
async fn supervise(addr: SocketAddr, listener: TcpListener, router: Router, server: Arc<Server>) {
    let mut listener = Some(listener);
    let mut up = server.up.subscribe();
    loop {
        let Some(bound) = listener.take() else {
            return;
        };
        let mut down = server.up.subscribe();
        let serving = axum::serve(bound, router.clone()).with_graceful_shutdown(async move {
            let _ = down.wait_for(|up| !*up).await;
        });
        tokio::spawn(async move {
            if let Err(err) = serving.await {
                tracing::warn!(target: "hystrix_demo::backends", "backend on {addr} stopped: {err}");
            }
        });
        if up.wait_for(|up| !*up).await.is_err() || up.wait_for(|up| *up).await.is_err() {
            return;
        }
        listener = rebind(addr).await;
    }
}

/// Binds `addr` again, retrying for a second (the old listener may still be closing).
async fn rebind(addr: SocketAddr) -> Option<TcpListener> {
    for _ in 0..20 {
        match TcpListener::bind(addr).await {
            Ok(listener) => return Some(listener),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    tracing::error!(target: "hystrix_demo::backends", "cannot bind {addr} again: the backend stays down");
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Outage, Scenario};
    use std::io::{Read, Write};

    /// One plain HTTP/1.0 GET: the status line and the body, or the connect error.
    fn get(addr: SocketAddr, path: &str) -> std::io::Result<(String, String)> {
        let mut stream = std::net::TcpStream::connect(addr)?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n")?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        let status = text.lines().next().unwrap_or_default().to_owned();
        let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
        Ok((status, body))
    }

    async fn get_async(addr: SocketAddr, path: &'static str) -> std::io::Result<(String, String)> {
        tokio::task::spawn_blocking(move || get(addr, path))
            .await
            .map_err(std::io::Error::other)?
    }

    fn phase_with(backend: Backend, fault: Fault) -> Phase {
        let mut phase = Scenario::load("calm")
            .unwrap()
            .schedule(Duration::from_secs(1))
            .unwrap()
            .phases
            .remove(0);
        phase.faults.insert(backend, fault);
        phase
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn backends_answer_their_data_and_faults_change_it() {
        let backends = Backends::start_seeded(0).await.unwrap();
        let ratings = backends.addr(Backend::Ratings);
        assert_eq!(
            get_async(ratings, "/ratings/1,25").await.unwrap(),
            (
                "HTTP/1.0 200 OK".to_owned(),
                r#"{"1":3.7,"25":2.5}"#.to_owned()
            )
        );
        let catalog = backends.addr(Backend::Catalog);
        assert_eq!(
            get_async(catalog, "/titles/9").await.unwrap().1,
            r#"{"id":9,"title":"The Last Orchard","year":1963}"#
        );

        backends.apply(&phase_with(
            Backend::Ratings,
            Fault {
                error_rate: 1.0,
                ..Fault::default()
            },
        ));
        assert_eq!(
            get_async(ratings, "/ratings/1").await.unwrap().0,
            "HTTP/1.0 500 Internal Server Error"
        );
        backends.apply(&phase_with(
            Backend::Availability,
            Fault {
                retry_after_s: Some(2),
                ..Fault::default()
            },
        ));
        // The ratings fault is lifted by a phase that does not name it.
        assert_eq!(
            get_async(ratings, "/ratings/1").await.unwrap().0,
            "HTTP/1.0 200 OK"
        );
        let availability = backends.addr(Backend::Availability);
        let mut stream = std::net::TcpStream::connect(availability).unwrap();
        write!(stream, "GET /availability/1 HTTP/1.0\r\n\r\n").unwrap();
        let mut text = String::new();
        tokio::task::block_in_place(|| stream.read_to_string(&mut text)).unwrap();
        assert!(
            text.starts_with("HTTP/1.0 503 Service Unavailable"),
            "{text}"
        );
        assert!(text.to_lowercase().contains("retry-after: 2\r\n"), "{text}");
        assert!(backends.calls(Backend::Ratings) >= 3);
        // Its own errors: one 500 of ratings, one 503 of availability; none of the catalog.
        assert_eq!(backends.errors(Backend::Ratings), 1);
        assert_eq!(backends.errors(Backend::Availability), 1);
        assert_eq!(backends.errors(Backend::Catalog), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_past_the_capacity_wait_their_turn_and_a_higher_capacity_lets_them_in() {
        let places = Arc::new(Places::new(1));
        let (served, mut order) = tokio::sync::mpsc::unbounded_channel();
        let (release, _) = tokio::sync::broadcast::channel::<()>(1);
        let first = places.take().await;
        let mut callers = Vec::new();
        for call in 1..=3 {
            let (places, served, mut released) =
                (Arc::clone(&places), served.clone(), release.subscribe());
            callers.push(tokio::spawn(async move {
                let _place = places.take().await;
                let _ = served.send(call);
                let _ = released.recv().await;
            }));
            // Each call in line before the next one arrives.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let nothing = tokio::time::timeout(Duration::from_millis(50), order.recv()).await;
        assert!(nothing.is_err(), "no place is free: {nothing:?}");
        drop(first);
        assert_eq!(order.recv().await, Some(1));
        // Capacity 3: the two others come in, in the order they arrived.
        places.set_capacity(3);
        assert_eq!((order.recv().await, order.recv().await), (Some(2), Some(3)));
        assert_eq!(places.lock().taken, 3);
        let _ = release.send(());
        for caller in callers {
            caller.await.unwrap();
        }
        let state = places.lock();
        assert_eq!((state.taken, state.waiting.len()), (0, 0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_that_leaves_the_line_lets_the_next_one_in() {
        let places = Arc::new(Places::new(1));
        let first = places.take().await;
        let gone = {
            let places = Arc::clone(&places);
            tokio::spawn(async move {
                let _place = places.take().await;
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let next = {
            let places = Arc::clone(&places);
            tokio::spawn(async move {
                let _place = places.take().await;
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(places.lock().waiting.len(), 2);
        // The first in line gives up (its client went away): it leaves the line.
        gone.abort();
        let _ = gone.await;
        assert_eq!(places.lock().waiting.len(), 1);
        drop(first);
        tokio::time::timeout(Duration::from_secs(1), next)
            .await
            .expect("the next in line is served")
            .unwrap();
        assert_eq!(places.lock().taken, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_outage_refuses_connections_and_recovery_opens_the_same_port() {
        let backends = Backends::start_seeded(0).await.unwrap();
        let addr = backends.addr(Backend::Recommendations);
        backends.apply(&phase_with(
            Backend::Recommendations,
            Fault {
                outage: Some(Outage::Refused),
                ..Fault::default()
            },
        ));
        let mut refused = false;
        for _ in 0..50 {
            match get_async(addr, "/recommendations/1").await {
                Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => {
                    refused = true;
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        assert!(refused, "the port should close");

        backends.apply(&phase_with(Backend::Catalog, Fault::default()));
        let mut answer = None;
        for _ in 0..50 {
            if let Ok(got) = get_async(addr, "/recommendations/1").await {
                answer = Some(got);
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (status, body) = answer.expect("the port should open again");
        assert_eq!(status, "HTTP/1.0 200 OK");
        assert!(body.starts_with(r#"[{"id":2,"title":"#), "{body}");
    }
}
