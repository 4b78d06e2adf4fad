//! The named scenarios of our benchmarks (BENCHMARKS.md), each a function of a seed.
//!
//! `cargo run -p hystrix-rs --release --features sim --example sim` lists them;
//! `... --example sim -- <name>|all [--seed N]` runs them and prints a [`table`](super::table).
//!
//! They share one set-up, so that their rows compare: a [`Backend`] of 200 workers and a queue
//! of 200 whose service time is log-normal with a median of 20 ms and a p99 of 100 ms; an open
//! [`Load`] of 1 000 requests per second for 10 s, evenly spaced (10 000 requests); one command
//! `Backend` under SEMAPHORE isolation with 1 000 permits (the bulkhead never refuses) and the
//! default 1 s timeout; the backend's call is the run and [`fallback`] the fallback.
//!
//! To add one, write a function `fn(seed) -> Result<Report, SimError>` from the helpers below
//! ([`standard_backend`], [`standard_command`], [`offer`]) and list it in [`SCENARIOS`].
//! The `naive-*` scenarios "retry" with a loop written by hand around executions, as a user
//! without retries in the library would; the `retry-*` ones use the library's retry
//! ([`Command::run_async_retryable`], `retry.maxAttempts` 3, the default backoff of 100 ms
//! doubling, and the default budget of 20 % of requests + 10 per second unless named).

use std::fmt;
use std::future::Future;
use std::time::Duration;

use super::{
    Backend, BackendBuilder, Load, Report, ServiceTime, Sim, SimError, SimOutcome, fallback,
};
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
