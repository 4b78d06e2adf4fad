//! Rolling windows of counters that roll lazily, with a cost per write that never grows.
//!
//! Time is cut into buckets of `bucket_ms`; a bucket's number (its *epoch*) is
//! `now_ms / bucket_ms`. A window keeps `buckets + 1` slots in a ring (the buckets of the window
//! and the one filling now). Every counter carries the epoch it counts for, packed with its
//! count in one atomic word, and a write into a later epoch resets it in the same
//! compare-and-swap: no thread ever rolls the window, stale buckets are never summed, and a
//! write is one CAS whatever the traffic. Reads sum the *completed* buckets of the window
//! (SPEC Part A 29): the bucket still filling is excluded.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// A counter for one bucket of time; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct EpochCounter(AtomicU64);

#[inline]
fn pack(epoch: u32, count: u32) -> u64 {
    (u64::from(epoch) << 32) | u64::from(count)
}

#[inline]
fn unpack(word: u64) -> (u32, u32) {
    ((word >> 32) as u32, word as u32)
}

/// Whether epoch `a` is later than `b` (epochs wrap around at 2^32).
#[inline]
fn later(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl EpochCounter {
    /// Adds `n` in bucket `epoch`. Returns what the counter held for an older epoch when this
    /// write reset it (0 otherwise), so the caller can fold it into a cumulative total. A write
    /// for an epoch older than the counter's (a thread delayed a whole lap of the ring) counts
    /// in the newer bucket rather than being lost.
    #[inline]
    pub(crate) fn add(&self, epoch: u32, n: u32) -> u32 {
        let mut current = self.0.load(Ordering::Relaxed);
        loop {
            let (stored, count) = unpack(current);
            let (next, retired) = if stored == epoch || later(stored, epoch) {
                (pack(stored, count.saturating_add(n)), 0)
            } else {
                (pack(epoch, n), count)
            };
            match self
                .0
                .compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return retired,
                Err(seen) => current = seen,
            }
        }
    }

    /// Raises the counter to `value` in bucket `epoch` if it holds less (a rolling maximum).
    #[inline]
    pub(crate) fn raise(&self, epoch: u32, value: u32) {
        let mut current = self.0.load(Ordering::Relaxed);
        loop {
            let (stored, max) = unpack(current);
            if later(stored, epoch) || (stored == epoch && max >= value) {
                return;
            }
            match self.0.compare_exchange_weak(
                current,
                pack(epoch, value),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// The count for bucket `epoch` (0 if the counter holds another bucket).
    #[inline]
    pub(crate) fn get(&self, epoch: u32) -> u32 {
        let (stored, count) = unpack(self.0.load(Ordering::Relaxed));
        if stored == epoch { count } else { 0 }
    }

    /// The count, whatever bucket it belongs to.
    #[inline]
    pub(crate) fn count(&self) -> u32 {
        unpack(self.0.load(Ordering::Relaxed)).1
    }

    /// Empties the counter for bucket `epoch`.
    pub(crate) fn clear(&self, epoch: u32) {
        self.0.store(pack(epoch, 0), Ordering::Relaxed);
    }
}

/// Slots in a ring for a window of `buckets` buckets: one more than the window (the bucket
/// filling), rounded up to a power of two so a bucket's slot is found with a mask, not a
/// division.
pub(crate) fn ring_len(buckets: u32) -> usize {
    (buckets.max(1) as usize + 1).next_power_of_two()
}

/// The slot of bucket `epoch` in a ring of `len` slots (a power of two).
#[inline]
pub(crate) fn ring_index(epoch: u32, len: usize) -> usize {
    epoch as usize & (len - 1)
}

/// One slot of a ring: `N` counters and a rolling maximum.
#[derive(Debug)]
struct Slot<const N: usize> {
    counters: [EpochCounter; N],
    max: EpochCounter,
}

impl<const N: usize> Default for Slot<N> {
    fn default() -> Self {
        Slot {
            counters: std::array::from_fn(|_| EpochCounter::default()),
            max: EpochCounter::default(),
        }
    }
}

/// `N` counters (and a maximum) over a rolling window of `buckets` buckets of `bucket_ms`, with
/// cumulative totals since creation.
#[derive(Debug)]
pub(crate) struct RollingCounts<const N: usize> {
    bucket_ms: u64,
    buckets: u32,
    slots: Box<[Slot<N>]>,
    /// Counts folded in from counters reset for a later bucket.
    retired: [AtomicU64; N],
    /// The last cumulative totals reported, so reports never go down (see `cumulative`).
    reported: Mutex<[u64; N]>,
}

impl<const N: usize> RollingCounts<N> {
    /// A window of `buckets` buckets of `bucket_ms` ms (both at least 1).
    pub(crate) fn new(bucket_ms: u64, buckets: u32) -> Self {
        RollingCounts {
            bucket_ms: bucket_ms.max(1),
            buckets: buckets.max(1),
            slots: (0..ring_len(buckets)).map(|_| Slot::default()).collect(),
            retired: std::array::from_fn(|_| AtomicU64::new(0)),
            reported: Mutex::new([0; N]),
        }
    }

    /// The bucket `now_ms` falls in.
    #[inline]
    pub(crate) fn epoch(&self, now_ms: u64) -> u32 {
        (now_ms / self.bucket_ms) as u32
    }

    #[inline]
    fn slot(&self, epoch: u32) -> &Slot<N> {
        &self.slots[ring_index(epoch, self.slots.len())]
    }

    /// Adds `n` to counter `index` at `now_ms`.
    #[inline]
    pub(crate) fn add(&self, now_ms: u64, index: usize, n: u32) {
        let epoch = self.epoch(now_ms);
        let retired = self.slot(epoch).counters[index].add(epoch, n);
        if retired > 0 {
            self.retired[index].fetch_add(u64::from(retired), Ordering::Relaxed);
        }
    }

    /// Raises the rolling maximum of the bucket at `now_ms` to `value`.
    #[inline]
    pub(crate) fn raise_max(&self, now_ms: u64, value: u32) {
        let epoch = self.epoch(now_ms);
        self.slot(epoch).max.raise(epoch, value);
    }

    /// The completed buckets of the window at `now_ms`, oldest first, not before `from_epoch`.
    fn completed(&self, now_ms: u64, from_epoch: u32) -> impl Iterator<Item = u32> + use<N> {
        let current = self.epoch(now_ms);
        let first = current.wrapping_sub(self.buckets);
        let first = if later(from_epoch, first) {
            from_epoch
        } else {
            first
        };
        let len = current.wrapping_sub(first);
        (0..len.min(self.buckets)).map(move |i| first.wrapping_add(i))
    }

    /// The sum of counter `index` over the completed buckets of the window at `now_ms`.
    pub(crate) fn rolling_sum(&self, now_ms: u64, index: usize) -> u64 {
        self.rolling_sum_since(now_ms, index, 0)
    }

    /// As [`rolling_sum`](Self::rolling_sum), counting only buckets from `from_epoch` on.
    pub(crate) fn rolling_sum_since(&self, now_ms: u64, index: usize, from_epoch: u32) -> u64 {
        self.completed(now_ms, from_epoch)
            .map(|epoch| u64::from(self.slot(epoch).counters[index].get(epoch)))
            .sum()
    }

    /// The largest maximum over the completed buckets of the window at `now_ms`.
    pub(crate) fn rolling_max(&self, now_ms: u64) -> u64 {
        self.completed(now_ms, 0)
            .map(|epoch| u64::from(self.slot(epoch).max.get(epoch)))
            .max()
            .unwrap_or(0)
    }

    /// The total of counter `index` since creation. Computed as what was folded in from reset
    /// counters plus what the ring holds; a write resetting a counter moves its count between
    /// the two in two steps, so a report is clamped to never go below the last one.
    pub(crate) fn cumulative(&self, index: usize) -> u64 {
        let live: u64 = self
            .slots
            .iter()
            .map(|slot| u64::from(slot.counters[index].count()))
            .sum();
        let total = self.retired[index].load(Ordering::Relaxed) + live;
        let mut reported = self.reported.lock();
        reported[index] = reported[index].max(total);
        reported[index]
    }

    /// Bytes on the heap (the ring).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot<N>>()
    }

    /// Empties the bucket filling at `now_ms`, so a window restarted from it begins empty (the
    /// cumulative totals keep its counts).
    pub(crate) fn clear_current(&self, now_ms: u64) {
        let epoch = self.epoch(now_ms);
        for (counter, retired) in self.slot(epoch).counters.iter().zip(&self.retired) {
            retired.fetch_add(u64::from(counter.count()), Ordering::Relaxed);
            counter.clear(epoch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_land_in_their_bucket_and_only_completed_buckets_are_summed() {
        let counts = RollingCounts::<2>::new(1000, 10);
        counts.add(0, 0, 1);
        counts.add(999, 0, 2);
        counts.add(1000, 0, 4);
        // At 1500 ms only bucket 0 (0..999) is complete.
        assert_eq!(counts.rolling_sum(1500, 0), 3);
        assert_eq!(counts.rolling_sum(2000, 0), 7);
        assert_eq!(counts.rolling_sum(2000, 1), 0);
        // Bucket 0 leaves the window once bucket 10 completes (at 11000 ms).
        assert_eq!(counts.rolling_sum(10_999, 0), 7);
        assert_eq!(counts.rolling_sum(11_000, 0), 4);
        assert_eq!(counts.rolling_sum(12_000, 0), 0);
        assert_eq!(counts.cumulative(0), 7);
    }

    #[test]
    fn a_stale_bucket_is_never_counted_after_idle() {
        let counts = RollingCounts::<1>::new(1000, 10);
        counts.add(5_000, 0, 9);
        // The same ring slot comes round again 11 buckets later; its old count is not summed.
        assert_eq!(counts.rolling_sum(16_500, 0), 0);
        assert_eq!(counts.rolling_sum(1_000_000, 0), 0);
        counts.add(16_000, 0, 1);
        assert_eq!(counts.rolling_sum(17_000, 0), 1);
        // Cumulative keeps everything: the reset moved 9 into the folded total.
        assert_eq!(counts.cumulative(0), 10);
    }

    #[test]
    fn rolling_max_takes_the_largest_completed_bucket() {
        let counts = RollingCounts::<1>::new(1000, 10);
        counts.raise_max(100, 3);
        counts.raise_max(200, 2);
        counts.raise_max(1100, 5);
        assert_eq!(counts.rolling_max(1500), 3);
        assert_eq!(counts.rolling_max(2000), 5);
        assert_eq!(counts.rolling_max(20_000), 0);
    }

    #[test]
    fn sums_can_start_at_a_later_bucket() {
        let counts = RollingCounts::<1>::new(500, 20);
        counts.add(100, 0, 5);
        counts.add(600, 0, 7);
        assert_eq!(counts.rolling_sum(1000, 0), 12);
        assert_eq!(counts.rolling_sum_since(1000, 0, 1), 7);
        counts.clear_current(1000);
        counts.add(1200, 0, 1);
        assert_eq!(counts.rolling_sum_since(1500, 0, 2), 1);
    }

    #[test]
    fn a_late_write_for_an_older_lap_counts_in_the_newer_bucket() {
        let counter = EpochCounter::default();
        assert_eq!(counter.add(20, 1), 0);
        assert_eq!(counter.add(9, 1), 0);
        assert_eq!(counter.get(20), 2);
        assert_eq!(counter.add(31, 1), 2);
        assert_eq!(counter.get(31), 1);
    }

    #[test]
    fn concurrent_writes_are_all_counted() {
        let counts = RollingCounts::<1>::new(1000, 10);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for i in 0..10_000u64 {
                        counts.add(i % 3000, 0, 1);
                    }
                });
            }
        });
        assert_eq!(counts.cumulative(0), 40_000);
        assert_eq!(counts.rolling_sum(3000, 0), 40_000);
    }
}
