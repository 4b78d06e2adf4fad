//! Circuit-breaker state changes, for monitoring (SPEC Part A 23, Part C "events").

use crate::error::TripCause;
use crate::key::CommandKey;

/// A change of a command key's circuit breaker. Each one is also logged with `tracing` (at
/// `warn` for openings, `info` otherwise).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum CircuitBreakerEvent {
    /// CLOSED or HALF_OPEN → OPEN: health tripped it or a trial failed.
    Opened {
        /// The command key.
        command_key: CommandKey,
        /// Why.
        cause: TripCause,
        /// How long it stays open before a trial, in ms
        /// (`circuitBreaker.sleepWindowInMilliseconds` then).
        sleep_window_ms: u64,
    },
    /// OPEN → HALF_OPEN: the sleep window passed; trials are admitted.
    HalfOpened {
        /// The command key.
        command_key: CommandKey,
    },
    /// HALF_OPEN → CLOSED: enough trials succeeded; health restarts from zero.
    Closed {
        /// The command key.
        command_key: CommandKey,
    },
    /// Opened by hand ([`CircuitBreakerHandle::force_open`](super::CircuitBreakerHandle::force_open)).
    ForcedOpen {
        /// The command key.
        command_key: CommandKey,
    },
    /// Closed by hand ([`CircuitBreakerHandle::force_close`](super::CircuitBreakerHandle::force_close)).
    ForcedClosed {
        /// The command key.
        command_key: CommandKey,
    },
    /// Reset by hand ([`CircuitBreakerHandle::reset`](super::CircuitBreakerHandle::reset)).
    Reset {
        /// The command key.
        command_key: CommandKey,
    },
}

impl CircuitBreakerEvent {
    /// The command key whose breaker changed.
    pub fn command_key(&self) -> &CommandKey {
        match self {
            CircuitBreakerEvent::Opened { command_key, .. }
            | CircuitBreakerEvent::HalfOpened { command_key }
            | CircuitBreakerEvent::Closed { command_key }
            | CircuitBreakerEvent::ForcedOpen { command_key }
            | CircuitBreakerEvent::ForcedClosed { command_key }
            | CircuitBreakerEvent::Reset { command_key } => command_key,
        }
    }
}

/// Hears every circuit-breaker change of a registry, synchronously, on the thread that made it
/// (registered with [`RegistryBuilder::circuit_breaker_listener`](crate::RegistryBuilder::circuit_breaker_listener)).
/// Must be fast; a panic inside it is caught and logged once.
pub trait CircuitBreakerListener: Send + Sync + 'static {
    /// Called for each change.
    fn on_event(&self, event: &CircuitBreakerEvent);
}
