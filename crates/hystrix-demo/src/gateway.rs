//! The gateway: a movie-catalogue edge API whose every page is put together from five
//! backends, each called through a hystrix-rs command (and a sixth called beside it, only to
//! compare).
//!
//! `GET /movies/{id}` answers the movie's title and year, its rating, three recommended
//! movies with theirs, where it can be streamed, its rental price, and a "because you
//! watched" line:
//!
//! | part | command | how it is called | fallback |
//! |---|---|---|---|
//! | title | `GetTitle` | blocking client (ureq), THREAD isolation on pool `Catalog` | the last title seen for the id (stale), else a placeholder |
//! | ratings | `GetRatings` via collapser `GetRating` | one async call for the page's ratings, SEMAPHORE | the last rating seen per id (stale) |
//! | recommendations | `GetRecommendations` | async, SEMAPHORE, through `HystrixLayer`; up to 3 attempts through the breaker, within a retry budget | none shown (fail silent) |
//! | availability | `GetAvailability` | async, SEMAPHORE, through `HystrixLayer`; a hedge after 40 ms; 503 + Retry-After trips it now | "unknown" (a static value) |
//! | price | `GetPrices` | async, through `HystrixLayer`, under an adaptive concurrency limit (AIMD), no breaker | none shown ("price unknown") |
//!
//! Beside each page the gateway calls the second prices backend through `GetPricesFixed`, the
//! same command under a fixed limit of [`FIXED_PRICES_LIMIT`] permits, without waiting for it:
//! its answer is not used, it is there to compare the two limits when the prices backends'
//! capacity drops.
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
use std::time::{Duration, Instant};

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

use crate::catalogue::{Availability, CATALOGUE_SIZE, Price, Recommendation, Title};
use crate::http::{self, BackendError, HttpClient};
use crate::scenario::{Backend, Chaos, FIXED_PRICES_LIMIT};

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

/// The breakers' health window of one gateway instance, in ms (see [`command`]).
pub const HEALTH_WINDOW_MS: u64 = 1000;

/// The breakers' health interval (and bucket), in ms.
const HEALTH_INTERVAL_MS: u64 = 250;

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
        .property("metrics.rollingStats.timeInMilliseconds", HEALTH_WINDOW_MS)
        .property(
            "metrics.rollingStats.numBuckets",
            HEALTH_WINDOW_MS / HEALTH_INTERVAL_MS,
        )
        .property(
            "metrics.healthSnapshot.intervalInMilliseconds",
            HEALTH_INTERVAL_MS,
        )
        .property("metrics.rollingPercentile.timeInMilliseconds", 5000u64)
        .property("metrics.rollingPercentile.numBuckets", 5u64)
}

/// An async command calling `backend` under SEMAPHORE isolation (20 permits, its
/// [`Backend::timeout_ms`]).
fn semaphore_command(backend: Backend, group: &str, volume: u32) -> CommandBuilder {
    command(backend.command_key(), group, backend.timeout_ms(), volume)
        .isolation(IsolationStrategy::Semaphore)
        .semaphore_max_concurrent_requests(20)
}

/// The most attempts of a `GetRecommendations` call, the first included.
pub const RECOMMENDATION_ATTEMPTS: u32 = 3;

/// `GetRecommendations`'s retries: up to [`RECOMMENDATION_ATTEMPTS`] attempts, each through the
/// breaker and within its share of the 300 ms timeout (100 ms), 10 ms then 20 ms of backoff
/// (with jitter), and a retry budget of 50% of the executions of the last 10 s plus 10 a
/// second. At 50 pages a second with 30% of calls failing, 3 attempts need about
/// 0.3 + 0.09 = 0.39 retries per execution (20 a second): the budget (35 a second) covers
/// them, and in an outage it holds the backend's extra load at that until the breaker opens.
fn with_retries(builder: CommandBuilder) -> CommandBuilder {
    builder
        .property("retry.maxAttempts", u64::from(RECOMMENDATION_ATTEMPTS))
        .property("retry.backoff.initialInMilliseconds", 10u64)
        .property("retry.budget.percent", 50u64)
}

/// The fixed delay, in ms, after which a `GetAvailability` call still running gets a hedge:
/// about three times a healthy backend's p99 (14 ms), so few healthy calls are hedged.
pub const HEDGE_DELAY_MS: u64 = 40;

/// `GetAvailability`'s hedging: a call still running after [`HEDGE_DELAY_MS`] gets one more
/// attempt beside it (a fixed delay: `hedging.delayPercentile` 0), and the first answer wins.
fn with_hedging(builder: CommandBuilder) -> CommandBuilder {
    builder
        .property("hedging.maxAttempts", 2u64)
        .property("hedging.delayInMilliseconds", HEDGE_DELAY_MS)
        .property("hedging.delayPercentile", 0.0)
}

/// The run time, in ms, above which `GetPrices`'s adaptive limit takes a window of calls as
/// queued (a drop): twice the prices backends' service time of about 100 ms.
pub const PRICES_SLOW_MS: u64 = 200;

/// `GetPrices`'s adaptive concurrency limit: AIMD, starting at 20 (the fixed side's limit),
/// from 1 to 64 (the semaphore caps it at 64), one sample per window of 5 executions (their
/// mean run time); a window slower than [`PRICES_SLOW_MS`] or with a timeout halves the limit,
/// one that uses at least half of it adds 1; a call over the limit is refused at once
/// (LIMIT_REJECTED, answered by the fallback).
///
/// AIMD with a run-time threshold, because it settles just above the backend's capacity
/// whatever that is: once more calls are in flight than the backend serves, they queue, the
/// runs take twice the service time and the limit halves, so with a capacity of 2 it moves
/// between about 2 and 5, and it comes down from 20 in a few windows. VEGAS (tried first)
/// tolerates up to 6 calls queued (its `beta`, fixed below a limit of 100), which at a
/// capacity of 2 is three service times of waiting: it settled at 7 to 8, its calls taking
/// 350 to 400 ms, close to the timeout; GRADIENT2 also keeps a queue of its own
/// (`gradient2.queueSize`) and follows a long-term average that the drop itself drags up.
fn with_adaptive_limit(builder: CommandBuilder) -> CommandBuilder {
    builder
        .isolation(IsolationStrategy::Semaphore)
        .semaphore_max_concurrent_requests(64)
        .property("execution.isolation.adaptive.enabled", true)
        .property("execution.isolation.adaptive.algorithm", "AIMD")
        .property("execution.isolation.adaptive.aimd.backoffRatio", 0.5)
        .property(
            "execution.isolation.adaptive.aimd.timeoutInMilliseconds",
            PRICES_SLOW_MS,
        )
        .property("execution.isolation.adaptive.initialLimit", 20u64)
        .property("execution.isolation.adaptive.minLimit", 1u64)
        .property("execution.isolation.adaptive.maxLimit", 64u64)
        .property("execution.isolation.adaptive.windowSize", 5u64)
}

/// One attempt of a call through [`HystrixLayer`]: the movie id, and whether it is the call's
/// first attempt (a retry or a hedge is not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Attempt {
    id: u32,
    first: bool,
}

/// A page part as a tower service wrapped in `HystrixLayer` with `fallback`, its calls
/// retried and hedged as the command's properties say (every attempt after the first is
/// made with `first: false`).
fn through_layer<S, T>(command: DemoCommand, call: S, fallback: T) -> Part<T>
where
    S: tower::Service<Attempt, Response = T, Error = BackendError> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    T: Clone + Send + Sync + 'static,
{
    BoxCloneSyncService::new(
        tower::ServiceBuilder::new()
            .map_request(|id: u32| Attempt { id, first: true })
            .layer(
                HystrixLayer::new(command)
                    .fallback_value(fallback)
                    .retry_with(|attempt: &Attempt| {
                        Some(Attempt {
                            first: false,
                            ..*attempt
                        })
                    }),
            )
            .service(call),
    )
}

/// `GET url_of(id)` as a service of [`Attempt`]s, its JSON made into the part by `into_part`.
fn get_part<B, T>(
    client: HttpClient,
    url_of: impl Fn(u32) -> String + Clone + Send + Sync + 'static,
    into_part: fn(B) -> T,
) -> impl tower::Service<Attempt, Response = T, Error = BackendError, Future: Send + 'static>
+ Clone
+ Send
+ Sync
+ 'static
where
    B: serde::de::DeserializeOwned + Send + 'static,
    T: Send + 'static,
{
    tower::service_fn(move |attempt: Attempt| {
        let (client, url) = (client.clone(), url_of(attempt.id));
        async move { http::get_json(&client, &url).await.map(into_part) }
    })
}

/// Durations recorded as the calls end, taken out at each phase boundary.
#[derive(Debug, Default)]
pub struct TimeLog(Mutex<Vec<Duration>>);

impl TimeLog {
    fn record(&self, took: Duration) {
        self.lock().push(took);
    }

    /// The durations recorded since the last call, in the order they were recorded.
    pub fn take(&self) -> Vec<Duration> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Duration>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
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
    /// Its rental price in cents; `null` when unknown (the adaptive limit shed the call, or
    /// it failed).
    pub price_cents: Option<u32>,
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
    /// Hedges of `GetAvailability` that answered first.
    hedges_won: Arc<AtomicU64>,
    /// How long each availability part took, as the page waited for it.
    availability_times: Arc<TimeLog>,
    prices: Part<Option<Price>>,
    prices_fixed: Part<Option<Price>>,
    /// Per prices command, the run times of its calls that the backend answered.
    price_times: BTreeMap<Backend, Arc<TimeLog>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").finish_non_exhaustive()
    }
}

impl Gateway {
    /// One instance's gateway, without shared state: see [`Gateway::with_shared_state`].
    ///
    /// # Errors
    /// A command definition is refused (a bug: the settings are fixed).
    #[cfg(test)]
    pub fn new(
        registry: &Registry,
        addr_of: impl Fn(Backend) -> std::net::SocketAddr,
        volume: u32,
    ) -> Result<Gateway, ConfigError> {
        Gateway::with_shared_state(registry, addr_of, volume, false, HEALTH_WINDOW_MS)
    }

    /// Defines the commands in `registry` (whose executor runs the collapser's batches) for
    /// backends at `addr_of(backend)`, their breakers tripping after `volume` requests (see
    /// [`volume_threshold`]). With `shared` the commands that have a breaker (`GetTitle`,
    /// `GetRatings`, `GetRecommendations`, `GetAvailability`) share its state through the
    /// registry's state store (which it must have); their health window is `window_ms` long, in
    /// ms (a multiple of 250 ms; [`HEALTH_WINDOW_MS`] for one instance: one instance of several
    /// sees its share of the calls, and takes a longer window to judge as many).
    ///
    /// # Errors
    /// A command definition is refused (a bug: the settings are fixed; with `shared`, the
    /// registry has no state store).
    pub fn with_shared_state(
        registry: &Registry,
        addr_of: impl Fn(Backend) -> std::net::SocketAddr,
        volume: u32,
        shared: bool,
        window_ms: u64,
    ) -> Result<Gateway, ConfigError> {
        let breaker = |builder: CommandBuilder| {
            builder
                .shared_state(shared)
                .property("metrics.rollingStats.timeInMilliseconds", window_ms)
                .property(
                    "metrics.rollingStats.numBuckets",
                    (window_ms / HEALTH_INTERVAL_MS).max(1),
                )
        };
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
        .thread_pool_core_size(CATALOG_POOL_THREADS);
        let get_title = breaker(get_title)
            .classify(http::classify)
            .build_in(registry)?;

        let get_ratings = breaker(semaphore_command(Backend::Ratings, "Ratings", volume))
            .classify(http::classify)
            .build_in(registry)?;
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

        let get_recommendations = breaker(with_retries(semaphore_command(
            Backend::Recommendations,
            "Recommendations",
            volume,
        )))
        .classify(http::classify)
        .build_in(registry)?;
        commands.insert(Backend::Recommendations, get_recommendations.clone());
        let base = url(Backend::Recommendations);
        let recommendations = through_layer(
            get_recommendations,
            get_part(
                client.clone(),
                move |id| format!("{base}/recommendations/{id}"),
                |items| Recommendations {
                    items,
                    omitted: false,
                },
            ),
            Recommendations {
                items: Vec::new(),
                omitted: true,
            },
        );

        let get_availability = breaker(with_hedging(semaphore_command(
            Backend::Availability,
            "Availability",
            volume,
        )))
        .classify(http::classify)
        .build_in(registry)?;
        commands.insert(Backend::Availability, get_availability.clone());
        let hedges_won = Arc::new(AtomicU64::new(0));
        let availability = {
            let (client, base, won) = (
                client.clone(),
                url(Backend::Availability),
                Arc::clone(&hedges_won),
            );
            // A hedge that answers is the winner: the loser's call is dropped unanswered.
            let call = tower::service_fn(move |attempt: Attempt| {
                let (client, won) = (client.clone(), Arc::clone(&won));
                let url = format!("{base}/availability/{}", attempt.id);
                async move {
                    let available: Availability = http::get_json(&client, &url).await?;
                    if !attempt.first {
                        won.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Regions(Some(available.regions)))
                }
            });
            through_layer(get_availability, call, Regions(None))
        };

        // No breaker on either prices command: what the capacity drop compares is the two
        // limits alone (a breaker opening on timeouts would shed the fixed side's calls too).
        let mut price_times = BTreeMap::new();
        let mut prices_part = |backend: Backend, builder: CommandBuilder| {
            let command = builder
                .circuit_breaker_enabled(false)
                .classify(http::classify)
                .build_in(registry)?;
            commands.insert(backend, command.clone());
            let times = Arc::new(TimeLog::default());
            price_times.insert(backend, Arc::clone(&times));
            let (client, base) = (client.clone(), url(backend));
            let call = tower::service_fn(move |attempt: Attempt| {
                let (client, times) = (client.clone(), Arc::clone(&times));
                let url = format!("{base}/prices/{}", attempt.id);
                async move {
                    let start = Instant::now();
                    let price: Price = http::get_json(&client, &url).await?;
                    times.record(start.elapsed());
                    Ok(Some(price))
                }
            });
            Ok::<_, ConfigError>(through_layer(command, call, None))
        };
        let prices = prices_part(
            Backend::Prices,
            with_adaptive_limit(command(
                Backend::Prices.command_key(),
                "Prices",
                Backend::Prices.timeout_ms(),
                volume,
            )),
        )?;
        let prices_fixed = prices_part(
            Backend::PricesFixed,
            semaphore_command(Backend::PricesFixed, "PricesFixed", volume)
                .semaphore_max_concurrent_requests(FIXED_PRICES_LIMIT),
        )?;

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
            hedges_won,
            availability_times: Arc::new(TimeLog::default()),
            prices,
            prices_fixed,
            price_times,
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

    /// Hedges of `GetAvailability` that answered first, so far.
    pub fn hedges_won(&self) -> u64 {
        self.hedges_won.load(Ordering::Relaxed)
    }

    /// How long each availability part took since the last call, as the pages waited for it
    /// (hedges included, fallbacks too).
    pub fn take_availability_times(&self) -> Vec<Duration> {
        self.availability_times.take()
    }

    /// The run times of `backend`'s calls that its backend answered since the last call (the
    /// calls admitted by the command's limit and not cut off at the timeout), for the two
    /// prices backends; empty for the others.
    pub fn take_price_times(&self, backend: Backend) -> Vec<Duration> {
        self.price_times
            .get(&backend)
            .map_or_else(Vec::new, |times| times.take())
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
            let start = Instant::now();
            let available = self.availability.clone().oneshot(id).await;
            self.availability_times.record(start.elapsed());
            available.unwrap_or(Regions(None))
        };
        let price = async {
            let price = self.prices.clone().oneshot(id).await;
            price.ok().flatten()
        };
        // The fixed limit's call, for comparison only: the page does not wait for it.
        tokio::spawn(self.prices_fixed.clone().oneshot(id));
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
        let (title, availability, price, (recommendations, ratings)) =
            tokio::join!(title, availability, price, recommendations_and_ratings);
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
        if price.is_none() {
            degraded.push("price");
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
            price_cents: price.map(|price| price.rent_cents),
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
         from the catalog, ratings, recommendations, availability and prices backends\n"
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
                price_cents: Some(crate::catalogue::price_of(9).rent_cents),
                degraded: vec![],
            }
        );
        assert_eq!(
            logged(&context),
            [
                "GetAvailability[SUCCESS]",
                "GetPrices[SUCCESS]",
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
                &"GetRecommendations[FAILURE, FALLBACK_SUCCESS, RETRY, CHAOS_INJECTED]".to_owned()
            ),
            "{:?}",
            logged(&context)
        );
        assert_eq!(backends.calls(Backend::Recommendations), 0);
        let metrics = registry.command_metrics("GetRecommendations").unwrap();
        // Three attempts (retries through the breaker), each injected.
        assert_eq!(metrics.cumulative_count(EventType::ChaosInjected), 3);
        assert_eq!(metrics.cumulative_count(EventType::Retry), 2);

        // Off again: the next page has its recommendations from the backend.
        set_chaos(&registry, Backend::Recommendations, &Chaos::default()).unwrap();
        let page = RequestContext::new().scope(gateway.page(9)).await;
        assert!(page.degraded.is_empty(), "{:?}", page.degraded);
        assert_eq!(backends.calls(Backend::Recommendations), 1);
        assert_eq!(backends.errors(Backend::Recommendations), 0);
        registry.shutdown();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_availability_call_gets_a_hedge_through_the_layer() {
        let (backends, registry, gateway) = setup().await;
        let mut phase = calm_phase();
        // Every call 150 ms slower: the hedge sent at 40 ms is as slow, and the first attempt,
        // ahead by 40 ms, answers first.
        let tail = crate::scenario::Tail {
            rate: 1.0,
            delay_ms: 150,
        };
        phase.faults.insert(
            Backend::Availability,
            Fault {
                tail: Some(tail),
                ..Fault::default()
            },
        );
        backends.apply(&phase);
        let context = RequestContext::new();
        let page = context.scope(gateway.page(4)).await;
        assert!(page.degraded.is_empty(), "{:?}", page.degraded);
        let metrics = registry.command_metrics("GetAvailability").unwrap();
        assert_eq!(
            (
                metrics.cumulative_count(EventType::Success),
                metrics.cumulative_count(EventType::Hedge),
                metrics.cumulative_count(EventType::HedgeCancelled),
                gateway.hedges_won(),
                backends.calls(Backend::Availability),
            ),
            (1, 1, 1, 0, 2)
        );
        let waited = gateway.take_availability_times();
        assert_eq!(waited.len(), 1);
        assert!(waited[0] >= Duration::from_millis(150), "{waited:?}");
        assert!(gateway.take_availability_times().is_empty());
        registry.shutdown();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn prices_come_from_the_adaptive_command_and_their_run_times_are_kept() {
        let (_backends, registry, gateway) = setup().await;
        let page = RequestContext::new().scope(gateway.page(7)).await;
        assert_eq!(page.price_cents, Some(399));
        let limit = registry
            .command_metrics("GetPrices")
            .unwrap()
            .adaptive_limit()
            .map(|limit| limit.limit);
        assert_eq!(limit, Some(20));
        let runs = gateway.take_price_times(Backend::Prices);
        assert_eq!(runs.len(), 1);
        // The prices backends take 90 ms at least.
        assert!(runs[0] >= Duration::from_millis(90), "{runs:?}");
        assert!(gateway.take_price_times(Backend::Catalog).is_empty());
        // GetPricesFixed runs beside the page, not waited for: its call ends on its own.
        for _ in 0..100 {
            if !gateway.take_price_times(Backend::PricesFixed).is_empty() {
                registry.shutdown();
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("GetPricesFixed's call never ended");
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
                price_cents: Some(crate::catalogue::price_of(3).rent_cents),
                degraded: vec!["title", "ratings", "recommendations", "availability"],
            }
        );
        assert_eq!(
            logged(&context),
            [
                "GetAvailability[FAILURE, FALLBACK_SUCCESS]",
                "GetPrices[SUCCESS]",
                "GetRatings[FAILURE, FALLBACK_MISSING, COLLAPSED]",
                "GetRecommendations[FAILURE, FALLBACK_SUCCESS, RETRY]",
                "GetTitle[FAILURE, FALLBACK_SUCCESS, RESPONSE_FROM_CACHE]",
                "GetTitle[FAILURE, FALLBACK_SUCCESS]",
            ]
        );
        assert_eq!(gateway.rating_fallbacks(), 1);
        let recommendations = registry.command_metrics("GetRecommendations").unwrap();
        assert_eq!(
            (
                backends.calls(Backend::Recommendations),
                recommendations.cumulative_count(EventType::Failure),
                recommendations.cumulative_count(EventType::Retry),
                recommendations.cumulative_count(EventType::RetryBudgetExhausted),
            ),
            // The first page's call, then three attempts: the request log above shows the
            // entry's events as the tower layer recorded them (RETRY once), the metrics all.
            (4, 3, 2, 0)
        );
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
