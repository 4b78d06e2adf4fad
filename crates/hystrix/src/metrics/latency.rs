//! Rolling latency distributions: HdrHistogram's layout in atomic counters, `hdrhistogram`
//! histograms built only when read.
//!
//! Precision (SPEC Part A 24): two significant digits, so every value up to 255 ms is exact and
//! above that a value is within 1 % (256 and 257 share a counter, 1000 and 1003 do). A value's
//! counter is found with HdrHistogram's index arithmetic: "segment" `b` holds the values of
//! `[128 << b, 256 << b)` (segment 0: `[0, 256)`). Each bucket of the window allocates a segment
//! the first time it sees a value in it, and keeps it; counters carry their bucket's epoch (see
//! [`rolling`](super::rolling)), so nothing is cleared when the window moves. Values above
//! 2^31 ms (24 days) count as 2^31 ms.

use std::sync::OnceLock;

use hdrhistogram::Histogram;

use crate::metrics::rolling::{Divisor, EpochCounter, ring_index, ring_len};

/// Counters per segment: 256 for segment 0, 128 for each later one.
const HALF: usize = 128;
/// Segments: values up to 2^31 ms.
const SEGMENTS: usize = 24;
/// The largest value recorded as itself.
const MAX_VALUE: u64 = (1 << 31) - 1;

/// The segment and counter of `value` (HdrHistogram's bucket and sub-bucket indexes).
#[inline]
fn locate(value: u64) -> (usize, usize) {
    let value = value.min(MAX_VALUE);
    let segment = (64 - (value | 255).leading_zeros() - 8) as usize;
    let sub = (value >> segment) as usize;
    if segment == 0 {
        (0, sub)
    } else {
        (segment, sub - HALF)
    }
}

/// The lowest value sharing the counter at (`segment`, `index`).
#[inline]
fn value_of(segment: usize, index: usize) -> u64 {
    if segment == 0 {
        index as u64
    } else {
        ((index + HALF) as u64) << segment
    }
}

#[derive(Debug, Default)]
struct Slot {
    segments: [OnceLock<Box<[EpochCounter]>>; SEGMENTS],
}

/// Latencies in ms over a rolling window of `buckets` buckets of `bucket_ms`.
#[derive(Debug)]
pub(crate) struct RollingLatency {
    bucket_ms: Divisor,
    buckets: u32,
    slots: Box<[Slot]>,
}

/// Percentiles of a latency distribution, in whole ms; all 0 with no data, all -1 when
/// `metrics.rollingPercentile.enabled` is false (nothing was measured; SPEC Part A 34).
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
            slots: (0..ring_len(buckets)).map(|_| Slot::default()).collect(),
        }
    }

    /// Records one latency of `value_ms` at `now_ms`.
    #[inline]
    pub(crate) fn record(&self, now_ms: u64, value_ms: u64) {
        let epoch = self.bucket_ms.divide(now_ms) as u32;
        let slot = &self.slots[ring_index(epoch, self.slots.len())];
        let (segment, index) = locate(value_ms);
        let counters = slot.segments[segment].get_or_init(|| {
            let len = if segment == 0 { 2 * HALF } else { HALF };
            (0..len).map(|_| EpochCounter::default()).collect()
        });
        counters[index].add(epoch, 1);
    }

    /// The distribution of the completed buckets of the window at `now_ms`.
    #[cfg(test)]
    pub(crate) fn percentiles(&self, now_ms: u64) -> LatencyPercentiles {
        percentiles_of(&[self], now_ms)
    }

    /// Adds the completed buckets of the window at `now_ms` to `histogram`.
    fn add_to(&self, histogram: &mut Histogram<u64>, now_ms: u64) {
        let current = self.bucket_ms.divide(now_ms) as u32;
        for back in 1..=self.buckets {
            let epoch = current.wrapping_sub(back);
            let slot = &self.slots[ring_index(epoch, self.slots.len())];
            for (segment, counters) in slot.segments.iter().enumerate() {
                let Some(counters) = counters.get() else {
                    continue;
                };
                for (index, counter) in counters.iter().enumerate() {
                    let count = counter.get(epoch);
                    if count > 0 {
                        let _ = histogram.record_n(value_of(segment, index), u64::from(count));
                    }
                }
            }
        }
    }

    /// Bytes on the heap: the ring, and the counters allocated so far.
    pub(crate) fn heap_bytes(&self) -> usize {
        let counters: usize = self
            .slots
            .iter()
            .flat_map(|slot| slot.segments.iter())
            .filter_map(OnceLock::get)
            .map(|counters| counters.len() * std::mem::size_of::<EpochCounter>())
            .sum();
        self.slots.len() * std::mem::size_of::<Slot>() + counters
    }
}

/// The distribution of the completed buckets of several windows together (same bucket size) at
/// `now_ms`.
pub(crate) fn percentiles_of(windows: &[&RollingLatency], now_ms: u64) -> LatencyPercentiles {
    let Ok(mut histogram) = Histogram::<u64>::new_with_bounds(1, MAX_VALUE, 2) else {
        return LatencyPercentiles::default();
    };
    for window in windows {
        window.add_to(&mut histogram, now_ms);
    }
    summarize(&histogram)
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
    let mut histogram = Histogram::<u64>::new_with_bounds(1, MAX_VALUE, 2).ok()?;
    window.add_to(&mut histogram, now_ms);
    let enough = (100.0 / (100.0 - percentile)).ceil();
    (histogram.len() as f64 >= enough).then(|| histogram.value_at_quantile(percentile / 100.0))
}

/// Mean and percentiles in whole ms (truncated, as Hystrix's ints).
fn summarize(histogram: &Histogram<u64>) -> LatencyPercentiles {
    if histogram.is_empty() {
        return LatencyPercentiles::default();
    }
    let at = |quantile: f64| histogram.value_at_quantile(quantile) as i64;
    LatencyPercentiles {
        mean: histogram.mean() as i64,
        p0: at(0.0),
        p25: at(0.25),
        p50: at(0.50),
        p75: at(0.75),
        p90: at(0.90),
        p95: at(0.95),
        p99: at(0.99),
        p99_5: at(0.995),
        p100: at(1.0),
        samples: histogram.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(locate(255), (0, 255));
        assert_eq!(locate(256), (1, 0));
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
        let ring = 2 * std::mem::size_of::<Slot>();
        assert_eq!(latency.heap_bytes(), ring + (128 + 128) * 8);
    }
}
