//! The causes of a breaker's latest openings, and what a short-circuit error keeps of them.
//!
//! A rejection must be cheap (it is the path a service hammers during an outage), so it does
//! not copy the trip cause: the error keeps a reference to its breaker's log of openings and
//! the generation it was refused in, and the cause is looked up when someone asks for it
//! (`HystrixError::trip_cause`, its `Display`). Openings are rare; the log takes a lock only
//! when one is recorded or looked up.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::TripCause;

/// Openings a log remembers: an error refused more openings ago than this no longer finds its
/// cause.
pub(crate) const KEPT: usize = 8;

/// The causes of a breaker's latest openings, with the generation each opening started.
#[derive(Debug, Default)]
pub(crate) struct TripLog {
    openings: Mutex<VecDeque<(u32, TripCause)>>,
}

/// Whether generation `a` is `b` or later (generations are 30 bits and wrap around).
fn at_or_after(a: u32, b: u32) -> bool {
    a.wrapping_sub(b) & super::state::GENERATION_MASK as u32 <= (1 << 29)
}

impl TripLog {
    /// The breaker opened in `generation` because of `cause`.
    pub(crate) fn record(&self, generation: u32, cause: TripCause) {
        let mut openings = self.openings.lock();
        if openings.len() == KEPT {
            openings.pop_front();
        }
        openings.push_back((generation, cause));
    }

    /// The cause of the latest opening, if any since the last [`clear`](Self::clear).
    pub(crate) fn latest(&self) -> Option<TripCause> {
        self.openings.lock().back().map(|(_, cause)| cause.clone())
    }

    /// The cause of the opening an execution refused in `generation` met: the latest one
    /// that started at or before it (a HALF_OPEN breaker is in a later generation than its
    /// opening).
    pub(crate) fn cause_at(&self, generation: u32) -> Option<TripCause> {
        self.openings
            .lock()
            .iter()
            .rev()
            .find(|(opened, _)| at_or_after(generation, *opened))
            .map(|(_, cause)| cause.clone())
    }

    /// Forgets every opening (the breaker was reset).
    pub(crate) fn clear(&self) {
        self.openings.lock().clear();
    }
}

/// Why a breaker refused an execution, resolved when asked.
#[derive(Clone)]
pub(crate) enum Tripped {
    /// `circuitBreaker.forceOpen` is true.
    ForcedOpen,
    /// Refused in `generation` of the breaker whose openings `log` keeps.
    Opened { log: Arc<TripLog>, generation: u32 },
}

/// The cause as it resolves now (not the breaker's whole log).
impl std::fmt::Debug for Tripped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.cause() {
            Some(cause) => write!(f, "Tripped({cause:?})"),
            None => f.write_str("Tripped(unknown)"),
        }
    }
}

impl Tripped {
    /// The cause: `None` if the breaker was reset or opened [`KEPT`] more times since.
    pub(crate) fn cause(&self) -> Option<TripCause> {
        match self {
            Tripped::ForcedOpen => Some(TripCause::ForcedOpen),
            Tripped::Opened { log, generation } => log.cause_at(*generation),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(cause: Option<TripCause>) -> Option<String> {
        cause.map(|cause| cause.to_string())
    }

    #[test]
    fn a_refusal_finds_the_opening_it_met() {
        let log = Arc::new(TripLog::default());
        log.record(1, TripCause::Message("first".into()));
        log.record(5, TripCause::Message("second".into()));
        let at = |generation| Tripped::Opened {
            log: Arc::clone(&log),
            generation,
        };
        assert_eq!(text(at(1).cause()).as_deref(), Some("first"));
        // HALF_OPEN after the first opening: generation 2.
        assert_eq!(text(at(2).cause()).as_deref(), Some("first"));
        assert_eq!(text(at(6).cause()).as_deref(), Some("second"));
        assert_eq!(text(log.latest()).as_deref(), Some("second"));
        assert_eq!(text(at(0).cause()), None);
        log.clear();
        assert_eq!(text(at(6).cause()), None);
        assert_eq!(
            text(Tripped::ForcedOpen.cause()).as_deref(),
            Some("forced open")
        );
    }

    #[test]
    fn the_log_keeps_the_latest_openings_and_wraps_with_the_generation() {
        let log = TripLog::default();
        let mask = super::super::state::GENERATION_MASK as u32;
        for n in 0..KEPT as u32 + 2 {
            log.record(
                (mask - 3).wrapping_add(n) & mask,
                TripCause::Message(format!("{n}").into()),
            );
        }
        // The two oldest are gone; generation 0 (after the wrap) is the fifth opening.
        assert_eq!(text(log.cause_at(mask - 2)), None);
        assert_eq!(text(log.cause_at(0)).as_deref(), Some("4"));
        assert_eq!(text(log.cause_at(mask - 1)).as_deref(), Some("2"));
    }
}
