//! The `metrics` facade (feature `metrics`): every event counted by command and event, the
//! execution latency of runs that started, and breaker transitions, with exact values.
#![cfg(feature = "metrics")]
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use common::{DependencyError, builder};
use hystrix::Registry;
use hystrix::clock::ManualClock;
use hystrix::metrics::facade::{
    BREAKER_TRANSITIONS_TOTAL, EVENTS_TOTAL, LATENCY_EXECUTE_SECONDS, MetricsFacade,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// `name{label=value,...}` → value, from the recorder's snapshot.
fn snapshot(recorder: &DebuggingRecorder) -> BTreeMap<String, String> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels: Vec<String> = key
                .labels()
                .map(|label| format!("{}={}", label.key(), label.value()))
                .collect();
            let value = match value {
                DebugValue::Counter(n) => n.to_string(),
                DebugValue::Gauge(v) => v.to_string(),
                DebugValue::Histogram(values) => format!(
                    "{:?}",
                    values.iter().map(|v| v.into_inner()).collect::<Vec<_>>()
                ),
            };
            (format!("{}{{{}}}", key.name(), labels.join(",")), value)
        })
        .collect()
}

/// A registry on a manual clock whose event notifier is a new facade.
fn notified_registry() -> (ManualClock, Registry) {
    let clock = ManualClock::new();
    let registry = Registry::builder()
        .clock(clock.clone())
        .event_notifier(MetricsFacade::new())
        .build();
    (clock, registry)
}

/// `command`'s `hystrix_command_events_total` of `event` (group "Test") in `seen`, empty when
/// absent.
fn event_count(seen: &BTreeMap<String, String>, command: &str, event: &str) -> String {
    seen.get(&format!(
        "{EVENTS_TOTAL}{{command={command},group=Test,event={event}}}"
    ))
    .cloned()
    .unwrap_or_default()
}

#[test]
fn events_latencies_and_transitions_reach_the_recorder() {
    let recorder = DebuggingRecorder::new();
    let facade = MetricsFacade::new();
    let clock = ManualClock::new();
    let registry = Registry::builder()
        .clock(clock.clone())
        .event_notifier(facade.clone())
        .circuit_breaker_listener(facade)
        .build();
    let cmd = builder("GetUser").build_in(&registry).unwrap();
    metrics::with_local_recorder(&recorder, || {
        let slow = clock.clone();
        cmd.run(move || {
            slow.advance_ms(250);
            Ok::<u32, DependencyError>(1)
        })
        .execute()
        .unwrap();
        cmd.run(|| Err::<u32, _>(DependencyError("down")))
            .fallback(|_| Ok::<u32, DependencyError>(0))
            .execute()
            .unwrap();
        cmd.circuit_breaker().force_open();
        cmd.run(|| Ok::<u32, DependencyError>(1))
            .execute()
            .unwrap_err();
        cmd.circuit_breaker().reset();
    });
    let seen = snapshot(&recorder);
    let get = |name: &str| seen.get(name).cloned().unwrap_or_default();
    assert_eq!(
        get(&format!(
            "{EVENTS_TOTAL}{{command=GetUser,group=Test,event=success}}"
        )),
        "1"
    );
    assert_eq!(
        get(&format!(
            "{EVENTS_TOTAL}{{command=GetUser,group=Test,event=failure}}"
        )),
        "1"
    );
    assert_eq!(
        get(&format!(
            "{EVENTS_TOTAL}{{command=GetUser,group=Test,event=fallback_success}}"
        )),
        "1"
    );
    assert_eq!(
        get(&format!(
            "{EVENTS_TOTAL}{{command=GetUser,group=Test,event=short_circuited}}"
        )),
        "1"
    );
    assert_eq!(
        get(&format!(
            "{EVENTS_TOTAL}{{command=GetUser,group=Test,event=fallback_missing}}"
        )),
        "1"
    );
    // The short-circuit without fallback threw: EXCEPTION_THROWN, as the registry counts it.
    assert_eq!(
        get(&format!(
            "{EVENTS_TOTAL}{{command=GetUser,group=Test,event=exception_thrown}}"
        )),
        "1"
    );
    assert_eq!(
        cmd.metrics()
            .cumulative_count(hystrix::EventType::ExceptionThrown),
        1
    );
    // Runs that started: 250 ms and 0 ms; the short-circuit has no execution latency.
    assert_eq!(
        get(&format!(
            "{LATENCY_EXECUTE_SECONDS}{{command=GetUser,group=Test}}"
        )),
        "[0.25, 0.0]"
    );
    assert_eq!(
        get(&format!(
            "{BREAKER_TRANSITIONS_TOTAL}{{command=GetUser,group=Test,from=closed,to=open}}"
        )),
        "1"
    );
    assert_eq!(
        get(&format!(
            "{BREAKER_TRANSITIONS_TOTAL}{{command=GetUser,group=Test,from=open,to=closed}}"
        )),
        "1"
    );
}

#[test]
fn a_facade_that_only_listens_to_breakers_labels_the_group() {
    let recorder = DebuggingRecorder::new();
    let registry = Registry::builder()
        .clock(ManualClock::new())
        .circuit_breaker_listener(MetricsFacade::new())
        .build();
    let cmd = builder("Listened").build_in(&registry).unwrap();
    metrics::with_local_recorder(&recorder, || cmd.circuit_breaker().force_open());
    let seen = snapshot(&recorder);
    assert_eq!(
        seen.get(&format!(
            "{BREAKER_TRANSITIONS_TOTAL}{{command=Listened,group=Test,from=closed,to=open}}"
        ))
        .map(String::as_str),
        Some("1"),
        "{seen:?}"
    );
}

#[test]
fn retries_and_budget_refusals_are_counted_per_event() {
    let recorder = DebuggingRecorder::new();
    let (_, registry) = notified_registry();
    // Three attempts, no backoff delay, a budget of exactly 3 retries (1 per second of a 3 s
    // window, no share of requests).
    let cmd = builder("Retried")
        .property("retry.maxAttempts", 3)
        .property("retry.backoff.initialInMilliseconds", 0)
        .property("retry.budget.percent", 0)
        .property("retry.budget.minPerSecond", 1)
        .property("retry.budget.windowInMilliseconds", 3_000)
        .build_in(&registry)
        .unwrap();
    // Each execution answers from its script, one entry per attempt (true: Ok).
    let scripted = |script: &'static [bool]| {
        let mut attempt = 0;
        move || {
            let ok = script.get(attempt).copied().unwrap_or(false);
            attempt += 1;
            move || {
                if ok {
                    Ok::<u32, DependencyError>(1)
                } else {
                    Err(DependencyError("down"))
                }
            }
        }
    };
    metrics::with_local_recorder(&recorder, || {
        // FAILUREx2, SUCCESS, RETRYx2: two retries granted.
        assert_eq!(
            cmd.run_retryable(scripted(&[false, false, true]))
                .execute()
                .unwrap(),
            1
        );
        // The third retry is granted, the fourth refused.
        for _ in 0..2 {
            let value = cmd
                .run_retryable(scripted(&[false, false, false]))
                .fallback(|_| Ok::<u32, DependencyError>(0))
                .execute()
                .unwrap();
            assert_eq!(value, 0);
        }
    });
    let seen = snapshot(&recorder);
    let get = |event: &str| event_count(&seen, "Retried", event);
    for (event, expected) in [
        ("retry", "3"),
        ("retry_budget_exhausted", "2"),
        ("success", "1"),
        ("failure", "5"),
        ("fallback_success", "2"),
        // No hedging here: the series exist, at 0.
        ("hedge", "0"),
        ("hedge_cancelled", "0"),
    ] {
        assert_eq!(get(event), expected, "{event}: {seen:?}");
    }
    // The same counts as the registry's.
    let metrics = cmd.metrics();
    assert_eq!(metrics.cumulative_count(hystrix::EventType::Retry), 3);
    assert_eq!(
        metrics.cumulative_count(hystrix::EventType::RetryBudgetExhausted),
        2
    );
    // One latency sample per execution, not per attempt.
    assert_eq!(
        seen.get(&format!(
            "{LATENCY_EXECUTE_SECONDS}{{command=Retried,group=Test}}"
        ))
        .map(String::as_str),
        Some("[0.0, 0.0, 0.0]")
    );
}

#[test]
fn limit_rejections_are_counted_per_event_without_a_latency_sample() {
    let recorder = DebuggingRecorder::new();
    let (clock, registry) = notified_registry();
    // An adaptive AIMD limit of 1 (the cap of 100 far above it).
    let cmd = builder("Limited")
        .semaphore_max_concurrent_requests(100)
        .property("execution.isolation.adaptive.enabled", true)
        .property("execution.isolation.adaptive.algorithm", "AIMD")
        .property("execution.isolation.adaptive.initialLimit", 1)
        .build_in(&registry)
        .unwrap();
    let sleeping = |ms: u64| {
        let clock = std::sync::Arc::clone(registry.clock());
        cmd.run_async(async move {
            hystrix::clock::sleep(&clock, std::time::Duration::from_millis(ms)).await;
            Ok::<u32, DependencyError>(1)
        })
        .fallback(|_| Ok::<u32, DependencyError>(0))
        .execute_async_outcome()
    };
    metrics::with_local_recorder(&recorder, || {
        // One in flight (12 ms); two more refused by the limit, answered by the fallback.
        let mut first = Box::pin(sleeping(12));
        assert!(common::poll_once(first.as_mut()).is_pending());
        for _ in 0..2 {
            let refused = futures::executor::block_on(sleeping(12));
            assert_eq!(
                refused.execution_result().execution_events().to_string(),
                "FALLBACK_SUCCESS, LIMIT_REJECTED"
            );
        }
        clock.advance_ms(12);
        assert!(common::poll_once(first.as_mut()).is_ready());
    });
    let seen = snapshot(&recorder);
    let get = |event: &str| event_count(&seen, "Limited", event);
    for (event, expected) in [
        ("limit_rejected", "2"),
        ("fallback_success", "2"),
        ("success", "1"),
        ("semaphore_rejected", "0"),
    ] {
        assert_eq!(get(event), expected, "{event}: {seen:?}");
    }
    assert_eq!(
        cmd.metrics()
            .cumulative_count(hystrix::EventType::LimitRejected),
        2
    );
    // One latency sample: the run that started; the refused executions ran no user code.
    assert_eq!(
        seen.get(&format!(
            "{LATENCY_EXECUTE_SECONDS}{{command=Limited,group=Test}}"
        ))
        .map(String::as_str),
        Some("[0.012]")
    );
}

#[test]
fn slow_calls_are_counted_beside_their_outcome() {
    let recorder = DebuggingRecorder::new();
    let (clock, registry) = notified_registry();
    let cmd = builder("Slow")
        .property(
            "circuitBreaker.slowCall.durationThresholdInMilliseconds",
            100,
        )
        .build_in(&registry)
        .unwrap();
    let run = |ms: u64, ok: bool| {
        let clock = clock.clone();
        move || {
            clock.advance_ms(ms);
            if ok {
                Ok::<u32, DependencyError>(1)
            } else {
                Err(DependencyError("down"))
            }
        }
    };
    metrics::with_local_recorder(&recorder, || {
        cmd.run(run(150, true)).execute().unwrap();
        cmd.run(run(100, true)).execute().unwrap();
        cmd.run(run(101, false)).execute().unwrap_err();
    });
    let seen = snapshot(&recorder);
    for (event, expected) in [("slow_call", "2"), ("success", "2"), ("failure", "1")] {
        assert_eq!(
            event_count(&seen, "Slow", event),
            expected,
            "{event}: {seen:?}"
        );
    }
}

#[test]
fn never_counted_events_have_no_series_and_every_metric_has_help() {
    let recorder = DebuggingRecorder::new();
    let (_clock, registry) = notified_registry();
    let cmd = builder("Plain").build_in(&registry).unwrap();
    metrics::with_local_recorder(&recorder, || {
        cmd.run(|| Ok::<u32, DependencyError>(1)).execute().unwrap();
    });
    let seen = snapshot(&recorder);
    assert_eq!(event_count(&seen, "Plain", "success"), "1");
    assert_eq!(event_count(&seen, "Plain", "failure"), "0");
    // As /metrics: FALLBACK_DISABLED and COMMAND_MAX_ACTIVE are never counted, so no series.
    for never in ["fallback_disabled", "command_max_active"] {
        assert_eq!(event_count(&seen, "Plain", never), "", "{never}");
    }
    // Descriptions (Prometheus's # HELP) for each metric, the latency in seconds.
    let described: BTreeMap<String, (Option<metrics::Unit>, String)> = recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, unit, help, _)| {
            help.map(|help| (key.key().name().to_owned(), (unit, help.to_string())))
        })
        .collect();
    assert!(
        described[EVENTS_TOTAL]
            .1
            .starts_with("Command execution events")
    );
    assert_eq!(
        described[LATENCY_EXECUTE_SECONDS].0,
        Some(metrics::Unit::Seconds)
    );
}
