//! The final report: per phase what the gateway answered and what its commands did, the
//! breakers' transitions, and the checks of the resilience promises (exit code 0 only if every
//! one held). Written as text and, with `--json`, as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::load::PhaseLoad;
use crate::scenario::{Backend, Phase, Schedule};
use crate::stats::{BreakerRecord, Change, CommandCounts, Trigger, percentile};

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
    /// The resilience promises checked.
    pub checks: Vec<Check>,
    /// Whether every check held.
    pub passed: bool,
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

/// A command's counts in a phase, with its error percentage.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CommandReport {
    /// The counts.
    #[serde(flatten)]
    pub counts: CommandCounts,
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
    /// Executions that failed (an error from the backend or no connection).
    pub failures: u64,
    /// Per command key.
    pub commands: BTreeMap<String, CommandReport>,
    /// Calls that reached each backend (short-circuited and rejected ones never do).
    pub backend_calls: BTreeMap<Backend, u64>,
    /// The first errors of unanswered requests.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unanswered_errors: Vec<String>,
}

impl PhaseReport {
    /// The report of `phase` from its load, its commands' counts and the calls that reached
    /// each backend (the differences over it).
    pub fn new(
        phase: &Phase,
        load: &PhaseLoad,
        counts: &BTreeMap<Backend, CommandCounts>,
        backend_calls: &BTreeMap<Backend, u64>,
    ) -> PhaseReport {
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
            commands: counts
                .iter()
                .map(|(backend, counts)| {
                    let report = CommandReport {
                        counts: *counts,
                        error_percent: counts.error_percent(),
                    };
                    (backend.command_key().to_owned(), report)
                })
                .collect(),
            backend_calls: backend_calls.clone(),
            unanswered_errors: load.errors.clone(),
        }
    }

    fn error_percent(&self, backend: Backend) -> f64 {
        self.commands
            .get(backend.command_key())
            .map_or(0.0, |command| command.error_percent)
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
/// - in each phase, the commands of backends healthy in it and in the phase before kept their
///   errors at or under [`HEALTHY_ERROR_LIMIT`];
/// - when the last phase has no fault, every breaker was closed at the end.
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

    for phase in &schedule.phases {
        let (start, end) = (millis(phase.start), millis(phase.end()));
        for (backend, fault) in phase.faults.iter().filter(|(_, f)| f.is_down()) {
            let command = backend.command_key();
            let of_command = |record: &&BreakerRecord| record.command == command;
            let trip_now = fault.retry_after_s.is_some();
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
            checks.push(Check::new(name, passed, detail));

            let closed = events
                .iter()
                .filter(of_command)
                // A close that follows an opening of the phase (both may fall on its end).
                .find(|r| {
                    r.change == Change::Closed
                        && r.at_ms >= end
                        && opened.is_some_and(|opened| r.at_ms >= opened.at_ms)
                });
            let detail = match closed {
                Some(record) => format!(
                    "closed at {}, {} after the phase ended",
                    seconds(record.at_ms),
                    seconds(record.at_ms - end)
                ),
                None => format!("not closed after {}", seconds(end)),
            };
            checks.push(Check::new(
                format!("{command} breaker closed after `{}`", phase.name),
                closed.is_some(),
                detail,
            ));
        }
    }

    for (index, (phase, report)) in schedule.phases.iter().zip(phases).enumerate() {
        let healthy = schedule.settled_healthy(index);
        if healthy.is_empty() {
            continue;
        }
        let seen: Vec<(Backend, f64)> = healthy
            .iter()
            .map(|&backend| (backend, report.error_percent(backend)))
            .collect();
        let detail = seen
            .iter()
            .map(|(backend, errors)| format!("{} {errors:.1}%", backend.command_key()))
            .collect::<Vec<_>>()
            .join(", ");
        checks.push(Check::new(
            format!(
                "healthy commands kept errors at or under {HEALTHY_ERROR_LIMIT:.0}% during `{}`",
                phase.name
            ),
            seen.iter()
                .all(|(_, errors)| *errors <= HEALTHY_ERROR_LIMIT),
            detail,
        ));
    }

    if schedule
        .phases
        .last()
        .is_some_and(|last| last.faulty().next().is_none())
    {
        let detail = final_breakers
            .iter()
            .map(|(command, state)| format!("{command} {state}"))
            .collect::<Vec<_>>()
            .join(", ");
        checks.push(Check::new(
            "every breaker closed at the end".to_owned(),
            !final_breakers.is_empty() && final_breakers.values().all(|state| *state == "CLOSED"),
            detail,
        ));
    }
    checks
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

        self.backend_table(
            &mut out,
            "errors % (* fault)",
            Backend::command_key,
            |phase, backend| {
                let mark = if phase.faults.contains_key(&backend) {
                    "*"
                } else {
                    " "
                };
                format!("{:.1}{mark}", phase.error_percent(backend))
            },
        );
        self.backend_table(
            &mut out,
            "backend calls",
            Backend::name,
            |phase, backend| {
                let calls = phase.backend_calls.get(&backend).copied().unwrap_or(0);
                format!("{calls} ")
            },
        );

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
        let calls = BTreeMap::from([(Backend::Catalog, 4), (Backend::Ratings, 2)]);
        let report = PhaseReport::new(&schedule.phases[1], &load, &counts, &calls);
        assert_eq!(report.backend_calls, calls);
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
}
