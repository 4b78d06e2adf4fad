//! Keyed breakers (the cloud pattern's resource differentiation): one breaker per shard, host
//! or tenant of a command, made on demand in a bounded map. The command's
//! metrics, bulkhead, timeout and fallback stay shared; only the decision to short-circuit is
//! per key. A keyed breaker has its own compact health window and the command's breaker
//! properties and backoff; health probes, the journal and the shared state store apply to the
//! command's own breaker only.
//!
//! The map never forgets a sick key early: an OPEN or HALF_OPEN breaker is held until its open
//! period (backoff and trip-now minimum included) and its trial have ended, neither evicted to
//! make room nor for idleness; CLOSED breakers make room first. When every breaker kept is
//! held, a new key goes through the command's one overflow breaker (not kept per key), so
//! memory stays bounded at `max_keys` breakers plus one.
//!
//! A CLOSED breaker whose health trips it is held too, before its next call moves it (health is
//! checked lazily): how long it was failing does not depend on whether anyone looked.
//!
//! The map reads a breaker's state under its own lock, but transitions stay lock-free: a
//! breaker that trips in the very instant the map evicts it as CLOSED is forgotten (the call
//! that tripped it holds it to its end). A close tells the map at once
//! ([`KeyedBreakers::note_closed`]), so that the closed breaker may make room.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{CircuitBreaker, Site, Window};
use crate::clock::Clock;
use crate::config::CommandProperties;
use crate::keyed::KeyedMap;
use crate::registry::CommandState;

/// The breaker key of a command's overflow breaker (see
/// [`CommandBuilder::breaker_per_key`](crate::command::CommandBuilder::breaker_per_key)): when
/// every keyed breaker kept is OPEN or HALF_OPEN within its open period or trial, calls naming
/// a new key go through this one breaker, shared by all such keys. Its events carry this key,
/// and [`Command::keyed_circuit_breaker`](crate::Command::keyed_circuit_breaker) with it
/// returns it. A call naming this key goes through the overflow breaker too.
pub const OVERFLOW_BREAKER_KEY: &str = "(overflow)";

/// One keyed breaker.
#[derive(Debug)]
pub(crate) struct KeyedBreaker {
    pub(crate) key: Arc<str>,
    pub(crate) breaker: CircuitBreaker,
    /// Its own window, of the command's `circuitBreaker.window.type`.
    pub(crate) window: Window,
}

impl KeyedBreaker {
    fn new(key: Arc<str>, props: &CommandProperties) -> Self {
        KeyedBreaker {
            key,
            breaker: CircuitBreaker::default(),
            window: Window::new(props, true),
        }
    }

    /// Through which time (ms) the map must keep this breaker, at `now_ms`: while OPEN or
    /// HALF_OPEN, the end of its open period or trial; while CLOSED with health that trips it
    /// (its health is checked lazily, at its next call), a sleep window from now, as if it had
    /// tripped now; otherwise `None`.
    fn held_until_ms(&self, state: &CommandState, now_ms: u64) -> Option<u64> {
        let hot = state.properties.hot();
        if let Some(until_ms) = self.breaker.held_until_ms(hot) {
            return Some(until_ms);
        }
        let snapshot = hot.load();
        if !snapshot.circuit_breaker_enabled() || snapshot.force_closed() {
            return None;
        }
        let props = state.properties.load();
        let health = Site::keyed(state, self).health(now_ms);
        super::window::trip_reason(props.circuit_breaker_window_type, &health, &props)
            .is_some()
            .then(|| now_ms.saturating_add(hot.sleep_window_ms()))
    }
}

/// A command's keyed breakers.
pub(crate) struct KeyedBreakers {
    map: KeyedMap<Arc<KeyedBreaker>>,
    /// For new keys while every breaker kept is held.
    overflow: Arc<KeyedBreaker>,
    /// New keys go through the overflow breaker now (for one warning per episode).
    overflowing: AtomicBool,
    /// As defined: at most this many keys, evicted after this many idle ms.
    pub(crate) limits: (NonZeroUsize, Option<u64>),
}

impl KeyedBreakers {
    /// At most `max_keys` breakers, those unused for longer than `idle_ms` evicted; windows
    /// as the command's (`circuitBreaker.window.*`; a TIME window of
    /// `metrics.rollingStats.timeInMilliseconds` in buckets of
    /// `metrics.healthSnapshot.intervalInMilliseconds`).
    pub(crate) fn new(
        max_keys: NonZeroUsize,
        idle_ms: Option<u64>,
        clock: Arc<dyn Clock>,
        props: &CommandProperties,
    ) -> Self {
        KeyedBreakers {
            map: KeyedMap::new(max_keys, idle_ms, clock),
            overflow: Arc::new(KeyedBreaker::new(Arc::from(OVERFLOW_BREAKER_KEY), props)),
            overflowing: AtomicBool::new(false),
            limits: (max_keys, idle_ms),
        }
    }

    /// The breaker of `key`, made CLOSED if absent (see the module docs for what is evicted to
    /// make room, and when the overflow breaker serves instead). `state` is the command's (the
    /// open period, trial time and trip rule depend on its properties).
    pub(crate) fn get(&self, state: &CommandState, key: &str) -> Arc<KeyedBreaker> {
        if key == OVERFLOW_BREAKER_KEY {
            return Arc::clone(&self.overflow);
        }
        let mut made = false;
        let kept = self.map.get_or_try_insert(
            key,
            |shared_key| {
                made = true;
                // The window's properties are fixed: the current ones are the first ones.
                let props = state.properties.load();
                Ok::<_, std::convert::Infallible>(Arc::new(KeyedBreaker::new(
                    Arc::clone(shared_key),
                    &props,
                )))
            },
            |keyed| keyed.held_until_ms(state, state.env.clock.now_ms()),
            |_, _| {},
        );
        match kept {
            Ok(Some(breaker)) => {
                if made && self.overflowing.load(Ordering::Relaxed) {
                    self.overflowing.store(false, Ordering::Relaxed);
                }
                breaker
            }
            Ok(None) => {
                if !self.overflowing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        command = %state.key,
                        max_keys = self.limits.0.get(),
                        "hystrix: every keyed breaker kept is open; new breaker keys go through \
                         the overflow breaker until one closes or its open period ends"
                    );
                }
                Arc::clone(&self.overflow)
            }
            Err(never) => match never {},
        }
    }

    /// The breaker of `key`, if it exists (not made, not marked used); the overflow breaker
    /// for [`OVERFLOW_BREAKER_KEY`].
    pub(crate) fn find(&self, key: &str) -> Option<Arc<KeyedBreaker>> {
        if key == OVERFLOW_BREAKER_KEY {
            return Some(Arc::clone(&self.overflow));
        }
        self.map.peek(key)
    }

    /// A keyed breaker closed: the map may evict it before the time it was held for.
    pub(crate) fn note_closed(&self) {
        self.map.note_release();
    }

    /// Keyed breakers kept now (the overflow breaker aside).
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Their keys, most recently used first (the overflow breaker aside).
    pub(crate) fn keys(&self) -> Vec<Arc<str>> {
        self.map.keys()
    }

    /// The overflow breaker.
    pub(crate) fn overflow(&self) -> &Arc<KeyedBreaker> {
        &self.overflow
    }
}
