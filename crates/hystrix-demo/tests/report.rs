//! Checks the JSON report of a demo run of the tour: its structure, and the resilience
//! promises in qualitative terms (every request answered, the outage's breaker opened during it
//! and closed after, the Retry-After storm tripped its breaker at once; chaos injected into a
//! healthy backend's command tripped its breaker while the backend answered no error; retries,
//! hedges and the adaptive limit did their part and their checks held; the unprotected twin got
//! the same load and lost pages where a backend was down), never latency
//! percentiles.
//!
//! The `demo` tier of `scripts/test` runs
//! `cargo run --release -p hystrix-demo -- --duration 40s --no-tui --instances 3 --json <file>`,
//! then these tests with `HYSTRIX_DEMO_REPORT=<file>` and `--ignored`. Without the variable a
//! test fails: it never passes without having read a report. The fields above `fleet` are the
//! fleet's totals (and instance 1's breakers); `fleet` has each instance's numbers and the
//! check that instance 1's trip short-circuits the others.

use serde_json::Value;

/// The tour's length in the demo tier, in ms.
const DURATION_MS: u64 = 40_000;

const PHASES: [&str; 11] = [
    "warm-up",
    "latency-spike",
    "error-burst",
    "outage",
    "recovery",
    "retry-after-storm",
    "transient-errors",
    "long-tail",
    "capacity-drop",
    "chaos",
    "cool-down",
];

const COMMANDS: [&str; 6] = [
    "GetAvailability",
    "GetPrices",
    "GetPricesFixed",
    "GetRatings",
    "GetRecommendations",
    "GetTitle",
];

const BACKENDS: [&str; 6] = [
    "availability",
    "catalog",
    "prices",
    "prices-fixed",
    "ratings",
    "recommendations",
];

/// The report named by the environment variable `var`.
fn read_report(var: &str) -> Value {
    let path = std::env::var(var).unwrap_or_else(|_| {
        panic!(
            "{var} must name the JSON report of a demo run \
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

/// The phase `name`'s start and end, in ms.
fn span(report: &Value, name: &str) -> (u64, u64) {
    let phase = phase(report, name);
    let start = u64_at(phase, "start_ms");
    (start, start + u64_at(phase, "duration_ms"))
}

/// `command`'s breaker opened during phase `name`, closed after that opening (a trial the
/// chaos spared may close it before the phase ends), and was closed at the end.
fn opened_during_then_closed(report: &Value, command: &str, name: &str) {
    let (start, end) = span(report, name);
    let opened = events(report, command, "opened");
    let first = opened.iter().copied().find(|at| (start..=end).contains(at));
    assert!(
        first.is_some(),
        "{command} opened at {opened:?}, `{name}` ran {start}-{end} ms"
    );
    let closed = events(report, command, "closed");
    assert!(
        closed.iter().any(|at| Some(*at) > first),
        "{command} closed at {closed:?}, opened at {first:?}"
    );
    assert_eq!(report["final_breakers"][command], "CLOSED");
}

/// The report's structure: scenario `scenario` of `duration_ms` in phases `names`, each with
/// its counts and every command and backend; its checks and final breaker states. Returns the
/// phases.
fn check_structure<'r>(
    report: &'r Value,
    scenario: &str,
    duration_ms: u64,
    names: &[&str],
) -> &'r Vec<Value> {
    assert_eq!(report["scenario"], scenario);
    assert_eq!(u64_at(report, "duration_ms"), duration_ms);
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
    let seen: Vec<&str> = phases.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(seen, names);
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
            "chaos_injected",
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
            u64_at(counts, "chaos_injected");
        }
        assert_eq!(keys(&phase["backend_calls"]), BACKENDS);
        assert_eq!(keys(&phase["backend_errors"]), BACKENDS);
        assert!(u64_at(phase, "requests") > 0);
    }
    assert_eq!(next_start, duration_ms, "the phases fill the run");
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
    phases
}

/// The unprotected twin beside the gateway: in every phase it got the same requests, and the
/// report has a contrast line for the phase; where a backend was down (the outage: connection
/// refused; the Retry-After storm: every call 503) the twin, which has no fallbacks, answered
/// at most half of its pages while the gateway answered all of them.
fn check_contrast(report: &Value) {
    assert!(
        report["twin_url"]
            .as_str()
            .is_some_and(|u| u.starts_with("http://127.0.0.1:")),
        "the twin's address"
    );
    u64_at(report, "seed");
    let phases = report["phases"].as_array().expect("phases is a list");
    let contrast = report["contrast"].as_array().expect("contrast is a list");
    assert_eq!(contrast.len(), phases.len(), "a contrast line per phase");
    for (phase, line) in phases.iter().zip(contrast) {
        let name = phase["name"].as_str().expect("a name");
        let twin = &phase["unprotected"];
        assert_eq!(
            u64_at(twin, "requests"),
            u64_at(phase, "requests"),
            "{name}: the same load"
        );
        assert_eq!(
            u64_at(twin, "answered") + u64_at(twin, "unanswered"),
            u64_at(twin, "requests"),
            "{name}: every twin request ended"
        );
        for held in [&phase["held"], &twin["held"]] {
            for field in ["requests", "connections", "threads"] {
                u64_at(held, field);
            }
        }
        let line = line.as_str().expect("a line");
        assert!(line.starts_with(&format!("{name}: answered ")), "{line}");
    }
    for down in ["outage", "retry-after-storm"] {
        let phase = phase(report, down);
        let twin = &phase["unprotected"];
        assert!(
            2 * u64_at(twin, "answered") <= u64_at(twin, "requests"),
            "{down}: the twin answered {twin}"
        );
    }
}

/// The demo's own verdict: every check held.
fn check_verdict(report: &Value) {
    let checks = report["checks"].as_array().expect("checks is a list");
    let failed: Vec<&Value> = checks.iter().filter(|c| c["passed"] != true).collect();
    assert!(failed.is_empty(), "failed checks: {failed:?}");
    assert_eq!(report["passed"], true);
}

#[test]
#[ignore = "reads the report of a demo run: scripts/test demo"]
fn the_tour_report_has_its_structure_and_kept_its_promises() {
    let report = read_report("HYSTRIX_DEMO_REPORT");
    check_structure(&report, "tour", DURATION_MS, &PHASES);

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

    check_contrast(&report);
    check_verdict(&report);
}

#[test]
#[ignore = "reads the report of a demo run: scripts/test demo"]
fn the_tour_report_shows_injected_chaos_and_the_protections_reacting() {
    let report = read_report("HYSTRIX_DEMO_REPORT");
    let phases = check_structure(&report, "tour", DURATION_MS, &PHASES);

    // Chaos only in the `chaos` phase, into GetRatings; the ratings backend answered no error
    // of its own there (it stayed healthy).
    let injected = |phase: &str, command: &str| {
        u64_at(
            &self::phase(&report, phase)["commands"][command],
            "chaos_injected",
        )
    };
    for phase in phases {
        let name = phase["name"].as_str().expect("a name");
        let set: Vec<&str> = phase
            .get("chaos")
            .map_or_else(Vec::new, |chaos| keys(chaos));
        let expected: &[&str] = if name == "chaos" { &["ratings"] } else { &[] };
        assert_eq!(set, expected, "{name}");
        let total: u64 = COMMANDS.iter().map(|command| injected(name, command)).sum();
        assert_eq!(u64_at(phase, "chaos_injected"), total, "{name}");
        if expected.is_empty() {
            assert_eq!(total, 0, "no chaos injected in `{name}`");
        }
    }
    let chaos = phase(&report, "chaos");
    assert!(keys(&chaos["faults"]).is_empty(), "no backend faults");
    assert_eq!(u64_at(&chaos["backend_errors"], "ratings"), 0);
    assert!(injected("chaos", "GetRatings") > 0);

    // Injected faults: GetRatings's breaker opened during the phase and closed after it; its
    // fallback answered; every failure it had was injected.
    opened_during_then_closed(&report, "GetRatings", "chaos");
    let ratings = &chaos["commands"]["GetRatings"];
    assert!(u64_at(ratings, "fallbacks") > 0, "{ratings}");
    assert!(u64_at(ratings, "failures") > 0, "{ratings}");
    assert!(
        u64_at(ratings, "failures") <= u64_at(ratings, "chaos_injected"),
        "{ratings}"
    );

    check_verdict(&report);
}

/// The check named `name`: it was made, and it passed.
fn passed(report: &Value, name: &str) {
    let checks = report["checks"].as_array().expect("checks is a list");
    let check = checks
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check `{name}` in {checks:?}"));
    assert_eq!(check["passed"], true, "{check}");
}

#[test]
#[ignore = "reads the report of a demo run: scripts/test demo"]
fn the_tour_report_shows_retries_hedges_and_the_adaptive_limit_at_work() {
    let report = read_report("HYSTRIX_DEMO_REPORT");
    check_structure(&report, "tour", DURATION_MS, &PHASES);

    // Retries: the backend failed calls, the command retried them, its breaker stayed closed.
    let flaky = phase(&report, "transient-errors");
    let recommendations = &flaky["commands"]["GetRecommendations"];
    assert!(u64_at(&flaky["backend_errors"], "recommendations") > 0);
    assert!(u64_at(recommendations, "retries") > 0, "{recommendations}");
    assert!(
        u64_at(&flaky["backend_calls"], "recommendations") > u64_at(recommendations, "successes"),
        "retries reached the backend: {flaky}"
    );
    for name in [
        "GetRecommendations retried its backend's errors during `transient-errors`",
        "GetRecommendations succeeded at least 91% of the time during `transient-errors`",
        "GetRecommendations breaker stayed closed during `transient-errors`",
    ] {
        passed(&report, name);
    }

    // Hedging: hedges sent and won.
    let tail = phase(&report, "long-tail");
    assert!(u64_at(&tail["commands"]["GetAvailability"], "hedges") > 0);
    assert!(u64_at(&tail["policies"], "hedges_won") > 0);
    assert_eq!(u64_at(&tail["policies"], "tail_delay_ms"), 250);
    for name in [
        "GetAvailability hedges were sent and won during `long-tail`",
        "availability answers of 250 ms or more cut to under half the tail's share during \
         `long-tail`",
    ] {
        passed(&report, name);
    }

    // The adaptive limit: below the fixed limit during the drop, shedding to the fallback;
    // the fixed side timed out more.
    let drop = phase(&report, "capacity-drop");
    let limit = &drop["policies"]["limit"];
    assert!(u64_at(limit, "settled") <= 10, "{limit}");
    assert_eq!(u64_at(limit, "first"), 20, "{limit}");
    let prices = &drop["commands"]["GetPrices"];
    let fixed = &drop["commands"]["GetPricesFixed"];
    assert!(u64_at(prices, "limit_rejections") > 0, "{prices}");
    assert!(
        u64_at(fixed, "timeouts") > u64_at(prices, "timeouts"),
        "{fixed} {prices}"
    );
    for name in [
        "GetPrices adaptive limit settled at 10 or less (fixed: 20) during `capacity-drop`",
        "GetPrices adaptive limit rose again during `chaos`",
        "GetPrices shed calls to its fallback and every page was answered during \
         `capacity-drop`",
        "GetPrices' admitted calls timed out at most half as often as GetPricesFixed's and \
         answered as many during `capacity-drop`",
    ] {
        passed(&report, name);
    }
}

/// The number of gateway instances of the demo tier's run.
const INSTANCES: u64 = 3;

/// Instance `k`'s (from 1) entry of the fleet phase `name`.
fn instance_in<'r>(report: &'r Value, name: &str, k: u64) -> &'r Value {
    let phase = report["fleet"]["phases"]
        .as_array()
        .and_then(|phases| phases.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("no fleet phase `{name}`"));
    &phase["instances"][usize::try_from(k - 1).expect("a small number")]
}

#[test]
#[ignore = "reads the report of a demo run: scripts/test demo"]
fn the_fleet_report_shows_each_instance_and_the_trip_reaching_the_others() {
    let report = read_report("HYSTRIX_DEMO_REPORT");
    let phases = check_structure(&report, "tour", DURATION_MS, &PHASES);
    let fleet = &report["fleet"];
    assert_eq!(u64_at(fleet, "instances"), INSTANCES);
    assert_eq!(fleet["store"], "in-memory");
    let bound = u64_at(fleet, "sync_bound_ms");
    assert_eq!(bound, 2 * u64_at(fleet, "sync_interval_ms"));

    // Each instance: its own gateway and stream; together they took every request.
    let members = fleet["members"].as_array().expect("members is a list");
    assert_eq!(members.len() as u64, INSTANCES);
    let mut ports = Vec::new();
    for (k, member) in members.iter().enumerate() {
        assert_eq!(u64_at(member, "instance"), k as u64 + 1);
        for field in ["gateway_url", "stream_url"] {
            let url = member[field].as_str().expect("a URL");
            assert!(url.starts_with("http://127.0.0.1:"), "{url}");
            ports.push(url.to_owned());
        }
        assert!(
            member["stream_url"]
                .as_str()
                .unwrap()
                .ends_with("/hystrix.stream")
        );
        assert_eq!(u64_at(member, "answered"), u64_at(member, "requests"));
        assert_eq!(keys(&member["final_breakers"]), COMMANDS);
        assert!(member["breaker_events"].is_array());
    }
    ports.sort();
    ports.dedup();
    assert_eq!(ports.len() as u64, 2 * INSTANCES, "every address its own");
    assert_eq!(members[0]["gateway_url"], report["gateway_url"]);
    let total: u64 = members.iter().map(|m| u64_at(m, "requests")).sum();
    let sent: u64 = phases.iter().map(|p| u64_at(p, "requests")).sum();
    assert_eq!(total, sent);

    // Per phase: the instances' numbers add up to the fleet's, and to the report's totals.
    let fleet_phases = fleet["phases"].as_array().expect("phases is a list");
    assert_eq!(fleet_phases.len(), phases.len());
    for (fleet_phase, phase) in fleet_phases.iter().zip(phases) {
        let name = phase["name"].as_str().expect("a name");
        assert_eq!(fleet_phase["name"], name);
        let instances = fleet_phase["instances"].as_array().expect("a list");
        assert_eq!(instances.len() as u64, INSTANCES);
        for field in ["requests", "answered", "errors", "short_circuits"] {
            let sum: u64 = instances.iter().map(|i| u64_at(i, field)).sum();
            assert_eq!(sum, u64_at(&fleet_phase["fleet"], field), "{name}: {field}");
        }
        assert_eq!(
            u64_at(&fleet_phase["fleet"], "requests"),
            u64_at(phase, "requests"),
            "{name}"
        );
        assert_eq!(
            u64_at(&fleet_phase["fleet"], "short_circuits"),
            u64_at(phase, "short_circuits"),
            "{name}"
        );
        for command in COMMANDS {
            for field in ["failures", "timeouts", "short_circuits"] {
                let sum: u64 = instances
                    .iter()
                    .map(|i| u64_at(&i["commands"][command], field))
                    .sum();
                assert_eq!(
                    sum,
                    u64_at(&phase["commands"][command], field),
                    "{name}: {command} {field}"
                );
            }
        }
        // Spread in turn (where a backend was down, after the others' window): every
        // instance took a share.
        for instance in instances {
            assert!(u64_at(instance, "requests") > 0, "{name}: {instance}");
        }
    }

    // Where a backend was down, its command ran through instance 1 until it tripped; the
    // others, opened by the store within the bound, then only short-circuited it (counted until
    // just before that open period ended; after it the fleet shares the trials).
    let trips = fleet["trips"].as_array().expect("trips is a list");
    let tripped: Vec<(&str, &str)> = trips
        .iter()
        .map(|t| (t["phase"].as_str().unwrap(), t["command"].as_str().unwrap()))
        .collect();
    assert_eq!(
        tripped,
        [
            ("outage", "GetRecommendations"),
            ("retry-after-storm", "GetAvailability")
        ]
    );
    for trip in trips {
        let (down, command) = (
            trip["phase"].as_str().unwrap(),
            trip["command"].as_str().unwrap(),
        );
        let (start, end) = span(&report, down);
        let opened_at = u64_at(trip, "opened_at_ms");
        assert!((start..=end).contains(&opened_at), "{trip}");
        assert!(u64_at(trip, "open_ms") >= 500, "{trip}");
        let leader = &instance_in(&report, down, 1)["commands"][command];
        assert!(u64_at(leader, "errors") > 0, "{down}: {leader}");
        let followers = trip["followers"].as_array().expect("a list");
        assert_eq!(followers.len() as u64, INSTANCES - 1);
        for (k, follower) in (2..).zip(followers) {
            assert_eq!(u64_at(follower, "instance"), k);
            assert!(
                u64_at(follower, "opened_after_ms") <= bound,
                "{down}: {follower}"
            );
            for field in ["failures", "timeouts", "successes"] {
                assert_eq!(u64_at(follower, field), 0, "{down}: {follower}");
            }
            assert!(u64_at(follower, "short_circuits") > 0, "{down}: {follower}");
            assert_eq!(
                u64_at(follower, "executions"),
                u64_at(follower, "short_circuits"),
                "{down}: {follower}"
            );
            let by_store = members[usize::try_from(k - 1).unwrap()]["breaker_events"]
                .as_array()
                .expect("a list")
                .iter()
                .any(|e| {
                    e["command"] == command
                        && e["change"] == "opened"
                        && e["trigger"] == "other"
                        && u64_at(e, "at_ms") == opened_at + u64_at(follower, "opened_after_ms")
                });
            assert!(
                by_store,
                "{down}: instance {k} opened {command} from the store"
            );
        }
        let name = format!(
            "{command}, tripped on instance 1, short-circuited instances 2-{INSTANCES} within \
             {bound} ms, without their seeing a failure, during `{down}`"
        );
        passed(&report, &name);
        let fleet_checks = fleet["checks"].as_array().expect("a list");
        assert!(fleet_checks.iter().any(|c| c["name"] == name.as_str()));
    }

    // The fleet's merged stream on instance 1's dashboard port counted every instance.
    let turbine = &fleet["turbine"];
    let url = turbine["url"].as_str().expect("a URL");
    let dashboard = report["dashboard_url"].as_str().expect("a URL");
    let origin = dashboard.trim_end_matches("/hystrix/dashboard/");
    assert_eq!(url, format!("{origin}/turbine.stream?cluster=demo"));
    assert!(u64_at(turbine, "messages") > 0, "{turbine}");
    assert_eq!(keys(&turbine["reporting_hosts"]), COMMANDS);
    for command in COMMANDS {
        assert_eq!(
            u64_at(&turbine["reporting_hosts"], command),
            INSTANCES,
            "{command}"
        );
    }
    let mut streams: Vec<&str> = turbine["instances"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|i| {
            assert_eq!(i["reporting"], true, "{i}");
            i["url"].as_str().expect("a URL")
        })
        .collect();
    streams.sort_unstable();
    let mut expected: Vec<&str> = members
        .iter()
        .map(|m| m["stream_url"].as_str().expect("a URL"))
        .collect();
    expected.sort_unstable();
    assert_eq!(streams, expected);
    passed(
        &report,
        &format!("the fleet's merged stream counted all {INSTANCES} instances"),
    );
    check_verdict(&report);
}
