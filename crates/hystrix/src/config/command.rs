//! Command properties (`hystrix.command.*`): Hystrix's, and our extensions (marked as such).

use crate::config::{IsolationStrategy, at_least_one, no_check, positive_ms, property_table};
use crate::error::ConfigError;

fn trial_budget(v: &u32) -> Result<(), String> {
    match *v {
        0 => Err("must be at least 1".into()),
        1..=65_535 => Ok(()),
        _ => Err("must be at most 65535".into()),
    }
}

fn percentage(v: &u32) -> Result<(), String> {
    if *v <= 100 {
        Ok(())
    } else {
        Err("must be a percentage from 0 to 100".into())
    }
}

/// The most buckets a rolling window may have: its memory is per bucket, allocated up front.
pub(crate) const MAX_BUCKETS: u32 = 1000;

/// A number of buckets: 1 to [`MAX_BUCKETS`].
pub(crate) fn bucket_count(v: &u32) -> Result<(), String> {
    match *v {
        0 => Err("must be at least 1".into()),
        1..=MAX_BUCKETS => Ok(()),
        _ => Err(format!(
            "must be at most {MAX_BUCKETS} (each bucket takes memory per command key)"
        )),
    }
}

fn positive_percentage(v: &u32) -> Result<(), String> {
    match *v {
        1..=100 => Ok(()),
        _ => Err("must be a percentage from 1 to 100".into()),
    }
}

fn count_window_size(v: &u32) -> Result<(), String> {
    match *v {
        0 => Err("must be at least 1".into()),
        1..=crate::circuit::MAX_COUNT_WINDOW => Ok(()),
        _ => Err(format!(
            "must be at most {} (the window takes a byte per call)",
            crate::circuit::MAX_COUNT_WINDOW
        )),
    }
}

fn timeout_ms(v: &u64) -> Result<(), String> {
    if *v >= 1 {
        Ok(())
    } else {
        Err(
            "must be at least 1 ms (to turn the timeout off, set execution.timeout.enabled=false)"
                .into(),
        )
    }
}

fn pool_key(v: &Option<String>) -> Result<(), String> {
    match v {
        Some(name) => crate::key::ThreadPoolKey::new(name)
            .map(drop)
            .map_err(|e| e.to_string()),
        None => Ok(()),
    }
}

property_table! {
    /// The resolved properties of one command key: what an execution reads.
    ///
    /// Field docs give each property's Hystrix name, unit and default. Obtain a snapshot with
    /// [`Properties::command`](crate::config::Properties::command).
    pub struct CommandProperties;
    layer CommandLayer;
    info COMMAND_PROPERTIES;

    /// `execution.isolation.strategy`: `THREAD` or `SEMAPHORE`. Default unset, meaning by run
    /// kind: blocking (and cancellable) runs use THREAD, async and stream runs SEMAPHORE.
    /// Dynamic: read when each execution starts.
    execution_isolation_strategy: Option<IsolationStrategy> = None;
        "execution.isolation.strategy", Dynamic, Any, no_check;
    /// `execution.isolation.thread.timeoutInMilliseconds`: the execution timeout in ms, for every
    /// isolation (the name is Hystrix's legacy). Default 1000, at least 1. Dynamic.
    execution_timeout_in_milliseconds: u64 = 1000;
        "execution.isolation.thread.timeoutInMilliseconds", Dynamic, Any, timeout_ms;
    /// `execution.timeout.enabled`: whether a timeout is armed at all. Default true. Dynamic.
    execution_timeout_enabled: bool = true;
        "execution.timeout.enabled", Dynamic, Any, no_check;
    /// `execution.isolation.thread.interruptOnTimeout`: on timeout, cancel the cancellation token
    /// of a cancellable run (Rust cannot interrupt a thread). Default true.
    /// Dynamic.
    execution_isolation_thread_interrupt_on_timeout: bool = true;
        "execution.isolation.thread.interruptOnTimeout", Dynamic, Any, no_check;
    /// `execution.isolation.thread.interruptOnFutureCancel`: on `cancel()` of a queued
    /// execution's handle, cancel the run's token. Default false. Dynamic.
    execution_isolation_thread_interrupt_on_future_cancel: bool = false;
        "execution.isolation.thread.interruptOnFutureCancel", Dynamic, Any, no_check;
    /// `execution.isolation.semaphore.maxConcurrentRequests`: execution permits per command key
    /// under SEMAPHORE isolation. Default 10; 0 rejects every execution (a kill switch).
    /// Dynamic: read at every acquire.
    execution_isolation_semaphore_max_concurrent_requests: u32 = 10;
        "execution.isolation.semaphore.maxConcurrentRequests", Dynamic, Any, no_check;
    /// `fallback.isolation.semaphore.maxConcurrentRequests`: concurrent fallbacks per command
    /// key, for every isolation. Default 10; 0 rejects every fallback. Dynamic.
    fallback_isolation_semaphore_max_concurrent_requests: u32 = 10;
        "fallback.isolation.semaphore.maxConcurrentRequests", Dynamic, Any, no_check;
    /// `fallback.enabled`: whether a fallback is attempted. Default true. Dynamic.
    fallback_enabled: bool = true;
        "fallback.enabled", Dynamic, Any, no_check;
    /// `circuitBreaker.enabled`: whether the breaker is consulted at all. Default true. Dynamic
    /// (read at each attempt; Hystrix reads it once).
    circuit_breaker_enabled: bool = true;
        "circuitBreaker.enabled", Dynamic, Any, no_check;
    /// `circuitBreaker.requestVolumeThreshold`: minimum requests in the rolling health window
    /// before the breaker may trip. Default 20. Dynamic.
    circuit_breaker_request_volume_threshold: u32 = 20;
        "circuitBreaker.requestVolumeThreshold", Dynamic, Any, no_check;
    /// `circuitBreaker.sleepWindowInMilliseconds`: ms after opening before a trial request is
    /// allowed (strictly after). Default 5000. Dynamic.
    circuit_breaker_sleep_window_in_milliseconds: u64 = 5000;
        "circuitBreaker.sleepWindowInMilliseconds", Dynamic, Any, no_check;
    /// `circuitBreaker.errorThresholdPercentage`: the breaker trips when the error percentage
    /// (0-100) is at least this. Default 50. Dynamic.
    circuit_breaker_error_threshold_percentage: u32 = 50;
        "circuitBreaker.errorThresholdPercentage", Dynamic, Any, percentage;
    /// `circuitBreaker.forceOpen`: short-circuit every execution; wins over `forceClosed`.
    /// Default false. Dynamic.
    circuit_breaker_force_open: bool = false;
        "circuitBreaker.forceOpen", Dynamic, Any, no_check;
    /// `circuitBreaker.forceClosed`: allow every execution whatever the health. Default false.
    /// Dynamic.
    circuit_breaker_force_closed: bool = false;
        "circuitBreaker.forceClosed", Dynamic, Any, no_check;
    /// `circuitBreaker.dryRun` (our extension): the breaker decides and reports
    /// as usual, but admits every call; a call it would have short-circuited records
    /// WOULD_SHORT_CIRCUIT instead (for calibrating thresholds in production). Default false.
    /// Dynamic.
    circuit_breaker_dry_run: bool = false;
        "circuitBreaker.dryRun", Dynamic, Any, no_check;
    /// `circuitBreaker.halfOpen.permittedRequests` (our extension): trial requests
    /// admitted per half-open period. Default 1 (Hystrix), at least 1. Dynamic.
    circuit_breaker_half_open_permitted_requests: u32 = 1;
        "circuitBreaker.halfOpen.permittedRequests", Dynamic, Any, trial_budget;
    /// `circuitBreaker.halfOpen.successThreshold` (our extension): successful trials
    /// needed to close. Default 1, at least 1 and at most `permittedRequests`. Dynamic.
    circuit_breaker_half_open_success_threshold: u32 = 1;
        "circuitBreaker.halfOpen.successThreshold", Dynamic, Any, at_least_one;
    /// `circuitBreaker.slowCall.durationThresholdInMilliseconds` (our extension, resilience4j's
    /// `slowCallDurationThreshold`): an attempt that takes longer than this many ms, from its
    /// admission by the breaker to its end (a stream's: to its first value) and whatever its
    /// outcome, is a SLOW_CALL; the breaker trips on their percentage as on errors. An attempt
    /// its caller dropped (CANCELLED) is not judged. 0 turns slow calls off; any other value
    /// is accepted. Default 0. Dynamic.
    circuit_breaker_slow_call_duration_threshold_in_milliseconds: u64 = 0;
        "circuitBreaker.slowCall.durationThresholdInMilliseconds", Dynamic, Any, no_check;
    /// `circuitBreaker.slowCall.rateThresholdPercentage` (our extension, resilience4j's
    /// `slowCallRateThreshold`): the breaker trips when the percentage (1-100) of slow calls
    /// in its window is at least this (with the window's volume, as for errors). Default 100
    /// (resilience4j's). Dynamic.
    circuit_breaker_slow_call_rate_threshold_percentage: u32 = 100;
        "circuitBreaker.slowCall.rateThresholdPercentage", Dynamic, Any, positive_percentage;
    /// `circuitBreaker.slowCall.countInFlight` (our extension): attempts still running past
    /// the slow-call threshold count as slow calls at the breaker's health check (the first
    /// after every attempt of their start's health interval ran past it: within the threshold
    /// and two health intervals of their start; no timer per call), not only when they end,
    /// which may be at a timeout or never. Under a TIME window such an attempt is a request of
    /// the slow-call percentage only (never of the error percentage) until it ends, then the
    /// request it was, its error counted if it failed; a COUNT window takes it as a slow call
    /// then and not again, a CONSECUTIVE run counts it then. Applies to a command's own
    /// breaker; keyed breakers count a slow call at its end, and so do some attempts under
    /// thresholds over 62 health intervals (31 s by default). Default true. Dynamic.
    circuit_breaker_slow_call_count_in_flight: bool = true;
        "circuitBreaker.slowCall.countInFlight", Dynamic, Any, no_check;
    /// `circuitBreaker.window.type` (our extension): what the breaker trips on, `TIME`
    /// (Hystrix's rolling window), `COUNT` (the last `window.size` calls) or `CONSECUTIVE`
    /// (failures in a row); see [`WindowType`](crate::circuit::WindowType). Default `TIME`.
    /// Fixed. COUNT and CONSECUTIVE are refused with a shared state store (its payload carries
    /// a time window's counts only).
    circuit_breaker_window_type: crate::circuit::WindowType = crate::circuit::WindowType::Time;
        "circuitBreaker.window.type", Fixed, Any, no_check;
    /// `circuitBreaker.window.size` (our extension, resilience4j's `slidingWindowSize`): the
    /// calls a COUNT window holds, 1 to 65535 (at most 200 with keyed breakers, which keep
    /// one each). Default 100. Fixed.
    circuit_breaker_window_size: u32 = 100;
        "circuitBreaker.window.size", Fixed, Any, count_window_size;
    /// `circuitBreaker.window.consecutiveFailures` (our extension, gobreaker's
    /// `ConsecutiveFailures`): a CONSECUTIVE window trips at the end of this many failures in
    /// a row, at least 1 (gobreaker's default rule trips on more than 5: set 6 to match).
    /// Default 5. Dynamic.
    circuit_breaker_window_consecutive_failures: u32 = 5;
        "circuitBreaker.window.consecutiveFailures", Dynamic, Any, at_least_one;
    /// `metrics.rollingStats.timeInMilliseconds`: length of the rolling counter window (and of
    /// the health window) in ms. Default 10000. Fixed once the key is in use.
    metrics_rolling_stats_time_in_milliseconds: u64 = 10_000;
        "metrics.rollingStats.timeInMilliseconds", Fixed, Any, positive_ms;
    /// `metrics.rollingStats.numBuckets`: buckets in the rolling counter window; must divide
    /// the window evenly; 1 to 1000. Default 10. Fixed.
    metrics_rolling_stats_num_buckets: u32 = 10;
        "metrics.rollingStats.numBuckets", Fixed, Any, bucket_count;
    /// `metrics.rollingPercentile.enabled`: whether latencies are recorded (when false the
    /// percentiles read -1). Default true. Dynamic.
    metrics_rolling_percentile_enabled: bool = true;
        "metrics.rollingPercentile.enabled", Dynamic, Any, no_check;
    /// `metrics.rollingPercentile.timeInMilliseconds`: length of the latency window in ms.
    /// Default 60000. Fixed.
    metrics_rolling_percentile_time_in_milliseconds: u64 = 60_000;
        "metrics.rollingPercentile.timeInMilliseconds", Fixed, Any, positive_ms;
    /// `metrics.rollingPercentile.numBuckets`: buckets in the latency window; must divide it
    /// evenly; 1 to 1000. Default 6. Fixed.
    metrics_rolling_percentile_num_buckets: u32 = 6;
        "metrics.rollingPercentile.numBuckets", Fixed, Any, bucket_count;
    /// `metrics.rollingPercentile.bucketSize`: accepted for compatibility; unused, as in
    /// Hystrix 1.5 (latencies go to histograms without a sample cap), so it may change at
    /// any time. Default 100.
    metrics_rolling_percentile_bucket_size: u32 = 100;
        "metrics.rollingPercentile.bucketSize", Dynamic, Any, no_check;
    /// `metrics.healthSnapshot.intervalInMilliseconds`: how often the error percentage is
    /// recomputed, and the health bucket size, in ms; it must divide
    /// `metrics.rollingStats.timeInMilliseconds` evenly into at most 1000 buckets. Default 500
    /// (20 buckets). Fixed.
    metrics_health_snapshot_interval_in_milliseconds: u64 = 500;
        "metrics.healthSnapshot.intervalInMilliseconds", Fixed, Any, positive_ms;
    /// `requestCache.enabled`: whether an execution with a cache key uses the request cache.
    /// Default true. Dynamic.
    request_cache_enabled: bool = true;
        "requestCache.enabled", Dynamic, Any, no_check;
    /// `requestLog.enabled`: whether executions are recorded in the request log. Default true.
    /// Dynamic.
    request_log_enabled: bool = true;
        "requestLog.enabled", Dynamic, Any, no_check;
    /// `threadPoolKeyOverride`: the thread-pool key to use instead of the builder's (only per
    /// key: `hystrix.command.<Key>.threadPoolKeyOverride`). Default unset. Fixed.
    thread_pool_key_override: Option<String> = None;
        "threadPoolKeyOverride", Fixed, InstanceOnly, pool_key;
    /// `retry.maxAttempts` (our extension): attempts per execution of a retryable run, the
    /// first included; 1 to 100. Default 1 (no retry). Runs that cannot be retried (not made
    /// by a factory) ignore it, with a warning logged once per key. Dynamic.
    retry_max_attempts: u32 = 1;
        "retry.maxAttempts", Dynamic, Any, max_attempts;
    /// `retry.attemptTimeoutInMilliseconds` (our extension): the timeout of each attempt in
    /// ms, within the execution timeout, which bounds attempts and delays together (with
    /// `execution.timeout.enabled=false`, only this bounds each attempt). Default unset: the
    /// execution timeout ÷ `retry.maxAttempts` (delays come out of the execution timeout too,
    /// so the last attempt may have less). Dynamic.
    retry_attempt_timeout_in_milliseconds: Option<u64> = None;
        "retry.attemptTimeoutInMilliseconds", Dynamic, Any, optional_positive_ms;
    /// `retry.backoff.initialInMilliseconds` (our extension): the delay before the first
    /// retry, in ms (0: at once). Default 100. Dynamic.
    retry_backoff_initial_in_milliseconds: u64 = 100;
        "retry.backoff.initialInMilliseconds", Dynamic, Any, no_check;
    /// `retry.backoff.multiplier` (our extension): each delay is the previous one times this
    /// (1.0: constant delays); at least 1.0. Default 2.0. Dynamic.
    retry_backoff_multiplier: f64 = 2.0;
        "retry.backoff.multiplier", Dynamic, Any, multiplier;
    /// `retry.backoff.maxInMilliseconds` (our extension): the longest delay, in ms; at least
    /// the initial delay. Default 2000. Dynamic.
    retry_backoff_max_in_milliseconds: u64 = 2_000;
        "retry.backoff.maxInMilliseconds", Dynamic, Any, no_check;
    /// `retry.backoff.jitter` (our extension): `NONE`, `FULL` or `DECORRELATED` (see
    /// [`RetryJitter`](crate::retry::RetryJitter)). Default `NONE`. Dynamic.
    retry_backoff_jitter: crate::retry::RetryJitter = crate::retry::RetryJitter::None;
        "retry.backoff.jitter", Dynamic, Any, no_check;
    /// `retry.onRejection` (our extension): also retry executions the semaphore, the thread
    /// pool, the adaptive limit or adaptive throttling refused. Default false. Dynamic.
    retry_on_rejection: bool = false;
        "retry.onRejection", Dynamic, Any, no_check;
    /// `retry.budget.percent` (our extension): retries may be at most this percentage (0 to
    /// 100) of the executions in the budget's window (plus `minPerSecond`). Default 20.
    /// Dynamic.
    retry_budget_percent: u32 = 20;
        "retry.budget.percent", Dynamic, Any, percentage;
    /// `retry.budget.minPerSecond` (our extension): retries allowed per second of the
    /// budget's window whatever the traffic (so a quiet command can still retry). Default 10.
    /// Dynamic.
    retry_budget_min_per_second: u32 = 10;
        "retry.budget.minPerSecond", Dynamic, Any, no_check;
    /// `retry.budget.windowInMilliseconds` (our extension): the budget's rolling window in ms,
    /// in 10 buckets; at least 10 and a multiple of 10. Default 10000. Fixed (read when the
    /// budget is made, at the key's first retry-enabled execution).
    retry_budget_window_in_milliseconds: u64 = 10_000;
        "retry.budget.windowInMilliseconds", Fixed, Any, budget_window;
    /// `retry.budget.name` (our extension): share the named budget of this registry with the
    /// other keys naming it, instead of the key's own. Each key checks the shared counts with
    /// its own `percent` and `minPerSecond`; the first key to use the budget sets its window.
    /// Default unset (the key's own budget). Fixed.
    retry_budget_name: Option<String> = None;
        "retry.budget.name", Fixed, Any, no_check;
    /// `hedging.maxAttempts` (our extension): attempts an execution of a hedgeable run may
    /// have in flight side by side, the first included; 1 to 10. Default 1 (no hedging). Runs
    /// that cannot be hedged (not made by a factory, or blocking under SEMAPHORE isolation)
    /// ignore it, with a warning logged once per key. Dynamic.
    hedging_max_attempts: u32 = 1;
        "hedging.maxAttempts", Dynamic, Any, hedging_max_attempts;
    /// `hedging.delayInMilliseconds` (our extension): how long an attempt may run before the
    /// next one starts beside it, in ms; also the delay while `hedging.delayPercentile` has no
    /// data yet. Default 100. Dynamic.
    hedging_delay_in_milliseconds: u64 = 100;
        "hedging.delayInMilliseconds", Dynamic, Any, no_check;
    /// `hedging.delayPercentile` (our extension): when above 0, the hedging delay is this
    /// percentile (above 0, below 100, e.g. 95.0) of the key's first-attempt latency over the
    /// last `metrics.rollingStats.timeInMilliseconds`, recomputed once per
    /// `metrics.healthSnapshot.intervalInMilliseconds`. Default 0 (the fixed delay). Dynamic.
    hedging_delay_percentile: f64 = 0.0;
        "hedging.delayPercentile", Dynamic, Any, hedging_percentile;
    /// `execution.isolation.adaptive.enabled` (our extension): the executions of the key
    /// admitted at once are bounded by a limit computed from their measured run times and
    /// drops (see [`limit`](crate::limit)), capped by
    /// `execution.isolation.semaphore.maxConcurrentRequests`, under either isolation (under
    /// THREAD the key's limit applies before its pool). Default false. Dynamic.
    execution_isolation_adaptive_enabled: bool = false;
        "execution.isolation.adaptive.enabled", Dynamic, Any, no_check;
    /// `execution.isolation.adaptive.algorithm` (our extension): `AIMD`, `VEGAS` or
    /// `GRADIENT2` (see [`AdaptiveAlgorithm`](crate::limit::AdaptiveAlgorithm)). Default
    /// `GRADIENT2`. Dynamic: a change starts the new algorithm at `initialLimit`.
    execution_isolation_adaptive_algorithm: crate::limit::AdaptiveAlgorithm =
        crate::limit::AdaptiveAlgorithm::Gradient2;
        "execution.isolation.adaptive.algorithm", Dynamic, Any, no_check;
    /// `execution.isolation.adaptive.initialLimit` (our extension): the limit before any
    /// sample, within `[minLimit, maxLimit]`. Default 20. Dynamic.
    execution_isolation_adaptive_initial_limit: u32 = 20;
        "execution.isolation.adaptive.initialLimit", Dynamic, Any, no_check;
    /// `execution.isolation.adaptive.minLimit` (our extension): the lowest limit, at least 1.
    /// Default 1 (Netflix's concurrency-limits uses 20, which cannot follow a capacity below
    /// 20). Dynamic.
    execution_isolation_adaptive_min_limit: u32 = 1;
        "execution.isolation.adaptive.minLimit", Dynamic, Any, no_check;
    /// `execution.isolation.adaptive.maxLimit` (our extension): the highest limit, at least
    /// `minLimit`; `maxConcurrentRequests` caps the limit too. Default 200. Dynamic.
    execution_isolation_adaptive_max_limit: u32 = 200;
        "execution.isolation.adaptive.maxLimit", Dynamic, Any, no_check;
    /// `execution.isolation.adaptive.maxWaitInMilliseconds` (our extension): how long an
    /// execution beyond the limit may wait for a free place, in ms, before it is
    /// LIMIT_REJECTED; 0 rejects at once. Only an execution's first attempt waits (retries and
    /// hedges are refused at once), and never past its timeout. Default 0. Dynamic.
    execution_isolation_adaptive_max_wait_in_milliseconds: u64 = 0;
        "execution.isolation.adaptive.maxWaitInMilliseconds", Dynamic, Any, no_check;
    /// `execution.isolation.adaptive.maxQueueSize` (our extension): how many executions may
    /// wait for a place at once; one more is LIMIT_REJECTED at once. Default 100. Dynamic.
    execution_isolation_adaptive_max_queue_size: u32 = 100;
        "execution.isolation.adaptive.maxQueueSize", Dynamic, Any, no_check;
    /// `execution.isolation.adaptive.windowSize` (our extension): the algorithm is fed one
    /// sample per window of this many executions (their mean run time, largest in-flight
    /// count, and a drop if any was; see [`Windowed`](crate::limit::Windowed)), at least 1
    /// (1: every execution's own sample). Default 20: the mean of 20 run times varies about
    /// 1/√20 as much as one run, so VEGAS's unloaded run time (the fastest window) is no longer
    /// the fastest of thousands of runs, while a window still closes every 20 executions (the
    /// limit-study of BENCHMARKS.md, issue 23). Dynamic: a change restarts the algorithm at the
    /// current limit.
    execution_isolation_adaptive_window_size: u32 = 20;
        "execution.isolation.adaptive.windowSize", Dynamic, Any, no_check;
    /// `execution.isolation.adaptive.aimd.backoffRatio` (our extension): AIMD's factor on a
    /// drop, in [0.5, 1). Default 0.9 (as concurrency-limits' `backoffRatio`). Dynamic.
    execution_isolation_adaptive_aimd_backoff_ratio: f64 = 0.9;
        "execution.isolation.adaptive.aimd.backoffRatio", Dynamic, Any, no_check;
    /// `execution.isolation.adaptive.aimd.timeoutInMilliseconds` (our extension): AIMD counts
    /// a run longer than this as a drop, in ms, at least 1. Default 5000 (as concurrency-limits'
    /// `timeout`). Dynamic.
    execution_isolation_adaptive_aimd_timeout_in_milliseconds: u64 = 5_000;
        "execution.isolation.adaptive.aimd.timeoutInMilliseconds", Dynamic, Any, no_check;
    /// `execution.isolation.adaptive.vegas.smoothing` (our extension): how much of each new
    /// VEGAS estimate replaces the limit, in (0, 1]. Default 1.0 (as concurrency-limits').
    /// Dynamic.
    execution_isolation_adaptive_vegas_smoothing: f64 = 1.0;
        "execution.isolation.adaptive.vegas.smoothing", Dynamic, Any, no_check;
    /// `execution.isolation.adaptive.vegas.probeMultiplier` (our extension): VEGAS re-measures
    /// the unloaded run time every 0.75 × this × limit samples, at least 1. Default 30 (as
    /// concurrency-limits' `probeMultiplier`). Dynamic.
    execution_isolation_adaptive_vegas_probe_multiplier: u32 = 30;
        "execution.isolation.adaptive.vegas.probeMultiplier", Dynamic, Any, no_check;
    /// `execution.isolation.adaptive.gradient2.smoothing` (our extension): how much of each new
    /// GRADIENT2 estimate replaces the limit, in (0, 1]. Default 0.2 (as concurrency-limits').
    /// Dynamic.
    execution_isolation_adaptive_gradient2_smoothing: f64 = 0.2;
        "execution.isolation.adaptive.gradient2.smoothing", Dynamic, Any, no_check;
    /// `execution.isolation.adaptive.gradient2.rttTolerance` (our extension): how many times
    /// the long-term run time the latest may be before GRADIENT2 shrinks the limit, at least
    /// 1.0. Default 1.5 (as concurrency-limits'). Dynamic.
    execution_isolation_adaptive_gradient2_rtt_tolerance: f64 = 1.5;
        "execution.isolation.adaptive.gradient2.rttTolerance", Dynamic, Any, no_check;
    /// `execution.isolation.adaptive.gradient2.longWindow` (our extension): samples in
    /// GRADIENT2's long-term average, at least 1. Default 600 (as concurrency-limits'). Dynamic.
    execution_isolation_adaptive_gradient2_long_window: u32 = 600;
        "execution.isolation.adaptive.gradient2.longWindow", Dynamic, Any, no_check;
    /// `execution.isolation.adaptive.gradient2.queueSize` (our extension): the headroom
    /// GRADIENT2 adds to its estimate. Default 4 (as concurrency-limits'). Dynamic.
    execution_isolation_adaptive_gradient2_queue_size: u32 = 4;
        "execution.isolation.adaptive.gradient2.queueSize", Dynamic, Any, no_check;
    /// `execution.isolation.priority.critical.reservedPercentage` (our extension): the share
    /// of the admission bound (percent 0-100 of `maxConcurrentRequests`, or of the adaptive
    /// limit if lower; rounded up to whole places) kept for CRITICAL executions: NORMAL and
    /// SHEDDABLE executions are refused while they would use its unused part. Applies where a
    /// semaphore admits (SEMAPHORE isolation, or adaptive limits). Default 0 (no reserve).
    /// Dynamic. See [`Priority`](crate::Priority).
    execution_isolation_priority_critical_reserved_percentage: u32 = 0;
        "execution.isolation.priority.critical.reservedPercentage", Dynamic, Any, percentage;
    /// `execution.isolation.priority.normal.reservedPercentage` (our extension): the share of
    /// the admission bound (percent 0-100, rounded up to whole places) kept for NORMAL
    /// executions against SHEDDABLE ones (CRITICAL ones may use it). With CRITICAL's reserve it
    /// must not pass 100. Default 0 (no reserve). Dynamic.
    execution_isolation_priority_normal_reserved_percentage: u32 = 0;
        "execution.isolation.priority.normal.reservedPercentage", Dynamic, Any, percentage;
    /// `execution.throttle.enabled` (our extension): client-side adaptive throttling (Google
    /// SRE book, "Handling Overload"): before it runs, each attempt is refused locally
    /// (THROTTLED, to the fallback) with probability max(0, (requests − K × accepts) /
    /// (requests + 1)) over the last `execution.throttle.windowInMilliseconds` (see
    /// [`throttle`](crate::throttle)). Default false. Dynamic.
    execution_throttle_enabled: bool = false;
        "execution.throttle.enabled", Dynamic, Any, no_check;
    /// `execution.throttle.multiplier` (our extension): K, how many requests per accept the
    /// backend may receive before attempts are throttled; a finite number of at least 1.0
    /// (lower throttles sooner). Default 2.0 (Google SRE book, Handling Overload: K = 2).
    /// Dynamic.
    execution_throttle_multiplier: f64 = 2.0;
        "execution.throttle.multiplier", Dynamic, Any, multiplier;
    /// `execution.throttle.windowInMilliseconds` (our extension): the rolling window of the
    /// requests and accepts, in ms, at least 1. Default 120000 (the SRE book's two minutes).
    /// Dynamic: a change starts a new, empty window.
    execution_throttle_window_in_milliseconds: u64 = 120_000;
        "execution.throttle.windowInMilliseconds", Dynamic, Any, positive_ms;
    /// `execution.throttle.numBuckets` (our extension): buckets of the throttling window (the
    /// bucket filling counts at once); must divide the window evenly; 1 to 1000. Default 20
    /// (6 s buckets). Dynamic: a change starts a new, empty window.
    execution_throttle_num_buckets: u32 = 20;
        "execution.throttle.numBuckets", Dynamic, Any, bucket_count;
    /// `chaos.enabled` (our extension; Polly's Simmy, Envoy's fault filter): inject the faults
    /// the other `chaos.*` properties describe into this key's attempts, after isolation
    /// admitted them and before their run, so bulkheads, timeouts, breakers, retry and
    /// fallbacks react as to real faults (see [`chaos`](crate::chaos)). May be true only in a
    /// registry that allows chaos
    /// ([`RegistryBuilder::allow_chaos`](crate::RegistryBuilder::allow_chaos)); refused
    /// otherwise. Default false. Dynamic.
    chaos_enabled: bool = false;
        "chaos.enabled", Dynamic, Any, no_check;
    /// `chaos.fault.ratePercentage` (our extension): the percentage of attempts (0 to 100;
    /// fractions such as 0.5 allowed) whose run is replaced by an injected fault: the run is
    /// not called, the attempt is a FAILURE with
    /// [`FailureType::InjectedFault`](crate::FailureType::InjectedFault). With
    /// `chaos.hang.ratePercentage` at most 100 (one draw picks fault, hang or the run).
    /// Default 0. Dynamic.
    chaos_fault_rate_percentage: f64 = 0.0;
        "chaos.fault.ratePercentage", Dynamic, Any, rate_percentage;
    /// `chaos.latency.ratePercentage` (our extension): the percentage of attempts (0 to 100,
    /// drawn apart from fault and hang) delayed by `chaos.latency.inMilliseconds` on the
    /// registry's clock before their run, inside isolation and the timeout: a delay that
    /// reaches the attempt's deadline ends there, as a TIMEOUT, and the run is not called.
    /// Default 0. Dynamic.
    chaos_latency_rate_percentage: f64 = 0.0;
        "chaos.latency.ratePercentage", Dynamic, Any, rate_percentage;
    /// `chaos.latency.inMilliseconds` (our extension): the injected delay, in ms, at most
    /// 3 600 000 (an hour: with timeouts off nothing else ends it). Default 0. Dynamic.
    chaos_latency_in_milliseconds: u64 = 0;
        "chaos.latency.inMilliseconds", Dynamic, Any, chaos_latency_ms;
    /// `chaos.hang.ratePercentage` (our extension): the percentage of attempts (0 to 100)
    /// whose run is replaced by one that never ends: the attempt holds its permit or pool
    /// thread until its deadline (a TIMEOUT), and the run is not called; an async run or a
    /// stream polled by its caller also ends when dropped (a blocking run's thread waits for
    /// the deadline). Above 0 only with `execution.timeout.enabled` (a hang must end).
    /// Default 0. Dynamic.
    chaos_hang_rate_percentage: f64 = 0.0;
        "chaos.hang.ratePercentage", Dynamic, Any, rate_percentage;
}

fn hedging_max_attempts(v: &u32) -> Result<(), String> {
    match *v {
        0 => Err("must be at least 1 (1 means no hedging)".into()),
        1..=10 => Ok(()),
        _ => Err("must be at most 10".into()),
    }
}

fn hedging_percentile(v: &f64) -> Result<(), String> {
    if *v == 0.0 || (*v > 0.0 && *v < 100.0) {
        Ok(())
    } else {
        Err("must be 0 (a fixed delay) or a percentile above 0 and below 100".into())
    }
}

fn max_attempts(v: &u32) -> Result<(), String> {
    match *v {
        0 => Err("must be at least 1 (1 means no retry)".into()),
        1..=100 => Ok(()),
        _ => Err("must be at most 100".into()),
    }
}

fn optional_positive_ms(v: &Option<u64>) -> Result<(), String> {
    match v {
        Some(0) => Err("must be at least 1 ms".into()),
        _ => Ok(()),
    }
}

/// The longest injected delay, in ms: an hour.
const MAX_CHAOS_LATENCY_MS: u64 = 3_600_000;

fn chaos_latency_ms(v: &u64) -> Result<(), String> {
    if *v <= MAX_CHAOS_LATENCY_MS {
        Ok(())
    } else {
        Err(format!(
            "must be at most {MAX_CHAOS_LATENCY_MS} ms (an hour: with timeouts off, nothing \
             else would end the delay)"
        ))
    }
}

fn rate_percentage(v: &f64) -> Result<(), String> {
    if (0.0..=100.0).contains(v) {
        Ok(())
    } else {
        Err("must be a percentage from 0 to 100".into())
    }
}

fn multiplier(v: &f64) -> Result<(), String> {
    if v.is_finite() && *v >= 1.0 {
        Ok(())
    } else {
        Err("must be a finite number of at least 1.0".into())
    }
}

fn budget_window(v: &u64) -> Result<(), String> {
    if *v >= 10 && v % 10 == 0 {
        Ok(())
    } else {
        Err("must be at least 10 ms and a multiple of 10 (the window has 10 buckets)".into())
    }
}

impl CommandProperties {
    /// Checks the rules that tie properties together; `prefix` is `hystrix.command.<Key>.`.
    pub(crate) fn validate(
        &self,
        prefix: &str,
        rules: &crate::config::Rules,
    ) -> Result<(), ConfigError> {
        let invalid = |name: &str, value: String, reason: String| ConfigError::InvalidValue {
            name: format!("{prefix}{name}"),
            value,
            reason,
        };
        // A window of buckets: the buckets must divide it evenly.
        let must_divide = |buckets_name: &str, buckets: u32, window_name: &str, window_ms: u64| {
            if window_ms % u64::from(buckets) == 0 {
                Ok(())
            } else {
                Err(invalid(
                    buckets_name,
                    buckets.to_string(),
                    format!("must divide {window_name} ({window_ms} ms) evenly"),
                ))
            }
        };
        must_divide(
            "metrics.rollingStats.numBuckets",
            self.metrics_rolling_stats_num_buckets,
            "metrics.rollingStats.timeInMilliseconds",
            self.metrics_rolling_stats_time_in_milliseconds,
        )?;
        must_divide(
            "metrics.rollingPercentile.numBuckets",
            self.metrics_rolling_percentile_num_buckets,
            "metrics.rollingPercentile.timeInMilliseconds",
            self.metrics_rolling_percentile_time_in_milliseconds,
        )?;
        must_divide(
            "execution.throttle.numBuckets",
            self.execution_throttle_num_buckets,
            "execution.throttle.windowInMilliseconds",
            self.execution_throttle_window_in_milliseconds,
        )?;
        let window_ms = self.metrics_rolling_stats_time_in_milliseconds;
        let interval_ms = self.metrics_health_snapshot_interval_in_milliseconds;
        if window_ms % interval_ms != 0 || window_ms / interval_ms > u64::from(MAX_BUCKETS) {
            return Err(invalid(
                "metrics.healthSnapshot.intervalInMilliseconds",
                interval_ms.to_string(),
                format!(
                    "must divide metrics.rollingStats.timeInMilliseconds ({window_ms} ms) evenly \
                     into at most {MAX_BUCKETS} health buckets"
                ),
            ));
        }
        let bucket_ms = window_ms / u64::from(self.metrics_rolling_stats_num_buckets);
        // Events are counted in buckets of gcd(rolling-stats bucket, health interval).
        let shared = crate::metrics::rolling::gcd(bucket_ms, interval_ms);
        if window_ms / shared > u64::from(MAX_BUCKETS) {
            return Err(invalid(
                "metrics.healthSnapshot.intervalInMilliseconds",
                interval_ms.to_string(),
                format!(
                    "with rolling-stats buckets of {bucket_ms} ms, events would be counted in \
                     buckets of {shared} ms (their greatest common divisor): {} in the window, \
                     more than {MAX_BUCKETS}; use an interval that divides the bucket size or is \
                     a multiple of it",
                    window_ms / shared
                ),
            ));
        }
        if self.retry_backoff_max_in_milliseconds < self.retry_backoff_initial_in_milliseconds {
            return Err(invalid(
                "retry.backoff.maxInMilliseconds",
                self.retry_backoff_max_in_milliseconds.to_string(),
                format!(
                    "must be at least retry.backoff.initialInMilliseconds ({} ms)",
                    self.retry_backoff_initial_in_milliseconds
                ),
            ));
        }
        // Each algorithm's builder checks its parameters (and the bounds); its refusal names
        // the property.
        if let Err((name, reason)) = crate::limit::check_properties(self) {
            let value = self.get(name).map(|v| v.to_string()).unwrap_or_default();
            return Err(invalid(name, value, reason));
        }
        let reserved = self.execution_isolation_priority_critical_reserved_percentage
            + self.execution_isolation_priority_normal_reserved_percentage;
        if reserved > 100 {
            return Err(invalid(
                "execution.isolation.priority.normal.reservedPercentage",
                self.execution_isolation_priority_normal_reserved_percentage
                    .to_string(),
                format!(
                    "must not pass 100 with execution.isolation.priority.critical.\
                     reservedPercentage ({} %): together they are {reserved} %",
                    self.execution_isolation_priority_critical_reserved_percentage
                ),
            ));
        }
        self.check_chaos(rules)
            .map_err(|(name, value, reason)| invalid(name, value, reason))?;
        if self.circuit_breaker_half_open_success_threshold
            > self.circuit_breaker_half_open_permitted_requests
        {
            return Err(invalid(
                "circuitBreaker.halfOpen.successThreshold",
                self.circuit_breaker_half_open_success_threshold.to_string(),
                format!(
                    "must not exceed circuitBreaker.halfOpen.permittedRequests ({})",
                    self.circuit_breaker_half_open_permitted_requests
                ),
            ));
        }
        Ok(())
    }
}

impl CommandProperties {
    /// The rules of the `chaos.*` properties: which property breaks one, its value, and why.
    fn check_chaos(
        &self,
        rules: &crate::config::Rules,
    ) -> Result<(), (&'static str, String, String)> {
        if self.chaos_enabled && !rules.chaos_allowed {
            return Err((
                "chaos.enabled",
                "true".into(),
                "chaos injection is not allowed in this registry: build it with \
                 RegistryBuilder::allow_chaos(true) (off by default, so that a stray chaos \
                 property injects nothing)"
                    .into(),
            ));
        }
        let (fault, hang) = (
            self.chaos_fault_rate_percentage,
            self.chaos_hang_rate_percentage,
        );
        if fault + hang > 100.0 {
            return Err((
                "chaos.hang.ratePercentage",
                hang.to_string(),
                format!(
                    "must not pass 100 with chaos.fault.ratePercentage ({fault} %): one draw \
                     picks a fault, a hang or the run"
                ),
            ));
        }
        if hang > 0.0 && !self.execution_timeout_enabled {
            return Err((
                "execution.timeout.enabled",
                "false".into(),
                format!(
                    "must be true while chaos.hang.ratePercentage ({hang} %) is above 0: a hung \
                     run ends only at its timeout"
                ),
            ));
        }
        Ok(())
    }

    /// Whether chaos injects anything: on, with a rate above 0.
    pub(crate) fn chaos_injects(&self) -> bool {
        self.chaos_enabled
            && (self.chaos_fault_rate_percentage > 0.0
                || self.chaos_hang_rate_percentage > 0.0
                || (self.chaos_latency_rate_percentage > 0.0
                    && self.chaos_latency_in_milliseconds > 0))
    }
}

/// The command properties an execution reads on every call, mirrored into atomics so the hot
/// path reads them with plain loads (no snapshot guard). Published whenever the key's resolved
/// properties change.
#[derive(Debug, Default)]
pub(crate) struct HotCommandProperties {
    flags: std::sync::atomic::AtomicU32,
    semaphore_max: std::sync::atomic::AtomicU32,
    fallback_semaphore_max: std::sync::atomic::AtomicU32,
    timeout_ms: std::sync::atomic::AtomicU64,
    // Read only when the breaker is not CLOSED (not part of the per-call snapshot).
    sleep_window_ms: std::sync::atomic::AtomicU64,
    half_open_permitted: std::sync::atomic::AtomicU32,
    half_open_success_threshold: std::sync::atomic::AtomicU32,
    // Read only by retryable runs and on failures.
    retry_max_attempts: std::sync::atomic::AtomicU32,
    /// `retry.attemptTimeoutInMilliseconds`, 0 when unset.
    retry_attempt_timeout_ms: std::sync::atomic::AtomicU64,
    hedging_max_attempts: std::sync::atomic::AtomicU32,
    /// The adaptive concurrency limit, kept by the command's limiter (not a property: written
    /// only by [`set_adaptive_limit`](HotCommandProperties::set_adaptive_limit)).
    adaptive_limit: std::sync::atomic::AtomicU32,
    /// What executions are admitted by: `maxConcurrentRequests`, or the adaptive limit if that
    /// is on and lower (written by publish and by the limiter).
    admit_max: std::sync::atomic::AtomicU32,
    /// `execution.isolation.adaptive.maxWaitInMilliseconds`.
    adaptive_max_wait_ms: std::sync::atomic::AtomicU64,
    /// `execution.isolation.adaptive.maxQueueSize`.
    adaptive_max_queue: std::sync::atomic::AtomicU32,
    /// `execution.isolation.priority.critical.reservedPercentage` (high half) and
    /// `...normal.reservedPercentage` (low half), read together.
    priority_reserves: std::sync::atomic::AtomicU64,
    /// `execution.throttle.multiplier` (K), as the bits of its `f64`.
    throttle_multiplier: std::sync::atomic::AtomicU64,
    /// `execution.throttle.windowInMilliseconds`.
    throttle_window_ms: std::sync::atomic::AtomicU64,
    /// `execution.throttle.numBuckets`.
    throttle_buckets: std::sync::atomic::AtomicU32,
    /// `circuitBreaker.slowCall.durationThresholdInMilliseconds` (0: off).
    slow_call_ms: std::sync::atomic::AtomicU64,
    /// The algorithm published last (its discriminant + 1; 0 before the first publish).
    adaptive_kind: std::sync::atomic::AtomicU32,
    /// Bumped twice at every publish (odd while publishing): the limiter rebuilds its
    /// algorithm when it changed, and recomputes the admission bound while it is odd.
    generation: std::sync::atomic::AtomicU32,
    /// Wakes every execution waiting for a place when a publish raises the admission bound
    /// (a higher cap or limit bounds, adaptive limits turned off): they need not wait for a
    /// release.
    bound_raised: tokio::sync::Notify,
}

/// A copy of [`HotCommandProperties`], read once per execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HotSnapshot {
    flags: u32,
    /// `execution.isolation.semaphore.maxConcurrentRequests`; with
    /// `execution.isolation.adaptive.enabled`, the adaptive limit if that is lower.
    pub(crate) semaphore_max: u32,
    /// `fallback.isolation.semaphore.maxConcurrentRequests`.
    pub(crate) fallback_semaphore_max: u32,
    /// `execution.isolation.thread.timeoutInMilliseconds`.
    pub(crate) timeout_ms: u64,
}

const BREAKER_ENABLED: u32 = 1;
const FORCE_OPEN: u32 = 1 << 1;
const FORCE_CLOSED: u32 = 1 << 2;
const TIMEOUT_ENABLED: u32 = 1 << 3;
const INTERRUPT_ON_TIMEOUT: u32 = 1 << 4;
const FALLBACK_ENABLED: u32 = 1 << 5;
const INTERRUPT_ON_FUTURE_CANCEL: u32 = 1 << 6;
const ISOLATION_SET: u32 = 1 << 7;
const ISOLATION_THREAD: u32 = 1 << 8;
const PERCENTILES_ENABLED: u32 = 1 << 9;
const DRY_RUN: u32 = 1 << 10;
const REQUEST_LOG_ENABLED: u32 = 1 << 11;
const HEDGING: u32 = 1 << 12;
const ADAPTIVE: u32 = 1 << 13;
/// A priority reserve is set (`execution.isolation.priority.*.reservedPercentage` above 0).
const PRIORITIES: u32 = 1 << 14;
/// `execution.throttle.enabled`.
const THROTTLE: u32 = 1 << 15;
/// Slow calls are on (`circuitBreaker.slowCall.durationThresholdInMilliseconds` above 0).
const SLOW_CALLS: u32 = 1 << 16;
/// The breaker's window is checked per call (`circuitBreaker.window.type` COUNT or
/// CONSECUTIVE).
const PER_CALL_WINDOW: u32 = 1 << 17;
/// `circuitBreaker.slowCall.countInFlight`, while slow calls are on.
const SLOW_IN_FLIGHT: u32 = 1 << 18;
/// Chaos injects something (`chaos.enabled` with a rate above 0).
const CHAOS: u32 = 1 << 19;

/// The admission bound: `cap` (`maxConcurrentRequests`), or the adaptive `limit` if adaptive
/// limits are on and it is lower.
fn admit_max(flags: u32, cap: u32, limit: u32) -> u32 {
    if flags & ADAPTIVE != 0 {
        cap.min(limit)
    } else {
        cap
    }
}

impl HotCommandProperties {
    pub(crate) fn publish(&self, props: &CommandProperties) {
        use std::sync::atomic::Ordering::Release;
        let flag = |on: bool, bit: u32| if on { bit } else { 0 };
        let slow_calls = props.circuit_breaker_slow_call_duration_threshold_in_milliseconds > 0;
        let flags = flag(props.circuit_breaker_enabled, BREAKER_ENABLED)
            | flag(props.circuit_breaker_force_open, FORCE_OPEN)
            | flag(props.circuit_breaker_force_closed, FORCE_CLOSED)
            | flag(props.circuit_breaker_dry_run, DRY_RUN)
            | flag(props.request_log_enabled, REQUEST_LOG_ENABLED)
            | flag(props.hedging_max_attempts > 1, HEDGING)
            | flag(props.execution_isolation_adaptive_enabled, ADAPTIVE)
            | flag(
                props.execution_isolation_priority_critical_reserved_percentage > 0
                    || props.execution_isolation_priority_normal_reserved_percentage > 0,
                PRIORITIES,
            )
            | flag(props.execution_throttle_enabled, THROTTLE)
            | flag(props.chaos_injects(), CHAOS)
            | flag(slow_calls, SLOW_CALLS)
            | flag(
                slow_calls && props.circuit_breaker_slow_call_count_in_flight,
                SLOW_IN_FLIGHT,
            )
            | flag(
                props.circuit_breaker_window_type != crate::circuit::WindowType::Time,
                PER_CALL_WINDOW,
            )
            | flag(props.execution_timeout_enabled, TIMEOUT_ENABLED)
            | flag(
                props.execution_isolation_thread_interrupt_on_timeout,
                INTERRUPT_ON_TIMEOUT,
            )
            | flag(props.fallback_enabled, FALLBACK_ENABLED)
            | flag(
                props.metrics_rolling_percentile_enabled,
                PERCENTILES_ENABLED,
            )
            | flag(
                props.execution_isolation_thread_interrupt_on_future_cancel,
                INTERRUPT_ON_FUTURE_CANCEL,
            )
            | match props.execution_isolation_strategy {
                None => 0,
                Some(IsolationStrategy::Semaphore) => ISOLATION_SET,
                Some(IsolationStrategy::Thread) => ISOLATION_SET | ISOLATION_THREAD,
            };
        self.semaphore_max.store(
            props.execution_isolation_semaphore_max_concurrent_requests,
            Release,
        );
        self.fallback_semaphore_max.store(
            props.fallback_isolation_semaphore_max_concurrent_requests,
            Release,
        );
        self.timeout_ms
            .store(props.execution_timeout_in_milliseconds, Release);
        self.sleep_window_ms
            .store(props.circuit_breaker_sleep_window_in_milliseconds, Release);
        self.half_open_permitted
            .store(props.circuit_breaker_half_open_permitted_requests, Release);
        self.half_open_success_threshold
            .store(props.circuit_breaker_half_open_success_threshold, Release);
        self.retry_max_attempts
            .store(props.retry_max_attempts, Release);
        self.retry_attempt_timeout_ms.store(
            props.retry_attempt_timeout_in_milliseconds.unwrap_or(0),
            Release,
        );
        self.hedging_max_attempts
            .store(props.hedging_max_attempts, Release);
        self.adaptive_max_wait_ms.store(
            props.execution_isolation_adaptive_max_wait_in_milliseconds,
            Release,
        );
        self.adaptive_max_queue
            .store(props.execution_isolation_adaptive_max_queue_size, Release);
        self.priority_reserves.store(
            u64::from(props.execution_isolation_priority_critical_reserved_percentage) << 32
                | u64::from(props.execution_isolation_priority_normal_reserved_percentage),
            Release,
        );
        self.throttle_multiplier
            .store(props.execution_throttle_multiplier.to_bits(), Release);
        self.throttle_window_ms
            .store(props.execution_throttle_window_in_milliseconds, Release);
        self.throttle_buckets
            .store(props.execution_throttle_num_buckets, Release);
        self.slow_call_ms.store(
            props.circuit_breaker_slow_call_duration_threshold_in_milliseconds,
            Release,
        );
        // Odd while the admission bound is being published (see set_adaptive_limit).
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        // Enabling or choosing another algorithm starts at initialLimit; any other change keeps
        // the limit learned so far, within the new bounds. The limiter rebuilds its algorithm
        // from this limit when it sees the new generation.
        let was_adaptive = self.flags.load(std::sync::atomic::Ordering::Acquire) & ADAPTIVE != 0;
        let kind = props.execution_isolation_adaptive_algorithm as u32 + 1;
        let kind_changed = self
            .adaptive_kind
            .swap(kind, std::sync::atomic::Ordering::AcqRel)
            != kind;
        let current = self.adaptive_limit();
        let min = props.execution_isolation_adaptive_min_limit.max(1);
        let max = props.execution_isolation_adaptive_max_limit.max(min);
        let limit = if !was_adaptive || kind_changed || current == 0 {
            props.execution_isolation_adaptive_initial_limit
        } else {
            current
        };
        let limit = limit.clamp(min, max);
        self.adaptive_limit.store(limit, Release);
        self.flags.store(flags, Release);
        let bound = admit_max(
            flags,
            props.execution_isolation_semaphore_max_concurrent_requests,
            limit,
        );
        let before = self
            .admit_max
            .swap(bound, std::sync::atomic::Ordering::AcqRel);
        // Even again: published.
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        if bound > before {
            self.bound_raised.notify_waiters();
        }
    }

    /// Notified (all waiters at once) when a publish raises the admission bound.
    pub(crate) fn bound_raised(&self) -> &tokio::sync::Notify {
        &self.bound_raised
    }

    /// Sets the adaptive concurrency limit executions are admitted by (while
    /// `execution.isolation.adaptive.enabled`, capped by `maxConcurrentRequests`). A publish
    /// at the same time wins: the admission bound is recomputed until no publish overlapped.
    pub(crate) fn set_adaptive_limit(&self, limit: u32) {
        use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
        self.adaptive_limit.store(limit, Release);
        loop {
            let generation = self.generation.load(Acquire);
            if generation % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let bound = admit_max(
                self.flags.load(Acquire),
                self.semaphore_max.load(Acquire),
                self.adaptive_limit.load(Acquire),
            );
            self.admit_max.store(bound, Release);
            // A fence-free check is enough: the store above is ordered before this read by
            // the read-modify-write below.
            if self.generation.fetch_add(0, AcqRel) == generation {
                return;
            }
        }
    }

    /// The adaptive concurrency limit (0 before the limiter's first use).
    pub(crate) fn adaptive_limit(&self) -> u32 {
        self.adaptive_limit
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// `execution.isolation.adaptive.maxWaitInMilliseconds`.
    pub(crate) fn adaptive_max_wait_ms(&self) -> u64 {
        self.adaptive_max_wait_ms
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The priority reserves in percent: CRITICAL's and NORMAL's.
    pub(crate) fn priority_reserves(&self) -> (u32, u32) {
        let both = self
            .priority_reserves
            .load(std::sync::atomic::Ordering::Acquire);
        ((both >> 32) as u32, both as u32)
    }

    /// `execution.isolation.adaptive.maxQueueSize`.
    pub(crate) fn adaptive_max_queue(&self) -> u32 {
        self.adaptive_max_queue
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// `execution.throttle.enabled`, read apart from a snapshot (where an attempt's end is
    /// decided).
    #[inline]
    pub(crate) fn throttle(&self) -> bool {
        self.flags.load(std::sync::atomic::Ordering::Acquire) & THROTTLE != 0
    }

    /// `execution.throttle.multiplier` (K).
    pub(crate) fn throttle_multiplier(&self) -> f64 {
        f64::from_bits(
            self.throttle_multiplier
                .load(std::sync::atomic::Ordering::Acquire),
        )
    }

    /// `execution.throttle.windowInMilliseconds` and `execution.throttle.numBuckets`.
    pub(crate) fn throttle_window(&self) -> (u64, u32) {
        use std::sync::atomic::Ordering::Acquire;
        (
            self.throttle_window_ms.load(Acquire),
            self.throttle_buckets.load(Acquire),
        )
    }

    /// Whether an attempt's end has more to tell the breaker than its ticket: slow calls are
    /// on, or the window is checked per call.
    #[inline]
    pub(crate) fn breaker_window_extras(&self) -> bool {
        self.flags.load(std::sync::atomic::Ordering::Acquire) & (SLOW_CALLS | PER_CALL_WINDOW) != 0
    }

    /// `circuitBreaker.slowCall.durationThresholdInMilliseconds` (0: slow calls off).
    #[inline]
    pub(crate) fn slow_call_ms(&self) -> u64 {
        self.slow_call_ms.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Attempts still running past the slow-call threshold count as slow
    /// (`circuitBreaker.slowCall.countInFlight`, slow calls on).
    #[inline]
    pub(crate) fn slow_in_flight(&self) -> bool {
        self.flags.load(std::sync::atomic::Ordering::Acquire) & SLOW_IN_FLIGHT != 0
    }

    /// Chaos injects something into this key's attempts (`chaos.enabled`, a rate above 0),
    /// read apart from a snapshot (where a run starts).
    #[inline(always)]
    pub(crate) fn chaos(&self) -> bool {
        self.flags.load(std::sync::atomic::Ordering::Acquire) & CHAOS != 0
    }

    /// How many times the properties were published: a change means they may differ.
    pub(crate) fn generation(&self) -> u32 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// `circuitBreaker.sleepWindowInMilliseconds`.
    pub(crate) fn sleep_window_ms(&self) -> u64 {
        self.sleep_window_ms
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// `circuitBreaker.halfOpen.permittedRequests` (at most 65535 by validation).
    pub(crate) fn half_open_permitted_requests(&self) -> u16 {
        let permitted = self
            .half_open_permitted
            .load(std::sync::atomic::Ordering::Acquire);
        u16::try_from(permitted).unwrap_or(u16::MAX)
    }

    /// The timeout of each attempt in ms for an execution timeout of `timeout_ms`:
    /// `retry.attemptTimeoutInMilliseconds`, or by default `timeout_ms` ÷ `retry.maxAttempts`
    /// (at least 1 ms).
    pub(crate) fn retry_attempt_timeout_ms(&self, timeout_ms: u64) -> u64 {
        match self
            .retry_attempt_timeout_ms
            .load(std::sync::atomic::Ordering::Acquire)
        {
            0 => (timeout_ms / u64::from(self.retry_max_attempts().max(1))).max(1),
            set => set,
        }
    }

    /// `retry.attemptTimeoutInMilliseconds` if set, else 0.
    pub(crate) fn retry_attempt_timeout_set_ms(&self) -> u64 {
        self.retry_attempt_timeout_ms
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// `retry.maxAttempts`.
    pub(crate) fn retry_max_attempts(&self) -> u32 {
        self.retry_max_attempts
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// `hedging.maxAttempts`.
    pub(crate) fn hedging_max_attempts(&self) -> u32 {
        self.hedging_max_attempts
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// `circuitBreaker.halfOpen.successThreshold`.
    pub(crate) fn half_open_success_threshold(&self) -> u16 {
        let threshold = self
            .half_open_success_threshold
            .load(std::sync::atomic::Ordering::Acquire);
        u16::try_from(threshold).unwrap_or(u16::MAX)
    }

    /// The execution timeout in ms, or 0 when `execution.timeout.enabled` is false.
    pub(crate) fn timeout_ms_if_enabled(&self) -> u64 {
        let snapshot = self.load();
        if snapshot.timeout_enabled() {
            snapshot.timeout_ms
        } else {
            0
        }
    }

    #[inline]
    pub(crate) fn load(&self) -> HotSnapshot {
        use std::sync::atomic::Ordering::Acquire;
        let flags = self.flags.load(Acquire);
        HotSnapshot {
            flags,
            semaphore_max: self.admit_max.load(Acquire),
            fallback_semaphore_max: self.fallback_semaphore_max.load(Acquire),
            timeout_ms: self.timeout_ms.load(Acquire),
        }
    }
}

impl HotSnapshot {
    /// `circuitBreaker.enabled`.
    #[inline]
    pub(crate) fn circuit_breaker_enabled(&self) -> bool {
        self.flags & BREAKER_ENABLED != 0
    }
    /// `circuitBreaker.forceOpen`.
    #[inline]
    pub(crate) fn force_open(&self) -> bool {
        self.flags & FORCE_OPEN != 0
    }
    /// `circuitBreaker.forceClosed`.
    #[inline]
    pub(crate) fn force_closed(&self) -> bool {
        self.flags & FORCE_CLOSED != 0
    }
    /// `circuitBreaker.dryRun`.
    #[inline]
    pub(crate) fn dry_run(&self) -> bool {
        self.flags & DRY_RUN != 0
    }
    /// `requestLog.enabled`.
    #[inline]
    pub(crate) fn request_log_enabled(&self) -> bool {
        self.flags & REQUEST_LOG_ENABLED != 0
    }
    /// `hedging.maxAttempts` is over 1.
    #[inline]
    pub(crate) fn hedging(&self) -> bool {
        self.flags & HEDGING != 0
    }
    /// `execution.isolation.adaptive.enabled`.
    #[inline]
    pub(crate) fn adaptive(&self) -> bool {
        self.flags & ADAPTIVE != 0
    }
    /// A priority reserve is set (`execution.isolation.priority.*.reservedPercentage`).
    #[inline]
    pub(crate) fn prioritized(&self) -> bool {
        self.flags & PRIORITIES != 0
    }
    /// Priority reserves are set and apply: a semaphore admits (SEMAPHORE isolation or unset,
    /// or adaptive limits).
    #[inline]
    pub(crate) fn reserves_apply(&self) -> bool {
        self.prioritized()
            && (self.adaptive() || self.isolation() != Some(IsolationStrategy::Thread))
    }
    /// Admission needs more than the semaphore's count: adaptive limits or priority reserves.
    #[inline]
    pub(crate) fn admission_extras(&self) -> bool {
        self.flags & (ADAPTIVE | PRIORITIES) != 0
    }
    /// `execution.throttle.enabled`.
    #[inline]
    pub(crate) fn throttle(&self) -> bool {
        self.flags & THROTTLE != 0
    }
    /// Attempts still running past the slow-call threshold count as slow
    /// (`circuitBreaker.slowCall.countInFlight`, slow calls on).
    #[inline]
    pub(crate) fn slow_in_flight(&self) -> bool {
        self.flags & SLOW_IN_FLIGHT != 0
    }
    /// Chaos injects something into this key's attempts (`chaos.enabled`, a rate above 0).
    #[inline(always)]
    pub(crate) fn chaos(&self) -> bool {
        self.flags & CHAOS != 0
    }
    /// `execution.timeout.enabled`.
    #[inline]
    pub(crate) fn timeout_enabled(&self) -> bool {
        self.flags & TIMEOUT_ENABLED != 0
    }
    /// `execution.isolation.thread.interruptOnTimeout`.
    #[inline]
    pub(crate) fn interrupt_on_timeout(&self) -> bool {
        self.flags & INTERRUPT_ON_TIMEOUT != 0
    }
    /// `fallback.enabled`.
    #[inline]
    pub(crate) fn fallback_enabled(&self) -> bool {
        self.flags & FALLBACK_ENABLED != 0
    }
    /// `execution.isolation.thread.interruptOnFutureCancel`.
    #[inline]
    pub(crate) fn interrupt_on_future_cancel(&self) -> bool {
        self.flags & INTERRUPT_ON_FUTURE_CANCEL != 0
    }
    /// `metrics.rollingPercentile.enabled`.
    #[inline]
    pub(crate) fn percentiles_enabled(&self) -> bool {
        self.flags & PERCENTILES_ENABLED != 0
    }
    /// `execution.isolation.strategy`, if set (unset: by run kind).
    #[inline]
    pub(crate) fn isolation(&self) -> Option<IsolationStrategy> {
        match (
            self.flags & ISOLATION_SET != 0,
            self.flags & ISOLATION_THREAD != 0,
        ) {
            (false, _) => None,
            (true, true) => Some(IsolationStrategy::Thread),
            (true, false) => Some(IsolationStrategy::Semaphore),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attempt_timeout_defaults_to_a_share_of_the_execution_timeout() {
        let hot = HotCommandProperties::default();
        let mut props = CommandProperties {
            retry_max_attempts: 3,
            ..CommandProperties::default()
        };
        hot.publish(&props);
        assert_eq!(hot.retry_attempt_timeout_ms(1_000), 333);
        assert_eq!(hot.retry_attempt_timeout_ms(2), 1);
        props.retry_attempt_timeout_in_milliseconds = Some(250);
        hot.publish(&props);
        assert_eq!(hot.retry_attempt_timeout_ms(1_000), 250);
    }

    #[test]
    fn hot_mirror_follows_the_resolved_properties() {
        let hot = HotCommandProperties::default();
        let mut props = CommandProperties::default();
        hot.publish(&props);
        let snapshot = hot.load();
        assert!(snapshot.circuit_breaker_enabled());
        assert!(!snapshot.force_open() && !snapshot.force_closed());
        assert!(snapshot.timeout_enabled() && snapshot.interrupt_on_timeout());
        assert!(snapshot.fallback_enabled());
        assert_eq!(
            (
                snapshot.semaphore_max,
                snapshot.fallback_semaphore_max,
                snapshot.timeout_ms
            ),
            (10, 10, 1000)
        );
        props.circuit_breaker_force_open = true;
        props.execution_timeout_enabled = false;
        props.fallback_enabled = false;
        props.execution_isolation_semaphore_max_concurrent_requests = 3;
        hot.publish(&props);
        let snapshot = hot.load();
        assert!(
            snapshot.force_open() && !snapshot.timeout_enabled() && !snapshot.fallback_enabled()
        );
        assert_eq!(snapshot.semaphore_max, 3);
    }
}
