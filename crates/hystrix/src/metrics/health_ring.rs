//! The health window of a keyed breaker in one word per bucket, so that 100 000 of them fit in
//! tens of MB: requests, errors and slow calls of each health bucket packed into an `AtomicU64`
//! with the bucket's tag.
//!
//! Layout of a slot: tag (16 bits, the bucket's epoch modulo 2^16) | requests (16 bits) |
//! errors (16 bits) | slow calls (16 bits). Counts saturate at 65 535 per bucket and key
//! (131 070 calls a second per key with the default 500 ms buckets). The window is read as a
//! command's: the completed buckets of the window, since the last restart.

use std::sync::atomic::{AtomicU64, Ordering};

use super::HealthCounts;
use super::rolling::Divisor;

const COUNT_MAX: u64 = (1 << 16) - 1;

fn pack(tag: u64, [requests, errors, slow]: [u64; 3]) -> u64 {
    (tag & 0xFFFF) << 48
        | requests.min(COUNT_MAX) << 32
        | errors.min(COUNT_MAX) << 16
        | slow.min(COUNT_MAX)
}

fn unpack(word: u64) -> (u64, [u64; 3]) {
    (
        word >> 48,
        [
            (word >> 32) & COUNT_MAX,
            (word >> 16) & COUNT_MAX,
            word & COUNT_MAX,
        ],
    )
}

/// Requests and errors per health bucket, over a window of `buckets` buckets: a ring of
/// `buckets + 1` slots (the window and the bucket filling; not rounded up to a power of two,
/// to stay small: a keyed breaker is not on the fast path).
#[derive(Debug)]
pub(crate) struct HealthRing {
    bucket_ms: Divisor,
    slots: Box<[AtomicU64]>,
    /// Health counts start at this bucket (moved when the breaker closes).
    from: AtomicU64,
}

impl HealthRing {
    /// A window of `buckets` buckets of `bucket_ms` ms.
    pub(crate) fn new(bucket_ms: u64, buckets: u32) -> Self {
        let len = buckets.max(1) as usize + 1;
        HealthRing {
            bucket_ms: Divisor::new(bucket_ms.max(1)),
            slots: (0..len)
                .map(|_| AtomicU64::new(pack(u64::MAX, [0; 3])))
                .collect(),
            from: AtomicU64::new(0),
        }
    }

    /// Counts one request at `now_ms`, an error if `error`, a slow call if `slow`.
    #[inline]
    pub(crate) fn record(&self, now_ms: u64, error: bool, slow: bool) {
        let epoch = self.bucket_ms.divide(now_ms);
        let slot = self.slot(epoch);
        let tag = epoch & 0xFFFF;
        let mut current = slot.load(Ordering::Relaxed);
        loop {
            let (seen, [requests, errors, slows]) = unpack(current);
            let (error, slow) = (u64::from(error), u64::from(slow));
            let next = if seen == tag {
                pack(tag, [requests + 1, errors + error, slows + slow])
            } else {
                pack(tag, [1, error, slow])
            };
            match slot.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => current = now,
            }
        }
    }

    /// The health counts at `now_ms`: the completed buckets of the window since the restart.
    pub(crate) fn health(&self, now_ms: u64) -> HealthCounts {
        let current = self.bucket_ms.divide(now_ms);
        let buckets = self.slots.len() as u64 - 1;
        let first = current
            .saturating_sub(buckets)
            .max(self.from.load(Ordering::Acquire));
        let mut sums = [0; 3];
        for epoch in first.min(current)..current {
            let (tag, counts) = unpack(self.slot(epoch).load(Ordering::Relaxed));
            if tag == epoch & 0xFFFF {
                for (sum, count) in sums.iter_mut().zip(counts) {
                    *sum += count;
                }
            }
        }
        let [total, errors, slow] = sums;
        HealthCounts::with_slow_calls(total, errors, slow)
    }

    #[inline]
    fn slot(&self, epoch: u64) -> &AtomicU64 {
        &self.slots[(epoch % self.slots.len() as u64) as usize]
    }

    /// Restarts the window from zero at `now_ms` (the breaker closed).
    pub(crate) fn restart(&self, now_ms: u64) {
        let epoch = self.bucket_ms.divide(now_ms);
        self.slot(epoch)
            .store(pack(epoch, [0; 3]), Ordering::Relaxed);
        self.from.store(epoch, Ordering::Release);
    }

    /// Bytes on the heap.
    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.slots)
    }
}

#[cfg(all(test, not(hystrix_loom)))]
mod tests {
    use super::*;

    #[test]
    fn only_completed_buckets_of_the_window_count() {
        // 4 buckets of 100 ms.
        let ring = HealthRing::new(100, 4);
        ring.record(0, false, false);
        ring.record(50, true, true);
        ring.record(150, true, false);
        assert_eq!(ring.health(99).total_requests, 0, "bucket 0 still filling");
        let health = ring.health(200);
        assert_eq!(health, HealthCounts::with_slow_calls(3, 2, 1));
        assert_eq!(health.error_percentage, 66);
        // At 500 ms bucket 0 has left the window (buckets 1-4 are the window).
        let health = ring.health(500);
        assert_eq!((health.total_requests, health.error_count), (1, 1));
        assert_eq!(ring.health(10_000).total_requests, 0);
    }

    #[test]
    fn a_slot_reused_for_a_later_bucket_starts_from_zero() {
        let ring = HealthRing::new(100, 2);
        ring.record(10, true, false);
        // Ring of 3 slots: bucket 3 takes bucket 0's slot.
        ring.record(310, false, false);
        let health = ring.health(400);
        assert_eq!((health.total_requests, health.error_count), (1, 0));
    }

    #[test]
    fn restart_drops_what_came_before() {
        let ring = HealthRing::new(100, 4);
        ring.record(10, true, false);
        ring.record(120, true, false);
        ring.restart(130);
        ring.record(140, false, false);
        let health = ring.health(200);
        assert_eq!((health.total_requests, health.error_count), (1, 0));
    }

    #[test]
    fn the_default_window_takes_168_bytes() {
        // 20 buckets of 500 ms and the bucket filling, 8 bytes each.
        assert_eq!(HealthRing::new(500, 20).heap_bytes(), 168);
    }
}
