//! Circuit-breaker state changes and journal records, for monitoring (the cloud
//! circuit-breaker pattern's "events").

use std::sync::Arc;

use super::backoff::OpenTrigger;
use super::journal::JournalEntry;
use crate::error::TripCause;
use crate::key::{CommandKey, GroupKey};

/// Something that happened to a circuit breaker: a state change, or a request journalled,
/// replayed or dropped from the journal. Each state change is also logged with `tracing` (at
/// `warn` for openings, `info` otherwise).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CircuitBreakerEvent {
    /// The command key.
    pub command_key: CommandKey,
    /// The command's group key.
    pub group_key: GroupKey,
    /// For a keyed breaker (one per host, shard or tenant of the command, see
    /// [`CommandBuilder::breaker_per_key`](crate::command::CommandBuilder::breaker_per_key)),
    /// its key; `None` for the command's own breaker.
    pub breaker_key: Option<Arc<str>>,
    /// What happened.
    pub kind: BreakerEventKind,
}

/// What happened to a breaker (see [`CircuitBreakerEvent`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum BreakerEventKind {
    /// CLOSED or HALF_OPEN → OPEN.
    Opened {
        /// Why.
        cause: TripCause,
        /// What opened it.
        trigger: OpenTrigger,
        /// How long it stays open before a trial, in ms: the backoff policy's duration, or a
        /// trip-now minimum if longer.
        open_duration_ms: u64,
    },
    /// OPEN → HALF_OPEN: trials are admitted.
    HalfOpened {
        /// A healthy health probe moved it, before the open duration ended.
        by_probe: bool,
    },
    /// HALF_OPEN (or OPEN past its open duration) → CLOSED; health restarts from zero.
    Closed {
        /// Another instance's successful trial closed it, through the shared state store.
        by_store: bool,
    },
    /// Opened by hand ([`CircuitBreakerHandle::force_open`](super::CircuitBreakerHandle::force_open)).
    ForcedOpen,
    /// Closed by hand ([`CircuitBreakerHandle::force_close`](super::CircuitBreakerHandle::force_close)).
    ForcedClosed,
    /// Reset by hand ([`CircuitBreakerHandle::reset`](super::CircuitBreakerHandle::reset)).
    Reset,
    /// A short-circuited request was journalled.
    Journalled(JournalEntry),
    /// A journalled request was handed to the replay function.
    Replayed(JournalEntry),
    /// The journal was full: its oldest request was dropped.
    JournalDropped(JournalEntry),
}

impl CircuitBreakerEvent {
    /// Whether the breaker's state changed (not a journal record).
    pub fn is_transition(&self) -> bool {
        !matches!(
            self.kind,
            BreakerEventKind::Journalled(_)
                | BreakerEventKind::Replayed(_)
                | BreakerEventKind::JournalDropped(_)
        )
    }
}

/// Hears every circuit-breaker event of a registry, synchronously, on the thread that made it
/// (registered with [`RegistryBuilder::circuit_breaker_listener`](crate::RegistryBuilder::circuit_breaker_listener)).
/// Must be fast; a panic inside it is caught and logged once.
pub trait CircuitBreakerListener: Send + Sync + 'static {
    /// Called for each event.
    fn on_event(&self, event: &CircuitBreakerEvent);
}

/// A shared listener (keep a clone to read what it gathered).
impl<L: CircuitBreakerListener> CircuitBreakerListener for std::sync::Arc<L> {
    fn on_event(&self, event: &CircuitBreakerEvent) {
        (**self).on_event(event);
    }
}
