//! A collapser key's metrics (Hystrix's `HystrixCollapserMetrics`): rolling and cumulative
//! counts of its events, and the distributions of batch and shard sizes.

use std::fmt;

use crate::config::CollapserProperties;
use crate::key::CollapserKey;
use crate::metrics::latency::{RollingLatency, percentiles_of};
use crate::metrics::rolling::{RollingCounts, View};
use crate::metrics::{
    BATCH_SIZE_BUCKET_BOUNDS, CumulativeCounts, CumulativeHistogram, LatencyPercentiles,
};

/// What happens to a collapser (Hystrix's `HystrixEventType.Collapser`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CollapserEvent {
    /// A batch ran (one per batch, however many shards).
    BatchExecuted,
    /// A request was added to a batch.
    AddedToBatch,
    /// A request was answered from the collapser's request cache.
    ResponseFromCache,
}

impl CollapserEvent {
    /// Every collapser event, in Hystrix's order.
    pub const ALL: [CollapserEvent; 3] = [
        CollapserEvent::BatchExecuted,
        CollapserEvent::AddedToBatch,
        CollapserEvent::ResponseFromCache,
    ];

    /// Hystrix's name, e.g. `"BATCH_EXECUTED"`.
    pub const fn name(self) -> &'static str {
        match self {
            CollapserEvent::BatchExecuted => "BATCH_EXECUTED",
            CollapserEvent::AddedToBatch => "ADDED_TO_BATCH",
            CollapserEvent::ResponseFromCache => "RESPONSE_FROM_CACHE",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for CollapserEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The live counters of one collapser key.
pub(crate) struct CollapserCounters {
    counts_view: View,
    counts: RollingCounts<3>,
    batch_sizes: RollingLatency,
    /// Batch sizes since creation, in the buckets of [`BATCH_SIZE_BUCKET_BOUNDS`].
    batch_size_counts: CumulativeCounts,
    shard_sizes: RollingLatency,
}

impl fmt::Debug for CollapserCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CollapserCounters").finish_non_exhaustive()
    }
}

impl CollapserCounters {
    pub(crate) fn new(props: &CollapserProperties) -> Self {
        let buckets = props.metrics_rolling_stats_num_buckets;
        let bucket_ms = props.metrics_rolling_stats_time_in_milliseconds / u64::from(buckets);
        let counts_view = View::new(bucket_ms, bucket_ms, buckets);
        let sizes_buckets = props.metrics_rolling_percentile_num_buckets;
        let sizes_bucket_ms =
            props.metrics_rolling_percentile_time_in_milliseconds / u64::from(sizes_buckets);
        CollapserCounters {
            counts: RollingCounts::new(bucket_ms, counts_view.fine_buckets_kept()),
            counts_view,
            batch_sizes: RollingLatency::new(sizes_bucket_ms, sizes_buckets),
            batch_size_counts: CumulativeCounts::default(),
            shard_sizes: RollingLatency::new(sizes_bucket_ms, sizes_buckets),
        }
    }

    pub(crate) fn add(&self, now_ms: u64, event: CollapserEvent, n: u32) {
        self.counts.add(now_ms, event.index(), n);
    }

    /// A batch of `size` requests ran (in the rolling percentiles' window too when `sizes`).
    pub(crate) fn batch(&self, now_ms: u64, size: usize, sizes: bool) {
        self.add(now_ms, CollapserEvent::BatchExecuted, 1);
        if sizes {
            self.batch_sizes.record(now_ms, size as u64);
        }
        self.batch_size_counts
            .record(&BATCH_SIZE_BUCKET_BOUNDS, size as u64);
    }

    /// A shard of `size` requests ran.
    pub(crate) fn shard(&self, now_ms: u64, size: usize, sizes: bool) {
        if sizes {
            self.shard_sizes.record(now_ms, size as u64);
        }
    }

    pub(crate) fn snapshot(
        &self,
        key: &CollapserKey,
        now_ms: u64,
        sizes: bool,
    ) -> CollapserMetrics {
        let size = |window: &RollingLatency| {
            if sizes {
                percentiles_of(&[window], now_ms)
            } else {
                LatencyPercentiles::DISABLED
            }
        };
        CollapserMetrics {
            key: key.clone(),
            rolling: CollapserEvent::ALL.map(|event| {
                self.counts
                    .rolling_sum(&self.counts_view, now_ms, event.index())
            }),
            cumulative: CollapserEvent::ALL.map(|event| self.counts.cumulative(event.index())),
            batch_size: size(&self.batch_sizes),
            batch_size_histogram: CumulativeCounts::read(
                &BATCH_SIZE_BUCKET_BOUNDS,
                &[&self.batch_size_counts],
            ),
            shard_size: size(&self.shard_sizes),
        }
    }
}

/// A snapshot of a collapser key's metrics (Hystrix's `HystrixCollapserMetrics`), from
/// [`Collapser::metrics`](crate::collapser::Collapser::metrics) or
/// [`Registry::collapser_metrics`](crate::Registry::collapser_metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollapserMetrics {
    key: CollapserKey,
    rolling: [u64; 3],
    cumulative: [u64; 3],
    batch_size: LatencyPercentiles,
    batch_size_histogram: CumulativeHistogram,
    shard_size: LatencyPercentiles,
}

impl CollapserMetrics {
    /// The collapser key.
    pub fn collapser_key(&self) -> &CollapserKey {
        &self.key
    }

    /// Events in the completed buckets of the rolling window
    /// (`metrics.rollingStats.timeInMilliseconds`, default 10 s).
    pub fn rolling_count(&self, event: CollapserEvent) -> u64 {
        self.rolling[event.index()]
    }

    /// Events since the collapser key was first used.
    pub fn cumulative_count(&self, event: CollapserEvent) -> u64 {
        self.cumulative[event.index()]
    }

    /// The distribution of batch sizes, in requests, over the completed buckets of
    /// `metrics.rollingPercentile.timeInMilliseconds` (default 60 s); all -1 when
    /// `metrics.rollingPercentile.enabled` is false.
    pub fn batch_size(&self) -> LatencyPercentiles {
        self.batch_size
    }

    /// Batch sizes since the collapser key was first used, in requests, as a cumulative
    /// histogram over the buckets of [`BATCH_SIZE_BUCKET_BOUNDS`] (1, 2, 5, ..., 10 000): one
    /// value per batch, whatever `metrics.rollingPercentile.enabled` says (it turns the
    /// rolling percentiles off, not this).
    pub fn batch_size_histogram(&self) -> CumulativeHistogram {
        self.batch_size_histogram
    }

    /// The distribution of shard sizes, in requests (one shard per batch without sharding),
    /// over the same window.
    pub fn shard_size(&self) -> LatencyPercentiles {
        self.shard_size
    }
}
