//! The message of Hystrix's configuration stream (`/hystrix/config.stream`): the
//! properties in force for every command, thread pool and collapser, with Hystrix 1.5's key set
//! (`HystrixConfigurationJsonStream`), one line on the wire:
//!
//! ```json
//! {"type":"HystrixConfig",
//!  "commands":{"GetUser":{"threadPoolKey":"Users","groupKey":"Users",
//!    "execution":{"isolationStrategy":"THREAD","threadPoolKeyOverride":null,
//!      "requestCacheEnabled":true,"requestLogEnabled":true,"timeoutEnabled":true,
//!      "fallbackEnabled":true,"timeoutInMilliseconds":1000,"semaphoreSize":10,
//!      "fallbackSemaphoreSize":10,"threadInterruptOnTimeout":true},
//!    "metrics":{"healthBucketSizeInMs":500,"percentileBucketSizeInMilliseconds":10000,
//!      "percentileBucketCount":6,"percentileEnabled":true,
//!      "counterBucketSizeInMilliseconds":1000,"counterBucketCount":10},
//!    "circuitBreaker":{"enabled":true,"isForcedOpen":false,"isForcedClosed":false,
//!      "requestVolumeThreshold":20,"errorPercentageThreshold":50,"sleepInMilliseconds":5000}}},
//!  "threadpools":{"Users":{"coreSize":10,"maximumSize":10,"actualMaximumSize":10,
//!    "maxQueueSize":-1,"queueRejectionThreshold":5,"keepAliveTimeInMinutes":1,
//!    "allowMaximumSizeToDivergeFromCoreSize":false,"counterBucketSizeInMilliseconds":1000,
//!    "counterBucketCount":10}},
//!  "collapsers":{"GetRating":{"maxRequestsInBatch":2147483647,"timerDelayInMilliseconds":10,
//!    "requestCacheEnabled":true,"metrics":{"percentileBucketSizeInMilliseconds":10000,
//!      "percentileBucketCount":6,"percentileEnabled":true,
//!      "counterBucketSizeInMilliseconds":1000,"counterBucketCount":10}}}}
//! ```
//!
//! Every value is the property it names; two serializer bugs of Hystrix are not copied:
//! `isForcedClosed` is `circuitBreaker.forceClosed` (Hystrix writes forceOpen there) and
//! `percentileBucketCount` is `metrics.rollingPercentile.numBuckets` (Hystrix writes the
//! counter bucket count there). Bucket sizes are a window divided by its bucket count, in ms.

use hystrix::Registry;
use hystrix::config::{CollapserProperties, CommandProperties, ThreadPoolProperties};

use crate::stream::{Keyed, isolation_of, to_json};

#[derive(serde::Serialize)]
struct ConfigMessage {
    #[serde(rename = "type")]
    kind: &'static str,
    commands: Keyed<CommandConfig>,
    threadpools: Keyed<ThreadPoolConfig>,
    collapsers: Keyed<CollapserConfig>,
}

#[derive(serde::Serialize)]
struct CommandConfig {
    #[serde(rename = "threadPoolKey")]
    thread_pool_key: String,
    #[serde(rename = "groupKey")]
    group_key: String,
    execution: ExecutionConfig,
    metrics: CommandMetricsConfig,
    #[serde(rename = "circuitBreaker")]
    circuit_breaker: CircuitBreakerConfig,
}

#[derive(serde::Serialize)]
struct ExecutionConfig {
    #[serde(rename = "isolationStrategy")]
    isolation_strategy: &'static str,
    #[serde(rename = "threadPoolKeyOverride")]
    thread_pool_key_override: Option<String>,
    #[serde(rename = "requestCacheEnabled")]
    request_cache_enabled: bool,
    #[serde(rename = "requestLogEnabled")]
    request_log_enabled: bool,
    #[serde(rename = "timeoutEnabled")]
    timeout_enabled: bool,
    #[serde(rename = "fallbackEnabled")]
    fallback_enabled: bool,
    #[serde(rename = "timeoutInMilliseconds")]
    timeout_in_milliseconds: u64,
    #[serde(rename = "semaphoreSize")]
    semaphore_size: u32,
    #[serde(rename = "fallbackSemaphoreSize")]
    fallback_semaphore_size: u32,
    #[serde(rename = "threadInterruptOnTimeout")]
    thread_interrupt_on_timeout: bool,
}

#[derive(serde::Serialize)]
struct CommandMetricsConfig {
    #[serde(rename = "healthBucketSizeInMs")]
    health_bucket_size_in_ms: u64,
    #[serde(flatten)]
    windows: WindowsConfig,
}

/// The rolling windows' layout, shared by commands and collapsers.
#[derive(serde::Serialize)]
struct WindowsConfig {
    #[serde(rename = "percentileBucketSizeInMilliseconds")]
    percentile_bucket_size_in_milliseconds: u64,
    #[serde(rename = "percentileBucketCount")]
    percentile_bucket_count: u32,
    #[serde(rename = "percentileEnabled")]
    percentile_enabled: bool,
    #[serde(flatten)]
    counters: CountersConfig,
}

/// The rolling counters' layout, shared by commands, pools and collapsers.
#[derive(serde::Serialize)]
struct CountersConfig {
    #[serde(rename = "counterBucketSizeInMilliseconds")]
    counter_bucket_size_in_milliseconds: u64,
    #[serde(rename = "counterBucketCount")]
    counter_bucket_count: u32,
}

#[derive(serde::Serialize)]
struct CircuitBreakerConfig {
    enabled: bool,
    #[serde(rename = "isForcedOpen")]
    is_forced_open: bool,
    #[serde(rename = "isForcedClosed")]
    is_forced_closed: bool,
    #[serde(rename = "requestVolumeThreshold")]
    request_volume_threshold: u32,
    #[serde(rename = "errorPercentageThreshold")]
    error_percentage_threshold: u32,
    #[serde(rename = "sleepInMilliseconds")]
    sleep_in_milliseconds: u64,
}

#[derive(serde::Serialize)]
struct ThreadPoolConfig {
    #[serde(rename = "coreSize")]
    core_size: u32,
    #[serde(rename = "maximumSize")]
    maximum_size: u32,
    #[serde(rename = "actualMaximumSize")]
    actual_maximum_size: u32,
    #[serde(rename = "maxQueueSize")]
    max_queue_size: i32,
    #[serde(rename = "queueRejectionThreshold")]
    queue_rejection_threshold: i32,
    #[serde(rename = "keepAliveTimeInMinutes")]
    keep_alive_time_in_minutes: u32,
    #[serde(rename = "allowMaximumSizeToDivergeFromCoreSize")]
    allow_maximum_size_to_diverge_from_core_size: bool,
    #[serde(flatten)]
    counters: CountersConfig,
}

#[derive(serde::Serialize)]
struct CollapserConfig {
    #[serde(rename = "maxRequestsInBatch")]
    max_requests_in_batch: u32,
    #[serde(rename = "timerDelayInMilliseconds")]
    timer_delay_in_milliseconds: u64,
    #[serde(rename = "requestCacheEnabled")]
    request_cache_enabled: bool,
    metrics: WindowsConfig,
}

/// A window's bucket size in ms (the property checks make the count at least 1).
fn bucket_ms(window_ms: u64, buckets: u32) -> u64 {
    window_ms.checked_div(u64::from(buckets)).unwrap_or(0)
}

fn counters(window_ms: u64, buckets: u32) -> CountersConfig {
    CountersConfig {
        counter_bucket_size_in_milliseconds: bucket_ms(window_ms, buckets),
        counter_bucket_count: buckets,
    }
}

/// The layout of the latency percentile window `(ms, buckets, enabled)` and of the counter
/// window `(ms, buckets)`.
fn windows(percentiles: (u64, u32, bool), counter: (u64, u32)) -> WindowsConfig {
    let (window_ms, buckets, enabled) = percentiles;
    WindowsConfig {
        percentile_bucket_size_in_milliseconds: bucket_ms(window_ms, buckets),
        percentile_bucket_count: buckets,
        percentile_enabled: enabled,
        counters: counters(counter.0, counter.1),
    }
}

fn command_config(registry: &Registry, key: &str) -> Option<CommandConfig> {
    let info = registry.command_info(key)?;
    let props: CommandProperties = registry.properties().command(&info.command_key);
    Some(CommandConfig {
        thread_pool_key: info.thread_pool_key.as_str().to_owned(),
        group_key: info.group.as_str().to_owned(),
        execution: ExecutionConfig {
            isolation_strategy: isolation_of(&props, &info).name(),
            thread_pool_key_override: props.thread_pool_key_override.clone(),
            request_cache_enabled: props.request_cache_enabled,
            request_log_enabled: props.request_log_enabled,
            timeout_enabled: props.execution_timeout_enabled,
            fallback_enabled: props.fallback_enabled,
            timeout_in_milliseconds: props.execution_timeout_in_milliseconds,
            semaphore_size: props.execution_isolation_semaphore_max_concurrent_requests,
            fallback_semaphore_size: props.fallback_isolation_semaphore_max_concurrent_requests,
            thread_interrupt_on_timeout: props.execution_isolation_thread_interrupt_on_timeout,
        },
        metrics: CommandMetricsConfig {
            health_bucket_size_in_ms: props.metrics_health_snapshot_interval_in_milliseconds,
            windows: windows(
                (
                    props.metrics_rolling_percentile_time_in_milliseconds,
                    props.metrics_rolling_percentile_num_buckets,
                    props.metrics_rolling_percentile_enabled,
                ),
                (
                    props.metrics_rolling_stats_time_in_milliseconds,
                    props.metrics_rolling_stats_num_buckets,
                ),
            ),
        },
        circuit_breaker: CircuitBreakerConfig {
            enabled: props.circuit_breaker_enabled,
            is_forced_open: props.circuit_breaker_force_open,
            is_forced_closed: props.circuit_breaker_force_closed,
            request_volume_threshold: props.circuit_breaker_request_volume_threshold,
            error_percentage_threshold: props.circuit_breaker_error_threshold_percentage,
            sleep_in_milliseconds: props.circuit_breaker_sleep_window_in_milliseconds,
        },
    })
}

fn thread_pool_config(props: &ThreadPoolProperties) -> ThreadPoolConfig {
    ThreadPoolConfig {
        core_size: props.core_size,
        maximum_size: props.maximum_size,
        actual_maximum_size: props.actual_maximum_size(),
        max_queue_size: props.max_queue_size,
        queue_rejection_threshold: props.queue_size_rejection_threshold,
        keep_alive_time_in_minutes: props.keep_alive_time_minutes,
        allow_maximum_size_to_diverge_from_core_size: props
            .allow_maximum_size_to_diverge_from_core_size,
        counters: counters(
            props.metrics_rolling_stats_time_in_milliseconds,
            props.metrics_rolling_stats_num_buckets,
        ),
    }
}

fn collapser_config(props: &CollapserProperties) -> CollapserConfig {
    CollapserConfig {
        max_requests_in_batch: props.max_requests_in_batch,
        timer_delay_in_milliseconds: props.timer_delay_in_milliseconds,
        request_cache_enabled: props.request_cache_enabled,
        metrics: windows(
            (
                props.metrics_rolling_percentile_time_in_milliseconds,
                props.metrics_rolling_percentile_num_buckets,
                props.metrics_rolling_percentile_enabled,
            ),
            (
                props.metrics_rolling_stats_time_in_milliseconds,
                props.metrics_rolling_stats_num_buckets,
            ),
        ),
    }
}

/// The `HystrixConfig` message of `registry` now (compact, single-line JSON): every command key
/// with state, every thread pool and every collapser, each sorted by key, with the properties a
/// snapshot of [`Properties`](hystrix::config::Properties) gives now.
///
/// Units: `*InMilliseconds` and `healthBucketSizeInMs` are ms, `keepAliveTimeInMinutes`
/// minutes, sizes and counts plain numbers. `isolationStrategy` is `"THREAD"` or
/// `"SEMAPHORE"`: the configured strategy, or with `execution.isolation.strategy` unset the
/// one the key was seen to use (as the dashboard stream's
/// `propertyValue_executionIsolationStrategy`); `threadPoolKeyOverride` is a string or `null`;
/// `maxQueueSize` -1 means no queue; `actualMaximumSize` is the pool's real maximum
/// (Hystrix's `actualMaximumSize`). Only Hystrix's keys are written (none of our extensions,
/// such as the half-open budget).
pub fn config_json(registry: &Registry) -> String {
    let properties = registry.properties();
    to_json(&ConfigMessage {
        kind: "HystrixConfig",
        commands: Keyed::of(registry.command_keys(), |key| {
            command_config(registry, key.as_str())
        }),
        threadpools: Keyed::of(registry.thread_pool_keys(), |key| {
            Some(thread_pool_config(&properties.thread_pool(key)))
        }),
        collapsers: Keyed::of(registry.collapser_keys(), |key| {
            Some(collapser_config(&properties.collapser(key)))
        }),
    })
}
