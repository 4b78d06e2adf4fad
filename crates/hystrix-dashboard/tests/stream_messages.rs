//! Golden tests of the hystrix.stream messages: key set, order and JSON types per message type,
//! and values equal to the registry's snapshots for a registry driven to known counts.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hystrix::EventType;
use hystrix::collapser::{CollapserEvent, CollapserScope};
use hystrix::testing::TestRegistry;
use hystrix_dashboard::stream;
use serde_json::Value;

/// Hystrix's HystrixCommand keys in its order, each with the JSON type it must have, with our
/// ten extension counters after `rollingCountTimeout` and our `circuitBreakerStatus` last
/// (for a command without a breaker per key or adaptive limits).
const COMMAND_KEYS: &[(&str, &str)] = &[
    ("type", "string"),
    ("name", "string"),
    ("group", "string"),
    ("currentTime", "int"),
    ("isCircuitBreakerOpen", "bool"),
    ("errorPercentage", "int"),
    ("errorCount", "int"),
    ("requestCount", "int"),
    ("rollingCountBadRequests", "int"),
    ("rollingCountCollapsedRequests", "int"),
    ("rollingCountEmit", "int"),
    ("rollingCountExceptionsThrown", "int"),
    ("rollingCountFailure", "int"),
    ("rollingCountFallbackEmit", "int"),
    ("rollingCountFallbackFailure", "int"),
    ("rollingCountFallbackMissing", "int"),
    ("rollingCountFallbackRejection", "int"),
    ("rollingCountFallbackSuccess", "int"),
    ("rollingCountResponsesFromCache", "int"),
    ("rollingCountSemaphoreRejected", "int"),
    ("rollingCountShortCircuited", "int"),
    ("rollingCountSuccess", "int"),
    ("rollingCountThreadPoolRejected", "int"),
    ("rollingCountTimeout", "int"),
    ("rollingCountIgnored", "int"),
    ("rollingCountWouldShortCircuit", "int"),
    ("rollingCountRetry", "int"),
    ("rollingCountRetryBudgetExhausted", "int"),
    ("rollingCountHedge", "int"),
    ("rollingCountHedgeCancelled", "int"),
    ("rollingCountLimitRejected", "int"),
    ("rollingCountThrottled", "int"),
    ("rollingCountSlowCall", "int"),
    ("rollingCountChaosInjected", "int"),
    ("currentConcurrentExecutionCount", "int"),
    ("rollingMaxConcurrentExecutionCount", "int"),
    ("latencyExecute_mean", "int"),
    ("latencyExecute", "percentiles"),
    ("latencyTotal_mean", "int"),
    ("latencyTotal", "percentiles"),
    ("propertyValue_circuitBreakerRequestVolumeThreshold", "int"),
    (
        "propertyValue_circuitBreakerSleepWindowInMilliseconds",
        "int",
    ),
    (
        "propertyValue_circuitBreakerErrorThresholdPercentage",
        "int",
    ),
    ("propertyValue_circuitBreakerForceOpen", "bool"),
    ("propertyValue_circuitBreakerForceClosed", "bool"),
    ("propertyValue_circuitBreakerEnabled", "bool"),
    ("propertyValue_executionIsolationStrategy", "string"),
    (
        "propertyValue_executionIsolationThreadTimeoutInMilliseconds",
        "int",
    ),
    ("propertyValue_executionTimeoutInMilliseconds", "int"),
    (
        "propertyValue_executionIsolationThreadInterruptOnTimeout",
        "bool",
    ),
    (
        "propertyValue_executionIsolationThreadPoolKeyOverride",
        "string-or-null",
    ),
    (
        "propertyValue_executionIsolationSemaphoreMaxConcurrentRequests",
        "int",
    ),
    (
        "propertyValue_fallbackIsolationSemaphoreMaxConcurrentRequests",
        "int",
    ),
    (
        "propertyValue_metricsRollingStatisticalWindowInMilliseconds",
        "int",
    ),
    ("propertyValue_requestCacheEnabled", "bool"),
    ("propertyValue_requestLogEnabled", "bool"),
    ("reportingHosts", "int"),
    ("threadPool", "string"),
    ("circuitBreakerStatus", "string"),
];

/// The keys the Hystrix Dashboard requires (`validateData`): a missing one drops the message.
const REQUIRED_COMMAND_KEYS: [&str; 37] = [
    "type",
    "name",
    "group",
    "isCircuitBreakerOpen",
    "errorPercentage",
    "errorCount",
    "requestCount",
    "rollingCountBadRequests",
    "rollingCountCollapsedRequests",
    "rollingCountExceptionsThrown",
    "rollingCountFailure",
    "rollingCountFallbackFailure",
    "rollingCountFallbackRejection",
    "rollingCountFallbackSuccess",
    "rollingCountResponsesFromCache",
    "rollingCountSemaphoreRejected",
    "rollingCountShortCircuited",
    "rollingCountSuccess",
    "rollingCountThreadPoolRejected",
    "rollingCountTimeout",
    "currentConcurrentExecutionCount",
    "latencyExecute_mean",
    "latencyExecute",
    "propertyValue_circuitBreakerRequestVolumeThreshold",
    "propertyValue_circuitBreakerSleepWindowInMilliseconds",
    "propertyValue_circuitBreakerErrorThresholdPercentage",
    "propertyValue_circuitBreakerForceOpen",
    "propertyValue_circuitBreakerForceClosed",
    "propertyValue_executionIsolationStrategy",
    "propertyValue_executionIsolationThreadTimeoutInMilliseconds",
    "propertyValue_executionIsolationThreadInterruptOnTimeout",
    "propertyValue_executionIsolationSemaphoreMaxConcurrentRequests",
    "propertyValue_fallbackIsolationSemaphoreMaxConcurrentRequests",
    "propertyValue_metricsRollingStatisticalWindowInMilliseconds",
    "propertyValue_requestCacheEnabled",
    "propertyValue_requestLogEnabled",
    "reportingHosts",
];

const THREAD_POOL_KEYS: &[&str] = &[
    "type",
    "name",
    "currentTime",
    "currentActiveCount",
    "currentCompletedTaskCount",
    "currentCorePoolSize",
    "currentLargestPoolSize",
    "currentMaximumPoolSize",
    "currentPoolSize",
    "currentQueueSize",
    "currentTaskCount",
    "rollingCountThreadsExecuted",
    "rollingMaxActiveThreads",
    "rollingCountCommandRejections",
    "propertyValue_queueSizeRejectionThreshold",
    "propertyValue_metricsRollingStatisticalWindowInMilliseconds",
    "reportingHosts",
];

const COLLAPSER_KEYS: &[&str] = &[
    "type",
    "name",
    "currentTime",
    "rollingCountRequestsBatched",
    "rollingCountBatches",
    "rollingCountResponsesFromCache",
    "batchSize_mean",
    "batchSize",
    "propertyValue_requestCacheEnabled",
    "propertyValue_maxRequestsInBatch",
    "propertyValue_timerDelayInMilliseconds",
    "reportingHosts",
];

const PERCENTILE_KEYS: [&str; 9] = ["0", "25", "50", "75", "90", "95", "99", "99.5", "100"];

fn parse(json: &str) -> serde_json::Map<String, Value> {
    assert!(!json.contains('\n'), "single-line JSON: {json}");
    match serde_json::from_str(json).unwrap() {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn keys(map: &serde_json::Map<String, Value>) -> Vec<&str> {
    map.keys().map(String::as_str).collect()
}

fn is_int(value: &Value) -> bool {
    value.is_i64() || value.is_u64()
}

fn assert_percentiles(value: &Value, expected: &[&str]) {
    let map = value.as_object().unwrap();
    assert_eq!(keys(map), expected);
    assert!(map.values().all(is_int), "{value}");
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn command_message_has_hystrix_keys_in_order_with_their_types() {
    let test = TestRegistry::new();
    common::drive_mixed(&test);
    let before = epoch_ms();
    let json = stream::command_json(test.registry(), "Mixed").unwrap();
    let after = epoch_ms();
    let msg = parse(&json);
    let expected: Vec<&str> = COMMAND_KEYS.iter().map(|(k, _)| *k).collect();
    assert_eq!(keys(&msg), expected);
    for key in REQUIRED_COMMAND_KEYS {
        assert!(msg.contains_key(key), "required key {key} missing");
    }
    for (key, kind) in COMMAND_KEYS {
        let value = &msg[*key];
        match *kind {
            "string" => assert!(value.is_string(), "{key}: {value}"),
            "int" => assert!(is_int(value), "{key}: {value}"),
            "bool" => assert!(value.is_boolean(), "{key}: {value}"),
            "string-or-null" => assert!(value.is_string() || value.is_null(), "{key}"),
            "percentiles" => assert_percentiles(value, &PERCENTILE_KEYS),
            _ => unreachable!(),
        }
    }
    let now = msg["currentTime"].as_u64().unwrap();
    assert!((before..=after).contains(&now), "wall-clock epoch ms");
}

#[test]
fn command_message_values_equal_the_snapshot() {
    let test = TestRegistry::new();
    common::drive_mixed(&test);
    let registry = test.registry();
    let msg = parse(&stream::command_json(registry, "Mixed").unwrap());
    let metrics = registry.command_metrics("Mixed").unwrap();
    let props = registry
        .properties()
        .command(&hystrix::CommandKey::new("Mixed").unwrap());

    // The known counts.
    let known = [
        ("rollingCountSuccess", 3),
        ("rollingCountFailure", 2),
        ("rollingCountTimeout", 1),
        ("rollingCountShortCircuited", 2),
        ("rollingCountSemaphoreRejected", 2),
        ("rollingCountThreadPoolRejected", 0),
        ("rollingCountFallbackSuccess", 2),
        ("rollingCountFallbackMissing", 5),
        ("rollingCountExceptionsThrown", 5),
        ("requestCount", 8),
        ("errorCount", 5),
        ("errorPercentage", 62),
    ];
    for (key, value) in known {
        assert_eq!(msg[key], value, "{key}");
    }
    // Every counter equals the snapshot.
    let counters = [
        ("rollingCountBadRequests", EventType::BadRequest),
        ("rollingCountCollapsedRequests", EventType::Collapsed),
        ("rollingCountEmit", EventType::Emit),
        ("rollingCountExceptionsThrown", EventType::ExceptionThrown),
        ("rollingCountFailure", EventType::Failure),
        ("rollingCountFallbackEmit", EventType::FallbackEmit),
        ("rollingCountFallbackFailure", EventType::FallbackFailure),
        ("rollingCountFallbackMissing", EventType::FallbackMissing),
        (
            "rollingCountFallbackRejection",
            EventType::FallbackRejection,
        ),
        ("rollingCountFallbackSuccess", EventType::FallbackSuccess),
        (
            "rollingCountResponsesFromCache",
            EventType::ResponseFromCache,
        ),
        (
            "rollingCountSemaphoreRejected",
            EventType::SemaphoreRejected,
        ),
        ("rollingCountShortCircuited", EventType::ShortCircuited),
        ("rollingCountSuccess", EventType::Success),
        (
            "rollingCountThreadPoolRejected",
            EventType::ThreadPoolRejected,
        ),
        ("rollingCountTimeout", EventType::Timeout),
        ("rollingCountIgnored", EventType::Ignored),
        (
            "rollingCountWouldShortCircuit",
            EventType::WouldShortCircuit,
        ),
        ("rollingCountRetry", EventType::Retry),
        (
            "rollingCountRetryBudgetExhausted",
            EventType::RetryBudgetExhausted,
        ),
        ("rollingCountHedge", EventType::Hedge),
        ("rollingCountHedgeCancelled", EventType::HedgeCancelled),
        ("rollingCountLimitRejected", EventType::LimitRejected),
        ("rollingCountThrottled", EventType::Throttled),
        ("rollingCountSlowCall", EventType::SlowCall),
        ("rollingCountChaosInjected", EventType::ChaosInjected),
    ];
    for (key, event) in counters {
        assert_eq!(msg[key], metrics.rolling_count(event), "{key}");
    }
    let health = metrics.health_counts();
    assert_eq!(msg["requestCount"], health.total_requests);
    assert_eq!(msg["errorCount"], health.error_count);
    assert_eq!(msg["errorPercentage"], health.error_percentage);
    assert_eq!(msg["isCircuitBreakerOpen"], false);
    assert_eq!(msg["name"], "Mixed");
    assert_eq!(msg["group"], "Shop");
    assert_eq!(msg["threadPool"], "Shop");
    assert_eq!(msg["reportingHosts"], 1);
    assert_eq!(msg["propertyValue_executionIsolationStrategy"], "SEMAPHORE");
    assert_eq!(
        msg["currentConcurrentExecutionCount"],
        metrics.current_concurrent_execution_count()
    );
    assert_eq!(
        msg["rollingMaxConcurrentExecutionCount"],
        metrics.rolling_max_concurrent_execution_count()
    );
    // Latencies: 3 runs of 20 ms, 2 of 0 ms, and the timed-out run, which went on to 150 ms
    // on the caller's thread.
    let execution = metrics.execution_latency();
    assert_eq!(execution.p100, 150);
    assert_eq!(msg["latencyExecute_mean"], execution.mean);
    for (name, value) in execution.named() {
        assert_eq!(msg["latencyExecute"][name], value, "latencyExecute.{name}");
    }
    let total = metrics.total_latency();
    assert_eq!(msg["latencyTotal_mean"], total.mean);
    for (name, value) in total.named() {
        assert_eq!(msg["latencyTotal"][name], value, "latencyTotal.{name}");
    }
    // Properties, both timeout names, the runtime change of the semaphore.
    assert_eq!(
        msg["propertyValue_executionIsolationSemaphoreMaxConcurrentRequests"],
        0
    );
    assert_eq!(
        msg["propertyValue_executionIsolationThreadTimeoutInMilliseconds"],
        100
    );
    assert_eq!(msg["propertyValue_executionTimeoutInMilliseconds"], 100);
    assert_eq!(
        msg["propertyValue_circuitBreakerRequestVolumeThreshold"],
        props.circuit_breaker_request_volume_threshold
    );
    assert_eq!(
        msg["propertyValue_circuitBreakerSleepWindowInMilliseconds"],
        props.circuit_breaker_sleep_window_in_milliseconds
    );
    assert_eq!(
        msg["propertyValue_circuitBreakerErrorThresholdPercentage"],
        props.circuit_breaker_error_threshold_percentage
    );
    assert_eq!(
        msg["propertyValue_metricsRollingStatisticalWindowInMilliseconds"],
        10_000
    );
    assert_eq!(
        msg["propertyValue_executionIsolationThreadPoolKeyOverride"],
        Value::Null
    );
    assert_eq!(msg["propertyValue_circuitBreakerForceOpen"], false);
}

#[test]
fn retries_and_budget_refusals_are_extension_counters() {
    let test = TestRegistry::new();
    common::drive_retried(&test);
    let registry = test.registry();
    let json = stream::command_json(registry, "Retried").unwrap();
    let msg = parse(&json);
    let expected: Vec<&str> = COMMAND_KEYS.iter().map(|(k, _)| *k).collect();
    assert_eq!(keys(&msg), expected);
    // Each attempt is a request: 1 success and 4 failed attempts; 2 retries granted, 2 refused
    // by the budget; the two executions the budget stopped went to their fallback.
    for (key, value) in [
        ("rollingCountRetry", 2),
        ("rollingCountRetryBudgetExhausted", 2),
        ("rollingCountSuccess", 1),
        ("rollingCountFailure", 4),
        ("rollingCountFallbackSuccess", 2),
        ("rollingCountExceptionsThrown", 0),
        ("requestCount", 5),
        ("errorCount", 4),
        ("errorPercentage", 80),
    ] {
        assert_eq!(msg[key], value, "{key}");
    }
    let metrics = registry.command_metrics("Retried").unwrap();
    assert_eq!(
        msg["rollingCountRetry"],
        metrics.rolling_count(EventType::Retry)
    );
    assert_eq!(
        msg["rollingCountRetryBudgetExhausted"],
        metrics.rolling_count(EventType::RetryBudgetExhausted)
    );
    // The wire form: right after rollingCountWouldShortCircuit, then the hedge counters (no
    // hedging here) and the limit's refusals (no adaptive limit) before
    // currentConcurrentExecutionCount.
    assert!(
        json.contains(
            r#""rollingCountWouldShortCircuit":0,"rollingCountRetry":2,"rollingCountRetryBudgetExhausted":2,"rollingCountHedge":0,"rollingCountHedgeCancelled":0,"rollingCountLimitRejected":0,"rollingCountThrottled":0,"rollingCountSlowCall":0,"rollingCountChaosInjected":0,"currentConcurrentExecutionCount":"#
        ),
        "{json}"
    );
    // The rolling window forgets them.
    test.advance(Duration::from_millis(10_000));
    let later = parse(&stream::command_json(registry, "Retried").unwrap());
    assert_eq!(later["rollingCountRetry"], 0);
    assert_eq!(later["rollingCountRetryBudgetExhausted"], 0);
}

#[test]
fn limit_rejections_and_the_adaptive_limit_are_extension_fields() {
    let test = TestRegistry::new();
    let cmd = common::drive_limited(&test);
    let registry = test.registry();
    let adaptive_keys = [
        "adaptiveLimit",
        "adaptiveLimitInFlight",
        "adaptiveLimitQueued",
    ];
    let mut expected: Vec<&str> = COMMAND_KEYS.iter().map(|(k, _)| *k).collect();
    expected.extend(adaptive_keys);
    let msg = parse(&stream::command_json(registry, "Limited").unwrap());
    assert_eq!(keys(&msg), expected);
    // 3 refused by the limit, each answered by the fallback; not requests, not errors.
    for (key, value) in [
        ("rollingCountLimitRejected", 3),
        ("rollingCountFallbackSuccess", 3),
        ("rollingCountSuccess", 2),
        ("rollingCountSemaphoreRejected", 0),
        ("requestCount", 2),
        ("errorCount", 0),
        ("adaptiveLimit", 4),
        ("adaptiveLimitInFlight", 0),
        ("adaptiveLimitQueued", 0),
    ] {
        assert_eq!(msg[key], value, "{key}");
    }
    assert_eq!(
        msg["rollingCountLimitRejected"],
        registry
            .command_metrics("Limited")
            .unwrap()
            .rolling_count(EventType::LimitRejected)
    );
    for key in adaptive_keys {
        assert!(is_int(&msg[key]), "{key}");
    }

    // Two in flight of the limit of 4: the wire form, the refusals after the hedge counters,
    // the three gauges last.
    let held: Vec<_> = (0..2).map(|_| common::held(&test, &cmd, 50)).collect();
    let json = stream::command_json(registry, "Limited").unwrap();
    assert!(
        json.contains(
            r#""rollingCountHedge":0,"rollingCountHedgeCancelled":0,"rollingCountLimitRejected":3,"rollingCountThrottled":0,"rollingCountSlowCall":0,"rollingCountChaosInjected":0,"currentConcurrentExecutionCount":2,"#
        ),
        "{json}"
    );
    assert!(
        json.ends_with(
            r#""circuitBreakerStatus":"CLOSED","adaptiveLimit":4,"adaptiveLimitInFlight":2,"adaptiveLimitQueued":0}"#
        ),
        "{json}"
    );
    // Full, and one waiting for a place (a wait of up to 1 s allowed from now on).
    let more = common::fill_with_one_waiting(&test, &cmd);
    let msg = parse(&stream::command_json(registry, "Limited").unwrap());
    assert_eq!(
        [
            &msg["adaptiveLimit"],
            &msg["adaptiveLimitInFlight"],
            &msg["adaptiveLimitQueued"]
        ],
        [4, 4, 1]
    );
    drop(more);
    drop(held);
    let msg = parse(&stream::command_json(registry, "Limited").unwrap());
    assert_eq!(msg["adaptiveLimitInFlight"], 0);
    assert_eq!(msg["adaptiveLimitQueued"], 0);

    // Turned off: the three keys are gone (not null).
    common::set_limited(&test, "enabled", false);
    let msg = parse(&stream::command_json(registry, "Limited").unwrap());
    let expected: Vec<&str> = COMMAND_KEYS.iter().map(|(k, _)| *k).collect();
    assert_eq!(keys(&msg), expected);
    assert_eq!(msg["rollingCountLimitRejected"], 3);
}

#[test]
fn throttled_attempts_and_the_throttle_probability_are_extension_fields() {
    let test = TestRegistry::new();
    let registry = test.registry();
    let successes = common::drive_throttled(&test);
    test.advance(Duration::from_millis(1_000));
    let json = stream::command_json(registry, "Throttled").unwrap();
    let msg = parse(&json);
    let mut expected: Vec<&str> = COMMAND_KEYS.iter().map(|(k, _)| *k).collect();
    expected.push("throttleProbability");
    assert_eq!(keys(&msg), expected);
    assert_eq!(msg["rollingCountThrottled"], 1);
    // The throttled one is a request, not an accept.
    let (requests, accepts) = (6.0 + f64::from(successes), 1.0 + f64::from(successes));
    assert_eq!(
        msg["throttleProbability"],
        (requests - accepts) / (requests + 1.0)
    );
    assert!(
        json.contains(r#""rollingCountLimitRejected":0,"rollingCountThrottled":1,"#),
        "{json}"
    );
    // Turned off: the key is gone (not null).
    registry
        .properties()
        .set(
            "hystrix.command.Throttled.execution.throttle.enabled",
            false,
        )
        .unwrap();
    let msg = parse(&stream::command_json(registry, "Throttled").unwrap());
    assert!(msg.get("throttleProbability").is_none());
    assert_eq!(msg["rollingCountThrottled"], 1);
}

/// The slow-call keys, in order, that a command with slow calls on ends with.
const SLOW_CALL_KEYS: [&str; 4] = [
    "slowCallCount",
    "slowCallPercentage",
    "propertyValue_circuitBreakerSlowCallDurationThresholdInMilliseconds",
    "propertyValue_circuitBreakerSlowCallRateThresholdPercentage",
];

#[test]
fn slow_calls_and_the_slow_call_health_are_extension_fields() {
    let test = TestRegistry::new();
    let registry = test.registry();
    common::drive_slow(&test, "Slow", &[]);
    let json = stream::command_json(registry, "Slow").unwrap();
    let msg = parse(&json);
    let mut expected: Vec<&str> = COMMAND_KEYS.iter().map(|(k, _)| *k).collect();
    expected.extend(SLOW_CALL_KEYS);
    assert_eq!(keys(&msg), expected);
    for key in SLOW_CALL_KEYS {
        assert!(is_int(&msg[key]), "{key}");
    }
    // 4 requests, 1 an error, 2 slow (one of them the error): 25 % and 50 %.
    for (key, value) in [
        ("rollingCountSlowCall", 2),
        ("rollingCountSuccess", 3),
        ("rollingCountFailure", 1),
        ("rollingCountFallbackSuccess", 1),
        ("requestCount", 4),
        ("errorCount", 1),
        ("errorPercentage", 25),
        ("slowCallCount", 2),
        ("slowCallPercentage", 50),
    ] {
        assert_eq!(msg[key], value, "{key}");
    }
    let health = registry.command_metrics("Slow").unwrap().health_counts();
    assert_eq!(health, hystrix::HealthCounts::with_slow_calls(4, 1, 2));
    // The wire form: the counter after the throttled one, the slow-call health and its two
    // properties last.
    assert!(
        json.contains(r#""rollingCountThrottled":0,"rollingCountSlowCall":2,"rollingCountChaosInjected":0,"currentConcurrentExecutionCount":0,"#),
        "{json}"
    );
    assert!(
        json.ends_with(
            r#""circuitBreakerStatus":"CLOSED","slowCallCount":2,"slowCallPercentage":50,"propertyValue_circuitBreakerSlowCallDurationThresholdInMilliseconds":100,"propertyValue_circuitBreakerSlowCallRateThresholdPercentage":50}"#
        ),
        "{json}"
    );
    // The properties are read live.
    registry
        .properties()
        .set(
            "hystrix.command.Slow.circuitBreaker.slowCall.rateThresholdPercentage",
            80,
        )
        .unwrap();
    let msg = parse(&stream::command_json(registry, "Slow").unwrap());
    assert_eq!(
        msg["propertyValue_circuitBreakerSlowCallRateThresholdPercentage"],
        80
    );
    // Turned off: the four keys are gone (not null), the counter stays.
    registry
        .properties()
        .set(
            "hystrix.command.Slow.circuitBreaker.slowCall.durationThresholdInMilliseconds",
            0,
        )
        .unwrap();
    let msg = parse(&stream::command_json(registry, "Slow").unwrap());
    let expected: Vec<&str> = COMMAND_KEYS.iter().map(|(k, _)| *k).collect();
    assert_eq!(keys(&msg), expected);
    assert_eq!(msg["rollingCountSlowCall"], 2);
}

/// The chaos keys, in order, that a command whose chaos is on ends with.
const CHAOS_KEYS: [&str; 5] = [
    "propertyValue_chaosEnabled",
    "propertyValue_chaosFaultRatePercentage",
    "propertyValue_chaosLatencyRatePercentage",
    "propertyValue_chaosLatencyInMilliseconds",
    "propertyValue_chaosHangRatePercentage",
];

#[test]
fn chaos_injections_and_the_chaos_properties_are_extension_fields() {
    let test = TestRegistry::new();
    let registry = test.registry();
    common::drive_chaos(&test, "Chaotic");
    let json = stream::command_json(registry, "Chaotic").unwrap();
    let msg = parse(&json);
    let mut expected: Vec<&str> = COMMAND_KEYS.iter().map(|(k, _)| *k).collect();
    expected.extend(CHAOS_KEYS);
    assert_eq!(keys(&msg), expected);
    // 2 injected faults (failures answered by the fallback) and 3 successes: 40 % errors.
    for (key, value) in [
        ("rollingCountChaosInjected", 2),
        ("rollingCountFailure", 2),
        ("rollingCountFallbackSuccess", 2),
        ("rollingCountSuccess", 3),
        ("requestCount", 5),
        ("errorCount", 2),
        ("errorPercentage", 40),
    ] {
        assert_eq!(msg[key], value, "{key}");
    }
    assert_eq!(
        registry
            .command_metrics("Chaotic")
            .unwrap()
            .rolling_count(EventType::ChaosInjected),
        2
    );
    // The wire form: the counter after the slow-call one; the chaos properties last, the
    // rates as JSON numbers, the delay an integer.
    assert!(
        json.contains(r#""rollingCountSlowCall":0,"rollingCountChaosInjected":2,"currentConcurrentExecutionCount":0,"#),
        "{json}"
    );
    assert!(
        json.ends_with(
            r#""circuitBreakerStatus":"CLOSED","propertyValue_chaosEnabled":true,"propertyValue_chaosFaultRatePercentage":10.0,"propertyValue_chaosLatencyRatePercentage":20.0,"propertyValue_chaosLatencyInMilliseconds":100,"propertyValue_chaosHangRatePercentage":5.0}"#
        ),
        "{json}"
    );
    // The properties are read live; fractions stay fractions.
    common::set_chaos(&test, "Chaotic", "chaos.fault.ratePercentage", 0.5);
    let msg = parse(&stream::command_json(registry, "Chaotic").unwrap());
    assert_eq!(msg["propertyValue_chaosFaultRatePercentage"], 0.5);
    // Turned off: the five keys are gone (not null), the counter stays.
    common::set_chaos(&test, "Chaotic", "chaos.enabled", false);
    let msg = parse(&stream::command_json(registry, "Chaotic").unwrap());
    let expected: Vec<&str> = COMMAND_KEYS.iter().map(|(k, _)| *k).collect();
    assert_eq!(keys(&msg), expected);
    assert_eq!(msg["rollingCountChaosInjected"], 2);
    // A command that never had chaos on has none of them either (and counts 0 injections).
    common::drive_mixed(&test);
    let msg = parse(&stream::command_json(registry, "Mixed").unwrap());
    assert!(CHAOS_KEYS.iter().all(|key| msg.get(*key).is_none()));
    assert_eq!(msg["rollingCountChaosInjected"], 0);
}

#[test]
fn a_breaker_window_other_than_time_is_a_property_field() {
    let test = TestRegistry::new();
    let registry = test.registry();
    for (key, window) in [("Counted", "COUNT"), ("Consecutive", "CONSECUTIVE")] {
        common::drive_slow(&test, key, &[("circuitBreaker.window.type", window.into())]);
        let json = stream::command_json(registry, key).unwrap();
        let msg = parse(&json);
        let mut expected: Vec<&str> = COMMAND_KEYS.iter().map(|(k, _)| *k).collect();
        expected.extend(SLOW_CALL_KEYS);
        expected.push("propertyValue_circuitBreakerWindowType");
        assert_eq!(keys(&msg), expected, "{key}");
        assert!(
            json.ends_with(&format!(
                r#""propertyValue_circuitBreakerSlowCallRateThresholdPercentage":50,"propertyValue_circuitBreakerWindowType":"{window}"}}"#
            )),
            "{json}"
        );
        // The health fields stay the rolling health window's.
        assert_eq!(
            [
                &msg["requestCount"],
                &msg["slowCallCount"],
                &msg["rollingCountSlowCall"]
            ],
            [4, 2, 2],
            "{key}"
        );
    }
    // TIME, the default, has no field (the Mixed command's keys are Hystrix's and ours).
    common::drive_slow(
        &test,
        "Timed",
        &[("circuitBreaker.window.type", "TIME".into())],
    );
    let msg = parse(&stream::command_json(registry, "Timed").unwrap());
    assert!(msg.get("propertyValue_circuitBreakerWindowType").is_none());
}

#[test]
fn a_forced_open_circuit_reads_open() {
    let test = TestRegistry::new();
    common::drive_mixed(&test);
    test.force_open("Mixed").unwrap();
    let msg = parse(&stream::command_json(test.registry(), "Mixed").unwrap());
    assert_eq!(msg["isCircuitBreakerOpen"], true);
    assert_eq!(msg["propertyValue_circuitBreakerForceOpen"], true);
}

#[test]
fn thread_pool_message_has_hystrix_keys_and_the_snapshot_values() {
    let test = TestRegistry::new();
    common::drive_pooled(&test);
    test.advance(Duration::from_millis(10_000));
    let registry = test.registry();
    let msg = parse(&stream::thread_pool_json(registry, "ShopPool").unwrap());
    assert_eq!(keys(&msg), THREAD_POOL_KEYS);
    assert!(msg.iter().all(|(k, v)| {
        if matches!(k.as_str(), "type" | "name") {
            v.is_string()
        } else {
            is_int(v)
        }
    }));
    let pool = registry.thread_pool_metrics("ShopPool").unwrap();
    assert_eq!(msg["type"], "HystrixThreadPool");
    assert_eq!(msg["name"], "ShopPool");
    assert_eq!(msg["currentCompletedTaskCount"], 2);
    assert_eq!(msg["rollingCountThreadsExecuted"], 2);
    assert_eq!(msg["currentActiveCount"], pool.current_active_count);
    assert_eq!(msg["currentCorePoolSize"], pool.current_core_pool_size);
    assert_eq!(
        msg["currentMaximumPoolSize"],
        pool.current_maximum_pool_size
    );
    assert_eq!(msg["currentPoolSize"], pool.current_pool_size);
    assert_eq!(
        msg["currentLargestPoolSize"],
        pool.current_largest_pool_size
    );
    assert_eq!(msg["currentQueueSize"], pool.current_queue_size);
    assert_eq!(msg["currentTaskCount"], pool.current_task_count);
    assert_eq!(
        msg["rollingMaxActiveThreads"],
        pool.rolling_max_active_threads
    );
    assert_eq!(msg["rollingCountCommandRejections"], 0);
    assert_eq!(msg["propertyValue_queueSizeRejectionThreshold"], 5);
    assert_eq!(
        msg["propertyValue_metricsRollingStatisticalWindowInMilliseconds"],
        10_000
    );
    assert_eq!(msg["reportingHosts"], 1);
    // The pooled command reports THREAD and its pool.
    let cmd = parse(&stream::command_json(registry, "Pooled").unwrap());
    assert_eq!(cmd["propertyValue_executionIsolationStrategy"], "THREAD");
    assert_eq!(cmd["threadPool"], "ShopPool");
}

#[tokio::test]
async fn collapser_message_has_hystrix_keys_and_the_snapshot_values() {
    let test = TestRegistry::new();
    let rating = common::ratings_collapser(&test, CollapserScope::Global);
    let first = rating.queue(1);
    let second = rating.queue(2);
    let third = rating.queue(3);
    test.clock().advance_ms(10);
    let answers = common::within(async { (first.await, second.await, third.await) }).await;
    assert_eq!(*answers.2.unwrap(), 30);
    // Both windows' buckets complete, still inside the 10 s rolling window.
    test.advance(Duration::from_millis(10_000));
    let registry = test.registry();
    let msg = parse(&stream::collapser_json(registry, "GetRating").unwrap());
    assert_eq!(keys(&msg), COLLAPSER_KEYS);
    let metrics = registry.collapser_metrics("GetRating").unwrap();
    assert_eq!(msg["type"], "HystrixCollapser");
    assert_eq!(msg["rollingCountBatches"], 1);
    assert_eq!(msg["rollingCountRequestsBatched"], 3);
    assert_eq!(
        msg["rollingCountBatches"],
        metrics.rolling_count(CollapserEvent::BatchExecuted)
    );
    assert_eq!(msg["rollingCountResponsesFromCache"], 0);
    assert_percentiles(&msg["batchSize"], &PERCENTILE_KEYS[1..]);
    assert_eq!(msg["batchSize_mean"], metrics.batch_size().mean);
    assert_eq!(msg["batchSize"]["100"], metrics.batch_size().p100);
    assert_eq!(msg["propertyValue_requestCacheEnabled"], true);
    assert_eq!(msg["propertyValue_maxRequestsInBatch"], 2_147_483_647);
    assert_eq!(msg["propertyValue_timerDelayInMilliseconds"], 10);
    assert_eq!(msg["reportingHosts"], 1);

    // A tick: commands first (sorted), then pools, then collapsers.
    let tick = stream::sample(registry);
    let types: Vec<String> = tick
        .iter()
        .map(|m| parse(m)["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(types, ["HystrixCommand", "HystrixCollapser"]);
}

#[test]
fn executions_by_priority_class_are_extension_fields_while_a_reserve_is_set() {
    let test = TestRegistry::new();
    let cmd = common::ranked_command(&test);
    let registry = test.registry();
    let held = common::hold_ranked(&test, &cmd);
    let json = stream::command_json(registry, "Ranked").unwrap();
    assert!(
        json.ends_with(
            r#""circuitBreakerStatus":"CLOSED","priorityCriticalInFlight":1,"priorityNormalInFlight":2,"prioritySheddableInFlight":0,"priorityCriticalRefused":0,"priorityNormalRefused":1,"prioritySheddableRefused":1,"priorityCriticalReserved":2,"priorityNormalReserved":0}"#
        ),
        "{json}"
    );
    drop(held);
    // No reserve: the keys are gone (not null).
    registry
        .properties()
        .set(
            "hystrix.command.Ranked.execution.isolation.priority.critical.reservedPercentage",
            "0",
        )
        .unwrap();
    let msg = parse(&stream::command_json(registry, "Ranked").unwrap());
    let expected: Vec<&str> = COMMAND_KEYS.iter().map(|(k, _)| *k).collect();
    assert_eq!(keys(&msg), expected);
}
