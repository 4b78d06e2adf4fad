//! The gateway: a movie-catalogue edge API whose every page is put together from four
//! backends, each called through a hystrix-rs command.
//!
//! `GET /movies/{id}` answers the movie's title and year, its rating, three recommended
//! movies with theirs, where it can be streamed, and a "because you watched" line:
//!
//! | part | command | how it is called | fallback |
//! |---|---|---|---|
//! | title | `GetTitle` | blocking client (ureq), THREAD isolation on pool `Catalog` | the last title seen for the id (stale), else a placeholder |
//! | ratings | `GetRatings` via collapser `GetRating` | one async call for the page's ratings, SEMAPHORE | the last rating seen per id (stale) |
//! | recommendations | `GetRecommendations` | async, SEMAPHORE, through `HystrixLayer` | none shown (fail silent) |
//! | availability | `GetAvailability` | async, SEMAPHORE, through `HystrixLayer`; 503 + Retry-After trips it now | "unknown" (a static value) |
//!
//! The title is looked up twice per page (for the header and for the "because you watched"
//! line); the request cache answers the second. Each page runs in its own request context,
//! and its request log is written at debug level (target `hystrix_demo::gateway`). A page is
//! always answered `200`; the parts that came from a fallback are listed in its `degraded`
//! field and in the `x-degraded` header.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use hystrix::collapser::Collapser;
use hystrix::command::{Classifier, CommandBuilder};
use hystrix::context::RequestContext;
use hystrix::tower::HystrixLayer;
use hystrix::{Command, ConfigError, HystrixError, IsolationStrategy, Registry};
use serde::Serialize;
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

use crate::catalogue::{Availability, CATALOGUE_SIZE, Recommendation, Title};
use crate::http::{self, BackendError, HttpClient};
use crate::scenario::{Backend, Chaos};

/// The header listing a page's parts that came from a fallback, e.g. `title,ratings`.
pub static DEGRADED: HeaderName = HeaderName::from_static("x-degraded");

/// The collapser's key.
pub const RATING_COLLAPSER: &str = "GetRating";

/// The thread pool of `GetTitle`: 8 threads, hand-off (no queue).
const CATALOG_POOL_THREADS: u32 = 8;

/// The least requests a breaker must see in its 1 s window before it may trip, for a load of
/// `rps` gateway requests per second (each page calls every command once): a quarter of a
/// second's calls, from 3 to 20, so a breaker trips within a phase at any load.
pub fn volume_threshold(rps: f64) -> u32 {
    (rps / 4.0).round().clamp(3.0, 20.0) as u32
}

/// Every command's breaker settings, small enough that a 10 s run shows breakers open and
/// close: the health window is 1 s (four 250 ms buckets, instead of Hystrix's 10 s, so a
/// phase of a second or two is not diluted by the healthy ones before it); the breaker trips
/// at 50% errors among at least `volume` requests in it, and tries one call after 500 ms
/// open. Latency percentiles cover the last 5 s.
fn command(key: &str, group: &str, timeout_ms: u64, volume: u32) -> CommandBuilder {
    Command::builder(key)
        .group(group)
        .timeout(Duration::from_millis(timeout_ms))
        .circuit_breaker_request_volume_threshold(volume)
        .circuit_breaker_error_threshold_percentage(50)
        .circuit_breaker_sleep_window(Duration::from_millis(500))
        .property("metrics.rollingStats.timeInMilliseconds", 1000u64)
        .property("metrics.rollingStats.numBuckets", 4u64)
        .property("metrics.healthSnapshot.intervalInMilliseconds", 250u64)
        .property("metrics.rollingPercentile.timeInMilliseconds", 5000u64)
        .property("metrics.rollingPercentile.numBuckets", 5u64)
}

/// An async command calling `backend` under SEMAPHORE isolation (20 permits, its
/// [`Backend::timeout_ms`]).
fn semaphore_command(
    backend: Backend,
    group: &str,
    volume: u32,
    registry: &Registry,
) -> Result<DemoCommand, ConfigError> {
    command(backend.command_key(), group, backend.timeout_ms(), volume)
        .isolation(IsolationStrategy::Semaphore)
        .semaphore_max_concurrent_requests(20)
        .classify(http::classify)
        .build_in(registry)
}

/// A page part as a tower service wrapped in `HystrixLayer`: `GET url_of(id)`, its JSON made
/// into the part by `into_part`, and `fallback` when the call fails.
fn through_layer<B, T>(
    command: DemoCommand,
    client: HttpClient,
    url_of: impl Fn(u32) -> String + Clone + Send + Sync + 'static,
    into_part: fn(B) -> T,
    fallback: T,
) -> Part<T>
where
    B: serde::de::DeserializeOwned + Send + 'static,
    T: Clone + Send + Sync + 'static,
{
    let call = tower::service_fn(move |id: u32| {
        let (client, url) = (client.clone(), url_of(id));
        async move { http::get_json(&client, &url).await.map(into_part) }
    });
    BoxCloneSyncService::new(
        tower::ServiceBuilder::new()
            .layer(HystrixLayer::new(command).fallback_value(fallback))
            .service(call),
    )
}

/// Sets the chaos injected into `backend`'s command in `registry` (which must allow chaos, see
/// [`RegistryBuilder::allow_chaos`](hystrix::RegistryBuilder::allow_chaos)): every `chaos.*`
/// property at once, so [`Chaos::default`] turns it off.
///
/// # Errors
/// The registry refuses the values (chaos not allowed there).
pub fn set_chaos(registry: &Registry, backend: Backend, chaos: &Chaos) -> Result<(), ConfigError> {
    let properties = chaos.properties(backend.command_key());
    registry.properties().set_all(
        properties
            .iter()
            .map(|(name, value)| (name.as_str(), value.clone())),
    )
}

/// A gateway command: its runs fail with [`BackendError`], classified by [`http::classify`].
pub type DemoCommand = Command<Classifier<BackendError>>;

/// A page part called through `HystrixLayer`: movie id in, the part out.
type Part<T> = BoxCloneSyncService<u32, T, HystrixError<BackendError>>;

/// Values seen last, per movie id, for stale fallbacks.
#[derive(Debug)]
struct Memory<K, V>(Mutex<HashMap<K, V>>);

impl<K: Hash + Eq, V: Clone> Memory<K, V> {
    fn new() -> Arc<Self> {
        Arc::new(Memory(Mutex::new(HashMap::new())))
    }

    fn remember(&self, key: K, value: V) {
        self.lock().insert(key, value);
    }

    fn recall(&self, key: &K) -> Option<V> {
        self.lock().get(key).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, V>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Where a page part came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The backend, now.
    Live,
    /// The fallback: the last value seen.
    Stale,
    /// The fallback: nothing seen, a stand-in.
    Placeholder,
}

/// A title with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct TitleAnswer {
    /// The title.
    pub title: Title,
    /// Live, stale or a placeholder.
    pub source: Source,
}

impl TitleAnswer {
    fn placeholder(id: u32) -> TitleAnswer {
        TitleAnswer {
            title: Title {
                id,
                title: format!("Movie #{id}"),
                year: 0,
            },
            source: Source::Placeholder,
        }
    }
}

/// One rating as the collapser answers it: live, stale, or none known.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rating {
    /// Stars, when known.
    pub stars: Option<f32>,
    /// Whether it came from the fallback (the last rating seen).
    pub stale: bool,
}

/// The recommendations part: the list, or none because the backend failed (fail silent).
#[derive(Debug, Clone, PartialEq)]
pub struct Recommendations {
    items: Vec<Recommendation>,
    omitted: bool,
}

/// The availability part: the regions, or `None` (unknown) from the static fallback.
#[derive(Debug, Clone, PartialEq)]
pub struct Regions(Option<Vec<String>>);

/// A movie page, as the gateway answers it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Page {
    /// The movie id.
    pub id: u32,
    /// Its title.
    pub title: String,
    /// The year it came out (absent with a placeholder title).
    pub year: Option<u16>,
    /// Its rating in stars.
    pub rating: Option<f32>,
    /// Movies like it, with their ratings.
    pub recommendations: Vec<RecommendedMovie>,
    /// The "because you watched" line (the title again: a request-cache hit).
    pub because_you_watched: String,
    /// Regions where it can be streamed; `null` when unknown.
    pub availability: Option<Vec<String>>,
    /// The parts that came from a fallback.
    pub degraded: Vec<&'static str>,
}

/// A recommended movie on a page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecommendedMovie {
    /// Its id.
    pub id: u32,
    /// Its title.
    pub title: String,
    /// Its rating in stars.
    pub rating: Option<f32>,
}

/// The gateway's commands, clients and stale-value memories.
pub struct Gateway {
    /// Every backend's command (the tower layers and the collapser hold clones).
    commands: BTreeMap<Backend, DemoCommand>,
    get_title: DemoCommand,
    catalog: http::BlockingClient,
    catalog_url: String,
    /// The async client's calls under way (its clones in the layers and the collapser share it).
    async_calls: http::InFlight,
    titles: Arc<Memory<u32, Title>>,
    ratings: Collapser<u32, Rating, BackendError>,
    rating_fallbacks: Arc<AtomicU64>,
    recommendations: Part<Recommendations>,
    availability: Part<Regions>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").finish_non_exhaustive()
    }
}

impl Gateway {
    /// Defines the commands in `registry` (whose executor runs the collapser's batches) for
    /// backends at `addr_of(backend)`, their breakers tripping after `volume` requests (see
    /// [`volume_threshold`]).
    ///
    /// # Errors
    /// A command definition is refused (a bug: the settings are fixed).
    pub fn new(
        registry: &Registry,
        addr_of: impl Fn(Backend) -> std::net::SocketAddr,
        volume: u32,
    ) -> Result<Gateway, ConfigError> {
        let url = |backend| format!("http://{}", addr_of(backend));
        let client = http::async_client();
        let async_calls = client.in_flight().clone();

        let catalog = Backend::Catalog;
        let get_title = command(
            catalog.command_key(),
            "Catalog",
            catalog.timeout_ms(),
            volume,
        )
        .thread_pool_core_size(CATALOG_POOL_THREADS)
        .classify(http::classify)
        .build_in(registry)?;

        let get_ratings = semaphore_command(Backend::Ratings, "Ratings", volume, registry)?;
        let mut commands = BTreeMap::from([
            (Backend::Catalog, get_title.clone()),
            (Backend::Ratings, get_ratings.clone()),
        ]);
        let rating_memory = Memory::<u32, f32>::new();
        let rating_fallbacks = Arc::new(AtomicU64::new(0));
        let ratings = {
            let (client, base, memory) = (
                client.clone(),
                url(Backend::Ratings),
                Arc::clone(&rating_memory),
            );
            let (stale, fallbacks) = (rating_memory, Arc::clone(&rating_fallbacks));
            Collapser::builder(RATING_COLLAPSER)
                // A page queues its ratings at once: a short window is enough to batch them.
                .timer_delay(Duration::from_millis(2))
                .fallback(move |id: &u32, _err: &HystrixError<BackendError>| {
                    fallbacks.fetch_add(1, Ordering::Relaxed);
                    Rating {
                        stars: stale.recall(id),
                        stale: true,
                    }
                })
                .build(
                    get_ratings,
                    move |ids: Vec<u32>| {
                        let (client, memory) = (client.clone(), Arc::clone(&memory));
                        let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
                        let url = format!("{base}/ratings/{}", ids.join(","));
                        async move {
                            let ratings: HashMap<u32, f32> = http::get_json(&client, &url).await?;
                            for (&id, &stars) in &ratings {
                                memory.remember(id, stars);
                            }
                            Ok(ratings)
                        }
                    },
                    |ratings: &mut HashMap<u32, f32>, id: &u32| {
                        ratings.remove(id).map(|stars| Rating {
                            stars: Some(stars),
                            stale: false,
                        })
                    },
                )?
        };

        let get_recommendations = semaphore_command(
            Backend::Recommendations,
            "Recommendations",
            volume,
            registry,
        )?;
        commands.insert(Backend::Recommendations, get_recommendations.clone());
        let base = url(Backend::Recommendations);
        let recommendations = through_layer(
            get_recommendations,
            client.clone(),
            move |id| format!("{base}/recommendations/{id}"),
            |items| Recommendations {
                items,
                omitted: false,
            },
            Recommendations {
                items: Vec::new(),
                omitted: true,
            },
        );

        let get_availability =
            semaphore_command(Backend::Availability, "Availability", volume, registry)?;
        commands.insert(Backend::Availability, get_availability.clone());
        let base = url(Backend::Availability);
        let availability = through_layer(
            get_availability,
            client,
            move |id| format!("{base}/availability/{id}"),
            |available: Availability| Regions(Some(available.regions)),
            Regions(None),
        );

        Ok(Gateway {
            commands,
            get_title,
            catalog: http::blocking_client(),
            catalog_url: url(Backend::Catalog),
            async_calls,
            titles: Memory::new(),
            ratings,
            rating_fallbacks,
            recommendations,
            availability,
        })
    }

    /// The command that calls `backend`.
    pub fn command(&self, backend: Backend) -> &DemoCommand {
        &self.commands[&backend]
    }

    /// Backend calls under way now, each holding a connection: the catalog's (on `Catalog`
    /// pool threads) and the async ones.
    pub fn backend_calls_in_flight(&self) -> u64 {
        self.catalog.in_flight().now() + self.async_calls.now()
    }

    /// The rating collapser's metrics (batches and their sizes).
    pub fn collapser_metrics(&self) -> hystrix::collapser::CollapserMetrics {
        self.ratings.metrics()
    }

    /// Ratings answered by the collapser's per-request fallback so far (the library counts
    /// the failed batch, not the answers its fallback gave).
    pub fn rating_fallbacks(&self) -> u64 {
        self.rating_fallbacks.load(Ordering::Relaxed)
    }

    /// The routes: `GET /movies/{id}` and `GET /` (what there is).
    pub fn router(self: Arc<Self>) -> Router {
        Router::new()
            .route("/movies/{id}", get(movie))
            .route("/", get(index))
            .with_state(self)
    }

    /// Movie `id`'s page, in the request context current (the caller opens one per page).
    pub async fn page(&self, id: u32) -> Page {
        let title = self.title(id);
        let availability = async {
            let available = self.availability.clone().oneshot(id).await;
            available.unwrap_or(Regions(None))
        };
        let recommendations_and_ratings = async {
            let recommendations = self.recommendations.clone().oneshot(id).await;
            let recommendations = recommendations.unwrap_or(Recommendations {
                items: Vec::new(),
                omitted: true,
            });
            // Every rating of the page in one backend call: the collapser batches them.
            let ids: Vec<u32> = std::iter::once(id)
                .chain(recommendations.items.iter().map(|r| r.id))
                .collect();
            let pending: Vec<_> = ids.iter().map(|&id| self.ratings.queue(id)).collect();
            let mut ratings = Vec::with_capacity(pending.len());
            for rating in pending {
                ratings.push(rating.await.map_or(
                    Rating {
                        stars: None,
                        stale: true,
                    },
                    |rating| *rating,
                ));
            }
            (recommendations, ratings)
        };
        let (title, availability, (recommendations, ratings)) =
            tokio::join!(title, availability, recommendations_and_ratings);
        // Another part of the page needs the title again: the request cache answers it.
        let again = self.title(id).await;

        let mut degraded = Vec::new();
        if title.source != Source::Live {
            degraded.push("title");
        }
        if ratings.iter().any(|rating| rating.stale) {
            degraded.push("ratings");
        }
        if recommendations.omitted {
            degraded.push("recommendations");
        }
        if availability.0.is_none() {
            degraded.push("availability");
        }
        let placeholder = title.source == Source::Placeholder;
        Page {
            id,
            year: (!placeholder).then_some(title.title.year),
            title: title.title.title,
            rating: ratings.first().and_then(|rating| rating.stars),
            recommendations: recommendations
                .items
                .into_iter()
                .zip(ratings.iter().skip(1))
                .map(|(movie, rating)| RecommendedMovie {
                    id: movie.id,
                    title: movie.title,
                    rating: rating.stars,
                })
                .collect(),
            because_you_watched: again.title.title,
            availability: availability.0,
            degraded,
        }
    }

    /// `GetTitle` for `id`, through the request cache: the first lookup in a request calls
    /// the catalog on the `Catalog` pool, later ones share its outcome.
    async fn title(&self, id: u32) -> TitleAnswer {
        let (agent, url) = (
            self.catalog.clone(),
            format!("{}/titles/{id}", self.catalog_url),
        );
        let (memory, stale) = (Arc::clone(&self.titles), Arc::clone(&self.titles));
        let answer = self
            .get_title
            .run(move || {
                let title: Title = http::get_json_blocking(&agent, &url)?;
                memory.remember(id, title.clone());
                Ok(TitleAnswer {
                    title,
                    source: Source::Live,
                })
            })
            .fallback(move |_err| {
                Ok::<_, Infallible>(stale.recall(&id).map_or_else(
                    || TitleAnswer::placeholder(id),
                    |title| TitleAnswer {
                        title,
                        source: Source::Stale,
                    },
                ))
            })
            .cache_key(id.to_string())
            .execute_async()
            .await;
        answer.map_or_else(|_| TitleAnswer::placeholder(id), |title| (*title).clone())
    }
}

async fn movie(State(gateway): State<Arc<Gateway>>, Path(id): Path<u32>) -> Response {
    if !(1..=CATALOGUE_SIZE).contains(&id) {
        let message = format!("no movie {id}: ids are 1 to {CATALOGUE_SIZE}");
        return (StatusCode::NOT_FOUND, message).into_response();
    }
    let context = RequestContext::new();
    let page = context.scope(gateway.page(id)).await;
    tracing::debug!(
        target: "hystrix_demo::gateway",
        "GET /movies/{id}: {}",
        context.request_log()
    );
    let degraded = page.degraded.join(",");
    ([(DEGRADED.clone(), degraded)], Json(page)).into_response()
}

async fn index() -> String {
    format!(
        "hystrix-rs demo gateway\n\nGET /movies/{{id}}  a movie page (ids 1 to {CATALOGUE_SIZE}), put together \
         from the catalog, ratings, recommendations and availability backends\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::Backends;
    use crate::scenario::{Fault, Outage, calm_phase};
    use hystrix::{EventType, Status};

    async fn setup() -> (Backends, Registry, Gateway) {
        let backends = Backends::start_seeded(0).await.unwrap();
        let registry = Registry::builder()
            .executor(tokio::runtime::Handle::current())
            .build();
        let gateway = Gateway::new(&registry, |b| backends.addr(b), 10).unwrap();
        (backends, registry, gateway)
    }

    /// The request log's entries as `Key[EVENT, ...]`, sorted (they are listed as they finish).
    fn logged(context: &RequestContext) -> Vec<String> {
        let mut entries: Vec<String> = context
            .request_log()
            .entries()
            .iter()
            .map(|entry| {
                let events: Vec<&str> = entry.events.iter().map(EventType::name).collect();
                format!("{}[{}]", entry.command_key, events.join(", "))
            })
            .collect();
        entries.sort();
        entries
    }

    #[test]
    fn the_volume_threshold_is_a_quarter_second_of_calls_within_bounds() {
        let thresholds: Vec<u32> = [5.0, 12.0, 50.0, 78.0, 100.0, 1000.0]
            .into_iter()
            .map(volume_threshold)
            .collect();
        assert_eq!(thresholds, [3, 3, 13, 20, 20, 20]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_healthy_page_uses_every_command_once_and_the_cache_for_the_title() {
        let (_backends, registry, gateway) = setup().await;
        let context = RequestContext::new();
        let page = context.scope(gateway.page(9)).await;
        assert_eq!(
            page,
            Page {
                id: 9,
                title: "The Last Orchard".into(),
                year: Some(1963),
                rating: Some(crate::catalogue::rating_of(9)),
                recommendations: crate::catalogue::recommendations_for(9)
                    .into_iter()
                    .map(|r| RecommendedMovie {
                        rating: Some(crate::catalogue::rating_of(r.id)),
                        id: r.id,
                        title: r.title,
                    })
                    .collect(),
                because_you_watched: "The Last Orchard".into(),
                availability: Some(crate::catalogue::availability_of(9).regions),
                degraded: vec![],
            }
        );
        assert_eq!(
            logged(&context),
            [
                "GetAvailability[SUCCESS]",
                "GetRatings[SUCCESS, COLLAPSED]",
                "GetRecommendations[SUCCESS]",
                "GetTitle[SUCCESS, RESPONSE_FROM_CACHE]",
                "GetTitle[SUCCESS]",
            ]
        );
        // Four ratings, one backend call.
        let ratings = registry.command_metrics("GetRatings").unwrap();
        assert_eq!(ratings.cumulative_count(EventType::Collapsed), 4);
        assert_eq!(ratings.cumulative_count(EventType::Success), 1);
        registry.shutdown();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn injected_faults_reach_the_fallback_and_never_the_healthy_backend() {
        let backends = Backends::start_seeded(0).await.unwrap();
        let registry = Registry::builder()
            .executor(tokio::runtime::Handle::current())
            .allow_chaos(true)
            .build();
        let gateway = Gateway::new(&registry, |b| backends.addr(b), 10).unwrap();
        let every_attempt = Chaos {
            fault_rate: 1.0,
            ..Chaos::default()
        };
        set_chaos(&registry, Backend::Recommendations, &every_attempt).unwrap();

        let context = RequestContext::new();
        let page = context.scope(gateway.page(9)).await;
        assert_eq!(page.degraded, ["recommendations"]);
        assert!(page.recommendations.is_empty());
        assert!(
            logged(&context).contains(
                &"GetRecommendations[FAILURE, FALLBACK_SUCCESS, CHAOS_INJECTED]".to_owned()
            ),
            "{:?}",
            logged(&context)
        );
        assert_eq!(backends.calls(Backend::Recommendations), 0);
        let metrics = registry.command_metrics("GetRecommendations").unwrap();
        assert_eq!(metrics.cumulative_count(EventType::ChaosInjected), 1);

        // Off again: the next page has its recommendations from the backend.
        set_chaos(&registry, Backend::Recommendations, &Chaos::default()).unwrap();
        let page = RequestContext::new().scope(gateway.page(9)).await;
        assert!(page.degraded.is_empty(), "{:?}", page.degraded);
        assert_eq!(backends.calls(Backend::Recommendations), 1);
        assert_eq!(backends.errors(Backend::Recommendations), 0);
        registry.shutdown();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_registry_that_does_not_allow_chaos_refuses_it() {
        let (_backends, registry, _gateway) = setup().await;
        let chaos = Chaos {
            fault_rate: 0.5,
            ..Chaos::default()
        };
        let err = set_chaos(&registry, Backend::Ratings, &chaos).unwrap_err();
        assert!(err.to_string().contains("chaos.enabled"), "{err}");
        // Turning it off is always accepted.
        set_chaos(&registry, Backend::Ratings, &Chaos::default()).unwrap();
        registry.shutdown();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failing_parts_come_from_their_fallbacks() {
        let (backends, registry, gateway) = setup().await;
        // A first page fills the stale memories.
        RequestContext::new().scope(gateway.page(3)).await;

        let mut phase = calm_phase();
        let failing = Fault {
            error_rate: 1.0,
            ..Fault::default()
        };
        phase.faults.insert(Backend::Catalog, failing.clone());
        phase.faults.insert(Backend::Ratings, failing);
        phase.faults.insert(
            Backend::Recommendations,
            Fault {
                outage: Some(Outage::Unavailable),
                ..Fault::default()
            },
        );
        phase.faults.insert(
            Backend::Availability,
            Fault {
                retry_after_s: Some(30),
                ..Fault::default()
            },
        );
        backends.apply(&phase);

        let context = RequestContext::new();
        let page = context.scope(gateway.page(3)).await;
        assert_eq!(
            page,
            Page {
                id: 3,
                title: Title::of(3).title,
                year: Some(Title::of(3).year),
                rating: Some(crate::catalogue::rating_of(3)),
                recommendations: vec![],
                because_you_watched: Title::of(3).title,
                availability: None,
                degraded: vec!["title", "ratings", "recommendations", "availability"],
            }
        );
        assert_eq!(
            logged(&context),
            [
                "GetAvailability[FAILURE, FALLBACK_SUCCESS]",
                "GetRatings[FAILURE, FALLBACK_MISSING, COLLAPSED]",
                "GetRecommendations[FAILURE, FALLBACK_SUCCESS]",
                "GetTitle[FAILURE, FALLBACK_SUCCESS, RESPONSE_FROM_CACHE]",
                "GetTitle[FAILURE, FALLBACK_SUCCESS]",
            ]
        );
        assert_eq!(gateway.rating_fallbacks(), 1);
        // One 503 with Retry-After opened the availability breaker, for at least 30 s.
        let breaker = registry.circuit_breaker("GetAvailability").unwrap();
        assert_eq!(breaker.status(), Status::Open);
        assert_eq!(
            registry
                .circuit_breaker("GetRecommendations")
                .unwrap()
                .status(),
            Status::Closed
        );
        // A movie never seen has no stale title: a placeholder.
        let page = RequestContext::new().scope(gateway.page(20)).await;
        assert_eq!((page.title.as_str(), page.year), ("Movie #20", None));
        registry.shutdown();
    }
}
