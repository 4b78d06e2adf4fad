//! /metrics: the Prometheus text parses (a small line parser here) and its numbers equal the
//! registry's snapshots.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashMap};

use hystrix::EventType;
use hystrix::testing::TestRegistry;
use hystrix_dashboard::Dashboard;

type Labels = BTreeMap<String, String>;

#[derive(Debug, Default)]
struct Exposition {
    types: HashMap<String, String>,
    helps: HashMap<String, String>,
    samples: Vec<(String, Labels, f64)>,
}

impl Exposition {
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let want: Labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let found: Vec<_> = self
            .samples
            .iter()
            .filter(|(n, l, _)| n == name && *l == want)
            .collect();
        assert_eq!(found.len(), 1, "{name} {want:?}: {found:?}");
        found[0].2
    }

    /// `command`'s `hystrix_command_events_total` of each event in `expected` (by snake_case
    /// name) is its value.
    fn assert_events(&self, command: [(&str, &str); 2], expected: &[(&str, f64)]) {
        for &(event, value) in expected {
            let labels = [command[0], command[1], ("event", event)];
            assert_eq!(
                self.value("hystrix_command_events_total", &labels),
                value,
                "{event}"
            );
        }
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses the text format 0.0.4: `# HELP`, `# TYPE`, and `name{label="value",...} number`
/// with `\\`, `\"` and `\n` escapes in label values.
fn parse(text: &str) -> Exposition {
    let mut out = Exposition::default();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap();
            assert!(out.helps.insert(name.into(), help.into()).is_none());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(["counter", "gauge", "summary", "histogram", "untyped"].contains(&kind));
            assert!(out.helps.contains_key(name), "HELP before TYPE for {name}");
            assert!(out.types.insert(name.into(), kind.into()).is_none());
            continue;
        }
        assert!(!line.starts_with('#'), "{line}");
        let name_end = line.find(['{', ' ']).unwrap();
        let name = &line[..name_end];
        assert!(valid_name(name), "{name}");
        let mut labels = Labels::new();
        let mut rest = &line[name_end..];
        if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.char_indices().peekable();
            let end;
            loop {
                let (start, c) = chars.next().unwrap();
                if c == '}' {
                    end = Some(start);
                    break;
                }
                let eq = body[start..].find('=').unwrap() + start;
                let label = &body[start..eq];
                assert!(valid_name(label), "{label}");
                while chars.peek().unwrap().0 <= eq {
                    chars.next();
                }
                assert_eq!(chars.next().unwrap().1, '"');
                let mut value = String::new();
                loop {
                    match chars.next().unwrap().1 {
                        '\\' => match chars.next().unwrap().1 {
                            'n' => value.push('\n'),
                            c @ ('\\' | '"') => value.push(c),
                            c => panic!("bad escape \\{c}"),
                        },
                        '"' => break,
                        c => value.push(c),
                    }
                }
                labels.insert(label.to_owned(), value);
                if chars.peek().unwrap().1 == ',' {
                    chars.next();
                }
                if let Some(&(i, '}')) = chars.peek() {
                    end = Some(i);
                    break;
                }
            }
            rest = &body[end.unwrap() + 1..];
        }
        let value: f64 = rest.trim().parse().unwrap();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .filter(|base| out.types.get(*base).is_some_and(|t| t == "histogram"))
            .unwrap_or(name);
        assert!(!value.is_nan(), "{line}: no NaN series");
        assert!(out.types.contains_key(family), "no TYPE for {name}");
        out.samples.push((name.to_owned(), labels, value));
    }
    out
}

#[test]
fn metrics_parse_and_equal_the_snapshot() {
    let test = TestRegistry::new();
    common::drive_mixed(&test);
    common::drive_pooled(&test);
    let dashboard = Dashboard::builder(test.registry().clone()).build();
    let text = dashboard.render_metrics();
    let metrics = parse(&text);
    let snapshot = test.registry().command_metrics("Mixed").unwrap();
    let mixed = [("command", "Mixed"), ("group", "Shop")];

    assert_eq!(metrics.types["hystrix_command_events_total"], "counter");
    metrics.assert_events(
        mixed,
        &[
            ("success", 3.0),
            ("failure", 2.0),
            ("timeout", 1.0),
            ("short_circuited", 2.0),
            ("semaphore_rejected", 2.0),
            ("fallback_success", 2.0),
            ("fallback_missing", 5.0),
            ("exception_thrown", 5.0),
            ("bad_request", 0.0),
            ("ignored", 0.0),
            ("would_short_circuit", 0.0),
            ("retry", 0.0),
            ("retry_budget_exhausted", 0.0),
            ("hedge", 0.0),
            ("hedge_cancelled", 0.0),
            ("limit_rejected", 0.0),
            ("throttled", 0.0),
            ("slow_call", 0.0),
            ("chaos_injected", 0.0),
        ],
    );
    for event in EventType::ALL {
        if matches!(
            event,
            EventType::FallbackDisabled | EventType::CommandMaxActive
        ) {
            continue;
        }
        let name = event.name().to_ascii_lowercase();
        let labels = [mixed[0], mixed[1], ("event", name.as_str())];
        assert_eq!(
            metrics.value("hystrix_command_events_total", &labels),
            snapshot.cumulative_count(event) as f64
        );
    }

    // Latency histograms: cumulative buckets of whole-ms latencies, in seconds. Executions
    // that ran: 2 failures at once (0 ms), 3 successes of 20 ms, and 1 timeout whose run took
    // 150 ms (a SEMAPHORE run blocks its caller: the timeout shows when it returns).
    let histogram = "hystrix_command_latency_execute_seconds";
    assert_eq!(metrics.types[histogram], "histogram");
    let bucket = |le: &str| {
        let labels = [mixed[0], mixed[1], ("le", le)];
        metrics.value(&format!("{histogram}_bucket"), &labels)
    };
    for (le, expected) in [
        ("0.005", 2.0),
        ("0.01", 2.0),
        ("0.025", 5.0),
        ("0.05", 5.0),
        ("0.1", 5.0),
        ("0.25", 6.0),
        ("10", 6.0),
        ("+Inf", 6.0),
    ] {
        assert_eq!(bucket(le), expected, "le={le}");
    }
    assert_eq!(metrics.value(&format!("{histogram}_count"), &mixed), 6.0);
    assert_eq!(metrics.value(&format!("{histogram}_sum"), &mixed), 0.21);
    let exact = snapshot.execution_histogram();
    assert_eq!((exact.count(), exact.sum()), (6, 210));
    // Total latency: the same runs (the fallbacks took no time); the short-circuits and
    // rejections have none.
    let total = "hystrix_command_latency_total_seconds";
    assert_eq!(metrics.value(&format!("{total}_count"), &mixed), 6.0);
    assert_eq!(metrics.value(&format!("{total}_sum"), &mixed), 0.21);

    // The breaker: closed (only forced open while driving).
    for (state, expected) in [("closed", 1.0), ("open", 0.0), ("forced_open", 0.0)] {
        let labels = [mixed[0], mixed[1], ("state", state)];
        assert_eq!(
            metrics.value("hystrix_circuit_breaker_state", &labels),
            expected
        );
    }
    test.force_open("Mixed").unwrap();
    let forced = parse(&dashboard.render_metrics());
    let labels = [mixed[0], mixed[1], ("state", "forced_open")];
    assert_eq!(forced.value("hystrix_circuit_breaker_state", &labels), 1.0);

    assert_eq!(
        metrics.value("hystrix_command_concurrent_executions", &mixed),
        0.0
    );
    assert_eq!(
        metrics.value("hystrix_command_error_ratio", &mixed),
        5.0 / 8.0
    );

    // The thread pool.
    let pool = [("thread_pool", "ShopPool")];
    assert_eq!(
        metrics.value("hystrix_thread_pool_executions_total", &pool),
        2.0
    );
    assert_eq!(
        metrics.value("hystrix_thread_pool_rejections_total", &pool),
        0.0
    );
    // maxQueueSize -1 (the default): hand-off, no queue.
    assert_eq!(
        metrics.value("hystrix_thread_pool_queue_capacity", &pool),
        0.0
    );
    let snapshot = test.registry().thread_pool_metrics("ShopPool").unwrap();
    assert_eq!(
        metrics.value("hystrix_thread_pool_max_pool_size", &pool),
        f64::from(snapshot.current_maximum_pool_size)
    );
    assert_eq!(metrics.types["hystrix_thread_pool_active_threads"], "gauge");
}

#[test]
fn retries_and_budget_refusals_are_events() {
    let test = TestRegistry::new();
    common::drive_retried(&test);
    let dashboard = Dashboard::builder(test.registry().clone()).build();
    let metrics = parse(&dashboard.render_metrics());
    let retried = [("command", "Retried"), ("group", "Shop")];
    metrics.assert_events(
        retried,
        &[
            ("retry", 2.0),
            ("retry_budget_exhausted", 2.0),
            ("success", 1.0),
            ("failure", 4.0),
            ("fallback_success", 2.0),
            ("fallback_missing", 0.0),
            ("exception_thrown", 0.0),
        ],
    );
    // Counters since creation: the rolling window moving on forgets nothing.
    test.advance(std::time::Duration::from_millis(20_000));
    let later = parse(&dashboard.render_metrics());
    let labels = [retried[0], retried[1], ("event", "retry_budget_exhausted")];
    assert_eq!(later.value("hystrix_command_events_total", &labels), 2.0);
    // The latency histogram's _count counts executions whose user code ran (the 3), as the
    // rolling percentiles take them; the attempts are the events.
    assert_eq!(
        metrics.value("hystrix_command_latency_execute_seconds_count", &retried),
        3.0
    );
}

#[test]
fn hedges_and_cancelled_hedges_are_events() {
    let test = TestRegistry::new();
    common::drive_hedged(&test);
    let dashboard = Dashboard::builder(test.registry().clone()).build();
    let metrics = parse(&dashboard.render_metrics());
    metrics.assert_events(
        [("command", "Hedged"), ("group", "Shop")],
        &[
            ("hedge", 2.0),
            ("hedge_cancelled", 1.0),
            ("success", 2.0),
            ("failure", 1.0),
            ("retry", 0.0),
            ("fallback_success", 0.0),
            ("cancelled", 0.0),
        ],
    );
}

/// Every series of metric `name` is `command`'s.
fn assert_only_series_of(metrics: &Exposition, name: &str, command: &str) {
    assert!(
        metrics
            .samples
            .iter()
            .filter(|(n, _, _)| n == name)
            .all(|(_, labels, _)| labels["command"] == command),
        "{name}"
    );
}

#[test]
fn limit_rejections_are_events_and_the_adaptive_limit_has_gauges() {
    let test = TestRegistry::new();
    common::drive_mixed(&test);
    let cmd = common::drive_limited(&test);
    let dashboard = Dashboard::builder(test.registry().clone()).build();
    let limited = [("command", "Limited"), ("group", "Shop")];
    let gauges = [
        "hystrix_command_adaptive_limit",
        "hystrix_command_adaptive_limit_in_flight",
        "hystrix_command_adaptive_limit_queue_size",
    ];
    let metrics = parse(&dashboard.render_metrics());
    metrics.assert_events(
        limited,
        &[
            ("limit_rejected", 3.0),
            ("fallback_success", 3.0),
            ("success", 2.0),
            ("semaphore_rejected", 0.0),
            ("fallback_missing", 0.0),
        ],
    );
    let read = |metrics: &Exposition| gauges.map(|name| metrics.value(name, &limited));
    assert_eq!(read(&metrics), [4.0, 0.0, 0.0]);
    for name in gauges {
        assert_eq!(metrics.types[name], "gauge", "{name}");
        // Only the command with adaptive limits on has series.
        assert_only_series_of(&metrics, name, "Limited");
    }

    // Two in flight of 4, then full with one waiting for a place (a wait of up to 1 s).
    let held: Vec<_> = (0..2).map(|_| common::held(&test, &cmd, 50)).collect();
    assert_eq!(read(&parse(&dashboard.render_metrics())), [4.0, 2.0, 0.0]);
    let more = common::fill_with_one_waiting(&test, &cmd);
    assert_eq!(read(&parse(&dashboard.render_metrics())), [4.0, 4.0, 1.0]);
    drop(more);
    drop(held);

    // Turned off: no series, the counter stays.
    common::set_limited(&test, "enabled", false);
    let off = parse(&dashboard.render_metrics());
    for name in gauges {
        assert!(off.samples.iter().all(|(n, _, _)| n != name), "{name}");
        assert_eq!(off.types[name], "gauge", "{name}: the header stays");
    }
    off.assert_events(limited, &[("limit_rejected", 3.0)]);
}

#[test]
fn throttled_attempts_are_events_and_throttling_has_gauges() {
    let test = TestRegistry::new();
    common::drive_mixed(&test);
    let successes = f64::from(common::drive_throttled(&test));
    let dashboard = Dashboard::builder(test.registry().clone()).build();
    let throttled = [("command", "Throttled"), ("group", "Shop")];
    let gauges = [
        "hystrix_command_throttle_probability",
        "hystrix_command_throttle_requests",
        "hystrix_command_throttle_accepts",
    ];
    let metrics = parse(&dashboard.render_metrics());
    metrics.assert_events(
        throttled,
        &[
            ("throttled", 1.0),
            ("fallback_success", 5.0),
            ("success", 1.0 + successes),
            ("failure", 4.0),
        ],
    );
    let (requests, accepts) = (6.0 + successes, 1.0 + successes);
    let read = |metrics: &Exposition| gauges.map(|name| metrics.value(name, &throttled));
    assert_eq!(
        read(&metrics),
        [(requests - accepts) / (requests + 1.0), requests, accepts]
    );
    for name in gauges {
        assert_eq!(metrics.types[name], "gauge", "{name}");
        // Only the command with throttling on has series.
        assert_only_series_of(&metrics, name, "Throttled");
    }
    // Turned off: no series, the counter stays.
    test.registry()
        .properties()
        .set(
            "hystrix.command.Throttled.execution.throttle.enabled",
            false,
        )
        .unwrap();
    let off = parse(&dashboard.render_metrics());
    for name in gauges {
        assert!(off.samples.iter().all(|(n, _, _)| n != name), "{name}");
    }
    off.assert_events(throttled, &[("throttled", 1.0)]);
}

#[test]
fn slow_calls_are_events_and_the_slow_call_ratio_a_gauge() {
    let test = TestRegistry::new();
    common::drive_mixed(&test);
    common::drive_slow(&test, "Slow", &[]);
    let dashboard = Dashboard::builder(test.registry().clone()).build();
    let slow = [("command", "Slow"), ("group", "Shop")];
    let metrics = parse(&dashboard.render_metrics());
    // Each slow attempt is counted beside its outcome.
    metrics.assert_events(
        slow,
        &[
            ("slow_call", 2.0),
            ("success", 3.0),
            ("failure", 1.0),
            ("fallback_success", 1.0),
        ],
    );
    let name = "hystrix_command_slow_call_ratio";
    assert_eq!(metrics.types[name], "gauge");
    // 2 slow of 4 requests, over the window the error ratio reads (1 of 4).
    assert_eq!(metrics.value(name, &slow), 0.5);
    assert_eq!(metrics.value("hystrix_command_error_ratio", &slow), 0.25);
    // Only the command with slow calls on has a series.
    assert_only_series_of(&metrics, name, "Slow");
    // Turned off: no series, the counter stays.
    test.registry()
        .properties()
        .set(
            "hystrix.command.Slow.circuitBreaker.slowCall.durationThresholdInMilliseconds",
            0,
        )
        .unwrap();
    let off = parse(&dashboard.render_metrics());
    assert!(off.samples.iter().all(|(n, _, _)| n != name));
    assert!(
        off.types.contains_key(name),
        "the header stays, as the others'"
    );
    off.assert_events(slow, &[("slow_call", 2.0)]);
}

#[test]
fn chaos_injections_are_events_and_chaos_on_a_gauge() {
    let test = TestRegistry::new();
    common::drive_mixed(&test);
    common::drive_chaos(&test, "Chaotic");
    let dashboard = Dashboard::builder(test.registry().clone()).build();
    let chaotic = [("command", "Chaotic"), ("group", "Shop")];
    let metrics = parse(&dashboard.render_metrics());
    // Each injected fault is a failure too.
    metrics.assert_events(
        chaotic,
        &[
            ("chaos_injected", 2.0),
            ("failure", 2.0),
            ("fallback_success", 2.0),
            ("success", 3.0),
        ],
    );
    metrics.assert_events(
        [("command", "Mixed"), ("group", "Shop")],
        &[("chaos_injected", 0.0)],
    );
    // The latency summary's count has the 3 runs and the 2 attempts whose run was replaced.
    assert_eq!(
        metrics.value("hystrix_command_latency_execute_seconds_count", &chaotic),
        5.0
    );
    let name = "hystrix_command_chaos_enabled";
    assert_eq!(metrics.types[name], "gauge");
    assert_eq!(metrics.value(name, &chaotic), 1.0);
    // Only the command whose chaos is on has a series.
    assert_only_series_of(&metrics, name, "Chaotic");
    // On, every rate 0 (the delay alone injects nothing): 0.
    for rate in [
        "chaos.fault.ratePercentage",
        "chaos.latency.ratePercentage",
        "chaos.hang.ratePercentage",
    ] {
        common::set_chaos(&test, "Chaotic", rate, 0);
    }
    let idle = parse(&dashboard.render_metrics());
    assert_eq!(idle.value(name, &chaotic), 0.0);
    // A latency rate with a delay injects; with a delay of 0 it does not.
    common::set_chaos(&test, "Chaotic", "chaos.latency.ratePercentage", 20);
    assert_eq!(
        parse(&dashboard.render_metrics()).value(name, &chaotic),
        1.0
    );
    common::set_chaos(&test, "Chaotic", "chaos.latency.inMilliseconds", 0);
    assert_eq!(
        parse(&dashboard.render_metrics()).value(name, &chaotic),
        0.0
    );
    // Turned off: no series, the counter stays.
    common::set_chaos(&test, "Chaotic", "chaos.enabled", false);
    let off = parse(&dashboard.render_metrics());
    assert!(off.samples.iter().all(|(n, _, _)| n != name));
    assert!(off.types.contains_key(name), "the header stays");
    off.assert_events(chaotic, &[("chaos_injected", 2.0)]);
}

#[test]
fn queue_capacity_is_what_may_wait_in_the_queue() {
    for (max_queue, threshold, capacity) in [(-1, 5, 0.0), (0, 5, 0.0), (2, 5, 2.0), (20, 5, 5.0)] {
        let test = TestRegistry::new();
        let properties = test.registry().properties();
        properties
            .set("hystrix.threadpool.Q.maxQueueSize", max_queue)
            .unwrap();
        properties
            .set(
                "hystrix.threadpool.Q.queueSizeRejectionThreshold",
                threshold,
            )
            .unwrap();
        let cmd = hystrix::Command::builder("Queued")
            .group("G")
            .thread_pool_key("Q")
            .isolation(hystrix::IsolationStrategy::Thread)
            .build_in(test.registry())
            .unwrap();
        assert_eq!(cmd.run(|| Ok::<_, common::Boom>(1)).execute().unwrap(), 1);
        let metrics = parse(
            &Dashboard::builder(test.registry().clone())
                .build()
                .render_metrics(),
        );
        assert_eq!(
            metrics.value(
                "hystrix_thread_pool_queue_capacity",
                &[("thread_pool", "Q")]
            ),
            capacity,
            "maxQueueSize {max_queue}, threshold {threshold}"
        );
    }
}

#[test]
fn a_disabled_breaker_is_disabled_whatever_its_force_flags() {
    let test = TestRegistry::new();
    let cmd = hystrix::Command::builder("Off")
        .group("G")
        .isolation(hystrix::IsolationStrategy::Semaphore)
        .property("circuitBreaker.enabled", false)
        .property("circuitBreaker.forceOpen", true)
        .build_in(test.registry())
        .unwrap();
    assert_eq!(cmd.run(|| Ok::<_, common::Boom>(1)).execute().unwrap(), 1);
    let metrics = parse(
        &Dashboard::builder(test.registry().clone())
            .build()
            .render_metrics(),
    );
    // Its one run is counted at once (the histograms are cumulative, not rolling).
    let off = [("command", "Off"), ("group", "G")];
    assert_eq!(
        metrics.value("hystrix_command_latency_execute_seconds_count", &off),
        1.0
    );
    for (state, expected) in [("disabled", 1.0), ("forced_open", 0.0)] {
        let labels = [("command", "Off"), ("group", "G"), ("state", state)];
        assert_eq!(
            metrics.value("hystrix_circuit_breaker_state", &labels),
            expected,
            "{state}"
        );
    }
}

#[test]
fn the_state_store_errors_and_degraded_flag_are_exported_only_with_a_store() {
    use std::sync::Arc;

    use hystrix::circuit::store::InMemoryStateStore;
    use hystrix::clock::ManualClock;

    let render = |registry: &hystrix::Registry| {
        Dashboard::builder(registry.clone())
            .build()
            .render_metrics()
    };
    let without = TestRegistry::new();
    assert!(!render(without.registry()).contains("hystrix_state_store"));

    let clock = ManualClock::new();
    let store = InMemoryStateStore::new(Arc::new(clock.clone()));
    let registry = hystrix::Registry::builder()
        .clock(clock)
        .state_store(store.clone())
        .state_store_sync_interval(None)
        .build();
    let _shared = hystrix::Command::builder("Shared")
        .group("G")
        .shared_state(true)
        .build_in(&registry)
        .unwrap();
    let metrics = parse(&render(&registry));
    assert_eq!(metrics.value("hystrix_state_store_errors_total", &[]), 0.0);
    assert_eq!(metrics.value("hystrix_state_store_degraded", &[]), 0.0);
    assert_eq!(metrics.types["hystrix_state_store_errors_total"], "counter");
    assert_eq!(metrics.types["hystrix_state_store_degraded"], "gauge");

    // An outage: the round's one call (the fetch; no counts to publish) fails.
    store.set_unavailable(true);
    common::runtime().block_on(registry.sync_state_store());
    let metrics = parse(&render(&registry));
    assert_eq!(metrics.value("hystrix_state_store_errors_total", &[]), 1.0);
    assert_eq!(metrics.value("hystrix_state_store_degraded", &[]), 1.0);

    store.set_unavailable(false);
    common::runtime().block_on(registry.sync_state_store());
    let metrics = parse(&render(&registry));
    assert_eq!(metrics.value("hystrix_state_store_errors_total", &[]), 1.0);
    assert_eq!(metrics.value("hystrix_state_store_degraded", &[]), 0.0);
}

#[test]
fn label_values_are_escaped() {
    let test = TestRegistry::new();
    let cmd = hystrix::Command::builder("Quote")
        .group("a\"b\\c")
        .isolation(hystrix::IsolationStrategy::Semaphore)
        .build_in(test.registry())
        .unwrap();
    cmd.run(|| Ok::<_, common::Boom>(1)).execute().unwrap();
    let text = Dashboard::builder(test.registry().clone())
        .build()
        .render_metrics();
    assert!(text.contains(r#"group="a\"b\\c""#), "{text}");
    let metrics = parse(&text);
    let labels = [
        ("command", "Quote"),
        ("group", "a\"b\\c"),
        ("event", "success"),
    ];
    assert_eq!(metrics.value("hystrix_command_events_total", &labels), 1.0);
}

#[test]
fn metrics_endpoint_serves_the_text() {
    let test = TestRegistry::new();
    common::drive_mixed(&test);
    let router = hystrix_dashboard::router(test.registry().clone());
    common::runtime().block_on(async move {
        let addr = common::spawn_server(router).await;
        let response = common::within(common::get(addr, "/metrics")).await;
        assert_eq!(response.status, 200);
        assert_eq!(
            response.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        let metrics = parse(&common::within(response.body()).await);
        let labels = [
            ("command", "Mixed"),
            ("group", "Shop"),
            ("event", "success"),
        ];
        assert_eq!(metrics.value("hystrix_command_events_total", &labels), 3.0);
    });
}

#[test]
fn executions_by_priority_class_have_series_while_a_reserve_is_set() {
    let test = TestRegistry::new();
    common::drive_mixed(&test);
    let cmd = common::ranked_command(&test);
    let dashboard = Dashboard::builder(test.registry().clone()).build();
    let held = common::hold_ranked(&test, &cmd);
    let metrics = parse(&dashboard.render_metrics());
    let read = |name: &str| {
        ["critical", "normal", "sheddable"].map(|class| {
            metrics.value(
                name,
                &[("command", "Ranked"), ("group", "Shop"), ("class", class)],
            )
        })
    };
    assert_eq!(read("hystrix_command_priority_in_flight"), [1.0, 2.0, 0.0]);
    assert_eq!(
        read("hystrix_command_priority_admitted_total"),
        [1.0, 2.0, 0.0]
    );
    assert_eq!(
        read("hystrix_command_priority_refused_total"),
        [0.0, 1.0, 1.0]
    );
    assert_eq!(metrics.types["hystrix_command_priority_in_flight"], "gauge");
    assert_eq!(
        metrics.types["hystrix_command_priority_refused_total"],
        "counter"
    );
    // Only the command with a reserve has series.
    assert!(
        metrics
            .samples
            .iter()
            .filter(|(n, _, _)| n.starts_with("hystrix_command_priority_"))
            .all(|(_, labels, _)| labels["command"] == "Ranked")
    );
    drop(held);
}

#[tokio::test]
async fn collapser_batch_sizes_are_a_histogram() {
    let test = TestRegistry::new();
    let rating = common::ratings_collapser(&test, hystrix::collapser::CollapserScope::Global);
    // One batch of 3 requests, then one of 1.
    let (first, second, third) = (rating.queue(1), rating.queue(2), rating.queue(3));
    test.clock().advance_ms(10);
    let answers = common::within(async { (first.await, second.await, third.await) }).await;
    assert_eq!(*answers.2.unwrap(), 30);
    let fourth = rating.queue(4);
    test.clock().advance_ms(10);
    assert_eq!(*common::within(fourth).await.unwrap(), 40);

    let metrics = parse(
        &Dashboard::builder(test.registry().clone())
            .build()
            .render_metrics(),
    );
    assert_eq!(metrics.types["hystrix_collapser_batch_size"], "histogram");
    let collapser = ("collapser", "GetRating");
    for (le, expected) in [
        ("1", 1.0),
        ("2", 1.0),
        ("5", 2.0),
        ("10000", 2.0),
        ("+Inf", 2.0),
    ] {
        assert_eq!(
            metrics.value(
                "hystrix_collapser_batch_size_bucket",
                &[collapser, ("le", le)]
            ),
            expected,
            "le={le}"
        );
    }
    assert_eq!(
        metrics.value("hystrix_collapser_batch_size_sum", &[collapser]),
        4.0
    );
    assert_eq!(
        metrics.value("hystrix_collapser_batch_size_count", &[collapser]),
        2.0
    );
    assert_eq!(
        metrics.value("hystrix_collapser_batches_total", &[collapser]),
        2.0
    );
    assert_eq!(
        metrics.value("hystrix_collapser_requests_batched_total", &[collapser]),
        4.0
    );
}

#[test]
fn latency_histograms_do_not_depend_on_the_rolling_percentiles() {
    // metrics.rollingPercentile.enabled turns the rolling percentiles off, not the
    // histograms: Prometheus keeps every execution's latency, even across a switch at run time.
    let test = TestRegistry::new();
    let cmd = hystrix::Command::builder("NoPercentiles")
        .group("G")
        .isolation(hystrix::IsolationStrategy::Semaphore)
        .property("metrics.rollingPercentile.enabled", false)
        .build_in(test.registry())
        .unwrap();
    let run = |ms: u64| {
        let clock = test.clone();
        cmd.run(move || {
            clock.advance(std::time::Duration::from_millis(ms));
            Ok::<_, common::Boom>(1)
        })
        .execute()
        .unwrap();
    };
    let scrape = || {
        parse(
            &Dashboard::builder(test.registry().clone())
                .build()
                .render_metrics(),
        )
    };
    let labels = [("command", "NoPercentiles"), ("group", "G")];
    for ms in [3, 30, 300] {
        run(ms);
    }
    assert_eq!(cmd.metrics().execution_latency().p50, -1, "percentiles off");
    let metrics = scrape();
    assert_eq!(
        metrics.value("hystrix_command_latency_execute_seconds_count", &labels),
        3.0
    );
    assert_eq!(
        metrics.value("hystrix_command_latency_execute_seconds_sum", &labels),
        0.333
    );
    test.registry()
        .properties()
        .set(
            "hystrix.command.NoPercentiles.metrics.rollingPercentile.enabled",
            true,
        )
        .unwrap();
    run(7);
    let metrics = scrape();
    assert_eq!(
        metrics.value("hystrix_command_latency_execute_seconds_count", &labels),
        4.0
    );
    let bucket = [labels[0], labels[1], ("le", "0.01")];
    assert_eq!(
        metrics.value("hystrix_command_latency_execute_seconds_bucket", &bucket),
        2.0
    );
}
