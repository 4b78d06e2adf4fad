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
    let facade = MetricsFacade::new();
    let clock = ManualClock::new();
    let registry = Registry::builder()
        .clock(clock.clone())
        .event_notifier(facade)
        .build();
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
    let get = |event: &str| {
        seen.get(&format!(
            "{EVENTS_TOTAL}{{command=Retried,group=Test,event={event}}}"
        ))
        .cloned()
        .unwrap_or_default()
    };
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
