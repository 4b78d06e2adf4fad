//! The unprotected twin: the same movie gateway written the naive way, to show by contrast
//! what the protected one is worth.
//!
//! It serves the same `GET /movies/{id}` from the same kinds of backends with the same HTTP
//! clients, but calls them directly: no commands, thread pools, semaphores, breakers,
//! fallbacks, request cache, collapser or retry; each call has a socket timeout of
//! [`SOCKET_TIMEOUT`] and nothing else. The catalog's blocking client runs on the async
//! runtime's blocking threads (`spawn_blocking`, as naive code does), and the title is called
//! twice per page (no request cache). A page any of whose calls failed is answered `502`.
//!
//! The twin runs on its own async runtime (one worker thread and its blocking threads) with
//! its own instances of the backends, seeded like the protected side's, and its own load
//! generator sending the same requests on the same schedule: neither side adds load to the
//! other's backends, and a twin stuck in its backends cannot take the protected side's
//! worker threads.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use indicatif::ProgressBar;
use tokio::net::TcpListener;

use crate::backends::Backends;
use crate::catalogue::{Availability, CATALOGUE_SIZE, Price, Recommendation, Title};
use crate::gateway::{Page, RecommendedMovie};
use crate::http::{self, BackendError, BlockingClient, HttpClient, InFlight};
use crate::load::LoadGenerator;
use crate::scenario::{Backend, Phase, Schedule};
use crate::stats::Held;

/// The only protection the twin has: each backend call gives up after this long (a
/// generous client timeout, as many services are configured with; longer than a hang's
/// [`HANG`](crate::scenario::HANG), so a hung call holds its connection until the backend
/// answers).
pub const SOCKET_TIMEOUT: Duration = Duration::from_secs(10);

/// The naive gateway.
#[derive(Debug)]
struct Naive {
    client: HttpClient,
    catalog: BlockingClient,
    /// Blocking threads held in catalog calls now.
    threads: InFlight,
    urls: Vec<(Backend, String)>,
}

impl Naive {
    /// The naive gateway over `backends`, with fresh clients.
    fn new(backends: &Backends) -> Naive {
        Naive {
            client: http::async_client(),
            catalog: http::blocking_client_within(SOCKET_TIMEOUT),
            threads: InFlight::default(),
            urls: Backend::ALL
                .into_iter()
                .map(|b| (b, format!("http://{}", backends.addr(b))))
                .collect(),
        }
    }

    fn url(&self, backend: Backend) -> &str {
        self.urls
            .iter()
            .find(|(b, _)| *b == backend)
            .map_or("", |(_, url)| url.as_str())
    }

    /// `GET path` of `backend` with the async client, within [`SOCKET_TIMEOUT`].
    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        backend: Backend,
        path: &str,
    ) -> Result<T, BackendError> {
        let url = format!("{}{path}", self.url(backend));
        within(http::get_json(&self.client, &url)).await
    }

    /// The title of `id`, from the catalog with the blocking client on a blocking thread.
    async fn title(&self, id: u32) -> Result<Title, BackendError> {
        let (client, threads) = (self.catalog.clone(), self.threads.clone());
        let url = format!("{}/titles/{id}", self.url(Backend::Catalog));
        tokio::task::spawn_blocking(move || {
            let _thread = threads.enter();
            http::get_json_blocking(&client, &url)
        })
        .await
        .map_err(|err| BackendError::Transport(format!("the blocking call failed: {err}")))?
    }

    /// Movie `id`'s page: every part or an error.
    async fn page(&self, id: u32) -> Result<Page, BackendError> {
        let recommendations_and_ratings = async {
            let recommendations: Vec<Recommendation> = self
                .get(Backend::Recommendations, &format!("/recommendations/{id}"))
                .await?;
            let ids: Vec<String> = std::iter::once(id)
                .chain(recommendations.iter().map(|r| r.id))
                .map(|id| id.to_string())
                .collect();
            let ratings: std::collections::HashMap<u32, f32> = self
                .get(Backend::Ratings, &format!("/ratings/{}", ids.join(",")))
                .await?;
            Ok((recommendations, ratings))
        };
        let (availability_path, price_path) =
            (format!("/availability/{id}"), format!("/prices/{id}"));
        let availability = self.get::<Availability>(Backend::Availability, &availability_path);
        let price = self.get::<Price>(Backend::Prices, &price_path);
        let (title, availability, price, (recommendations, ratings)) = tokio::try_join!(
            self.title(id),
            availability,
            price,
            recommendations_and_ratings
        )?;
        // No request cache: the "because you watched" line calls the catalog again.
        let again = self.title(id).await?;
        Ok(Page {
            id,
            year: Some(title.year),
            title: title.title,
            rating: ratings.get(&id).copied(),
            recommendations: recommendations
                .into_iter()
                .map(|movie| RecommendedMovie {
                    rating: ratings.get(&movie.id).copied(),
                    id: movie.id,
                    title: movie.title,
                })
                .collect(),
            because_you_watched: again.title,
            availability: Some(availability.regions),
            price_cents: Some(price.rent_cents),
            degraded: Vec::new(),
        })
    }
}

/// `fut` within [`SOCKET_TIMEOUT`].
async fn within<T>(fut: impl Future<Output = Result<T, BackendError>>) -> Result<T, BackendError> {
    tokio::time::timeout(SOCKET_TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| {
            Err(BackendError::Transport(format!(
                "no answer within {} s",
                SOCKET_TIMEOUT.as_secs()
            )))
        })
}

async fn movie(State(naive): State<Arc<Naive>>, Path(id): Path<u32>) -> Response {
    if !(1..=CATALOGUE_SIZE).contains(&id) {
        let message = format!("no movie {id}: ids are 1 to {CATALOGUE_SIZE}");
        return (StatusCode::NOT_FOUND, message).into_response();
    }
    match naive.page(id).await {
        Ok(page) => Json(page).into_response(),
        Err(err) => (StatusCode::BAD_GATEWAY, err.to_string()).into_response(),
    }
}

/// The twin's load and what it holds, for the live view.
#[derive(Debug, Clone)]
pub struct TwinGauges {
    load: LoadGenerator,
    naive: Arc<Naive>,
}

impl TwinGauges {
    /// Its load generator (for its counts).
    pub fn load(&self) -> &LoadGenerator {
        &self.load
    }

    /// What the twin holds now.
    pub fn held(&self) -> Held {
        let naive = &self.naive;
        Held {
            requests: self.load.in_flight(),
            connections: naive.client.in_flight().now() + naive.catalog.in_flight().now(),
            threads: naive.threads.now(),
        }
    }
}

/// The running twin: its runtime, backends, gateway and load.
#[derive(Debug)]
pub struct Twin {
    /// Its runtime, taken when the twin is dropped (to shut it down).
    runtime: Option<tokio::runtime::Runtime>,
    /// Spawns on that runtime.
    handle: tokio::runtime::Handle,
    backends: Arc<Backends>,
    naive: Arc<Naive>,
    load: LoadGenerator,
    url: String,
}

impl Twin {
    /// Starts the twin's runtime, its backends (fault scripts from `seed`) and its gateway on
    /// a free port of 127.0.0.1, and a load generator of `rps` requests per second over
    /// `phases` phases asking for the ids of `seed`.
    ///
    /// # Errors
    /// The runtime cannot start or a port cannot be bound.
    pub async fn start(seed: u64, rps: f64, phases: usize) -> std::io::Result<Twin> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("twin")
            .enable_all()
            .build()?;
        let started = runtime.spawn(async move {
            let backends = Arc::new(Backends::start_seeded(seed).await?);
            let naive = Arc::new(Naive::new(&backends));
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            let url = format!("http://{}", listener.local_addr()?);
            let router = Router::new()
                .route("/movies/{id}", get(movie))
                .with_state(Arc::clone(&naive));
            tokio::spawn(async move { axum::serve(listener, router).await });
            Ok::<_, std::io::Error>((backends, naive, url))
        });
        let (backends, naive, url) = started.await.map_err(std::io::Error::other)??;
        let load = LoadGenerator::new(url.clone(), rps, phases, seed);
        Ok(Twin {
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
            backends,
            naive,
            load,
            url,
        })
    }

    /// The twin gateway's base URL, `http://127.0.0.1:port`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its load generator (for its counts).
    pub fn load(&self) -> &LoadGenerator {
        &self.load
    }

    /// Sends the load on `schedule` from `start` on the twin's runtime; the handle ends when
    /// every request has its answer (or was given up on).
    pub fn send(&self, start: Instant, schedule: &Schedule) -> tokio::task::JoinHandle<()> {
        let (load, schedule) = (self.load.clone(), schedule.clone());
        self.handle.spawn(async move {
            load.run(start, &schedule, ProgressBar::hidden()).await;
        })
    }

    /// Applies `phase`'s faults to the twin's backends (chaos is injected into the protected
    /// gateway's commands only: the twin has none).
    pub fn apply(&self, phase: &Phase) {
        self.backends.apply(phase);
    }

    /// What the twin holds now.
    pub fn held(&self) -> Held {
        self.gauges().held()
    }

    /// Its load and what it holds, to watch while it runs.
    pub fn gauges(&self) -> TwinGauges {
        TwinGauges {
            load: self.load.clone(),
            naive: Arc::clone(&self.naive),
        }
    }
}

/// The twin's runtime is shut down without waiting for its blocking threads (calls hung in a
/// backend end on their own); dropping it from async code would panic otherwise.
impl Drop for Twin {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::Gateway;
    use crate::scenario::{Fault, calm_phase};
    use hystrix::Registry;
    use hystrix::context::RequestContext;

    /// Backends of seed 0 with `fault` on `backend`.
    async fn backends_with(backend: Backend, fault: Fault) -> Backends {
        let backends = Backends::start_seeded(0).await.unwrap();
        let mut phase = calm_phase();
        phase.faults.insert(backend, fault);
        backends.apply(&phase);
        backends
    }

    /// Healthy backends: the twin's page is the protected gateway's, part for part, and it
    /// called the catalog twice (no request cache) where the protected one called it once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_healthy_page_is_the_protected_page_with_two_catalog_calls() {
        let (ours, theirs) = (
            Backends::start_seeded(3).await.unwrap(),
            Backends::start_seeded(3).await.unwrap(),
        );
        let registry = Registry::builder()
            .executor(tokio::runtime::Handle::current())
            .build();
        let gateway = Gateway::new(&registry, |b| ours.addr(b), 10).unwrap();
        let protected = RequestContext::new().scope(gateway.page(9)).await;
        let twin = Naive::new(&theirs).page(9).await.unwrap();
        assert_eq!(twin, protected);
        assert_eq!(ours.calls(Backend::Catalog), 1);
        assert_eq!(theirs.calls(Backend::Catalog), 2);
        for backend in [
            Backend::Ratings,
            Backend::Recommendations,
            Backend::Availability,
        ] {
            assert_eq!(theirs.calls(backend), ours.calls(backend), "{backend}");
        }
        registry.shutdown();
    }

    /// One failing backend fails the whole page (no fallback), with the backend's answer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_backend_fails_the_page() {
        let fault = Fault {
            error_rate: 1.0,
            ..Fault::default()
        };
        let backends = backends_with(Backend::Ratings, fault).await;
        let naive = Naive::new(&backends);
        assert_eq!(
            naive.page(9).await,
            Err(BackendError::Status {
                status: 500,
                retry_after: None
            })
        );
        assert_eq!(naive.client.in_flight().now(), 0);
        assert_eq!(naive.threads.now(), 0);
    }

    /// A hung catalog call holds a blocking thread and a connection until the backend
    /// answers (after [`HANG`](crate::scenario::HANG), 5 s); the twin counts both while it
    /// waits, and neither after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hung_call_holds_a_thread_and_a_connection() {
        let fault = Fault {
            hang_rate: 1.0,
            ..Fault::default()
        };
        let backends = backends_with(Backend::Catalog, fault).await;
        let naive = Arc::new(Naive::new(&backends));
        let page = tokio::spawn({
            let naive = Arc::clone(&naive);
            async move { naive.title(9).await }
        });
        let held = || (naive.threads.now(), naive.catalog.in_flight().now());
        let deadline = Instant::now() + Duration::from_secs(2);
        while held() != (1, 1) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(held(), (1, 1));
        let title = page.await.unwrap().unwrap();
        assert_eq!(title.title, "The Last Orchard");
        assert_eq!(held(), (0, 0));
    }
}
