//! Checks the JSON report of a short demo run: its structure, and the resilience promises in
//! qualitative terms (every request answered, the outage's breaker opened during it and closed
//! after, the Retry-After storm tripped its breaker at once), never latency percentiles.
//!
//! The `demo` tier of `scripts/test` runs
//! `cargo run --release -p hystrix-demo -- --duration 10s --no-tui --json <file>`, then this
//! test with `HYSTRIX_DEMO_REPORT=<file>` and `--ignored`. Without the variable it fails: it
//! never passes without having read a report.

use serde_json::Value;

const PHASES: [&str; 7] = [
    "warm-up",
    "latency-spike",
    "error-burst",
    "outage",
    "recovery",
    "retry-after-storm",
    "cool-down",
];

const COMMANDS: [&str; 4] = [
    "GetAvailability",
    "GetRatings",
    "GetRecommendations",
    "GetTitle",
];

const BACKENDS: [&str; 4] = ["availability", "catalog", "ratings", "recommendations"];

fn read_report() -> Value {
    let path = std::env::var("HYSTRIX_DEMO_REPORT").unwrap_or_else(|_| {
        panic!(
            "HYSTRIX_DEMO_REPORT must name the JSON report of a demo run \
             (scripts/test demo runs the demo and sets it)"
        )
    });
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("cannot read the report {path}: {err}"));
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{path} is not JSON: {err}"))
}

fn u64_at(value: &Value, field: &str) -> u64 {
    value[field]
        .as_u64()
        .unwrap_or_else(|| panic!("`{field}` is not a count in {value}"))
}

fn keys(value: &Value) -> Vec<&str> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .map(String::as_str)
        .collect()
}

/// The phase `name` of the report.
fn phase<'r>(report: &'r Value, name: &str) -> &'r Value {
    report["phases"]
        .as_array()
        .and_then(|phases| phases.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("no phase `{name}`"))
}

/// The breaker events of `command` with `change`, as times in ms.
fn events(report: &Value, command: &str, change: &str) -> Vec<u64> {
    report["breaker_events"]
        .as_array()
        .expect("breaker_events is a list")
        .iter()
        .filter(|e| e["command"] == command && e["change"] == change)
        .map(|e| u64_at(e, "at_ms"))
        .collect()
}

#[test]
#[ignore = "reads the report of a demo run: scripts/test demo"]
fn the_short_run_report_has_its_structure_and_kept_its_promises() {
    let report = read_report();

    // Structure.
    assert_eq!(report["scenario"], "tour");
    assert_eq!(u64_at(&report, "duration_ms"), 10_000);
    assert!(
        report["dashboard_url"].as_str().is_some_and(
            |u| u.starts_with("http://127.0.0.1:") && u.ends_with("/hystrix/dashboard/")
        ),
        "the web dashboard's page"
    );
    assert!(
        report["gateway_url"]
            .as_str()
            .is_some_and(|u| u.starts_with("http://127.0.0.1:"))
    );
    let phases = report["phases"].as_array().expect("phases is a list");
    let names: Vec<&str> = phases.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, PHASES);
    let mut next_start = 0;
    for phase in phases {
        assert_eq!(
            u64_at(phase, "start_ms"),
            next_start,
            "phases follow each other"
        );
        next_start += u64_at(phase, "duration_ms");
        for field in [
            "requests",
            "answered",
            "degraded",
            "unanswered",
            "successes",
            "fallbacks",
            "short_circuits",
            "rejections",
            "timeouts",
            "failures",
        ] {
            u64_at(phase, field);
        }
        for percentile in ["p50", "p99", "max"] {
            assert!(phase["latency_ms"][percentile].is_number(), "{phase}");
        }
        assert_eq!(keys(&phase["commands"]), COMMANDS);
        for command in COMMANDS {
            let counts = &phase["commands"][command];
            assert!(counts["error_percent"].is_number());
            let executions: u64 = [
                "successes",
                "failures",
                "timeouts",
                "short_circuits",
                "rejections",
            ]
            .iter()
            .map(|field| u64_at(counts, field))
            .sum();
            assert!(executions > 0, "{command} ran in every phase: {counts}");
        }
        assert_eq!(keys(&phase["backend_calls"]), BACKENDS);
        assert!(u64_at(phase, "requests") > 0);
    }
    assert_eq!(next_start, 10_000, "the phases fill the run");
    let checks = report["checks"].as_array().expect("checks is a list");
    assert!(checks.len() >= 5, "{checks:?}");
    for check in checks {
        assert!(check["name"].is_string() && check["detail"].is_string());
    }
    assert_eq!(keys(&report["final_breakers"]), COMMANDS);

    // Every gateway request was answered, in every phase.
    for phase in phases {
        assert_eq!(u64_at(phase, "unanswered"), 0, "{}", phase["name"]);
        assert_eq!(u64_at(phase, "answered"), u64_at(phase, "requests"));
    }

    // The outage: the recommendations breaker opened during it, short-circuited calls (which
    // never reached the backend) and closed after it.
    let outage = phase(&report, "outage");
    let (start, end) = (
        u64_at(outage, "start_ms"),
        u64_at(outage, "start_ms") + u64_at(outage, "duration_ms"),
    );
    let opened = events(&report, "GetRecommendations", "opened");
    assert!(
        opened.iter().any(|at| (start..end).contains(at)),
        "GetRecommendations opened at {opened:?}, the outage ran {start}-{end} ms"
    );
    let closed = events(&report, "GetRecommendations", "closed");
    assert!(
        closed.iter().any(|at| *at >= end),
        "GetRecommendations closed at {closed:?}, the outage ended at {end} ms"
    );
    assert!(u64_at(&outage["commands"]["GetRecommendations"], "short_circuits") > 0);
    assert!(u64_at(&outage["commands"]["GetRecommendations"], "fallbacks") > 0);

    // The Retry-After storm tripped its breaker at once, so the backend saw few of the calls.
    let storm = phase(&report, "retry-after-storm");
    let trip_now = report["breaker_events"]
        .as_array()
        .expect("breaker_events is a list")
        .iter()
        .any(|e| e["command"] == "GetAvailability" && e["trigger"] == "trip_now");
    assert!(trip_now, "GetAvailability tripped by Retry-After");
    assert!(
        u64_at(&storm["backend_calls"], "availability") < u64_at(storm, "requests") / 2,
        "an open breaker keeps calls from the backend: {}",
        storm["backend_calls"]
    );

    // The latency spike: GetTitle timed out or was rejected, and pages still came back.
    let spike = phase(&report, "latency-spike");
    let title = &spike["commands"]["GetTitle"];
    assert!(
        u64_at(title, "timeouts") + u64_at(title, "rejections") > 0,
        "{title}"
    );
    assert!(u64_at(title, "fallbacks") > 0, "{title}");

    // The demo's own verdict: every check held.
    let failed: Vec<&Value> = checks.iter().filter(|c| c["passed"] != true).collect();
    assert!(failed.is_empty(), "failed checks: {failed:?}");
    assert_eq!(report["passed"], true);
}
