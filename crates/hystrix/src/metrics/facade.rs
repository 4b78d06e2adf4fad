//! Events, latencies and circuit-breaker transitions through the [`metrics`] facade (feature
//! `metrics`), under Prometheus-style names (listed below). The application
//! installs the recorder (e.g. `metrics-exporter-prometheus`); with none installed the calls do
//! nothing.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `hystrix_command_events_total` | counter | `command`, `group`, `event` (snake_case event name, e.g. `short_circuited`, `retry`, `retry_budget_exhausted`, `hedge`, `hedge_cancelled`, `limit_rejected`, `throttled`, `slow_call`, `chaos_injected`) |
//! | `hystrix_command_latency_execute_seconds` | histogram, seconds | `command`, `group` (executions whose run started) |
//! | `hystrix_circuit_breaker_transitions_total` | counter | `command`, `group`, `from`, `to` (`closed`, `open`, `half_open`) |
//!
//! Events are counted as many times as they happened: an execution of three attempts adds 2 to
//! `failure` and 2 to `retry` if its last attempt succeeded, and one latency sample; a hedged
//! execution adds 1 to `hedge` per attempt started beside a slow one and 1 to `hedge_cancelled`
//! per attempt that lost the race; an execution the adaptive concurrency limit refused adds 1
//! to `limit_rejected` (and its fallback's event) and no latency sample (no user code ran); an
//! attempt adaptive throttling refused adds 1 to `throttled`, likewise; an attempt slower than
//! `circuitBreaker.slowCall.durationThresholdInMilliseconds` adds 1 to `slow_call` beside its
//! outcome's event (`success` or `failure`, ...); an attempt chaos injection changed adds 1 to
//! `chaos_injected` beside its outcome's event, and an injected fault's latency sample is that
//! of a run that failed at once (its injected delay, if any; see [`chaos`](crate::chaos)).
//!
//! The facade has no gauges: the adaptive limit, its executions in flight and its queue, the
//! throttling probability, the slow-call rate (as the concurrent executions) are read from the
//! registry's snapshots, e.g. the dashboard crate's `/metrics`
//! (`hystrix_command_adaptive_limit*`, `hystrix_command_throttle_*`,
//! `hystrix_command_slow_call_ratio`).
//!
//! `group` is the command's group key. `from` is the state the facade last saw the breaker
//! enter (a breaker starts `closed`). The manual override counts as the transition it makes:
//! `force_open()` trips the breaker (`to="open"`), `force_close()` and `reset()` close it
//! (`to="closed"`). The sticky `circuitBreaker.forceOpen` / `forceClosed` properties are not
//! transitions (the breaker's own state does not change; `/metrics` of the dashboard crate
//! shows them as the `forced_open` / `forced_closed` state). The breakers of one command's
//! keys ([`breaker_per_key`](crate::command::CommandBuilder::breaker_per_key)) are tracked
//! apart and counted in the command's series.
//!
//! ```
//! use hystrix::metrics::facade::MetricsFacade;
//! use hystrix::Registry;
//!
//! let facade = MetricsFacade::new();
//! let registry = Registry::builder()
//!     .event_notifier(facade.clone())
//!     .circuit_breaker_listener(facade)
//!     .build();
//! # drop(registry);
//! ```
//!
//! The dashboard crate's `/metrics` writes the first two under the same names, kinds and
//! labels (the exporter chooses a histogram's buckets: give it
//! [`LATENCY_BUCKET_BOUNDS_SECONDS`](crate::metrics::LATENCY_BUCKET_BOUNDS_SECONDS) for
//! `hystrix_command_latency_execute_seconds`, e.g. with `metrics-exporter-prometheus`'s
//! `set_buckets_for_metric`), and much more: the total latency, the breaker's state, the
//! error ratio, the thread pools and collapsers, which the repository's Prometheus rules also
//! read. Use one of the two for Prometheus, not both. The facade's `_sum` adds each latency
//! as a float of seconds, so it may read `0.9650000000000003` where `/metrics`, which adds
//! whole ms, reads `0.965`.
//!
//! Install the recorder before the first execution: as the `metrics` crate advises, each
//! command's handles are resolved once, at its first execution, and a handle resolved while no
//! recorder is installed stays a no-op.

use std::collections::HashMap;
use std::sync::Arc;

use metrics::{Counter, Histogram, Unit, counter, describe_counter, describe_histogram, histogram};
use parking_lot::{Mutex, RwLock};

use crate::circuit::{BreakerEventKind, CircuitBreakerEvent, CircuitBreakerListener};
use crate::config::IsolationStrategy;
use crate::event::{EventCounts, EventNotifier, EventType};
use crate::key::{CommandKey, GroupKey, ThreadPoolKey};

/// Counter of every event of every execution, by command and event.
pub const EVENTS_TOTAL: &str = "hystrix_command_events_total";
/// Histogram of execution latency in seconds, by command.
pub const LATENCY_EXECUTE_SECONDS: &str = "hystrix_command_latency_execute_seconds";
/// Counter of circuit-breaker transitions, by command, the state left and the state entered.
pub const BREAKER_TRANSITIONS_TOTAL: &str = "hystrix_circuit_breaker_transitions_total";

/// A breaker: its command, and its key for a command with a breaker per key.
type BreakerId = (CommandKey, Option<Arc<str>>);

/// The handles of one command key, resolved once (labels are not hashed per call).
struct Handles {
    events: Vec<Counter>,
    latency: Histogram,
}

/// An [`EventNotifier`] and [`CircuitBreakerListener`] that records through the `metrics`
/// facade; register it on a registry (both roles, or either). Cheap to clone (clones share
/// their handles).
#[derive(Clone, Default)]
pub struct MetricsFacade {
    commands: Arc<RwLock<HashMap<CommandKey, Arc<Handles>>>>,
    /// Each command's group key, heard at its creation (the notifier role).
    groups: Arc<RwLock<HashMap<CommandKey, GroupKey>>>,
    /// The state each breaker (command, breaker key) last entered.
    breaker_states: Arc<Mutex<HashMap<BreakerId, &'static str>>>,
}

impl std::fmt::Debug for MetricsFacade {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsFacade")
            .field("commands", &self.commands.read().len())
            .finish()
    }
}

impl MetricsFacade {
    /// A facade with no handles resolved yet (each command key's on its first execution).
    pub fn new() -> Self {
        MetricsFacade::default()
    }

    fn handles(&self, key: &CommandKey) -> Arc<Handles> {
        if let Some(handles) = self.commands.read().get(key) {
            return Arc::clone(handles);
        }
        describe();
        let command = key.to_string();
        let group = self.group_of(key);
        let handles = Arc::new(Handles {
            events: EventType::ALL
                .iter()
                .map(|&event| {
                    // Never counted (as the registry's snapshots): no series at all.
                    if matches!(
                        event,
                        EventType::FallbackDisabled | EventType::CommandMaxActive
                    ) {
                        return Counter::noop();
                    }
                    counter!(
                        EVENTS_TOTAL,
                        "command" => command.clone(),
                        "group" => group.clone(),
                        "event" => event.name().to_ascii_lowercase()
                    )
                })
                .collect(),
            latency: histogram!(
                LATENCY_EXECUTE_SECONDS,
                "command" => command,
                "group" => group
            ),
        });
        Arc::clone(self.commands.write().entry(key.clone()).or_insert(handles))
    }

    /// The command's group key as heard at its creation (empty if not heard).
    fn group_of(&self, key: &CommandKey) -> String {
        self.groups
            .read()
            .get(key)
            .map_or_else(String::new, ToString::to_string)
    }
}

/// The help text and unit of each metric, for the recorder (Prometheus's `# HELP`). Told at
/// each command's first execution and each breaker transition: recorders keep the latest.
fn describe() {
    describe_counter!(
        EVENTS_TOTAL,
        "Command execution events since the key was created, by Hystrix event type."
    );
    describe_histogram!(
        LATENCY_EXECUTE_SECONDS,
        Unit::Seconds,
        "Execution latency (from the start to the run's end or timeout, queue wait \
         included) of executions whose user code started, since the key was created."
    );
    describe_counter!(
        BREAKER_TRANSITIONS_TOTAL,
        "Circuit-breaker transitions, by the state left and the state entered."
    );
}

impl EventNotifier for MetricsFacade {
    /// EXCEPTION_THROWN is told here only (it is not among an execution's events).
    fn mark_event(&self, event: EventType, key: &CommandKey) {
        if event == EventType::ExceptionThrown {
            self.handles(key).events[event.index()].increment(1);
        }
    }

    fn mark_command_execution(
        &self,
        key: &CommandKey,
        _isolation: IsolationStrategy,
        execution_time_ms: u64,
        events: &EventCounts,
    ) {
        let handles = self.handles(key);
        for event in events.iter() {
            handles.events[event.index()].increment(u64::from(events.count(event)));
        }
        // Executions where user code ran (not short-circuits, rejections, cache hits).
        let ran = events.iter().any(|event| {
            matches!(
                event,
                EventType::Success
                    | EventType::Failure
                    | EventType::Timeout
                    | EventType::BadRequest
                    | EventType::Ignored
            )
        });
        if ran {
            handles.latency.record(execution_time_ms as f64 / 1000.0);
        }
    }

    fn mark_command_created(&self, key: &CommandKey, group: &GroupKey, _: &ThreadPoolKey) {
        self.groups.write().insert(key.clone(), group.clone());
    }
}

impl CircuitBreakerListener for MetricsFacade {
    fn on_event(&self, event: &CircuitBreakerEvent) {
        let to = match event.kind {
            BreakerEventKind::Opened { .. } | BreakerEventKind::ForcedOpen => "open",
            BreakerEventKind::HalfOpened { .. } => "half_open",
            BreakerEventKind::Closed { .. }
            | BreakerEventKind::ForcedClosed
            | BreakerEventKind::Reset => "closed",
            _ => return,
        };
        let from = self
            .breaker_states
            .lock()
            .insert((event.command_key.clone(), event.breaker_key.clone()), to)
            .unwrap_or("closed");
        describe();
        counter!(
            BREAKER_TRANSITIONS_TOTAL,
            "command" => event.command_key.to_string(),
            "group" => event.group_key.to_string(),
            "from" => from,
            "to" => to
        )
        .increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    #[test]
    fn hedges_and_cancelled_hedges_are_counted_per_event() {
        let recorder = DebuggingRecorder::new();
        let facade = MetricsFacade::new();
        let key = CommandKey::new("Hedged").expect("a valid key");
        let group = GroupKey::new("Shop").expect("a valid key");
        let pool = ThreadPoolKey::new("Shop").expect("a valid key");
        facade.mark_command_created(&key, &group, &pool);
        // Two hedges beside a slow first attempt; one answers, the other two are cancelled.
        let mut events = EventCounts::new();
        events.add(EventType::Success);
        events.add_n(EventType::Hedge, 2);
        events.add_n(EventType::HedgeCancelled, 2);
        metrics::with_local_recorder(&recorder, || {
            facade.mark_command_execution(&key, IsolationStrategy::Semaphore, 12, &events);
        });
        let mut seen = HashMap::new();
        for (key, _, _, value) in recorder.snapshotter().snapshot().into_vec() {
            let key = key.key();
            let labels: Vec<_> = key.labels().map(|l| (l.key(), l.value())).collect();
            assert!(labels.contains(&("command", "Hedged")), "{labels:?}");
            assert!(labels.contains(&("group", "Shop")), "{labels:?}");
            let event = labels.iter().find(|(k, _)| *k == "event").map(|(_, v)| *v);
            seen.insert((key.name().to_owned(), event.map(str::to_owned)), value);
        }
        let count = |event: &str| seen.get(&(EVENTS_TOTAL.to_owned(), Some(event.to_owned())));
        for (event, expected) in [
            ("hedge", 2),
            ("hedge_cancelled", 2),
            ("success", 1),
            ("failure", 0),
            ("retry", 0),
        ] {
            assert_eq!(
                count(event),
                Some(&DebugValue::Counter(expected)),
                "{event}"
            );
        }
        // One latency sample for the execution.
        let latency = seen.get(&(LATENCY_EXECUTE_SECONDS.to_owned(), None));
        assert!(
            matches!(latency, Some(DebugValue::Histogram(v)) if v.len() == 1 && v[0].into_inner() == 0.012),
            "{latency:?}"
        );
    }
}
