//! Thread-pool properties (`hystrix.threadpool.*`).

use crate::config::{no_check, positive_ms, property_table};
use crate::error::ConfigError;

fn non_negative(v: &i32) -> Result<(), String> {
    if *v >= 0 {
        Ok(())
    } else {
        Err("must not be negative".into())
    }
}

property_table! {
    /// The resolved properties of one thread-pool key.
    ///
    /// Field docs give each property's Hystrix name, unit and default. Obtain a snapshot with
    /// [`Properties::thread_pool`](crate::config::Properties::thread_pool).
    pub struct ThreadPoolProperties;
    layer ThreadPoolLayer;
    info THREAD_POOL_PROPERTIES;

    /// `coreSize`: threads kept in the pool. Default 10. Dynamic. The pool needs at least one
    /// thread: 0 is refused unless `allowMaximumSizeToDivergeFromCoreSize` gives it a
    /// `maximumSize` of 1 or more.
    core_size: u32 = 10;
        "coreSize", Dynamic, Any, no_check;
    /// `maximumSize`: the pool's maximum when `allowMaximumSizeToDivergeFromCoreSize` is true.
    /// Default 10. Dynamic.
    maximum_size: u32 = 10;
        "maximumSize", Dynamic, Any, no_check;
    /// `allowMaximumSizeToDivergeFromCoreSize`: whether `maximumSize` applies; if false the pool
    /// is fixed at `coreSize`. Default false. Dynamic.
    allow_maximum_size_to_diverge_from_core_size: bool = false;
        "allowMaximumSizeToDivergeFromCoreSize", Dynamic, Any, no_check;
    /// `keepAliveTimeMinutes`: minutes an idle thread above `coreSize` lives. Default 1. Dynamic.
    keep_alive_time_minutes: u32 = 1;
        "keepAliveTimeMinutes", Dynamic, Any, no_check;
    /// `maxQueueSize`: capacity of the pool's queue; 0 or less means no queue (hand-off: reject
    /// when every thread is busy). Default -1. Fixed once a command using the pool is defined.
    max_queue_size: i32 = -1;
        "maxQueueSize", Fixed, Any, no_check;
    /// `queueSizeRejectionThreshold`: reject when this many tasks are queued, even below
    /// `maxQueueSize`; ignored without a queue. Default 5. Dynamic.
    queue_size_rejection_threshold: i32 = 5;
        "queueSizeRejectionThreshold", Dynamic, Any, non_negative;
    /// `metrics.rollingStats.timeInMilliseconds`: the pool's rolling counter window in ms.
    /// Default 10000. Fixed.
    metrics_rolling_stats_time_in_milliseconds: u64 = 10_000;
        "metrics.rollingStats.timeInMilliseconds", Fixed, Any, positive_ms;
    /// `metrics.rollingStats.numBuckets`: buckets in that window; must divide it evenly; 1 to
    /// 1000. Default 10. Fixed.
    metrics_rolling_stats_num_buckets: u32 = 10;
        "metrics.rollingStats.numBuckets", Fixed, Any, crate::config::command::bucket_count;
}

impl ThreadPoolProperties {
    /// The pool's real maximum size (Hystrix's `actualMaximumSize`): `coreSize` unless
    /// divergence is allowed, then the larger of `coreSize` and `maximumSize`.
    pub fn actual_maximum_size(&self) -> u32 {
        if self.allow_maximum_size_to_diverge_from_core_size {
            self.core_size.max(self.maximum_size)
        } else {
            self.core_size
        }
    }

    /// Checks the rules that tie properties together; `prefix` is `hystrix.threadpool.<Key>.`.
    pub(crate) fn validate(
        &self,
        prefix: &str,
        _rules: &crate::config::Rules,
    ) -> Result<(), ConfigError> {
        if self.actual_maximum_size() == 0 {
            return Err(ConfigError::InvalidValue {
                name: format!("{prefix}coreSize"),
                value: self.core_size.to_string(),
                reason: "the pool needs at least 1 thread (coreSize, or maximumSize with \
                         allowMaximumSizeToDivergeFromCoreSize)"
                    .into(),
            });
        }
        if self.metrics_rolling_stats_time_in_milliseconds
            % u64::from(self.metrics_rolling_stats_num_buckets)
            != 0
        {
            return Err(ConfigError::InvalidValue {
                name: format!("{prefix}metrics.rollingStats.numBuckets"),
                value: self.metrics_rolling_stats_num_buckets.to_string(),
                reason: format!(
                    "must divide metrics.rollingStats.timeInMilliseconds ({} ms) evenly",
                    self.metrics_rolling_stats_time_in_milliseconds
                ),
            });
        }
        if self.allow_maximum_size_to_diverge_from_core_size && self.maximum_size < self.core_size {
            // Hystrix's documented meaning (the pool runs at coreSize), not an error.
            tracing::warn!(
                "{prefix}maximumSize ({}) is below coreSize ({}); the pool runs at coreSize",
                self.maximum_size,
                self.core_size
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(core: u32, max: u32, diverge: bool) -> ThreadPoolProperties {
        ThreadPoolProperties {
            core_size: core,
            maximum_size: max,
            allow_maximum_size_to_diverge_from_core_size: diverge,
            ..ThreadPoolProperties::default()
        }
    }

    #[test]
    fn actual_maximum_size_follows_hystrix_examples() {
        assert_eq!(pool(2, 8, false).actual_maximum_size(), 2);
        assert_eq!(pool(10, 21, true).actual_maximum_size(), 21);
        assert_eq!(pool(10, 3, true).actual_maximum_size(), 10);
        assert_eq!(pool(14, 10, true).actual_maximum_size(), 14);
    }
}

/// The thread-pool properties read at every schedule, mirrored into atomics (see
/// [`HotCommandProperties`](super::command::HotCommandProperties)).
#[derive(Debug, Default)]
pub(crate) struct HotThreadPoolProperties {
    core_size: std::sync::atomic::AtomicU32,
    actual_maximum_size: std::sync::atomic::AtomicU32,
    keep_alive_ms: std::sync::atomic::AtomicU64,
    queue_size_rejection_threshold: std::sync::atomic::AtomicU32,
}

/// A copy of [`HotThreadPoolProperties`], read once per schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HotPoolSnapshot {
    /// `coreSize`.
    pub(crate) core_size: u32,
    /// Hystrix's `actualMaximumSize`.
    pub(crate) actual_maximum_size: u32,
    /// `keepAliveTimeMinutes`, in ms.
    pub(crate) keep_alive_ms: u64,
    /// `queueSizeRejectionThreshold` (never negative).
    pub(crate) queue_size_rejection_threshold: u32,
}

impl HotThreadPoolProperties {
    pub(crate) fn publish(&self, props: &ThreadPoolProperties) {
        use std::sync::atomic::Ordering::Release;
        self.core_size.store(props.core_size, Release);
        self.actual_maximum_size
            .store(props.actual_maximum_size(), Release);
        self.keep_alive_ms
            .store(u64::from(props.keep_alive_time_minutes) * 60_000, Release);
        self.queue_size_rejection_threshold.store(
            u32::try_from(props.queue_size_rejection_threshold).unwrap_or(0),
            Release,
        );
    }

    #[inline]
    pub(crate) fn load(&self) -> HotPoolSnapshot {
        use std::sync::atomic::Ordering::Acquire;
        HotPoolSnapshot {
            core_size: self.core_size.load(Acquire),
            actual_maximum_size: self.actual_maximum_size.load(Acquire),
            keep_alive_ms: self.keep_alive_ms.load(Acquire),
            queue_size_rejection_threshold: self.queue_size_rejection_threshold.load(Acquire),
        }
    }
}
