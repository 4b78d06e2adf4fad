//! Rolling windows of counters that roll lazily, with a cost per write that never grows.
//!
//! Time is cut into buckets of `bucket_ms`; a bucket's number (its *epoch*) is
//! `now_ms / bucket_ms`. A window keeps `buckets + 1` slots in a ring (the buckets of the window
//! and the one filling now). Every counter carries the epoch it counts for, packed with its
//! count in one atomic word, and a write into a later epoch resets it in the same
//! compare-and-swap: no thread ever rolls the window, stale buckets are never summed, and a
//! write is one CAS whatever the traffic. Reads sum the *completed* buckets of the window:
//! the bucket still filling is excluded.

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
}

/// Division by a bucket size fixed at creation, with a multiplication instead of a `div`
/// (which costs tens of cycles, several times per execution). With `m = ceil(2^64 / d)`,
/// `floor(n * m / 2^64) = floor(n / d)` whenever `n * d < 2^64` (the error `n * (m - 2^64/d) /
/// 2^64` then stays below `1/d`, the smallest gap to the next multiple); past that, and for
/// `d = 1`, it divides.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Divisor {
    d: u64,
    m: u64,
    /// The largest `n` the multiplication is exact for.
    limit: u64,
}

impl Divisor {
    /// Division by `d` (at least 1).
    pub(crate) fn new(d: u64) -> Self {
        let d = d.max(1);
        if d == 1 {
            return Divisor { d, m: 0, limit: 0 };
        }
        Divisor {
            d,
            m: u64::MAX / d + 1,
            limit: u64::MAX / d,
        }
    }

    /// `n / d`, rounded down.
    #[inline]
    pub(crate) fn divide(self, n: u64) -> u64 {
        if n <= self.limit {
            ((u128::from(n) * u128::from(self.m)) >> 64) as u64
        } else {
            n / self.d
        }
    }
}

/// The greatest common divisor of two bucket sizes (at least 1).
pub(crate) fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
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

/// `n % len` for a ring length fixed at creation, with two multiplications instead of a `div`
/// (Lemire, Kaser and Kurz, "Faster remainder by direct computation", 2019: with
/// `m = ceil(2^64 / len)`, the remainder of a 32-bit `n` is the high word of
/// `(m * n mod 2^64) * len`), so a ring needs not be rounded up to a power of two.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Modulo {
    m: u64,
    len: u64,
}

impl Modulo {
    /// Remainders by `len` (at least 1).
    pub(crate) fn new(len: u32) -> Self {
        let len = u64::from(len.max(1));
        Modulo {
            m: (u64::MAX / len).wrapping_add(1),
            len,
        }
    }

    /// `n % len`.
    #[inline]
    pub(crate) fn of(self, n: u32) -> usize {
        let low = self.m.wrapping_mul(u64::from(n));
        ((u128::from(low) * u128::from(self.len)) >> 64) as usize
    }
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

/// A window read over a ring of fine buckets: `buckets` buckets of `group` fine buckets each
/// (the rolling-stats window and the health window of a command share one ring).
#[derive(Debug, Clone, Copy)]
pub(crate) struct View {
    bucket_ms: Divisor,
    /// Fine buckets per bucket of this window.
    group: u64,
    /// Buckets in this window.
    buckets: u64,
}

impl View {
    /// A window of `buckets` buckets of `bucket_ms` over fine buckets of `fine_ms` (which must
    /// divide `bucket_ms`).
    pub(crate) fn new(bucket_ms: u64, fine_ms: u64, buckets: u32) -> Self {
        let fine_ms = fine_ms.max(1);
        View {
            bucket_ms: Divisor::new(bucket_ms),
            group: (bucket_ms / fine_ms).max(1),
            buckets: u64::from(buckets.max(1)),
        }
    }

    /// The bucket of this window `now_ms` falls in.
    #[inline]
    pub(crate) fn epoch(&self, now_ms: u64) -> u64 {
        self.bucket_ms.divide(now_ms)
    }

    /// Fine buckets a ring must keep for this window: the window and the bucket filling.
    pub(crate) fn fine_buckets_kept(&self) -> u64 {
        (self.buckets + 1) * self.group
    }

    /// Whether its bucket `epoch` is one of the completed buckets of the window at `now_ms`.
    pub(crate) fn is_completed(&self, now_ms: u64, epoch: u64) -> bool {
        let current = self.epoch(now_ms);
        epoch < current && epoch >= current.saturating_sub(self.buckets)
    }

    /// The fine buckets of this window's last buckets at `now_ms`, the one filling included
    /// (so a burst counts at once): its completed buckets but the oldest, and the filling one.
    pub(crate) fn recent(&self, now_ms: u64) -> std::ops::Range<u64> {
        let current = self.epoch(now_ms);
        current.saturating_sub(self.buckets - 1) * self.group..(current + 1) * self.group
    }

    /// The fine buckets of this window's completed buckets at `now_ms`, from its bucket
    /// `from` on.
    pub(crate) fn completed(&self, now_ms: u64, from: u64) -> std::ops::Range<u64> {
        let current = self.epoch(now_ms);
        let first = current.saturating_sub(self.buckets).max(from);
        first.min(current) * self.group..current * self.group
    }
}

/// `N` counters (and a maximum) per fine bucket of `fine_ms`, in a ring read through
/// [`View`]s, with cumulative totals since creation.
#[derive(Debug)]
pub(crate) struct RollingCounts<const N: usize> {
    fine_ms: Divisor,
    /// A fine bucket's slot.
    slot_of: Modulo,
    slots: Box<[Slot<N>]>,
    /// Counts folded in from counters reset for a later bucket.
    retired: [AtomicU64; N],
    /// The last cumulative totals reported, so reports never go down (see `cumulative`).
    reported: Mutex<[u64; N]>,
}

impl<const N: usize> RollingCounts<N> {
    /// A ring of buckets of `fine_ms` ms (at least 1) keeping the last `kept` of them (see
    /// [`View::fine_buckets_kept`]), in as many slots.
    pub(crate) fn new(fine_ms: u64, kept: u64) -> Self {
        let len = kept.clamp(2, u64::from(u32::MAX)) as u32;
        RollingCounts {
            fine_ms: Divisor::new(fine_ms),
            slot_of: Modulo::new(len),
            slots: (0..len).map(|_| Slot::default()).collect(),
            retired: std::array::from_fn(|_| AtomicU64::new(0)),
            reported: Mutex::new([0; N]),
        }
    }

    /// The fine bucket `now_ms` falls in, as the tag its counters carry (it wraps at 2^32).
    #[inline]
    fn tag(&self, now_ms: u64) -> u32 {
        self.fine_ms.divide(now_ms) as u32
    }

    #[inline]
    fn slot(&self, tag: u32) -> &Slot<N> {
        &self.slots[self.slot_of.of(tag)]
    }

    /// Adds `n` to counter `index` at `now_ms`.
    #[inline]
    pub(crate) fn add(&self, now_ms: u64, index: usize, n: u32) {
        let tag = self.tag(now_ms);
        let retired = self.slot(tag).counters[index].add(tag, n);
        if retired > 0 {
            self.retired[index].fetch_add(u64::from(retired), Ordering::Relaxed);
        }
    }

    /// Raises the maximum of the fine bucket at `now_ms` to `value`.
    #[inline]
    pub(crate) fn raise_max(&self, now_ms: u64, value: u32) {
        let tag = self.tag(now_ms);
        self.slot(tag).max.raise(tag, value);
    }

    /// `f(counters, tag)` summed over the fine buckets `range`.
    pub(crate) fn sum_by(
        &self,
        range: std::ops::Range<u64>,
        f: impl Fn(&[EpochCounter; N], u32) -> u64,
    ) -> u64 {
        range
            .map(|fine| {
                let tag = fine as u32;
                f(&self.slot(tag).counters, tag)
            })
            .sum()
    }

    /// The fine buckets from the start of `view`'s bucket filling at `now_ms` to `now_ms`.
    pub(crate) fn filling(&self, view: &View, now_ms: u64) -> std::ops::Range<u64> {
        let start = view.epoch(now_ms) * view.group;
        start..u64::from(self.tag(now_ms)).max(start) + 1
    }

    /// The sum of counter `index` over the completed buckets of `view` at `now_ms`.
    pub(crate) fn rolling_sum(&self, view: &View, now_ms: u64, index: usize) -> u64 {
        self.sum_by(view.completed(now_ms, 0), |counters, tag| {
            u64::from(counters[index].get(tag))
        })
    }

    /// The sums of every counter over the completed buckets of `view` at `now_ms`, in one pass
    /// over the ring.
    pub(crate) fn rolling_sums(&self, view: &View, now_ms: u64) -> [u64; N] {
        let mut sums = [0; N];
        for fine in view.completed(now_ms, 0) {
            let tag = fine as u32;
            for (sum, counter) in sums.iter_mut().zip(&self.slot(tag).counters) {
                *sum += u64::from(counter.get(tag));
            }
        }
        sums
    }

    /// The largest maximum over the completed buckets of `view` at `now_ms`.
    pub(crate) fn rolling_max(&self, view: &View, now_ms: u64) -> u64 {
        view.completed(now_ms, 0)
            .map(|fine| {
                let tag = fine as u32;
                u64::from(self.slot(tag).max.get(tag))
            })
            .max()
            .unwrap_or(0)
    }

    /// The total of counter `index` since creation. Computed as what was folded in from reset
    /// counters plus what the ring holds; a write resetting a counter moves its count between
    /// the two in two steps, so a report is clamped to never go below the last one.
    pub(crate) fn cumulative(&self, index: usize) -> u64 {
        self.cumulatives()[index]
    }

    /// The totals of every counter since creation (as [`cumulative`](Self::cumulative)), in
    /// one pass over the ring.
    pub(crate) fn cumulatives(&self) -> [u64; N] {
        let mut live = [0u64; N];
        for slot in self.slots.iter() {
            for (live, counter) in live.iter_mut().zip(&slot.counters) {
                *live += u64::from(counter.count());
            }
        }
        let mut reported = self.reported.lock();
        std::array::from_fn(|index| {
            let total = self.retired[index].load(Ordering::Relaxed) + live[index];
            reported[index] = reported[index].max(total);
            reported[index]
        })
    }

    /// Bytes on the heap (the ring).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot<N>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_divisor_divides_exactly(n in any::<u64>(), d in 1u64..=u64::MAX) {
            prop_assert_eq!(Divisor::new(d).divide(n), n / d);
        }

        #[test]
        fn a_divisor_is_exact_next_to_multiples(q in 0u64..(1 << 44), d in 1u64..(1 << 24)) {
            let divisor = Divisor::new(d);
            let n = q.saturating_mul(d);
            for n in [n.saturating_sub(1), n, n.saturating_add(1)] {
                prop_assert_eq!(divisor.divide(n), n / d);
            }
        }
    }

    proptest! {
        #[test]
        fn a_modulo_is_the_remainder(n in any::<u32>(), len in 1u32..=u32::MAX) {
            prop_assert_eq!(Modulo::new(len).of(n), (n % len) as usize);
        }
    }

    #[test]
    fn a_modulo_handles_the_edges() {
        for len in [1, 2, 3, 21, 22, 1 << 16, u32::MAX - 1, u32::MAX] {
            for n in [
                0,
                1,
                len - 1,
                len,
                len.saturating_add(1),
                u32::MAX - 1,
                u32::MAX,
            ] {
                assert_eq!(Modulo::new(len).of(n), (n % len) as usize, "{n} % {len}");
            }
        }
    }

    #[test]
    fn a_divisor_handles_the_edges() {
        for d in [1, 2, 3, 500, 1000, 10_000, u64::MAX / 2, u64::MAX] {
            let divisor = Divisor::new(d);
            for n in [
                0,
                1,
                d - 1,
                d,
                d.saturating_add(1),
                u64::MAX / d,
                u64::MAX - 1,
                u64::MAX,
            ] {
                assert_eq!(divisor.divide(n), n / d, "{n} / {d}");
            }
        }
    }

    /// A window of 10 buckets of 1000 ms over fine buckets of 1000 ms.
    fn window() -> View {
        View::new(1000, 1000, 10)
    }

    fn counts<const N: usize>() -> RollingCounts<N> {
        RollingCounts::new(1000, window().fine_buckets_kept())
    }

    #[test]
    fn counts_land_in_their_bucket_and_only_completed_buckets_are_summed() {
        let (counts, w) = (counts::<2>(), window());
        counts.add(0, 0, 1);
        counts.add(999, 0, 2);
        counts.add(1000, 0, 4);
        // At 1500 ms only bucket 0 (0..999) is complete.
        assert_eq!(counts.rolling_sum(&w, 1500, 0), 3);
        assert_eq!(counts.rolling_sum(&w, 2000, 0), 7);
        assert_eq!(counts.rolling_sum(&w, 2000, 1), 0);
        // Bucket 0 leaves the window once bucket 10 completes (at 11000 ms).
        assert_eq!(counts.rolling_sum(&w, 10_999, 0), 7);
        assert_eq!(counts.rolling_sum(&w, 11_000, 0), 4);
        assert_eq!(counts.rolling_sum(&w, 12_000, 0), 0);
        assert_eq!(counts.cumulative(0), 7);
    }

    #[test]
    fn a_stale_bucket_is_never_counted_after_idle() {
        let (counts, w) = (counts::<1>(), window());
        counts.add(5_000, 0, 9);
        // The same ring slot comes round again 11 buckets later; its old count is not summed.
        assert_eq!(counts.rolling_sum(&w, 16_500, 0), 0);
        assert_eq!(counts.rolling_sum(&w, 1_000_000, 0), 0);
        counts.add(21_000, 0, 1);
        assert_eq!(counts.rolling_sum(&w, 22_000, 0), 1);
        // Cumulative keeps everything: the reset moved 9 into the folded total.
        assert_eq!(counts.cumulative(0), 10);
    }

    #[test]
    fn rolling_max_takes_the_largest_completed_bucket() {
        let (counts, w) = (counts::<1>(), window());
        counts.raise_max(100, 3);
        counts.raise_max(200, 2);
        counts.raise_max(1100, 5);
        assert_eq!(counts.rolling_max(&w, 1500), 3);
        assert_eq!(counts.rolling_max(&w, 2000), 5);
        assert_eq!(counts.rolling_max(&w, 20_000), 0);
    }

    #[test]
    fn two_windows_read_one_ring_of_fine_buckets() {
        // Rolling stats: 10 x 1000 ms; health: 20 x 500 ms; fine buckets of 500 ms.
        let (rolling, health) = (View::new(1000, 500, 10), View::new(500, 500, 20));
        let kept = rolling.fine_buckets_kept().max(health.fine_buckets_kept());
        let counts = RollingCounts::<1>::new(500, kept);
        counts.add(100, 0, 5);
        counts.add(600, 0, 7);
        counts.add(1100, 0, 1);
        let sum = |view: &View, now, from| {
            counts.sum_by(view.completed(now, from), |c, tag| u64::from(c[0].get(tag)))
        };
        // At 1000 ms: one health bucket of 500 ms complete, and the whole first second.
        assert_eq!(sum(&health, 999, 0), 5);
        assert_eq!(sum(&rolling, 999, 0), 0);
        assert_eq!(sum(&rolling, 1000, 0), 12);
        assert_eq!(sum(&health, 1000, 0), 12);
        // From health bucket 1 on.
        assert_eq!(sum(&health, 1500, 1), 8);
        assert_eq!(counts.filling(&rolling, 1200), 2..3);
        assert_eq!(counts.filling(&health, 1700), 3..4);
    }

    #[test]
    fn a_view_names_its_completed_and_recent_buckets() {
        // 10 buckets of 1000 ms over fine buckets of 500 ms: 2 fine buckets per bucket.
        let view = View::new(1000, 500, 10);
        assert_eq!(view.fine_buckets_kept(), 22);
        assert_eq!(View::new(500, 500, 20).fine_buckets_kept(), 21);
        // At 15 500 ms bucket 15 fills; buckets 5 to 14 are the completed ones.
        let completed: Vec<u64> = (0..20)
            .filter(|&epoch| view.is_completed(15_500, epoch))
            .collect();
        assert_eq!(completed, (5..15).collect::<Vec<u64>>());
        // Early on, every bucket before the filling one.
        assert!(view.is_completed(3_000, 0));
        assert!(!view.is_completed(3_000, 3));
        // The last buckets but the oldest, with the one filling: buckets 6 to 15.
        assert_eq!(view.recent(15_500), 12..32);
        assert_eq!(view.recent(3_000), 0..8);
        assert_eq!(view.completed(15_500, 0), 10..30);
        assert_eq!(view.completed(15_500, 8), 16..30);
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
        let (counts, w) = (counts::<1>(), window());
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
        assert_eq!(counts.rolling_sum(&w, 3000, 0), 40_000);
    }
}
