//! The input series of `prometheus/hystrix.rules.test.yml` (the `promtool test rules` file of
//! `prometheus/hystrix.rules.yml`), generated from real `/metrics` scrapes: three registries
//! (three instances of one service) on manual clocks run a scripted scenario and are scraped
//! every 15 s of manual time for 10 minutes. The committed file must hold exactly the series
//! generated here, so the rules are tested on what `/metrics` really emits; run with
//! `UPDATE_PROMETHEUS_RULES_TEST=1` to rewrite them. Its expected values are hand-written
//! from the scenario below. `scripts/test prometheus` runs this, then promtool.
//!
//! The scenario, per 15 s step (traffic of step n is scraped at n × 15 s; the scrape at 0 s
//! has none), on instances app-1, app-2 and app-3:
//! - `Catalog` (group Shop), everywhere: 45 successes of 20 ms and 15 failures of 100 ms
//!   (error ratio 0.25, 4 executions/s an instance).
//! - `Payments` (group Billing), everywhere: 30 successes of 50 ms; on app-1 from step 5 the
//!   dependency fails at once: 30 failures trip its breaker (sleep window 1 h: it stays open),
//!   then 30 short-circuited calls a step.
//! - `Search` (group Shop), everywhere: 15 executions of 100 ms; on app-2 from step 13 of
//!   600 ms (a slow replica).
//! - `Recommendations` (group Shop, breaker disabled), everywhere: 15 successes of 10 ms;
//!   from step 9, 15 failures of 10 ms.
//! - `Pricing` (group Shop, 2 attempts, a retry budget of 1 retry a second over 10 s),
//!   everywhere: 25 successes; on app-3 from step 17 every attempt fails: 10 executions are
//!   retried (the budget's 10), 15 are refused a retry (RETRY_BUDGET_EXHAUSTED).
//! - `Checkout` (group Shop, 4 permits, half reserved for CRITICAL), app-3 only: 2 NORMAL
//!   executions of 10 ms hold NORMAL's share while 15 SHEDDABLE calls are shed
//!   (LIMIT_REJECTED: the reserve refuses them) and 15 CRITICAL ones succeed.
//! - `Audit` (group Shop), app-3 only: one failure a minute (steps 1, 5, 9, ...).
//! - `Idle` (group Shop), everywhere: built, never run (no requests: no error ratio).
//! - `Nightly` (group Shop), app-1 only: 10 runs of 20 ms at steps 1 and 2, then none (its
//!   histogram stays: no p99 once a minute has passed without a run, not NaN).
//! - `Inventory` (group Shop; sleep window 25 s, 2 half-open trials, both must succeed),
//!   app-2 only: 10 successes a step; at step 5, 30 failures trip its breaker; step 6's calls
//!   are short-circuited; step 7's one call is the first trial and succeeds (HALF_OPEN at the
//!   scrape); step 8's call is the second and closes it; 10 successes a step again after.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use common::Boom;
use hystrix::clock::Clock as _;
use hystrix::testing::TestRegistry;
use hystrix::{Command, IsolationStrategy, Priority, Status};
use hystrix_dashboard::Dashboard;

/// Manual time between scrapes (the test file's `interval`).
const STEP_MS: u64 = 15_000;
/// Steps of traffic: 10 minutes.
const STEPS: usize = 40;
const INSTANCES: [&str; 3] = ["app-1", "app-2", "app-3"];
const JOB: &str = "shop";

/// The metric families the rules read; of `hystrix_command_events_total`, the events they
/// read (the other events would only make the file longer).
const FAMILIES: [&str; 4] = [
    "hystrix_command_events_total",
    "hystrix_command_latency_execute_seconds_bucket",
    "hystrix_circuit_breaker_state",
    "hystrix_command_priority_refused_total",
];
const EVENTS: [&str; 10] = [
    "success",
    "ignored",
    "failure",
    "timeout",
    "short_circuited",
    "thread_pool_rejected",
    "semaphore_rejected",
    "limit_rejected",
    "throttled",
    "retry_budget_exhausted",
];

const TEST_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../prometheus/hystrix.rules.test.yml"
);
const BEGIN: &str = "    # BEGIN GENERATED input_series";
const END: &str = "    # END GENERATED input_series";

/// A SEMAPHORE command `key` of `group`, to build.
fn semaphore(key: &str, group: &str) -> hystrix::CommandBuilder {
    Command::builder(key)
        .group(group)
        .isolation(IsolationStrategy::Semaphore)
}

/// One instance of the service: its registry, its dashboard and its commands.
struct Instance {
    name: &'static str,
    test: TestRegistry,
    dashboard: Dashboard,
    catalog: Command,
    payments: Command,
    search: Command,
    recommendations: Command,
    pricing: Command,
    /// app-3 only.
    checkout: Option<Command>,
    /// app-3 only.
    audit: Option<Command>,
    /// Never runs: only built, so that /metrics has its series.
    _idle: Command,
    /// app-2 only.
    inventory: Option<Command>,
    /// app-1 only.
    nightly: Option<Command>,
}

impl Instance {
    fn new(name: &'static str) -> Self {
        let test = TestRegistry::new();
        let registry = test.registry();
        let build = |builder: hystrix::CommandBuilder| builder.build_in(registry).unwrap();
        let only_app3 = |builder| (name == "app-3").then(|| build(builder));
        Instance {
            name,
            catalog: build(semaphore("Catalog", "Shop")),
            payments: build(
                semaphore("Payments", "Billing")
                    .property("circuitBreaker.sleepWindowInMilliseconds", 3_600_000),
            ),
            search: build(semaphore("Search", "Shop")),
            recommendations: build(
                semaphore("Recommendations", "Shop").property("circuitBreaker.enabled", false),
            ),
            pricing: build(
                semaphore("Pricing", "Shop")
                    .property("retry.maxAttempts", 2)
                    .property("retry.backoff.initialInMilliseconds", 0)
                    .property("retry.budget.percent", 0)
                    .property("retry.budget.minPerSecond", 1)
                    .property("retry.budget.windowInMilliseconds", 10_000),
            ),
            checkout: only_app3(
                semaphore("Checkout", "Shop")
                    .semaphore_max_concurrent_requests(4)
                    .property(
                        "execution.isolation.priority.critical.reservedPercentage",
                        50,
                    ),
            ),
            audit: only_app3(semaphore("Audit", "Shop")),
            _idle: build(semaphore("Idle", "Shop")),
            nightly: (name == "app-1").then(|| build(semaphore("Nightly", "Shop"))),
            inventory: (name == "app-2").then(|| {
                build(
                    semaphore("Inventory", "Shop")
                        .property("circuitBreaker.sleepWindowInMilliseconds", 25_000)
                        .property("circuitBreaker.halfOpen.permittedRequests", 2)
                        .property("circuitBreaker.halfOpen.successThreshold", 2),
                )
            }),
            dashboard: Dashboard::builder(registry.clone()).build(),
            test,
        }
    }

    /// Moves the clock to `ms` after the start (never back).
    fn at(&self, ms: u64) {
        let now = self.test.clock().now_ms();
        assert!(now <= ms, "{}: {now} ms is past {ms} ms", self.name);
        self.test.advance(Duration::from_millis(ms - now));
    }

    /// One execution of `cmd` whose run takes `ms` of manual time and succeeds or fails
    /// (answered by a fallback), at `priority`; its events.
    fn run(&self, cmd: &Command, ms: u64, ok: bool, priority: Priority) -> String {
        let clock = self.test.clone();
        cmd.run(move || {
            clock.advance(Duration::from_millis(ms));
            if ok { Ok::<u32, Boom>(1) } else { Err(Boom) }
        })
        .fallback(|_| Ok::<_, Boom>(0))
        .priority(priority)
        .execute_outcome()
        .execution_result()
        .execution_events()
        .to_string()
    }

    /// `count` executions of `cmd` as [`Instance::run`] (NORMAL), each with `events`.
    fn runs(&self, cmd: &Command, count: usize, ms: u64, ok: bool, events: &str) {
        for _ in 0..count {
            assert_eq!(
                self.run(cmd, ms, ok, Priority::Normal),
                events,
                "{}",
                self.name
            );
        }
    }

    /// The traffic of step `step` (1 to [`STEPS`]), from (step − 1) × 15 s.
    fn drive(&self, step: usize) {
        let start = (step as u64 - 1) * STEP_MS;
        let app = |name: &str| self.name == name;

        // Pricing at +0 s: 25 executions of no time; on app-3 from step 17 every attempt
        // fails and the budget (1 retry a second over 10 s) grants the first 10 retries.
        self.at(start);
        if app("app-3") && step >= 17 {
            self.retried(10, "FAILUREx2, FALLBACK_SUCCESS, RETRY");
            self.retried(15, "FAILURE, FALLBACK_SUCCESS, RETRY_BUDGET_EXHAUSTED");
        } else {
            self.retried(25, "SUCCESS");
        }

        // Payments, then at +2 s the breaker looks at its health (its trip is seen then).
        let failing = app("app-1") && step >= 5;
        if !failing {
            self.runs(&self.payments, 30, 50, true, "SUCCESS");
        } else if step == 5 {
            self.runs(&self.payments, 30, 0, false, "FAILURE, FALLBACK_SUCCESS");
        } else {
            self.runs(
                &self.payments,
                30,
                0,
                false,
                "SHORT_CIRCUITED, FALLBACK_SUCCESS",
            );
        }
        self.at(start + 2_000);
        let status = self.payments.circuit_breaker().status();
        let expected = if failing {
            Status::Open
        } else {
            Status::Closed
        };
        assert_eq!(status, expected, "{} step {step}", self.name);

        // Checkout at +2 s (app-3): 2 NORMAL in flight fill NORMAL's share of the 4 permits.
        if let Some(checkout) = &self.checkout {
            let held: Vec<_> = (0..2)
                .map(|_| common::held(&self.test, checkout, 10))
                .collect();
            for _ in 0..15 {
                let events = self.run(checkout, 0, true, Priority::Sheddable);
                assert_eq!(events, "FALLBACK_SUCCESS, LIMIT_REJECTED");
                let events = self.run(checkout, 0, true, Priority::Critical);
                assert_eq!(events, "SUCCESS");
            }
            for execution in held {
                let outcome = common::on_clock(&self.test, execution);
                assert_eq!(*outcome.response().as_ref().unwrap(), 1);
            }
        }

        // Nightly at +2.1 s (app-1): steps 1 and 2 only.
        if let Some(nightly) = self.nightly.as_ref().filter(|_| step <= 2) {
            self.at(start + 2_100);
            self.runs(nightly, 10, 20, true, "SUCCESS");
        }

        // Inventory at +2.1 s (app-2): tripped at step 5, half-open after step 7's trial.
        if let Some(inventory) = &self.inventory {
            self.at(start + 2_100);
            self.inventory(inventory, step);
        }

        // Catalog at +3 s: 3 successes of 20 ms then a failure of 100 ms, 15 times (2.4 s).
        self.at(start + 3_000);
        for _ in 0..15 {
            self.runs(&self.catalog, 3, 20, true, "SUCCESS");
            self.runs(&self.catalog, 1, 100, false, "FAILURE, FALLBACK_SUCCESS");
        }

        // Recommendations at +5.5 s (breaker disabled): 15 runs of 10 ms, failing from step 9.
        self.at(start + 5_500);
        if step >= 9 {
            let events = "FAILURE, FALLBACK_SUCCESS";
            self.runs(&self.recommendations, 15, 10, false, events);
        } else {
            self.runs(&self.recommendations, 15, 10, true, "SUCCESS");
        }

        // Audit at +5.8 s (app-3): one failure a minute.
        if let Some(audit) = self.audit.as_ref().filter(|_| step % 4 == 1) {
            self.at(start + 5_800);
            self.runs(audit, 1, 0, false, "FAILURE, FALLBACK_SUCCESS");
        }

        // Search at +6 s: 15 runs of 100 ms, of 600 ms on app-2 from step 13 (up to +15 s).
        self.at(start + 6_000);
        let ms = if app("app-2") && step >= 13 { 600 } else { 100 };
        self.runs(&self.search, 15, ms, true, "SUCCESS");

        self.at(step as u64 * STEP_MS);
    }

    /// Inventory's traffic of `step` (app-2), and the state its breaker is left in.
    fn inventory(&self, inventory: &Command, step: usize) {
        let (count, ok, events, status) = match step {
            5 => (30, false, "FAILURE, FALLBACK_SUCCESS", Status::Open),
            6 => (10, true, "SHORT_CIRCUITED, FALLBACK_SUCCESS", Status::Open),
            7 => (1, true, "SUCCESS", Status::HalfOpen),
            8 => (1, true, "SUCCESS", Status::Closed),
            _ => (10, true, "SUCCESS", Status::Closed),
        };
        self.runs(inventory, count, 0, ok, events);
        self.at((step as u64 - 1) * STEP_MS + 2_900);
        assert_eq!(inventory.circuit_breaker().status(), status, "step {step}");
    }

    /// `count` executions of Pricing, retryable: each attempt succeeds unless Pricing fails
    /// (app-3 from step 17); each with `events`.
    fn retried(&self, count: usize, events: &str) {
        let ok = events == "SUCCESS";
        for _ in 0..count {
            let outcome = self
                .pricing
                .run_retryable(move || move || if ok { Ok::<u32, Boom>(1) } else { Err(Boom) })
                .fallback(|_| Ok::<_, Boom>(0))
                .execute_outcome();
            assert_eq!(
                outcome.execution_result().execution_events().to_string(),
                events,
                "{}",
                self.name
            );
        }
    }

    /// The samples of a scrape the rules read: series (with this instance's `instance` and
    /// `job` labels) and value, as /metrics wrote it.
    fn scrape(&self) -> Vec<(String, String)> {
        let text = self.dashboard.render_metrics();
        let mut samples = Vec::new();
        for line in text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
            if !FAMILIES.contains(&name) {
                continue;
            }
            if name == "hystrix_command_events_total"
                && !EVENTS
                    .iter()
                    .any(|e| labels.contains(&format!("event=\"{e}\"")))
            {
                continue;
            }
            let number: f64 = value.parse().unwrap();
            assert!(number.is_finite(), "{line}");
            let own = format!("instance=\"{}\",job=\"{JOB}\"", self.name);
            let labels = if labels == "}" {
                format!("{own}}}")
            } else {
                format!("{own},{labels}")
            };
            samples.push((format!("{name}{{{labels}"), value.to_owned()));
        }
        samples
    }
}

/// Runs the scenario: each series' values at 0 s, 15 s, ... (None: no sample).
fn generate() -> BTreeMap<String, Vec<Option<String>>> {
    let instances = INSTANCES.map(Instance::new);
    let mut series: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
    for step in 0..=STEPS {
        for instance in &instances {
            if step > 0 {
                instance.drive(step);
            }
            for (name, value) in instance.scrape() {
                let values = series.entry(name).or_insert_with(|| vec![None; STEPS + 1]);
                values[step] = Some(value);
            }
        }
    }
    series
}

/// A YAML single-quoted scalar.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The generated part of the test file, between its markers.
fn input_series() -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{BEGIN} (crates/hystrix-dashboard/tests/prometheus_rules.rs; do not edit)"
    );
    out.push_str("    input_series:\n");
    for (name, values) in generate() {
        let values: Vec<&str> = values.iter().map(|v| v.as_deref().unwrap_or("_")).collect();
        let _ = writeln!(out, "      - series: {}", quoted(&name));
        let _ = writeln!(out, "        values: {}", quoted(&values.join(" ")));
    }
    let _ = writeln!(out, "{END}");
    out
}

#[test]
fn the_rules_test_file_has_the_series_metrics_emits() {
    let committed = std::fs::read_to_string(TEST_FILE).unwrap();
    let begin = committed.find(BEGIN).expect("the BEGIN marker");
    let end = begin + committed[begin..].find(END).expect("the END marker");
    let end = end
        + committed[end..]
            .find('\n')
            .map_or(committed.len() - end, |i| i + 1);
    let regenerated = format!(
        "{}{}{}",
        &committed[..begin],
        input_series(),
        &committed[end..]
    );
    if regenerated == committed {
        return;
    }
    if std::env::var_os("UPDATE_PROMETHEUS_RULES_TEST").is_some_and(|v| v == "1") {
        std::fs::write(TEST_FILE, &regenerated).unwrap();
        return;
    }
    let (line, (want, got)) = regenerated
        .lines()
        .zip(committed.lines())
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .map_or(
            (
                regenerated.lines().count().min(committed.lines().count()),
                ("(end)", "(end)"),
            ),
            |(i, pair)| (i, pair),
        );
    panic!(
        "{TEST_FILE} differs from the series /metrics emits now, first at line {}:\n  \
         committed: {got}\n  generated: {want}\nRun `UPDATE_PROMETHEUS_RULES_TEST=1 cargo test \
         -p hystrix-dashboard --test prometheus_rules` to rewrite its input_series, then \
         check the expected values with `promtool test rules prometheus/*.test.yml`.",
        line + 1
    );
}

/// One scrape of a registry with most features in use, for `promtool check metrics` (run by
/// `scripts/test prometheus` on `<target>/tmp/hystrix-metrics.prom`).
#[test]
fn writes_a_scrape_for_promtool_check_metrics() {
    let test = TestRegistry::new();
    common::drive_mixed(&test);
    common::drive_pooled(&test);
    common::drive_retried(&test);
    common::drive_hedged(&test);
    let _limited = common::drive_limited(&test);
    common::drive_throttled(&test);
    common::drive_slow(&test, "Slow", &[]);
    common::drive_chaos(&test, "Chaotic");
    let ranked = common::ranked_command(&test);
    let held = common::hold_ranked(&test, &ranked);
    let text = Dashboard::builder(test.registry().clone())
        .build()
        .render_metrics();
    drop(held);
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("hystrix-metrics.prom");
    std::fs::write(&path, text).unwrap();
}
