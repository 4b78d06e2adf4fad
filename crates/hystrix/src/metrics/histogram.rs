//! Cumulative latency histograms: a count per fixed bucket and a sum, since the key was
//! created, as Prometheus histograms want them (counts that only grow, so that rates and
//! quantiles can be summed across instances).
//!
//! Unlike the rolling percentiles ([`latency`](super::latency)), nothing here moves with time:
//! each recorded value adds 1 to its bucket's counter and its ms to the sum, two relaxed
//! atomic additions, and the counters are never reset.

use std::sync::atomic::{AtomicU64, Ordering};

/// The upper bounds of the latency histograms' buckets, in ms, lowest first: a value `v` is
/// counted in the first bucket whose bound is `>= v`, or in the overflow bucket (`+Inf`) above
/// the last. They are Prometheus's default buckets (5 ms to 10 s), which Prometheus client
/// libraries use for request latencies.
pub const LATENCY_BUCKET_BOUNDS_MS: [u64; 11] =
    [5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000];

/// [`LATENCY_BUCKET_BOUNDS_MS`] in seconds, for an exporter's configuration (e.g.
/// `metrics-exporter-prometheus`'s `set_buckets_for_metric`, so that the `metrics` facade's
/// histograms have the buckets of the dashboard crate's `/metrics`).
pub const LATENCY_BUCKET_BOUNDS_SECONDS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets: one per bound and the overflow bucket.
const BUCKETS: usize = LATENCY_BUCKET_BOUNDS_MS.len() + 1;

/// The live counters of one latency histogram.
#[derive(Debug, Default)]
pub(crate) struct CumulativeLatency {
    /// Values per bucket (not cumulative: each value adds to one counter).
    counts: [AtomicU64; BUCKETS],
    /// The sum of the values, in ms.
    sum_ms: AtomicU64,
}

impl CumulativeLatency {
    /// Counts one value of `ms`.
    #[inline]
    pub(crate) fn record(&self, ms: u64) {
        let bucket = LATENCY_BUCKET_BOUNDS_MS
            .iter()
            .position(|&bound| ms <= bound)
            .unwrap_or(BUCKETS - 1);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ms.fetch_add(ms, Ordering::Relaxed);
    }

    /// The histogram of the values of all of `parts`.
    pub(crate) fn read(parts: &[&CumulativeLatency]) -> LatencyHistogram {
        let mut histogram = LatencyHistogram::default();
        let mut below = 0;
        for (bucket, cumulative) in histogram.cumulative_counts.iter_mut().enumerate() {
            below += parts
                .iter()
                .map(|part| part.counts[bucket].load(Ordering::Relaxed))
                .sum::<u64>();
            *cumulative = below;
        }
        histogram.sum_ms = parts
            .iter()
            .map(|part| part.sum_ms.load(Ordering::Relaxed))
            .sum();
        histogram
    }
}

/// A latency histogram at one instant: how many values were at most each bound of
/// [`LATENCY_BUCKET_BOUNDS_MS`], how many in all, and their sum, since the command key was
/// created (as a Prometheus histogram's `_bucket`, `_count` and `_sum`). Latencies are in whole
/// ms, as the library measures them. Read it with
/// [`CommandMetrics::execution_histogram`](crate::CommandMetrics::execution_histogram) and
/// [`total_histogram`](crate::CommandMetrics::total_histogram).
///
/// Counts never decrease. A snapshot taken while executions end may hold a value in the sum
/// and not yet in its bucket (or the reverse), never a bucket count above the total.
///
/// ```
/// use hystrix::metrics::{LATENCY_BUCKET_BOUNDS_MS, LatencyHistogram};
///
/// let empty = LatencyHistogram::default();
/// assert_eq!(empty.count(), 0);
/// assert_eq!(empty.buckets().count(), LATENCY_BUCKET_BOUNDS_MS.len());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LatencyHistogram {
    /// Per bucket, the values at most its bound; the last is every value.
    cumulative_counts: [u64; BUCKETS],
    sum_ms: u64,
}

impl LatencyHistogram {
    /// Each bound of [`LATENCY_BUCKET_BOUNDS_MS`] (ms) with the number of values at most it
    /// (cumulative, as Prometheus's `le` buckets), lowest bound first. The `+Inf` bucket is
    /// [`count`](Self::count).
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        LATENCY_BUCKET_BOUNDS_MS
            .iter()
            .copied()
            .zip(self.cumulative_counts.iter().copied())
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.cumulative_counts[BUCKETS - 1]
    }

    /// The sum of the recorded values, in ms.
    pub fn sum_ms(&self) -> u64 {
        self.sum_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_the_first_bucket_at_least_their_size() {
        let live = CumulativeLatency::default();
        for ms in [0, 5, 6, 10, 10_000, 10_001, 3_000_000] {
            live.record(ms);
        }
        let histogram = CumulativeLatency::read(&[&live]);
        let buckets: Vec<(u64, u64)> = histogram.buckets().collect();
        assert_eq!(
            buckets,
            vec![
                (5, 2),
                (10, 4),
                (25, 4),
                (50, 4),
                (100, 4),
                (250, 4),
                (500, 4),
                (1_000, 4),
                (2_500, 4),
                (5_000, 4),
                (10_000, 5),
            ]
        );
        assert_eq!(histogram.count(), 7);
        assert_eq!(histogram.sum_ms(), 3_020_022);
    }

    #[test]
    fn parts_add_up() {
        let (a, b) = (CumulativeLatency::default(), CumulativeLatency::default());
        a.record(1);
        b.record(30);
        b.record(70);
        let histogram = CumulativeLatency::read(&[&a, &b]);
        assert_eq!(histogram.buckets().nth(3), Some((50, 2)));
        assert_eq!(histogram.buckets().nth(4), Some((100, 3)));
        assert_eq!((histogram.count(), histogram.sum_ms()), (3, 101));
    }

    #[test]
    fn bounds_in_seconds_match_the_ms() {
        for (ms, s) in LATENCY_BUCKET_BOUNDS_MS
            .iter()
            .zip(LATENCY_BUCKET_BOUNDS_SECONDS)
        {
            assert_eq!(*ms as f64 / 1000.0, s);
        }
    }
}
