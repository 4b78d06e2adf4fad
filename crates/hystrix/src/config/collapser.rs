//! Collapser properties (`hystrix.collapser.*`).

use crate::config::{at_least_one, no_check, positive_ms, property_table};
use crate::error::ConfigError;

property_table! {
    /// The resolved properties of one collapser key.
    ///
    /// Field docs give each property's Hystrix name, unit and default. Obtain a snapshot with
    /// [`Properties::collapser`](crate::config::Properties::collapser).
    pub struct CollapserProperties;
    layer CollapserLayer;
    info COLLAPSER_PROPERTIES;

    /// `maxRequestsInBatch`: a batch that reaches this many requests runs at once and a new
    /// one starts. Default 2147483647 (no limit, as Hystrix's `Integer.MAX_VALUE`). Dynamic.
    max_requests_in_batch: u32 = 2_147_483_647;
        "maxRequestsInBatch", Dynamic, Any, at_least_one;
    /// `timerDelayInMilliseconds`: the batching window in ms; a batch runs at the first tick of
    /// this period after its first request. Default 10. Dynamic (read when the timer starts).
    timer_delay_in_milliseconds: u64 = 10;
        "timerDelayInMilliseconds", Dynamic, Any, positive_ms;
    /// `requestCache.enabled`: duplicate arguments in one batch share one slot, and a
    /// collapser with a cache-key function shares responses within a request.
    /// Default true. Dynamic.
    request_cache_enabled: bool = true;
        "requestCache.enabled", Dynamic, Any, no_check;
    /// `metrics.rollingStats.timeInMilliseconds`: the collapser's rolling counter window in
    /// ms. Default 10000. Fixed.
    metrics_rolling_stats_time_in_milliseconds: u64 = 10_000;
        "metrics.rollingStats.timeInMilliseconds", Fixed, Any, positive_ms;
    /// `metrics.rollingStats.numBuckets`: buckets in that window; must divide it evenly; 1 to
    /// 1000. Default 10. Fixed.
    metrics_rolling_stats_num_buckets: u32 = 10;
        "metrics.rollingStats.numBuckets", Fixed, Any, crate::config::command::bucket_count;
    /// `metrics.rollingPercentile.enabled`: whether batch and shard sizes are recorded.
    /// Default true. Dynamic.
    metrics_rolling_percentile_enabled: bool = true;
        "metrics.rollingPercentile.enabled", Dynamic, Any, no_check;
    /// `metrics.rollingPercentile.timeInMilliseconds`: the batch-size distribution's window
    /// in ms. Default 60000. Fixed.
    metrics_rolling_percentile_time_in_milliseconds: u64 = 60_000;
        "metrics.rollingPercentile.timeInMilliseconds", Fixed, Any, positive_ms;
    /// `metrics.rollingPercentile.numBuckets`: buckets in that window; must divide it evenly;
    /// 1 to 1000. Default 6. Fixed.
    metrics_rolling_percentile_num_buckets: u32 = 6;
        "metrics.rollingPercentile.numBuckets", Fixed, Any, crate::config::command::bucket_count;
    /// `metrics.rollingPercentile.bucketSize`: accepted for compatibility; unused (as in
    /// Hystrix 1.5), so it may change at any time. Default 100.
    metrics_rolling_percentile_bucket_size: u32 = 100;
        "metrics.rollingPercentile.bucketSize", Dynamic, Any, no_check;
}

impl CollapserProperties {
    /// Checks the rules that tie properties together; `prefix` is `hystrix.collapser.<Key>.`.
    pub(crate) fn validate(
        &self,
        prefix: &str,
        _rules: &crate::config::Rules,
    ) -> Result<(), ConfigError> {
        for (time, buckets, name) in [
            (
                self.metrics_rolling_stats_time_in_milliseconds,
                self.metrics_rolling_stats_num_buckets,
                "metrics.rollingStats",
            ),
            (
                self.metrics_rolling_percentile_time_in_milliseconds,
                self.metrics_rolling_percentile_num_buckets,
                "metrics.rollingPercentile",
            ),
        ] {
            if time % u64::from(buckets) != 0 {
                return Err(ConfigError::InvalidValue {
                    name: format!("{prefix}{name}.numBuckets"),
                    value: buckets.to_string(),
                    reason: format!("must divide {name}.timeInMilliseconds ({time} ms) evenly"),
                });
            }
        }
        Ok(())
    }
}

/// The collapser has nothing on a hot path: its snapshot is read per batch.
#[derive(Debug, Default)]
pub(crate) struct HotCollapserProperties;

impl HotCollapserProperties {
    pub(crate) fn publish(&self, _props: &CollapserProperties) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_must_divide_evenly() {
        let props = CollapserProperties {
            metrics_rolling_percentile_num_buckets: 7,
            ..CollapserProperties::default()
        };
        let err = props
            .validate("hystrix.collapser.C.", &crate::config::Rules::default())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid value `7` for `hystrix.collapser.C.metrics.rollingPercentile.numBuckets`: \
             must divide metrics.rollingPercentile.timeInMilliseconds (60000 ms) evenly"
        );
        assert!(
            CollapserProperties::default()
                .validate("p.", &crate::config::Rules::default())
                .is_ok()
        );
    }
}
