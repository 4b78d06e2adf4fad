//! Events, latencies and circuit-breaker transitions through the [`metrics`] facade (feature
//! `metrics`), under the names the team chose for Prometheus (ECOSYSTEM §3.7). The application
//! installs the recorder (e.g. `metrics-exporter-prometheus`); with none installed the calls do
//! nothing.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `hystrix_command_events_total` | counter | `command`, `event` (snake_case event name, e.g. `short_circuited`) |
//! | `hystrix_command_latency_execute_seconds` | histogram | `command` (executions whose run started) |
//! | `hystrix_circuit_breaker_transitions_total` | counter | `command`, `to` (`open`, `half_open`, `closed`, `forced_open`, `forced_closed`, `reset`) |
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
//! The command key is the only command label: an event notifier hears the key, not the group
//! (the registry's snapshots, e.g. the dashboard crate's `/metrics`, carry the group). Use one
//! of the two for Prometheus, not both: they share metric names with other label sets.
//!
//! Install the recorder before the first execution: as the `metrics` crate advises, each
//! command's handles are resolved once, at its first execution, and a handle resolved while no
//! recorder is installed stays a no-op.

use std::collections::HashMap;
use std::sync::Arc;

use metrics::{Counter, Histogram, counter, histogram};
use parking_lot::RwLock;

use crate::circuit::{BreakerEventKind, CircuitBreakerEvent, CircuitBreakerListener};
use crate::config::IsolationStrategy;
use crate::event::{EventCounts, EventNotifier, EventType};
use crate::key::CommandKey;

/// Counter of every event of every execution, by command and event.
pub const EVENTS_TOTAL: &str = "hystrix_command_events_total";
/// Histogram of execution latency in seconds, by command.
pub const LATENCY_EXECUTE_SECONDS: &str = "hystrix_command_latency_execute_seconds";
/// Counter of circuit-breaker transitions, by command and the state entered.
pub const BREAKER_TRANSITIONS_TOTAL: &str = "hystrix_circuit_breaker_transitions_total";

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
        let command = key.to_string();
        let handles = Arc::new(Handles {
            events: EventType::ALL
                .iter()
                .map(|event| {
                    counter!(
                        EVENTS_TOTAL,
                        "command" => command.clone(),
                        "event" => event.name().to_ascii_lowercase()
                    )
                })
                .collect(),
            latency: histogram!(LATENCY_EXECUTE_SECONDS, "command" => command),
        });
        Arc::clone(self.commands.write().entry(key.clone()).or_insert(handles))
    }
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
}

impl CircuitBreakerListener for MetricsFacade {
    fn on_event(&self, event: &CircuitBreakerEvent) {
        let to = match event.kind {
            BreakerEventKind::Opened { .. } => "open",
            BreakerEventKind::HalfOpened { .. } => "half_open",
            BreakerEventKind::Closed { .. } => "closed",
            BreakerEventKind::ForcedOpen => "forced_open",
            BreakerEventKind::ForcedClosed => "forced_closed",
            BreakerEventKind::Reset => "reset",
            _ => return,
        };
        counter!(
            BREAKER_TRANSITIONS_TOTAL,
            "command" => event.command_key.to_string(),
            "to" => to
        )
        .increment(1);
    }
}
