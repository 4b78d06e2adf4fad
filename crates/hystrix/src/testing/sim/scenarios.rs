//! The named scenarios of our benchmarks (BENCHMARKS.md), each a function of a seed.
//!
//! `cargo run -p hystrix-rs --release --features sim --example sim` lists them;
//! `... --example sim -- <name>|all [--seed N]` runs them and prints a [`table`](super::table).
//!
//! The retry scenarios (`baseline-*`, `naive-*`, `retry-*`) share one set-up, so that their
//! rows compare: a [`Backend`] of 200 workers and a queue of 200 whose service time is
//! log-normal with a median of 20 ms and a p99 of 100 ms; an open [`Load`] of 1 000 requests
//! per second for 10 s, evenly spaced (10 000 requests); one command `Backend` under SEMAPHORE
//! isolation with 1 000 permits (the bulkhead never refuses) and the default 1 s timeout; the
//! backend's call is the run and [`fallback`] the fallback.
//!
//! To add one, write a function `fn(seed) -> Result<Report, SimError>` from the helpers below
//! ([`standard_backend`], [`standard_command`], [`offer`]) and list it in [`SCENARIOS`].
//! The `naive-*` scenarios "retry" with a loop written by hand around executions, as a user
//! without retries in the library would; the `retry-*` ones use the library's retry
//! ([`Command::run_async_retryable`], `retry.maxAttempts` 3, the default backoff of 100 ms
//! doubling, and the default budget of 20 % of requests + 10 per second unless named).
//!
//! The hedging scenarios (`hedge-*`) race a hedge against a slow attempt on a backend with a
//! long tail: the same command and workers, a log-normal service time with a median of
//! [`HEDGE_MEDIAN`] (5 ms) and a p99 of [`HEDGE_P99`] (50 ms, its p95 [`HEDGE_P95_MS`], 25 ms),
//! and a [`hedging_load`] of Poisson arrivals, 1 000 per second for 30 s. Each request is one
//! execution of a factory of backend calls ([`Command::run_async_retryable`]), with
//! `hedging.maxAttempts` 2 unless `none`, a fixed delay of 25 ms (`fixed-p95`) or the adaptive
//! `hedging.delayPercentile` 95 (`adaptive-p95`), and the default retry budget, which hedges
//! spend. A losing attempt's call goes on to the end of its service at the backend (it does not
//! see the cancellation). The `hedge-slowdown-*` ones add 50 ms to every call from 10 s to
//! 20 s. Their reports carry [measures](Report::measures): the extra attempts per request, the
//! delay the adaptive one settled on, and the extra attempts during the slowdown beside the
//! retry budget's bound for them.
//!
//! The adaptive concurrency limit scenarios (`limit-*`, issue 23) are in [`limits`]: a
//! backend of C workers whose capacity moves (a steady 2× overload, a drop of C from 40 to 10
//! and back, a doubling of the service time), with no limit, static limits and each
//! algorithm; [`limits::study`] runs a whole sweep and checks the issue's goals.
//!
//! The priority scenario (issue 24) is in [`priorities`]: the 2× overload with traffic of
//! three classes, with and without priority reserves.
//!
//! The adaptive throttling scenario (`throttle-*`) is in [`throttle`]: a backend that refuses
//! calls beyond its capacity at once, offered 3× that capacity, without throttling and with
//! K = 2, 1.5, 1.2 and 1.1; [`throttle::study`] runs them.
//!
//! The hang-to-OPEN study (issue 25) is in [`slow_calls`]: a dependency that starts hanging
//! under steady load, with slow calls counted while still in flight and without;
//! [`slow_calls::study`] runs it.

pub mod limits;
pub mod priorities;
pub mod slow_calls;
pub mod throttle;

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::report::share;
use super::{
    Backend, BackendBuilder, Load, Phase, Report, ServiceTime, Sim, SimError, SimOutcome, fallback,
};
use crate::clock::Clock;
use crate::command::{Command, CommandBuilder};
use crate::config::IsolationStrategy;

/// The seed the `sim` example uses unless given `--seed`.
pub const DEFAULT_SEED: u64 = 1;

/// A named scenario: a function from a seed to its [`Report`].
#[derive(Clone, Copy)]
pub struct Scenario {
    name: &'static str,
    summary: &'static str,
    run: fn(u64) -> Result<Report, SimError>,
}

impl Scenario {
    /// A scenario called `name` (lower-case, dashes), described in one line by `summary`, that
    /// `run` runs with a seed.
    pub const fn new(
        name: &'static str,
        summary: &'static str,
        run: fn(u64) -> Result<Report, SimError>,
    ) -> Self {
        Scenario { name, summary, run }
    }

    /// Its name, as the `sim` example takes it.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// What it simulates, in one line.
    pub fn summary(&self) -> &'static str {
        self.summary
    }

    /// Runs it with `seed` (every generator of the run derives from it); the report is named
    /// after the scenario.
    ///
    /// ```
    /// use hystrix::testing::sim::scenarios;
    ///
    /// let scenario = scenarios::find("naive-retry-storm").expect("listed");
    /// let report = scenario.run(scenarios::DEFAULT_SEED)?;
    /// assert_eq!(report.backend_calls_per_request(), Some(3.0));
    /// assert_eq!(report.answered(), 0);
    /// # Ok::<(), hystrix::testing::sim::SimError>(())
    /// ```
    ///
    /// # Errors
    /// What the scenario's [`Sim`] returns ([`SimError`]).
    pub fn run(&self, seed: u64) -> Result<Report, SimError> {
        (self.run)(seed).map(|report| report.with_name(self.name))
    }
}

impl fmt::Debug for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scenario")
            .field("name", &self.name)
            .field("summary", &self.summary)
            .finish_non_exhaustive()
    }
}

/// Every scenario, in the order the `sim` example lists them.
pub const SCENARIOS: &[Scenario] = &[
    Scenario::new(
        "baseline-transient",
        "30 % independent failures, 1 000 req/s for 10 s, one execution per request (no retry)",
        baseline_transient,
    ),
    Scenario::new(
        "naive-retry-transient",
        "30 % independent failures, 1 000 req/s for 10 s, a hand-written loop of 3 executions",
        naive_retry_transient,
    ),
    Scenario::new(
        "naive-retry-storm",
        "the backend fails 100 % for 10 s at 1 000 req/s, a hand-written loop of 3 executions, \
         breaker disabled",
        naive_retry_storm,
    ),
    Scenario::new(
        "naive-retry-storm-breaker",
        "as naive-retry-storm with the default breaker: it opens and the loop retries \
         short-circuits",
        naive_retry_storm_breaker,
    ),
    Scenario::new(
        "retry-storm",
        "the backend fails 100 %, 1 000 req/s for 10 s, retry.maxAttempts 3 with the default \
         budget (20 % + 10/s), breaker disabled",
        retry_storm,
    ),
    Scenario::new(
        "retry-storm-breaker",
        "as retry-storm with the default breaker",
        retry_storm_breaker,
    ),
    Scenario::new(
        "retry-storm-open",
        "as retry-storm-breaker, counting only the 8 s of load after a first 2 s that opened \
         the breaker",
        retry_storm_open,
    ),
    Scenario::new(
        "retry-transient",
        "30 % independent failures, 1 000 req/s for 10 s, retry.maxAttempts 3, a 40 % budget",
        retry_transient_40,
    ),
    Scenario::new(
        "retry-transient-default-budget",
        "as retry-transient with the default budget (20 % + 10/s)",
        retry_transient_default,
    ),
    Scenario::new(
        "hedge-none",
        "log-normal backend (median 5 ms, p99 50 ms), Poisson 1 000 req/s for 30 s, no hedging",
        hedge_none,
    ),
    Scenario::new(
        "hedge-fixed-p95",
        "as hedge-none, hedging.maxAttempts 2 after a fixed 25 ms (the backend's p95), the \
         default budget",
        hedge_fixed_p95,
    ),
    Scenario::new(
        "hedge-adaptive-p95",
        "as hedge-fixed-p95 with hedging.delayPercentile 95 (100 ms until it has data)",
        hedge_adaptive_p95,
    ),
    Scenario::new(
        "hedge-slowdown-none",
        "as hedge-none, every call 50 ms longer from 10 s to 20 s",
        hedge_slowdown_none,
    ),
    Scenario::new(
        "hedge-slowdown-fixed-p95",
        "as hedge-fixed-p95, every call 50 ms longer from 10 s to 20 s",
        hedge_slowdown_fixed_p95,
    ),
    Scenario::new(
        "hedge-slowdown-adaptive-p95",
        "as hedge-adaptive-p95, every call 50 ms longer from 10 s to 20 s",
        hedge_slowdown_adaptive_p95,
    ),
    Scenario::new(
        "hedge-slowdown-budget-1s",
        "as hedge-slowdown-fixed-p95 with retry.budget.windowInMilliseconds 1 000 (20 % + \
         10/s of each second)",
        hedge_slowdown_budget_1s,
    ),
    Scenario::new(
        "limit-overload-none",
        "C = 20, 400 req/s for 20 s (2× overload), no limit (see scenarios::limits)",
        limits::overload_none,
    ),
    Scenario::new(
        "limit-overload-aimd",
        "C = 20, 400 req/s for 20 s (2× overload), adaptive AIMD (see scenarios::limits)",
        limits::overload_aimd,
    ),
    Scenario::new(
        "limit-overload-vegas",
        "C = 20, 400 req/s for 20 s (2× overload), adaptive VEGAS (see scenarios::limits)",
        limits::overload_vegas,
    ),
    Scenario::new(
        "limit-overload-gradient2",
        "C = 20, 400 req/s for 20 s (2× overload), adaptive GRADIENT2 (see scenarios::limits)",
        limits::overload_gradient2,
    ),
    Scenario::new(
        "limit-capacity-drop-none",
        "C = 40, 300 req/s for 60 s, C = 10 from 20 s to 40 s, no limit (see scenarios::limits)",
        limits::drop_none,
    ),
    Scenario::new(
        "limit-capacity-drop-aimd",
        "C = 40, 300 req/s for 60 s, C = 10 from 20 s to 40 s, adaptive AIMD (see scenarios::limits)",
        limits::drop_aimd,
    ),
    Scenario::new(
        "limit-capacity-drop-vegas",
        "C = 40, 300 req/s for 60 s, C = 10 from 20 s to 40 s, adaptive VEGAS (see scenarios::limits)",
        limits::drop_vegas,
    ),
    Scenario::new(
        "limit-capacity-drop-gradient2",
        "C = 40, 300 req/s for 60 s, C = 10 from 20 s to 40 s, adaptive GRADIENT2 (see scenarios::limits)",
        limits::drop_gradient2,
    ),
    Scenario::new(
        "limit-slowdown-none",
        "C = 20, 150 req/s for 40 s, service time doubles at 20 s, no limit (see scenarios::limits)",
        limits::slowdown_none,
    ),
    Scenario::new(
        "limit-slowdown-aimd",
        "C = 20, 150 req/s for 40 s, service time doubles at 20 s, adaptive AIMD (see scenarios::limits)",
        limits::slowdown_aimd,
    ),
    Scenario::new(
        "limit-slowdown-vegas",
        "C = 20, 150 req/s for 40 s, service time doubles at 20 s, adaptive VEGAS (see scenarios::limits)",
        limits::slowdown_vegas,
    ),
    Scenario::new(
        "limit-slowdown-gradient2",
        "C = 20, 150 req/s for 40 s, service time doubles at 20 s, adaptive GRADIENT2 (see scenarios::limits)",
        limits::slowdown_gradient2,
    ),
];

/// The scenario called `name`.
pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|scenario| scenario.name == name)
}

/// The shared backend: 200 workers, a queue of 200, log-normal service time (median 20 ms,
/// p99 100 ms), seeded with `seed`; add failures and phases to it.
pub fn standard_backend(seed: u64) -> BackendBuilder {
    Backend::builder()
        .workers(200)
        .queue(200)
        .service_time(ServiceTime::lognormal(
            Duration::from_millis(20),
            Duration::from_millis(100),
        ))
        .seed(seed)
}

/// The shared command `Backend` (group `Sim`): SEMAPHORE isolation with 1 000 permits, the
/// default timeout (1 s) and breaker; add properties to it, then
/// [`build_in`](CommandBuilder::build_in) the simulation's registry.
pub fn standard_command() -> CommandBuilder {
    Command::builder("Backend")
        .group("Sim")
        .isolation(IsolationStrategy::Semaphore)
        .semaphore_max_concurrent_requests(1_000)
}

/// The shared load: 1 000 requests per second for 10 s, evenly spaced.
pub fn standard_load() -> Load {
    Load::constant(1_000.0, Duration::from_secs(10))
}

/// Runs the [`standard_load`] on `sim`, each request being `request(&backend)`, and returns the
/// report with the backend's stats.
///
/// # Errors
/// As [`Sim::run_load`].
pub fn offer<F, Fut>(sim: &mut Sim, backend: &Backend, mut request: F) -> Result<Report, SimError>
where
    F: FnMut(&Backend) -> Fut,
    Fut: Future<Output = SimOutcome> + 'static,
{
    let report = sim.run_load(&standard_load(), |_| request(backend))?;
    Ok(report.with_backend(backend.stats()))
}

/// One execution with [`fallback`]: the request of a user without retries.
async fn execute_once(cmd: Command, backend: Backend) -> SimOutcome {
    let response = cmd
        .run_async(backend.call())
        .fallback(fallback)
        .execute_async()
        .await;
    SimOutcome::from_response(response)
}

/// A user's own retry loop: up to `attempts` executions, one after the other with no delay,
/// then the user's fallback. It retries whatever failed, short-circuits and rejections too.
async fn naive_retry(cmd: Command, backend: Backend, attempts: u32) -> SimOutcome {
    for _ in 0..attempts {
        if let Ok(outcome) = cmd.run_async(backend.call()).execute_async().await {
            return outcome;
        }
    }
    SimOutcome::Fallback
}

fn transient_backend(sim: &Sim, seed: u64) -> Result<Backend, SimError> {
    standard_backend(seed).failure_rate(0.3).build(sim.clock())
}

/// Fails every call for the whole run (the load's 10 s and the retries after it).
fn outage_backend(sim: &Sim, seed: u64) -> Result<Backend, SimError> {
    standard_backend(seed).failure_rate(1.0).build(sim.clock())
}

fn baseline_transient(seed: u64) -> Result<Report, SimError> {
    let mut sim = Sim::new();
    let backend = transient_backend(&sim, seed)?;
    let cmd = standard_command().build_in(sim.registry())?;
    offer(&mut sim, &backend, |b| execute_once(cmd.clone(), b.clone()))
}

fn naive_retry_transient(seed: u64) -> Result<Report, SimError> {
    let mut sim = Sim::new();
    let backend = transient_backend(&sim, seed)?;
    let cmd = standard_command().build_in(sim.registry())?;
    offer(&mut sim, &backend, |b| {
        naive_retry(cmd.clone(), b.clone(), 3)
    })
}

fn naive_retry_storm(seed: u64) -> Result<Report, SimError> {
    let mut sim = Sim::new();
    let backend = outage_backend(&sim, seed)?;
    let cmd = standard_command()
        .circuit_breaker_enabled(false)
        .build_in(sim.registry())?;
    offer(&mut sim, &backend, |b| {
        naive_retry(cmd.clone(), b.clone(), 3)
    })
}

fn naive_retry_storm_breaker(seed: u64) -> Result<Report, SimError> {
    let mut sim = Sim::new();
    let backend = outage_backend(&sim, seed)?;
    let cmd = standard_command().build_in(sim.registry())?;
    offer(&mut sim, &backend, |b| {
        naive_retry(cmd.clone(), b.clone(), 3)
    })
}

/// One retryable execution of up to 3 attempts with [`fallback`]: the request of a user of
/// the library's retry.
async fn execute_retrying(cmd: Command, backend: Backend) -> SimOutcome {
    let response = cmd
        .run_async_retryable(move || backend.call())
        .fallback(fallback)
        .execute_async()
        .await;
    SimOutcome::from_response(response)
}

/// The shared command with `retry.maxAttempts` 3.
fn retrying_command() -> CommandBuilder {
    standard_command().property("retry.maxAttempts", 3)
}

fn retry_storm(seed: u64) -> Result<Report, SimError> {
    let mut sim = Sim::new();
    let backend = outage_backend(&sim, seed)?;
    let cmd = retrying_command()
        .circuit_breaker_enabled(false)
        .build_in(sim.registry())?;
    offer(&mut sim, &backend, |b| {
        execute_retrying(cmd.clone(), b.clone())
    })
}

fn retry_storm_breaker(seed: u64) -> Result<Report, SimError> {
    let mut sim = Sim::new();
    let backend = outage_backend(&sim, seed)?;
    let cmd = retrying_command().build_in(sim.registry())?;
    offer(&mut sim, &backend, |b| {
        execute_retrying(cmd.clone(), b.clone())
    })
}

fn retry_storm_open(seed: u64) -> Result<Report, SimError> {
    let mut sim = Sim::new();
    let backend = outage_backend(&sim, seed)?;
    let cmd = retrying_command().build_in(sim.registry())?;
    let warm_up = Load::constant(1_000.0, Duration::from_secs(2));
    sim.run_load(&warm_up, |_| execute_retrying(cmd.clone(), backend.clone()))?;
    let before = backend.stats();
    let load = Load::constant(1_000.0, Duration::from_secs(8));
    let report = sim.run_load(&load, |_| execute_retrying(cmd.clone(), backend.clone()))?;
    Ok(report.with_backend(backend.stats().since(&before)))
}

fn retry_transient(seed: u64, percent: Option<u32>) -> Result<Report, SimError> {
    let mut sim = Sim::new();
    let backend = transient_backend(&sim, seed)?;
    let mut cmd = retrying_command();
    if let Some(percent) = percent {
        cmd = cmd.property("retry.budget.percent", percent);
    }
    let cmd = cmd.build_in(sim.registry())?;
    offer(&mut sim, &backend, |b| {
        execute_retrying(cmd.clone(), b.clone())
    })
}

fn retry_transient_40(seed: u64) -> Result<Report, SimError> {
    retry_transient(seed, Some(40))
}

fn retry_transient_default(seed: u64) -> Result<Report, SimError> {
    retry_transient(seed, None)
}

// ------------------------------------------------------------------------------------------------
// Hedging (issue 22)

/// The median of the hedging scenarios' service time: 5 ms.
pub const HEDGE_MEDIAN: Duration = Duration::from_millis(5);

/// The p99 of the hedging scenarios' service time: 50 ms, ten times the median (a long tail).
pub const HEDGE_P99: Duration = Duration::from_millis(50);

/// The p95 of the hedging scenarios' service time, in whole ms: the fixed hedging delay of
/// `hedge-fixed-p95`, `hedge-slowdown-fixed-p95` and `hedge-slowdown-budget-1s`. A log-normal's
/// p95 is `median · (p99 / median)^(1.6449 / 2.3263)` (the standard normal's 0.95 and 0.99
/// quantiles): `5 · 10^0.7071` = 25.5 ms, rounded to 25 ms.
pub const HEDGE_P95_MS: u64 = 25;

/// When the `hedge-slowdown*` scenarios' backend slows down, from the start of the run: 10 s.
pub const SLOWDOWN_FROM: Duration = Duration::from_secs(10);

/// When it is fast again: 20 s (10 s of slowdown, one window of the default retry budget).
pub const SLOWDOWN_UNTIL: Duration = Duration::from_secs(20);

/// How much longer every call takes during the slowdown: 50 ms.
pub const SLOWDOWN_EXTRA: Duration = Duration::from_millis(50);

/// How long the hedging scenarios' load lasts: 30 s.
const HEDGE_LOAD: Duration = Duration::from_secs(30);

/// The first health interval (`metrics.healthSnapshot.intervalInMilliseconds`, default
/// 500 ms): an adaptive hedging delay has data from its end on.
const FIRST_HEALTH_INTERVAL_MS: u64 = 500;

/// The hedging scenarios' backend: 200 workers and a queue of 200 (never saturated: about 8
/// calls in service on average at 1 000 req/s, about 60 during the slowdown, 153 at the most
/// seen, nothing ever queued), log-normal service time of
/// median [`HEDGE_MEDIAN`] and p99 [`HEDGE_P99`], seeded with `seed`. A losing attempt's call,
/// cancelled by the hedging execution, keeps its worker to the end of its service (the
/// backend's default): a server that does not see its client's cancellation, as most do not.
pub fn hedging_backend(seed: u64) -> BackendBuilder {
    Backend::builder()
        .workers(200)
        .queue(200)
        .service_time(ServiceTime::lognormal(HEDGE_MEDIAN, HEDGE_P99))
        .seed(seed)
}

/// The hedging scenarios' load: Poisson arrivals, 1 000 requests per second on average for
/// 30 s (about 30 000 requests, about 30 of them beyond the p99.9), from a generator seeded by
/// `seed` (mixed with a constant, so that its draws are not the backend's).
pub fn hedging_load(seed: u64) -> Load {
    Load::poisson(1_000.0, HEDGE_LOAD, seed ^ 0x9E37_79B9_7F4A_7C15)
}

/// The start of each attempt: `(request, arrival, start)`, in ms, in the order they started (a
/// request's first attempt starts at its arrival, its hedges later).
#[derive(Clone, Default)]
struct AttemptLog(Arc<Mutex<Vec<(u64, u64, u64)>>>);

/// Request `request`: one execution of a factory of backend calls (hedged if the command says
/// so) with [`fallback`], whose attempts are logged.
async fn execute_logged(
    cmd: Command,
    backend: Backend,
    clock: Arc<dyn Clock>,
    log: AttemptLog,
    request: u64,
) -> SimOutcome {
    let arrival = clock.now_ms();
    let response = cmd
        .run_async_retryable(move || {
            log.0.lock().push((request, arrival, clock.now_ms()));
            backend.call()
        })
        .fallback(fallback)
        .execute_async()
        .await;
    SimOutcome::from_response(response)
}

/// A hedging scenario's run: the [`hedging_load`] on a [`hedging_backend`] (with `phase`, if
/// any) through `cmd` built in the simulation's registry. Returns the report, with the backend's
/// stats and the measures "extra attempts per request" (hedges per offered request) and "most
/// calls in service at the backend", and the hedges' `(arrival of their request, start)` in ms.
fn run_hedging(
    seed: u64,
    cmd: CommandBuilder,
    phase: Option<Phase>,
) -> Result<(Report, Vec<(u64, u64)>), SimError> {
    let mut sim = Sim::new();
    let mut backend = hedging_backend(seed);
    if let Some(phase) = phase {
        backend = backend.phase(phase);
    }
    let backend = backend.build(sim.clock())?;
    let cmd = cmd.build_in(sim.registry())?;
    let log = AttemptLog::default();
    let clock = Arc::clone(sim.clock());
    let report = sim.run_load(&hedging_load(seed), |request| {
        let clock = Arc::clone(&clock);
        execute_logged(cmd.clone(), backend.clone(), clock, log.clone(), request)
    })?;
    // A request's attempts after its first are its hedges.
    let mut requests = HashSet::new();
    let hedges: Vec<(u64, u64)> = log
        .0
        .lock()
        .iter()
        .filter(|(request, ..)| !requests.insert(*request))
        .map(|&(_, arrival, start)| (arrival, start))
        .collect();
    let extra = share(hedges.len() as u64, report.offered());
    let stats = backend.stats();
    let report = report
        .with_backend(stats)
        .with_measure("extra attempts per request", extra)
        .with_measure(
            "most calls in service at the backend",
            stats.max_in_service as f64,
        );
    Ok((report, hedges))
}

/// The shared command with `hedging.maxAttempts` 2 (one hedge beside the first attempt) and
/// the default retry budget (20 % of the requests of 10 s + 10 per second); no retry.
fn hedging_command() -> CommandBuilder {
    standard_command().property("hedging.maxAttempts", 2)
}

/// [`hedging_command`] with the fixed delay [`HEDGE_P95_MS`].
fn hedging_at_p95() -> CommandBuilder {
    hedging_command().property("hedging.delayInMilliseconds", HEDGE_P95_MS)
}

/// [`hedging_command`] with the adaptive delay: the p95 of first attempts (the default 100 ms
/// until it has data).
fn hedging_adaptive() -> CommandBuilder {
    hedging_command().property("hedging.delayPercentile", 95.0)
}

fn hedge_none(seed: u64) -> Result<Report, SimError> {
    let (report, _) = run_hedging(seed, standard_command(), None)?;
    // Every request is one attempt: its latency is the first attempt's.
    let p95 = report.latency().p95_ms;
    Ok(report.with_measure("p95 of first attempts (ms)", p95 as f64))
}

fn hedge_fixed_p95(seed: u64) -> Result<Report, SimError> {
    run_hedging(seed, hedging_at_p95(), None).map(|(report, _)| report)
}

fn hedge_adaptive_p95(seed: u64) -> Result<Report, SimError> {
    let (report, hedges) = run_hedging(seed, hedging_adaptive(), None)?;
    // A hedge starts when the delay has passed since its request's first attempt started.
    let mut delays: Vec<u64> = hedges
        .iter()
        .filter(|(arrival, _)| *arrival >= FIRST_HEALTH_INTERVAL_MS)
        .map(|(arrival, start)| start - arrival)
        .collect();
    delays.sort_unstable();
    let (min, max) = (delays.first(), delays.last());
    let median = delays.get(delays.len().saturating_sub(1) / 2);
    let ms = |delay: Option<&u64>| delay.copied().unwrap_or(0) as f64;
    Ok(report
        .with_measure("hedging delay once computed, min (ms)", ms(min))
        .with_measure("hedging delay once computed, median (ms)", ms(median))
        .with_measure("hedging delay once computed, max (ms)", ms(max)))
}

/// A `hedge-slowdown*` scenario: [`run_hedging`] with every call [`SLOWDOWN_EXTRA`] longer from
/// [`SLOWDOWN_FROM`] to [`SLOWDOWN_UNTIL`], and measures of the extra attempts before, during
/// (against the default retry budget's bound) and after it.
fn hedge_slowdown(seed: u64, cmd: CommandBuilder) -> Result<Report, SimError> {
    let phase = Phase::between(SLOWDOWN_FROM, SLOWDOWN_UNTIL).extra_latency(SLOWDOWN_EXTRA);
    let (report, hedges) = run_hedging(seed, cmd, Some(phase))?;
    // Per second of the run: requests that arrived in it, hedges that started in it.
    let seconds = usize::try_from(HEDGE_LOAD.as_secs()).unwrap_or(usize::MAX);
    let mut arrived = vec![0u64; seconds + 1];
    let mut hedged = vec![0u64; seconds + 1];
    let second = |ms: u64| {
        usize::try_from(ms / 1000)
            .unwrap_or(usize::MAX)
            .min(seconds)
    };
    for at in hedging_load(seed).arrival_times_ms()? {
        arrived[second(at)] += 1;
    }
    for (_, start) in hedges {
        hedged[second(start)] += 1;
    }
    let from = usize::try_from(SLOWDOWN_FROM.as_secs()).unwrap_or(usize::MAX);
    let until = usize::try_from(SLOWDOWN_UNTIL.as_secs()).unwrap_or(usize::MAX);
    let over = |range: std::ops::Range<usize>| -> (u64, u64) {
        (
            arrived[range.clone()].iter().sum(),
            hedged[range].iter().sum(),
        )
    };
    let (before_requests, before_hedges) = over(0..from);
    let (requests, extra) = over(from..until);
    let (after_requests, after_hedges) = over(until..seconds);
    // The default budget: 20 % of the requests of its 10 s window + 10 per second of it.
    let bound = requests * 20 / 100 + 10 * (SLOWDOWN_UNTIL - SLOWDOWN_FROM).as_secs();
    let (busiest, busiest_share) = (from..until)
        .map(|s| (s, share(hedged[s], arrived[s])))
        .fold(
            (from, 0.0),
            |best, next| if next.1 > best.1 { next } else { best },
        );
    Ok(report
        .with_measure(
            "extra attempts per request before the slowdown",
            share(before_hedges, before_requests),
        )
        .with_measure("requests during the slowdown", requests as f64)
        .with_measure("extra attempts during the slowdown", extra as f64)
        .with_measure("retry budget's bound for them", bound as f64)
        .with_measure(
            "extra attempts per request during the slowdown",
            share(extra, requests),
        )
        .with_measure("retry budget's bound per request", share(bound, requests))
        .with_measure("busiest second of the slowdown (s)", busiest as f64)
        .with_measure("extra attempts per request in it", busiest_share)
        .with_measure(
            "extra attempts per request in the second after it",
            share(hedged[busiest + 1], arrived[busiest + 1]),
        )
        .with_measure(
            "extra attempts per request after the slowdown",
            share(after_hedges, after_requests),
        ))
}

fn hedge_slowdown_none(seed: u64) -> Result<Report, SimError> {
    hedge_slowdown(seed, standard_command())
}

fn hedge_slowdown_fixed_p95(seed: u64) -> Result<Report, SimError> {
    hedge_slowdown(seed, hedging_at_p95())
}

fn hedge_slowdown_adaptive_p95(seed: u64) -> Result<Report, SimError> {
    hedge_slowdown(seed, hedging_adaptive())
}

fn hedge_slowdown_budget_1s(seed: u64) -> Result<Report, SimError> {
    hedge_slowdown(
        seed,
        hedging_at_p95().property("retry.budget.windowInMilliseconds", 1_000),
    )
}
