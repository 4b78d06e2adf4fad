//! One run of the demo: start the backends, the gateway and the dashboard, drive the
//! scenario's phases while the load runs, and put the report together.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hystrix::Registry;
use hystrix::circuit::store::InMemoryStateStore;
use hystrix_dashboard::Dashboard;
use hystrix_dashboard::turbine::{Instances, Turbine};
use tokio::net::TcpListener;

use crate::backends::Backends;
use crate::fleet::{self, Follower, Moment, StreamSeen};
use crate::gateway::{self, Gateway};
use crate::live::{Console, LiveView};
use crate::load::{LoadGenerator, Router};
use crate::report::{
    self, FleetPhase, FleetReport, InstancePhase, Member, PhaseReport, Policies, PolicyInput,
    Report, TurbineInstance, TurbineReport, TwinPhase,
};
use crate::scenario::{Backend, Chaos, Phase, Scenario, Schedule};
use crate::stats::{self, BackendCounts, BreakerLog, ChaosLog, CommandCounts, Held, circuit_state};
use crate::twin::Twin;

/// The dashboard's port when `--port` is not given (Hystrix's dashboard examples use it); the
/// gateway takes the next one.
pub const DEFAULT_PORT: u16 = 7979;

/// Which ports the dashboard and the gateway listen on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ports {
    /// [`DEFAULT_PORT`] and the next, or free ports if either is taken.
    Default,
    /// Exactly this one for the dashboard and the next for the gateway.
    Exact(u16),
    /// Free ports.
    Free,
}

/// What a run needs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The scenario.
    pub scenario: Scenario,
    /// Its phases placed in time.
    pub schedule: Schedule,
    /// Gateway requests per second.
    pub rps: f64,
    /// The dashboard's and the gateway's ports.
    pub ports: Ports,
    /// The live view (else plain lines).
    pub tui: bool,
    /// Where text goes.
    pub console: Console,
    /// Whether the unprotected twin runs beside the gateway (`--no-compare` turns it off).
    pub compare: bool,
    /// Seeds the backends' fault scripts and the movie ids the load asks for (both sides
    /// alike).
    pub seed: u64,
    /// Gateway instances (1 to [`fleet::MAX_INSTANCES`]).
    pub instances: usize,
    /// Share breaker state through this Redis instead of in memory (`--redis`).
    pub redis: Option<String>,
}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A port could not be bound.
    #[error("{0}")]
    Bind(String),
    /// Starting a backend failed.
    #[error("cannot start the backends: {0}")]
    Backends(std::io::Error),
    /// Starting the unprotected twin failed.
    #[error("cannot start the unprotected twin: {0}")]
    Twin(std::io::Error),
    /// A command definition was refused.
    #[error("cannot define the gateway's commands: {0}")]
    Config(#[from] hystrix::ConfigError),
    /// The shared state store could not be set up.
    #[error("--redis {0}")]
    Store(String),
    /// The fleet's merged stream could not be set up.
    #[error("cannot set up the fleet's merged stream: {0}")]
    Turbine(#[from] hystrix_dashboard::turbine::TurbineError),
}

/// Listens on 127.0.0.1:`port` and on the next port.
async fn listen_pair(port: u16) -> std::io::Result<(TcpListener, TcpListener)> {
    let next = port
        .checked_add(1)
        .ok_or_else(|| std::io::Error::other("the gateway needs the next port, past 65535"))?;
    let dashboard = TcpListener::bind(("127.0.0.1", port)).await?;
    let gateway = TcpListener::bind(("127.0.0.1", next)).await?;
    Ok((dashboard, gateway))
}

/// The dashboard's and the gateway's listeners of each of `instances` instances, from `port`
/// on: instance k (from 1) on `port + 2(k-1)` and the next port. Returns which instance
/// failed (from 1) with the error.
async fn listen_pairs(
    port: u16,
    instances: usize,
) -> Result<Vec<(TcpListener, TcpListener)>, (usize, u16, std::io::Error)> {
    let mut pairs = Vec::with_capacity(instances);
    for k in 0..instances {
        let first = u16::try_from(2 * k)
            .ok()
            .and_then(|offset| port.checked_add(offset))
            .ok_or_else(|| {
                (
                    k + 1,
                    port,
                    std::io::Error::other("the instances' ports go past 65535"),
                )
            })?;
        pairs.push(
            listen_pair(first)
                .await
                .map_err(|err| (k + 1, first, err))?,
        );
    }
    Ok(pairs)
}

/// Binds each instance's dashboard and gateway listeners on 127.0.0.1; the note says why the
/// default ports were not used.
async fn bind(
    ports: Ports,
    instances: usize,
) -> Result<(Vec<(TcpListener, TcpListener)>, Option<String>), RunError> {
    let free = || async {
        let mut pairs = Vec::with_capacity(instances);
        for _ in 0..instances {
            let dashboard = TcpListener::bind("127.0.0.1:0").await?;
            let gateway = TcpListener::bind("127.0.0.1:0").await?;
            pairs.push((dashboard, gateway));
        }
        Ok::<_, std::io::Error>(pairs)
    };
    let free_error = |err| RunError::Bind(format!("cannot listen on 127.0.0.1: {err}"));
    match ports {
        Ports::Exact(port) => {
            let pairs = listen_pairs(port, instances)
                .await
                .map_err(|(k, at, err)| {
                    let whose = if instances == 1 {
                        String::new()
                    } else {
                        format!(" (instance {k})")
                    };
                    RunError::Bind(format!(
                        "--port {port}: cannot listen on 127.0.0.1:{at} and the next port{whose}: \
                         {err}"
                    ))
                })?;
            Ok((pairs, None))
        }
        Ports::Free => Ok((free().await.map_err(free_error)?, None)),
        Ports::Default => match listen_pairs(DEFAULT_PORT, instances).await {
            Ok(pairs) => Ok((pairs, None)),
            Err((_, _, err)) => {
                let pairs = free().await.map_err(free_error)?;
                let last = DEFAULT_PORT + 2 * instances as u16 - 1;
                let note = if instances == 1 {
                    format!(
                        "ports {DEFAULT_PORT} and {last} are not both free ({err}): using free \
                         ports (choose with --port)"
                    )
                } else {
                    format!(
                        "ports {DEFAULT_PORT} to {last} are not all free ({err}): using free \
                         ports (choose with --port)"
                    )
                };
                Ok((pairs, Some(note)))
            }
        },
    }
}

/// Where the instances' breakers share state.
#[derive(Clone)]
enum Store {
    /// One in-memory store, shared by the registries of this process.
    Memory(InMemoryStateStore),
    /// A Redis server: each instance has its own client, as separate processes would.
    Redis(String),
}

impl Store {
    /// `in-memory`, or the Redis URL.
    fn describe(&self) -> String {
        match self {
            Store::Memory(_) => "in-memory".to_owned(),
            Store::Redis(url) => url.clone(),
        }
    }

    /// `builder` sharing breaker state through this store as instance `instance` (from 1),
    /// syncing every [`fleet::SYNC_INTERVAL_MS`].
    fn apply(
        &self,
        builder: hystrix::RegistryBuilder,
        instance: usize,
    ) -> Result<hystrix::RegistryBuilder, RunError> {
        let builder = builder
            .state_store_sync_interval(Some(Duration::from_millis(fleet::SYNC_INTERVAL_MS)))
            .instance_id(format!("gateway-{instance}"));
        match self {
            Store::Memory(store) => Ok(builder.state_store(store.clone())),
            Store::Redis(url) => redis_store(builder, url),
        }
    }
}

/// A Redis client for one instance, under a service name of this run (a run does not see the
/// breakers of an earlier one).
#[cfg(feature = "redis")]
fn redis_store(
    builder: hystrix::RegistryBuilder,
    url: &str,
) -> Result<hystrix::RegistryBuilder, RunError> {
    let service = format!("hystrix-demo-{}", std::process::id());
    let store = hystrix_redis::RedisStateStore::builder(url, service)
        .state_ttl(Duration::from_secs(600))
        .build()
        .map_err(|err| RunError::Store(format!("{url}: {err}")))?;
    Ok(builder.state_store(store))
}

#[cfg(feature = "redis")]
fn redis_available(_url: &str) -> Result<(), RunError> {
    Ok(())
}

#[cfg(not(feature = "redis"))]
fn redis_store(
    _builder: hystrix::RegistryBuilder,
    url: &str,
) -> Result<hystrix::RegistryBuilder, RunError> {
    redis_available(url)?;
    Err(RunError::Store(format!("{url}: no Redis in this build")))
}

/// Without the `redis` feature, `--redis` says how to build with it.
#[cfg(not(feature = "redis"))]
fn redis_available(url: &str) -> Result<(), RunError> {
    Err(RunError::Store(format!(
        "{url}: this demo was built without Redis; build it with `--features redis` (e.g. \
         cargo run --release -p hystrix-demo --features redis -- --instances 3 --redis {url})"
    )))
}

/// One gateway instance: its registry, gateway, breaker log and addresses.
struct Instance {
    registry: Registry,
    gateway: Arc<Gateway>,
    breakers: BreakerLog,
    gateway_url: String,
    stream_url: String,
}

/// Runs the scenario and returns its report.
///
/// # Errors
/// A port cannot be bound, or the backends, the commands or the shared state store cannot be
/// set up.
pub async fn run(options: Options) -> Result<Report, RunError> {
    let Options {
        scenario,
        schedule,
        rps,
        ports,
        tui,
        console,
        compare,
        seed,
        instances: count,
        redis,
    } = options;
    let count = count.clamp(1, usize::from(fleet::MAX_INSTANCES));
    let store = match redis {
        Some(url) => Some(Store::Redis(url)),
        None if count > 1 => Some(Store::Memory(InMemoryStateStore::new(Arc::new(
            hystrix::clock::SystemClock,
        )))),
        None => None,
    };
    if let Some(Store::Redis(url)) = &store {
        redis_available(url)?;
    }
    let backends = Backends::start_seeded(seed)
        .await
        .map_err(RunError::Backends)?;
    let twin = if compare {
        let twin = Twin::start(seed, rps, schedule.phases.len())
            .await
            .map_err(RunError::Twin)?;
        Some(twin)
    } else {
        None
    };
    let chaos_log = ChaosLog::default();
    // Each instance sees 1/N of the load: its breakers' health window is N times as long,
    // so that they judge as many calls as one instance's would (a window of a third of the
    // calls made a 30% error rate look like 50% in about 2% of the windows: with the breakers
    // shared, any instance's such trip opened them all).
    let volume = crate::gateway::volume_threshold(rps);
    let window_ms = crate::gateway::HEALTH_WINDOW_MS * count as u64;
    let (listeners, note) = bind(ports, count).await?;
    let mut streams = Vec::with_capacity(count);
    for (dashboard_listener, _) in &listeners {
        streams.push(format!(
            "http://{}/hystrix.stream",
            local_addr(dashboard_listener)?
        ));
    }
    // The fleet's merged stream, on instance 1's dashboard port: every instance's stream.
    let turbine = if count > 1 {
        let instances = Instances::list(streams.iter().map(String::as_str))?;
        Some(
            Turbine::builder()
                .cluster(fleet::CLUSTER, instances)?
                .build(),
        )
    } else {
        None
    };
    let mut fleet_members = Vec::with_capacity(count);
    let mut dashboard_url = String::new();
    let mut turbine_url = String::new();
    for (index, (dashboard_listener, gateway_listener)) in listeners.into_iter().enumerate() {
        let breakers = BreakerLog::default();
        // The demo injects chaos by phase, so its registries allow it; a registry does not by
        // default, and then refuses `chaos.enabled=true`.
        let builder = Registry::builder()
            .executor(tokio::runtime::Handle::current())
            .circuit_breaker_listener(breakers.clone())
            .event_notifier(chaos_log.clone())
            .allow_chaos(true);
        let builder = match &store {
            Some(store) => store.apply(builder, index + 1)?,
            None => builder,
        };
        let registry = builder.build();
        let gateway = Arc::new(Gateway::with_shared_state(
            &registry,
            |backend| backends.addr(backend),
            volume,
            store.is_some(),
            window_ms,
        )?);
        let dashboard_addr = local_addr(&dashboard_listener)?;
        let gateway_addr = local_addr(&gateway_listener)?;
        let router = Arc::clone(&gateway).router();
        tokio::spawn(async move { axum::serve(gateway_listener, router).await });
        // The web page, the streams, /metrics, and the admin routes for loopback clients only
        // (the page's breaker buttons, run-time properties); `/` redirects to the page.
        // An operator's hold on a breaker (the sticky forceOpen / forceClosed properties) goes
        // into the breaker log, for the live view and the report.
        let operator = breakers.clone();
        let dashboard = Dashboard::builder(registry.clone())
            .admin()
            .on_admin_change(move |change| operator.on_admin_change(change));
        let dashboard = match (&turbine, index) {
            (Some(turbine), 0) => dashboard.turbine(turbine.clone()),
            _ => dashboard,
        };
        tokio::spawn(dashboard.build().serve_on(dashboard_listener));
        if index == 0 {
            dashboard_url = format!(
                "http://{dashboard_addr}{}",
                hystrix_dashboard::page::PAGE_PATH
            );
            turbine_url = format!(
                "http://{dashboard_addr}{}?cluster={}",
                hystrix_dashboard::turbine::PATH,
                fleet::CLUSTER
            );
        }
        fleet_members.push(Instance {
            registry,
            gateway,
            breakers,
            gateway_url: format!("http://{gateway_addr}"),
            stream_url: streams[index].clone(),
        });
    }
    let members = fleet_members;
    let first = &members[0];
    let (gateway, breakers) = (&first.gateway, &first.breakers);
    let gateway_url = first.gateway_url.clone();

    let router: Option<Router> = (count > 1).then(|| {
        let (leader, schedule) = (breakers.clone(), schedule.clone());
        let router: Router = Arc::new(move |index, elapsed| {
            let at_ms = millis(elapsed);
            let moment = match fleet::pinned_phase(&schedule, at_ms) {
                None => Moment::Spread,
                Some((phase, backend)) => Moment::Pinned {
                    opened: fleet::first_opening(
                        &leader.since(0),
                        backend.command_key(),
                        millis(schedule.phases[phase].start),
                    ),
                },
            };
            fleet::route(count, index, at_ms, moment)
        });
        router
    });
    let load = LoadGenerator::fleet(
        members.iter().map(|m| m.gateway_url.clone()).collect(),
        router,
        rps,
        schedule.phases.len(),
        seed,
    );
    let view = LiveView::new(
        tui,
        console,
        Arc::clone(gateway),
        load.clone(),
        breakers.clone(),
        chaos_log.clone(),
        schedule.clone(),
    );
    let view = if count > 1 {
        view.with_fleet(members.iter().map(|m| Arc::clone(&m.gateway)).collect())
    } else {
        view
    };
    let mut view = match &twin {
        Some(twin) => view.compare_with(twin.gauges()),
        None => view,
    };
    let mut lines = banner(
        &scenario,
        &schedule,
        rps,
        &dashboard_url,
        &gateway_url,
        &backends,
        note,
    );
    if let Some(store) = &store {
        lines.extend(fleet_lines(&members, store));
    }
    if turbine.is_some() {
        lines.push(format!(
            "  turbine    {turbine_url}  (every instance's stream merged, on the dashboard's port)"
        ));
    }
    // A client of the merged stream for the whole run (the turbine reads the instances while
    // its stream has one): what it reads goes into the report.
    let seen = StreamSeen::default();
    let watcher = turbine.as_ref().map(|_| {
        let (seen, url) = (seen.clone(), turbine_url.clone());
        tokio::spawn(async move {
            let client = crate::http::async_client();
            loop {
                let _ = crate::http::read_lines(&client, &url, |line| seen.line(line)).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    });
    for line in lines.into_iter().chain(twin.as_ref().map(twin_line)) {
        console.line(&crate::live::wrap(&line, crate::live::WIDTH, 13));
    }

    let start = Instant::now();
    for member in &members {
        member.breakers.start(start);
    }
    let sending = {
        let (load, schedule, progress) = (load.clone(), schedule.clone(), view.progress());
        tokio::spawn(async move { load.run(start, &schedule, progress).await })
    };
    let twin_sending = twin.as_ref().map(|twin| twin.send(start, &schedule));
    // The most each gateway held during each phase: the protected one (every instance), the
    // twin.
    let mut held = vec![(Held::default(), Held::default()); schedule.phases.len()];
    let gateways: Vec<&Gateway> = members.iter().map(|m| &*m.gateway).collect();
    // Counts (per instance), backend calls and errors, chaos injected and hedges won at each
    // phase boundary (a phase's are the differences), and the times the gateways recorded
    // since the last one.
    let sample = || {
        let mut policies = PolicyInput::default();
        for gateway in &gateways {
            policies.hedges_won += gateway.hedges_won();
            policies
                .availability_times
                .extend(gateway.take_availability_times());
            policies
                .prices_times
                .extend(gateway.take_price_times(Backend::Prices));
            policies
                .prices_fixed_times
                .extend(gateway.take_price_times(Backend::PricesFixed));
        }
        let reached: BTreeMap<Backend, BackendCounts> = Backend::ALL
            .into_iter()
            .map(|b| {
                let counts = BackendCounts {
                    calls: backends.calls(b),
                    errors: backends.errors(b),
                    chaos_injected: chaos_log.injected(b.command_key()),
                };
                (b, counts)
            })
            .collect();
        let counts: Vec<BTreeMap<Backend, CommandCounts>> = members
            .iter()
            .map(|m| stats::read_counts(&m.registry, &m.gateway))
            .collect();
        (counts, reached, policies)
    };
    // `GetPrices`'s adaptive limit (instance 1's) every 100 ms: when, and the limit.
    let mut limits: Vec<(Duration, u32)> = Vec::new();
    let prices = gateway.command(Backend::Prices).clone();
    let limit_now = || prices.metrics().adaptive_limit().map(|l| l.limit);
    let mut boundaries = vec![sample()];
    // One loop: each phase starts on time (the counts sampled, its faults and chaos applied),
    // chaos is turned off when the last phase ends, breaker transitions are shown within
    // 100 ms, the live view is redrawn each second, and the loop ends when the load has sent
    // its last request and had its answers.
    let mut sending = sending;
    let mut phases = schedule.phases.iter().enumerate().peekable();
    let mut chaos = BTreeMap::new();
    let mut poll = tokio::time::interval(Duration::from_millis(100));
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut next_second = Duration::from_secs(1);
    let registries: Vec<&Registry> = members.iter().map(|m| &m.registry).collect();
    // Per phase with a backend down: every instance's counts at the fleet check's snapshot
    // (see `fleet::snapshot_at`), and the snapshot to take next (the phase, when).
    let mut snapshots: BTreeMap<usize, Vec<BTreeMap<Backend, CommandCounts>>> = BTreeMap::new();
    let mut snapshot_due: Option<(usize, Instant)> = None;
    let read_all = || -> Vec<BTreeMap<Backend, CommandCounts>> {
        members
            .iter()
            .map(|m| stats::read_counts(&m.registry, &m.gateway))
            .collect()
    };
    loop {
        let next_phase = match phases.peek() {
            Some((_, phase)) => Some(start + phase.start),
            None => (!chaos.is_empty()).then(|| start + schedule.total()),
        };
        let next_snapshot = snapshot_due.map(|(_, at)| at);
        tokio::select! {
            biased;
            _ = &mut sending => break,
            () = sleep_until(next_snapshot) => {
                if let Some((index, _)) = snapshot_due.take() {
                    snapshots.insert(index, read_all());
                }
            }
            () = sleep_until(next_phase) => {
                let Some((index, phase)) = phases.next() else {
                    // The last phase is over: no chaos while the last answers come back.
                    apply_chaos_all(&registries, &mut chaos, None)?;
                    continue;
                };
                if index > 0 {
                    boundaries.push(sample());
                }
                backends.apply(phase);
                if let Some(twin) = &twin {
                    twin.apply(phase);
                }
                apply_chaos_all(&registries, &mut chaos, Some(phase))?;
                view.announce_phase(&phase_line(index, &schedule, phase));
            }
            _ = poll.tick() => {
                view.show_transitions();
                let elapsed = start.elapsed();
                if count > 1 && snapshot_due.is_none() {
                    snapshot_due = next_snapshot_of(&schedule, breakers, elapsed, &snapshots)
                        .map(|(index, at_ms)| (index, start + Duration::from_millis(at_ms)));
                }
                if let Some(index) = schedule.phase_at(elapsed) {
                    let (protected, unprotected) = &mut held[index];
                    *protected = protected.max(Held::fleet(&gateways, &load));
                    if let Some(twin) = &twin {
                        *unprotected = unprotected.max(twin.held());
                    }
                }
                if let Some(limit) = limit_now() {
                    limits.push((elapsed, limit));
                }
                if elapsed >= next_second {
                    view.tick(elapsed);
                    next_second += Duration::from_secs(1);
                }
            }
        }
    }
    boundaries.push(sample());
    // The instances' streams as the turbine sees them now, its client still reading.
    let turbine_instances: Vec<TurbineInstance> = turbine
        .as_ref()
        .and_then(|turbine| turbine.instances(fleet::CLUSTER))
        .unwrap_or_default()
        .into_iter()
        .map(|status| TurbineInstance {
            url: status.url,
            connected: status.connected,
            reporting: status.reporting,
            messages: status.messages,
        })
        .collect();
    if let Some(watcher) = watcher {
        watcher.abort();
    }
    // The twin's last answers (or the load giving up on them) end its run too.
    if let Some(sending) = twin_sending {
        let _ = sending.await;
    }
    view.finish();

    let (loads, instance_loads) = {
        let stats = load.stats();
        (stats.phases.clone(), stats.instances.clone())
    };
    let twin_loads = twin.as_ref().map(|twin| twin.load().stats().phases.clone());
    // Per phase, per instance, each command's counts over the phase.
    let per_instance: Vec<Vec<BTreeMap<Backend, CommandCounts>>> = (0..schedule.phases.len())
        .map(|index| {
            let (before, after) = (&boundaries[index].0, &boundaries[index + 1].0);
            before
                .iter()
                .zip(after)
                .map(|(before, after)| {
                    after
                        .iter()
                        .map(|(backend, counts)| (*backend, counts.since(&before[backend])))
                        .collect()
                })
                .collect()
        })
        .collect();
    let phases: Vec<PhaseReport> = schedule
        .phases
        .iter()
        .enumerate()
        .map(|(index, phase)| {
            let ((_, reached_before, policies_before), (_, reached_after, policies)) =
                (&boundaries[index], &boundaries[index + 1]);
            let counts = stats::sum_counts(&per_instance[index]);
            let reached: BTreeMap<Backend, BackendCounts> = reached_after
                .iter()
                .map(|(backend, reached)| (*backend, reached.since(&reached_before[backend])))
                .collect();
            let unprotected = twin_loads
                .as_ref()
                .map(|loads| TwinPhase::new(&loads[index], held[index].1));
            let mut report = PhaseReport::new(phase, &loads[index], &counts, &reached)
                .held(held[index].0, unprotected);
            let input = PolicyInput {
                hedges_won: policies
                    .hedges_won
                    .saturating_sub(policies_before.hedges_won),
                limits: limits
                    .iter()
                    .filter(|(at, _)| phase.start <= *at && *at < phase.end())
                    .map(|(_, limit)| *limit)
                    .collect(),
                ..policies.clone()
            };
            report.policies = Policies::of(phase, &input);
            report
        })
        .collect();
    let final_states = |gateway: &Gateway| -> BTreeMap<String, &'static str> {
        Backend::ALL
            .into_iter()
            .map(|backend| {
                let state = circuit_state(gateway.command(backend));
                (backend.command_key().to_owned(), state)
            })
            .collect()
    };
    let breaker_events = breakers.since(0);
    let final_breakers = final_states(gateway);
    let mut checks = report::checks(&schedule, &phases, &breaker_events, &final_breakers);
    checks.extend(report::policy_checks(&schedule, &phases, &breaker_events));
    let fleet = store.as_ref().filter(|_| count > 1).map(|store| {
        let events: Vec<Vec<crate::stats::BreakerRecord>> =
            members.iter().map(|m| m.breakers.since(0)).collect();
        let mut fleet_checks = Vec::new();
        let mut trips = Vec::new();
        for (index, phase) in schedule.phases.iter().enumerate() {
            let Some(backend) = fleet::down_backend(phase) else {
                continue;
            };
            // From the phase's start to the snapshot (to the phase's end without one).
            let counts_of = |k: usize| -> CommandCounts {
                let before = boundaries[index].0[k]
                    .get(&backend)
                    .copied()
                    .unwrap_or_default();
                match snapshots.get(&index) {
                    Some(snapshot) => snapshot[k]
                        .get(&backend)
                        .copied()
                        .unwrap_or_default()
                        .since(&before),
                    None => per_instance[index][k]
                        .get(&backend)
                        .copied()
                        .unwrap_or_default(),
                }
            };
            let followers: Vec<Follower<'_>> = (1..count)
                .map(|k| Follower {
                    instance: k as u32 + 1,
                    events: &events[k],
                    counts: counts_of(k),
                })
                .collect();
            let trip = fleet::trip(phase, backend, &events[0], &followers);
            fleet_checks.push(fleet::trip_check(phase, &trip));
            trips.push(trip);
        }
        let reporting: Vec<(String, bool)> = turbine_instances
            .iter()
            .map(|i| (i.url.clone(), i.reporting))
            .collect();
        fleet_checks.push(fleet::turbine_check(
            &turbine_url,
            count as u64,
            &reporting,
            &seen,
        ));
        let totals = load.stats().instance_totals();
        FleetReport {
            instances: count as u32,
            store: store.describe(),
            sync_interval_ms: fleet::SYNC_INTERVAL_MS,
            sync_bound_ms: fleet::SYNC_BOUND_MS,
            turbine: Some(TurbineReport {
                url: turbine_url.clone(),
                messages: seen.messages(),
                reporting_hosts: seen.hosts(),
                instances: turbine_instances.clone(),
            }),
            members: members
                .iter()
                .zip(&events)
                .zip(&totals)
                .enumerate()
                .map(|(k, ((member, events), total))| Member {
                    instance: k as u32 + 1,
                    gateway_url: member.gateway_url.clone(),
                    stream_url: member.stream_url.clone(),
                    requests: total.sent,
                    answered: total.answered,
                    breaker_events: events.clone(),
                    final_breakers: final_states(&member.gateway),
                })
                .collect(),
            phases: schedule
                .phases
                .iter()
                .enumerate()
                .map(|(index, phase)| {
                    let instances = per_instance[index]
                        .iter()
                        .zip(&instance_loads[index])
                        .enumerate()
                        .map(|(k, (counts, load))| InstancePhase::new(k as u32 + 1, load, counts))
                        .collect();
                    FleetPhase::new(phase.name.clone(), instances)
                })
                .collect(),
            trips,
            checks: fleet_checks,
        }
    });
    if let Some(fleet) = &fleet {
        checks.extend(fleet.checks.iter().cloned());
    }
    let contrast = phases.iter().filter_map(PhaseReport::contrast).collect();
    Ok(Report {
        scenario: scenario.name,
        description: scenario.description,
        duration_ms: u64::try_from(schedule.total().as_millis()).unwrap_or(u64::MAX),
        rps,
        dashboard_url,
        gateway_url,
        twin_url: twin.as_ref().map(|twin| twin.url().to_owned()),
        seed,
        passed: checks.iter().all(|check| check.passed),
        phases,
        breaker_events,
        final_breakers,
        checks,
        contrast,
        fleet,
    })
}

/// The next snapshot of the fleet check, `elapsed` into the run: the phase running, if a
/// backend is down in it, it has none yet, and instance 1 (`leader`) opened the backend's
/// command in it; when (ms from the start), at [`fleet::snapshot_at`] or the phase's end if
/// sooner.
fn next_snapshot_of<T>(
    schedule: &Schedule,
    leader: &BreakerLog,
    elapsed: Duration,
    taken: &BTreeMap<usize, T>,
) -> Option<(usize, u64)> {
    let index = schedule.phase_at(elapsed)?;
    let phase = &schedule.phases[index];
    let backend = fleet::down_backend(phase)?;
    if taken.contains_key(&index) {
        return None;
    }
    let opening =
        fleet::first_opening(&leader.since(0), backend.command_key(), millis(phase.start))?;
    Some((index, fleet::snapshot_at(opening).min(millis(phase.end()))))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The start lines naming each instance, its stream and the store.
fn fleet_lines(members: &[Instance], store: &Store) -> Vec<String> {
    let mut lines = vec![format!(
        "  fleet      {} gateway instances sharing breaker state through {} (sync every {} ms; \
         a trip reaches the others within {} ms)",
        members.len(),
        store.describe(),
        fleet::SYNC_INTERVAL_MS,
        fleet::SYNC_BOUND_MS
    )];
    for (k, member) in members.iter().enumerate() {
        lines.push(format!(
            "  #{}         {}/movies/7  stream {}",
            k + 1,
            member.gateway_url,
            member.stream_url
        ));
    }
    lines
}

/// [`apply_chaos`] on every registry of the fleet: each gets the same changes, and `on` ends
/// as the chaos set now.
fn apply_chaos_all(
    registries: &[&Registry],
    on: &mut BTreeMap<Backend, Chaos>,
    phase: Option<&Phase>,
) -> Result<(), RunError> {
    let before = on.clone();
    for registry in registries {
        *on = before.clone();
        apply_chaos(registry, on, phase)?;
    }
    Ok(())
}

/// Sets the chaos of `phase` (none without one) on the gateway's commands in `registry`,
/// changing only those whose chaos differs from `on` (the chaos set so far, updated).
fn apply_chaos(
    registry: &Registry,
    on: &mut BTreeMap<Backend, Chaos>,
    phase: Option<&Phase>,
) -> Result<(), RunError> {
    for backend in Backend::ALL {
        let wanted = phase.map_or_else(Chaos::default, |phase| phase.chaos(backend));
        if on.get(&backend).copied().unwrap_or_default() != wanted {
            gateway::set_chaos(registry, backend, &wanted)?;
        }
        if wanted.is_off() {
            on.remove(&backend);
        } else {
            on.insert(backend, wanted);
        }
    }
    Ok(())
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The line announcing phase `index`, with its faults and its chaos.
fn phase_line(index: usize, schedule: &Schedule, phase: &Phase) -> String {
    let faults: Vec<String> = phase
        .faults
        .iter()
        .filter(|(_, fault)| !fault.is_healthy())
        .map(|(backend, fault)| format!("{backend}: {}", fault.describe()))
        .chain(phase.chaotic().map(|backend| {
            let chaos = phase.chaos(backend).describe();
            format!("chaos in {}: {chaos}", backend.command_key())
        }))
        .collect();
    format!(
        "== {:>5.1} s  phase {}/{} {}: {}{}",
        phase.start.as_secs_f64(),
        index + 1,
        schedule.phases.len(),
        phase.name,
        phase.description,
        if faults.is_empty() {
            String::new()
        } else {
            format!(" [{}]", faults.join("; "))
        }
    )
}

fn local_addr(listener: &TcpListener) -> Result<SocketAddr, RunError> {
    listener
        .local_addr()
        .map_err(|err| RunError::Bind(format!("cannot read a listener's address: {err}")))
}

/// The start line naming the unprotected twin.
fn twin_line(twin: &Twin) -> String {
    format!(
        "  twin       {}/movies/7  (unprotected: the same calls, a {} s socket timeout only; \
         its own backends, the same load; --no-compare turns it off)",
        twin.url(),
        crate::twin::SOCKET_TIMEOUT.as_secs()
    )
}

/// What the demo prints before it starts.
fn banner(
    scenario: &Scenario,
    schedule: &Schedule,
    rps: f64,
    dashboard_url: &str,
    gateway_url: &str,
    backends: &Backends,
    note: Option<String>,
) -> Vec<String> {
    let mut lines = vec![format!(
        "hystrix-rs demo: scenario `{}` ({}), {} s at {rps} requests/s",
        scenario.name,
        scenario.description,
        schedule.total().as_secs_f64()
    )];
    if let Some(note) = note {
        lines.push(format!("  note: {note}"));
    }
    lines.push(format!(
        "  dashboard  {dashboard_url}  (the web page; /hystrix.stream, /metrics and /hystrix/admin/ beside it)"
    ));
    lines.push(format!("  gateway    {gateway_url}/movies/7"));
    let backends: Vec<String> = Backend::ALL
        .into_iter()
        .map(|backend| format!("{backend} {}", backends.addr(backend)))
        .collect();
    lines.push(format!("  backends   {}", backends.join(", ")));

    if schedule
        .phases
        .iter()
        .any(|phase| phase.chaotic().next().is_some())
    {
        lines.push(
            "  chaos      injected in-process by hystrix-rs into the commands the phases name, \
             their backends healthy (the demo's registry allows chaos; a registry does not by \
             default)"
                .to_owned(),
        );
    }
    let phases: Vec<String> = schedule
        .phases
        .iter()
        .map(|phase| format!("{} {:.1} s", phase.name, phase.duration.as_secs_f64()))
        .collect();
    lines.push(format!("  phases     {}", phases.join(", ")));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `chaos.enabled` and `chaos.fault.ratePercentage` of `backend`'s command in `registry`,
    /// as resolved there.
    fn chaos_of(registry: &Registry, backend: Backend) -> (Option<String>, Option<String>) {
        let get = |property: &str| {
            let name = format!("hystrix.command.{}.chaos.{property}", backend.command_key());
            registry
                .properties()
                .get(&name)
                .unwrap()
                .map(|value| value.to_string())
        };
        (get("enabled"), get("fault.ratePercentage"))
    }

    #[test]
    fn chaos_is_set_at_a_phase_start_and_off_when_the_next_sets_none() {
        let registry = Registry::builder().allow_chaos(true).build();
        let schedule = crate::scenario::chaos_6s();
        let mut on = BTreeMap::new();
        let set = |value: &str| Some(value.to_owned());

        apply_chaos(&registry, &mut on, Some(&schedule.phases[0])).unwrap();
        assert!(on.is_empty());
        assert_eq!(
            chaos_of(&registry, Backend::Recommendations),
            (set("false"), set("0"))
        );

        apply_chaos(&registry, &mut on, Some(&schedule.phases[1])).unwrap();
        assert_eq!(on.keys().collect::<Vec<_>>(), [&Backend::Recommendations]);
        assert_eq!(
            chaos_of(&registry, Backend::Recommendations),
            (set("true"), set("80"))
        );

        apply_chaos(&registry, &mut on, Some(&schedule.phases[2])).unwrap();
        assert_eq!(on.keys().collect::<Vec<_>>(), [&Backend::Catalog]);
        assert_eq!(
            chaos_of(&registry, Backend::Recommendations),
            (set("false"), set("0"))
        );
        assert_eq!(chaos_of(&registry, Backend::Catalog).0, set("true"));

        // The end of the run turns off what is left on.
        apply_chaos(&registry, &mut on, None).unwrap();
        assert!(on.is_empty());
        assert_eq!(chaos_of(&registry, Backend::Catalog).0, set("false"));
    }

    #[test]
    fn phase_lines_name_the_chaos_and_the_command() {
        let schedule = crate::scenario::chaos_6s();
        let line = phase_line(1, &schedule, &schedule.phases[1]);
        assert!(
            line.starts_with("==   1.2 s  phase 2/4 injected-faults: "),
            "{line}"
        );
        assert!(
            line.ends_with(" [chaos in GetRecommendations: 80% injected faults]"),
            "{line}"
        );
    }
}
