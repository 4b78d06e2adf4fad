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
