//! The messages of Hystrix's dashboard stream (`/hystrix.stream`): one JSON object per command
//! key, thread pool and collapser, with Hystrix's keys in Hystrix's order.
//!
//! Field order is the declaration order of the structs below (serde writes struct fields in
//! order), so no ordered map is needed.

use std::time::{SystemTime, UNIX_EPOCH};

use hystrix::circuit::WindowType;
use hystrix::collapser::CollapserEvent;
use hystrix::config::CommandProperties;
use hystrix::{
    CircuitBreakerHandle, CommandInfo, EventType, IsolationStrategy, LatencyPercentiles, Registry,
    Status,
};
use serde::ser::{Serialize, SerializeMap, Serializer};

/// Epoch wall-clock ms (Turbine compares `currentTime` with its own clock).
fn now_epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// Percentiles as Hystrix's object `{"0": ms, "25": ms, ..., "100": ms}`, in that order.
struct Percentiles {
    values: LatencyPercentiles,
    /// Collapser batch sizes have no `"0"` key.
    with_zero: bool,
}

impl Serialize for Percentiles {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let named = self.values.named();
        let named = if self.with_zero {
            &named[..]
        } else {
            &named[1..]
        };
        let mut map = serializer.serialize_map(Some(named.len()))?;
        for (name, value) in named {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

#[derive(serde::Serialize)]
struct CommandMessage<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    group: &'a str,
    #[serde(rename = "currentTime")]
    current_time: u64,
    #[serde(rename = "isCircuitBreakerOpen")]
    is_circuit_breaker_open: bool,
    #[serde(rename = "errorPercentage")]
    error_percentage: u32,
    #[serde(rename = "errorCount")]
    error_count: u64,
    #[serde(rename = "requestCount")]
    request_count: u64,
    #[serde(rename = "rollingCountBadRequests")]
    bad_requests: u64,
    #[serde(rename = "rollingCountCollapsedRequests")]
    collapsed_requests: u64,
    #[serde(rename = "rollingCountEmit")]
    emit: u64,
    #[serde(rename = "rollingCountExceptionsThrown")]
    exceptions_thrown: u64,
    #[serde(rename = "rollingCountFailure")]
    failure: u64,
    #[serde(rename = "rollingCountFallbackEmit")]
    fallback_emit: u64,
    #[serde(rename = "rollingCountFallbackFailure")]
    fallback_failure: u64,
    #[serde(rename = "rollingCountFallbackMissing")]
    fallback_missing: u64,
    #[serde(rename = "rollingCountFallbackRejection")]
    fallback_rejection: u64,
    #[serde(rename = "rollingCountFallbackSuccess")]
    fallback_success: u64,
    #[serde(rename = "rollingCountResponsesFromCache")]
    responses_from_cache: u64,
    #[serde(rename = "rollingCountSemaphoreRejected")]
    semaphore_rejected: u64,
    #[serde(rename = "rollingCountShortCircuited")]
    short_circuited: u64,
    #[serde(rename = "rollingCountSuccess")]
    success: u64,
    #[serde(rename = "rollingCountThreadPoolRejected")]
    thread_pool_rejected: u64,
    #[serde(rename = "rollingCountTimeout")]
    timeout: u64,
    /// Ours, not Hystrix's (the real dashboard ignores it): IGNORED errors.
    #[serde(rename = "rollingCountIgnored")]
    ignored: u64,
    /// Ours, not Hystrix's: calls a dry-run breaker would have short-circuited.
    #[serde(rename = "rollingCountWouldShortCircuit")]
    would_short_circuit: u64,
    /// Ours, not Hystrix's: retries granted (one per attempt after the first).
    #[serde(rename = "rollingCountRetry")]
    retry: u64,
    /// Ours, not Hystrix's: retries the retry budget refused.
    #[serde(rename = "rollingCountRetryBudgetExhausted")]
    retry_budget_exhausted: u64,
    /// Ours, not Hystrix's: hedges (one per attempt started beside one still running after the
    /// hedging delay).
    #[serde(rename = "rollingCountHedge")]
    hedge: u64,
    /// Ours, not Hystrix's: attempts that lost the race to another attempt's result and were
    /// cancelled.
    #[serde(rename = "rollingCountHedgeCancelled")]
    hedge_cancelled: u64,
    /// Ours, not Hystrix's: executions the adaptive concurrency limit refused.
    #[serde(rename = "rollingCountLimitRejected")]
    limit_rejected: u64,
    /// Ours, not Hystrix's: attempts client-side adaptive throttling refused locally.
    #[serde(rename = "rollingCountThrottled")]
    throttled: u64,
    /// Ours, not Hystrix's: attempts slower than the slow-call threshold.
    #[serde(rename = "rollingCountSlowCall")]
    slow_call: u64,
    /// Ours, not Hystrix's: attempts chaos injected a fault, a delay or a hang into.
    #[serde(rename = "rollingCountChaosInjected")]
    chaos_injected: u64,
    #[serde(rename = "currentConcurrentExecutionCount")]
    current_concurrent_execution_count: u32,
    #[serde(rename = "rollingMaxConcurrentExecutionCount")]
    rolling_max_concurrent_execution_count: u64,
    #[serde(rename = "latencyExecute_mean")]
    latency_execute_mean: i64,
    #[serde(rename = "latencyExecute")]
    latency_execute: Percentiles,
    #[serde(rename = "latencyTotal_mean")]
    latency_total_mean: i64,
    #[serde(rename = "latencyTotal")]
    latency_total: Percentiles,
    #[serde(rename = "propertyValue_circuitBreakerRequestVolumeThreshold")]
    circuit_breaker_request_volume_threshold: u32,
    #[serde(rename = "propertyValue_circuitBreakerSleepWindowInMilliseconds")]
    circuit_breaker_sleep_window_in_milliseconds: u64,
    #[serde(rename = "propertyValue_circuitBreakerErrorThresholdPercentage")]
    circuit_breaker_error_threshold_percentage: u32,
    #[serde(rename = "propertyValue_circuitBreakerForceOpen")]
    circuit_breaker_force_open: bool,
    #[serde(rename = "propertyValue_circuitBreakerForceClosed")]
    circuit_breaker_force_closed: bool,
    #[serde(rename = "propertyValue_circuitBreakerEnabled")]
    circuit_breaker_enabled: bool,
    #[serde(rename = "propertyValue_executionIsolationStrategy")]
    execution_isolation_strategy: &'static str,
    #[serde(rename = "propertyValue_executionIsolationThreadTimeoutInMilliseconds")]
    execution_isolation_thread_timeout_in_milliseconds: u64,
    #[serde(rename = "propertyValue_executionTimeoutInMilliseconds")]
    execution_timeout_in_milliseconds: u64,
    #[serde(rename = "propertyValue_executionIsolationThreadInterruptOnTimeout")]
    execution_isolation_thread_interrupt_on_timeout: bool,
    #[serde(rename = "propertyValue_executionIsolationThreadPoolKeyOverride")]
    execution_isolation_thread_pool_key_override: Option<&'a str>,
    #[serde(rename = "propertyValue_executionIsolationSemaphoreMaxConcurrentRequests")]
    execution_isolation_semaphore_max_concurrent_requests: u32,
    #[serde(rename = "propertyValue_fallbackIsolationSemaphoreMaxConcurrentRequests")]
    fallback_isolation_semaphore_max_concurrent_requests: u32,
    #[serde(rename = "propertyValue_metricsRollingStatisticalWindowInMilliseconds")]
    metrics_rolling_statistical_window_in_milliseconds: u64,
    #[serde(rename = "propertyValue_requestCacheEnabled")]
    request_cache_enabled: bool,
    #[serde(rename = "propertyValue_requestLogEnabled")]
    request_log_enabled: bool,
    #[serde(rename = "reportingHosts")]
    reporting_hosts: u32,
    #[serde(rename = "threadPool")]
    thread_pool: &'a str,
    /// Ours: `"CLOSED"`, `"OPEN"` or `"HALF_OPEN"` (see [`circuit_status`]).
    #[serde(rename = "circuitBreakerStatus")]
    circuit_breaker_status: &'static str,
    /// Ours, only for a command with a breaker per key: how many of its keys' breakers are
    /// open.
    #[serde(rename = "openBreakerKeys", skip_serializing_if = "Option::is_none")]
    open_breaker_keys: Option<usize>,
    /// Ours, only for a command with adaptive concurrency limits on: the limit in force
    /// (executions).
    #[serde(rename = "adaptiveLimit", skip_serializing_if = "Option::is_none")]
    adaptive_limit: Option<u32>,
    /// Ours, only with adaptive limits on: executions admitted by the limit, not yet ended.
    #[serde(
        rename = "adaptiveLimitInFlight",
        skip_serializing_if = "Option::is_none"
    )]
    adaptive_limit_in_flight: Option<u32>,
    /// Ours, only with adaptive limits on: executions waiting for a place.
    #[serde(
        rename = "adaptiveLimitQueued",
        skip_serializing_if = "Option::is_none"
    )]
    adaptive_limit_queued: Option<u32>,
    /// Ours, only for a command with client-side adaptive throttling on: the probability (0
    /// to 1) with which its next attempt is throttled.
    #[serde(
        rename = "throttleProbability",
        skip_serializing_if = "Option::is_none"
    )]
    throttle_probability: Option<f64>,
    /// Ours, only while a priority reserve is set: executions by class.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    priorities: Option<PriorityFields>,
    /// Ours, only while slow calls are on: the breaker's slow-call health and thresholds.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    slow_calls: Option<SlowCallFields>,
    /// Ours, only for a breaker whose window is not Hystrix's TIME window: `"COUNT"` or
    /// `"CONSECUTIVE"`.
    #[serde(
        rename = "propertyValue_circuitBreakerWindowType",
        skip_serializing_if = "Option::is_none"
    )]
    circuit_breaker_window_type: Option<&'static str>,
    /// Ours, only while chaos is on (`chaos.enabled`): the chaos properties.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    chaos: Option<ChaosFields>,
}

/// A command's chaos properties, while its chaos is on (see [`command_json`]).
#[derive(serde::Serialize)]
struct ChaosFields {
    #[serde(rename = "propertyValue_chaosEnabled")]
    enabled: bool,
    #[serde(rename = "propertyValue_chaosFaultRatePercentage")]
    fault_rate_percentage: f64,
    #[serde(rename = "propertyValue_chaosLatencyRatePercentage")]
    latency_rate_percentage: f64,
    #[serde(rename = "propertyValue_chaosLatencyInMilliseconds")]
    latency_in_milliseconds: u64,
    #[serde(rename = "propertyValue_chaosHangRatePercentage")]
    hang_rate_percentage: f64,
}

impl ChaosFields {
    /// The fields of a command with these properties, or `None` while its chaos is off.
    fn of(props: &CommandProperties) -> Option<Self> {
        props.chaos_enabled.then_some(ChaosFields {
            enabled: true,
            fault_rate_percentage: props.chaos_fault_rate_percentage,
            latency_rate_percentage: props.chaos_latency_rate_percentage,
            latency_in_milliseconds: props.chaos_latency_in_milliseconds,
            hang_rate_percentage: props.chaos_hang_rate_percentage,
        })
    }
}

/// A command's slow-call health and thresholds (see [`command_json`]).
#[derive(serde::Serialize)]
struct SlowCallFields {
    #[serde(rename = "slowCallCount")]
    count: u64,
    #[serde(rename = "slowCallPercentage")]
    percentage: u32,
    #[serde(rename = "propertyValue_circuitBreakerSlowCallDurationThresholdInMilliseconds")]
    duration_threshold_in_milliseconds: u64,
    #[serde(rename = "propertyValue_circuitBreakerSlowCallRateThresholdPercentage")]
    rate_threshold_percentage: u32,
}

impl SlowCallFields {
    /// The fields of a command whose health is `health`, or `None` while its slow calls are
    /// off (`circuitBreaker.slowCall.durationThresholdInMilliseconds` 0).
    fn of(props: &CommandProperties, health: &hystrix::HealthCounts) -> Option<Self> {
        let threshold = props.circuit_breaker_slow_call_duration_threshold_in_milliseconds;
        (threshold > 0).then_some(SlowCallFields {
            count: health.slow_call_count,
            percentage: health.slow_call_percentage,
            duration_threshold_in_milliseconds: threshold,
            rate_threshold_percentage: props.circuit_breaker_slow_call_rate_threshold_percentage,
        })
    }
}

/// A command's executions by priority class (see [`command_json`]).
#[derive(serde::Serialize)]
struct PriorityFields {
    #[serde(rename = "priorityCriticalInFlight")]
    critical_in_flight: u32,
    #[serde(rename = "priorityNormalInFlight")]
    normal_in_flight: u32,
    #[serde(rename = "prioritySheddableInFlight")]
    sheddable_in_flight: u32,
    #[serde(rename = "priorityCriticalRefused")]
    critical_refused: u64,
    #[serde(rename = "priorityNormalRefused")]
    normal_refused: u64,
    #[serde(rename = "prioritySheddableRefused")]
    sheddable_refused: u64,
    #[serde(rename = "priorityCriticalReserved")]
    critical_reserved: u32,
    #[serde(rename = "priorityNormalReserved")]
    normal_reserved: u32,
}

impl PriorityFields {
    fn of(p: &hystrix::PrioritySnapshot) -> Self {
        PriorityFields {
            critical_in_flight: p.critical.in_flight,
            normal_in_flight: p.normal.in_flight,
            sheddable_in_flight: p.sheddable.in_flight,
            critical_refused: p.critical.refused,
            normal_refused: p.normal.refused,
            sheddable_refused: p.sheddable.refused,
            critical_reserved: p.critical_reserved,
            normal_reserved: p.normal_reserved,
        }
    }
}

#[derive(serde::Serialize)]
struct ThreadPoolMessage<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    #[serde(rename = "currentTime")]
    current_time: u64,
    #[serde(rename = "currentActiveCount")]
    current_active_count: u32,
    #[serde(rename = "currentCompletedTaskCount")]
    current_completed_task_count: u64,
    #[serde(rename = "currentCorePoolSize")]
    current_core_pool_size: u32,
    #[serde(rename = "currentLargestPoolSize")]
    current_largest_pool_size: u32,
    #[serde(rename = "currentMaximumPoolSize")]
    current_maximum_pool_size: u32,
    #[serde(rename = "currentPoolSize")]
    current_pool_size: u32,
    #[serde(rename = "currentQueueSize")]
    current_queue_size: u32,
    #[serde(rename = "currentTaskCount")]
    current_task_count: u64,
    #[serde(rename = "rollingCountThreadsExecuted")]
    rolling_count_threads_executed: u64,
    #[serde(rename = "rollingMaxActiveThreads")]
    rolling_max_active_threads: u64,
    #[serde(rename = "rollingCountCommandRejections")]
    rolling_count_command_rejections: u64,
    #[serde(rename = "propertyValue_queueSizeRejectionThreshold")]
    queue_size_rejection_threshold: i32,
    #[serde(rename = "propertyValue_metricsRollingStatisticalWindowInMilliseconds")]
    metrics_rolling_statistical_window_in_milliseconds: u64,
    #[serde(rename = "reportingHosts")]
    reporting_hosts: u32,
}

#[derive(serde::Serialize)]
struct CollapserMessage<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    #[serde(rename = "currentTime")]
    current_time: u64,
    #[serde(rename = "rollingCountRequestsBatched")]
    rolling_count_requests_batched: u64,
    #[serde(rename = "rollingCountBatches")]
    rolling_count_batches: u64,
    #[serde(rename = "rollingCountResponsesFromCache")]
    rolling_count_responses_from_cache: u64,
    #[serde(rename = "batchSize_mean")]
    batch_size_mean: i64,
    #[serde(rename = "batchSize")]
    batch_size: Percentiles,
    #[serde(rename = "propertyValue_requestCacheEnabled")]
    request_cache_enabled: bool,
    #[serde(rename = "propertyValue_maxRequestsInBatch")]
    max_requests_in_batch: u32,
    #[serde(rename = "propertyValue_timerDelayInMilliseconds")]
    timer_delay_in_milliseconds: u64,
    #[serde(rename = "reportingHosts")]
    reporting_hosts: u32,
}

/// Compact, single-line JSON of a message.
pub(crate) fn to_json(message: &impl Serialize) -> String {
    // Room for a command's message (about 2.2 KB) at once, not grown from 128 bytes by
    // doubling, then trimmed (a tick keeps every message until sent). Serializing these
    // messages cannot fail: string keys, plain values.
    let mut json = Vec::with_capacity(4096);
    if serde_json::to_writer(&mut json, message).is_err() {
        return String::new();
    }
    json.shrink_to_fit();
    String::from_utf8(json).unwrap_or_default()
}

/// A JSON object keyed by name (a command, pool or collapser key), in the order given.
pub(crate) struct Keyed<T>(Vec<(String, T)>);

impl<T> Keyed<T> {
    /// The values `value` gives for `keys`, under their names; keys it gives none for are left
    /// out (they went away meanwhile).
    pub(crate) fn of<K: std::fmt::Display>(keys: Vec<K>, value: impl Fn(&K) -> Option<T>) -> Self {
        Keyed(
            keys.into_iter()
                .filter_map(|key| Some((key.to_string(), value(&key)?)))
                .collect(),
        )
    }
}

impl<T: Serialize> Serialize for Keyed<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(key, value)| (key, value)))
    }
}

/// The isolation a command key reports: the configured strategy, or, when
/// `execution.isolation.strategy` is unset (isolation by run kind), THREAD once
/// the key has used its thread pool and SEMAPHORE before.
pub(crate) fn isolation_of(props: &CommandProperties, info: &CommandInfo) -> IsolationStrategy {
    match props.execution_isolation_strategy {
        Some(strategy) => strategy,
        None if info.used_thread_pool => IsolationStrategy::Thread,
        None => IsolationStrategy::Semaphore,
    }
}

/// Health counts from the rolling counts (the requests are SUCCESS, FAILURE, TIMEOUT, the two
/// rejections and IGNORED; the errors all but SUCCESS and IGNORED; SLOW_CALL the slow
/// calls): for a command with a breaker per key, whose executions count in their keys' health
/// windows, not in the command's.
pub(crate) fn rolling_health(metrics: &hystrix::CommandMetrics) -> hystrix::HealthCounts {
    let sum =
        |events: &[EventType]| -> u64 { events.iter().map(|e| metrics.rolling_count(*e)).sum() };
    let errors = sum(&[
        EventType::Failure,
        EventType::Timeout,
        EventType::ThreadPoolRejected,
        EventType::SemaphoreRejected,
    ]);
    let requests = errors + sum(&[EventType::Success, EventType::Ignored]);
    let slow = sum(&[EventType::SlowCall]).min(requests);
    hystrix::HealthCounts::with_slow_calls(requests, errors, slow)
}

/// What `circuitBreakerStatus` says of command `key`, whose own breaker is `own`: `"CLOSED"`
/// whenever `isCircuitBreakerOpen` (`open`) is false; otherwise `"OPEN"` when
/// `circuitBreaker.forceOpen` is set (`forced_open`) or any of its breakers (its own, or with a
/// breaker per key, one of `open_keys`) is OPEN, else `"HALF_OPEN"`: trials are under way.
/// Hystrix's stream says only `isCircuitBreakerOpen`, true in both OPEN and HALF_OPEN.
fn circuit_status(
    registry: &Registry,
    key: &str,
    own: &CircuitBreakerHandle,
    open: bool,
    forced_open: bool,
    open_keys: Option<&[String]>,
) -> &'static str {
    if !open {
        return "CLOSED";
    }
    if forced_open {
        return "OPEN";
    }
    let keyed = open_keys
        .into_iter()
        .flatten()
        .filter_map(|breaker_key| registry.keyed_circuit_breaker(key, breaker_key));
    let mut half_open = false;
    for status in std::iter::once(own.status()).chain(keyed.map(|breaker| breaker.status())) {
        match status {
            Status::Open => return "OPEN",
            Status::HalfOpen => half_open = true,
            Status::Closed => {}
        }
    }
    if half_open { "HALF_OPEN" } else { "OPEN" }
}

/// The `HystrixCommand` message of a command key (compact, single-line JSON); `None` if the key
/// has no state in `registry`.
///
/// Counts are the rolling window's (completed buckets); `errorPercentage`, `errorCount` and
/// `requestCount` are the breaker's health counts; latencies are whole ms over the percentile
/// window. `propertyValue_executionIsolationStrategy` is the configured strategy, or, when
/// `execution.isolation.strategy` is unset (isolation by run kind), `"THREAD"` once the key has
/// used its thread pool and `"SEMAPHORE"` before. Beside Hystrix's keys it carries
/// `rollingCountIgnored`, `rollingCountWouldShortCircuit`, `rollingCountRetry` (RETRY: one per
/// retry granted), `rollingCountRetryBudgetExhausted` (RETRY_BUDGET_EXHAUSTED: retries the
/// retry budget refused), `rollingCountHedge` (HEDGE: one per attempt started beside one still
/// running after the hedging delay), `rollingCountHedgeCancelled` (HEDGE_CANCELLED: attempts
/// that lost the race to another attempt's result and were cancelled) and
/// `rollingCountLimitRejected` (LIMIT_REJECTED: executions the adaptive concurrency limit
/// refused), `rollingCountThrottled` (THROTTLED: attempts client-side adaptive throttling
/// refused locally), `rollingCountSlowCall` (SLOW_CALL: attempts that took longer than
/// `circuitBreaker.slowCall.durationThresholdInMilliseconds`, whatever their outcome, so also
/// counted under it) and `rollingCountChaosInjected` (CHAOS_INJECTED: attempts chaos injected
/// a fault, a delay or a hang into, one each whatever it injected; the outcome, such as the
/// FAILURE of an injected fault, is counted under its own field too), fields the real Hystrix
/// Dashboard ignores, in that order after `rollingCountTimeout`. Each attempt of a retried
/// execution is one request in `requestCount` (what the dependency saw).
///
/// After `threadPool` comes `circuitBreakerStatus`, ours: `"CLOSED"`, `"OPEN"` or
/// `"HALF_OPEN"`, so that a page can tell a breaker letting trials through from one refusing
/// every call (Hystrix's `isCircuitBreakerOpen` is true in both). It is `"CLOSED"` exactly when
/// `isCircuitBreakerOpen` is false; `"OPEN"` when `circuitBreaker.forceOpen` is set or a
/// breaker of the command is OPEN; else `"HALF_OPEN"`. A breaker goes HALF_OPEN when the
/// first call after its open period is let through as a trial, and stays so until its trials
/// close or re-open it. Dashboards that do not know the field ignore it.
///
/// A command with a breaker per key (its executions count in their keys' health windows):
/// `isCircuitBreakerOpen` is true while any key's breaker is open, `circuitBreakerStatus` is
/// the most closed-off of its open keys' (OPEN before HALF_OPEN), `errorPercentage`,
/// `errorCount` and `requestCount` come from the rolling counts of all keys, and a field
/// `openBreakerKeys` after `circuitBreakerStatus` counts the open keys.
///
/// A command with adaptive concurrency limits on (`execution.isolation.adaptive.enabled`) ends
/// with `adaptiveLimit` (the limit in force, in executions: the algorithm's, capped by
/// `execution.isolation.semaphore.maxConcurrentRequests`), `adaptiveLimitInFlight`
/// (executions admitted by the limit and not yet ended) and `adaptiveLimitQueued` (executions
/// waiting for a place), integers read when the message is made (not rolling values). Without
/// adaptive limits the three keys are absent, not `null`, as `openBreakerKeys` is for a
/// command without a breaker per key: Turbine sums numbers across hosts, and `null` is not
/// one; a consumer tells "off" by the keys' absence.
///
/// A command with a priority reserve set (`execution.isolation.priority.critical.
/// reservedPercentage` or `...normal.reservedPercentage` above 0) ends with its executions by
/// class, integers read when the message is made: `priorityCriticalInFlight`,
/// `priorityNormalInFlight`, `prioritySheddableInFlight` (holding a permit now),
/// `priorityCriticalRefused`, `priorityNormalRefused`, `prioritySheddableRefused` (refused a
/// permit since the key was created, cumulative) and `priorityCriticalReserved`,
/// `priorityNormalReserved` (places of the bound reserved now). Without a reserve they are
/// absent.
/// A command with client-side adaptive throttling on (`execution.throttle.enabled`) ends with
/// `throttleProbability`: the probability (a number from 0 to 1) with which its next attempt
/// is throttled, max(0, (requests − K × accepts) / (requests + 1)) over the throttling window
/// (Google SRE book, Handling Overload), read when the message is made; absent when
/// throttling is off. Summed by Turbine it means nothing: read it per host.
///
/// A command with slow calls on (`circuitBreaker.slowCall.durationThresholdInMilliseconds`
/// above 0) then has `slowCallCount` and `slowCallPercentage`, the slow calls among the
/// requests of `requestCount` and their percentage (integer, rounded down as
/// `errorPercentage`; the breaker trips when it reaches the rate threshold), then
/// `propertyValue_circuitBreakerSlowCallDurationThresholdInMilliseconds` and
/// `propertyValue_circuitBreakerSlowCallRateThresholdPercentage`, the two properties; absent
/// when slow calls are off. As Hystrix's `errorPercentage` and `propertyValue_*` numbers, Turbine
/// sums them across hosts: divide by `reportingHosts`.
///
/// A command whose breaker decides on another window than Hystrix's rolling TIME window
/// (`circuitBreaker.window.type` COUNT or CONSECUTIVE) ends with
/// `propertyValue_circuitBreakerWindowType`, `"COUNT"` or `"CONSECUTIVE"`; absent for TIME.
/// The health fields (`requestCount`, `errorCount`, `errorPercentage`, and the slow-call ones)
/// are still the rolling health window's counts: the breaker's own window is read with
/// [`CircuitBreakerHandle::health_counts`].
///
/// A command whose chaos is on (`chaos.enabled` true, which only a registry that allows chaos
/// accepts) ends with its chaos properties, so that nobody watching forgets it:
/// `propertyValue_chaosEnabled` (always `true` when present),
/// `propertyValue_chaosFaultRatePercentage`, `propertyValue_chaosLatencyRatePercentage`
/// (percentages from 0 to 100, JSON numbers that may have fractions),
/// `propertyValue_chaosLatencyInMilliseconds` (an integer) and
/// `propertyValue_chaosHangRatePercentage`, read when the message is made; all five are
/// absent while chaos is off. As other `propertyValue_*` numbers, Turbine sums them across
/// hosts: divide by `reportingHosts`.
pub fn command_json(registry: &Registry, key: &str) -> Option<String> {
    let metrics = registry.command_metrics(key)?;
    let info = registry.command_info(key)?;
    let breaker = registry.circuit_breaker(key)?;
    let open_keys = registry.open_breaker_keys(key);
    let open = breaker.is_open() || open_keys.as_ref().is_some_and(|keys| !keys.is_empty());
    let props = registry.properties().command(&info.command_key);
    let status = circuit_status(
        registry,
        key,
        &breaker,
        open,
        props.circuit_breaker_force_open,
        open_keys.as_deref(),
    );
    let rolling = |event| metrics.rolling_count(event);
    let health = if info.keyed_breakers {
        rolling_health(&metrics)
    } else {
        metrics.health_counts()
    };
    let execution = metrics.execution_latency();
    let total = metrics.total_latency();
    let isolation = isolation_of(&props, &info);
    let adaptive = metrics.adaptive_limit();
    Some(to_json(&CommandMessage {
        kind: "HystrixCommand",
        name: key,
        group: info.group.as_str(),
        current_time: now_epoch_ms(),
        is_circuit_breaker_open: open,
        error_percentage: health.error_percentage,
        error_count: health.error_count,
        request_count: health.total_requests,
        bad_requests: rolling(EventType::BadRequest),
        collapsed_requests: rolling(EventType::Collapsed),
        emit: rolling(EventType::Emit),
        exceptions_thrown: rolling(EventType::ExceptionThrown),
        failure: rolling(EventType::Failure),
        fallback_emit: rolling(EventType::FallbackEmit),
        fallback_failure: rolling(EventType::FallbackFailure),
        fallback_missing: rolling(EventType::FallbackMissing),
        fallback_rejection: rolling(EventType::FallbackRejection),
        fallback_success: rolling(EventType::FallbackSuccess),
        responses_from_cache: rolling(EventType::ResponseFromCache),
        semaphore_rejected: rolling(EventType::SemaphoreRejected),
        short_circuited: rolling(EventType::ShortCircuited),
        success: rolling(EventType::Success),
        thread_pool_rejected: rolling(EventType::ThreadPoolRejected),
        timeout: rolling(EventType::Timeout),
        ignored: rolling(EventType::Ignored),
        would_short_circuit: rolling(EventType::WouldShortCircuit),
        retry: rolling(EventType::Retry),
        retry_budget_exhausted: rolling(EventType::RetryBudgetExhausted),
        hedge: rolling(EventType::Hedge),
        hedge_cancelled: rolling(EventType::HedgeCancelled),
        limit_rejected: rolling(EventType::LimitRejected),
        throttled: rolling(EventType::Throttled),
        slow_call: rolling(EventType::SlowCall),
        chaos_injected: rolling(EventType::ChaosInjected),
        current_concurrent_execution_count: metrics.current_concurrent_execution_count(),
        rolling_max_concurrent_execution_count: metrics.rolling_max_concurrent_execution_count(),
        latency_execute_mean: execution.mean,
        latency_execute: Percentiles {
            values: execution,
            with_zero: true,
        },
        latency_total_mean: total.mean,
        latency_total: Percentiles {
            values: total,
            with_zero: true,
        },
        circuit_breaker_request_volume_threshold: props.circuit_breaker_request_volume_threshold,
        circuit_breaker_sleep_window_in_milliseconds: props
            .circuit_breaker_sleep_window_in_milliseconds,
        circuit_breaker_error_threshold_percentage: props
            .circuit_breaker_error_threshold_percentage,
        circuit_breaker_force_open: props.circuit_breaker_force_open,
        circuit_breaker_force_closed: props.circuit_breaker_force_closed,
        circuit_breaker_enabled: props.circuit_breaker_enabled,
        execution_isolation_strategy: isolation.name(),
        execution_isolation_thread_timeout_in_milliseconds: props.execution_timeout_in_milliseconds,
        execution_timeout_in_milliseconds: props.execution_timeout_in_milliseconds,
        execution_isolation_thread_interrupt_on_timeout: props
            .execution_isolation_thread_interrupt_on_timeout,
        execution_isolation_thread_pool_key_override: props.thread_pool_key_override.as_deref(),
        execution_isolation_semaphore_max_concurrent_requests: props
            .execution_isolation_semaphore_max_concurrent_requests,
        fallback_isolation_semaphore_max_concurrent_requests: props
            .fallback_isolation_semaphore_max_concurrent_requests,
        metrics_rolling_statistical_window_in_milliseconds: props
            .metrics_rolling_stats_time_in_milliseconds,
        request_cache_enabled: props.request_cache_enabled,
        request_log_enabled: props.request_log_enabled,
        reporting_hosts: 1,
        thread_pool: info.thread_pool_key.as_str(),
        circuit_breaker_status: status,
        open_breaker_keys: open_keys.map(|keys| keys.len()),
        adaptive_limit: adaptive.map(|a| a.limit),
        adaptive_limit_in_flight: adaptive.map(|a| a.in_flight),
        adaptive_limit_queued: adaptive.map(|a| a.queued),
        priorities: metrics.priorities().as_ref().map(PriorityFields::of),
        throttle_probability: metrics.throttle().map(|t| t.probability),
        slow_calls: SlowCallFields::of(&props, &health),
        circuit_breaker_window_type: (props.circuit_breaker_window_type != WindowType::Time)
            .then(|| props.circuit_breaker_window_type.name()),
        chaos: ChaosFields::of(&props),
    }))
}

/// The `HystrixThreadPool` message of a thread pool; `None` if `registry` has no pool of that
/// key (pools are made on first use under THREAD isolation).
pub fn thread_pool_json(registry: &Registry, key: &str) -> Option<String> {
    let metrics = registry.thread_pool_metrics(key)?;
    let props = registry.properties().thread_pool(&metrics.thread_pool_key);
    Some(to_json(&ThreadPoolMessage {
        kind: "HystrixThreadPool",
        name: key,
        current_time: now_epoch_ms(),
        current_active_count: metrics.current_active_count,
        current_completed_task_count: metrics.current_completed_task_count,
        current_core_pool_size: metrics.current_core_pool_size,
        current_largest_pool_size: metrics.current_largest_pool_size,
        current_maximum_pool_size: metrics.current_maximum_pool_size,
        current_pool_size: metrics.current_pool_size,
        current_queue_size: metrics.current_queue_size,
        current_task_count: metrics.current_task_count,
        rolling_count_threads_executed: metrics.rolling_count_threads_executed,
        rolling_max_active_threads: metrics.rolling_max_active_threads,
        rolling_count_command_rejections: metrics.rolling_count_command_rejections,
        queue_size_rejection_threshold: props.queue_size_rejection_threshold,
        metrics_rolling_statistical_window_in_milliseconds: props
            .metrics_rolling_stats_time_in_milliseconds,
        reporting_hosts: 1,
    }))
}

/// The `HystrixCollapser` message of a collapser key; `None` if no collapser of that key was
/// built in `registry`. `rollingCountRequestsBatched` counts ADDED_TO_BATCH, `rollingCountBatches`
/// BATCH_EXECUTED; `batchSize` has the keys `"25"` to `"100"` (no `"0"`, as Hystrix).
pub fn collapser_json(registry: &Registry, key: &str) -> Option<String> {
    let metrics = registry.collapser_metrics(key)?;
    let props = registry.properties().collapser(metrics.collapser_key());
    let batch_size = metrics.batch_size();
    Some(to_json(&CollapserMessage {
        kind: "HystrixCollapser",
        name: key,
        current_time: now_epoch_ms(),
        rolling_count_requests_batched: metrics.rolling_count(CollapserEvent::AddedToBatch),
        rolling_count_batches: metrics.rolling_count(CollapserEvent::BatchExecuted),
        rolling_count_responses_from_cache: metrics
            .rolling_count(CollapserEvent::ResponseFromCache),
        batch_size_mean: batch_size.mean,
        batch_size: Percentiles {
            values: batch_size,
            with_zero: false,
        },
        request_cache_enabled: props.request_cache_enabled,
        max_requests_in_batch: props.max_requests_in_batch,
        timer_delay_in_milliseconds: props.timer_delay_in_milliseconds,
        reporting_hosts: 1,
    }))
}

/// One tick of the dashboard stream: a message per command key, then per thread pool, then per
/// collapser, each sorted by key. Every pool the registry has is reported (pools exist only
/// once a THREAD execution used them, which is what Hystrix's filter on executed pools is for).
pub fn sample(registry: &Registry) -> Vec<String> {
    let commands = registry.command_keys();
    let pools = registry.thread_pool_keys();
    let collapsers = registry.collapser_keys();
    let mut messages = Vec::with_capacity(commands.len() + pools.len() + collapsers.len());
    messages.extend(
        commands
            .iter()
            .filter_map(|key| command_json(registry, key.as_str())),
    );
    messages.extend(
        pools
            .iter()
            .filter_map(|key| thread_pool_json(registry, key.as_str())),
    );
    messages.extend(
        collapsers
            .iter()
            .filter_map(|key| collapser_json(registry, key.as_str())),
    );
    messages
}
