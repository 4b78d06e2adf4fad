//! Several gateway instances behind one load generator (`--instances N`): each has its own
//! registry, gateway port and Hystrix stream, and their breakers share state through one state
//! store (in memory, or Redis with `--redis URL`).
//!
//! The load is spread over the instances in turn, except around a phase where a backend is down
//! (an outage or a Retry-After storm). There the demo shows what the shared store is for: that
//! backend's command is called through instance 1 only until instance 1's breaker opens; then,
//! once the store's sync bound has passed, instances 2 to N take the load for the rest of that
//! open period, and short-circuit the command without having seen one of its failures
//! ([`route`], checked by [`trip_check`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::report::Check;
use crate::scenario::{Backend, Phase, Schedule};
use crate::stats::{BreakerRecord, Change, CommandCounts, Trigger};

/// The most instances `--instances` takes.
pub const MAX_INSTANCES: u8 = 5;

/// How often each instance's registry syncs with the state store, in ms (the library's default
/// is 500 ms; the demo's phases are seconds long).
pub const SYNC_INTERVAL_MS: u64 = 100;

/// The store's sync bound, in ms: a trip on one instance opens the breakers of the others
/// within it. The instance that trips publishes at once (a local trip schedules a sync round
/// right away), or at worst in its next round (one interval); each other instance reads it in
/// its next round (one interval more). With Redis, Pub/Sub pushes the trip within milliseconds
/// and polling stays the backstop, so the bound holds there too.
pub const SYNC_BOUND_MS: u64 = 2 * SYNC_INTERVAL_MS;

/// How long before a phase with a backend down the load already goes to instance 1 only, in
/// ms: so that no page sent to another instance before the phase still calls that backend when
/// it goes down.
pub const PIN_LEAD_MS: u64 = 200;

/// How long before instance 1's open period ends instances 2 to N stop taking the load, in
/// ms: once the shared open period is over any instance may get the probe permit, and only
/// instance 1 is meant to call the backend.
pub const PIN_MARGIN_MS: u64 = 100;

/// An opening of instance 1's breaker: when, and for how long, in ms from the start of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opening {
    /// When it opened, in ms from the start of the run.
    pub at_ms: u64,
    /// How long it stays open before a trial, in ms.
    pub open_ms: u64,
}

impl Opening {
    /// The span, in ms from the start of the run, in which instances 2 to N take the load:
    /// from the sync bound after the opening until [`PIN_MARGIN_MS`] before it ends (empty when
    /// the open period is shorter than both).
    pub fn window(self) -> std::ops::Range<u64> {
        let start = self.at_ms.saturating_add(SYNC_BOUND_MS);
        let end = self
            .at_ms
            .saturating_add(self.open_ms)
            .saturating_sub(PIN_MARGIN_MS);
        start..end.max(start)
    }
}

/// Where the run is, for routing one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// No backend is down, nor about to be: the load goes to every instance in turn.
    Spread,
    /// A backend is down (or goes down within [`PIN_LEAD_MS`]); `opened` is instance 1's
    /// first opening of its command in that phase, if it opened yet.
    Pinned {
        /// Instance 1's first opening of the down backend's command in the phase.
        opened: Option<Opening>,
    },
}

/// The instance (0-based: 0 is instance 1) that request number `index`, sent `at_ms` into the
/// run, goes to, among `instances`:
/// - one instance: always 0;
/// - [`Moment::Spread`]: every instance in turn (`index % instances`);
/// - [`Moment::Pinned`]: instance 0, except within the [`Opening::window`] of instance 1's
///   opening, where instances 1 to N-1 take it in turn.
pub fn route(instances: usize, index: u64, at_ms: u64, moment: Moment) -> usize {
    if instances <= 1 {
        return 0;
    }
    let n = instances as u64;
    match moment {
        Moment::Spread => (index % n) as usize,
        Moment::Pinned {
            opened: Some(opening),
        } if opening.window().contains(&at_ms) => 1 + (index % (n - 1)) as usize,
        Moment::Pinned { .. } => 0,
    }
}

/// The backend down in `phase` whose command the fleet check follows: the first one down (an
/// outage or a Retry-After storm), if any.
pub fn down_backend(phase: &Phase) -> Option<Backend> {
    phase
        .faults
        .iter()
        .find(|(_, fault)| fault.is_down())
        .map(|(backend, _)| *backend)
}

/// The phase (its index) whose down backend pins the load `at_ms` into the run: the phase
/// running then, or the next one if it starts within [`PIN_LEAD_MS`]; `None` when neither has
/// a backend down.
pub fn pinned_phase(schedule: &Schedule, at_ms: u64) -> Option<(usize, Backend)> {
    let at = Duration::from_millis(at_ms);
    let soon = Duration::from_millis(at_ms.saturating_add(PIN_LEAD_MS));
    [schedule.phase_at(at), schedule.phase_at(soon)]
        .into_iter()
        .flatten()
        .find_map(|index| down_backend(&schedule.phases[index]).map(|b| (index, b)))
}

/// Instance 1's first opening of `command` at or after `from_ms` (not one made by the store):
/// from its breaker log.
pub fn first_opening(events: &[BreakerRecord], command: &str, from_ms: u64) -> Option<Opening> {
    events
        .iter()
        .find(|r| {
            r.command == command
                && r.change == Change::Opened
                && r.at_ms >= from_ms
                && r.trigger != Some(Trigger::Other)
        })
        .map(|r| Opening {
            at_ms: r.at_ms,
            open_ms: r.open_ms.unwrap_or(0),
        })
}

/// What one instance other than the first did in a phase with a backend down: its breaker log,
/// and its counts of the down backend's command over the phase.
#[derive(Debug, Clone, Copy)]
pub struct Follower<'a> {
    /// The instance's number (from 1).
    pub instance: u32,
    /// Its breaker transitions.
    pub events: &'a [BreakerRecord],
    /// Its counts of the command over the phase.
    pub counts: CommandCounts,
}

/// The fleet check of `phase`, whose backend `backend` is down: instance 1 (`leader`: its
/// breaker log) opened the backend's command in the phase on its own counts (not from the
/// store); every other instance's breaker was opened by the store within [`SYNC_BOUND_MS`] of
/// it, and never reached the backend in the phase (0 failures, 0 timeouts, 0 successes); and
/// the other instances short-circuited the command at least once in all (at a low `--rps` the
/// window after the bound may hold a single request, for one of them).
pub fn trip_check(
    phase: &Phase,
    backend: Backend,
    leader: &[BreakerRecord],
    followers: &[Follower<'_>],
) -> Check {
    let command = backend.command_key();
    let start = millis(phase.start);
    let end = millis(phase.end());
    let last = followers.last().map_or(1, |f| f.instance);
    let name = format!(
        "{command} tripped on instance 1 short-circuited instances 2-{last} within \
         {SYNC_BOUND_MS} ms, without their seeing a failure, during `{}`",
        phase.name
    );
    let Some(opened) = first_opening(leader, command, start).filter(|o| o.at_ms <= end) else {
        return Check {
            name,
            passed: false,
            detail: format!(
                "instance 1 did not open {command} between {} and {}",
                seconds(start),
                seconds(end)
            ),
        };
    };
    let mut passed = true;
    let mut short_circuits = 0;
    let mut parts = vec![format!(
        "instance 1 opened it at {} for {} ms",
        seconds(opened.at_ms),
        opened.open_ms
    )];
    for follower in followers {
        let by_store = follower.events.iter().find(|r| {
            r.command == command
                && r.change == Change::Opened
                && r.trigger == Some(Trigger::Other)
                && r.at_ms >= opened.at_ms
                && r.at_ms <= end
        });
        let counts = follower.counts;
        let reached = counts.successes + counts.failures + counts.timeouts;
        let executions = counts.executions();
        let delay = by_store.map(|r| r.at_ms - opened.at_ms);
        let timely = delay.is_some_and(|ms| ms <= SYNC_BOUND_MS);
        passed &= timely && reached == 0;
        short_circuits += counts.short_circuits;
        let seen = match delay {
            Some(ms) => format!("opened by the store {ms} ms later"),
            None => "not opened by the store".to_owned(),
        };
        parts.push(format!(
            "instance {} {seen}, called it {executions} {}: {} short-circuited, {} failures, \
             {} timeouts, {} successes",
            follower.instance,
            if executions == 1 { "time" } else { "times" },
            counts.short_circuits,
            counts.failures,
            counts.timeouts,
            counts.successes
        ));
    }
    Check {
        name,
        passed: passed && short_circuits > 0,
        detail: format!("{} (bound {SYNC_BOUND_MS} ms)", parts.join("; ")),
    }
}

/// The cluster name of the fleet's merged stream (`/turbine.stream?cluster=demo`).
pub const CLUSTER: &str = "demo";

/// What a client of the fleet's merged stream saw: the messages, and each command's latest
/// `reportingHosts` (the number of instances merged into it). Clones share it.
#[derive(Debug, Clone, Default)]
pub struct StreamSeen(Arc<Mutex<Seen>>);

#[derive(Debug, Default)]
struct Seen {
    messages: u64,
    hosts: BTreeMap<String, u64>,
}

impl StreamSeen {
    /// Takes in one line of the stream: a `data: {json}` line of a `HystrixCommand` message
    /// updates its command's `reportingHosts`; every `data:` line is counted.
    pub fn line(&self, line: &str) {
        let Some(data) = line.strip_prefix("data:") else {
            return;
        };
        let mut seen = self.lock();
        seen.messages += 1;
        let Ok(message) = serde_json::from_str::<serde_json::Value>(data.trim()) else {
            return;
        };
        if message["type"] != "HystrixCommand" {
            return;
        }
        if let (Some(name), Some(hosts)) =
            (message["name"].as_str(), message["reportingHosts"].as_u64())
        {
            seen.hosts.insert(name.to_owned(), hosts);
        }
    }

    /// The `data:` messages seen so far.
    pub fn messages(&self) -> u64 {
        self.lock().messages
    }

    /// Each command's latest `reportingHosts`, by command key.
    pub fn hosts(&self) -> BTreeMap<String, u64> {
        self.lock().hosts.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The check of the fleet's merged stream: a client of `url` read messages, every one of the
/// `instances` stream URLs was reporting to the turbine at the end (`reporting`: URL and
/// whether it reported), and each command's latest merged message counted every instance
/// (`reportingHosts` = `instances`).
pub fn turbine_check(
    url: &str,
    instances: u64,
    reporting: &[(String, bool)],
    seen: &StreamSeen,
) -> Check {
    let hosts = seen.hosts();
    let messages = seen.messages();
    let all_reporting =
        reporting.len() as u64 == instances && reporting.iter().all(|(_, reporting)| *reporting);
    let all_merged = !hosts.is_empty() && hosts.values().all(|&n| n == instances);
    let counted: Vec<String> = hosts
        .iter()
        .map(|(command, n)| format!("{command} {n}"))
        .collect();
    let silent: Vec<&str> = reporting
        .iter()
        .filter(|(_, reporting)| !reporting)
        .map(|(url, _)| url.as_str())
        .collect();
    let mut detail = format!(
        "{messages} messages read from {url}; reportingHosts: {}",
        if counted.is_empty() {
            "no command seen".to_owned()
        } else {
            counted.join(", ")
        }
    );
    detail.push_str(&format!(
        "; {} of {instances} instances reporting",
        reporting.iter().filter(|(_, r)| *r).count()
    ));
    if !silent.is_empty() {
        detail.push_str(&format!(" (not: {})", silent.join(", ")));
    }
    Check {
        name: format!("the fleet's merged stream counted all {instances} instances"),
        passed: messages > 0 && all_reporting && all_merged,
        detail,
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn seconds(ms: u64) -> String {
    format!("{:.2} s", ms as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    fn opened(at_ms: u64, trigger: Trigger, open_ms: u64) -> BreakerRecord {
        BreakerRecord {
            at_ms,
            command: "GetRecommendations".into(),
            change: Change::Opened,
            trigger: Some(trigger),
            open_ms: Some(open_ms),
            cause: None,
        }
    }

    #[test]
    fn one_instance_takes_everything() {
        let pinned = Moment::Pinned { opened: None };
        for moment in [Moment::Spread, pinned] {
            assert_eq!(
                (0..5).map(|i| route(1, i, 100, moment)).collect::<Vec<_>>(),
                [0; 5]
            );
        }
    }

    #[test]
    fn spread_goes_round_the_instances() {
        let targets: Vec<usize> = (0..7).map(|i| route(3, i, 0, Moment::Spread)).collect();
        assert_eq!(targets, [0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn pinned_goes_to_instance_one_but_inside_the_window_after_its_opening() {
        let opening = Opening {
            at_ms: 10_000,
            open_ms: 500,
        };
        // From the sync bound after the opening (200 ms) to the margin before it ends (100 ms).
        assert_eq!(opening.window(), 10_200..10_400);
        let pinned = Moment::Pinned {
            opened: Some(opening),
        };
        let at = |ms: u64| -> Vec<usize> { (0..4).map(|i| route(3, i, ms, pinned)).collect() };
        assert_eq!(at(9_900), [0, 0, 0, 0]);
        assert_eq!(at(10_000), [0, 0, 0, 0]);
        assert_eq!(at(10_199), [0, 0, 0, 0]);
        assert_eq!(at(10_200), [1, 2, 1, 2]);
        assert_eq!(at(10_399), [1, 2, 1, 2]);
        assert_eq!(at(10_400), [0, 0, 0, 0]);
        // Not opened yet: instance 1.
        let waiting = Moment::Pinned { opened: None };
        assert_eq!(route(3, 1, 10_300, waiting), 0);
        // Five instances: 2 to 5 in turn.
        let five: Vec<usize> = (0..5).map(|i| route(5, i, 10_250, pinned)).collect();
        assert_eq!(five, [1, 2, 3, 4, 1]);
        // A Retry-After opening of 1000 ms leaves 700 ms.
        let long = Opening {
            at_ms: 0,
            open_ms: 1000,
        };
        assert_eq!(long.window(), 200..900);
        // An open period too short for both leaves none.
        let short = Opening {
            at_ms: 50,
            open_ms: 250,
        };
        assert_eq!(short.window(), 250..250);
        assert!(short.window().is_empty());
    }

    #[test]
    fn the_phase_with_a_backend_down_pins_from_just_before_it() {
        // 2 s of `outage`: warm-up 0-500 ms, outage 500-1200 ms, recovery 1200-2000 ms.
        let schedule = Scenario::load("outage")
            .unwrap()
            .schedule(Duration::from_secs(2))
            .unwrap();
        assert_eq!(pinned_phase(&schedule, 0), None);
        assert_eq!(pinned_phase(&schedule, 299), None);
        assert_eq!(
            pinned_phase(&schedule, 300),
            Some((1, Backend::Recommendations))
        );
        assert_eq!(
            pinned_phase(&schedule, 1199),
            Some((1, Backend::Recommendations))
        );
        assert_eq!(pinned_phase(&schedule, 1200), None);
        assert_eq!(
            down_backend(&schedule.phases[1]),
            Some(Backend::Recommendations)
        );
        assert_eq!(down_backend(&schedule.phases[2]), None);
    }

    #[test]
    fn the_first_opening_is_instance_ones_own_from_the_phase_on() {
        let events = [
            opened(400, Trigger::Health, 500),
            opened(1_000, Trigger::Other, 300),
            opened(1_100, Trigger::Health, 500),
            opened(1_700, Trigger::TrialFailed, 500),
        ];
        assert_eq!(
            first_opening(&events, "GetRecommendations", 500),
            Some(Opening {
                at_ms: 1_100,
                open_ms: 500
            })
        );
        assert_eq!(first_opening(&events, "GetTitle", 0), None);
        assert_eq!(first_opening(&events, "GetRecommendations", 1_800), None);
    }

    fn outage_phase() -> Phase {
        let schedule = Scenario::load("outage")
            .unwrap()
            .schedule(Duration::from_secs(20))
            .unwrap();
        // 5 s to 12 s.
        schedule.phases[1].clone()
    }

    fn short_circuited(n: u64) -> CommandCounts {
        CommandCounts {
            short_circuits: n,
            fallbacks: n,
            ..CommandCounts::default()
        }
    }

    #[test]
    fn the_trip_check_holds_when_the_others_follow_in_time_without_a_failure() {
        let phase = outage_phase();
        let leader = [opened(5_400, Trigger::Health, 500)];
        let two = [opened(5_412, Trigger::Other, 488)];
        let three = [opened(5_600, Trigger::Other, 300)];
        let check = trip_check(
            &phase,
            Backend::Recommendations,
            &leader,
            &[
                Follower {
                    instance: 2,
                    events: &two,
                    counts: short_circuited(5),
                },
                Follower {
                    instance: 3,
                    events: &three,
                    counts: short_circuited(4),
                },
            ],
        );
        assert_eq!(
            check.name,
            "GetRecommendations tripped on instance 1 short-circuited instances 2-3 within 200 \
             ms, without their seeing a failure, during `outage`"
        );
        assert!(check.passed, "{}", check.detail);
        assert_eq!(
            check.detail,
            "instance 1 opened it at 5.40 s for 500 ms; instance 2 opened by the store 12 ms \
             later, called it 5 times: 5 short-circuited, 0 failures, 0 timeouts, 0 successes; \
             instance 3 opened by the store 200 ms later, called it 4 times: 4 short-circuited, \
             0 failures, 0 timeouts, 0 successes (bound 200 ms)"
        );
    }

    #[test]
    fn the_trip_check_fails_late_or_on_a_failure_or_without_a_call() {
        let phase = outage_phase();
        let leader = [opened(5_400, Trigger::Health, 500)];
        let late = [opened(5_601, Trigger::Other, 300)];
        let timely = [opened(5_450, Trigger::Other, 450)];
        let check = |events: &[BreakerRecord], counts| {
            trip_check(
                &phase,
                Backend::Recommendations,
                &leader,
                &[Follower {
                    instance: 2,
                    events,
                    counts,
                }],
            )
        };
        let late_check = check(&late, short_circuited(3));
        assert!(!late_check.passed);
        assert!(
            late_check
                .detail
                .contains("instance 2 opened by the store 201 ms later"),
            "{}",
            late_check.detail
        );
        let one_failure = CommandCounts {
            failures: 1,
            ..short_circuited(3)
        };
        assert!(!check(&timely, one_failure).passed);
        let one_timeout = CommandCounts {
            timeouts: 1,
            ..short_circuited(3)
        };
        assert!(!check(&timely, one_timeout).passed);
        // Opened in time, but never called: nothing shows it short-circuits.
        assert!(!check(&timely, CommandCounts::default()).passed);
        assert!(check(&timely, short_circuited(1)).passed);
        // Of two others, one called it (a single request in the window, at a low rate): the
        // other's breaker was opened in time all the same.
        let two_others = trip_check(
            &phase,
            Backend::Recommendations,
            &leader,
            &[
                Follower {
                    instance: 2,
                    events: &timely,
                    counts: short_circuited(1),
                },
                Follower {
                    instance: 3,
                    events: &timely,
                    counts: CommandCounts::default(),
                },
            ],
        );
        assert!(two_others.passed, "{}", two_others.detail);
        assert!(
            two_others
                .detail
                .contains("instance 3 opened by the store 50 ms later, called it 0 times"),
            "{}",
            two_others.detail
        );
        // Its own trip (health) is not the store's.
        let own = [opened(5_450, Trigger::Health, 500)];
        let own_check = check(&own, short_circuited(3));
        assert!(!own_check.passed);
        assert!(
            own_check
                .detail
                .contains("instance 2 not opened by the store")
        );
        // Instance 1 never opened in the phase (only before it).
        let before = [opened(4_000, Trigger::Health, 500)];
        let none = trip_check(&phase, Backend::Recommendations, &before, &[]);
        assert!(!none.passed);
        assert_eq!(
            none.detail,
            "instance 1 did not open GetRecommendations between 5.00 s and 12.00 s"
        );
    }

    #[test]
    fn the_stream_seen_keeps_each_commands_latest_host_count() {
        let seen = StreamSeen::default();
        for line in [
            "ping: ",
            "",
            r#"data: {"type":"HystrixCommand","name":"GetTitle","reportingHosts":2}"#,
            r#"data: {"type":"HystrixThreadPool","name":"Catalog","reportingHosts":3}"#,
            r#"data: {"type":"HystrixCommand","name":"GetTitle","reportingHosts":3}"#,
            r#"data: {"type":"HystrixCommand","name":"GetRatings","reportingHosts":3}"#,
            "data: not json",
        ] {
            seen.line(line);
        }
        assert_eq!(seen.messages(), 5);
        assert_eq!(
            seen.hosts(),
            BTreeMap::from([("GetRatings".to_owned(), 3), ("GetTitle".to_owned(), 3)])
        );
        let reporting = |flags: [bool; 3]| -> Vec<(String, bool)> {
            flags
                .iter()
                .enumerate()
                .map(|(k, &r)| (format!("http://127.0.0.1:{}/hystrix.stream", 8000 + k), r))
                .collect()
        };
        let url = "http://127.0.0.1:7979/turbine.stream?cluster=demo";
        let check = turbine_check(url, 3, &reporting([true; 3]), &seen);
        assert_eq!(
            check.name,
            "the fleet's merged stream counted all 3 instances"
        );
        assert!(check.passed, "{}", check.detail);
        assert_eq!(
            check.detail,
            "5 messages read from http://127.0.0.1:7979/turbine.stream?cluster=demo; \
             reportingHosts: GetRatings 3, GetTitle 3; 3 of 3 instances reporting"
        );
        let silent = turbine_check(url, 3, &reporting([true, false, true]), &seen);
        assert!(!silent.passed);
        assert!(
            silent.detail.ends_with(
                "2 of 3 instances reporting (not: http://127.0.0.1:8001/hystrix.stream)"
            ),
            "{}",
            silent.detail
        );
        seen.line(r#"data: {"type":"HystrixCommand","name":"GetPrices","reportingHosts":2}"#);
        assert!(!turbine_check(url, 3, &reporting([true; 3]), &seen).passed);
        assert!(!turbine_check(url, 3, &reporting([true; 3]), &StreamSeen::default()).passed);
    }
}
