//! The final report: per phase what the gateway answered and what its commands did, the
//! breakers' transitions, and the checks of the resilience promises (exit code 0 only if every
//! one held). Written as text and, with `--json`, as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::gateway::RECOMMENDATION_ATTEMPTS;
use crate::load::PhaseLoad;
use crate::scenario::{Backend, FIXED_PRICES_LIMIT, Phase, Schedule};
use crate::stats::{
    BackendCounts, BreakerRecord, Change, CommandCounts, Held, Trigger, percentile,
};

/// The most errors a command may have, in percent of its executions, in a phase where its
/// backend is healthy (and was in the phase before). Generous, so a loaded machine does not
/// fail the demo; a breaker left open or a bulkhead shared with a failing backend would.
pub const HEALTHY_ERROR_LIMIT: f64 = 20.0;

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// What it shows.
    pub description: String,
    /// The run's length, in ms.
    pub duration_ms: u64,
    /// Requests per second sent to the gateway.
    pub rps: f64,
    /// Where the dashboard was served.
    pub dashboard_url: String,
    /// Where the gateway was served.
    pub gateway_url: String,
    /// Where the unprotected twin was served (absent with `--no-compare`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub twin_url: Option<String>,
    /// The seed of the backends' fault scripts and of the movies asked for (`--seed`).
    pub seed: u64,
    /// One entry per phase, in order.
    pub phases: Vec<PhaseReport>,
    /// Every breaker transition, in order.
    pub breaker_events: Vec<BreakerRecord>,
    /// Each command's breaker state at the end.
    pub final_breakers: BTreeMap<String, &'static str>,
    /// The resilience promises checked (of the protected gateway only).
    pub checks: Vec<Check>,
    /// Whether every check held.
    pub passed: bool,
    /// One line per phase comparing the protected gateway with the unprotected twin (empty
    /// with `--no-compare`).
    pub contrast: Vec<String>,
    /// The gateway instances, their numbers and the fleet checks (absent with one instance;
    /// the fields above are then the fleet's totals, and instance 1's breakers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetReport>,
}

/// Several gateway instances (`--instances N`): where each was served, what each did per phase,
/// and the fleet totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetReport {
    /// How many gateway instances ran.
    pub instances: u32,
    /// Where their breakers shared state: `in-memory`, or the Redis URL.
    pub store: String,
    /// How often each instance synced with the store, in ms.
    pub sync_interval_ms: u64,
    /// The sync bound checked: a trip on one instance opens the others' breakers within it, in
    /// ms.
    pub sync_bound_ms: u64,
    /// The fleet's merged stream (Turbine) and what a client of it saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turbine: Option<TurbineReport>,
    /// Each instance, in order (instance 1 first).
    pub members: Vec<Member>,
    /// Per phase, in order: each instance's numbers and the fleet's.
    pub phases: Vec<FleetPhase>,
    /// Per phase with a backend down: instance 1's trip and how the others followed (the
    /// numbers of the fleet checks).
    pub trips: Vec<crate::fleet::Trip>,
    /// The fleet checks (also in the report's `checks`).
    pub checks: Vec<Check>,
}

/// The fleet's merged stream, `/turbine.stream?cluster=demo` on instance 1's dashboard port:
/// what the demo's own client of it read during the run, and the instances it merged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurbineReport {
    /// Its URL.
    pub url: String,
    /// `data:` messages the demo's client read from it.
    pub messages: u64,
    /// Each command's `reportingHosts` in the latest merged message read: the instances
    /// merged into it.
    pub reporting_hosts: BTreeMap<String, u64>,
    /// Each instance's stream as the turbine saw it at the end of the run.
    pub instances: Vec<TurbineInstance>,
}

/// One instance's stream as the turbine saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TurbineInstance {
    /// The stream's URL.
    pub url: String,
    /// Whether its stream was open.
    pub connected: bool,
    /// Whether its last message was recent enough to be merged.
    pub reporting: bool,
    /// Messages read from it.
    pub messages: u64,
}

/// One gateway instance of the fleet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Member {
    /// Its number, from 1.
    pub instance: u32,
    /// Where its gateway was served.
    pub gateway_url: String,
    /// Where its own Hystrix stream was served.
    pub stream_url: String,
    /// Requests the load sent it over the run.
    pub requests: u64,
    /// Of those, answered `200`.
    pub answered: u64,
    /// Its breakers' transitions, in order.
    pub breaker_events: Vec<BreakerRecord>,
    /// Its breakers' states at the end.
    pub final_breakers: BTreeMap<String, &'static str>,
}

/// One phase of the fleet: each instance's numbers, and their totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetPhase {
    /// The phase's name.
    pub name: String,
    /// Per instance, in order.
    pub instances: Vec<InstancePhase>,
    /// The sums over the instances.
    pub fleet: FleetCounts,
}

/// What one instance did in one phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstancePhase {
    /// Its number, from 1.
    pub instance: u32,
    /// Its requests, errors and short-circuits over every command.
    #[serde(flatten)]
    pub counts: FleetCounts,
    /// Per command key.
    pub commands: BTreeMap<String, InstanceCommand>,
}

/// Requests, errors and short-circuits (of one instance or of the fleet, in one phase).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FleetCounts {
    /// Gateway requests the load sent.
    pub requests: u64,
    /// Of those, answered `200`.
    pub answered: u64,
    /// Command executions that failed, timed out or were rejected (short-circuits apart).
    pub errors: u64,
    /// Command executions refused by an open breaker.
    pub short_circuits: u64,
}

impl FleetCounts {
    fn add(self, other: FleetCounts) -> FleetCounts {
        FleetCounts {
            requests: self.requests + other.requests,
            answered: self.answered + other.answered,
            errors: self.errors + other.errors,
            short_circuits: self.short_circuits + other.short_circuits,
        }
    }
}

/// One command on one instance in one phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct InstanceCommand {
    /// Executions (successes, failures, timeouts, short-circuits, rejections).
    pub executions: u64,
    /// Failures, timeouts and rejections.
    pub errors: u64,
    /// FAILURE.
    pub failures: u64,
    /// TIMEOUT.
    pub timeouts: u64,
    /// SHORT_CIRCUITED.
    pub short_circuits: u64,
}

impl InstanceCommand {
    /// The numbers of `counts`.
    pub fn of(counts: &CommandCounts) -> InstanceCommand {
        InstanceCommand {
            executions: counts.executions(),
            errors: counts.failures + counts.timeouts + counts.rejections,
            failures: counts.failures,
            timeouts: counts.timeouts,
            short_circuits: counts.short_circuits,
        }
    }
}

impl InstancePhase {
    /// Instance `instance`'s phase from the load it was sent and its commands' counts.
    pub fn new(
        instance: u32,
        load: &crate::load::InstanceLoad,
        counts: &BTreeMap<Backend, CommandCounts>,
    ) -> InstancePhase {
        let commands: BTreeMap<String, InstanceCommand> = counts
            .iter()
            .map(|(backend, counts)| {
                (
                    backend.command_key().to_owned(),
                    InstanceCommand::of(counts),
                )
            })
            .collect();
        InstancePhase {
            instance,
            counts: FleetCounts {
                requests: load.sent,
                answered: load.answered,
                errors: commands.values().map(|c| c.errors).sum(),
                short_circuits: commands.values().map(|c| c.short_circuits).sum(),
            },
            commands,
        }
    }

    /// The commands worth noting: with errors or short-circuits, as `Key e err/s sc`.
    fn notable(&self) -> Vec<String> {
        self.commands
            .iter()
            .filter(|(_, c)| c.errors > 0 || c.short_circuits > 0)
            .map(|(key, c)| format!("{key} {}e/{}sc", c.errors, c.short_circuits))
            .collect()
    }
}

impl FleetPhase {
    /// The phase `name` from each instance's numbers, and their sums.
    pub fn new(name: String, instances: Vec<InstancePhase>) -> FleetPhase {
        let fleet = instances
            .iter()
            .fold(FleetCounts::default(), |sum, i| sum.add(i.counts));
        FleetPhase {
            name,
            instances,
            fleet,
        }
    }
}

impl FleetReport {
    /// The fleet section of the text report.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "
fleet: {} gateway instances, breaker state shared through {} (sync every {} ms; \
             a trip reaches the others within {} ms)",
            self.instances, self.store, self.sync_interval_ms, self.sync_bound_ms
        );
        if let Some(turbine) = &self.turbine {
            let hosts: Vec<String> = turbine
                .reporting_hosts
                .iter()
                .map(|(command, hosts)| format!("{command} {hosts}"))
                .collect();
            let _ = writeln!(
                out,
                "  turbine     {}  {} messages read; hosts per command: {}",
                turbine.url,
                turbine.messages,
                hosts.join(", ")
            );
        }
        for member in &self.members {
            let _ = writeln!(
                out,
                "  instance {}  {}  stream {}  {} requests, {} answered",
                member.instance,
                member.gateway_url,
                member.stream_url,
                member.requests,
                member.answered
            );
        }
        let _ = writeln!(
            out,
            "  per phase: requests and, per instance, the commands with errors (e) or \
             short-circuits (sc)"
        );
        for phase in &self.phases {
            let _ = writeln!(
                out,
                "  {:<18} fleet {} requests, {} errors, {} short-circuits",
                phase.name, phase.fleet.requests, phase.fleet.errors, phase.fleet.short_circuits
            );
            for instance in &phase.instances {
                let notable = instance.notable();
                let _ = writeln!(
                    out,
                    "  {:<18}   #{} {:>5} req, {:>4} e, {:>4} sc{}",
                    "",
                    instance.instance,
                    instance.counts.requests,
                    instance.counts.errors,
                    instance.counts.short_circuits,
                    if notable.is_empty() {
                        String::new()
                    } else {
                        format!("  {}", notable.join(", "))
                    }
                );
            }
        }
        for member in self.members.iter().skip(1) {
            let states: Vec<String> = member
                .final_breakers
                .iter()
                .map(|(command, state)| format!("{command} {state}"))
                .collect();
            let _ = writeln!(
                out,
                "  instance {} breakers at the end: {}",
                member.instance,
                states.join(", ")
            );
        }
        let _ = writeln!(out, "  fleet checks:");
        for check in &self.checks {
            let verdict = if check.passed { "PASS" } else { "FAIL" };
            let _ = writeln!(out, "    {verdict}  {}: {}", check.name, check.detail);
        }
        out
    }
}

/// Gateway latencies of the answered requests of a phase, in ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    /// The median.
    pub p50: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The slowest.
    pub max: f64,
}

impl LatencySummary {
    /// The summary of `latencies` (any order).
    pub fn of(latencies: &[Duration]) -> LatencySummary {
        let mut sorted = latencies.to_vec();
        sorted.sort_unstable();
        let ms = |d: Duration| (d.as_secs_f64() * 10_000.0).round() / 10.0;
        LatencySummary {
            p50: ms(percentile(&sorted, 50.0)),
            p99: ms(percentile(&sorted, 99.0)),
            max: ms(sorted.last().copied().unwrap_or_default()),
        }
    }
}

/// A command's counts in a phase, with the chaos injected into it and its error percentage.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CommandReport {
    /// The counts.
    #[serde(flatten)]
    pub counts: CommandCounts,
    /// CHAOS_INJECTED: its attempts that chaos injected a fault, a delay or a hang into,
    /// counted when injected.
    pub chaos_injected: u64,
    /// Errors in percent of executions.
    pub error_percent: f64,
}

/// One phase of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseReport {
    /// Its name.
    pub name: String,
    /// What it shows.
    pub description: String,
    /// When it started, in ms from the start of the run.
    pub start_ms: u64,
    /// How long it lasted, in ms.
    pub duration_ms: u64,
    /// Each faulty backend's fault, described.
    pub faults: BTreeMap<Backend, String>,
    /// The chaos injected into backends' commands (the backends healthy), described.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub chaos: BTreeMap<Backend, String>,
    /// Gateway requests sent in it.
    pub requests: u64,
    /// Of those, answered `200`.
    pub answered: u64,
    /// Of those, with a part from a fallback.
    pub degraded: u64,
    /// Not answered within the client's timeout, or not `200`.
    pub unanswered: u64,
    /// Gateway latency of the answered ones.
    pub latency_ms: LatencySummary,
    /// Command executions that succeeded, over all commands.
    pub successes: u64,
    /// Answers given by fallbacks, over all commands.
    pub fallbacks: u64,
    /// Executions refused by an open breaker.
    pub short_circuits: u64,
    /// Executions refused by a full bulkhead (thread pool or semaphore).
    pub rejections: u64,
    /// Executions cut off at their timeout.
    pub timeouts: u64,
    /// Executions that failed (an error from the backend, no connection, or an injected fault).
    pub failures: u64,
    /// Attempts chaos was injected into, over all commands.
    pub chaos_injected: u64,
    /// Per command key.
    pub commands: BTreeMap<String, CommandReport>,
    /// Calls that reached each backend (short-circuited and rejected ones never do, nor those
    /// whose run chaos replaced).
    pub backend_calls: BTreeMap<Backend, u64>,
    /// Of those, the ones each backend answered with an error of its own (500, 503) or let
    /// hang.
    pub backend_errors: BTreeMap<Backend, u64>,
    /// The first errors of unanswered requests.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unanswered_errors: Vec<String>,
    /// The most the gateway held at once during the phase (sampled every 100 ms).
    pub held: Held,
    /// The unprotected twin's answers to the same load (absent with `--no-compare`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unprotected: Option<TwinPhase>,
    /// What hedging and the two prices limits did (retries are in `commands`).
    pub policies: Policies,
}

/// The unprotected twin's answers to the requests sent in one phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TwinPhase {
    /// Requests sent in it.
    pub requests: u64,
    /// Of those, answered `200` (every part there: the twin has no fallbacks).
    pub answered: u64,
    /// Answered `502` (a backend call failed), or not within the client's timeout.
    pub unanswered: u64,
    /// Latency of the answered ones.
    pub latency_ms: LatencySummary,
    /// The most it held at once during the phase (sampled every 100 ms).
    pub held: Held,
    /// The first errors of unanswered requests.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unanswered_errors: Vec<String>,
}

impl TwinPhase {
    /// The twin's phase from its load's counts and the most it held.
    pub fn new(load: &PhaseLoad, held: Held) -> TwinPhase {
        TwinPhase {
            requests: load.sent,
            answered: load.answered,
            unanswered: load.unanswered,
            latency_ms: LatencySummary::of(&load.latencies),
            held,
            unanswered_errors: load.errors.clone(),
        }
    }
}

/// What the gateway measured of its policies beyond Hystrix over one phase, for
/// [`Policies::of`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyInput {
    /// Hedges of `GetAvailability` that answered first.
    pub hedges_won: u64,
    /// How long each availability part took, as the pages waited for it.
    pub availability_times: Vec<Duration>,
    /// Run times of the `GetPrices` calls the backend answered.
    pub prices_times: Vec<Duration>,
    /// Run times of the `GetPricesFixed` calls the backend answered.
    pub prices_fixed_times: Vec<Duration>,
    /// `GetPrices`'s adaptive limit, sampled every 100 ms, in order.
    pub limits: Vec<u32>,
}

/// Latencies of some calls: how many and their summary, in ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Timed {
    /// How many.
    pub count: u64,
    /// Their p50, p99 and slowest, in ms.
    #[serde(flatten)]
    pub ms: LatencySummary,
}

impl Timed {
    fn of(times: &[Duration]) -> Timed {
        Timed {
            count: times.len() as u64,
            ms: LatencySummary::of(times),
        }
    }
}

/// A latency in ms, in ms below a second (`251 ms`) and in seconds above (`4.8 s`).
fn latency_text(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.1} s", ms / 1000.0)
    }
}

/// The p99 of `answered` answers' `latency` as [`latency_text`], or `none` when none was
/// answered.
fn p99_text(answered: u64, latency: &LatencySummary, none: &str) -> String {
    if answered == 0 {
        none.to_owned()
    } else {
        latency_text(latency.p99)
    }
}

/// `part` in percent of `whole`, one decimal (0 when `whole` is 0).
fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        (part as f64 * 1000.0 / whole as f64).round() / 10.0
    }
}

/// `GetPrices`'s adaptive limit over a phase (executions admitted at once), sampled every
/// 100 ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LimitSeen {
    /// Samples taken.
    pub samples: u64,
    /// The first sample.
    pub first: u32,
    /// The lowest.
    pub min: u32,
    /// The highest.
    pub max: u32,
    /// The last sample.
    pub last: u32,
    /// The median of the samples of the phase's second half: where it settled.
    pub settled: u32,
    /// One sample a second (every tenth), to show the limit over time.
    pub per_second: Vec<u32>,
}

impl LimitSeen {
    fn of(limits: &[u32]) -> LimitSeen {
        let Some((&first, &last)) = limits.first().zip(limits.last()) else {
            return LimitSeen::default();
        };
        let mut second_half = limits[limits.len() / 2..].to_vec();
        second_half.sort_unstable();
        LimitSeen {
            samples: limits.len() as u64,
            first,
            min: limits.iter().copied().min().unwrap_or(first),
            max: limits.iter().copied().max().unwrap_or(first),
            last,
            settled: second_half[second_half.len() / 2],
            per_second: limits.iter().step_by(10).copied().collect(),
        }
    }
}

/// What the policies beyond Hystrix did in a phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Policies {
    /// Hedges of `GetAvailability` that answered first.
    pub hedges_won: u64,
    /// The availability parts, as long as the pages waited for them (hedges and fallbacks
    /// included).
    pub availability: Timed,
    /// The phase's long-tail delay of availability, in ms, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tail_delay_ms: Option<u64>,
    /// Of the availability parts, those that took the tail's delay or longer.
    pub availability_slow: u64,
    /// The `GetPrices` calls the backend answered (admitted by the adaptive limit and not
    /// cut off at the timeout), by their run time.
    pub prices: Timed,
    /// The `GetPricesFixed` calls the backend answered, by their run time.
    pub prices_fixed: Timed,
    /// `GetPrices`'s adaptive limit.
    pub limit: LimitSeen,
}

impl Policies {
    /// The policies' report over `phase` from what the gateway measured.
    pub fn of(phase: &Phase, input: &PolicyInput) -> Policies {
        let tail_delay_ms = phase
            .fault(Backend::Availability)
            .tail
            .filter(|tail| tail.rate > 0.0)
            .map(|tail| tail.delay_ms);
        let availability_slow = tail_delay_ms.map_or(0, |delay| {
            let delay = Duration::from_millis(delay);
            input
                .availability_times
                .iter()
                .filter(|&&took| took >= delay)
                .count() as u64
        });
        Policies {
            hedges_won: input.hedges_won,
            availability: Timed::of(&input.availability_times),
            tail_delay_ms,
            availability_slow,
            prices: Timed::of(&input.prices_times),
            prices_fixed: Timed::of(&input.prices_fixed_times),
            limit: LimitSeen::of(&input.limits),
        }
    }
}

impl PhaseReport {
    /// The report of `phase` from its load, its commands' counts, and what reached each
    /// backend and was injected into its command (the differences over it).
    pub fn new(
        phase: &Phase,
        load: &PhaseLoad,
        counts: &BTreeMap<Backend, CommandCounts>,
        backends: &BTreeMap<Backend, BackendCounts>,
    ) -> PhaseReport {
        let injected = |backend| backends.get(&backend).map_or(0, |b| b.chaos_injected);
        let sum = |field: fn(&CommandCounts) -> u64| counts.values().map(field).sum();
        PhaseReport {
            name: phase.name.clone(),
            description: phase.description.clone(),
            start_ms: millis(phase.start),
            duration_ms: millis(phase.duration),
            faults: phase
                .faults
                .iter()
                .filter(|(_, fault)| !fault.is_healthy())
                .map(|(backend, fault)| (*backend, fault.describe()))
                .collect(),
            chaos: phase
                .chaotic()
                .map(|backend| (backend, phase.chaos(backend).describe()))
                .collect(),
            requests: load.sent,
            answered: load.answered,
            degraded: load.degraded,
            unanswered: load.unanswered,
            latency_ms: LatencySummary::of(&load.latencies),
            successes: sum(|c| c.successes),
            fallbacks: sum(|c| c.fallbacks),
            short_circuits: sum(|c| c.short_circuits),
            rejections: sum(|c| c.rejections),
            timeouts: sum(|c| c.timeouts),
            failures: sum(|c| c.failures),
            chaos_injected: backends.values().map(|b| b.chaos_injected).sum(),
            commands: counts
                .iter()
                .map(|(backend, counts)| {
                    let report = CommandReport {
                        counts: *counts,
                        chaos_injected: injected(*backend),
                        error_percent: counts.error_percent(),
                    };
                    (backend.command_key().to_owned(), report)
                })
                .collect(),
            backend_calls: backends.iter().map(|(b, c)| (*b, c.calls)).collect(),
            backend_errors: backends.iter().map(|(b, c)| (*b, c.errors)).collect(),
            unanswered_errors: load.errors.clone(),
            held: Held::default(),
            unprotected: None,
            policies: Policies::default(),
        }
    }

    /// The same report with the most the gateway held and the twin's phase.
    pub fn held(self, held: Held, unprotected: Option<TwinPhase>) -> PhaseReport {
        PhaseReport {
            held,
            unprotected,
            ..self
        }
    }

    /// The line comparing the protected gateway with the twin in this phase, e.g.
    /// `latency-spike: answered 150 of 150 (129 degraded) vs 97 of 150; p99 251 ms vs 4.8 s;
    /// held at most 9 vs 412 connections, 8 vs 230 threads`; `None` without a twin.
    pub fn contrast(&self) -> Option<String> {
        let twin = self.unprotected.as_ref()?;
        let p99 = |answered, latency| p99_text(answered, latency, "none answered");
        Some(format!(
            "{}: answered {} of {} ({} degraded) vs {} of {}; p99 {} vs {}; \
             held at most {} vs {} connections, {} vs {} threads, {} vs {} requests",
            self.name,
            self.answered,
            self.requests,
            self.degraded,
            twin.answered,
            twin.requests,
            p99(self.answered, &self.latency_ms),
            p99(twin.answered, &twin.latency_ms),
            self.held.connections,
            twin.held.connections,
            self.held.threads,
            twin.held.threads,
            self.held.requests,
            twin.held.requests,
        ))
    }

    fn error_percent(&self, backend: Backend) -> f64 {
        self.commands
            .get(backend.command_key())
            .map_or(0.0, |command| command.error_percent)
    }

    /// The report of `backend`'s command, if it has one.
    fn command(&self, backend: Backend) -> Option<&CommandReport> {
        self.commands.get(backend.command_key())
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// One promise and whether it held.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// What was promised.
    pub name: String,
    /// Whether it held.
    pub passed: bool,
    /// What was seen.
    pub detail: String,
}

impl Check {
    fn new(name: String, passed: bool, detail: String) -> Check {
        Check {
            name,
            passed,
            detail,
        }
    }
}

fn seconds(ms: u64) -> String {
    format!("{:.2} s", ms as f64 / 1000.0)
}

/// The checks of a run:
/// - every gateway request was answered `200`;
/// - for each phase where a backend is down (an outage or a Retry-After storm): its command's
///   breaker opened during the phase (for Retry-After, at once: by trip-now), and closed at
///   some time after the phase ended;
/// - for each phase that injects chaos into a command: the checks of [`chaos_checks`];
/// - when a phase injects chaos: none was injected into a command in a phase that sets none
///   for it;
/// - in each phase, the commands of backends healthy and free of chaos in it and in the phase
///   before kept their errors at or under [`HEALTHY_ERROR_LIMIT`] (those disturbed in the
///   phase before are named as recovering, not judged);
/// - when the last phase has no fault and no chaos, every breaker was closed at the end.
///
/// An operator's actions are accounted for, not failed: a command whose breaker the operator
/// acted on during a phase (or held open or closed into it) is not judged by that phase's
/// healthy-errors check, its breaker checks of the phase, nor the chaos-injected check; a
/// breaker the operator holds at the end, or acted on during the last phase, is not held
/// against "every breaker closed at the end". Each check line says what it did not judge.
pub fn checks(
    schedule: &Schedule,
    phases: &[PhaseReport],
    events: &[BreakerRecord],
    final_breakers: &BTreeMap<String, &'static str>,
) -> Vec<Check> {
    let mut checks = Vec::new();

    let total = |field: fn(&PhaseReport) -> u64| phases.iter().map(field).sum::<u64>();
    let (requests, answered) = (total(|p| p.requests), total(|p| p.answered));
    let mut detail = format!(
        "{answered} of {requests} answered ({} with parts from fallbacks)",
        total(|p| p.degraded)
    );
    if let Some(error) = phases.iter().flat_map(|p| &p.unanswered_errors).next() {
        detail.push_str(&format!("; unanswered, e.g.: {error}"));
    }
    checks.push(Check::new(
        "every gateway request answered".to_owned(),
        requests > 0 && answered == requests,
        detail,
    ));

    for (phase, report) in schedule.phases.iter().zip(phases) {
        for (backend, fault) in phase.faults.iter().filter(|(_, f)| f.is_down()) {
            let trip_now = fault.retry_after_s.is_some();
            let checked = breaker_checks(phase, *backend, trip_now, Closing::AfterEnd, events);
            checks.extend(checked);
        }
        for backend in phase.chaotic() {
            checks.extend(chaos_checks(phase, report, backend, events));
        }
    }
    if schedule.phases.iter().any(|p| p.chaotic().next().is_some()) {
        checks.push(chaos_only_where_set(schedule, phases));
    }

    for (index, (phase, report)) in schedule.phases.iter().zip(phases).enumerate() {
        let healthy = schedule.settled_healthy(index);
        if healthy.is_empty() {
            continue;
        }
        let (start, end) = (millis(phase.start), millis(phase.end()));
        let mut judged = Vec::new();
        let mut excused = Vec::new();
        for backend in healthy {
            let command = backend.command_key();
            let errors = format!("{command} {:.1}%", report.error_percent(backend));
            match operator_actions(events, command, start, end) {
                Some(actions) => excused.push(format!("{errors} ({actions})")),
                None => judged.push((errors, report.error_percent(backend))),
            }
        }
        let mut detail = judged
            .iter()
            .map(|(errors, _)| errors.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        if !excused.is_empty() {
            if !detail.is_empty() {
                detail.push_str("; ");
            }
            detail.push_str(&format!(
                "not judged, forced by the operator: {}",
                excused.join(", ")
            ));
        }
        // The backends disturbed in the phase before and not in this one: their breakers may
        // still be closing, so they are named, not judged.
        if let Some(before) = index.checked_sub(1).map(|i| &schedule.phases[i]) {
            let disturbed_now = phase.disturbed();
            let recovering: Vec<String> = before
                .disturbed()
                .into_iter()
                .filter(|backend| !disturbed_now.contains(backend))
                .map(|backend| {
                    let command = backend.command_key();
                    format!("{command} {:.1}%", report.error_percent(backend))
                })
                .collect();
            if !recovering.is_empty() {
                if !detail.is_empty() {
                    detail.push_str("; ");
                }
                detail.push_str(&format!(
                    "not judged, recovering from `{}`: {}",
                    before.name,
                    recovering.join(", ")
                ));
            }
        }
        checks.push(Check::new(
            format!(
                "healthy commands kept errors at or under {HEALTHY_ERROR_LIMIT:.0}% during `{}`",
                phase.name
            ),
            judged
                .iter()
                .all(|(_, errors)| *errors <= HEALTHY_ERROR_LIMIT),
            detail,
        ));
    }

    if let Some(last) = schedule
        .phases
        .last()
        .filter(|last| last.disturbed().is_empty())
    {
        checks.push(closed_at_end(millis(last.start), events, final_breakers));
    }
    checks
}

/// Every breaker closed at the end, but for those the operator holds (FORCED_OPEN,
/// FORCED_CLOSED) or acted on since `last_start` (the last phase's start, in ms), which are
/// named as excused.
fn closed_at_end(
    last_start: u64,
    events: &[BreakerRecord],
    final_breakers: &BTreeMap<String, &'static str>,
) -> Check {
    let mut detail = final_breakers
        .iter()
        .map(|(command, state)| format!("{command} {state}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut excused = Vec::new();
    let mut passed = !final_breakers.is_empty();
    for (command, state) in final_breakers {
        match *state {
            "CLOSED" => {}
            "FORCED_OPEN" => excused.push(format!("{command} held open by the operator")),
            "FORCED_CLOSED" => excused.push(format!("{command} held closed by the operator")),
            _ => match operator_actions(events, command, last_start, u64::MAX) {
                Some(actions) => excused.push(format!("{command} {state} after {actions}")),
                None => passed = false,
            },
        }
    }
    if !excused.is_empty() {
        detail.push_str(&format!("; excused: {}", excused.join(", ")));
    }
    Check::new("every breaker closed at the end".to_owned(), passed, detail)
}

/// What the operator did to `command`'s breaker that bears on `start..=end` (ms from the start
/// of the run), with times, e.g. `the operator's circuitBreaker.forceOpen=true at 12.30 s`: a
/// hold (`circuitBreaker.forceOpen` / `forceClosed`) made before `start` and still in force
/// then, and every action made within; `None` when nothing.
fn operator_actions(
    events: &[BreakerRecord],
    command: &str,
    start: u64,
    end: u64,
) -> Option<String> {
    let own = || {
        events
            .iter()
            .filter(move |r| r.command == command && r.operator_action().is_some())
    };
    let sticky = [Change::HeldOpen, Change::HeldClosed, Change::Released];
    let held_before = own()
        .rfind(|r| r.at_ms < start && sticky.contains(&r.change))
        .filter(|r| r.change != Change::Released);
    let actions: Vec<String> = held_before
        .into_iter()
        .chain(own().filter(|r| (start..=end).contains(&r.at_ms)))
        .filter_map(|r| {
            let action = r.operator_action()?;
            Some(format!("{action} at {}", seconds(r.at_ms)))
        })
        .collect();
    (!actions.is_empty()).then(|| format!("the operator's {}", actions.join(", ")))
}

/// `check` as it stands, or, when it failed and the operator acted on `command` within
/// `start..=end` (ms), passed and marked not judged, with what the operator did.
fn unless_operator(
    mut check: Check,
    events: &[BreakerRecord],
    command: &str,
    start: u64,
    end: u64,
) -> Check {
    if !check.passed {
        if let Some(actions) = operator_actions(events, command, start, end) {
            check.passed = true;
            check.detail = format!("{}; not judged: {actions}", check.detail);
        }
    }
    check
}

/// The share of its executions a retrying command must answer from its backend, at least,
/// where the backend fails `rate` of the calls at random: `1 - rate²`, what two attempts give
/// (three give `1 - rate³`: at 30%, 0.973 against the 0.91 asked), the third attempt's worth
/// being the margin for retries the budget refuses, attempts cut off by their share of the
/// timeout on a slow machine, and chance.
pub fn retry_success_floor(rate: f64) -> f64 {
    1.0 - rate * rate
}

/// The checks of the policies beyond Hystrix, for each phase that exercises one:
/// - a phase where a retrying command's backend fails a share of its calls (not down): the
///   command retried (at least half as many retries as the backend's errors), its executions
///   succeeded at least [`retry_success_floor`] of the time, and its breaker stayed closed;
/// - a phase where the availability backend has a long tail: `GetAvailability` sent hedges and
///   at least a quarter of the tail's share of its calls were won by a hedge, and at most half
///   the tail's share of the answers took the tail's delay or longer;
/// - a phase where the prices backends' capacity drops: `GetPrices`'s adaptive limit settled
///   at half the fixed limit or less and rose again to at least twice that in the next phase;
///   it shed calls that its fallback answered, and every page was answered; of the calls
///   each side admitted, the adaptive side timed out at most half as often and answered at
///   least as many.
pub fn policy_checks(
    schedule: &Schedule,
    phases: &[PhaseReport],
    events: &[BreakerRecord],
) -> Vec<Check> {
    let mut checks = Vec::new();
    for (index, (phase, report)) in schedule.phases.iter().zip(phases).enumerate() {
        let fault = phase.fault(Backend::Recommendations);
        if fault.error_rate > 0.0 && !fault.is_down() {
            checks.extend(retry_checks(phase, report, fault.error_rate, events));
        }
        if let Some(tail) = phase
            .fault(Backend::Availability)
            .tail
            .filter(|tail| tail.rate > 0.0)
        {
            checks.extend(hedging_checks(phase, report, tail.rate));
        }
        if phase.fault(Backend::Prices).capacity.is_some() {
            checks.extend(limit_checks(phase, report, phases.get(index + 1)));
        }
    }
    checks
}

fn retry_checks(
    phase: &Phase,
    report: &PhaseReport,
    rate: f64,
    events: &[BreakerRecord],
) -> Vec<Check> {
    let backend = Backend::Recommendations;
    let command = backend.command_key();
    let counts = report
        .command(backend)
        .map(|c| c.counts)
        .unwrap_or_default();
    let calls = report.backend_calls.get(&backend).copied().unwrap_or(0);
    let errors = report.backend_errors.get(&backend).copied().unwrap_or(0);
    let executions = counts.successes + counts.fallbacks + counts.fallback_failures;
    let share = |part: u64, whole: u64| {
        if whole == 0 {
            0.0
        } else {
            part as f64 / whole as f64
        }
    };
    let success = share(counts.successes, executions);
    let floor = retry_success_floor(rate);
    let (start, end) = (millis(phase.start), millis(phase.end()));
    let opened = events.iter().find(|r| {
        r.command == command && r.change == Change::Opened && (start..end).contains(&r.at_ms)
    });
    vec![
        Check::new(
            format!(
                "{command} retried its backend's errors during `{}`",
                phase.name
            ),
            counts.retries > 0 && counts.retries * 2 >= errors,
            format!(
                "{} retries (up to {RECOMMENDATION_ATTEMPTS} attempts) for {errors} errors of \
                 {calls} backend calls; {} refused by the budget",
                counts.retries, counts.budget_exhausted
            ),
        ),
        Check::new(
            format!(
                "{command} succeeded at least {:.0}% of the time during `{}`",
                floor * 100.0,
                phase.name
            ),
            executions > 0 && success >= floor,
            format!(
                "{:.1}% of {executions} executions succeeded, the backend answered {:.1}% of its \
                 calls (a {:.0}% error fault)",
                success * 100.0,
                (1.0 - share(errors, calls)) * 100.0,
                rate * 100.0
            ),
        ),
        Check::new(
            format!("{command} breaker stayed closed during `{}`", phase.name),
            opened.is_none(),
            opened.map_or_else(
                || "no opening".to_owned(),
                |r| format!("{} at {}", r.describe(), seconds(r.at_ms)),
            ),
        ),
    ]
}

fn hedging_checks(phase: &Phase, report: &PhaseReport, rate: f64) -> Vec<Check> {
    let command = Backend::Availability.command_key();
    let counts = report
        .command(Backend::Availability)
        .map(|c| c.counts)
        .unwrap_or_default();
    let policies = &report.policies;
    let answers = policies.availability.count;
    let delay = policies.tail_delay_ms.unwrap_or_default();
    let least_won = rate * answers as f64 / 4.0;
    let most_slow = rate * answers as f64 / 2.0;
    vec![
        Check::new(
            format!("{command} hedges were sent and won during `{}`", phase.name),
            counts.hedges > 0 && policies.hedges_won as f64 >= least_won,
            format!(
                "{} hedges sent after {} ms, {} answered first (at least {least_won:.1} \
                 asked: a quarter of the tail's share of {answers} calls); {} refused by the \
                 budget",
                counts.hedges,
                crate::gateway::HEDGE_DELAY_MS,
                policies.hedges_won,
                counts.budget_exhausted
            ),
        ),
        Check::new(
            format!(
                "availability answers of {delay} ms or more cut to under half the tail's share \
                 during `{}`",
                phase.name
            ),
            answers > 0 && (policies.availability_slow as f64) <= most_slow,
            format!(
                "{} of {answers} took {delay} ms or more (at most {most_slow:.1}; the backend \
                 delays {:.0}%); p50 {:.1} ms, p99 {:.1} ms",
                policies.availability_slow,
                rate * 100.0,
                policies.availability.ms.p50,
                policies.availability.ms.p99
            ),
        ),
    ]
}

fn limit_checks(phase: &Phase, report: &PhaseReport, next: Option<&PhaseReport>) -> Vec<Check> {
    let adaptive = report
        .command(Backend::Prices)
        .map(|c| c.counts)
        .unwrap_or_default();
    let fixed = report
        .command(Backend::PricesFixed)
        .map(|c| c.counts)
        .unwrap_or_default();
    let policies = &report.policies;
    let limit = &policies.limit;
    let half = FIXED_PRICES_LIMIT / 2;
    let recovered_to = next.map_or(0, |next| next.policies.limit.max);
    let next_name = next.map_or("", |next| next.name.as_str());
    // Of the calls admitted: answered, failed or cut off at the timeout.
    let admitted = |c: &CommandCounts| c.successes + c.failures + c.timeouts;
    let timeout_share = |c: &CommandCounts| {
        if admitted(c) == 0 {
            0.0
        } else {
            c.timeouts as f64 / admitted(c) as f64
        }
    };
    vec![
        Check::new(
            format!(
                "GetPrices adaptive limit settled at {half} or less (fixed: {FIXED_PRICES_LIMIT}) \
                 during `{}`",
                phase.name
            ),
            limit.samples > 0 && limit.settled <= half,
            format!(
                "settled at {} (second half's median), from {} down to {}, per second: {}",
                limit.settled,
                limit.first,
                limit.min,
                join(&limit.per_second)
            ),
        ),
        Check::new(
            format!("GetPrices adaptive limit rose again during `{next_name}`"),
            limit.samples > 0 && recovered_to >= (2 * limit.settled).max(limit.settled + 2),
            format!(
                "up to {recovered_to} (at least {} asked: twice where it settled, 2 more at \
                 least), per second: {}",
                (2 * limit.settled).max(limit.settled + 2),
                next.map_or_else(String::new, |next| join(&next.policies.limit.per_second))
            ),
        ),
        Check::new(
            format!(
                "GetPrices shed calls to its fallback and every page was answered during `{}`",
                phase.name
            ),
            adaptive.limit_rejections > 0
                && adaptive.fallbacks > 0
                && report.requests > 0
                && report.answered == report.requests,
            format!(
                "{} refused by the limit, {} fallbacks; {} of {} pages answered",
                adaptive.limit_rejections, adaptive.fallbacks, report.answered, report.requests
            ),
        ),
        Check::new(
            format!(
                "GetPrices' admitted calls timed out at most half as often as GetPricesFixed's \
                 and answered as many during `{}`",
                phase.name
            ),
            admitted(&fixed) > 0
                && timeout_share(&adaptive) * 2.0 <= timeout_share(&fixed)
                && adaptive.successes >= fixed.successes,
            format!(
                "adaptive: {} admitted, {} timed out ({:.0}%), {} answered (p50 {:.0} ms, p99 \
                 {:.0} ms); fixed: {} admitted, {} timed out ({:.0}%), {} answered (p50 {:.0} \
                 ms, p99 {:.0} ms), {} short-circuited",
                admitted(&adaptive),
                adaptive.timeouts,
                timeout_share(&adaptive) * 100.0,
                policies.prices.count,
                policies.prices.ms.p50,
                policies.prices.ms.p99,
                admitted(&fixed),
                fixed.timeouts,
                timeout_share(&fixed) * 100.0,
                policies.prices_fixed.count,
                policies.prices_fixed.ms.p50,
                policies.prices_fixed.ms.p99,
                fixed.short_circuits
            ),
        ),
    ]
}

fn join(values: &[u32]) -> String {
    values
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// How a breaker that opened during a phase must be seen closed after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closing {
    /// Closed at or after the phase's end (a backend down throughout fails every trial).
    AfterEnd,
    /// That, or closed by a trial before the end and not opened again after it (chaos that
    /// injects into most attempts, not all, may let a trial through).
    ClosedAtEnd,
}

/// Whether `backend`'s command's breaker opened during `phase` (at once, by trip-now, when
/// `trip_now`), and closed after it as `closing` says.
fn breaker_checks(
    phase: &Phase,
    backend: Backend,
    trip_now: bool,
    closing: Closing,
    events: &[BreakerRecord],
) -> [Check; 2] {
    let (start, end) = (millis(phase.start), millis(phase.end()));
    let command = backend.command_key();
    let of_command = |record: &&BreakerRecord| record.command == command;
    let opened = events
        .iter()
        .filter(of_command)
        .find(|r| r.change == Change::Opened && (start..=end).contains(&r.at_ms));
    let (name, passed) = if trip_now {
        (
            format!(
                "{command} breaker opened at once (trip now) during `{}`",
                phase.name
            ),
            opened.is_some_and(|r| r.trigger == Some(Trigger::TripNow)),
        )
    } else {
        (
            format!("{command} breaker opened during `{}`", phase.name),
            opened.is_some(),
        )
    };
    let detail = match opened {
        Some(record) => format!("{} at {}", record.describe(), seconds(record.at_ms)),
        None => format!("no opening between {} and {}", seconds(start), seconds(end)),
    };
    let opening = unless_operator(
        Check::new(name, passed, detail),
        events,
        command,
        start,
        end,
    );

    let closed = events
        .iter()
        .filter(of_command)
        // A close that follows an opening of the phase (both may fall on its end).
        .find(|r| {
            r.change == Change::Closed
                && r.at_ms >= end
                && opened.is_some_and(|opened| r.at_ms >= opened.at_ms)
        });
    // The last transition at or before the end, after the opening, and none after the end.
    let closed_at_end = events
        .iter()
        .filter(of_command)
        .rfind(|r| r.at_ms <= end && opened.is_some_and(|opened| r.at_ms >= opened.at_ms))
        .filter(|last| {
            last.change == Change::Closed
                && !events.iter().filter(of_command).any(|r| r.at_ms > end)
        });
    let (passed, detail) = match (closed, closed_at_end) {
        (Some(record), _) => (
            true,
            format!(
                "closed at {}, {} after the phase ended",
                seconds(record.at_ms),
                seconds(record.at_ms - end)
            ),
        ),
        (None, Some(record)) if closing == Closing::ClosedAtEnd => (
            true,
            format!(
                "closed at {} by a trial, before the phase ended, and not opened again",
                seconds(record.at_ms)
            ),
        ),
        _ if opened.is_none() => (
            false,
            "not opened during the phase: no closing to check".to_owned(),
        ),
        _ => (false, format!("not closed after {}", seconds(end))),
    };
    let closing = Check::new(
        format!("{command} breaker closed after `{}`", phase.name),
        passed,
        detail,
    );
    let closing = unless_operator(closing, events, command, start, u64::MAX);
    [opening, closing]
}

/// The checks of the chaos injected into `backend`'s command during `phase`: it was injected;
/// the breaker opened during the phase and closed after it when the chaos fails or times out
/// at least half of the attempts; the fallback answered and every page was answered; the
/// backend answered no error of its own, and the command failed no more often than injected.
fn chaos_checks(
    phase: &Phase,
    report: &PhaseReport,
    backend: Backend,
    events: &[BreakerRecord],
) -> Vec<Check> {
    let command = backend.command_key();
    let (counts, injected) = report
        .command(backend)
        .map_or((CommandCounts::default(), 0), |c| {
            (c.counts, c.chaos_injected)
        });
    let injected_check = Check::new(
        format!("chaos injected into {command} during `{}`", phase.name),
        injected > 0,
        format!(
            "{injected} attempts injected; {} failures, {} timeouts, {} rejections, {} \
             short-circuited",
            counts.failures, counts.timeouts, counts.rejections, counts.short_circuits
        ),
    );
    let (start, end) = (millis(phase.start), millis(phase.end()));
    let mut checks = vec![unless_operator(injected_check, events, command, start, end)];
    if phase.chaos(backend).error_share(backend.timeout_ms()) >= 0.5 {
        checks.extend(breaker_checks(
            phase,
            backend,
            false,
            Closing::ClosedAtEnd,
            events,
        ));
    }
    checks.push(Check::new(
        format!(
            "{command} fallback answered and every request answered during `{}`",
            phase.name
        ),
        counts.fallbacks > 0 && report.requests > 0 && report.answered == report.requests,
        format!(
            "{} answers from the fallback; {} of {} answered ({} with parts from fallbacks)",
            counts.fallbacks, report.answered, report.requests, report.degraded
        ),
    ));
    let calls = report.backend_calls.get(&backend).copied().unwrap_or(0);
    let errors = report.backend_errors.get(&backend).copied().unwrap_or(0);
    checks.push(Check::new(
        format!("{backend} backend stayed healthy during `{}`", phase.name),
        errors == 0 && counts.failures <= injected,
        format!(
            "calls that reached it: {calls}, answered with an error of its own: {errors}; \
             {command} failures: {}, attempts injected: {injected}",
            counts.failures
        ),
    ));
    checks
}

/// No chaos was injected into a command in a phase that sets none for it (the chaos of a
/// phase is cleared at its end).
fn chaos_only_where_set(schedule: &Schedule, phases: &[PhaseReport]) -> Check {
    let mut outside = Vec::new();
    let mut set = Vec::new();
    for (phase, report) in schedule.phases.iter().zip(phases) {
        for backend in Backend::ALL {
            let command = backend.command_key();
            if phase.chaos(backend).is_off() {
                let injected = report.command(backend).map_or(0, |c| c.chaos_injected);
                if injected > 0 {
                    outside.push(format!("{injected} into {command} during `{}`", phase.name));
                }
            } else {
                set.push(format!("{command} in `{}`", phase.name));
            }
        }
    }
    let detail = if outside.is_empty() {
        format!("none outside {}", set.join(", "))
    } else {
        outside.join(", ")
    };
    Check::new(
        "chaos injected only in the phases that set it".to_owned(),
        outside.is_empty(),
        detail,
    )
}

impl Report {
    /// A table of one value per phase (rows) and backend (columns of 12 characters, headed
    /// `header(backend)`).
    fn backend_table(
        &self,
        out: &mut String,
        title: &str,
        header: fn(Backend) -> &'static str,
        cell: impl Fn(&PhaseReport, Backend) -> String,
    ) {
        let _ = write!(out, "\n{title:<18}");
        for backend in Backend::ALL {
            let _ = write!(out, " {:>12}", header(backend));
        }
        let _ = writeln!(out);
        for phase in &self.phases {
            let _ = write!(out, "{:<18}", phase.name);
            for backend in Backend::ALL {
                let _ = write!(out, " {:>12}", cell(phase, backend));
            }
            let _ = writeln!(out);
        }
    }

    /// The protected gateway beside the unprotected twin, per phase: answered %, p99, and
    /// the most connections and threads held; then the contrast lines.
    fn comparison(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\n{:<27} {:>15} {:>17} {:>15} {:>13}",
            "phase (protected, twin)", "answered %", "p99", "connections", "threads"
        );
        for phase in &self.phases {
            let Some(twin) = &phase.unprotected else {
                continue;
            };
            let p99 = |answered, latency| p99_text(answered, latency, "-");
            let _ = writeln!(
                out,
                "{:<27} {:>7.1} {:>7.1} {:>8} {:>8} {:>7} {:>7} {:>6} {:>6}",
                phase.name,
                share(phase.answered, phase.requests),
                share(twin.answered, twin.requests),
                p99(phase.answered, &phase.latency_ms),
                p99(twin.answered, &twin.latency_ms),
                phase.held.connections,
                twin.held.connections,
                phase.held.threads,
                twin.held.threads,
            );
        }
        let _ = writeln!(
            out,
            "\ncontrast (protected vs unprotected; connections, threads and requests held: the \
             most at once):"
        );
        for line in &self.contrast {
            let _ = writeln!(out, "  {line}");
        }
    }

    /// The report as text: the phases table, each command's error percentage per phase
    /// (`*` where its backend was faulty), the breaker transitions and the checks.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n== Report: scenario `{}`, {} s at {} requests/s ==",
            self.scenario,
            self.duration_ms as f64 / 1000.0,
            self.rps
        );
        let _ = writeln!(
            out,
            "\n{:<18} {:>11} {:>6} {:>8} {:>8} {:>6} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
            "phase",
            "time (s)",
            "sent",
            "answered",
            "degraded",
            "p50 ms",
            "p99 ms",
            "success",
            "fallbk",
            "short",
            "reject",
            "timeout",
            "failure"
        );
        for phase in &self.phases {
            let _ = writeln!(
                out,
                "{:<18} {:>11} {:>6} {:>8} {:>8} {:>6.1} {:>6.1} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
                phase.name,
                format!(
                    "{:.1}-{:.1}",
                    phase.start_ms as f64 / 1000.0,
                    (phase.start_ms + phase.duration_ms) as f64 / 1000.0
                ),
                phase.requests,
                phase.answered,
                phase.degraded,
                phase.latency_ms.p50,
                phase.latency_ms.p99,
                phase.successes,
                phase.fallbacks,
                phase.short_circuits,
                phase.rejections,
                phase.timeouts,
                phase.failures
            );
        }
        let _ = writeln!(out, "\nfaults:");
        for phase in self.phases.iter().filter(|p| !p.faults.is_empty()) {
            for (backend, fault) in &phase.faults {
                let _ = writeln!(out, "  {:<18} {backend}: {fault}", phase.name);
            }
        }
        let chaos = self.phases.iter().any(|p| !p.chaos.is_empty());
        if chaos {
            let _ = writeln!(out, "\nchaos (injected in-process, the backends healthy):");
            for phase in &self.phases {
                for (backend, chaos) in &phase.chaos {
                    let command = backend.command_key();
                    let _ = writeln!(out, "  {:<18} {command}: {chaos}", phase.name);
                }
            }
        }

        self.backend_table(
            &mut out,
            "errors % (* fault)",
            Backend::column,
            |phase, backend| {
                let disturbed =
                    phase.faults.contains_key(&backend) || phase.chaos.contains_key(&backend);
                let mark = if disturbed { "*" } else { " " };
                format!("{:.1}{mark}", phase.error_percent(backend))
            },
        );
        if chaos || self.phases.iter().any(|p| p.chaos_injected > 0) {
            self.backend_table(
                &mut out,
                "chaos injected (*)",
                Backend::column,
                |phase, backend| {
                    let mark = if phase.chaos.contains_key(&backend) {
                        "*"
                    } else {
                        " "
                    };
                    let injected = phase.command(backend).map_or(0, |c| c.chaos_injected);
                    format!("{injected}{mark}")
                },
            );
        }
        self.backend_table(
            &mut out,
            "backend calls",
            Backend::column,
            |phase, backend| {
                let calls = phase.backend_calls.get(&backend).copied().unwrap_or(0);
                format!("{calls} ")
            },
        );

        if self.phases.iter().any(|p| p.unprotected.is_some()) {
            self.comparison(&mut out);
        }
        self.policies_text(&mut out);

        let _ = writeln!(out, "\nbreakers:");
        if self.breaker_events.is_empty() {
            let _ = writeln!(out, "  no transitions");
        }
        for line in breaker_lines(&self.breaker_events) {
            let _ = writeln!(out, "  {line}");
        }
        let states: Vec<String> = self
            .final_breakers
            .iter()
            .map(|(command, state)| format!("{command} {state}"))
            .collect();
        let _ = writeln!(out, "  at the end: {}", states.join(", "));

        if let Some(fleet) = &self.fleet {
            out.push_str(&fleet.to_text());
        }

        let _ = writeln!(out, "\nchecks:");
        for check in &self.checks {
            let verdict = if check.passed { "PASS" } else { "FAIL" };
            let _ = writeln!(out, "  {verdict}  {}: {}", check.name, check.detail);
        }
        let failed = self.checks.iter().filter(|c| !c.passed).count();
        if failed == 0 {
            let _ = writeln!(out, "\nevery check held ({} checks)", self.checks.len());
        } else {
            let _ = writeln!(out, "\n{failed} of {} checks FAILED", self.checks.len());
        }
        out
    }
}

impl Report {
    /// The policies beyond Hystrix: the retries and hedges of the phases that had any, and
    /// the two prices limits per phase.
    fn policies_text(&self, out: &mut String) {
        let retrying = Backend::Recommendations;
        let hedging = Backend::Availability;
        let counts = |phase: &PhaseReport, backend| {
            phase.command(backend).map(|c| c.counts).unwrap_or_default()
        };
        let retried: Vec<&PhaseReport> = self
            .phases
            .iter()
            .filter(|p| counts(p, retrying).retries > 0)
            .collect();
        if !retried.is_empty() {
            let _ = writeln!(
                out,
                "\nretries ({}, up to {RECOMMENDATION_ATTEMPTS} attempts through the breaker):",
                retrying.command_key()
            );
        }
        for phase in retried {
            let c = counts(phase, retrying);
            let executions = c.successes + c.fallbacks + c.fallback_failures;
            let calls = phase.backend_calls.get(&retrying).copied().unwrap_or(0);
            let errors = phase.backend_errors.get(&retrying).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "  {:<18} {} retries, {} over budget; {} of {executions} calls succeeded, \
                 backend {} of {calls}",
                phase.name,
                c.retries,
                c.budget_exhausted,
                c.successes,
                calls.saturating_sub(errors)
            );
        }
        let hedged: Vec<&PhaseReport> = self
            .phases
            .iter()
            .filter(|p| counts(p, hedging).hedges > 0)
            .collect();
        if !hedged.is_empty() {
            let _ = writeln!(
                out,
                "\nhedges ({}, one after {} ms):",
                hedging.command_key(),
                crate::gateway::HEDGE_DELAY_MS
            );
        }
        for phase in hedged {
            let c = counts(phase, hedging);
            let policies = &phase.policies;
            let slow = policies.tail_delay_ms.map_or_else(String::new, |delay| {
                format!(
                    "; {} of {} took {delay}+ ms",
                    policies.availability_slow, policies.availability.count
                )
            });
            let _ = writeln!(
                out,
                "  {:<18} {} sent, {} won, {} over budget{slow}; p50 {:.1}, p99 {:.1} ms",
                phase.name,
                c.hedges,
                policies.hedges_won,
                c.budget_exhausted,
                policies.availability.ms.p50,
                policies.availability.ms.p99
            );
        }

        let _ = writeln!(
            out,
            "\n{:<18}{:<18} |{:<26} | GetPricesFixed's calls",
            "prices limits", " GetPrices' limit", " GetPrices' calls"
        );
        let _ = writeln!(
            out,
            "{:<18}{:>8}{:>5}{:>5} |{:>6}{:>5}{:>5}{:>5}{:>5} |{:>6}{:>5}{:>5}{:>5}{:>5}",
            format!("(AIMD vs fixed {FIXED_PRICES_LIMIT})"),
            "settled",
            "min",
            "max",
            "ok",
            "p50",
            "p99",
            "t/o",
            "shed",
            "ok",
            "p50",
            "p99",
            "t/o",
            "rej"
        );
        for phase in &self.phases {
            let (adaptive, fixed) = (
                counts(phase, Backend::Prices),
                counts(phase, Backend::PricesFixed),
            );
            let (limit, policies) = (&phase.policies.limit, &phase.policies);
            let _ = writeln!(
                out,
                "{:<18}{:>8}{:>5}{:>5} |{:>6}{:>5.0}{:>5.0}{:>5}{:>5} |{:>6}{:>5.0}{:>5.0}{:>5}{:>5}",
                phase.name,
                limit.settled,
                limit.min,
                limit.max,
                policies.prices.count,
                policies.prices.ms.p50,
                policies.prices.ms.p99,
                adaptive.timeouts,
                adaptive.rejections,
                policies.prices_fixed.count,
                policies.prices_fixed.ms.p50,
                policies.prices_fixed.ms.p99,
                fixed.timeouts,
                fixed.rejections
            );
        }
        for phase in self.phases.iter().filter(|p| !p.faults.is_empty()) {
            if phase.faults.contains_key(&Backend::Prices) {
                let _ = writeln!(
                    out,
                    "  GetPrices limit each second of `{}`: {}",
                    phase.name,
                    join(&phase.policies.limit.per_second)
                );
            }
        }
    }
}

/// The breaker transitions, one a line with its time, except that a run of failed trials of
/// one breaker (HALF-OPEN then OPENED again, two or more times) is one line.
pub fn breaker_lines(events: &[BreakerRecord]) -> Vec<String> {
    let reopened = |record: &BreakerRecord| {
        record.change == Change::Opened
            && matches!(
                record.trigger,
                Some(Trigger::TrialFailed | Trigger::TripNow)
            )
    };
    // For each event that starts a run: the run's trials, last time and open time; the
    // events inside a run are left out.
    let mut runs: BTreeMap<usize, (usize, u64, Option<u64>)> = BTreeMap::new();
    let mut folded = vec![false; events.len()];
    let commands: std::collections::BTreeSet<&str> =
        events.iter().map(|e| e.command.as_str()).collect();
    for command in commands {
        let own: Vec<usize> = (0..events.len())
            .filter(|&i| events[i].command == command)
            .collect();
        let mut at = 0;
        while at + 1 < own.len() {
            let mut end = at;
            while end + 1 < own.len()
                && events[own[end]].change == Change::HalfOpened
                && reopened(&events[own[end + 1]])
            {
                end += 2;
            }
            let trials = (end - at) / 2;
            if trials >= 2 {
                let last = &events[own[end - 1]];
                runs.insert(own[at], (trials, last.at_ms, last.open_ms));
                for &index in &own[at..end] {
                    folded[index] = true;
                }
                at = end;
            } else {
                at += 1;
            }
        }
    }
    let mut lines = Vec::new();
    for (index, event) in events.iter().enumerate() {
        if let Some((trials, last_ms, open_ms)) = runs.get(&index) {
            let open = open_ms
                .map(|ms| format!(", re-opened for {ms} ms each time"))
                .unwrap_or_default();
            lines.push(format!(
                "{:>8}  {} {trials} trials failed, the last at {}{open}",
                seconds(event.at_ms),
                event.command,
                seconds(*last_ms),
            ));
        } else if !folded[index] {
            lines.push(format!("{:>8}  {}", seconds(event.at_ms), event.describe()));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    /// The faults of the classic tour (before the policies beyond Hystrix joined it): these
    /// tests check the breaker, chaos and health checks against its phases' times.
    const CLASSIC_TOUR: &str = "[[phase]]\nname = \"warm-up\"\nweight = 10\n\
        [[phase]]\nname = \"latency-spike\"\nweight = 15\n[phase.faults.catalog]\n\
        latency = { base_ms = 120, median_ms = 100, sigma = 0.8 }\nhang_rate = 0.05\n\
        [[phase]]\nname = \"error-burst\"\nweight = 15\n[phase.faults.ratings]\nerror_rate = 0.7\n\
        [[phase]]\nname = \"outage\"\nweight = 15\n[phase.faults.recommendations]\n\
        outage = \"refused\"\n[[phase]]\nname = \"recovery\"\nweight = 10\n\
        [[phase]]\nname = \"retry-after-storm\"\nweight = 15\n[phase.faults.availability]\n\
        retry_after_s = 1\n[[phase]]\nname = \"cool-down\"\nweight = 20\n";

    /// The classic tour over 10 s.
    fn tour() -> Schedule {
        Scenario::from_toml(CLASSIC_TOUR, "classic", "tour")
            .unwrap()
            .schedule(Duration::from_secs(10))
            .unwrap()
    }

    /// Phase reports of the tour where every request is answered and every command succeeds
    /// `ok` times with no error.
    fn clean_phases(schedule: &Schedule) -> Vec<PhaseReport> {
        schedule
            .phases
            .iter()
            .map(|phase| {
                let load = PhaseLoad {
                    sent: 10,
                    answered: 10,
                    latencies: vec![Duration::from_millis(5); 10],
                    ..PhaseLoad::default()
                };
                let counts = Backend::ALL
                    .into_iter()
                    .map(|b| {
                        let counts = CommandCounts {
                            successes: 10,
                            ..CommandCounts::default()
                        };
                        (b, counts)
                    })
                    .collect();
                PhaseReport::new(phase, &load, &counts, &BTreeMap::new())
            })
            .collect()
    }

    /// Breaker records from `(at_ms, command, change, trigger)`.
    fn records(list: &[(u64, &str, Change, Option<Trigger>)]) -> Vec<BreakerRecord> {
        list.iter()
            .map(|&(at_ms, command, change, trigger)| BreakerRecord {
                at_ms,
                command: command.to_owned(),
                change,
                trigger,
                open_ms: trigger.map(|_| 500),
                cause: None,
            })
            .collect()
    }

    const HEALTH: Option<Trigger> = Some(Trigger::Health);
    const TRIP_NOW: Option<Trigger> = Some(Trigger::TripNow);
    const TRIAL: Option<Trigger> = Some(Trigger::TrialFailed);

    /// The tour's breaker story: recommendations open in `outage` (4.0-5.5 s) and close in
    /// `recovery`; availability trips at once in the storm (6.5-8.0 s) and closes after it.
    fn good_events() -> Vec<BreakerRecord> {
        use Change::*;
        records(&[
            (4600, "GetRecommendations", Opened, HEALTH),
            (5700, "GetRecommendations", HalfOpened, None),
            (5700, "GetRecommendations", Closed, None),
            (6510, "GetAvailability", Opened, TRIP_NOW),
            (7600, "GetAvailability", HalfOpened, None),
            (7600, "GetAvailability", Opened, TRIAL),
            (8700, "GetAvailability", HalfOpened, None),
            (8700, "GetAvailability", Closed, None),
        ])
    }

    fn all_closed() -> BTreeMap<String, &'static str> {
        Backend::ALL
            .into_iter()
            .map(|b| (b.command_key().to_owned(), "CLOSED"))
            .collect()
    }

    /// The failed checks, name and detail.
    fn failed(checks: &[Check]) -> Vec<(&str, &str)> {
        checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| (c.name.as_str(), c.detail.as_str()))
            .collect()
    }

    fn verdicts(checks: &[Check]) -> Vec<(String, bool)> {
        checks.iter().map(|c| (c.name.clone(), c.passed)).collect()
    }

    #[test]
    fn a_good_run_passes_every_check_with_its_details() {
        let schedule = tour();
        let checks = checks(
            &schedule,
            &clean_phases(&schedule),
            &good_events(),
            &all_closed(),
        );
        let names: Vec<(String, bool)> = [
            "every gateway request answered",
            "GetRecommendations breaker opened during `outage`",
            "GetRecommendations breaker closed after `outage`",
            "GetAvailability breaker opened at once (trip now) during `retry-after-storm`",
            "GetAvailability breaker closed after `retry-after-storm`",
            "healthy commands kept errors at or under 20% during `warm-up`",
            "healthy commands kept errors at or under 20% during `latency-spike`",
            "healthy commands kept errors at or under 20% during `error-burst`",
            "healthy commands kept errors at or under 20% during `outage`",
            "healthy commands kept errors at or under 20% during `recovery`",
            "healthy commands kept errors at or under 20% during `retry-after-storm`",
            "healthy commands kept errors at or under 20% during `cool-down`",
            "every breaker closed at the end",
        ]
        .map(|name| (name.to_owned(), true))
        .to_vec();
        assert_eq!(verdicts(&checks), names);
        let details: Vec<&str> = checks.iter().map(|c| c.detail.as_str()).collect();
        assert_eq!(
            details[0],
            "70 of 70 answered (0 with parts from fallbacks)"
        );
        assert_eq!(
            details[1],
            "GetRecommendations OPENED by error threshold for 500 ms at 4.60 s"
        );
        assert_eq!(details[2], "closed at 5.70 s, 0.20 s after the phase ended");
        assert_eq!(
            details[3],
            "GetAvailability OPENED by trip now for 500 ms at 6.51 s"
        );
        assert_eq!(details[4], "closed at 8.70 s, 0.70 s after the phase ended");
        assert_eq!(
            details[6],
            "GetRatings 0.0%, GetRecommendations 0.0%, GetAvailability 0.0%, GetPrices 0.0%, GetPricesFixed 0.0%"
        );
        assert_eq!(
            details[12],
            "GetAvailability CLOSED, GetPrices CLOSED, GetPricesFixed CLOSED, GetRatings CLOSED, \
             GetRecommendations CLOSED, GetTitle CLOSED"
        );
    }

    /// The chaos scenario over 6 s: warm-up 0-1.2 s, injected-faults (GetRecommendations)
    /// 1.2-3.0 s, injected-latency (GetTitle) 3.0-4.8 s, recovery 4.8-6.0 s; clean phases
    /// with the chaos injected where it is set, fallbacks for it, and healthy backends.
    fn chaos_run() -> (Schedule, Vec<PhaseReport>, Vec<BreakerRecord>) {
        use Change::*;
        let schedule = crate::scenario::chaos_6s();
        let mut phases = clean_phases(&schedule);
        for (index, key, failures, timeouts) in
            [(1, "GetRecommendations", 30, 0), (2, "GetTitle", 0, 25)]
        {
            let command = phases[index].commands.get_mut(key).unwrap();
            command.counts.failures = failures;
            command.counts.timeouts = timeouts;
            command.counts.fallbacks = 40;
            command.chaos_injected = 30;
        }
        for phase in &mut phases {
            for backend in Backend::ALL {
                phase.backend_calls.insert(backend, 10);
                phase.backend_errors.insert(backend, 0);
            }
        }
        let events = records(&[
            (2000, "GetRecommendations", Opened, HEALTH),
            (3050, "GetRecommendations", HalfOpened, None),
            (3050, "GetRecommendations", Closed, None),
            (3700, "GetTitle", Opened, HEALTH),
            (4200, "GetTitle", HalfOpened, None),
            (4200, "GetTitle", Opened, TRIAL),
            (5050, "GetTitle", HalfOpened, None),
            (5050, "GetTitle", Closed, None),
        ]);
        (schedule, phases, events)
    }

    #[test]
    fn a_good_chaos_run_passes_the_chaos_checks_with_their_numbers() {
        let (schedule, phases, events) = chaos_run();
        let checks = checks(&schedule, &phases, &events, &all_closed());
        let expected: Vec<(&str, &str)> = vec![
            (
                "every gateway request answered",
                "40 of 40 answered (0 with parts from fallbacks)",
            ),
            (
                "chaos injected into GetRecommendations during `injected-faults`",
                "30 attempts injected; 30 failures, 0 timeouts, 0 rejections, 0 short-circuited",
            ),
            (
                "GetRecommendations breaker opened during `injected-faults`",
                "GetRecommendations OPENED by error threshold for 500 ms at 2.00 s",
            ),
            (
                "GetRecommendations breaker closed after `injected-faults`",
                "closed at 3.05 s, 0.05 s after the phase ended",
            ),
            (
                "GetRecommendations fallback answered and every request answered during \
                 `injected-faults`",
                "40 answers from the fallback; 10 of 10 answered (0 with parts from fallbacks)",
            ),
            (
                "recommendations backend stayed healthy during `injected-faults`",
                "calls that reached it: 10, answered with an error of its own: 0; \
                 GetRecommendations failures: 30, attempts injected: 30",
            ),
            (
                "chaos injected into GetTitle during `injected-latency`",
                "30 attempts injected; 0 failures, 25 timeouts, 0 rejections, 0 short-circuited",
            ),
            (
                "GetTitle breaker opened during `injected-latency`",
                "GetTitle OPENED by error threshold for 500 ms at 3.70 s",
            ),
            (
                "GetTitle breaker closed after `injected-latency`",
                "closed at 5.05 s, 0.25 s after the phase ended",
            ),
            (
                "GetTitle fallback answered and every request answered during `injected-latency`",
                "40 answers from the fallback; 10 of 10 answered (0 with parts from fallbacks)",
            ),
            (
                "catalog backend stayed healthy during `injected-latency`",
                "calls that reached it: 10, answered with an error of its own: 0; GetTitle \
                 failures: 0, attempts injected: 30",
            ),
            (
                "chaos injected only in the phases that set it",
                "none outside GetRecommendations in `injected-faults`, GetTitle in \
                 `injected-latency`",
            ),
            (
                "healthy commands kept errors at or under 20% during `warm-up`",
                "GetTitle 0.0%, GetRatings 0.0%, GetRecommendations 0.0%, GetAvailability 0.0%, GetPrices 0.0%, GetPricesFixed 0.0%",
            ),
            (
                "healthy commands kept errors at or under 20% during `injected-faults`",
                "GetTitle 0.0%, GetRatings 0.0%, GetAvailability 0.0%, GetPrices 0.0%, GetPricesFixed 0.0%",
            ),
            (
                "healthy commands kept errors at or under 20% during `injected-latency`",
                "GetRatings 0.0%, GetAvailability 0.0%, GetPrices 0.0%, GetPricesFixed 0.0%; not judged, recovering from `injected-faults`: GetRecommendations 0.0%",
            ),
            (
                "healthy commands kept errors at or under 20% during `recovery`",
                "GetRatings 0.0%, GetRecommendations 0.0%, GetAvailability 0.0%, GetPrices 0.0%, GetPricesFixed 0.0%; not judged, recovering from `injected-latency`: GetTitle 0.0%",
            ),
            (
                "every breaker closed at the end",
                "GetAvailability CLOSED, GetPrices CLOSED, GetPricesFixed CLOSED, GetRatings \
                 CLOSED, GetRecommendations CLOSED, GetTitle CLOSED",
            ),
        ];
        let seen: Vec<(&str, &str)> = checks
            .iter()
            .map(|c| (c.name.as_str(), c.detail.as_str()))
            .collect();
        assert_eq!(seen, expected);
        assert!(checks.iter().all(|c| c.passed));
    }

    #[test]
    fn chaos_checks_fail_on_stray_injections_backend_errors_and_missing_fallbacks() {
        let (schedule, mut phases, events) = chaos_run();
        // Chaos left on into the recovery, a 500 of the recommendations backend, no fallback
        // for the titles, and a GetRecommendations failure that was not injected.
        phases[3]
            .commands
            .get_mut("GetTitle")
            .unwrap()
            .chaos_injected = 3;
        phases[1].backend_errors.insert(Backend::Recommendations, 1);
        let recommendations = phases[1].commands.get_mut("GetRecommendations").unwrap();
        recommendations.counts.failures = 31;
        phases[2]
            .commands
            .get_mut("GetTitle")
            .unwrap()
            .counts
            .fallbacks = 0;
        let checks = checks(&schedule, &phases, &events, &all_closed());
        assert_eq!(
            failed(&checks),
            [
                (
                    "recommendations backend stayed healthy during `injected-faults`",
                    "calls that reached it: 10, answered with an error of its own: 1; \
                     GetRecommendations failures: 31, attempts injected: 30"
                ),
                (
                    "GetTitle fallback answered and every request answered during \
                     `injected-latency`",
                    "0 answers from the fallback; 10 of 10 answered (0 with parts from fallbacks)"
                ),
                (
                    "chaos injected only in the phases that set it",
                    "3 into GetTitle during `recovery`"
                ),
            ]
        );
    }

    #[test]
    fn a_breaker_closed_by_a_trial_before_the_chaos_ends_counts_as_closed_after_it() {
        use Change::*;
        let (schedule, phases, _) = chaos_run();
        // A trial let through by the 20% the chaos spares closed it at 2.80 s, before the
        // injected faults ended at 3.00 s; it did not open again.
        let mut events = records(&[
            (2000, "GetRecommendations", Opened, HEALTH),
            (2800, "GetRecommendations", HalfOpened, None),
            (2800, "GetRecommendations", Closed, None),
            (3700, "GetTitle", Opened, HEALTH),
            (5050, "GetTitle", HalfOpened, None),
            (5050, "GetTitle", Closed, None),
        ]);
        let closed = |events: &[BreakerRecord]| {
            let checks = checks(&schedule, &phases, events, &all_closed());
            let check = checks
                .into_iter()
                .find(|c| c.name == "GetRecommendations breaker closed after `injected-faults`")
                .unwrap();
            (check.passed, check.detail)
        };
        assert_eq!(
            closed(&events),
            (
                true,
                "closed at 2.80 s by a trial, before the phase ended, and not opened again"
                    .to_owned()
            )
        );
        // Opened again after the end and never closed: not closed after it.
        events.push(records(&[(3100, "GetRecommendations", Opened, HEALTH)]).remove(0));
        assert_eq!(
            closed(&events),
            (false, "not closed after 3.00 s".to_owned())
        );
    }

    #[test]
    fn runs_of_failed_trials_are_one_line() {
        use Change::*;
        // The good story up to the first failed trial of availability, then two more of them
        // with a recommendations event among them.
        let mut events = good_events();
        events.truncate(6);
        events.extend(records(&[
            (8100, "GetAvailability", HalfOpened, None),
            (8100, "GetAvailability", Opened, TRIP_NOW),
            (8100, "GetRecommendations", Opened, HEALTH),
            (8650, "GetAvailability", HalfOpened, None),
            (8650, "GetAvailability", Opened, TRIP_NOW),
            (9200, "GetAvailability", HalfOpened, None),
            (9200, "GetAvailability", Closed, None),
        ]));
        assert_eq!(
            breaker_lines(&events),
            [
                "  4.60 s  GetRecommendations OPENED by error threshold for 500 ms",
                "  5.70 s  GetRecommendations HALF-OPEN (trial)",
                "  5.70 s  GetRecommendations CLOSED",
                "  6.51 s  GetAvailability OPENED by trip now for 500 ms",
                "  7.60 s  GetAvailability 3 trials failed, the last at 8.65 s, re-opened for 500 \
                 ms each time",
                "  8.10 s  GetRecommendations OPENED by error threshold for 500 ms",
                "  9.20 s  GetAvailability HALF-OPEN (trial)",
                "  9.20 s  GetAvailability CLOSED",
            ]
        );
        // A single failed trial stays as it is.
        assert_eq!(breaker_lines(&events[3..6]).len(), 3);
    }

    #[test]
    fn an_unanswered_request_fails_the_first_check_with_an_example() {
        let schedule = tour();
        let mut phases = clean_phases(&schedule);
        phases[2].answered = 9;
        phases[2].unanswered = 1;
        phases[2].unanswered_errors = vec!["no answer within 5 s".into()];
        let checks = checks(&schedule, &phases, &good_events(), &all_closed());
        assert_eq!(
            (checks[0].passed, checks[0].detail.as_str()),
            (
                false,
                "69 of 70 answered (0 with parts from fallbacks); unanswered, e.g.: no answer within 5 s"
            )
        );
        assert_eq!(checks.iter().filter(|c| !c.passed).count(), 1);
    }

    #[test]
    fn an_opening_on_the_phase_end_counts_for_the_phase() {
        let schedule = tour();
        let phases = clean_phases(&schedule);
        let mut events = good_events();
        // The outage ends at 5.50 s; a loaded machine may see the opening exactly then.
        events[0].at_ms = 5500;
        let checks = checks(&schedule, &phases, &events, &all_closed());
        assert_eq!(failed(&checks), []);
    }

    #[test]
    fn breakers_must_open_in_the_phase_and_close_after_it() {
        let schedule = tour();
        let phases = clean_phases(&schedule);
        let mut events = good_events();
        // The recommendations breaker opened only after the outage ended (too late) and the
        // availability one by its error threshold instead of at once; neither closed after.
        events[0].at_ms = 5600;
        events[3].trigger = Some(Trigger::Health);
        events.retain(|e| e.change != Change::Closed);
        let checks = checks(&schedule, &phases, &events, &all_closed());
        assert_eq!(
            failed(&checks),
            [
                (
                    "GetRecommendations breaker opened during `outage`",
                    "no opening between 4.00 s and 5.50 s"
                ),
                (
                    "GetRecommendations breaker closed after `outage`",
                    "not opened during the phase: no closing to check"
                ),
                (
                    "GetAvailability breaker opened at once (trip now) during `retry-after-storm`",
                    "GetAvailability OPENED by error threshold for 500 ms at 6.51 s"
                ),
                (
                    "GetAvailability breaker closed after `retry-after-storm`",
                    "not closed after 8.00 s"
                ),
            ]
        );
    }

    #[test]
    fn a_healthy_command_over_the_limit_fails_its_phase_only() {
        let schedule = tour();
        let mut phases = clean_phases(&schedule);
        // In `outage` (index 3) GetTitle's backend is healthy: 3 errors of 10 is 30%.
        let title = phases[3].commands.get_mut("GetTitle").unwrap();
        title.counts.timeouts = 3;
        title.counts.successes = 7;
        title.error_percent = title.counts.error_percent();
        // In `latency-spike` (index 1) the catalog is faulty: its errors are not held against it.
        let spiked = phases[1].commands.get_mut("GetTitle").unwrap();
        spiked.counts.timeouts = 9;
        spiked.error_percent = 90.0;
        let first = checks(&schedule, &phases, &good_events(), &all_closed());
        assert_eq!(
            failed(&first),
            [(
                "healthy commands kept errors at or under 20% during `outage`",
                "GetTitle 30.0%, GetAvailability 0.0%, GetPrices 0.0%, GetPricesFixed 0.0%; not judged, recovering from `error-burst`: GetRatings 0.0%"
            )]
        );
        // Exactly at the limit passes.
        phases[3]
            .commands
            .get_mut("GetTitle")
            .unwrap()
            .error_percent = 20.0;
        let again = checks(&schedule, &phases, &good_events(), &all_closed());
        assert!(again.iter().all(|c| c.passed));
    }

    /// The latency-spike phase of `clean_phases`, beside a twin that answered 6 of 10 (the
    /// slowest in 4.8 s) and held 412 connections and 230 threads at most.
    fn compared_phase() -> PhaseReport {
        let twin = PhaseLoad {
            sent: 10,
            answered: 6,
            unanswered: 4,
            latencies: [20, 25, 30, 900, 1500, 4800]
                .map(Duration::from_millis)
                .to_vec(),
            errors: vec!["answered 502 Bad Gateway: answered 500".into()],
            ..PhaseLoad::default()
        };
        let held = |requests, connections, threads| Held {
            requests,
            connections,
            threads,
        };
        clean_phases(&tour()).remove(1).held(
            held(9, 10, 8),
            Some(TwinPhase::new(&twin, held(38, 412, 230))),
        )
    }

    #[test]
    fn the_contrast_line_states_both_gateways_numbers() {
        assert_eq!(
            compared_phase().contrast().as_deref(),
            Some(
                "latency-spike: answered 10 of 10 (0 degraded) vs 6 of 10; p99 5 ms vs 4.8 s; \
                 held at most 10 vs 412 connections, 8 vs 230 threads, 9 vs 38 requests"
            )
        );
        assert_eq!(clean_phases(&tour()).remove(1).contrast(), None);
    }

    #[test]
    fn the_comparison_table_has_a_column_for_each_gateway() {
        let phase = compared_phase();
        let report = Report {
            scenario: "tour".into(),
            description: String::new(),
            duration_ms: 10_000,
            rps: 50.0,
            dashboard_url: String::new(),
            gateway_url: String::new(),
            twin_url: None,
            seed: 1,
            contrast: phase.contrast().into_iter().collect(),
            fleet: None,
            phases: vec![phase],
            breaker_events: vec![],
            final_breakers: BTreeMap::new(),
            checks: vec![],
            passed: true,
        };
        let text = report.to_text();
        let table: Vec<&str> = text
            .lines()
            .skip_while(|line| !line.starts_with("phase (protected, twin)"))
            .take(5)
            .collect();
        assert_eq!(
            table,
            [
                "phase (protected, twin)          answered %               p99     connections       threads",
                "latency-spike                 100.0    60.0     5 ms    4.8 s      10     412      8    230",
                "",
                "contrast (protected vs unprotected; connections, threads and requests held: the most at once):",
                "  latency-spike: answered 10 of 10 (0 degraded) vs 6 of 10; p99 5 ms vs 4.8 s; held at most 10 vs 412 connections, 8 vs 230 threads, 9 vs 38 requests",
            ]
        );
    }

    #[test]
    fn a_breaker_open_at_the_end_fails_when_the_last_phase_is_healthy() {
        let schedule = tour();
        let mut states = all_closed();
        states.insert("GetTitle".into(), "OPEN");
        let checks = checks(&schedule, &clean_phases(&schedule), &good_events(), &states);
        let last = checks.last().unwrap();
        assert_eq!(
            (last.name.as_str(), last.passed),
            ("every breaker closed at the end", false)
        );
    }

    #[test]
    fn phase_reports_sum_the_commands_and_summarise_latency() {
        let schedule = tour();
        let load = PhaseLoad {
            sent: 4,
            answered: 3,
            degraded: 2,
            unanswered: 1,
            latencies: [30, 10, 20].map(Duration::from_millis).to_vec(),
            errors: vec!["answered 500".into()],
        };
        let counts: BTreeMap<Backend, CommandCounts> = [
            (
                Backend::Catalog,
                CommandCounts {
                    successes: 2,
                    timeouts: 1,
                    short_circuits: 1,
                    fallbacks: 2,
                    cache_hits: 3,
                    ..CommandCounts::default()
                },
            ),
            (
                Backend::Ratings,
                CommandCounts {
                    successes: 1,
                    failures: 2,
                    rejections: 1,
                    fallbacks: 5,
                    ..CommandCounts::default()
                },
            ),
        ]
        .into();
        let reached = |calls, errors, chaos_injected| BackendCounts {
            calls,
            errors,
            chaos_injected,
        };
        let backends = BTreeMap::from([
            (Backend::Catalog, reached(4, 1, 0)),
            (Backend::Ratings, reached(2, 0, 3)),
        ]);
        let report = PhaseReport::new(&schedule.phases[1], &load, &counts, &backends);
        assert_eq!(
            report.backend_calls,
            BTreeMap::from([(Backend::Catalog, 4), (Backend::Ratings, 2)])
        );
        assert_eq!(
            report.backend_errors,
            BTreeMap::from([(Backend::Catalog, 1), (Backend::Ratings, 0)])
        );
        assert_eq!(
            (
                report.chaos_injected,
                report.commands["GetRatings"].chaos_injected
            ),
            (3, 3)
        );
        assert!(report.chaos.is_empty());
        assert_eq!(
            (
                report.successes,
                report.fallbacks,
                report.short_circuits,
                report.rejections,
                report.timeouts,
                report.failures
            ),
            (3, 7, 1, 1, 1, 2)
        );
        assert_eq!(
            report.latency_ms,
            LatencySummary {
                p50: 20.0,
                p99: 30.0,
                max: 30.0
            }
        );
        assert_eq!(report.commands["GetTitle"].error_percent, 50.0);
        assert_eq!(report.commands["GetRatings"].error_percent, 75.0);
        assert_eq!(
            report.faults,
            BTreeMap::from([(
                Backend::Catalog,
                "latency 120+100ms σ0.8, 5% hang".to_owned()
            )])
        );
        assert_eq!((report.start_ms, report.duration_ms), (1000, 1500));
    }

    /// An operator's record for `command`: `change` at `at_ms`, with the property set.
    fn operator(at_ms: u64, command: &str, change: Change, cause: &str) -> BreakerRecord {
        BreakerRecord {
            at_ms,
            command: command.to_owned(),
            change,
            trigger: None,
            open_ms: None,
            cause: (!cause.is_empty()).then(|| cause.to_owned()),
        }
    }

    /// The check named `name`: its verdict and detail.
    fn check<'a>(checks: &'a [Check], name: &str) -> (bool, &'a str) {
        checks
            .iter()
            .find(|c| c.name == name)
            .map(|c| (c.passed, c.detail.as_str()))
            .unwrap_or_else(|| panic!("no check named {name}"))
    }

    /// GetTitle held open by the operator for part of `outage` (4.0-5.5 s): its short-circuits
    /// there are not judged; in `recovery`, let go before it started, it is judged again.
    #[test]
    fn a_command_the_operator_forced_in_a_phase_is_not_judged_there() {
        let schedule = tour();
        let mut phases = clean_phases(&schedule);
        for (index, percent) in [(3, 100.0), (4, 30.0)] {
            let title = phases[index].commands.get_mut("GetTitle").unwrap();
            title.error_percent = percent;
        }
        let mut events = good_events();
        events.push(operator(
            4200,
            "GetTitle",
            Change::HeldOpen,
            "circuitBreaker.forceOpen=true",
        ));
        events.push(operator(
            5000,
            "GetTitle",
            Change::Released,
            "circuitBreaker.forceOpen removed",
        ));
        let checks = checks(&schedule, &phases, &events, &all_closed());
        assert_eq!(
            check(
                &checks,
                "healthy commands kept errors at or under 20% during `outage`"
            ),
            (
                true,
                "GetAvailability 0.0%, GetPrices 0.0%, GetPricesFixed 0.0%; not judged, forced by \
                 the operator: GetTitle 100.0% (the operator's circuitBreaker.forceOpen=true at \
                 4.20 s, circuitBreaker.forceOpen removed at 5.00 s); not judged, recovering from `error-burst`: GetRatings 0.0%"
            )
        );
        assert_eq!(
            failed(&checks),
            [(
                "healthy commands kept errors at or under 20% during `recovery`",
                "GetTitle 30.0%, GetRatings 0.0%, GetAvailability 0.0%, GetPrices 0.0%, GetPricesFixed 0.0%; not judged, recovering from `outage`: GetRecommendations 0.0%"
            )]
        );
    }

    /// Held open from the storm (6.5-8.0 s) to the end: not judged in `cool-down`, excused at
    /// the end; a breaker left open without the operator still fails.
    #[test]
    fn a_breaker_the_operator_holds_at_the_end_is_excused_and_named() {
        let schedule = tour();
        let mut phases = clean_phases(&schedule);
        phases[6]
            .commands
            .get_mut("GetTitle")
            .unwrap()
            .error_percent = 100.0;
        let mut events = good_events();
        events.push(operator(
            7000,
            "GetTitle",
            Change::HeldOpen,
            "circuitBreaker.forceOpen=true",
        ));
        let mut states = all_closed();
        states.insert("GetTitle".into(), "FORCED_OPEN");
        let held = checks(&schedule, &phases, &events, &states);
        assert_eq!(
            check(
                &held,
                "healthy commands kept errors at or under 20% during `cool-down`"
            ),
            (
                true,
                "GetRatings 0.0%, GetRecommendations 0.0%, GetPrices 0.0%, GetPricesFixed 0.0%; \
                 not judged, forced by the operator: GetTitle 100.0% (the operator's \
                 circuitBreaker.forceOpen=true at 7.00 s); not judged, recovering from `retry-after-storm`: GetAvailability 0.0%"
            )
        );
        assert_eq!(
            check(&held, "every breaker closed at the end"),
            (
                true,
                "GetAvailability CLOSED, GetPrices CLOSED, GetPricesFixed CLOSED, GetRatings CLOSED, \
                 GetRecommendations CLOSED, GetTitle FORCED_OPEN; excused: GetTitle held open by \
                 the operator"
            )
        );
        assert_eq!(failed(&held), []);

        // A one-time force-open in the last phase excuses an OPEN GetTitle at the end; an OPEN
        // GetRatings nobody touched fails.
        events.pop();
        events.push(operator(9800, "GetTitle", Change::ForcedOpen, ""));
        states.insert("GetTitle".into(), "OPEN");
        states.insert("GetRatings".into(), "OPEN");
        let left_open = checks(&schedule, &clean_phases(&schedule), &events, &states);
        assert_eq!(
            failed(&left_open),
            [(
                "every breaker closed at the end",
                "GetAvailability CLOSED, GetPrices CLOSED, GetPricesFixed CLOSED, GetRatings OPEN, \
                 GetRecommendations CLOSED, GetTitle OPEN; excused: GetTitle OPEN after the \
                 operator's force-open, one sleep window at 9.80 s"
            )]
        );
    }

    /// The operator held GetRecommendations open from before its outage to after: it never
    /// opened by itself nor closed, and neither is held against it.
    #[test]
    fn breaker_checks_of_a_command_the_operator_held_are_not_judged() {
        let schedule = tour();
        let mut events: Vec<BreakerRecord> = good_events()
            .into_iter()
            .filter(|e| e.command != "GetRecommendations")
            .collect();
        events.push(operator(
            3900,
            "GetRecommendations",
            Change::HeldOpen,
            "circuitBreaker.forceOpen=true",
        ));
        events.push(operator(
            6000,
            "GetRecommendations",
            Change::Released,
            "circuitBreaker.forceOpen=false",
        ));
        let checks = checks(&schedule, &clean_phases(&schedule), &events, &all_closed());
        assert_eq!(
            check(&checks, "GetRecommendations breaker opened during `outage`"),
            (
                true,
                "no opening between 4.00 s and 5.50 s; not judged: the operator's \
                 circuitBreaker.forceOpen=true at 3.90 s"
            )
        );
        assert_eq!(
            check(&checks, "GetRecommendations breaker closed after `outage`"),
            (
                true,
                "not opened during the phase: no closing to check; not judged: the operator's \
                 circuitBreaker.forceOpen=true at 3.90 s, circuitBreaker.forceOpen=false at \
                 6.00 s"
            )
        );
        assert_eq!(failed(&checks), []);
        // The report's breaker lines show the operator's actions as they are.
        assert_eq!(
            breaker_lines(&events[events.len() - 2..]),
            [
                "  3.90 s  GetRecommendations FORCED_OPEN by operator \
                 (circuitBreaker.forceOpen=true)",
                "  6.00 s  GetRecommendations released by operator \
                 (circuitBreaker.forceOpen=false)",
            ]
        );
    }
    /// The tour over 40 s (the demo tier's run), its phase reports clean, and the index of
    /// each policy phase: transient-errors, long-tail, capacity-drop.
    fn tour_40s() -> (Schedule, Vec<PhaseReport>, [usize; 3]) {
        let schedule = Scenario::load("tour")
            .unwrap()
            .schedule(Duration::from_secs(40))
            .unwrap();
        let phases = clean_phases(&schedule);
        let at = |name: &str| schedule.phases.iter().position(|p| p.name == name).unwrap();
        let indexes = [at("transient-errors"), at("long-tail"), at("capacity-drop")];
        (schedule, phases, indexes)
    }

    fn counts_of(phase: &mut PhaseReport, backend: Backend) -> &mut CommandCounts {
        &mut phase
            .commands
            .get_mut(backend.command_key())
            .unwrap()
            .counts
    }

    /// Phase reports where every policy did what the tour shows.
    fn good_policies() -> (Schedule, Vec<PhaseReport>, [usize; 3]) {
        let (schedule, mut phases, [flaky, tail, drop]) = tour_40s();
        let recommendations = &mut phases[flaky];
        *counts_of(recommendations, Backend::Recommendations) = CommandCounts {
            successes: 176,
            failures: 70,
            fallbacks: 4,
            retries: 66,
            ..CommandCounts::default()
        };
        recommendations
            .backend_calls
            .insert(Backend::Recommendations, 246);
        recommendations
            .backend_errors
            .insert(Backend::Recommendations, 70);

        let availability = &mut phases[tail];
        counts_of(availability, Backend::Availability).hedges = 20;
        availability.policies = Policies::of(
            &schedule.phases[tail],
            &PolicyInput {
                hedges_won: 18,
                // 39 fast answers and one as slow as the tail.
                availability_times: std::iter::repeat_n(Duration::from_millis(6), 39)
                    .chain([Duration::from_millis(260)])
                    .collect(),
                ..PolicyInput::default()
            },
        );

        let prices = &mut phases[drop];
        *counts_of(prices, Backend::Prices) = CommandCounts {
            successes: 80,
            timeouts: 6,
            rejections: 140,
            limit_rejections: 140,
            fallbacks: 146,
            ..CommandCounts::default()
        };
        *counts_of(prices, Backend::PricesFixed) = CommandCounts {
            successes: 20,
            timeouts: 150,
            rejections: 70,
            fallbacks: 220,
            ..CommandCounts::default()
        };
        let ms = |values: &[u64]| values.iter().map(|&v| Duration::from_millis(v)).collect();
        prices.policies = Policies::of(
            &schedule.phases[drop],
            &PolicyInput {
                prices_times: ms(&[120, 150, 180]),
                prices_fixed_times: ms(&[300, 450]),
                limits: vec![20, 10, 5, 2, 3, 4, 2, 3, 4, 3],
                ..PolicyInput::default()
            },
        );
        phases[drop + 1].policies.limit = LimitSeen::of(&[3, 4, 5, 6, 7, 8]);
        (schedule, phases, [flaky, tail, drop])
    }

    fn named(checks: &[Check]) -> Vec<(&str, bool, &str)> {
        checks
            .iter()
            .map(|c| (c.name.as_str(), c.passed, c.detail.as_str()))
            .collect()
    }

    #[test]
    fn the_policy_checks_pass_with_their_numbers() {
        let (schedule, phases, _) = good_policies();
        let checks = policy_checks(&schedule, &phases, &[]);
        assert_eq!(
            named(&checks),
            [
                (
                    "GetRecommendations retried its backend's errors during `transient-errors`",
                    true,
                    "66 retries (up to 3 attempts) for 70 errors of 246 backend calls; 0 refused \
                     by the budget"
                ),
                (
                    "GetRecommendations succeeded at least 91% of the time during \
                     `transient-errors`",
                    true,
                    "97.8% of 180 executions succeeded, the backend answered 71.5% of its calls \
                     (a 30% error fault)"
                ),
                (
                    "GetRecommendations breaker stayed closed during `transient-errors`",
                    true,
                    "no opening"
                ),
                (
                    "GetAvailability hedges were sent and won during `long-tail`",
                    true,
                    "20 hedges sent after 40 ms, 18 answered first (at least 1.0 asked: a \
                     quarter of the tail's share of 40 calls); 0 refused by the budget"
                ),
                (
                    "availability answers of 250 ms or more cut to under half the tail's share \
                     during `long-tail`",
                    true,
                    "1 of 40 took 250 ms or more (at most 2.0; the backend delays 10%); p50 6.0 \
                     ms, p99 260.0 ms"
                ),
                (
                    "GetPrices adaptive limit settled at 10 or less (fixed: 20) during \
                     `capacity-drop`",
                    true,
                    "settled at 3 (second half's median), from 20 down to 2, per second: 20"
                ),
                (
                    "GetPrices adaptive limit rose again during `chaos`",
                    true,
                    "up to 8 (at least 6 asked: twice where it settled, 2 more at least), per \
                     second: 3"
                ),
                (
                    "GetPrices shed calls to its fallback and every page was answered during \
                     `capacity-drop`",
                    true,
                    "140 refused by the limit, 146 fallbacks; 10 of 10 pages answered"
                ),
                (
                    "GetPrices' admitted calls timed out at most half as often as \
                     GetPricesFixed's and answered as many during `capacity-drop`",
                    true,
                    "adaptive: 86 admitted, 6 timed out (7%), 3 answered (p50 150 ms, p99 180 \
                     ms); fixed: 170 admitted, 150 timed out (88%), 2 answered (p50 300 ms, p99 \
                     450 ms), 0 short-circuited"
                ),
            ]
        );
    }

    #[test]
    fn the_policy_checks_fail_when_a_policy_did_not_work() {
        let (schedule, mut phases, [flaky, tail, drop]) = good_policies();
        // Retries: too few, too many failed executions, the breaker opened.
        let retried = counts_of(&mut phases[flaky], Backend::Recommendations);
        retried.retries = 34;
        retried.successes = 163;
        retried.fallbacks = 17;
        // Hedging: none won, and 3 of 40 answers slow (at most 2 allowed).
        phases[tail].policies.hedges_won = 0;
        phases[tail].policies.availability_slow = 3;
        // The limit stayed high and never rose after; the adaptive side timed out as often.
        phases[drop].policies.limit = LimitSeen::of(&[20, 15, 12, 11, 11, 11]);
        phases[drop + 1].policies.limit = LimitSeen::of(&[11, 12]);
        // 80 of 166 admitted (48%) against the fixed side's 150 of 170 (88%).
        counts_of(&mut phases[drop], Backend::Prices).timeouts = 80;
        counts_of(&mut phases[drop], Backend::Prices).limit_rejections = 0;
        let opened = BreakerRecord {
            at_ms: millis(schedule.phases[flaky].start) + 100,
            command: "GetRecommendations".into(),
            change: Change::Opened,
            trigger: Some(Trigger::Health),
            open_ms: Some(500),
            cause: None,
        };
        let checks = policy_checks(&schedule, &phases, &[opened]);
        let failed: Vec<&str> = checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            failed,
            [
                "GetRecommendations retried its backend's errors during `transient-errors`",
                "GetRecommendations succeeded at least 91% of the time during `transient-errors`",
                "GetRecommendations breaker stayed closed during `transient-errors`",
                "GetAvailability hedges were sent and won during `long-tail`",
                "availability answers of 250 ms or more cut to under half the tail's share \
                 during `long-tail`",
                "GetPrices adaptive limit settled at 10 or less (fixed: 20) during \
                 `capacity-drop`",
                "GetPrices adaptive limit rose again during `chaos`",
                "GetPrices shed calls to its fallback and every page was answered during \
                 `capacity-drop`",
                "GetPrices' admitted calls timed out at most half as often as GetPricesFixed's \
                 and answered as many during `capacity-drop`",
            ]
        );
        assert_eq!(
            checks[2].detail,
            "GetRecommendations OPENED by error threshold for 500 ms at 19.30 s"
        );
    }

    #[test]
    fn the_success_floor_is_what_two_attempts_give() {
        assert_eq!(retry_success_floor(0.3), 1.0 - 0.09);
        assert_eq!(retry_success_floor(0.0), 1.0);
        assert_eq!(retry_success_floor(1.0), 0.0);
    }

    #[test]
    fn the_limit_is_summarised_by_where_it_settled_and_once_a_second() {
        let limits: Vec<u32> = (0..25).map(|i| 20 - (i % 20)).collect();
        let seen = LimitSeen::of(&limits);
        assert_eq!(
            seen,
            LimitSeen {
                samples: 25,
                first: 20,
                min: 1,
                max: 20,
                last: 16,
                // Samples 12 to 24: 8 down to 1, then 20 down to 16; their median is 7.
                settled: 7,
                per_second: vec![20, 10, 20],
            }
        );
        assert_eq!(LimitSeen::of(&[]), LimitSeen::default());
    }

    #[test]
    fn the_policies_text_shows_retries_hedges_and_both_limits() {
        let (schedule, phases, _) = good_policies();
        let report = Report {
            scenario: "tour".into(),
            description: String::new(),
            duration_ms: 40_000,
            rps: 50.0,
            dashboard_url: String::new(),
            gateway_url: String::new(),
            twin_url: None,
            seed: 1,
            checks: policy_checks(&schedule, &phases, &[]),
            phases,
            breaker_events: Vec::new(),
            final_breakers: BTreeMap::new(),
            passed: true,
            contrast: Vec::new(),
            fleet: None,
        };
        let mut text = String::new();
        report.policies_text(&mut text);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[..6],
            [
                "",
                "retries (GetRecommendations, up to 3 attempts through the breaker):",
                "  transient-errors   66 retries, 0 over budget; 176 of 180 calls succeeded, \
                 backend 176 of 246",
                "",
                "hedges (GetAvailability, one after 40 ms):",
                "  long-tail          20 sent, 18 won, 0 over budget; 1 of 40 took 250+ ms; p50 \
                 6.0, p99 260.0 ms",
            ]
        );
        assert!(
            lines.iter().all(|line| line.chars().count() <= 100),
            "{text}"
        );
        assert!(
            text.contains(
                "capacity-drop            3    2   20 |     3  150  180    6  140 |     2  300  \
                 450  150   70"
            ),
            "{text}"
        );
        assert!(
            text.ends_with("  GetPrices limit each second of `capacity-drop`: 20\n"),
            "{text}"
        );
    }

    #[test]
    fn the_fleet_section_sums_the_instances_and_names_their_notable_commands() {
        let counts = |failures, short_circuits| {
            BTreeMap::from([
                (
                    Backend::Recommendations,
                    CommandCounts {
                        failures,
                        timeouts: 1,
                        short_circuits,
                        fallbacks: failures + 1 + short_circuits,
                        ..CommandCounts::default()
                    },
                ),
                (
                    Backend::Catalog,
                    CommandCounts {
                        successes: 9,
                        ..CommandCounts::default()
                    },
                ),
            ])
        };
        let load = |sent| crate::load::InstanceLoad {
            sent,
            answered: sent,
            unanswered: 0,
        };
        let one = InstancePhase::new(1, &load(170), &counts(24, 150));
        let two = InstancePhase::new(2, &load(5), &counts(0, 5));
        assert_eq!(
            one.counts,
            FleetCounts {
                requests: 170,
                answered: 170,
                errors: 25,
                short_circuits: 150
            }
        );
        assert_eq!(
            one.commands["GetRecommendations"],
            InstanceCommand {
                executions: 175,
                errors: 25,
                failures: 24,
                timeouts: 1,
                short_circuits: 150
            }
        );
        assert_eq!(one.commands["GetTitle"].executions, 9);
        let phase = FleetPhase::new("outage".into(), vec![one, two]);
        assert_eq!(
            phase.fleet,
            FleetCounts {
                requests: 175,
                answered: 175,
                errors: 26,
                short_circuits: 155
            }
        );
        let fleet = FleetReport {
            instances: 2,
            store: "in-memory".into(),
            sync_interval_ms: 100,
            sync_bound_ms: 200,
            turbine: Some(TurbineReport {
                url: "http://127.0.0.1:7979/turbine.stream?cluster=demo".into(),
                messages: 40,
                reporting_hosts: BTreeMap::from([("GetTitle".to_owned(), 2)]),
                instances: vec![],
            }),
            members: vec![],
            phases: vec![phase],
            trips: vec![],
            checks: vec![Check::new("fleet".into(), true, "held".into())],
        };
        let text = fleet.to_text();
        assert!(
            text.contains(
                "fleet: 2 gateway instances, breaker state shared through in-memory (sync every \
                 100 ms; a trip reaches the others within 200 ms)"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "  turbine     http://127.0.0.1:7979/turbine.stream?cluster=demo  40 messages \
                 read; hosts per command: GetTitle 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("  outage             fleet 175 requests, 26 errors, 155 short-circuits"),
            "{text}"
        );
        assert!(
            text.contains("#1   170 req,   25 e,  150 sc  GetRecommendations 25e/150sc"),
            "{text}"
        );
        assert!(
            text.contains("#2     5 req,    1 e,    5 sc  GetRecommendations 1e/5sc"),
            "{text}"
        );
        assert!(text.contains("    PASS  fleet: held"), "{text}");
    }
}
