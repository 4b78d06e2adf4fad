//! The adaptive concurrency limit scenarios (issue 23): one backend, three ways its capacity
//! moves, and the command in front of it with no limit, a static limit, or an adaptive one.
//!
//! Every scenario has a [`Backend`] of C workers and a queue of [`QUEUE`] (100), whose service
//! time is log-normal with a median of [`MEDIAN`] (100 ms) and a p99 of [`P99`] (150 ms); a
//! call beyond workers + queue is refused at once with [`BackendError::Overloaded`], which the
//! command classifies as `.overloaded()` (a drop for the algorithms, as its timeouts are). The
//! load is open: Poisson arrivals at a constant rate. The command `Backend` (group `Sim`) runs
//! under SEMAPHORE isolation with a 1 s timeout ([`TIMEOUT`]), its breaker disabled (so that
//! only the limit decides admission), and a fallback; it is
//!
//! - `none`: no limit (`maxConcurrentRequests` 1 000, adaptive limit off);
//! - `static-L`: a static limit, `maxConcurrentRequests` L, adaptive limit off;
//! - `aimd`, `vegas`, `gradient2`: `execution.isolation.adaptive.enabled` with that algorithm
//!   and every other adaptive property at its default (initial limit 20, 1 to 200, no wait,
//!   windows of 20 samples), `maxConcurrentRequests` 1 000 (so the adaptive limit alone
//!   decides).
//!
//! The scenarios ([`LimitScenario`]) and their phases ([`LimitPhase`]: when, C, the unloaded
//! latency, which is the phase's median service time):
//!
//! - `limit-overload`: C = 20 (about 195 calls per second), 400 requests per second for 20 s:
//!   a steady 2× overload;
//! - `limit-capacity-drop`: C = 40, 300 requests per second for 60 s; C = 10 from 20 s to 40 s
//!   (calls in service finish), 40 again after;
//! - `limit-slowdown`: C = 20, 150 requests per second for 40 s; every call takes twice as long
//!   from 20 s on (unloaded latency 200 ms; capacity about 98 calls per second).
//!
//! A run's [`Report`] carries [measures](Report::measures) beside the usual columns: the
//! goodput (requests answered by the backend per second of load; an answer always came within
//! the timeout, since a timeout goes to the fallback), p50 and p99 **of those answers** (from
//! the request's arrival, in ms), the rejections (`LIMIT_REJECTED` and `SEMAPHORE_REJECTED`),
//! the timeouts, and the limit sampled every 100 ms of virtual time
//! (`cmd.metrics().adaptive_limit()`, or the static value): its mean and final value; and per
//! phase the goodput and p99 of the requests that arrived in it, the limit 5 s after the phase
//! began, and its mean from then to the phase's end.
//!
//! [`study`] runs a whole sweep (no limit, static limits from 1 to 4·C, each algorithm) and
//! checks the goals for each algorithm: goodput ≥ 90 % of the best static limit's, p99
//! ≤ 2× the phase's unloaded latency in every phase, and the limit 5 s after each change within
//! ±25 % of that phase's best static limit. `cargo run -p hystrix-rs --release --features sim
//! --example sim -- limit-study` prints it (BENCHMARKS.md).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use parking_lot::Mutex;

use super::super::{
    Backend, BackendBuilder, BackendError, Load, Phase, Report, ServiceTime, Sim, SimError,
    SimOutcome,
};
use crate::clock;
use crate::command::{Classifier, Command, CommandBuilder};
use crate::config::IsolationStrategy;
use crate::error::{FailureType, HystrixError};
use crate::limit::AdaptiveAlgorithm;
use crate::retry::RetryAnswer;

/// The backend's queue in every limit scenario: 100 calls.
pub const QUEUE: usize = 100;

/// The median service time (the unloaded latency) outside a slowdown: 100 ms.
pub const MEDIAN: Duration = Duration::from_millis(100);

/// The service time's p99 outside a slowdown: 150 ms.
pub const P99: Duration = Duration::from_millis(150);

/// The command's timeout: 1 s (10× the unloaded latency, 5× during the slowdown).
pub const TIMEOUT: Duration = Duration::from_secs(1);

/// How often the limit is sampled, in virtual ms.
pub const SAMPLE_EVERY_MS: u64 = 100;

/// How long after a change the limit is checked: 5 s.
pub const SETTLE_MS: u64 = 5_000;

/// Measure: requests answered by the backend per second of load.
pub const GOODPUT: &str = "goodput (answers/s)";
/// Measure: the median latency of the answers, in ms.
pub const P50: &str = "p50 of answers (ms)";
/// Measure: the p99 latency of the answers, in ms.
pub const P99_MS: &str = "p99 of answers (ms)";
/// Measure: executions refused by the limit (`LIMIT_REJECTED` and `SEMAPHORE_REJECTED`).
pub const REJECTIONS: &str = "rejections";
/// Measure: executions that timed out.
pub const TIMEOUTS: &str = "timeouts";
/// Measure: calls the backend refused as overloaded.
pub const OVERLOADS: &str = "backend overloads";
/// Measure: the mean of the limit's samples over the load.
pub const LIMIT_MEAN: &str = "limit, mean";
/// Measure: the limit at the end of the load.
pub const LIMIT_FINAL: &str = "limit, final";

/// The name of phase `phase`'s (from 1) measure `what`: "phase 2: goodput (answers/s)".
pub fn phase_measure(phase: usize, what: &str) -> String {
    format!("phase {phase}: {what}")
}

/// Phase measure: the limit 5 s after the phase began.
pub const LIMIT_AT_SETTLE: &str = "limit at +5 s";
/// Phase measure: the mean of the limit's samples from 5 s after the phase began to its end.
pub const LIMIT_MEAN_SETTLED: &str = "limit, mean from +5 s";
/// Phase measure: the p99 of the answers to the requests that arrived from 5 s after the phase
/// began to its end, in ms.
pub const P99_SETTLED: &str = "p99 of answers from +5 s (ms)";
/// Measure (adaptive runs): executions the limit still counted in flight or waiting once
/// every request had its outcome (0 unless permits leak).
pub const LEFT_IN_FLIGHT: &str = "left in flight or queued";

/// A period of a limit scenario with its own capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitPhase {
    /// Its start, in ms from the start of the load.
    pub from_ms: u64,
    /// Its end (exclusive), in ms.
    pub until_ms: u64,
    /// The backend's workers, C.
    pub workers: usize,
    /// The unloaded latency: the median service time, in ms.
    pub unloaded_ms: u64,
}

/// The three limit scenarios of issue 23.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitScenario {
    /// A steady 2× overload: C = 20, 400 requests per second for 20 s.
    Overload,
    /// C = 40, 300 requests per second for 60 s; C = 10 from 20 s to 40 s.
    CapacityDrop,
    /// C = 20, 150 requests per second for 40 s; service time doubles at 20 s.
    Slowdown,
}

const fn phase(from_s: u64, until_s: u64, workers: usize, unloaded_ms: u64) -> LimitPhase {
    LimitPhase {
        from_ms: from_s * 1000,
        until_ms: until_s * 1000,
        workers,
        unloaded_ms,
    }
}

const OVERLOAD_PHASES: [LimitPhase; 1] = [phase(0, 20, 20, 100)];
const DROP_PHASES: [LimitPhase; 3] = [
    phase(0, 20, 40, 100),
    phase(20, 40, 10, 100),
    phase(40, 60, 40, 100),
];
const SLOWDOWN_PHASES: [LimitPhase; 2] = [phase(0, 20, 20, 100), phase(20, 40, 20, 200)];

impl LimitScenario {
    /// All three, in the order of BENCHMARKS.md.
    pub const ALL: [LimitScenario; 3] = [
        LimitScenario::Overload,
        LimitScenario::CapacityDrop,
        LimitScenario::Slowdown,
    ];

    /// Its name: `limit-overload`, `limit-capacity-drop`, `limit-slowdown`.
    pub const fn name(self) -> &'static str {
        match self {
            LimitScenario::Overload => "limit-overload",
            LimitScenario::CapacityDrop => "limit-capacity-drop",
            LimitScenario::Slowdown => "limit-slowdown",
        }
    }

    /// The scenario called `name`.
    pub fn find(name: &str) -> Option<LimitScenario> {
        LimitScenario::ALL
            .into_iter()
            .find(|scenario| scenario.name() == name)
    }

    /// Its phases, in order; the first starts at 0, the last ends with the load.
    pub const fn phases(self) -> &'static [LimitPhase] {
        match self {
            LimitScenario::Overload => &OVERLOAD_PHASES,
            LimitScenario::CapacityDrop => &DROP_PHASES,
            LimitScenario::Slowdown => &SLOWDOWN_PHASES,
        }
    }

    /// The arrival rate, in requests per second.
    pub const fn rate_per_s(self) -> f64 {
        match self {
            LimitScenario::Overload => 400.0,
            LimitScenario::CapacityDrop => 300.0,
            LimitScenario::Slowdown => 150.0,
        }
    }

    /// How long the load lasts, in ms (the last phase's end).
    pub const fn duration_ms(self) -> u64 {
        let phases = self.phases();
        phases[phases.len() - 1].until_ms
    }

    /// The static limits of its sweep: from 1 to 4·C (the largest C of its phases), finer
    /// around the phases' C.
    pub const fn static_sweep(self) -> &'static [u32] {
        match self {
            LimitScenario::Overload | LimitScenario::Slowdown => {
                &[1, 5, 10, 15, 20, 25, 30, 40, 60, 80]
            }
            LimitScenario::CapacityDrop => &[1, 5, 10, 15, 20, 30, 40, 50, 60, 80, 120, 160],
        }
    }

    /// Its open load: Poisson arrivals at [`rate_per_s`](LimitScenario::rate_per_s) from a
    /// generator seeded by `seed` (mixed with a constant, so that its draws are not the
    /// backend's).
    pub fn load(self, seed: u64) -> Load {
        Load::poisson(
            self.rate_per_s(),
            Duration::from_millis(self.duration_ms()),
            seed ^ 0x9E37_79B9_7F4A_7C15,
        )
    }

    /// Its backend: the first phase's C workers, a queue of [`QUEUE`], service time log-normal
    /// ([`MEDIAN`], [`P99`]), and the later phases' changes, seeded by `seed`.
    pub fn backend(self, seed: u64) -> BackendBuilder {
        let phases = self.phases();
        let mut backend = Backend::builder()
            .workers(phases[0].workers)
            .queue(QUEUE)
            .service_time(ServiceTime::lognormal(MEDIAN, P99))
            .seed(seed);
        for later in &phases[1..] {
            let mut change = Phase::between(
                Duration::from_millis(later.from_ms),
                // The last phase lasts while calls are served after the load.
                if later.until_ms == self.duration_ms() {
                    Duration::MAX
                } else {
                    Duration::from_millis(later.until_ms)
                },
            );
            if later.workers != phases[0].workers {
                change = change.workers(later.workers);
            }
            if later.unloaded_ms != phases[0].unloaded_ms {
                change = change
                    .service_time_factor(later.unloaded_ms as f64 / phases[0].unloaded_ms as f64);
            }
            if change != Phase::between(Duration::ZERO, Duration::ZERO) {
                backend = backend.phase(change);
            }
        }
        backend
    }
}

/// What limits the command's executions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limiting {
    /// Nothing: `maxConcurrentRequests` 1 000.
    None,
    /// A static limit: `maxConcurrentRequests` L, adaptive limit off.
    Static(u32),
    /// The adaptive limit with this algorithm, its properties at their defaults.
    Adaptive(AdaptiveAlgorithm),
}

impl Limiting {
    /// The configurations of a sweep of `scenario`: none, its static limits, each algorithm.
    pub fn sweep(scenario: LimitScenario) -> Vec<Limiting> {
        let mut all = vec![Limiting::None];
        all.extend(scenario.static_sweep().iter().map(|&l| Limiting::Static(l)));
        all.extend(ALGORITHMS.iter().map(|&a| Limiting::Adaptive(a)));
        all
    }

    /// Its name in a report: `none`, `static-20`, `aimd`, `vegas`, `gradient2`.
    pub fn name(self) -> String {
        match self {
            Limiting::None => "none".to_string(),
            Limiting::Static(limit) => format!("static-{limit}"),
            Limiting::Adaptive(algorithm) => algorithm.name().to_lowercase(),
        }
    }
}

/// The algorithms, in the order of the tables.
pub const ALGORITHMS: [AdaptiveAlgorithm; 3] = [
    AdaptiveAlgorithm::Aimd,
    AdaptiveAlgorithm::Vegas,
    AdaptiveAlgorithm::Gradient2,
];

/// The command of the limit scenarios: see the module's documentation.
fn command(limiting: Limiting) -> CommandBuilder<Classifier<BackendError>> {
    let cmd = Command::builder("Backend")
        .group("Sim")
        .isolation(IsolationStrategy::Semaphore)
        .circuit_breaker_enabled(false)
        .timeout(TIMEOUT);
    let cmd = match limiting {
        Limiting::None => cmd.semaphore_max_concurrent_requests(1_000),
        Limiting::Static(limit) => cmd.semaphore_max_concurrent_requests(limit),
        Limiting::Adaptive(algorithm) => cmd
            .semaphore_max_concurrent_requests(1_000)
            .property("execution.isolation.adaptive.enabled", true)
            .property("execution.isolation.adaptive.algorithm", algorithm.name()),
    };
    classify_overload(cmd)
}

/// `cmd` with the scenarios' classifier: a [`BackendError::Overloaded`] answer says overload
/// (a drop for the adaptive limit), any other error is plainly retryable.
pub(super) fn classify_overload(cmd: CommandBuilder) -> CommandBuilder<Classifier<BackendError>> {
    cmd.classify_retry(|error: &BackendError| match error {
        BackendError::Overloaded => RetryAnswer::retry().overloaded(),
        _ => RetryAnswer::retry(),
    })
}

/// What the requests of a run saw: `(arrival, latency)` of each answer, in ms, and counts of
/// the fallbacks' causes.
#[derive(Default)]
struct Seen {
    answers: Vec<(u64, u64)>,
    rejections: u64,
    timeouts: u64,
}

/// One run of `scenario` with `limiting` and `seed`: its report, named
/// `<scenario>-<limiting>`, with the backend's stats and the measures of the module's
/// documentation.
///
/// # Errors
/// What the [`Sim`] returns.
pub fn run(scenario: LimitScenario, limiting: Limiting, seed: u64) -> Result<Report, SimError> {
    let mut sim = Sim::new();
    let backend = scenario.backend(seed).build(sim.clock())?;
    let cmd = command(limiting).build_in(sim.registry())?;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let limits = Arc::new(Mutex::new(Vec::new()));
    let duration_ms = scenario.duration_ms();
    {
        let (cmd, limits, clock) = (cmd.clone(), Arc::clone(&limits), Arc::clone(sim.clock()));
        sim.spawn(async move {
            loop {
                let now = clock.now_ms();
                let limit = match limiting {
                    Limiting::None => 1_000,
                    Limiting::Static(limit) => limit,
                    Limiting::Adaptive(_) => cmd
                        .metrics()
                        .adaptive_limit()
                        .map_or(0, |snapshot| snapshot.limit),
                };
                limits.lock().push((now, limit));
                if now >= duration_ms {
                    break;
                }
                clock::sleep(&clock, Duration::from_millis(SAMPLE_EVERY_MS)).await;
            }
        });
    }
    let clock = Arc::clone(sim.clock());
    let report = sim.run_load(&scenario.load(seed), |_| {
        let (cmd, call, seen, clock) = (
            cmd.clone(),
            backend.call(),
            Arc::clone(&seen),
            Arc::clone(&clock),
        );
        async move {
            let arrival = clock.now_ms();
            let fallback_seen = Arc::clone(&seen);
            let response = cmd
                .run_async(call)
                .fallback(move |error: &HystrixError<BackendError>| {
                    let mut seen = fallback_seen.lock();
                    match error.failure_type() {
                        FailureType::RejectedByLimit | FailureType::RejectedSemaphoreExecution => {
                            seen.rejections += 1;
                        }
                        FailureType::Timeout => seen.timeouts += 1,
                        _ => {}
                    }
                    Ok::<_, std::convert::Infallible>(SimOutcome::Fallback)
                })
                .execute_async()
                .await;
            let outcome = SimOutcome::from_response(response);
            if outcome == SimOutcome::Answered {
                let now = clock.now_ms();
                seen.lock().answers.push((arrival, now - arrival));
            }
            outcome
        }
    })?;
    let stats = backend.stats();
    let seen = seen.lock();
    let limits = limits.lock();
    let seconds = duration_ms as f64 / 1000.0;
    let answers: Vec<u64> = seen.answers.iter().map(|&(_, latency)| latency).collect();
    let (p50, p99) = percentiles(&answers);
    let mut report = report
        .with_name(format!("{}-{}", scenario.name(), limiting.name()))
        .with_backend(stats)
        .with_measure(GOODPUT, answers.len() as f64 / seconds)
        .with_measure(P50, p50)
        .with_measure(P99_MS, p99)
        .with_measure(REJECTIONS, seen.rejections as f64)
        .with_measure(TIMEOUTS, seen.timeouts as f64)
        .with_measure(OVERLOADS, stats.overloaded as f64)
        .with_measure(LIMIT_MEAN, mean(limits.iter().map(|&(_, l)| l)))
        .with_measure(
            LIMIT_FINAL,
            limits.last().map_or(0.0, |&(_, limit)| f64::from(limit)),
        );
    if let Some(snapshot) = cmd.metrics().adaptive_limit() {
        report = report.with_measure(
            LEFT_IN_FLIGHT,
            f64::from(snapshot.in_flight) + f64::from(snapshot.queued),
        );
    }
    for (i, phase) in scenario.phases().iter().enumerate() {
        let inside = |at: u64| phase.from_ms <= at && at < phase.until_ms;
        let answers: Vec<u64> = seen
            .answers
            .iter()
            .filter(|(arrival, _)| inside(*arrival))
            .map(|&(_, latency)| latency)
            .collect();
        let settle = phase.from_ms + SETTLE_MS;
        let at_settle = limits
            .iter()
            .find(|(at, _)| *at >= settle)
            .map_or(0.0, |&(_, limit)| f64::from(limit));
        let settled = mean(
            limits
                .iter()
                .filter(|(at, _)| settle <= *at && *at < phase.until_ms)
                .map(|&(_, limit)| limit),
        );
        let settled_answers: Vec<u64> = seen
            .answers
            .iter()
            .filter(|(arrival, _)| settle <= *arrival && *arrival < phase.until_ms)
            .map(|&(_, latency)| latency)
            .collect();
        let phase_seconds = (phase.until_ms - phase.from_ms) as f64 / 1000.0;
        report = report
            .with_measure(
                phase_measure(i + 1, GOODPUT),
                answers.len() as f64 / phase_seconds,
            )
            .with_measure(phase_measure(i + 1, P99_MS), percentiles(&answers).1)
            .with_measure(
                phase_measure(i + 1, P99_SETTLED),
                percentiles(&settled_answers).1,
            )
            .with_measure(phase_measure(i + 1, LIMIT_AT_SETTLE), at_settle)
            .with_measure(phase_measure(i + 1, LIMIT_MEAN_SETTLED), settled);
    }
    Ok(report)
}

/// The p50 and p99 of `latencies`, in whole ms (0 for none).
fn percentiles(latencies: &[u64]) -> (f64, f64) {
    // Auto-resizing, 3 significant figures, as the report's own histogram.
    let Ok(mut histogram) = Histogram::<u64>::new(3) else {
        return (0.0, 0.0);
    };
    for &latency in latencies {
        histogram.saturating_record(latency);
    }
    (
        histogram.value_at_quantile(0.5) as f64,
        histogram.value_at_quantile(0.99) as f64,
    )
}

fn mean(values: impl Iterator<Item = u32>) -> f64 {
    let (sum, n) = values.fold((0u64, 0u64), |(sum, n), v| (sum + u64::from(v), n + 1));
    if n == 0 { 0.0 } else { sum as f64 / n as f64 }
}

/// The best static limit of a scenario's runs, for the whole run or one phase.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct BestStatic {
    /// Its limit: the static limit with the highest goodput (the lowest such limit on a tie).
    pub limit: u32,
    /// Its goodput, in answers per second.
    pub goodput: f64,
    /// Its p99 of answers, in ms.
    pub p99_ms: f64,
    /// The lowest and highest static limits (of those considered) whose goodput is within 1 %
    /// of the best: where the goodput has a plateau (a phase below capacity), every limit on
    /// it is as good.
    pub near_best: (u32, u32),
}

/// Whether `report` meets the p99 goal (≤ 2× the unloaded latency) in `phase` (from 1), or in
/// every phase for `None`.
pub fn meets_p99(scenario: LimitScenario, report: &Report, phase: Option<usize>) -> bool {
    scenario
        .phases()
        .iter()
        .enumerate()
        .filter(|(i, _)| phase.is_none_or(|n| n == i + 1))
        .all(|(i, p)| {
            report
                .measure(&phase_measure(i + 1, P99_MS))
                .is_some_and(|p99| p99 <= 2.0 * p.unloaded_ms as f64)
        })
}

/// The best static limit among `reports` (runs of `scenario` with one seed) over the whole
/// run (`phase` `None`) or over phase `phase` (from 1), by goodput; with `meeting_p99`, only
/// among the static limits that meet the p99 goal there ([`meets_p99`]). `None` without such a
/// static run.
pub fn best_static(
    scenario: LimitScenario,
    reports: &[(Limiting, Report)],
    phase: Option<usize>,
    meeting_p99: bool,
) -> Option<BestStatic> {
    let (goodput, p99) = match phase {
        Some(n) => (phase_measure(n, GOODPUT), phase_measure(n, P99_MS)),
        None => (GOODPUT.to_string(), P99_MS.to_string()),
    };
    let statics: Vec<(u32, f64, f64)> = reports
        .iter()
        .filter(|(_, report)| !meeting_p99 || meets_p99(scenario, report, phase))
        .filter_map(|(limiting, report)| match limiting {
            Limiting::Static(limit) => Some((
                *limit,
                report.measure(&goodput).unwrap_or(0.0),
                report.measure(&p99).unwrap_or(f64::MAX),
            )),
            _ => None,
        })
        .collect();
    let best = statics
        .iter()
        .fold(None::<&(u32, f64, f64)>, |best, s| match best {
            Some(b) if b.1 > s.1 || (b.1 == s.1 && b.0 <= s.0) => Some(b),
            _ => Some(s),
        })?;
    let near = statics.iter().filter(|s| s.1 >= best.1 * 0.99).map(|s| s.0);
    let low = near.clone().min().unwrap_or(best.0);
    let high = near.max().unwrap_or(best.0);
    Some(BestStatic {
        limit: best.0,
        goodput: best.1,
        p99_ms: best.2,
        near_best: (low, high),
    })
}

/// One goal of one algorithm in one scenario, met or missed, with its numbers.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Goal {
    /// What it checks ("goodput ≥ 90 % of best static", "phase 2 p99 ≤ 200 ms", ...).
    pub what: String,
    /// The algorithm's value.
    pub value: f64,
    /// The bound it is held to (a lower bound for goodput, an upper one for p99; for the limit
    /// the best static value, with ±25 % around it).
    pub bound: f64,
    /// Whether it was met.
    pub met: bool,
}

/// The goals for the run `algorithm` of `scenario`, against the static runs in
/// `reports`:
///
/// 1. goodput ≥ 90 % of the best static limit's over the run, by goodput alone (the strictest
///    reading: that limit may have a p99 far beyond the goal);
/// 2. in each phase, p99 of the answers to its requests (all of them, the change's transient
///    included) ≤ 2× its unloaded latency;
/// 3. in each phase, the limit 5 s after the phase began within ±25 % of that phase's best
///    static limit among those meeting the p99 goal in it: `[0.75 · low, 1.25 · high]` of the
///    [`near_best`](BestStatic::near_best) range (one value in an overloaded phase; a plateau
///    below capacity, where any limit on it is as good).
pub fn goals(
    scenario: LimitScenario,
    reports: &[(Limiting, Report)],
    algorithm: &Report,
) -> Vec<Goal> {
    let mut goals = Vec::new();
    if let Some(best) = best_static(scenario, reports, None, false) {
        let value = algorithm.measure(GOODPUT).unwrap_or(0.0);
        goals.push(Goal {
            what: format!(
                "goodput ≥ 90 % of the best static (static-{}, {:.1}/s)",
                best.limit, best.goodput
            ),
            value,
            bound: 0.9 * best.goodput,
            met: value >= 0.9 * best.goodput,
        });
    }
    for (i, phase) in scenario.phases().iter().enumerate() {
        let n = i + 1;
        let p99 = algorithm
            .measure(&phase_measure(n, P99_MS))
            .unwrap_or(f64::MAX);
        let bound = 2.0 * phase.unloaded_ms as f64;
        goals.push(Goal {
            what: format!("phase {n} p99 ≤ 2 × {} ms", phase.unloaded_ms),
            value: p99,
            bound,
            met: p99 <= bound,
        });
        if let Some(best) = best_static(scenario, reports, Some(n), true) {
            let limit = algorithm
                .measure(&phase_measure(n, LIMIT_AT_SETTLE))
                .unwrap_or(0.0);
            let (low, high) = (
                0.75 * f64::from(best.near_best.0),
                1.25 * f64::from(best.near_best.1),
            );
            goals.push(Goal {
                what: if best.near_best.0 == best.near_best.1 {
                    format!(
                        "phase {n} limit at +5 s within ±25 % of its best static {} ({low:.1} to {high:.1})",
                        best.limit
                    )
                } else {
                    format!(
                        "phase {n} limit at +5 s within ±25 % of its best statics {} to {} ({low:.1} to {high:.1})",
                        best.near_best.0, best.near_best.1
                    )
                },
                value: limit,
                bound: f64::from(best.limit),
                met: (low..=high).contains(&limit),
            });
        }
    }
    goals
}

/// A sweep of one scenario and seed: each configuration's report.
#[derive(Debug, Clone)]
pub struct Study {
    /// The scenario.
    pub scenario: LimitScenario,
    /// The seed.
    pub seed: u64,
    /// Each configuration and its run, in the order of [`Limiting::sweep`].
    pub reports: Vec<(Limiting, Report)>,
}

/// Runs `limitings` of `scenario` with `seed` ([`Limiting::sweep`] for the whole sweep).
///
/// # Errors
/// What a run's [`Sim`] returns.
pub fn study(
    scenario: LimitScenario,
    limitings: &[Limiting],
    seed: u64,
) -> Result<Study, SimError> {
    let reports = limitings
        .iter()
        .map(|&limiting| run(scenario, limiting, seed).map(|report| (limiting, report)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Study {
        scenario,
        seed,
        reports,
    })
}

impl Study {
    /// The run of `limiting`, if it was part of the study.
    pub fn report(&self, limiting: Limiting) -> Option<&Report> {
        self.reports
            .iter()
            .find(|(l, _)| *l == limiting)
            .map(|(_, report)| report)
    }

    /// The goals of `algorithm`'s run (see [`goals`]); empty if it was not part of the study.
    pub fn goals(&self, algorithm: AdaptiveAlgorithm) -> Vec<Goal> {
        self.report(Limiting::Adaptive(algorithm))
            .map(|report| goals(self.scenario, &self.reports, report))
            .unwrap_or_default()
    }

    /// The study as Markdown: a table of the configurations (goodput, p50, p99, rejections,
    /// the limit's mean, final value and value 5 s after each phase began), the best static
    /// limits, and each algorithm's goals, met or missed.
    pub fn markdown(&self) -> String {
        let scenario = self.scenario;
        let phases = scenario.phases();
        let mut out = String::new();
        let _ = writeln!(out, "#### `{}` (seed {})\n", scenario.name(), self.seed);
        let mut header = String::from(
            "| configuration | goodput/s | p50 ms | p99 ms | rejections | timeouts | backend overloads | limit mean | limit final |",
        );
        let mut rule =
            String::from("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        for (i, phase) in phases.iter().enumerate() {
            let _ = write!(
                header,
                " phase {} ({}–{} s, C {}, {} ms): goodput/s, p99 ms, p99 from +5 s, limit at +5 s, limit mean from +5 s |",
                i + 1,
                phase.from_ms / 1000,
                phase.until_ms / 1000,
                phase.workers,
                phase.unloaded_ms
            );
            rule.push_str(" ---: |");
        }
        let _ = writeln!(out, "{header}\n{rule}");
        for (limiting, report) in &self.reports {
            let m = |name: &str| report.measure(name).unwrap_or(0.0);
            let limit = |value: f64| match limiting {
                Limiting::None => "-".to_string(),
                _ => format!("{value:.1}"),
            };
            let _ = write!(
                out,
                "| {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} |",
                limiting.name(),
                m(GOODPUT),
                m(P50),
                m(P99_MS),
                m(REJECTIONS),
                m(TIMEOUTS),
                m(OVERLOADS),
                limit(m(LIMIT_MEAN)),
                limit(m(LIMIT_FINAL)),
            );
            for i in 1..=phases.len() {
                let _ = write!(
                    out,
                    " {:.1}, {:.0}, {:.0}, {}, {} |",
                    m(&phase_measure(i, GOODPUT)),
                    m(&phase_measure(i, P99_MS)),
                    m(&phase_measure(i, P99_SETTLED)),
                    limit(m(&phase_measure(i, LIMIT_AT_SETTLE))),
                    limit(m(&phase_measure(i, LIMIT_MEAN_SETTLED))),
                );
            }
            out.push('\n');
        }
        out.push('\n');
        let describe = |best: Option<BestStatic>| {
            best.map_or_else(
                || "none".to_string(),
                |best| {
                    format!(
                        "static-{} ({:.1}/s, p99 {:.0} ms; within 1 % of its goodput: {} to {})",
                        best.limit, best.goodput, best.p99_ms, best.near_best.0, best.near_best.1
                    )
                },
            )
        };
        let _ = writeln!(
            out,
            "- Best static limit over the run by goodput alone: {}; among those meeting the p99 goal in every phase: {}.",
            describe(best_static(scenario, &self.reports, None, false)),
            describe(best_static(scenario, &self.reports, None, true)),
        );
        for i in 1..=phases.len() {
            let _ = writeln!(
                out,
                "- Phase {i}: best static by goodput alone: {}; among those meeting its p99 goal (≤ {} ms): {}.",
                describe(best_static(scenario, &self.reports, Some(i), false)),
                2 * phases[i - 1].unloaded_ms,
                describe(best_static(scenario, &self.reports, Some(i), true)),
            );
        }
        out.push('\n');
        for algorithm in ALGORITHMS {
            let goals = self.goals(algorithm);
            if goals.is_empty() {
                continue;
            }
            let met = goals.iter().filter(|goal| goal.met).count();
            let _ = writeln!(
                out,
                "- {} ({met} of {} goals met): {}",
                algorithm.name(),
                goals.len(),
                goals
                    .iter()
                    .map(|goal| format!(
                        "{} {}: {:.1}",
                        if goal.met { "met" } else { "MISSED" },
                        goal.what,
                        goal.value
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        out
    }
}

/// The scenario functions listed in [`SCENARIOS`](super::SCENARIOS): `<name>(seed)` runs one
/// configuration of one scenario.
macro_rules! limit_runs {
    ($($name:ident: $scenario:ident, $limiting:expr;)*) => {
        $(
            pub(super) fn $name(seed: u64) -> Result<Report, SimError> {
                run(LimitScenario::$scenario, $limiting, seed)
            }
        )*
    };
}

limit_runs! {
    overload_none: Overload, Limiting::None;
    overload_aimd: Overload, Limiting::Adaptive(AdaptiveAlgorithm::Aimd);
    overload_vegas: Overload, Limiting::Adaptive(AdaptiveAlgorithm::Vegas);
    overload_gradient2: Overload, Limiting::Adaptive(AdaptiveAlgorithm::Gradient2);
    drop_none: CapacityDrop, Limiting::None;
    drop_aimd: CapacityDrop, Limiting::Adaptive(AdaptiveAlgorithm::Aimd);
    drop_vegas: CapacityDrop, Limiting::Adaptive(AdaptiveAlgorithm::Vegas);
    drop_gradient2: CapacityDrop, Limiting::Adaptive(AdaptiveAlgorithm::Gradient2);
    slowdown_none: Slowdown, Limiting::None;
    slowdown_aimd: Slowdown, Limiting::Adaptive(AdaptiveAlgorithm::Aimd);
    slowdown_vegas: Slowdown, Limiting::Adaptive(AdaptiveAlgorithm::Vegas);
    slowdown_gradient2: Slowdown, Limiting::Adaptive(AdaptiveAlgorithm::Gradient2);
}
