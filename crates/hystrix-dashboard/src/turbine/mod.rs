//! The fleet view: `GET /turbine.stream?cluster=NAME` merges the `/hystrix.stream` of every
//! instance of a cluster into one stream in Turbine's format, which the Hystrix Dashboard (and
//! our page) shows with "Hosts: n" and cluster-wide rates, as Netflix's Turbine did.
//!
//! ```no_run
//! use std::time::Duration;
//! use hystrix_dashboard::turbine::{Instances, Turbine};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let turbine = Turbine::builder()
//!     .cluster("demo", Instances::list([
//!         "http://10.0.0.1:7979/hystrix.stream",
//!         "http://10.0.0.2:7979/hystrix.stream",
//!     ])?)?
//!     .cluster("api", Instances::dns("http://api.internal:7979/hystrix.stream", Duration::from_secs(30))?)?
//!     .build();
//! turbine.serve(7980).await?; // http://127.0.0.1:7980/turbine.stream?cluster=demo
//! # Ok(())
//! # }
//! ```
//!
//! Or on a dashboard's own port: [`DashboardBuilder::turbine`](crate::DashboardBuilder::turbine).
//!
//! # The stream
//! The same Server-Sent Events as `/hystrix.stream` (its headers, `ping: \n\n` on connect and
//! every 500 ms, `data: <json>\n\n` per message, at most 5 clients per cluster and 503 past
//! it, [`TurbineBuilder::max_connections`]). Every [`interval`](TurbineBuilder::interval)
//! (500 ms) it sends one merged message per (`type`, `name`) that a reporting instance of the
//! cluster sent, ordered by type then name. `?cluster=` missing: the cluster named `default`
//! if there is one, else 400; an unknown cluster: 404; both bodies list the clusters; two
//! `cluster` parameters: 400. A
//! `delay` parameter is accepted and ignored, as on `/hystrix.stream`.
//!
//! The instances of a cluster are read while its stream has a client (from the first client
//! to the last, as Turbine 2 does): each by its own task, so a slow or silent instance never
//! holds up the merged stream or the other instances.
//!
//! # The merge, field by field
//! For each (`type`, `name`), over the instances whose latest message has it (Turbine 1's
//! arithmetic, with each rule chosen so that the Hystrix Dashboard's own code, which divides
//! by `reportingHosts`, shows the right numbers):
//!
//! | field | merged value | the dashboard shows |
//! |---|---|---|
//! | `type`, `name` | as sent | |
//! | `reportingHosts` | the sum (1 per host; 1 for a host that omits it) | "Hosts" |
//! | `currentTime` | the latest | |
//! | `isCircuitBreakerOpen` | the number of hosts whose breaker is open, when that is 0 or all; else `{"true": open, "false": closed}` | "Circuit Open" (count = hosts), "Circuit Closed" (0), "Circuit Open n Closed m" |
//! | other numbers: counts (`requestCount`, `rollingCount*`), `errorPercentage`, `latencyExecute_mean`, gauges, our extension numbers | the sum | rate = `requestCount` ÷ window s, per host ÷ hosts; error % and mean latency ÷ hosts |
//! | objects of numbers (`latencyExecute`, `latencyTotal`, `batchSize`) | summed key by key | percentiles ÷ hosts, rounded down |
//! | `propertyValue_*` of `HystrixCommand` and `HystrixCollapser` messages | the value when every host agrees, else counts by value (`{"10000": 2, "5000": 1}`) | the value, unchanged (the rate divides by the command's window, not by hosts) |
//! | `propertyValue_*` numbers of `HystrixThreadPool` messages | the sum | ÷ hosts (its code divides `queueSizeRejectionThreshold` and the window by hosts) |
//! | strings, booleans, `null` (`group`, `threadPool`, `circuitBreakerStatus`, `propertyValue_executionIsolationStrategy`, ...) | the value when every host agrees, else counts by value (Turbine's form, `{"OPEN": 1, "CLOSED": 2}`) | |
//! | arrays | dropped (Hystrix's messages have none) | |
//!
//! A field only some hosts send (slow-call or chaos fields of a command configured so on some
//! hosts only) is merged over those hosts, while `reportingHosts` counts them all: read per
//! host (÷ hosts), such a field is low. Where hosts disagree, the Hystrix Dashboard shows what
//! it showed with Turbine: a mixed `propertyValue_circuitBreakerForceOpen` (an object, truthy)
//! reads "Forced Open" for the whole cluster, a mixed isolation strategy hides the rejected
//! counter, a mixed rolling window makes the rate NaN; our page shows the counts instead.
//!
//! When no instance reports a (type, name) any more, `{"type": T, "name": N, "deleteData":
//! "true"}` is sent instead on the next 8 ticks (8 so that a client that skipped frames still
//! gets it), then nothing. Our page removes the tile; the Hystrix Dashboard reads the field
//! but its handler misses the tile's id (`escapedName` is set later, in `preProcessData`), so
//! there the tile stays, frozen at its last values, until the page is reloaded; a `deleteData` message from an instance
//! removes its record.
//!
//! # Instances come and go
//! An instance is **reporting** while its last message is less than
//! [`instance_timeout`](TurbineBuilder::instance_timeout) old (10 s, the read timeout of
//! Turbine and of the dashboard's proxy), measured on the builder's [`Clock`]; only
//! reporting instances are merged. A connection that fails, ends, answers anything but 200,
//! or receives no byte for that long (a ping every 500 ms keeps a quiet instance's connection)
//! is closed, its messages forgotten, and opened again after a backoff that doubles from
//! 500 ms to 30 s ([`reconnect_backoff`](TurbineBuilder::reconnect_backoff)); a connection
//! that delivers a message starts the backoff over. Instances listed in a file or behind a DNS
//! name are looked for again periodically ([`Instances`]): an instance that leaves is dropped
//! at once, one that comes back is read again.
//!
//! # Bounds
//! At most [`MAX_INSTANCES`] instances per cluster; 10 000 (type, name) per instance and per
//! cluster's merge; 512 fields per message; names and string values of 1 KiB (a message with
//! a longer one is refused) and field names of 256 bytes; lines of 256 KiB; 20 000 messages
//! per instance per second; and 4096 distinct field names in the process, of which one
//! instance may add 512 (so that one instance cannot fill the table for the others). Past a
//! bound the excess is ignored: a line too long closes its connection (and the backoff keeps
//! growing for an instance that keeps doing it), and refused messages and flooding show in the
//! instance's [`Status::last_error`]. A stream that is not `text/event-stream` is refused.
//! Values are summed as sent (negative counts too; a sum past f64's range is `null`), except
//! `reportingHosts`, at least 1 per host. An instance's message
//! is kept in a compact form (its numbers in an array, field names shared): about 900 bytes
//! per command per instance. The aggregation's cost is in BENCHMARKS.md.

mod instances;
mod merge;
mod message;
mod reader;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hystrix::clock::{Clock, SystemClock};
use tokio::sync::watch;

pub use instances::{InstanceUrl, Instances, MAX_INSTANCES};

use crate::sse::{Feed, Schedule};
use instances::Source;
use reader::{AbortOnDrop, Instance};

/// The default of [`TurbineBuilder::interval`]: 500 ms, as `/hystrix.stream`.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(500);

/// The default of [`TurbineBuilder::instance_timeout`]: 10 s, the read timeout of Turbine's
/// `InstanceMonitor` and of the Hystrix Dashboard's proxy.
pub const DEFAULT_INSTANCE_TIMEOUT: Duration = Duration::from_secs(10);

/// The default first and longest waits of [`TurbineBuilder::reconnect_backoff`]: 500 ms,
/// doubling up to 30 s.
pub const DEFAULT_RECONNECT_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(500), Duration::from_secs(30));

/// The path of the merged stream in [`Turbine::router`] (Turbine's).
pub const PATH: &str = "/turbine.stream";

/// Why a [`Turbine`] could not be configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TurbineError {
    /// An instance URL is not `http://host[:port]/path`.
    #[error("invalid instance URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A cluster name is empty, longer than 128 bytes, or has a character other than ASCII
    /// letters, digits, `-`, `_`, `.` and `:` (it travels unencoded in `?cluster=`).
    #[error("invalid cluster name `{0}`: use 1 to 128 ASCII letters, digits, `-`, `_`, `.` or `:`")]
    InvalidCluster(String),
    /// Two clusters have the same name.
    #[error("cluster `{0}` is defined twice")]
    DuplicateCluster(String),
    /// More than [`MAX_INSTANCES`] instances in a list.
    #[error("more than {MAX_INSTANCES} instances in one cluster")]
    TooManyInstances,
}

/// One instance as the turbine sees it now ([`Turbine::instances`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Status {
    /// The stream's URL (for a DNS cluster, with the address it resolved to).
    pub url: String,
    /// Whether its stream is open now.
    pub connected: bool,
    /// Whether its last message is younger than the instance timeout: only these are merged.
    pub reporting: bool,
    /// Messages read from it since the cluster's stream started.
    pub messages: u64,
    /// The (type, name) it has a message for now (forgotten when its connection ends).
    pub records: usize,
    /// Bytes its messages take in memory now, beyond what they share with the others (field
    /// names, layouts).
    pub bytes: usize,
    /// Why its last connection ended or its last message was refused, if one did.
    pub last_error: Option<String>,
}

/// What every reader and the merge share.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) instance_timeout: Duration,
    pub(crate) reconnect_min: Duration,
    pub(crate) reconnect_max: Duration,
    pub(crate) clock: Arc<dyn Clock>,
}

impl Settings {
    fn timeout_ms(&self) -> u64 {
        u64::try_from(self.instance_timeout.as_millis()).unwrap_or(u64::MAX)
    }
}

/// Options for a [`Turbine`].
#[derive(Debug)]
pub struct TurbineBuilder {
    clusters: Vec<(String, Instances)>,
    interval: Duration,
    instance_timeout: Duration,
    reconnect: (Duration, Duration),
    max_connections: usize,
    heartbeat: Duration,
    clock: Arc<dyn Clock>,
    bind_ip: IpAddr,
}

impl TurbineBuilder {
    /// Adds cluster `name` with its instances; its stream is `/turbine.stream?cluster=name`.
    ///
    /// # Errors
    /// [`TurbineError::InvalidCluster`] for a name that is empty, longer than 128 bytes or
    /// has other characters than ASCII letters, digits, `-`, `_`, `.`, `:`;
    /// [`TurbineError::DuplicateCluster`] for a name given before.
    pub fn cluster(mut self, name: &str, instances: Instances) -> Result<Self, TurbineError> {
        let valid = !name.is_empty()
            && name.len() <= 128
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
        if !valid {
            return Err(TurbineError::InvalidCluster(name.to_owned()));
        }
        if self.clusters.iter().any(|(n, _)| n == name) {
            return Err(TurbineError::DuplicateCluster(name.to_owned()));
        }
        self.clusters.push((name.to_owned(), instances));
        Ok(self)
    }

    /// How often the merged stream sends the merge, at least 1 ms; default
    /// [`DEFAULT_INTERVAL`] (500 ms).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval.max(Duration::from_millis(1));
        self
    }

    /// How long an instance stays in the merge after its last message, and how long a
    /// connection may stay silent (no byte, not even a ping) before it is closed, at least
    /// 1 ms; default [`DEFAULT_INSTANCE_TIMEOUT`] (10 s). Keep it above the instances'
    /// stream interval and heartbeat (500 ms).
    pub fn instance_timeout(mut self, timeout: Duration) -> Self {
        self.instance_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The wait before reconnecting to an instance: `first` after a failure, doubling up to
    /// `longest` while it keeps failing (each at least 1 ms; `longest` at least `first`);
    /// default [`DEFAULT_RECONNECT_BACKOFF`] (500 ms to 30 s).
    pub fn reconnect_backoff(mut self, first: Duration, longest: Duration) -> Self {
        let first = first.max(Duration::from_millis(1));
        self.reconnect = (first, longest.max(first));
        self
    }

    /// Clients each cluster's stream serves at once; default 5 (as
    /// `hystrix.config.stream.maxConcurrentConnections`). Past it, 503
    /// `MaxConcurrentConnections reached: <n>`.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// How often each client gets `ping: \n\n`, at least 1 ms; default 500 ms.
    pub fn heartbeat(mut self, heartbeat: Duration) -> Self {
        self.heartbeat = heartbeat.max(Duration::from_millis(1));
        self
    }

    /// The clock that dates messages and decides which instances are reporting; default the
    /// system clock. A [`ManualClock`](hystrix::clock::ManualClock) lets a test expire an
    /// instance exactly.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The address [`Turbine::serve`] binds; default 127.0.0.1.
    pub fn bind_ip(mut self, ip: IpAddr) -> Self {
        self.bind_ip = ip;
        self
    }

    /// The turbine. Starts nothing: a cluster's instances are read while its stream has a
    /// client.
    pub fn build(self) -> Turbine {
        let (shutdown, shut) = watch::channel(false);
        let settings = Arc::new(Settings {
            instance_timeout: self.instance_timeout,
            reconnect_min: self.reconnect.0,
            reconnect_max: self.reconnect.1,
            clock: self.clock,
        });
        let clusters = self
            .clusters
            .into_iter()
            .map(|(name, instances)| {
                let cluster = Arc::new(Cluster {
                    name: name.clone(),
                    source: instances.0,
                    settings: Arc::clone(&settings),
                    current: Mutex::new(Weak::new()),
                });
                let feed = Arc::new(Feed::new(
                    Schedule::Cluster(self.interval, Arc::clone(&cluster)),
                    self.max_connections,
                    self.heartbeat,
                    shut.clone(),
                ));
                (name, (cluster, feed))
            })
            .collect();
        Turbine {
            shared: Arc::new(Shared {
                clusters,
                shutdown,
                bind_ip: self.bind_ip,
            }),
        }
    }
}

/// Turbine-compatible aggregation of many instances' `/hystrix.stream` (see the [module
/// docs](self)). Cheap to clone (a shared handle).
#[derive(Debug, Clone)]
pub struct Turbine {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    clusters: BTreeMap<String, (Arc<Cluster>, Arc<Feed>)>,
    shutdown: watch::Sender<bool>,
    bind_ip: IpAddr,
}

impl Turbine {
    /// Options: no cluster yet, [`DEFAULT_INTERVAL`], [`DEFAULT_INSTANCE_TIMEOUT`],
    /// [`DEFAULT_RECONNECT_BACKOFF`], 5 clients per cluster, the system clock.
    pub fn builder() -> TurbineBuilder {
        TurbineBuilder {
            clusters: Vec::new(),
            interval: DEFAULT_INTERVAL,
            instance_timeout: DEFAULT_INSTANCE_TIMEOUT,
            reconnect: DEFAULT_RECONNECT_BACKOFF,
            max_connections: crate::DEFAULT_MAX_CONNECTIONS,
            heartbeat: crate::DEFAULT_HEARTBEAT,
            clock: Arc::new(SystemClock),
            bind_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }

    /// The route `GET /turbine.stream?cluster=NAME`, to serve or to merge into an app (which
    /// must then bound its connections as the crate's "Embedding" says).
    pub fn router<S>(&self) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        Router::new().route(
            PATH,
            get(stream_handler).with_state(Arc::clone(&self.shared)),
        )
    }

    /// The clusters' names, sorted.
    pub fn clusters(&self) -> Vec<String> {
        self.shared.clusters.keys().cloned().collect()
    }

    /// The instances of `cluster` while its stream runs (an empty list while it has no
    /// client); `None` for an unknown cluster.
    pub fn instances(&self, cluster: &str) -> Option<Vec<Status>> {
        let (cluster, _) = self.shared.clusters.get(cluster)?;
        Some(match cluster.running() {
            Some(run) => run.statuses(),
            None => Vec::new(),
        })
    }

    /// The merge of `cluster`'s reporting instances now, one JSON message per (type, name)
    /// (without the `deleteData` messages of the stream), while its stream runs (empty while it
    /// has no client); `None` for an unknown cluster.
    pub fn merged(&self, cluster: &str) -> Option<Vec<String>> {
        let (cluster, _) = self.shared.clusters.get(cluster)?;
        Some(match cluster.running() {
            Some(run) => run.merge(&mut merge::Deletions::default()),
            None => Vec::new(),
        })
    }

    /// Clients of `cluster`'s stream now (`None` for an unknown cluster).
    pub fn stream_clients(&self, cluster: &str) -> Option<usize> {
        self.shared
            .clusters
            .get(cluster)
            .map(|(_, feed)| feed.clients())
    }

    /// Ends every stream and stops reading the instances; later requests get 503. Calling it
    /// again does nothing.
    pub fn shutdown(&self) {
        self.shared.shutdown.send_replace(true);
    }

    /// Serves [`router`](Self::router) on the builder's address (127.0.0.1 by default) and
    /// `port`, within the limits of [`Dashboard::serve`](crate::Dashboard::serve) (their
    /// defaults), until the process ends.
    ///
    /// # Errors
    /// The address cannot be bound.
    pub async fn serve(self, port: u16) -> std::io::Result<()> {
        let listener =
            tokio::net::TcpListener::bind(SocketAddr::new(self.shared.bind_ip, port)).await?;
        self.serve_on(listener).await
    }

    /// As [`serve`](Self::serve), on a listener bound already.
    ///
    /// # Errors
    /// None: it runs until the process ends or the future is dropped.
    pub async fn serve_on(self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        crate::server::serve(
            listener,
            self.router::<()>(),
            crate::server::Limits::default_limits(),
        )
        .await;
        Ok(())
    }
}

/// The handler of `/turbine.stream`.
async fn stream_handler(State(shared): State<Arc<Shared>>, uri: Uri) -> Response {
    let clusters: Vec<&str> = uri
        .query()
        .map(|query| {
            query
                .split('&')
                .filter_map(|pair| pair.strip_prefix("cluster="))
                .collect()
        })
        .unwrap_or_default();
    if clusters.len() > 1 {
        return (
            StatusCode::BAD_REQUEST,
            "give one ?cluster=NAME: a stream is one cluster's".to_owned(),
        )
            .into_response();
    }
    let cluster = clusters.first().copied();
    let names = || {
        shared
            .clusters
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let feed = match cluster {
        Some(name) => match shared.clusters.get(name) {
            Some((_, feed)) => feed,
            None => {
                return (
                    StatusCode::NOT_FOUND,
                    format!("unknown cluster `{name}`; clusters: {}", names()),
                )
                    .into_response();
            }
        },
        None => match shared.clusters.get("default") {
            Some((_, feed)) => feed,
            None => {
                return (
                    StatusCode::BAD_REQUEST,
                    format!("add ?cluster=NAME; clusters: {}", names()),
                )
                    .into_response();
            }
        },
    };
    crate::sse::serve(State(Arc::clone(feed))).await
}

/// One cluster: its name, how to find its instances, and its run while its stream has a
/// client.
#[derive(Debug)]
pub(crate) struct Cluster {
    name: String,
    source: Source,
    settings: Arc<Settings>,
    current: Mutex<Weak<Run>>,
}

impl Cluster {
    fn running(&self) -> Option<Arc<Run>> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .upgrade()
    }

    /// Starts reading the instances: finds them (and keeps finding them, for a file or DNS),
    /// a reader per instance. Dropping the run stops it all.
    pub(crate) fn start(self: &Arc<Self>) -> Arc<Run> {
        let run = Arc::new(Run {
            cluster: Arc::clone(self),
            readers: Mutex::new(BTreeMap::new()),
            deletions: Mutex::new(merge::Deletions::default()),
            discovery: Mutex::new(None),
        });
        let weak = Arc::downgrade(&run);
        let discovery = tokio::spawn(discover(weak, Arc::clone(self)));
        *run.discovery.lock().unwrap_or_else(|p| p.into_inner()) = Some(AbortOnDrop(discovery));
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Arc::downgrade(&run);
        run
    }
}

/// Looks for the cluster's instances now and then, for as long as its run lives.
async fn discover(run: Weak<Run>, cluster: Arc<Cluster>) {
    loop {
        if let Some(urls) = cluster.source.resolve(&cluster.name).await {
            let Some(run) = run.upgrade() else { return };
            run.set_instances(urls);
        }
        match cluster.source.every() {
            Some(every) => tokio::time::sleep(every).await,
            None => return,
        }
    }
}

/// A cluster being read: its readers, and the keys of its last merge.
#[derive(Debug)]
pub(crate) struct Run {
    cluster: Arc<Cluster>,
    readers: Mutex<BTreeMap<InstanceUrl, (Arc<Instance>, AbortOnDrop)>>,
    deletions: Mutex<merge::Deletions>,
    discovery: Mutex<Option<AbortOnDrop>>,
}

impl Run {
    fn readers(&self) -> MutexGuard<'_, BTreeMap<InstanceUrl, (Arc<Instance>, AbortOnDrop)>> {
        self.readers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads exactly `urls`: a reader started for each new one, stopped for each gone.
    fn set_instances(&self, urls: Vec<InstanceUrl>) {
        let mut readers = self.readers();
        readers.retain(|url, _| urls.contains(url));
        for url in urls {
            readers.entry(url.clone()).or_insert_with(|| {
                let instance = Arc::new(Instance::new(url));
                let task = tokio::spawn(reader::run(
                    Arc::clone(&instance),
                    Arc::clone(&self.cluster.settings),
                ));
                (instance, AbortOnDrop(task))
            });
        }
    }

    fn statuses(&self) -> Vec<Status> {
        let settings = &self.cluster.settings;
        let now = settings.clock.now_ms();
        self.readers()
            .values()
            .map(|(instance, _)| instance.status(now, settings.timeout_ms()))
            .collect()
    }

    /// The merge of the reporting instances, with `deleteData` for the keys `last` merged
    /// that are gone.
    fn merge(&self, last: &mut merge::Deletions) -> Vec<String> {
        let settings = &self.cluster.settings;
        let now = settings.clock.now_ms();
        let timeout = settings.timeout_ms();
        let instances: Vec<Arc<Instance>> = self
            .readers()
            .values()
            .map(|(instance, _)| Arc::clone(instance))
            .collect();
        let mut merger = merge::Merger::default();
        for instance in &instances {
            let state = instance.state();
            if state.reporting(now, timeout) {
                merger.add(&state.records);
            }
        }
        merger.finish(last)
    }

    /// One tick of the stream: the merge, with `deleteData` for keys gone since the last.
    pub(crate) fn tick(&self) -> Vec<String> {
        let mut deletions = self.deletions.lock().unwrap_or_else(|p| p.into_inner());
        self.merge(&mut deletions)
    }
}

/// The aggregation without the network, for `benches/turbine.rs` only: not part of the API.
#[doc(hidden)]
pub mod bench {
    use super::instances::InstanceUrl;
    use super::merge::{Deletions, Merger};
    use super::reader::Instance;

    /// Instances fed lines directly, and their merge.
    #[derive(Debug)]
    pub struct Aggregation {
        instances: Vec<Instance>,
        deletions: Deletions,
    }

    impl Aggregation {
        /// `instances` instances with no message yet.
        pub fn new(instances: usize) -> Aggregation {
            let instances = (0..instances)
                .map(|n| {
                    let url = InstanceUrl::parse(&format!("http://10.0.0.{}:7979/", n % 250 + 1))
                        .unwrap_or_else(|_| unreachable!("a valid URL"));
                    Instance::new(url)
                })
                .collect();
            Aggregation {
                instances,
                deletions: Deletions::default(),
            }
        }

        /// One line of instance `instance`'s stream (`data: {...}`), as its reader takes it.
        pub fn line(&self, instance: usize, line: &[u8]) {
            if let Some(instance) = self.instances.get(instance) {
                instance.line(line, 0);
            }
        }

        /// One tick of the merged stream.
        pub fn tick(&mut self) -> Vec<String> {
            let mut merger = Merger::default();
            for instance in &self.instances {
                merger.add(&instance.state().records);
            }
            merger.finish(&mut self.deletions)
        }

        /// Bytes the instances' messages take, beyond what they share.
        pub fn bytes(&self) -> usize {
            self.instances
                .iter()
                .map(|i| i.state().records.own_bytes())
                .sum()
        }
    }
}
