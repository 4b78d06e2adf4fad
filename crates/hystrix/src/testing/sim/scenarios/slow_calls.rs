//! The hang-to-OPEN study (issue 25): how soon a breaker opens when its dependency starts
//! hanging under steady load, with slow calls counted while still in flight
//! (`circuitBreaker.slowCall.countInFlight`, the default) and without (counted at their end:
//! the timeout).
//!
//! The [`Backend`] answers in about 20 ms (log-normal, median 20 ms, p99 50 ms) and, from
//! [`HANG_AT_MS`] (10 s, the default 10 s window full of successes by then) on, **hangs**: every
//! call that starts then never answers before the command's timeout (an hour more; the backend
//! stops a call its caller abandoned, and has workers for every call in flight). The load is
//! open and steady: [`RATE_PER_S`] (50) requests per second, evenly spaced, for
//! [`DURATION_MS`] (30 s). The command (`Backend`, group `Sim`) runs under SEMAPHORE isolation
//! (the simulation cannot run a THREAD pool: its threads are off the virtual clock), without a
//! fallback, with slow calls on (`circuitBreaker.slowCall.durationThresholdInMilliseconds`
//! [`SLOW_MS`], 500; `...rateThresholdPercentage` 50) and the breaker's other settings at
//! their defaults (volume 20, 50 % errors, 10 s window in 10 buckets, a health check every
//! 500 ms, at the first call after each interval's end). Each [`Case`] sets the semaphore's
//! permits, the timeout T and the window (TIME, or COUNT of the last 100 calls), and runs with
//! `countInFlight` on and off.
//!
//! A [`Trip`] gives the time from the hang to OPEN (exact, on the manual clock: the breaker's
//! listener reads it), what tripped it (slow calls, or the error percentage and the kind of
//! the latest failure: SEMAPHORE_REJECTED for a full bulkhead, TIMEOUT), and the calls that
//! waited on the hung dependency before OPEN (admitted, so each waited its whole timeout).
//! `cargo run -p hystrix-rs --release --features sim --example sim -- slow-call-study` prints
//! the table (BENCHMARKS.md).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::super::{Backend, Load, Phase, ServiceTime, Sim, SimError, SimOutcome};
use crate::circuit::{BreakerEventKind, CircuitBreakerEvent, CircuitBreakerListener};
use crate::clock::{Clock, ManualClock};
use crate::command::Command;
use crate::config::IsolationStrategy;
use crate::event::EventType;
use crate::testing::TestRegistry;

/// The load's rate: 50 requests per second, evenly spaced.
pub const RATE_PER_S: f64 = 50.0;

/// When the dependency starts hanging: 10 s.
pub const HANG_AT_MS: u64 = 10_000;

/// How long the load lasts: 30 s (20 s after the hang).
pub const DURATION_MS: u64 = 30_000;

/// The slow-call threshold: 500 ms (a slow-call rate of 50 % trips).
pub const SLOW_MS: u64 = 500;

/// The slow-call rate that trips: 50 %.
pub const SLOW_RATE: u32 = 50;

/// The window a [`Case`] trips on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Window {
    /// TIME (the default): 10 s in 10 buckets, checked every 500 ms.
    Time,
    /// COUNT: the last this many calls.
    Count(u32),
}

/// A configuration of the study: the semaphore's permits, the timeout T and the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Case {
    /// `execution.isolation.semaphore.maxConcurrentRequests`.
    pub permits: u32,
    /// The timeout T, in ms.
    pub timeout_ms: u64,
    /// The window.
    pub window: Window,
}

impl Case {
    /// Its name in a table: `SEMAPHORE 200, T = 5 s, TIME`.
    pub fn name(self) -> String {
        let window = match self.window {
            Window::Time => "TIME".to_string(),
            Window::Count(size) => format!("COUNT {size}"),
        };
        format!(
            "SEMAPHORE {}, T = {} s, {window}",
            self.permits,
            self.timeout_ms as f64 / 1000.0
        )
    }

    /// When its bulkhead fills after the hang, in ms (`None`: the timeout frees permits first).
    pub fn fills_after_ms(self) -> Option<u64> {
        let fill_ms = (f64::from(self.permits) * 1000.0 / RATE_PER_S) as u64;
        (fill_ms < self.timeout_ms).then_some(fill_ms)
    }

    fn command(self, count_in_flight: bool) -> crate::command::CommandBuilder {
        let cmd = Command::builder("Backend")
            .group("Sim")
            .isolation(IsolationStrategy::Semaphore)
            .semaphore_max_concurrent_requests(self.permits)
            .timeout(Duration::from_millis(self.timeout_ms))
            .property(
                "circuitBreaker.slowCall.durationThresholdInMilliseconds",
                SLOW_MS,
            )
            .property("circuitBreaker.slowCall.rateThresholdPercentage", SLOW_RATE)
            .property("circuitBreaker.slowCall.countInFlight", count_in_flight);
        match self.window {
            Window::Time => cmd,
            Window::Count(size) => cmd
                .property("circuitBreaker.window.type", "COUNT")
                .property("circuitBreaker.window.size", size),
        }
    }
}

const fn case(permits: u32, timeout_ms: u64, window: Window) -> Case {
    Case {
        permits,
        timeout_ms,
        window,
    }
}

/// The configurations of the study, in the order of its table: a large bulkhead (200 permits,
/// full after 4 s of hung calls) with T = 2 s, 5 s and 10 s; one that never fills (1 000
/// permits) with T = 10 s; a small one (10 permits, full after 0.2 s) with T = 5 s; and the
/// large one with a COUNT window of 100 calls, T = 2 s, 5 s and 10 s.
pub const CASES: [Case; 8] = [
    case(200, 2_000, Window::Time),
    case(200, 5_000, Window::Time),
    case(200, 10_000, Window::Time),
    case(1_000, 10_000, Window::Time),
    case(10, 5_000, Window::Time),
    case(200, 2_000, Window::Count(100)),
    case(200, 5_000, Window::Count(100)),
    case(200, 10_000, Window::Count(100)),
];

/// What tripped the breaker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TripKind {
    /// The slow-call rate.
    SlowCalls,
    /// The error percentage, the latest failure being of this kind (`SEMAPHORE_REJECTED`,
    /// `TIMEOUT`).
    Errors(String),
    /// Something else (the trip cause's words).
    Other(String),
}

impl TripKind {
    fn of(cause: &str) -> Self {
        if cause.starts_with("slow calls") {
            return TripKind::SlowCalls;
        }
        match cause.split_once("; last failure: ") {
            Some((_, last)) if cause.contains("failed") => TripKind::Errors(last.to_string()),
            _ => TripKind::Other(cause.to_string()),
        }
    }

    /// In a table: `slow calls`, `error % (last: TIMEOUT)`.
    pub fn label(&self) -> String {
        match self {
            TripKind::SlowCalls => "slow calls".to_string(),
            TripKind::Errors(last) => format!("error % (last: {last})"),
            TripKind::Other(cause) => cause.clone(),
        }
    }
}

/// One run's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trip {
    /// The configuration.
    pub case: Case,
    /// `circuitBreaker.slowCall.countInFlight`.
    pub count_in_flight: bool,
    /// From the hang to the first opening, in ms (`None`: it never opened).
    pub open_after_ms: Option<u64>,
    /// What tripped it.
    pub kind: Option<TripKind>,
    /// The trip cause, in words.
    pub cause: Option<String>,
    /// Requests that arrived after the hang and before OPEN and were admitted: each waited its
    /// whole timeout on the hung dependency.
    pub waited: u64,
    /// Requests that arrived after the hang and before OPEN and were refused by the full
    /// bulkhead.
    pub rejected: u64,
}

/// The breaker's first opening: when, on the clock, and why.
struct FirstOpening {
    clock: ManualClock,
    seen: Mutex<Option<(u64, String)>>,
}

impl CircuitBreakerListener for FirstOpening {
    fn on_event(&self, event: &CircuitBreakerEvent) {
        if let BreakerEventKind::Opened { cause, .. } = &event.kind {
            let mut seen = self.seen.lock();
            if seen.is_none() {
                *seen = Some((self.clock.now_ms(), cause.to_string()));
            }
        }
    }
}

/// One run of `case` with `countInFlight` on or off and `seed`.
///
/// # Errors
/// What the [`Sim`] returns.
pub fn run(case: Case, count_in_flight: bool, seed: u64) -> Result<Trip, SimError> {
    let mut listener = None;
    let test = TestRegistry::with_builder(|builder, clock| {
        let first = Arc::new(FirstOpening {
            clock: clock.clone(),
            seen: Mutex::new(None),
        });
        listener = Some(Arc::clone(&first));
        builder.circuit_breaker_listener(first)
    });
    let listener = listener.ok_or_else(|| SimError::Invalid("no listener".into()))?;
    let mut sim = Sim::with_registry(test);
    let backend = Backend::builder()
        .workers(2_000)
        .queue(0)
        .service_time(ServiceTime::lognormal(
            Duration::from_millis(20),
            Duration::from_millis(50),
        ))
        .phase(
            Phase::between(Duration::from_millis(HANG_AT_MS), Duration::MAX)
                .extra_latency(Duration::from_secs(3_600)),
        )
        .stops_abandoned_work(true)
        .seed(seed)
        .build(sim.clock())?;
    let cmd = case.command(count_in_flight).build_in(sim.registry())?;
    // Per request: its arrival and whether it was admitted (timed out) or refused by the
    // bulkhead.
    let requests: Arc<Mutex<Vec<(u64, bool, bool)>>> = Arc::default();
    let clock = Arc::clone(sim.clock());
    let load = Load::constant(RATE_PER_S, Duration::from_millis(DURATION_MS));
    sim.run_load(&load, |_| {
        let (cmd, call, requests) = (cmd.clone(), backend.call(), Arc::clone(&requests));
        let arrival = clock.now_ms();
        async move {
            let outcome = cmd.run_async(call).execute_async_outcome().await;
            let events = outcome.execution_result().execution_events();
            requests.lock().push((
                arrival,
                events.contains(EventType::Timeout),
                events.contains(EventType::SemaphoreRejected),
            ));
            SimOutcome::from_response(outcome.into_response())
        }
    })?;
    let seen = listener.seen.lock().clone();
    let open_ms = seen.as_ref().map_or(u64::MAX, |(at, _)| *at);
    let before_open = |pick: fn(&(u64, bool, bool)) -> bool| {
        requests
            .lock()
            .iter()
            .filter(|r| (HANG_AT_MS..open_ms).contains(&r.0) && pick(r))
            .count() as u64
    };
    Ok(Trip {
        case,
        count_in_flight,
        open_after_ms: seen.as_ref().map(|(at, _)| at.saturating_sub(HANG_AT_MS)),
        kind: seen.as_ref().map(|(_, cause)| TripKind::of(cause)),
        cause: seen.map(|(_, cause)| cause),
        waited: before_open(|r| r.1),
        rejected: before_open(|r| r.2),
    })
}

/// Every case of [`CASES`], `countInFlight` on then off, with `seed`.
///
/// # Errors
/// The first run's error.
pub fn study(seed: u64) -> Result<Vec<Trip>, SimError> {
    let mut trips = Vec::new();
    for case in CASES {
        for count_in_flight in [true, false] {
            trips.push(run(case, count_in_flight, seed)?);
        }
    }
    Ok(trips)
}

fn ms(value: Option<u64>) -> String {
    value.map_or_else(|| "never".to_string(), |ms| ms.to_string())
}

/// The study's table in Markdown, as BENCHMARKS.md shows it, then its conclusion.
pub fn markdown(trips: &[Trip]) -> String {
    let mut out = String::from(
        "| configuration | bulkhead full after | countInFlight | hang → OPEN (ms) | tripped by | \
         waited on the hung dependency before OPEN | rejected by the bulkhead before OPEN |\n\
         |---|---|---|---:|---|---:|---:|\n",
    );
    for trip in trips {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            trip.case.name(),
            trip.case
                .fills_after_ms()
                .map_or_else(|| "never (T first)".to_string(), |ms| format!("{ms} ms")),
            if trip.count_in_flight { "on" } else { "off" },
            ms(trip.open_after_ms),
            trip.kind
                .as_ref()
                .map_or_else(|| "-".to_string(), TripKind::label),
            trip.waited,
            trip.rejected,
        );
    }
    out.push('\n');
    out.push_str(&conclusion(trips));
    out.push('\n');
    out.push_str(CONCLUSION);
    out
}

/// What the study shows (seed 1; the simulation is exact, so any seed gives the same times).
pub const CONCLUSION: &str = "\
Counting slow calls in flight opens the breaker sooner while the bulkhead does not fill before
the timeout. With a COUNT window of 100 calls (2 s of load), OPEN comes 1.5 s after the hang
(the threshold and a health interval), against about T + 1 s without: a gain of about
T - threshold (1.48 s at T = 2 s); with T >= 5 s the 200 permits fill after 4 s and their
rejections open it at 4.98 s without, so the gain stops at 3.48 s. With the TIME window (10 s
of successes before the hang) the hung calls must outnumber the successes still in it: OPEN
comes 5.5 s after the hang whatever T, against about 5.5 s + T/2 without, a gain of about T/2
(1 s at T = 2 s, 5 s at T = 10 s with 1 000 permits), less once the bulkhead fills (T = 5 s:
1 s; T = 10 s: none, the rejections open it at 7.5 s either way). A small bulkhead (10
permits) fills at once: its rejections open the breaker at the same time either way. It never
opens later: a call counted slow while running is a request of the slow-call rate only, so it
never dilutes the error percentage, and its timeout counts as an error when it ends.
";

/// Per case, the gain of counting in flight (OPEN that much sooner, that many fewer calls
/// waiting), one line each.
pub fn conclusion(trips: &[Trip]) -> String {
    let mut out =
        String::from("Gain of countInFlight (OPEN sooner by; calls spared the wait):\n\n");
    for pair in trips.chunks(2) {
        let [on, off] = pair else { continue };
        let gain = match (on.open_after_ms, off.open_after_ms) {
            (Some(on_ms), Some(off_ms)) => format!("{} ms", off_ms as i64 - on_ms as i64),
            _ => "n/a".to_string(),
        };
        let _ = writeln!(
            out,
            "- {}: {gain}; {} calls",
            on.case.name(),
            off.waited as i64 - on.waited as i64
        );
    }
    out
}
