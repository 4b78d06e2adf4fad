//! Rolling latency distributions: HdrHistogram's layout (two significant digits) in atomic
//! counters, read without building a histogram.
//!
//! Precision: two significant digits, so every value up to 255 ms is exact and
//! above that a value is within 1 % (256 and 257 share a counter, 1000 and 1003 do). A value's
//! counter is found with HdrHistogram's index arithmetic (its counter `i` counts the values of
//! `[s << b, (s + 1) << b)` where `b = max(i / 128, 1) - 1` and `s = i - 128 * b`: the values
//! under 256 one by one, then 128 counters per power of two), and its counters are cut in
//! *segments* of 64: segment 0 holds the values under 64 ms.
//!
//! Memory: a window keeps a ring of slot pointers (one per bucket, the bucket filling
//! included, rounded up to a power of two). A slot's table is made the first time its bucket
//! sees a value: segment 0 (values under 64 ms, 512 B) and a pointer to the other segments'
//! pointers, made at the first value of 64 ms or more; a segment (512 B) is made the first
//! time its bucket sees a value in its range. All are kept for the slot's next buckets.
//! Counters carry their bucket's epoch (see [`rolling`](super::rolling)), so nothing is cleared
//! when the window moves. Values above 2^31 ms (24 days) count as 2^31 ms.
//!
//! Tables are not freed when a window goes idle: freeing memory a writer may still be touching
//! needs reclamation (hazard pointers, epochs or reference counts). Epoch schemes need `unsafe`
//! to read through their pointers, which this crate forbids; `arc-swap` is safe but its load
//! and guard cost about 60 instructions more per recorded value (callgrind, issue 27: 76
//! instead of 13 for finding a segment and counting in it).

use std::sync::OnceLock;

use crate::metrics::rolling::{Divisor, EpochCounter, ring_index, ring_len};

/// Counters per segment.
const SEGMENT: usize = 64;
/// HdrHistogram's counters per bucket past the first (two significant digits).
const HALF: usize = 128;
/// Segments: values up to 2^31 ms (HdrHistogram's 25 halves of 128 counters).
const SEGMENTS: usize = 25 * HALF / SEGMENT;
/// The largest value recorded as itself.
const MAX_VALUE: u64 = (1 << 31) - 1;

/// One segment's counters.
type Segment = [EpochCounter; SEGMENT];

/// Segments 1 and up, each made at its first value.
type High = [OnceLock<Box<Segment>>; SEGMENTS - 1];

/// A bucket's counters: values under 64 ms at once (most latencies: one pointer to follow),
/// the others made as they come.
#[derive(Debug)]
struct Table {
    low: Segment,
    high: OnceLock<Box<High>>,
}

impl Table {
    /// The counters of `segment`, made if missing.
    #[inline]
    fn segment(&self, segment: usize) -> &Segment {
        if segment == 0 {
            &self.low
        } else {
            let high = self.high.get_or_init(new_high);
            high[segment - 1].get_or_init(new_segment)
        }
    }

    /// The counters of `segment`, if made.
    fn made(&self, segment: usize) -> Option<&Segment> {
        if segment == 0 {
            Some(&self.low)
        } else {
            self.high.get()?[segment - 1]
                .get()
                .map(|counters| &**counters)
        }
    }

    /// Bytes on the heap: this table and what it made.
    fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Table>()
            + self.high.get().map_or(0, |high| {
                let made = high.iter().filter(|segment| segment.get().is_some());
                std::mem::size_of::<High>() + made.count() * std::mem::size_of::<Segment>()
            })
    }
}

/// The segment and counter of `value`.
#[inline]
fn locate(value: u64) -> (usize, usize) {
    let value = value.min(MAX_VALUE);
    // HdrHistogram's bucket: 0 for [0, 256), b for [128 << b, 256 << b).
    let bucket = 56 - (value | 255).leading_zeros() as usize;
    // HdrHistogram's sub-bucket, 128 to 255 (0 to 255 in bucket 0), and counter.
    let counter = bucket * HALF + (value >> bucket) as usize;
    (counter / SEGMENT, counter % SEGMENT)
}

/// HdrHistogram's bucket of `segment`: its counters count `1 << bucket` values each.
#[inline]
fn bucket_of(segment: usize) -> usize {
    (segment * SEGMENT / HALF).saturating_sub(1)
}

/// The lowest value sharing the counter at (`segment`, `index`).
#[inline]
fn value_of(segment: usize, index: usize) -> u64 {
    let bucket = bucket_of(segment);
    ((segment * SEGMENT + index - bucket * HALF) as u64) << bucket
}

/// Latencies in ms over a rolling window of `buckets` buckets of `bucket_ms`.
#[derive(Debug)]
pub(crate) struct RollingLatency {
    bucket_ms: Divisor,
    buckets: u32,
    slots: Box<[OnceLock<Box<Table>>]>,
}

/// Percentiles of a latency distribution, in whole ms; all 0 with no data, all -1 when
/// `metrics.rollingPercentile.enabled` is false (nothing was measured).
///
/// Values up to 255 ms are exact. Above, values share a counter with their neighbours within
/// 1 %, and a percentile reads as the highest value of its counter, as HdrHistogram (and so
/// Hystrix) reports them: a run of 1000 ms reads as 1003, never as less than it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LatencyPercentiles {
    /// The mean.
    pub mean: i64,
    /// The 0th percentile (the smallest value).
    pub p0: i64,
    /// The 25th percentile.
    pub p25: i64,
    /// The median.
    pub p50: i64,
    /// The 75th percentile.
    pub p75: i64,
    /// The 90th percentile.
    pub p90: i64,
    /// The 95th percentile.
    pub p95: i64,
    /// The 99th percentile.
    pub p99: i64,
    /// The 99.5th percentile.
    pub p99_5: i64,
    /// The 100th percentile (the largest value).
    pub p100: i64,
    /// Latencies in the window: 0 means no data (every value then reads 0, as Hystrix's
    /// stream shows it; an exporter may prefer to say "no value").
    pub samples: u64,
}

impl LatencyPercentiles {
    /// Every value -1: latencies are not recorded.
    pub const DISABLED: LatencyPercentiles = LatencyPercentiles {
        mean: -1,
        p0: -1,
        p25: -1,
        p50: -1,
        p75: -1,
        p90: -1,
        p95: -1,
        p99: -1,
        p99_5: -1,
        p100: -1,
        samples: 0,
    };

    /// The percentiles as Hystrix's stream names them: `("0", p0)`, ..., `("99.5", p99_5)`,
    /// `("100", p100)`.
    pub fn named(&self) -> [(&'static str, i64); 9] {
        [
            ("0", self.p0),
            ("25", self.p25),
            ("50", self.p50),
            ("75", self.p75),
            ("90", self.p90),
            ("95", self.p95),
            ("99", self.p99),
            ("99.5", self.p99_5),
            ("100", self.p100),
        ]
    }
}

impl RollingLatency {
    /// A window of `buckets` buckets of `bucket_ms` ms (both at least 1).
    pub(crate) fn new(bucket_ms: u64, buckets: u32) -> Self {
        RollingLatency {
            bucket_ms: Divisor::new(bucket_ms),
            buckets: buckets.max(1),
            slots: (0..ring_len(buckets)).map(|_| OnceLock::new()).collect(),
        }
    }

    /// An empty window of the same buckets.
    pub(crate) fn empty_like(&self) -> Self {
        RollingLatency {
            bucket_ms: self.bucket_ms,
            buckets: self.buckets,
            slots: (0..self.slots.len()).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Records one latency of `value_ms` at `now_ms`.
    #[inline]
    pub(crate) fn record(&self, now_ms: u64, value_ms: u64) {
        let epoch = self.bucket_ms.divide(now_ms) as u32;
        let slot = &self.slots[ring_index(epoch, self.slots.len())];
        let (segment, index) = locate(value_ms);
        slot.get_or_init(new_table).segment(segment)[index].add(epoch, 1);
    }

    /// The distribution of the completed buckets of the window at `now_ms`.
    #[cfg(test)]
    pub(crate) fn percentiles(&self, now_ms: u64) -> LatencyPercentiles {
        percentiles_of(&[self], now_ms)
    }

    /// The tables of the completed buckets of the window at `now_ms`, with their epochs.
    fn completed(&self, now_ms: u64) -> impl Iterator<Item = (&Table, u32)> {
        let current = self.bucket_ms.divide(now_ms) as u32;
        (1..=self.buckets).filter_map(move |back| {
            let epoch = current.wrapping_sub(back);
            let slot = &self.slots[ring_index(epoch, self.slots.len())];
            slot.get().map(|table| (&**table, epoch))
        })
    }

    /// Bytes on the heap: the ring, and the tables and counters made so far.
    pub(crate) fn heap_bytes(&self) -> usize {
        let tables = self.slots.iter().filter_map(OnceLock::get);
        self.slots.len() * std::mem::size_of::<OnceLock<Box<Table>>>()
            + tables.map(|table| table.heap_bytes()).sum::<usize>()
    }
}

#[cold]
fn new_table() -> Box<Table> {
    Box::new(Table {
        low: std::array::from_fn(|_| EpochCounter::default()),
        high: OnceLock::new(),
    })
}

#[cold]
fn new_high() -> Box<High> {
    Box::new(std::array::from_fn(|_| OnceLock::new()))
}

#[cold]
fn new_segment() -> Box<Segment> {
    Box::new(std::array::from_fn(|_| EpochCounter::default()))
}

/// The counts of a distribution, lowest value first: (segment, index, count) of each counter
/// that counted, and their total.
#[derive(Debug, Default)]
struct Counts {
    counted: Vec<(usize, usize, u64)>,
    total: u64,
}

impl Counts {
    /// The counts of the completed buckets of several windows together (same bucket size) at
    /// `now_ms`.
    fn of(windows: &[&RollingLatency], now_ms: u64) -> Self {
        let mut counts = Counts::default();
        let mut tables = Vec::new();
        for window in windows {
            tables.extend(window.completed(now_ms));
        }
        if tables.is_empty() {
            return counts;
        }
        for segment in 0..SEGMENTS {
            let mut sums = [0u64; SEGMENT];
            let mut seen = false;
            for (table, epoch) in &tables {
                let Some(counters) = table.made(segment) else {
                    continue;
                };
                for (sum, counter) in sums.iter_mut().zip(counters.iter()) {
                    *sum += u64::from(counter.get(*epoch));
                }
                seen = true;
            }
            if !seen {
                continue;
            }
            for (index, &count) in sums.iter().enumerate().filter(|(_, count)| **count > 0) {
                counts.counted.push((segment, index, count));
                counts.total += count;
            }
        }
        counts
    }

    /// The value at `quantile` (0.0 to 1.0), by HdrHistogram's rule: the counter holding the
    /// `ceil(quantile * total)`th value (at least the first), read as its lowest value for
    /// quantile 0 and as its highest otherwise. 0 with no values.
    fn value_at_quantile(&self, quantile: f64) -> u64 {
        let rank = ((quantile.min(1.0) * self.total as f64).ceil() as u64).max(1);
        let mut below = 0;
        for &(segment, index, count) in &self.counted {
            below += count;
            if below >= rank {
                let lowest = value_of(segment, index);
                return if quantile == 0.0 {
                    lowest
                } else {
                    lowest + (1 << bucket_of(segment)) - 1
                };
            }
        }
        0
    }

    /// The mean, each counter read as the middle of its values (rounded up), summed in
    /// HdrHistogram's order and floating-point steps.
    fn mean(&self) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        self.counted
            .iter()
            .fold(0.0, |mean, &(segment, index, count)| {
                let middle = value_of(segment, index) + ((1 << bucket_of(segment)) >> 1);
                mean + middle as f64 * count as f64 / self.total as f64
            })
    }
}

/// The distribution of the completed buckets of several windows together (same bucket size) at
/// `now_ms`.
pub(crate) fn percentiles_of(windows: &[&RollingLatency], now_ms: u64) -> LatencyPercentiles {
    summarize(&Counts::of(windows, now_ms))
}

/// The value at `percentile` (0 to 100, below 100) of the completed buckets of `window` at
/// `now_ms`, in ms (the highest value of its counter, as [`LatencyPercentiles`]); `None`
/// until there are enough values that the percentile is not the largest one (100 ÷ (100 −
/// percentile): 2 for the median, 20 for p95, 100 for p99).
pub(crate) fn value_at_percentile(
    window: &RollingLatency,
    now_ms: u64,
    percentile: f64,
) -> Option<u64> {
    let counts = Counts::of(&[window], now_ms);
    let enough = (100.0 / (100.0 - percentile)).ceil();
    (counts.total as f64 >= enough).then(|| counts.value_at_quantile(percentile / 100.0))
}

/// Mean and percentiles in whole ms (truncated, as Hystrix's ints).
fn summarize(counts: &Counts) -> LatencyPercentiles {
    if counts.total == 0 {
        return LatencyPercentiles::default();
    }
    let at = |quantile: f64| counts.value_at_quantile(quantile) as i64;
    LatencyPercentiles {
        mean: counts.mean() as i64,
        p0: at(0.0),
        p25: at(0.25),
        p50: at(0.50),
        p75: at(0.75),
        p90: at(0.90),
        p95: at(0.95),
        p99: at(0.99),
        p99_5: at(0.995),
        p100: at(1.0),
        samples: counts.total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::Histogram;
    use proptest::prelude::*;

    #[test]
    fn layout_matches_hdrhistogram_at_two_significant_digits() {
        let histogram = Histogram::<u64>::new_with_bounds(1, MAX_VALUE, 2).unwrap();
        for value in [
            1u64, 100, 255, 256, 257, 511, 512, 1000, 1003, 65_535, 1_000_000,
        ] {
            let (segment, index) = locate(value);
            assert_eq!(
                value_of(segment, index),
                histogram.lowest_equivalent(value),
                "{value}"
            );
        }
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(63), (0, 63));
        assert_eq!(locate(64), (1, 0));
        assert_eq!(locate(255), (3, 63));
        assert_eq!(locate(256), (4, 0));
        assert_eq!(locate(511), (5, 63));
        assert_eq!(locate(512), (6, 0));
        assert_eq!(locate(MAX_VALUE), (SEGMENTS - 1, SEGMENT - 1));
        assert_eq!(locate(u64::MAX), locate(MAX_VALUE));
    }

    #[test]
    fn percentiles_of_a_known_set() {
        let latency = RollingLatency::new(10_000, 6);
        // 1..=100 ms, one each, in bucket 0.
        for ms in 1..=100 {
            latency.record(5_000, ms);
        }
        // Nothing is reported while the bucket fills.
        assert_eq!(latency.percentiles(9_999), LatencyPercentiles::default());
        let p = latency.percentiles(10_000);
        assert_eq!(
            (
                p.mean, p.p0, p.p25, p.p50, p.p75, p.p90, p.p95, p.p99, p.p99_5, p.p100
            ),
            (50, 1, 25, 50, 75, 90, 95, 99, 100, 100)
        );
        // The bucket leaves the 60 s window when the 7th bucket completes.
        assert_eq!(latency.percentiles(69_999).p50, 50);
        assert_eq!(latency.percentiles(70_000), LatencyPercentiles::default());
    }

    #[test]
    fn zero_millisecond_latencies_stay_zero() {
        let latency = RollingLatency::new(1000, 1);
        for _ in 0..3 {
            latency.record(0, 0);
        }
        latency.record(0, 10);
        let p = latency.percentiles(1000);
        assert_eq!((p.p0, p.p50, p.p75, p.p100, p.mean), (0, 0, 0, 10, 2));
    }

    #[test]
    fn large_values_keep_two_significant_digits() {
        let latency = RollingLatency::new(1000, 1);
        latency.record(0, 1000);
        latency.record(0, 30_000);
        let p = latency.percentiles(1000);
        assert_eq!((p.p0, p.p100), (1000, 30_079));
        // A ring of 2 slot pointers, one table (segment 0 and a pointer), the pointers to the
        // 49 other segments, 2 of them made.
        assert_eq!(
            latency.heap_bytes(),
            2 * 16 + (512 + 16) + 49 * 16 + 2 * 512
        );
    }

    proptest! {
        /// Mean and percentiles are HdrHistogram's, to the unit.
        #[test]
        fn percentiles_are_hdrhistogram_s(
            values in proptest::collection::vec(
                prop_oneof![0u64..300, 0u64..100_000, 0u64..(1 << 32)],
                1..200,
            ),
            percentile in 0.0f64..99.99,
        ) {
            let latency = RollingLatency::new(1000, 1);
            let mut histogram = Histogram::<u64>::new_with_bounds(1, MAX_VALUE, 2).unwrap();
            for &value in &values {
                latency.record(0, value);
                histogram.record(value.min(MAX_VALUE)).unwrap();
            }
            let p = latency.percentiles(1000);
            let at = |quantile: f64| histogram.value_at_quantile(quantile) as i64;
            prop_assert_eq!(
                (p.mean, p.p0, p.p25, p.p50, p.p75, p.p90, p.p95, p.p99, p.p99_5, p.p100),
                (
                    histogram.mean() as i64,
                    at(0.0),
                    at(0.25),
                    at(0.5),
                    at(0.75),
                    at(0.9),
                    at(0.95),
                    at(0.99),
                    at(0.995),
                    at(1.0)
                )
            );
            prop_assert_eq!(p.samples, values.len() as u64);
            let enough = (100.0 / (100.0 - percentile)).ceil();
            prop_assert_eq!(
                value_at_percentile(&latency, 1000, percentile),
                (values.len() as f64 >= enough)
                    .then(|| histogram.value_at_quantile(percentile / 100.0))
            );
        }
    }
}
