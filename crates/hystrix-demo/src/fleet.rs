//! Several gateway instances behind one load generator (`--instances N`): each has its own
//! registry, gateway port and Hystrix stream, and their breakers share state through one state
//! store (in memory, or Redis with `--redis URL`).
//!
//! The load is spread over the instances in turn, except around a phase where a backend is down
//! (an outage or a Retry-After storm). There the demo shows what the shared store is for: that
//! backend's command is called through instance 1 only until instance 1's breaker opens; then,
//! once the store's sync bound has passed, instances 2 to N take the load until just before that
//! open period ends, and short-circuit the command without having seen one of its failures
//! ([`route`]); their counts are taken then ([`snapshot_at`]) and checked ([`trip_check`]).
//! After it the load is spread again: the fleet shares the trials (one instance probes at a
//! time, whichever gets the store's permit).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

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
/// - [`Moment::Pinned`]: instance 0 until the [`Opening::window`] of instance 1's opening,
///   instances 1 to N-1 in turn within it, every instance in turn after it.
pub fn route(instances: usize, index: u64, at_ms: u64, moment: Moment) -> usize {
    if instances <= 1 {
        return 0;
    }
    let n = instances as u64;
    match moment {
        Moment::Spread => (index % n) as usize,
        Moment::Pinned {
            opened: Some(opening),
        } => {
            let window = opening.window();
            if at_ms < window.start {
                0
            } else if at_ms < window.end {
                1 + (index % (n - 1)) as usize
            } else {
                (index % n) as usize
            }
        }
        Moment::Pinned { opened: None } => 0,
    }
}

/// When the other instances' counts of the down backend's command are taken for the check,
/// in ms from the start of the run: half the margin after the window ends, so that the
/// requests sent to them in it are done (a short-circuit answers at once), and before the
/// open period ends (the first moment another instance could get the store's probe permit).
pub fn snapshot_at(opening: Opening) -> u64 {
    opening.window().end + PIN_MARGIN_MS / 2
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
/// and its counts of the down backend's command from the phase's start to the snapshot
/// ([`snapshot_at`]).
#[derive(Debug, Clone, Copy)]
pub struct Follower<'a> {
    /// The instance's number (from 1).
    pub instance: u32,
    /// Its breaker transitions.
    pub events: &'a [BreakerRecord],
    /// Its counts of the command from the phase's start to the snapshot.
    pub counts: CommandCounts,
}

/// Instance 1's trip in a phase with a backend down, and how the others followed: the numbers
/// of [`trip_check`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Trip {
    /// The phase.
    pub phase: String,
    /// The down backend's command.
    pub command: String,
    /// When instance 1 opened it on its own counts, in ms from the start of the run (absent:
    /// it did not in the phase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opened_at_ms: Option<u64>,
    /// For how long, in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_ms: Option<u64>,
    /// Each other instance.
    pub followers: Vec<FollowerTrip>,
}

/// How one other instance followed instance 1's trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FollowerTrip {
    /// Its number, from 1.
    pub instance: u32,
    /// How long after instance 1's opening the store opened its breaker, in ms (absent: it
    /// did not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opened_after_ms: Option<u64>,
    /// Its executions of the command from the phase's start to the snapshot.
    pub executions: u64,
    /// Of those, short-circuited.
    pub short_circuits: u64,
    /// Of those, failed.
    pub failures: u64,
    /// Of those, timed out.
    pub timeouts: u64,
    /// Of those, answered by the backend.
    pub successes: u64,
}

/// The numbers of the fleet check of `phase`, whose backend `backend` is down: instance 1's
/// first opening of its command in the phase (`leader`: its breaker log; not one made by the
/// store), and for each other instance the store's opening after it and its counts.
pub fn trip(
    phase: &Phase,
    backend: Backend,
    leader: &[BreakerRecord],
    followers: &[Follower<'_>],
) -> Trip {
    let command = backend.command_key();
    let start = millis(phase.start);
    let end = millis(phase.end());
    let opened = first_opening(leader, command, start).filter(|o| o.at_ms <= end);
    Trip {
        phase: phase.name.clone(),
        command: command.to_owned(),
        opened_at_ms: opened.map(|o| o.at_ms),
        open_ms: opened.map(|o| o.open_ms),
        followers: followers
            .iter()
            .map(|follower| {
                let by_store = opened.and_then(|opened| {
                    follower.events.iter().find(|r| {
                        r.command == command
                            && r.change == Change::Opened
                            && r.trigger == Some(Trigger::Other)
                            && r.at_ms >= opened.at_ms
                            && r.at_ms <= end
                    })
                });
                let counts = follower.counts;
                FollowerTrip {
                    instance: follower.instance,
                    opened_after_ms: by_store
                        .zip(opened)
                        .map(|(r, opened)| r.at_ms - opened.at_ms),
                    executions: counts.executions(),
                    short_circuits: counts.short_circuits,
                    failures: counts.failures,
                    timeouts: counts.timeouts,
                    successes: counts.successes,
                }
            })
            .collect(),
    }
}

/// The fleet check of a [`Trip`] in `phase`: instance 1 opened the command in the phase on its
/// own counts; every other instance's breaker was opened by the store within
/// [`SYNC_BOUND_MS`] of it, and had not reached the backend by the snapshot (0 failures, 0
/// timeouts, 0 successes); and the other instances short-circuited the command at least once
/// in all (at a low `--rps` the window may hold a single request, for one of them).
pub fn trip_check(phase: &Phase, trip: &Trip) -> Check {
    let last = trip.followers.last().map_or(1, |f| f.instance);
    let name = format!(
        "{}, tripped on instance 1, short-circuited instances 2-{last} within {SYNC_BOUND_MS} ms, \
         without their seeing a failure, during `{}`",
        trip.command, trip.phase
    );
    let (Some(at_ms), Some(open_ms)) = (trip.opened_at_ms, trip.open_ms) else {
        return Check {
            name,
            passed: false,
            detail: format!(
                "instance 1 did not open {} between {} and {}",
                trip.command,
                seconds(millis(phase.start)),
                seconds(millis(phase.end()))
            ),
        };
    };
    let mut passed = true;
    let mut short_circuits = 0;
    let mut parts = vec![format!(
        "instance 1 opened it at {} for {open_ms} ms",
        seconds(at_ms)
    )];
    for follower in &trip.followers {
        let timely = follower
            .opened_after_ms
            .is_some_and(|ms| ms <= SYNC_BOUND_MS);
        let reached = follower.successes + follower.failures + follower.timeouts;
        passed &= timely && reached == 0;
        short_circuits += follower.short_circuits;
        let seen = match follower.opened_after_ms {
            Some(ms) => format!("opened by the store {ms} ms later"),
            None => "not opened by the store".to_owned(),
        };
        parts.push(format!(
            "instance {} {seen}, called it {} {}: {} short-circuited, {} failures, {} \
             timeouts, {} successes",
            follower.instance,
            follower.executions,
            if follower.executions == 1 {
                "time"
            } else {
                "times"
            },
            follower.short_circuits,
            follower.failures,
            follower.timeouts,
            follower.successes
        ));
    }
    Check {
        name,
        passed: passed && short_circuits > 0,
        detail: format!(
            "{} (bound {SYNC_BOUND_MS} ms; counted until {})",
            parts.join("; "),
            seconds(snapshot_at(Opening { at_ms, open_ms }))
        ),
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
    fn pinned_goes_to_instance_one_then_the_others_in_the_window_then_every_one() {
        let opening = Opening {
            at_ms: 10_000,
            open_ms: 500,
        };
        // From the sync bound after the opening (200 ms) to the margin before it ends (100 ms).
        assert_eq!(opening.window(), 10_200..10_400);
        // The others' counts are taken half the margin after it, before the open period ends.
        assert_eq!(snapshot_at(opening), 10_450);
        let pinned = Moment::Pinned {
            opened: Some(opening),
        };
        let at = |ms: u64| -> Vec<usize> { (0..4).map(|i| route(3, i, ms, pinned)).collect() };
        assert_eq!(at(9_900), [0, 0, 0, 0]);
        assert_eq!(at(10_000), [0, 0, 0, 0]);
        assert_eq!(at(10_199), [0, 0, 0, 0]);
        assert_eq!(at(10_200), [1, 2, 1, 2]);
        assert_eq!(at(10_399), [1, 2, 1, 2]);
        assert_eq!(at(10_400), [0, 1, 2, 0]);
        assert_eq!(at(12_000), [0, 1, 2, 0]);
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
        assert_eq!(snapshot_at(long), 950);
        // An open period too short for both leaves none: spread from the bound on.
        let short = Opening {
            at_ms: 50,
            open_ms: 250,
        };
        assert_eq!(short.window(), 250..250);
        let short = Moment::Pinned {
            opened: Some(short),
        };
        assert_eq!(route(3, 1, 249, short), 0);
        assert_eq!(route(3, 1, 250, short), 1);
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

    /// The trip of instance 1 `leader` and the followers' logs and counts, and its check.
    fn checked(
        phase: &Phase,
        leader: &[BreakerRecord],
        followers: &[(&[BreakerRecord], CommandCounts)],
    ) -> (Trip, Check) {
        let followers: Vec<Follower<'_>> = followers
            .iter()
            .enumerate()
            .map(|(k, (events, counts))| Follower {
                instance: k as u32 + 2,
                events,
                counts: *counts,
            })
            .collect();
        let trip = trip(phase, Backend::Recommendations, leader, &followers);
        let check = trip_check(phase, &trip);
        (trip, check)
    }

    #[test]
    fn the_trip_check_holds_when_the_others_follow_in_time_without_a_failure() {
        let phase = outage_phase();
        let leader = [opened(5_400, Trigger::Health, 500)];
        let two = [opened(5_412, Trigger::Other, 488)];
        let three = [opened(5_600, Trigger::Other, 300)];
        let (trip, check) = checked(
            &phase,
            &leader,
            &[(&two, short_circuited(5)), (&three, short_circuited(4))],
        );
        assert_eq!(
            trip,
            Trip {
                phase: "outage".into(),
                command: "GetRecommendations".into(),
                opened_at_ms: Some(5_400),
                open_ms: Some(500),
                followers: vec![
                    FollowerTrip {
                        instance: 2,
                        opened_after_ms: Some(12),
                        executions: 5,
                        short_circuits: 5,
                        failures: 0,
                        timeouts: 0,
                        successes: 0,
                    },
                    FollowerTrip {
                        instance: 3,
                        opened_after_ms: Some(200),
                        executions: 4,
                        short_circuits: 4,
                        failures: 0,
                        timeouts: 0,
                        successes: 0,
                    },
                ],
            }
        );
        assert_eq!(
            check.name,
            "GetRecommendations, tripped on instance 1, short-circuited instances 2-3 within 200 \
             ms, without their seeing a failure, during `outage`"
        );
        assert!(check.passed, "{}", check.detail);
        assert_eq!(
            check.detail,
            "instance 1 opened it at 5.40 s for 500 ms; instance 2 opened by the store 12 ms \
             later, called it 5 times: 5 short-circuited, 0 failures, 0 timeouts, 0 successes; \
             instance 3 opened by the store 200 ms later, called it 4 times: 4 short-circuited, \
             0 failures, 0 timeouts, 0 successes (bound 200 ms; counted until 5.85 s)"
        );
    }

    #[test]
    fn the_trip_check_fails_late_or_on_a_failure_or_without_a_call() {
        let phase = outage_phase();
        let leader = [opened(5_400, Trigger::Health, 500)];
        let late = [opened(5_601, Trigger::Other, 300)];
        let timely = [opened(5_450, Trigger::Other, 450)];
        let check =
            |events: &[BreakerRecord], counts| checked(&phase, &leader, &[(events, counts)]).1;
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
        let one_success = CommandCounts {
            successes: 1,
            ..short_circuited(3)
        };
        assert!(!check(&timely, one_success).passed);
        // Opened in time, but never called: nothing shows it short-circuits.
        assert!(!check(&timely, CommandCounts::default()).passed);
        assert!(check(&timely, short_circuited(1)).passed);
        // Of two others, one called it (a single request in the window, at a low rate): the
        // other's breaker was opened in time all the same.
        let (_, two_others) = checked(
            &phase,
            &leader,
            &[
                (&timely, short_circuited(1)),
                (&timely, CommandCounts::default()),
            ],
        );
        assert!(two_others.passed, "{}", two_others.detail);
        assert!(
            two_others.detail.contains(
                "instance 2 opened by the store 50 ms later, called it 1 time: 1 short-circuited"
            ),
            "{}",
            two_others.detail
        );
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
        let (trip, none) = checked(&phase, &before, &[]);
        assert_eq!((trip.opened_at_ms, trip.open_ms), (None, None));
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
