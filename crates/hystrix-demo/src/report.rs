//! The final report: per phase what the gateway answered and what its commands did, the
//! breakers' transitions, and the checks of the resilience promises (exit code 0 only if every
//! one held). Written as text and, with `--json`, as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::load::PhaseLoad;
use crate::scenario::{Backend, Phase, Schedule};
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
///   before kept their errors at or under [`HEALTHY_ERROR_LIMIT`];
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
    /// A table of one value per phase (rows) and backend (columns, headed `header(backend)`).
    fn backend_table(
        &self,
        out: &mut String,
        title: &str,
        header: fn(Backend) -> &'static str,
        cell: impl Fn(&PhaseReport, Backend) -> String,
    ) {
        let _ = write!(out, "\n{title:<18}");
        for backend in Backend::ALL {
            let _ = write!(out, " {:>19}", header(backend));
        }
        let _ = writeln!(out);
        for phase in &self.phases {
            let _ = write!(out, "{:<18}", phase.name);
            for backend in Backend::ALL {
                let _ = write!(out, " {:>19}", cell(phase, backend));
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
            Backend::command_key,
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
                Backend::command_key,
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
            Backend::name,
            |phase, backend| {
                let calls = phase.backend_calls.get(&backend).copied().unwrap_or(0);
                format!("{calls} ")
            },
        );

        if self.phases.iter().any(|p| p.unprotected.is_some()) {
            self.comparison(&mut out);
        }

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

    fn tour() -> Schedule {
        Scenario::load("tour")
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
            "GetRatings 0.0%, GetRecommendations 0.0%, GetAvailability 0.0%"
        );
        assert_eq!(
            details[12],
            "GetAvailability CLOSED, GetRatings CLOSED, GetRecommendations CLOSED, GetTitle CLOSED"
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
                "GetTitle 0.0%, GetRatings 0.0%, GetRecommendations 0.0%, GetAvailability 0.0%",
            ),
            (
                "healthy commands kept errors at or under 20% during `injected-faults`",
                "GetTitle 0.0%, GetRatings 0.0%, GetAvailability 0.0%",
            ),
            (
                "healthy commands kept errors at or under 20% during `injected-latency`",
                "GetRatings 0.0%, GetAvailability 0.0%",
            ),
            (
                "healthy commands kept errors at or under 20% during `recovery`",
                "GetRatings 0.0%, GetRecommendations 0.0%, GetAvailability 0.0%",
            ),
            (
                "every breaker closed at the end",
                "GetAvailability CLOSED, GetRatings CLOSED, GetRecommendations CLOSED, GetTitle \
                 CLOSED",
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
                    "not closed after 5.50 s"
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
                "GetTitle 30.0%, GetAvailability 0.0%"
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
            contrast: phase.contrast().into_iter().collect(),
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
                "GetAvailability 0.0%; not judged, forced by the operator: GetTitle 100.0% (the \
                 operator's circuitBreaker.forceOpen=true at 4.20 s, circuitBreaker.forceOpen \
                 removed at 5.00 s)"
            )
        );
        assert_eq!(
            failed(&checks),
            [(
                "healthy commands kept errors at or under 20% during `recovery`",
                "GetTitle 30.0%, GetRatings 0.0%, GetAvailability 0.0%"
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
                "GetRatings 0.0%, GetRecommendations 0.0%; not judged, forced by the operator: \
                 GetTitle 100.0% (the operator's circuitBreaker.forceOpen=true at 7.00 s)"
            )
        );
        assert_eq!(
            check(&held, "every breaker closed at the end"),
            (
                true,
                "GetAvailability CLOSED, GetRatings CLOSED, GetRecommendations CLOSED, GetTitle \
                 FORCED_OPEN; excused: GetTitle held open by the operator"
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
                "GetAvailability CLOSED, GetRatings OPEN, GetRecommendations CLOSED, GetTitle \
                 OPEN; excused: GetTitle OPEN after the operator's force-open, one sleep window \
                 at 9.80 s"
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
                "not closed after 5.50 s; not judged: the operator's \
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
}
