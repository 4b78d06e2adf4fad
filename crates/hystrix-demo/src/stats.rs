//! What the demo measures of its commands: event counts read from the registry's metrics (per
//! phase as differences of cumulative counts), and every circuit-breaker transition with its
//! time, heard as the registry's breaker listener.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hystrix::circuit::{BreakerEventKind, OpenTrigger};
use hystrix::{
    CircuitBreakerEvent, CircuitBreakerListener, CommandKey, CommandMetrics, EventNotifier,
    EventType, Registry, Status,
};
use hystrix_dashboard::admin::{AdminAction, AdminChange};
use serde::Serialize;

use crate::gateway::Gateway;
use crate::scenario::Backend;

/// What a gateway holds at one moment (or, in a report, at most during a phase).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Held {
    /// Gateway requests sent by the load and not answered yet.
    pub requests: u64,
    /// Backend calls under way, each holding a connection.
    pub connections: u64,
    /// Threads held in blocking backend calls (the protected gateway's `Catalog` pool
    /// threads busy, the twin's blocking threads in catalog calls).
    pub threads: u64,
}

impl Held {
    /// What the protected gateway holds now, with `load` sending its requests.
    pub fn protected(gateway: &Gateway, load: &crate::load::LoadGenerator) -> Held {
        Held::fleet(std::slice::from_ref(&gateway), load)
    }

    /// What the protected gateway instances hold now in all, with `load` sending their
    /// requests.
    pub fn fleet(gateways: &[&Gateway], load: &crate::load::LoadGenerator) -> Held {
        let threads = |gateway: &Gateway| {
            let pool = gateway.command(Backend::Catalog).thread_pool_metrics();
            pool.map_or(0, |pool| u64::from(pool.current_active_count))
        };
        Held {
            requests: load.in_flight(),
            connections: gateways.iter().map(|g| g.backend_calls_in_flight()).sum(),
            threads: gateways.iter().map(|g| threads(g)).sum(),
        }
    }

    /// The larger of each count.
    pub fn max(self, other: Held) -> Held {
        Held {
            requests: self.requests.max(other.requests),
            connections: self.connections.max(other.connections),
            threads: self.threads.max(other.threads),
        }
    }
}

/// Event counts of one command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CommandCounts {
    /// SUCCESS.
    pub successes: u64,
    /// FAILURE (errors from the backend, refused connections, 5xx answers).
    pub failures: u64,
    /// TIMEOUT.
    pub timeouts: u64,
    /// SHORT_CIRCUITED: refused at once by an open breaker.
    pub short_circuits: u64,
    /// THREAD_POOL_REJECTED, SEMAPHORE_REJECTED and LIMIT_REJECTED: refused by a full
    /// bulkhead or an adaptive concurrency limit.
    pub rejections: u64,
    /// LIMIT_REJECTED: of the rejections, those refused by an adaptive concurrency limit.
    pub limit_rejections: u64,
    /// RETRY: attempts made after a failed one.
    pub retries: u64,
    /// RETRY_BUDGET_EXHAUSTED: retries and hedges the retry budget refused.
    pub budget_exhausted: u64,
    /// HEDGE: hedges started beside a slow attempt.
    pub hedges: u64,
    /// HEDGE_CANCELLED: attempts cancelled because another answered first.
    pub hedges_cancelled: u64,
    /// Answers given by a fallback: FALLBACK_SUCCESS, and for `GetRatings` the ratings the
    /// collapser's per-request fallback gave.
    pub fallbacks: u64,
    /// FALLBACK_FAILURE and FALLBACK_REJECTION: the fallback could not answer either.
    pub fallback_failures: u64,
    /// RESPONSE_FROM_CACHE: answered by the request cache without an execution.
    pub cache_hits: u64,
}

impl CommandCounts {
    /// The cumulative counts of `metrics`.
    pub fn read(metrics: &CommandMetrics) -> CommandCounts {
        let count = |event| metrics.cumulative_count(event);
        CommandCounts {
            successes: count(EventType::Success),
            failures: count(EventType::Failure),
            timeouts: count(EventType::Timeout),
            short_circuits: count(EventType::ShortCircuited),
            rejections: count(EventType::ThreadPoolRejected)
                + count(EventType::SemaphoreRejected)
                + count(EventType::LimitRejected),
            limit_rejections: count(EventType::LimitRejected),
            retries: count(EventType::Retry),
            budget_exhausted: count(EventType::RetryBudgetExhausted),
            hedges: count(EventType::Hedge),
            hedges_cancelled: count(EventType::HedgeCancelled),
            fallbacks: count(EventType::FallbackSuccess),
            fallback_failures: count(EventType::FallbackFailure)
                + count(EventType::FallbackRejection),
            cache_hits: count(EventType::ResponseFromCache),
        }
    }

    /// The counts since `earlier` (each field's difference).
    pub fn since(&self, earlier: &CommandCounts) -> CommandCounts {
        CommandCounts {
            successes: self.successes.saturating_sub(earlier.successes),
            failures: self.failures.saturating_sub(earlier.failures),
            timeouts: self.timeouts.saturating_sub(earlier.timeouts),
            short_circuits: self.short_circuits.saturating_sub(earlier.short_circuits),
            rejections: self.rejections.saturating_sub(earlier.rejections),
            limit_rejections: self
                .limit_rejections
                .saturating_sub(earlier.limit_rejections),
            retries: self.retries.saturating_sub(earlier.retries),
            budget_exhausted: self
                .budget_exhausted
                .saturating_sub(earlier.budget_exhausted),
            hedges: self.hedges.saturating_sub(earlier.hedges),
            hedges_cancelled: self
                .hedges_cancelled
                .saturating_sub(earlier.hedges_cancelled),
            fallbacks: self.fallbacks.saturating_sub(earlier.fallbacks),
            fallback_failures: self
                .fallback_failures
                .saturating_sub(earlier.fallback_failures),
            cache_hits: self.cache_hits.saturating_sub(earlier.cache_hits),
        }
    }

    /// The sums of each field of both.
    pub fn plus(&self, other: &CommandCounts) -> CommandCounts {
        CommandCounts {
            successes: self.successes + other.successes,
            failures: self.failures + other.failures,
            timeouts: self.timeouts + other.timeouts,
            short_circuits: self.short_circuits + other.short_circuits,
            rejections: self.rejections + other.rejections,
            limit_rejections: self.limit_rejections + other.limit_rejections,
            retries: self.retries + other.retries,
            budget_exhausted: self.budget_exhausted + other.budget_exhausted,
            hedges: self.hedges + other.hedges,
            hedges_cancelled: self.hedges_cancelled + other.hedges_cancelled,
            fallbacks: self.fallbacks + other.fallbacks,
            fallback_failures: self.fallback_failures + other.fallback_failures,
            cache_hits: self.cache_hits + other.cache_hits,
        }
    }

    /// Executions that ended one way or another (cache hits are not executions).
    pub fn executions(&self) -> u64 {
        self.successes + self.errors()
    }

    /// Executions that did not succeed: failures, timeouts, short-circuits, rejections.
    pub fn errors(&self) -> u64 {
        self.failures + self.timeouts + self.short_circuits + self.rejections
    }

    /// Errors as a percentage of executions (0 with none), to one decimal.
    pub fn error_percent(&self) -> f64 {
        percent(self.errors(), self.executions())
    }
}

/// `part` of `whole` in percent, to one decimal; 0 when `whole` is 0.
pub fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        return 0.0;
    }
    (part as f64 * 1000.0 / whole as f64).round() / 10.0
}

/// What reached one backend, and the chaos injected into its command (cumulative, or over a
/// phase as differences).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackendCounts {
    /// Calls that reached the backend.
    pub calls: u64,
    /// Of those, answered with an error of its own (500, 503) or left hanging.
    pub errors: u64,
    /// CHAOS_INJECTED of its command, counted when injected.
    pub chaos_injected: u64,
}

impl BackendCounts {
    /// The counts since `earlier` (each field's difference).
    pub fn since(&self, earlier: &BackendCounts) -> BackendCounts {
        BackendCounts {
            calls: self.calls.saturating_sub(earlier.calls),
            errors: self.errors.saturating_sub(earlier.errors),
            chaos_injected: self.chaos_injected.saturating_sub(earlier.chaos_injected),
        }
    }
}

/// The cumulative counts of every backend's command now.
pub fn read_counts(registry: &Registry, gateway: &Gateway) -> BTreeMap<Backend, CommandCounts> {
    Backend::ALL
        .into_iter()
        .map(|backend| {
            let mut counts = registry
                .command_metrics(backend.command_key())
                .map(|metrics| CommandCounts::read(&metrics))
                .unwrap_or_default();
            if backend == Backend::Ratings {
                counts.fallbacks += gateway.rating_fallbacks();
            }
            (backend, counts)
        })
        .collect()
}

/// Each backend's counts summed over several instances' counts (a fleet's totals).
pub fn sum_counts(
    instances: &[BTreeMap<Backend, CommandCounts>],
) -> BTreeMap<Backend, CommandCounts> {
    let mut sum: BTreeMap<Backend, CommandCounts> = BTreeMap::new();
    for counts in instances {
        for (backend, counts) in counts {
            let total = sum.entry(*backend).or_default();
            *total = total.plus(counts);
        }
    }
    sum
}

/// A breaker's state as the reports write it.
pub fn state_name(status: Status) -> &'static str {
    match status {
        Status::Closed => "CLOSED",
        Status::Open => "OPEN",
        Status::HalfOpen => "HALF_OPEN",
    }
}

/// The state a command's breaker acts on now: the sticky `circuitBreaker.forceOpen` /
/// `forceClosed` properties (an operator's PUT on the admin route) win over the breaker's own
/// status, as in `/metrics` and the Hystrix stream.
pub fn circuit_state<C>(command: &hystrix::Command<C>) -> &'static str {
    forced_state(command).unwrap_or_else(|| state_name(command.circuit_breaker().status()))
}

/// FORCED_OPEN or FORCED_CLOSED while the sticky `circuitBreaker.forceOpen` / `forceClosed`
/// property holds the command's breaker.
fn forced_state<C>(command: &hystrix::Command<C>) -> Option<&'static str> {
    let props = command.properties();
    if props.circuit_breaker_force_open {
        Some("FORCED_OPEN")
    } else if props.circuit_breaker_force_closed {
        Some("FORCED_CLOSED")
    } else {
        None
    }
}

/// The state the live view shows for a command's breaker over the interval since its last
/// sample: the forced states as [`circuit_state`], otherwise the worst state the breaker was in
/// (OPEN, then HALF_OPEN, then CLOSED), so that an episode that opened and closed again
/// between two samples is not missed. Starts the next interval from the state now.
pub fn shown_state<C>(command: &hystrix::Command<C>, breakers: &BreakerLog) -> &'static str {
    // Read before taking the log's lock: bringing the status up to date may itself open the
    // breaker, and so call the listener.
    let now = command.circuit_breaker().status();
    let worst = breakers.worst_since_last(command.key().as_str(), now);
    forced_state(command).unwrap_or(state_name(worst))
}

/// How bad a state is for the live view: OPEN worst, then HALF_OPEN, then CLOSED.
fn severity(status: Status) -> u8 {
    match status {
        Status::Closed => 0,
        Status::HalfOpen => 1,
        Status::Open => 2,
    }
}

/// What happened to a breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// It opened.
    Opened,
    /// Its open time passed: trial calls are let through.
    HalfOpened,
    /// A trial succeeded: it closed.
    Closed,
    /// Opened by an operator for one sleep window (the admin route `force-open`, or the
    /// dashboard's Force open button); trials follow as usual.
    ForcedOpen,
    /// Closed by an operator (the admin route `force-close`).
    ForcedClosed,
    /// Reset by an operator (the admin route `reset`).
    Reset,
    /// Held open by an operator: the sticky property `circuitBreaker.forceOpen` set to `true`.
    HeldOpen,
    /// Held closed by an operator: the sticky property `circuitBreaker.forceClosed` set to
    /// `true`.
    HeldClosed,
    /// Let go by an operator: `circuitBreaker.forceOpen` or `forceClosed` set to `false` or
    /// removed; the breaker acts on its own state again.
    Released,
    /// A transition of a kind the library added later.
    Other,
}

impl Change {
    /// The state it enters, as the live view writes it (`released` for a let-go: the breaker's
    /// own state shows again).
    pub fn state(self) -> &'static str {
        match self {
            Change::Opened | Change::ForcedOpen => "OPEN",
            Change::HalfOpened => "HALF_OPEN",
            Change::Closed | Change::ForcedClosed | Change::Reset => "CLOSED",
            Change::HeldOpen => "FORCED_OPEN",
            Change::HeldClosed => "FORCED_CLOSED",
            Change::Released => "released",
            Change::Other => "changed",
        }
    }
}

/// What opened a breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The error percentage crossed its threshold.
    Health,
    /// A trial call failed.
    TrialFailed,
    /// An error classified trip-now (a 503 with Retry-After).
    TripNow,
    /// Something else (a shared state store).
    Other,
}

/// One breaker transition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakerRecord {
    /// When, in ms from the start of the run.
    pub at_ms: u64,
    /// The command key.
    pub command: String,
    /// What happened.
    pub change: Change,
    /// What opened it (openings only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<Trigger>,
    /// How long it stays open before a trial, in ms (openings only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_ms: Option<u64>,
    /// Why it opened, in words (openings only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

impl BreakerRecord {
    /// One line, e.g. `GetRecommendations OPENED by error threshold for 500 ms: 100% of 25
    /// requests failed ...`, or for an operator's action `GetTitle FORCED_OPEN by operator
    /// (circuitBreaker.forceOpen=true)`.
    pub fn describe(&self) -> String {
        if let Some(note) = self.operator_note() {
            return format!("{} {} {note}", self.command, self.change.state());
        }
        let what = match self.change {
            Change::Opened => "OPENED",
            Change::HalfOpened => "HALF-OPEN (trial)",
            Change::Closed => "CLOSED",
            _ => "changed",
        };
        let mut line = format!("{} {what}", self.command);
        if let Some(trigger) = self.trigger {
            line.push_str(&format!(" by {}", trigger.describe()));
        }
        if let Some(open_ms) = self.open_ms {
            line.push_str(&format!(" for {open_ms} ms"));
        }
        if let Some(cause) = &self.cause {
            line.push_str(&format!(": {cause}"));
        }
        line
    }

    /// For an operator's action, `by operator (...)` with what was done (see
    /// [`operator_action`](Self::operator_action)).
    pub fn operator_note(&self) -> Option<String> {
        self.operator_action()
            .map(|action| format!("by operator ({action})"))
    }

    /// For an operator's action, what was done: the property and its value
    /// (`circuitBreaker.forceOpen=true`), or the admin route (`force-open, one sleep window`).
    pub fn operator_action(&self) -> Option<&str> {
        match self.change {
            Change::ForcedOpen => Some("force-open, one sleep window"),
            Change::ForcedClosed => Some("force-close"),
            Change::Reset => Some("reset"),
            Change::HeldOpen | Change::HeldClosed | Change::Released => {
                Some(self.cause.as_deref().unwrap_or("a sticky property"))
            }
            _ => None,
        }
    }
}

impl Trigger {
    /// In words, as the transition lines write it.
    pub fn describe(self) -> &'static str {
        match self {
            Trigger::Health => "error threshold",
            Trigger::TrialFailed => "trial failed",
            Trigger::TripNow => "trip now",
            Trigger::Other => "shared state",
        }
    }
}

/// The sticky properties an operator holds a breaker with, as their names end.
const FORCE_PROPERTIES: [&str; 2] = ["circuitBreaker.forceOpen", "circuitBreaker.forceClosed"];

/// Every breaker transition of the run, with its time: the registry's breaker listener. Clones
/// share the log (one is given to the registry, one is read).
#[derive(Debug, Clone, Default)]
pub struct BreakerLog {
    inner: Arc<LogInner>,
}

#[derive(Debug, Default)]
struct LogInner {
    start: OnceLock<Instant>,
    records: Mutex<Vec<BreakerRecord>>,
    /// Per command key, the worst state its breaker was in since the live view last sampled
    /// it (see [`BreakerLog::worst_since_last`]).
    worst: Mutex<BTreeMap<String, Status>>,
}

impl BreakerLog {
    /// Times are measured from `start` (transitions before it are at 0).
    pub fn start(&self, start: Instant) {
        let _ = self.inner.start.set(start);
    }

    /// The transitions from the `from`-th on.
    pub fn since(&self, from: usize) -> Vec<BreakerRecord> {
        let records = self.records();
        records.get(from..).map(<[_]>::to_vec).unwrap_or_default()
    }

    /// The worst state `command`'s breaker was in since the last call for it: `now`, or worse
    /// if a transition since then entered a worse one. The next interval starts from `now`.
    pub fn worst_since_last(&self, command: &str, now: Status) -> Status {
        let mut worst = self.worst();
        let seen = worst.insert(command.to_owned(), now).unwrap_or(now);
        if severity(seen) > severity(now) {
            seen
        } else {
            now
        }
    }

    fn worst(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Status>> {
        self.inner
            .worst
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn records(&self) -> std::sync::MutexGuard<'_, Vec<BreakerRecord>> {
        self.inner
            .records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Milliseconds since the start of the run (0 before it).
    pub fn elapsed_ms(&self) -> u64 {
        self.inner.start.get().map_or(0, |start| {
            u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
        })
    }

    /// Records an operator's change made through the dashboard's admin routes, if it holds or
    /// lets go of a breaker: `circuitBreaker.forceOpen` or `forceClosed` of a command set or
    /// removed (of the `default` key: of every command of the demo; of a key the demo does not
    /// have: nothing). The one-time actions
    /// (force-open, force-close, reset) are not recorded here: the breaker listener hears them.
    pub fn on_admin_change(&self, change: &AdminChange) {
        let (name, value) = match &change.action {
            AdminAction::PropertySet { name, value } => (name, Some(value.as_str())),
            AdminAction::PropertyUnset { name } => (name, None),
            _ => return,
        };
        let Some((key, property)) = name
            .strip_prefix("hystrix.command.")
            .and_then(|rest| rest.split_once('.'))
            .filter(|(_, property)| FORCE_PROPERTIES.contains(property))
        else {
            return;
        };
        let holds = value.is_some_and(|value| value.trim().eq_ignore_ascii_case("true"));
        let change = match (holds, property.ends_with("forceOpen")) {
            (false, _) => Change::Released,
            (true, true) => Change::HeldOpen,
            (true, false) => Change::HeldClosed,
        };
        let cause = match value {
            Some(value) => format!("{property}={}", value.trim()),
            None => format!("{property} removed"),
        };
        // Of the demo's own commands only: a hold on a key the demo does not have (accepted by
        // the admin routes, as a configuration for a later key) holds nothing here.
        let keys: Vec<&str> = Backend::ALL
            .into_iter()
            .map(Backend::command_key)
            .filter(|command| key == "default" || key == *command)
            .collect();
        let at_ms = self.elapsed_ms();
        let mut records = self.records();
        for key in keys {
            records.push(BreakerRecord {
                at_ms,
                command: key.to_owned(),
                change,
                trigger: None,
                open_ms: None,
                cause: Some(cause.clone()),
            });
        }
    }
}

impl CircuitBreakerListener for BreakerLog {
    fn on_event(&self, event: &CircuitBreakerEvent) {
        let (change, trigger, open_ms, cause) = match &event.kind {
            BreakerEventKind::Opened {
                cause,
                trigger,
                open_duration_ms,
            } => {
                let trigger = match trigger {
                    OpenTrigger::Health => Trigger::Health,
                    OpenTrigger::TrialFailed => Trigger::TrialFailed,
                    OpenTrigger::TripNow => Trigger::TripNow,
                    _ => Trigger::Other,
                };
                (
                    Change::Opened,
                    Some(trigger),
                    Some(*open_duration_ms),
                    Some(cause.to_string()),
                )
            }
            BreakerEventKind::HalfOpened { .. } => (Change::HalfOpened, None, None, None),
            BreakerEventKind::Closed { .. } => (Change::Closed, None, None, None),
            BreakerEventKind::ForcedOpen => (Change::ForcedOpen, None, None, None),
            BreakerEventKind::ForcedClosed => (Change::ForcedClosed, None, None, None),
            BreakerEventKind::Reset => (Change::Reset, None, None, None),
            _ if event.is_transition() => (Change::Other, None, None, None),
            _ => return,
        };
        let entered = match change {
            Change::Opened | Change::ForcedOpen => Some(Status::Open),
            Change::HalfOpened => Some(Status::HalfOpen),
            _ => None,
        };
        if let Some(entered) = entered {
            let mut worst = self.worst();
            let seen = worst
                .entry(event.command_key.to_string())
                .or_insert(entered);
            if severity(entered) > severity(*seen) {
                *seen = entered;
            }
        }
        let record = BreakerRecord {
            at_ms: self.elapsed_ms(),
            command: event.command_key.to_string(),
            change,
            trigger,
            open_ms,
            cause,
        };
        self.records().push(record);
    }
}

/// CHAOS_INJECTED per command key, counted as each injection happens (the registry's event
/// notifier), not when its attempt ends: an attempt injected with a delay just before a phase
/// ends counts in that phase even if it times out in the next. Clones share the counts (one
/// is given to the registry, one is read).
#[derive(Debug, Clone, Default)]
pub struct ChaosLog {
    injected: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl ChaosLog {
    /// The injections into `command` so far.
    pub fn injected(&self, command: &str) -> u64 {
        self.counts().get(command).copied().unwrap_or(0)
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.injected
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl EventNotifier for ChaosLog {
    fn mark_event(&self, event: EventType, key: &CommandKey) {
        if event == EventType::ChaosInjected {
            *self.counts().entry(key.as_str().to_owned()).or_insert(0) += 1;
        }
    }
}

/// The `p`-th percentile of `sorted` (nearest rank); zero when empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use hystrix::Command;
    use hystrix::clock::ManualClock;
    use hystrix::testing::TestRegistry;

    #[test]
    fn counts_are_read_from_metrics_and_differ_between_reads() {
        let test = TestRegistry::new();
        let command = Command::builder("Counted")
            .group("G")
            .isolation(hystrix::IsolationStrategy::Semaphore)
            .build_in(test.registry())
            .unwrap();
        let ok = || command.run(|| Ok::<_, std::io::Error>(1)).execute();
        let failing = || {
            command
                .run(|| Err::<u32, _>(std::io::Error::other("down")))
                .fallback(|_| Ok::<_, std::io::Error>(0))
                .execute()
        };
        ok().unwrap();
        let before = CommandCounts::read(&command.metrics());
        ok().unwrap();
        failing().unwrap();
        failing().unwrap();
        let after = CommandCounts::read(&command.metrics());
        let delta = after.since(&before);
        assert_eq!(
            delta,
            CommandCounts {
                successes: 1,
                failures: 2,
                fallbacks: 2,
                ..CommandCounts::default()
            }
        );
        assert_eq!(
            (delta.executions(), delta.errors(), delta.error_percent()),
            (3, 2, 66.7)
        );
    }

    #[test]
    fn error_percent_counts_every_kind_of_error() {
        let counts = CommandCounts {
            successes: 5,
            failures: 1,
            timeouts: 1,
            short_circuits: 2,
            rejections: 1,
            fallbacks: 5,
            fallback_failures: 0,
            cache_hits: 7,
            // Retries and hedges are attempts, not executions: they change nothing here.
            limit_rejections: 1,
            retries: 4,
            budget_exhausted: 1,
            hedges: 3,
            hedges_cancelled: 3,
        };
        assert_eq!(
            (counts.executions(), counts.errors(), counts.error_percent()),
            (10, 5, 50.0)
        );
        assert_eq!(CommandCounts::default().error_percent(), 0.0);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let ms = |v: u64| Duration::from_millis(v);
        let sorted: Vec<Duration> = (1..=200).map(ms).collect();
        assert_eq!(percentile(&sorted, 50.0), ms(100));
        assert_eq!(percentile(&sorted, 99.0), ms(198));
        assert_eq!(percentile(&sorted, 100.0), ms(200));
        assert_eq!(percentile(&[ms(7)], 99.0), ms(7));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }

    #[test]
    fn the_log_records_openings_with_trigger_and_closings() {
        let log = BreakerLog::default();
        let clock = ManualClock::new();
        let registry = Registry::builder()
            .clock(clock.clone())
            .circuit_breaker_listener(log.clone())
            .build();
        let command = Command::builder("Logged")
            .group("G")
            .isolation(hystrix::IsolationStrategy::Semaphore)
            .circuit_breaker_sleep_window(Duration::from_millis(500))
            .classify(|_: &std::io::Error| hystrix::Class::TripNow {
                min_open: Some(Duration::from_secs(2)),
            })
            .build_in(&registry)
            .unwrap();
        let _ = command
            .run(|| Err::<u32, _>(std::io::Error::other("503")))
            .execute();
        clock.advance_ms(2001);
        command
            .run(|| Ok::<_, std::io::Error>(1))
            .execute()
            .unwrap();
        let records = log.since(0);
        let changes: Vec<_> = records
            .iter()
            .map(|r| (r.change, r.trigger, r.open_ms))
            .collect();
        assert_eq!(
            changes,
            [
                (Change::Opened, Some(Trigger::TripNow), Some(2000)),
                (Change::HalfOpened, None, None),
                (Change::Closed, None, None),
            ]
        );
        assert_eq!(
            records[0].describe(),
            "Logged OPENED by trip now for 2000 ms: the error asked to trip now and stay open at \
             least 2000 ms"
        );
        assert_eq!(log.since(2).len(), 1);
        assert_eq!(log.since(9).len(), 0);
        // By hand, e.g. from the dashboard's admin routes.
        command.circuit_breaker().force_open();
        let forced = log.since(3);
        assert_eq!(forced.len(), 1);
        assert_eq!(
            forced[0].describe(),
            "Logged OPEN by operator (force-open, one sleep window)"
        );
    }

    /// The real flow: an operator PUTs and DELETEs the sticky properties on the dashboard's
    /// admin routes; the log records each hold and let-go with its property, the state reads
    /// FORCED_OPEN while held, and other properties are not recorded.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_operator_holding_a_breaker_through_the_admin_routes_is_recorded() {
        let log = BreakerLog::default();
        let registry = Registry::builder()
            .circuit_breaker_listener(log.clone())
            .build();
        let command = Command::builder("GetTitle")
            .group("G")
            .isolation(hystrix::IsolationStrategy::Semaphore)
            .build_in(&registry)
            .unwrap();
        let operator = log.clone();
        let dashboard = hystrix_dashboard::Dashboard::builder(registry.clone())
            .admin()
            .on_admin_change(move |change| operator.on_admin_change(change))
            .build();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(dashboard.serve_on(listener));
        let property = |name: &str| {
            format!("http://{addr}/hystrix/admin/config/properties/hystrix.command.{name}")
        };
        let (hold, timeout, let_go) = (
            property("GetTitle.circuitBreaker.forceOpen"),
            property("GetTitle.execution.isolation.thread.timeoutInMilliseconds"),
            property("GetTitle.circuitBreaker.forceOpen"),
        );
        let held = tokio::task::spawn_blocking(move || {
            let client = crate::http::blocking_client();
            let agent = client.agent();
            let put = agent.put(&hold).send("true").unwrap().status().as_u16();
            let other = agent.put(&timeout).send("300").unwrap().status().as_u16();
            (put, other)
        })
        .await
        .unwrap();
        assert_eq!(held, (200, 200));
        assert_eq!(circuit_state(&command), "FORCED_OPEN");
        let deleted = tokio::task::spawn_blocking(move || {
            let client = crate::http::blocking_client();
            client
                .agent()
                .delete(&let_go)
                .call()
                .unwrap()
                .status()
                .as_u16()
        })
        .await
        .unwrap();
        assert_eq!(deleted, 200);
        assert_eq!(circuit_state(&command), "CLOSED");

        let seen: Vec<(String, Change, Option<String>)> = log
            .since(0)
            .into_iter()
            .map(|r| (r.command, r.change, r.cause))
            .collect();
        let record = |change, cause: &str| ("GetTitle".to_owned(), change, Some(cause.to_owned()));
        assert_eq!(
            seen,
            [
                record(Change::HeldOpen, "circuitBreaker.forceOpen=true"),
                record(Change::Released, "circuitBreaker.forceOpen removed"),
            ]
        );
        assert_eq!(
            log.since(0)[0].describe(),
            "GetTitle FORCED_OPEN by operator (circuitBreaker.forceOpen=true)"
        );
    }

    #[test]
    fn a_hold_on_the_default_key_is_recorded_for_every_command() {
        let log = BreakerLog::default();
        log.on_admin_change(&AdminChange::new(
            None,
            AdminAction::PropertySet {
                name: "hystrix.command.default.circuitBreaker.forceClosed".into(),
                value: " TRUE ".into(),
            },
        ));
        log.on_admin_change(&AdminChange::new(
            None,
            AdminAction::ForceOpen {
                command: "GetTitle".into(),
            },
        ));
        log.on_admin_change(&AdminChange::new(
            None,
            AdminAction::PropertySet {
                name: "hystrix.command.NoSuch.circuitBreaker.forceOpen".into(),
                value: "true".into(),
            },
        ));
        let seen: Vec<(String, Change, Option<String>)> = log
            .since(0)
            .into_iter()
            .map(|r| (r.command, r.change, r.cause))
            .collect();
        let cause = Some("circuitBreaker.forceClosed=TRUE".to_owned());
        assert_eq!(
            seen,
            Backend::ALL.map(|b| (
                b.command_key().to_owned(),
                Change::HeldClosed,
                cause.clone()
            ))
        );
    }
}
