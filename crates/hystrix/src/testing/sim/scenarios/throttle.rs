//! The adaptive throttling scenario (Google SRE book, "Handling Overload"): a backend that
//! answers "overloaded" at once beyond its capacity, offered three times that capacity, with
//! client-side adaptive throttling off, at K = 2 (the book's), 1.5, 1.2 and 1.1.
//!
//! The [`Backend`] has [`WORKERS`] (20) workers and **no queue**: a call that finds every
//! worker busy is refused at once with [`BackendError::Overloaded`], which the command
//! classifies as `.overloaded()` (the signal throttling counts: not an accept). Its service time
//! is log-normal with a median of 100 ms and a p99 of 150 ms (a mean of 101.5 ms), so its
//! capacity is [`CAPACITY_PER_S`], about 197 calls per second. The load is open: Poisson
//! arrivals at [`RATE_PER_S`] (600 per second, about 3× the capacity) for [`DURATION_MS`]
//! (30 s). The command `Backend` (group `Sim`) runs under SEMAPHORE isolation with 1 000
//! permits, a 1 s timeout, its breaker disabled (so that only throttling refuses calls
//! locally), and a fallback; it is
//!
//! - `off`: throttling off;
//! - `k-2`, `k-1.5`, `k-1.2`, `k-1.1`: `execution.throttle.enabled` with
//!   `execution.throttle.multiplier` K, the window at its default (120 s in 20 buckets: longer than the run, so it holds
//!   every request since the start).
//!
//! A run's [`Report`] carries [measures](Report::measures): the calls the backend received per
//! second and that rate ÷ the capacity (its **load**), the goodput (calls it served with
//! success per second), the calls it refused as overloaded, the attempts throttled, and the
//! throttling probability at the end; each over the whole run and over its settled part, from
//! [`SETTLE_MS`] (10 s) to the end.
//!
//! By the formula the backend receives about K × accepts: with the backend saturated, accepts
//! are about its capacity, so K = 2 leaves it about 2× its capacity and only K ≤ about 1.2
//! brings it near its capacity. The simulated backend refuses at no cost, so throttling does
//! not raise the goodput here (a real backend would spend less on refusing); it only lowers
//! what the backend receives. `cargo run -p hystrix-rs --release --features sim --example sim
//! -- throttle-study` prints the table (BENCHMARKS.md).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::super::{Backend, BackendError, BackendStats, Load, Report, ServiceTime, Sim, SimError};
use super::super::{SimOutcome, fallback};
use crate::clock;
use crate::command::{Classifier, Command, CommandBuilder};
use crate::config::IsolationStrategy;
use crate::retry::RetryAnswer;

/// The backend's workers: 20 (and no queue).
pub const WORKERS: usize = 20;

/// The median service time: 100 ms.
pub const MEDIAN: Duration = Duration::from_millis(100);

/// The service time's p99: 150 ms.
pub const P99: Duration = Duration::from_millis(150);

/// The backend's capacity in calls per second: [`WORKERS`] ÷ the mean service time (the
/// log-normal's mean, median × e^(σ²/2) with σ = ln(p99 / median) / 2.326, 101.5 ms).
pub fn capacity_per_s() -> f64 {
    let sigma = (P99.as_secs_f64() / MEDIAN.as_secs_f64()).ln() / 2.326_347_874;
    let mean_s = MEDIAN.as_secs_f64() * (sigma * sigma / 2.0).exp();
    WORKERS as f64 / mean_s
}

/// [`capacity_per_s`], rounded: about 197 calls per second.
pub const CAPACITY_PER_S: f64 = 197.0;

/// The offered load: 600 requests per second, about 3× the capacity.
pub const RATE_PER_S: f64 = 600.0;

/// How long the load lasts: 30 s.
pub const DURATION_MS: u64 = 30_000;

/// Where the settled part of a run begins: 10 s.
pub const SETTLE_MS: u64 = 10_000;

/// Measure: calls the backend received, per second.
pub const BACKEND_CALLS: &str = "backend calls/s";
/// Measure: calls the backend received per second ÷ its capacity.
pub const BACKEND_LOAD: &str = "backend load (× capacity)";
/// Measure: calls the backend served with success, per second.
pub const GOODPUT: &str = "goodput (successes/s)";
/// Measure: calls the backend refused as overloaded.
pub const OVERLOADS: &str = "backend overloads";
/// Measure: attempts throttled (refused locally).
pub const THROTTLED: &str = "throttled";
/// Measure: the throttling probability at the end of the load (0 when off).
pub const PROBABILITY: &str = "throttle probability, final";

/// The name of the settled part's measure `what`: "settled: backend calls/s".
pub fn settled(what: &str) -> String {
    format!("settled: {what}")
}

/// Whether and how the command throttles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Throttling {
    /// Throttling off.
    Off,
    /// Throttling on with this multiplier K.
    On(f64),
}

impl Throttling {
    /// The runs of the study: off, K = 2 (the book's), 1.5, 1.2 and 1.1.
    pub const ALL: [Throttling; 5] = [
        Throttling::Off,
        Throttling::On(2.0),
        Throttling::On(1.5),
        Throttling::On(1.2),
        Throttling::On(1.1),
    ];

    /// Its name in a report: `off`, `k-2`, `k-1.1`.
    pub fn name(self) -> String {
        match self {
            Throttling::Off => "off".to_string(),
            Throttling::On(k) => format!("k-{k}"),
        }
    }
}

/// The command of the scenario: see the module's documentation.
fn command(throttling: Throttling) -> CommandBuilder<Classifier<BackendError>> {
    let cmd = Command::builder("Backend")
        .group("Sim")
        .isolation(IsolationStrategy::Semaphore)
        .circuit_breaker_enabled(false)
        .semaphore_max_concurrent_requests(1_000)
        .timeout(Duration::from_secs(1));
    let cmd = match throttling {
        Throttling::Off => cmd,
        Throttling::On(k) => cmd
            .property("execution.throttle.enabled", true)
            .property("execution.throttle.multiplier", k),
    };
    cmd.classify_retry(|error: &BackendError| match error {
        BackendError::Overloaded => RetryAnswer::retry().overloaded(),
        _ => RetryAnswer::retry(),
    })
}

/// One run with `throttling` and `seed`: its report, named `throttle-<throttling>`, with the
/// backend's stats and the measures of the module's documentation.
///
/// # Errors
/// What the [`Sim`] returns.
pub fn run(throttling: Throttling, seed: u64) -> Result<Report, SimError> {
    let mut sim = Sim::new();
    let backend = Backend::builder()
        .workers(WORKERS)
        .queue(0)
        .service_time(ServiceTime::lognormal(MEDIAN, P99))
        .seed(seed)
        .build(sim.clock())?;
    let cmd = command(throttling).build_in(sim.registry())?;
    // The backend's stats and the THROTTLED count when the settled part begins.
    let at_settle: Arc<Mutex<Option<(BackendStats, u64)>>> = Arc::default();
    {
        let (cmd, backend, at_settle, clock) = (
            cmd.clone(),
            backend.clone(),
            Arc::clone(&at_settle),
            Arc::clone(sim.clock()),
        );
        sim.spawn(async move {
            clock::sleep(&clock, Duration::from_millis(SETTLE_MS)).await;
            let throttled = cmd
                .metrics()
                .cumulative_count(crate::event::EventType::Throttled);
            *at_settle.lock() = Some((backend.stats(), throttled));
        });
    }
    let load = Load::poisson(
        RATE_PER_S,
        Duration::from_millis(DURATION_MS),
        seed ^ 0x9E37_79B9_7F4A_7C15,
    );
    let report = sim.run_load(&load, |_| {
        let (cmd, call) = (cmd.clone(), backend.call());
        async move {
            let response = cmd.run_async(call).fallback(fallback).execute_async().await;
            SimOutcome::from_response(response)
        }
    })?;
    let stats = backend.stats();
    let metrics = cmd.metrics();
    let throttled = metrics.cumulative_count(crate::event::EventType::Throttled);
    let (early, early_throttled) = at_settle.lock().take().unwrap_or_default();
    let later = stats.since(&early);
    let probability = metrics.throttle().map_or(0.0, |t| t.probability);
    let whole_s = DURATION_MS as f64 / 1000.0;
    let settled_s = (DURATION_MS - SETTLE_MS) as f64 / 1000.0;
    let mut report = report
        .with_name(format!("throttle-{}", throttling.name()))
        .with_backend(stats)
        .with_measure(PROBABILITY, probability);
    for (is_settled, part, part_throttled, seconds) in [
        (false, stats, throttled, whole_s),
        (true, later, throttled - early_throttled, settled_s),
    ] {
        let label = |what: &str| {
            if is_settled {
                settled(what)
            } else {
                what.to_string()
            }
        };
        let calls = part.calls as f64 / seconds;
        report = report
            .with_measure(label(BACKEND_CALLS), calls)
            .with_measure(label(BACKEND_LOAD), calls / capacity_per_s())
            .with_measure(label(GOODPUT), part.succeeded as f64 / seconds)
            .with_measure(label(OVERLOADS), part.overloaded as f64)
            .with_measure(label(THROTTLED), part_throttled as f64);
    }
    Ok(report)
}

/// The study's runs ([`Throttling::ALL`]: off, K = 2, 1.5, 1.2, 1.1) for `seed`, in that
/// order.
///
/// # Errors
/// What the [`Sim`] returns.
pub fn study(seed: u64) -> Result<Vec<(Throttling, Report)>, SimError> {
    Throttling::ALL
        .into_iter()
        .map(|throttling| Ok((throttling, run(throttling, seed)?)))
        .collect()
}

/// The study's table in Markdown, as BENCHMARKS.md shows it: per run, over the settled part
/// (10 s to 30 s) and the whole run, the backend's calls per second and load (× capacity),
/// the goodput, the attempts throttled and the final probability.
pub fn markdown(reports: &[(Throttling, Report)]) -> String {
    let mut out = String::from(
        "| throttling | backend calls/s (settled) | backend load, × capacity (settled) | goodput, successes/s (settled) | throttled (settled) | backend calls/s (whole) | backend load (whole) | goodput (whole) | throttled (whole) | probability at 30 s |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (throttling, report) in reports {
        let m = |name: &str| report.measure(name).unwrap_or(f64::NAN);
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.2} | {:.1} | {:.0} | {:.1} | {:.2} | {:.1} | {:.0} | {:.3} |",
            throttling.name(),
            m(&settled(BACKEND_CALLS)),
            m(&settled(BACKEND_LOAD)),
            m(&settled(GOODPUT)),
            m(&settled(THROTTLED)),
            m(BACKEND_CALLS),
            m(BACKEND_LOAD),
            m(GOODPUT),
            m(THROTTLED),
            m(PROBABILITY),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capacity_is_the_workers_over_the_mean_service_time() {
        assert!(
            (capacity_per_s() - CAPACITY_PER_S).abs() < 0.5,
            "{}",
            capacity_per_s()
        );
    }
}
