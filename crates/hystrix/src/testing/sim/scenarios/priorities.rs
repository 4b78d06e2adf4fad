//! The priority scenario (issue 24): a backend at 2× overload, traffic of three classes, the
//! command in front of it with and without priority reserves.
//!
//! The backend and load are [`LimitScenario::Overload`]'s: C = 20 workers (about 195 calls per
//! second), a queue of 100, a log-normal service time (median 100 ms, p99 150 ms), Poisson
//! arrivals at 400 requests per second for 20 s. Each request's class is drawn from the seed:
//! 20 % CRITICAL, 50 % NORMAL, 30 % SHEDDABLE ([`MIX`]). The command (`Backend`, group `Sim`,
//! SEMAPHORE, 1 s timeout, breaker off, a fallback) admits by a bound ([`Ranking::bound`]):
//! `maxConcurrentRequests` 20 (the best static limit of the limit study), or the adaptive
//! limit (VEGAS, `maxConcurrentRequests` 1 000); with reserves
//! (`execution.isolation.priority.critical.reservedPercentage` /
//! `...normal.reservedPercentage`) or without.
//!
//! A run's [`Report`] carries, per class, the share of its requests the backend answered
//! ([`answered_measure`], percent) and the goodput (answers per second). [`study`] runs the
//! [`RANKINGS`] and prints the table of BENCHMARKS.md:
//! `cargo run -p hystrix-rs --release --features sim --example sim -- priority-study`.

use std::fmt::Write as _;
use std::sync::Arc;

use parking_lot::Mutex;

use super::super::{BackendError, Report, Sim, SimError, SimOutcome};
use super::limits::{LimitScenario, TIMEOUT, classify_overload};
use crate::command::{Classifier, Command, CommandBuilder};
use crate::config::IsolationStrategy;
use crate::error::HystrixError;
use crate::isolation::priority::Priority;
use crate::limit::AdaptiveAlgorithm;

/// The traffic's classes in percent: CRITICAL, NORMAL, SHEDDABLE.
pub const MIX: [(Priority, u32); 3] = [
    (Priority::Critical, 20),
    (Priority::Normal, 50),
    (Priority::Sheddable, 30),
];

/// Measure: answers per second of load, all classes.
pub const GOODPUT: &str = "goodput (answers/s)";

/// The name of the measure of the share of `priority`'s requests answered by the backend, in
/// percent: "CRITICAL answered (%)".
pub fn answered_measure(priority: Priority) -> String {
    format!("{priority} answered (%)")
}

/// What admits the command's executions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bound {
    /// `maxConcurrentRequests` at this value.
    Static(u32),
    /// The adaptive limit with this algorithm, `maxConcurrentRequests` 1 000.
    Adaptive(AdaptiveAlgorithm),
}

/// A configuration of the priority scenario: a bound and the reserves in percent (CRITICAL's,
/// NORMAL's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ranking {
    /// What admits executions.
    pub bound: Bound,
    /// `execution.isolation.priority.critical.reservedPercentage`.
    pub critical: u32,
    /// `execution.isolation.priority.normal.reservedPercentage`.
    pub normal: u32,
}

impl Ranking {
    /// Its name in a table: `static-20`, `static-20 reserves 60/20`, `vegas reserves 60/20`.
    pub fn name(self) -> String {
        let bound = match self.bound {
            Bound::Static(limit) => format!("static-{limit}"),
            Bound::Adaptive(algorithm) => algorithm.name().to_lowercase(),
        };
        if self.critical == 0 && self.normal == 0 {
            format!("{bound}, no priorities")
        } else {
            format!("{bound}, reserves {}/{}", self.critical, self.normal)
        }
    }

    fn command(self) -> CommandBuilder<Classifier<BackendError>> {
        let cmd = Command::builder("Backend")
            .group("Sim")
            .isolation(IsolationStrategy::Semaphore)
            .circuit_breaker_enabled(false)
            .timeout(TIMEOUT)
            .property(
                "execution.isolation.priority.critical.reservedPercentage",
                self.critical,
            )
            .property(
                "execution.isolation.priority.normal.reservedPercentage",
                self.normal,
            );
        let cmd = match self.bound {
            Bound::Static(limit) => cmd.semaphore_max_concurrent_requests(limit),
            Bound::Adaptive(algorithm) => cmd
                .semaphore_max_concurrent_requests(1_000)
                .property("execution.isolation.adaptive.enabled", true)
                .property("execution.isolation.adaptive.algorithm", algorithm.name()),
        };
        classify_overload(cmd)
    }
}

const fn ranking(bound: Bound, critical: u32, normal: u32) -> Ranking {
    Ranking {
        bound,
        critical,
        normal,
    }
}

/// The configurations of the study, in the order of its table.
pub const RANKINGS: [Ranking; 11] = [
    ranking(Bound::Static(20), 0, 0),
    ranking(Bound::Static(20), 50, 20),
    ranking(Bound::Static(20), 60, 30),
    ranking(Bound::Static(20), 70, 20),
    ranking(Bound::Adaptive(AdaptiveAlgorithm::Vegas), 0, 0),
    ranking(Bound::Adaptive(AdaptiveAlgorithm::Vegas), 50, 30),
    ranking(Bound::Adaptive(AdaptiveAlgorithm::Vegas), 60, 30),
    ranking(Bound::Adaptive(AdaptiveAlgorithm::Vegas), 60, 40),
    ranking(Bound::Adaptive(AdaptiveAlgorithm::Gradient2), 0, 0),
    ranking(Bound::Adaptive(AdaptiveAlgorithm::Gradient2), 60, 30),
    ranking(Bound::Adaptive(AdaptiveAlgorithm::Aimd), 60, 30),
];

/// The class of request `index` of a run seeded by `seed`, drawn by [`MIX`].
pub fn class_of(seed: u64, index: u64) -> Priority {
    let draw =
        fastrand::Rng::with_seed(seed ^ index.wrapping_mul(0xA24B_AED4_963E_E407)).u32(0..100);
    let mut below = 0;
    for (priority, share) in MIX {
        below += share;
        if draw < below {
            return priority;
        }
    }
    Priority::Sheddable
}

/// Requests and answers of one class.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    requests: u64,
    answered: u64,
}

/// One run with `ranking` and `seed`: its report, named after the ranking, with the measures
/// of the module's documentation.
///
/// # Errors
/// What the [`Sim`] returns.
pub fn run(ranking: Ranking, seed: u64) -> Result<Report, SimError> {
    let scenario = LimitScenario::Overload;
    let mut sim = Sim::new();
    let backend = scenario.backend(seed).build(sim.clock())?;
    let cmd = ranking.command().build_in(sim.registry())?;
    let tallies = Arc::new(Mutex::new([Tally::default(); 3]));
    let report = sim.run_load(&scenario.load(seed), |index| {
        let (cmd, call, tallies) = (cmd.clone(), backend.call(), Arc::clone(&tallies));
        let priority = class_of(seed, index);
        async move {
            let response = cmd
                .run_async(call)
                .fallback(|_: &HystrixError<BackendError>| {
                    Ok::<_, std::convert::Infallible>(SimOutcome::Fallback)
                })
                .priority(priority)
                .execute_async()
                .await;
            let outcome = SimOutcome::from_response(response);
            let mut tallies = tallies.lock();
            let tally = &mut tallies[priority as usize];
            tally.requests += 1;
            tally.answered += u64::from(outcome == SimOutcome::Answered);
            outcome
        }
    })?;
    let tallies = *tallies.lock();
    let seconds = scenario.duration_ms() as f64 / 1000.0;
    let answered: u64 = tallies.iter().map(|t| t.answered).sum();
    let mut report = report
        .with_name(format!("priority-{}", ranking.name()))
        .with_backend(backend.stats())
        .with_measure(GOODPUT, answered as f64 / seconds);
    for (priority, _) in MIX {
        let tally = tallies[priority as usize];
        let share = if tally.requests == 0 {
            0.0
        } else {
            100.0 * tally.answered as f64 / tally.requests as f64
        };
        report = report.with_measure(answered_measure(priority), share);
    }
    Ok(report)
}

/// Runs every ranking of [`RANKINGS`] with `seed`.
///
/// # Errors
/// The first run's error.
pub fn study(seed: u64) -> Result<Vec<(Ranking, Report)>, SimError> {
    RANKINGS
        .iter()
        .map(|&ranking| run(ranking, seed).map(|report| (ranking, report)))
        .collect()
}

/// The study's table in Markdown: one row per ranking, the share of each class answered and
/// the goodput.
pub fn markdown(reports: &[(Ranking, Report)]) -> String {
    let mut out = String::from(
        "| configuration | CRITICAL answered | NORMAL answered | SHEDDABLE answered | goodput (answers/s) |\n\
         |---|---|---|---|---|\n",
    );
    for (ranking, report) in reports {
        let share = |p| report.measure(&answered_measure(p)).unwrap_or(0.0);
        let _ = writeln!(
            out,
            "| {} | {:.1} % | {:.1} % | {:.1} % | {:.1} |",
            ranking.name(),
            share(Priority::Critical),
            share(Priority::Normal),
            share(Priority::Sheddable),
            report.measure(GOODPUT).unwrap_or(0.0)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_draws_each_class_in_its_share() {
        let mut counts = [0u32; 3];
        for index in 0..10_000 {
            counts[class_of(1, index) as usize] += 1;
        }
        // Within 4 standard deviations of 2 000, 5 000 and 3 000.
        assert!((1_840..=2_160).contains(&counts[0]), "{counts:?}");
        assert!((4_800..=5_200).contains(&counts[1]), "{counts:?}");
        assert!((2_820..=3_180).contains(&counts[2]), "{counts:?}");
    }
}
