//! Cumulative histograms (latencies, batch sizes): a count per fixed bucket and a sum, since
//! the key was created, as Prometheus histograms want them (counts that only grow, so that
//! rates and quantiles can be summed across instances).
//!
//! Unlike the rolling percentiles ([`latency`](super::latency)), nothing here moves with time:
//! each recorded value adds 1 to its bucket's counter and itself to the sum, two relaxed
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

/// The upper bounds of the collapsers' batch-size histograms' buckets, in requests, lowest
/// first (as [`LATENCY_BUCKET_BOUNDS_MS`]: a batch of `n` requests counts in the first bucket
/// whose bound is `>= n`).
pub const BATCH_SIZE_BUCKET_BOUNDS: [u64; 11] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 10_000];

/// Buckets: one per bound and the overflow bucket.
const BUCKETS: usize = LATENCY_BUCKET_BOUNDS_MS.len() + 1;

/// The bounds of a histogram's buckets (11, as Prometheus's default buckets).
type Bounds = [u64; BUCKETS - 1];

/// The live counters of one histogram.
#[derive(Debug, Default)]
pub(crate) struct CumulativeCounts {
    /// Values per bucket (not cumulative: each value adds to one counter).
    counts: [AtomicU64; BUCKETS],
    /// The sum of the values.
    sum: AtomicU64,
}

impl CumulativeCounts {
    /// Counts one `value` in the buckets of `bounds`.
    #[inline]
    pub(crate) fn record(&self, bounds: &Bounds, value: u64) {
        let bucket = bounds
            .iter()
            .position(|&bound| value <= bound)
            .unwrap_or(BUCKETS - 1);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    /// The histogram of the values of all of `parts`, recorded with `bounds`.
    pub(crate) fn read(
        bounds: &'static Bounds,
        parts: &[&CumulativeCounts],
    ) -> CumulativeHistogram {
        let mut cumulative_counts = [0; BUCKETS];
        let mut below = 0;
        for (bucket, cumulative) in cumulative_counts.iter_mut().enumerate() {
            below += parts
                .iter()
                .map(|part| part.counts[bucket].load(Ordering::Relaxed))
                .sum::<u64>();
            *cumulative = below;
        }
        let sum = parts
            .iter()
            .map(|part| part.sum.load(Ordering::Relaxed))
            .sum();
        CumulativeHistogram {
            bounds,
            cumulative_counts,
            sum,
        }
    }
}

/// A histogram at one instant: how many values were at most each bound, how many in all, and
/// their sum, since its key was created (as a Prometheus histogram's `_bucket`, `_count` and
/// `_sum`). Latencies ([`CommandMetrics::execution_histogram`](crate::CommandMetrics::execution_histogram),
/// [`total_histogram`](crate::CommandMetrics::total_histogram)) are in whole ms with the
/// bounds of [`LATENCY_BUCKET_BOUNDS_MS`]; batch sizes
/// ([`CollapserMetrics::batch_size_histogram`](crate::collapser::CollapserMetrics::batch_size_histogram))
/// in requests with those of [`BATCH_SIZE_BUCKET_BOUNDS`].
///
/// Counts never decrease. A snapshot taken while values are recorded may hold a value in the
/// sum and not yet in its bucket (or the reverse), never a bucket count above the total.
///
/// ```
/// use hystrix::metrics::{CumulativeHistogram, LATENCY_BUCKET_BOUNDS_MS};
///
/// let empty = CumulativeHistogram::empty(&LATENCY_BUCKET_BOUNDS_MS);
/// assert_eq!((empty.count(), empty.sum()), (0, 0));
/// assert_eq!(empty.buckets().count(), LATENCY_BUCKET_BOUNDS_MS.len());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CumulativeHistogram {
    bounds: &'static Bounds,
    /// Per bucket, the values at most its bound; the last is every value.
    cumulative_counts: [u64; BUCKETS],
    sum: u64,
}

impl CumulativeHistogram {
    /// A histogram of no values over the buckets of `bounds`.
    pub fn empty(bounds: &'static [u64; 11]) -> Self {
        CumulativeHistogram {
            bounds,
            cumulative_counts: [0; BUCKETS],
            sum: 0,
        }
    }

    /// Each bucket's upper bound with the number of values at most it (cumulative, as
    /// Prometheus's `le` buckets), lowest bound first. The `+Inf` bucket is
    /// [`count`](Self::count).
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.bounds
            .iter()
            .copied()
            .zip(self.cumulative_counts.iter().copied())
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.cumulative_counts[BUCKETS - 1]
    }

    /// The sum of the recorded values (ms for latencies, requests for batch sizes).
    pub fn sum(&self) -> u64 {
        self.sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_the_first_bucket_at_least_their_size() {
        let live = CumulativeCounts::default();
        for ms in [0, 5, 6, 10, 10_000, 10_001, 3_000_000] {
            live.record(&LATENCY_BUCKET_BOUNDS_MS, ms);
        }
        let histogram = CumulativeCounts::read(&LATENCY_BUCKET_BOUNDS_MS, &[&live]);
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
        assert_eq!(histogram.sum(), 3_020_022);
    }

    #[test]
    fn parts_add_up() {
        let (a, b) = (CumulativeCounts::default(), CumulativeCounts::default());
        a.record(&BATCH_SIZE_BUCKET_BOUNDS, 1);
        b.record(&BATCH_SIZE_BUCKET_BOUNDS, 30);
        b.record(&BATCH_SIZE_BUCKET_BOUNDS, 70);
        let histogram = CumulativeCounts::read(&BATCH_SIZE_BUCKET_BOUNDS, &[&a, &b]);
        assert_eq!(histogram.buckets().next(), Some((1, 1)));
        assert_eq!(histogram.buckets().nth(5), Some((50, 2)));
        assert_eq!(histogram.buckets().nth(6), Some((100, 3)));
        assert_eq!((histogram.count(), histogram.sum()), (3, 101));
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
