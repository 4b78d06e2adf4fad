//! Exponential backoff after connection failures: the store's own small breaker, so that a fleet
//! does not hammer a Redis that is down.

use std::time::{Duration, Instant};

/// After a failure, no attempt for `delay`; each further failure doubles it up to `max`; a
/// success resets it to `min`.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    /// The delay the next failure waits.
    next: Duration,
    /// No attempt before this instant (`None`: attempts go ahead).
    until: Option<Instant>,
}

impl Backoff {
    /// `min` ≤ `max` is the caller's to ensure (the builder checks it).
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        Backoff {
            min,
            max,
            next: min,
            until: None,
        }
    }

    /// How long attempts must still wait at `now` (`None`: go ahead).
    pub(crate) fn wait_at(&self, now: Instant) -> Option<Duration> {
        self.until
            .and_then(|until| until.checked_duration_since(now))
            .filter(|left| !left.is_zero())
    }

    /// A failure at `now`: returns how long attempts now wait.
    pub(crate) fn failed(&mut self, now: Instant) -> Duration {
        let delay = self.next;
        self.until = Some(now + delay);
        self.next = delay.saturating_mul(2).min(self.max);
        delay
    }

    /// A success: attempts go ahead, and the next failure waits `min`.
    pub(crate) fn succeeded(&mut self) {
        self.until = None;
        self.next = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn doubles_up_to_the_cap_and_resets_on_success() {
        let start = Instant::now();
        let mut backoff = Backoff::new(50 * MS, 300 * MS);
        assert_eq!(backoff.wait_at(start), None);
        assert_eq!(backoff.failed(start), 50 * MS);
        assert_eq!(backoff.wait_at(start), Some(50 * MS));
        assert_eq!(backoff.wait_at(start + 20 * MS), Some(30 * MS));
        assert_eq!(backoff.wait_at(start + 50 * MS), None);
        let delays: Vec<_> = (0..4).map(|_| backoff.failed(start)).collect();
        assert_eq!(delays, [100 * MS, 200 * MS, 300 * MS, 300 * MS]);
        assert_eq!(backoff.wait_at(start + 299 * MS), Some(MS));
        backoff.succeeded();
        assert_eq!(backoff.wait_at(start), None);
        assert_eq!(backoff.failed(start), 50 * MS);
    }
}
