//! The browser tier's fixture (`scripts/test browser`): a real dashboard on 127.0.0.1 at a
//! free port, serving our stream, our page and the admin routes for a registry driven by real
//! commands to known counts.
//!
//! It prints one line of JSON on stdout, `{"url": "http://127.0.0.1:<port>", "plan": {...}}`,
//! where `plan` is what it drove: per command the counts by outcome, the requests, errors,
//! error percentage and rate they make (Hystrix's formulas), the short-circuited calls per
//! second, the retries (RETRY) and retries the budget refused (RETRY_BUDGET_EXHAUSTED), the
//! hedges (HEDGE) and hedged attempts cancelled (HEDGE_CANCELLED) with their rates, the
//! executions the adaptive concurrency limit refused (LIMIT_REJECTED) with their rate, the
//! adaptive limit, its executions in flight and its queue (null for a command without one),
//! the slow calls (SLOW_CALL) with their rate, the slow-call thresholds and the slow calls'
//! percentage (null for a command with slow calls off), the attempts chaos injected into
//! (CHAOS_INJECTED) with their rate and the chaos rates left on (null for a command whose
//! chaos is off), the latencies and the circuit (closed, open or half-open);
//! the thread pool's and the collapser's numbers. Then it serves until its standard input
//! closes (the harness holds it open, so the fixture ends with the harness).
//!
//! The registry runs on a manual clock: the commands run first, each taking an exact time on
//! that clock, then the clock is set to the end of the first 10 s window, so every count and
//! latency is in a completed bucket and stays put while the browsers look; the stream itself
//! ticks in real time. The command with an adaptive limit then holds executions in flight and
//! waiting (polled once, never again) while the fixture serves, so its limit, in-flight and
//! queue numbers are not zeros. Before serving, the fixture checks that the registry counted what it
//! drove, so a page that shows other numbers is the page's (or the stream's) fault.
//!
//! The registry is a `TestRegistry`'s, built with `.allow_chaos(true)`, so one command
//! (ApplyCoupon) can have chaos on.
//!
//! The admin routes are on: with the token in `HYSTRIX_ADMIN_TOKEN` if set, else for loopback
//! peers.
//!
//! The fleet: two more instances (registries driven by real commands of the same names and
//! groups, to other known counts; see [`drive_peer`]), each with its own dashboard on its own
//! 127.0.0.1 port, and a Turbine over the three instances' `/hystrix.stream` with the cluster
//! name `demo`, mounted on the first dashboard (`/turbine.stream?cluster=demo` on its port).
//! The line printed also has `"instances"`: the three instances' `{"url", "plan"}`, the first
//! being the fixture's own. SendEmail is OPEN on all three, GetStock (OPEN) and GetReviews
//! (HALF_OPEN) on the first only.
//!
//! ```sh
//! cargo run -p hystrix-dashboard --example browser_fixture
//! ```

use std::error::Error;
use std::future::Future;
use std::io::{Read, Write};
use std::pin::Pin;
use std::sync::{Arc, mpsc};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use hystrix::clock::Clock;
use hystrix::collapser::{Collapser, CollapserEvent, CollapserScope};
use hystrix::testing::TestRegistry;
use hystrix::{
    Class, Classifier, Command, EventType, FailureType, IsolationStrategy, Outcome, Status,
};
use hystrix_dashboard::Dashboard;
use hystrix_dashboard::turbine::{Instances, Turbine};
use serde::Serialize;

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

/// `metrics.rollingStats.timeInMilliseconds` (the default): rates are per this window.
const WINDOW_MS: u64 = 10_000;

/// The error every failing run returns; `bad` ones are bad requests.
#[derive(Debug)]
struct Boom {
    bad: bool,
}

impl std::fmt::Display for Boom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.bad { "bad request" } else { "boom" })
    }
}

impl Error for Boom {}

type Cmd = Command<Classifier<Boom>>;

/// What one execution did, as its caller saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Ran,
    Fallback(FailureType),
    Error(FailureType),
}

/// A failure answered by the fallback.
const FAILED: Seen = Seen::Fallback(FailureType::CommandException);
/// A timeout answered by the fallback.
const TIMED_OUT: Seen = Seen::Fallback(FailureType::Timeout);
/// A short-circuit answered by the fallback.
const SHORT_CIRCUITED: Seen = Seen::Fallback(FailureType::ShortCircuit);
/// A bad request: the caller gets the error (no fallback).
const BAD_REQUEST: Seen = Seen::Error(FailureType::BadRequest);

/// How a run ends.
#[derive(Debug, Clone, Copy)]
enum End {
    Ok,
    Fail,
    BadRequest,
}

/// The expected latencies of a command, in whole ms.
#[derive(Debug, Default, Clone, Copy, Serialize, PartialEq, Eq)]
struct Latency {
    mean: i64,
    p50: i64,
    p90: i64,
    p99: i64,
    p995: i64,
}

/// Latencies: mean, median, 90th, 99th and 99.5th percentiles.
const fn latencies(mean: i64, p50: i64, p90: i64, p99: i64, p995: i64) -> Latency {
    Latency {
        mean,
        p50,
        p90,
        p99,
        p995,
    }
}

/// What the fixture drove one command to.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct CommandPlan {
    name: &'static str,
    group: &'static str,
    isolation: &'static str,
    success: u64,
    short_circuited: u64,
    bad_request: u64,
    timeout: u64,
    rejected: u64,
    failure: u64,
    /// Hystrix's requestCount: success + failure + timeout + rejected.
    requests: u64,
    errors: u64,
    /// errors × 100 / requests, truncated.
    error_percentage: u64,
    /// requests per second over the window.
    rate: f64,
    /// short-circuited calls per second over the window.
    short_circuit_rate: f64,
    /// RETRY: retries granted.
    retry: u64,
    /// RETRY_BUDGET_EXHAUSTED: retries the retry budget refused.
    retry_budget_exhausted: u64,
    /// retries per second over the window.
    retry_rate: f64,
    /// budget refusals per second over the window.
    retry_budget_exhausted_rate: f64,
    /// HEDGE: attempts started beside one still running after the hedging delay.
    hedge: u64,
    /// HEDGE_CANCELLED: attempts cancelled because another attempt answered first.
    hedge_cancelled: u64,
    /// hedges per second over the window.
    hedge_rate: f64,
    /// cancelled hedged attempts per second over the window.
    hedge_cancelled_rate: f64,
    /// LIMIT_REJECTED: executions the adaptive concurrency limit refused.
    limit_rejected: u64,
    /// refusals by the adaptive limit per second over the window.
    limit_rejected_rate: f64,
    /// The adaptive limit while the browsers look; `None` (null) without adaptive limits.
    adaptive: Option<AdaptivePlan>,
    /// SLOW_CALL: attempts slower than the slow-call threshold.
    slow_call: u64,
    /// slow calls per second over the window.
    slow_call_rate: f64,
    /// The slow-call health and thresholds; `None` (null) while slow calls are off.
    slow_calls: Option<SlowCallPlan>,
    /// CHAOS_INJECTED: attempts chaos injected a fault, a delay or a hang into.
    chaos_injected: u64,
    /// chaos injections per second over the window.
    chaos_injected_rate: f64,
    /// The chaos rates left on; `None` (null) while chaos is off.
    chaos: Option<ChaosPlan>,
    latency: Latency,
    /// "closed", "open" or "half-open".
    circuit: &'static str,
}

impl CommandPlan {
    fn new(name: &'static str, group: &'static str) -> Self {
        CommandPlan {
            name,
            group,
            isolation: "SEMAPHORE",
            circuit: "closed",
            ..CommandPlan::default()
        }
    }

    /// Fills in the derived numbers from the counts.
    fn derive(mut self) -> Self {
        self.errors = self.failure + self.timeout + self.rejected;
        self.requests = self.success + self.errors;
        self.error_percentage = (self.errors * 100).checked_div(self.requests).unwrap_or(0);
        let per_second = |count: u64| count as f64 / (WINDOW_MS as f64 / 1000.0);
        self.rate = per_second(self.requests);
        self.short_circuit_rate = per_second(self.short_circuited);
        self.retry_rate = per_second(self.retry);
        self.retry_budget_exhausted_rate = per_second(self.retry_budget_exhausted);
        self.hedge_rate = per_second(self.hedge);
        self.hedge_cancelled_rate = per_second(self.hedge_cancelled);
        self.limit_rejected_rate = per_second(self.limit_rejected);
        self.slow_call_rate = per_second(self.slow_call);
        self.chaos_injected_rate = per_second(self.chaos_injected);
        if let Some(slow) = &mut self.slow_calls {
            slow.percentage = (self.slow_call * 100)
                .checked_div(self.requests)
                .unwrap_or(0);
        }
        self
    }
}

/// A command's slow calls: its two thresholds and the slow calls' percentage of its requests
/// (derived).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
struct SlowCallPlan {
    duration_threshold_ms: u64,
    rate_threshold_percentage: u32,
    percentage: u64,
}

/// A command's chaos properties as the fixture leaves them (chaos on).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct ChaosPlan {
    fault_rate_percentage: f64,
    latency_rate_percentage: f64,
    latency_ms: u64,
    hang_rate_percentage: f64,
}

/// A command's adaptive concurrency limit as the fixture leaves it.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
struct AdaptivePlan {
    limit: u32,
    in_flight: u32,
    queued: u32,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PoolPlan {
    name: &'static str,
    active: u32,
    queued: u32,
    pool_size: u32,
    max_active: u64,
    executions: u64,
    rejections: u64,
    queue_size: i32,
    rate: f64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CollapserPlan {
    name: &'static str,
    batches: u64,
    requests_batched: u64,
    latency: Latency,
}

#[derive(Debug, Serialize)]
struct Plan {
    commands: Vec<CommandPlan>,
    pools: Vec<PoolPlan>,
    collapsers: Vec<CollapserPlan>,
}

macro_rules! check {
    ($what:expr, $got:expr, $want:expr) => {{
        let (got, want) = ($got, $want);
        if got != want {
            return Err(format!(
                "{}: the registry has {:?}, the fixture drove {:?}",
                $what, got, want
            )
            .into());
        }
    }};
}

/// A SEMAPHORE command whose `Boom { bad: true }` errors are bad requests.
fn command(
    test: &TestRegistry,
    key: &str,
    group: &str,
    configure: impl FnOnce(hystrix::CommandBuilder) -> hystrix::CommandBuilder,
) -> Result<Cmd> {
    Ok(configure(
        Command::builder(key)
            .group(group)
            .isolation(IsolationStrategy::Semaphore),
    )
    .classify(|e: &Boom| {
        if e.bad {
            Class::BadRequest
        } else {
            Class::Failure
        }
    })
    .build_in(test.registry())?)
}

/// One execution taking `ms` on the fixture's clock, ending as `end`, with a fallback.
fn execute(test: &TestRegistry, cmd: &Cmd, ms: u64, end: End) -> Seen {
    let clock = test.clock().clone();
    cmd.run(move || {
        clock.advance_ms(ms);
        match end {
            End::Ok => Ok(Seen::Ran),
            End::Fail => Err(Boom { bad: false }),
            End::BadRequest => Err(Boom { bad: true }),
        }
    })
    .fallback(|e| Ok::<_, Boom>(Seen::Fallback(e.failure_type())))
    .execute()
    .unwrap_or_else(|e| Seen::Error(e.failure_type()))
}

/// `times` executions as [`execute`], each of which must be seen as `want`.
fn drive(test: &TestRegistry, cmd: &Cmd, times: u64, ms: u64, end: End, want: Seen) -> Result<()> {
    for i in 0..times {
        let seen = execute(test, cmd, ms, end);
        if seen != want {
            return Err(format!("{} run {i}: {seen:?}, expected {want:?}", cmd.key()).into());
        }
    }
    Ok(())
}

/// `times` retryable executions of `cmd` (its `retry.*` properties), each attempt taking `ms`
/// on the fixture's clock and ending as `script` says (attempt n as `script[n]`; a failure past
/// its end), with a fallback; each must end with the events `want` (the request log's form,
/// e.g. `SUCCESS, FAILUREx2, RETRYx2`).
fn drive_retryable(
    test: &TestRegistry,
    cmd: &Cmd,
    times: u64,
    ms: u64,
    script: &'static [End],
    want: &str,
) -> Result<()> {
    for i in 0..times {
        let clock = test.clock().clone();
        let mut attempt = 0;
        let outcome = cmd
            .run_retryable(move || {
                let end = script.get(attempt).copied().unwrap_or(End::Fail);
                attempt += 1;
                let clock = clock.clone();
                move || {
                    clock.advance_ms(ms);
                    match end {
                        End::Ok => Ok(Seen::Ran),
                        End::Fail => Err(Boom { bad: false }),
                        End::BadRequest => Err(Boom { bad: true }),
                    }
                }
            })
            .fallback(|e| Ok::<_, Boom>(Seen::Fallback(e.failure_type())))
            .execute_outcome();
        let events = outcome.execution_result().execution_events().to_string();
        if events != want {
            return Err(format!("{} run {i}: {events}, expected {want}", cmd.key()).into());
        }
    }
    Ok(())
}

/// Drives `future` on the fixture's clock: polls it, and while it waits moves the clock to its
/// next timer (the attempts' sleeps, the hedging delay), so each execution takes an exact time.
fn on_clock<F: Future>(test: &TestRegistry, future: F) -> Result<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return Ok(output);
        }
        if test.clock().advance_to_next_timer().is_none() {
            return Err("an execution waits with no timer on the fixture's clock".into());
        }
    }
}

/// An async execution of a fixture command, not yet ended.
type Execution<'c> = Pin<Box<dyn Future<Output = Outcome<Seen, Boom>> + 'c>>;

/// An execution of `cmd` whose async run sleeps `ms` on the fixture's clock, then succeeds;
/// with a fallback.
fn sleeping<'c>(test: &TestRegistry, cmd: &'c Cmd, ms: u64) -> Execution<'c> {
    let clock = Arc::clone(test.registry().clock());
    Box::pin(
        cmd.run_async(async move {
            hystrix::clock::sleep(&clock, Duration::from_millis(ms)).await;
            Ok::<_, Boom>(Seen::Ran)
        })
        .fallback(|e| Ok::<_, Boom>(Seen::Fallback(e.failure_type())))
        .execute_async_outcome(),
    )
}

/// An execution as [`sleeping`], polled once: it must still be running or waiting for a place.
fn held<'c>(test: &TestRegistry, cmd: &'c Cmd, ms: u64) -> Result<Execution<'c>> {
    let mut execution = sleeping(test, cmd, ms);
    let mut cx = Context::from_waker(Waker::noop());
    if execution.as_mut().poll(&mut cx).is_ready() {
        return Err(format!("an execution of {} ended at its first poll", cmd.key()).into());
    }
    Ok(execution)
}

/// Drives `execution` to its end on the fixture's clock; it must end with the events `want`.
fn ends_as(test: &TestRegistry, cmd: &Cmd, execution: Execution<'_>, want: &str) -> Result<()> {
    let outcome = on_clock(test, execution)?;
    let events = outcome.execution_result().execution_events().to_string();
    if events != want {
        return Err(format!("{}: {events}, expected {want}", cmd.key()).into());
    }
    Ok(())
}

/// ChargeCard's executions held while the fixture serves: its adaptive limit of 4 full (4 in
/// flight, their runs sleeping 60 s of a clock that no longer moves) and one more waiting for
/// a place (`maxWaitInMilliseconds` set to 1 s at run time, a wait that never ends either).
/// Nothing of them is counted until they end, and they never do.
fn hold_at_the_limit<'c>(test: &TestRegistry, cmd: &'c Cmd) -> Result<Vec<Execution<'c>>> {
    test.registry().properties().set(
        "hystrix.command.ChargeCard.execution.isolation.adaptive.maxWaitInMilliseconds",
        1_000,
    )?;
    (0..5).map(|_| held(test, cmd, 60_000)).collect()
}

/// `times` hedged executions of `cmd` (its `hedging.*` properties) through
/// `run_async_retryable`, driven on the fixture's clock: attempt n (0 for the first) sleeps
/// `script[n].0` ms of it, then ends as `script[n].1` (a failure past the script's end),
/// answering n. Each must end with the events `want` (the request log's form, e.g.
/// `SUCCESS, HEDGE, HEDGE_CANCELLED`) and the answer of attempt `winner`.
fn drive_hedged(
    test: &TestRegistry,
    cmd: &Cmd,
    times: u64,
    script: &'static [(u64, End)],
    want: &str,
    winner: usize,
) -> Result<()> {
    for i in 0..times {
        let clock = Arc::clone(test.registry().clock());
        let mut attempt = 0;
        let execution = cmd
            .run_async_retryable(move || {
                let n = attempt;
                attempt += 1;
                let (ms, end) = script.get(n).copied().unwrap_or((0, End::Fail));
                let clock = Arc::clone(&clock);
                async move {
                    hystrix::clock::sleep(&clock, Duration::from_millis(ms)).await;
                    match end {
                        End::Ok => Ok(n),
                        End::Fail => Err(Boom { bad: false }),
                        End::BadRequest => Err(Boom { bad: true }),
                    }
                }
            })
            .execute_async_outcome();
        let outcome = on_clock(test, execution)?;
        let events = outcome.execution_result().execution_events().to_string();
        let answer = outcome.response().as_ref().ok().copied();
        if events != want || answer != Some(winner) {
            return Err(format!(
                "{} run {i}: {events}, answered by attempt {answer:?}; expected {want}, \
                 answered by attempt {winner}",
                cmd.key()
            )
            .into());
        }
    }
    Ok(())
}

/// Trips `cmd`'s breaker: `successes` then `failures` taking `ms` each; the breaker sees them
/// when their health bucket (500 ms) ends; then `short_circuited` calls must be short-circuited.
fn trip(
    test: &TestRegistry,
    cmd: &Cmd,
    successes: u64,
    failures: u64,
    ms: u64,
    short_circuited: u64,
) -> Result<()> {
    drive(test, cmd, successes, ms, End::Ok, Seen::Ran)?;
    drive(test, cmd, failures, ms, End::Fail, FAILED)?;
    test.clock().advance_ms(500);
    if !cmd.is_circuit_breaker_open() {
        return Err(format!(
            "{}'s circuit did not open after {failures} failures in {} requests",
            cmd.key(),
            successes + failures
        )
        .into());
    }
    drive(test, cmd, short_circuited, 0, End::Ok, SHORT_CIRCUITED)
}

/// Polls `done` every millisecond for at most 5 s (real time).
fn wait_for(what: &str, mut done: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}").into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Holds `held` executions of `cmd` running (each blocked in its run on another thread until
/// released), runs `times` more that must be seen as `want`, then releases the held ones
/// (which succeed, taking 0 ms on the clock).
fn while_held(
    test: &TestRegistry,
    cmd: &Cmd,
    held: u32,
    busy: impl Fn() -> bool,
    times: u64,
    want: Seen,
) -> Result<()> {
    let mut releases = Vec::new();
    let mut threads = Vec::new();
    for _ in 0..held {
        let (release, wait) = mpsc::channel::<()>();
        let cmd = cmd.clone();
        threads.push(std::thread::spawn(move || {
            cmd.run(move || {
                let _ = wait.recv();
                Ok::<_, Boom>(Seen::Ran)
            })
            .execute()
            .unwrap_or_else(|e| Seen::Error(e.failure_type()))
        }));
        releases.push(release);
    }
    wait_for(&format!("{held} held executions of {}", cmd.key()), busy)?;
    drive(test, cmd, times, 0, End::Ok, want)?;
    drop(releases);
    for thread in threads {
        let seen = thread
            .join()
            .map_err(|_| format!("a held run of {} panicked", cmd.key()))?;
        check!(format!("held run of {}", cmd.key()), seen, Seen::Ran);
    }
    Ok(())
}

/// Drives every command; returns the plan (to check against the registry once ChargeCard's
/// executions are held) and ChargeCard, the command with an adaptive limit.
fn drive_all(test: &TestRegistry, runtime: &tokio::runtime::Runtime) -> Result<(Plan, Cmd)> {
    let registry = test.registry();
    let mut commands = Vec::new();

    // GetUser: 200 successes; latencies chosen for distinct percentiles.
    let get_user = command(test, "GetUser", "Users", |b| b)?;
    for (ms, times) in [(4, 120), (12, 70), (30, 6), (80, 2), (150, 2)] {
        drive(test, &get_user, times, ms, End::Ok, Seen::Ran)?;
    }
    commands.push(
        CommandPlan {
            success: 200,
            latency: latencies(9, 4, 12, 80, 150),
            ..CommandPlan::new("GetUser", "Users")
        }
        .derive(),
    );

    // SaveOrder: successes, failures answered by the fallback, bad requests (no fallback).
    let save_order = command(test, "SaveOrder", "Orders", |b| b)?;
    drive(test, &save_order, 30, 7, End::Ok, Seen::Ran)?;
    drive(test, &save_order, 10, 7, End::Fail, FAILED)?;
    drive(test, &save_order, 2, 7, End::BadRequest, BAD_REQUEST)?;
    commands.push(
        CommandPlan {
            success: 30,
            failure: 10,
            bad_request: 2,
            latency: latencies(7, 7, 7, 7, 7),
            ..CommandPlan::new("SaveOrder", "Orders")
        }
        .derive(),
    );

    // GetPrices: 50 ms timeout; 16 runs of 10 ms, 4 of 80 ms that time out (a blocking run on
    // the caller's thread returns at 80 ms: its execution latency is the 80 ms it ran).
    let get_prices = command(test, "GetPrices", "Catalog", |b| {
        b.timeout(Duration::from_millis(50))
    })?;
    drive(test, &get_prices, 16, 10, End::Ok, Seen::Ran)?;
    drive(test, &get_prices, 4, 80, End::Ok, TIMED_OUT)?;
    commands.push(
        CommandPlan {
            success: 16,
            timeout: 4,
            latency: latencies(24, 10, 80, 80, 80),
            ..CommandPlan::new("GetPrices", "Catalog")
        }
        .derive(),
    );

    // GetRecommendations: slow calls on, over 50 ms, tripping at 50 %; 20 runs of 10 ms, then
    // 5 of 60 ms that succeed but are slow (SLOW_CALL): 20 % of its 25 requests, so the
    // circuit stays closed.
    let get_recommendations = command(test, "GetRecommendations", "Recommendations", |b| {
        b.property(
            "circuitBreaker.slowCall.durationThresholdInMilliseconds",
            50,
        )
        .property("circuitBreaker.slowCall.rateThresholdPercentage", 50)
    })?;
    drive(test, &get_recommendations, 20, 10, End::Ok, Seen::Ran)?;
    drive(test, &get_recommendations, 5, 60, End::Ok, Seen::Ran)?;
    commands.push(
        CommandPlan {
            success: 25,
            slow_call: 5,
            slow_calls: Some(SlowCallPlan {
                duration_threshold_ms: 50,
                rate_threshold_percentage: 50,
                ..SlowCallPlan::default()
            }),
            latency: latencies(20, 10, 60, 60, 60),
            ..CommandPlan::new("GetRecommendations", "Recommendations")
        }
        .derive(),
    );

    // ApplyCoupon: chaos on (the fixture's registry allows it). First at a fault rate of
    // 100 %: 3 executions whose run is replaced by an injected fault, answered by the fallback
    // (FAILURE, CHAOS_INJECTED); then at 0 % (on, injecting nothing): 23 runs of 40 ms. 26
    // requests, 3 errors (11 %), CHAOS_INJECTED 3 (0.3/s). Then chaos is left on at a fault
    // rate of 10 %, a latency rate of 20 % of 100 ms and a hang rate of 5 %, the numbers the
    // pages show; the command runs no more, so nothing more is injected.
    let apply_coupon = command(test, "ApplyCoupon", "Promotions", |b| {
        b.property("chaos.enabled", true)
            .property("chaos.fault.ratePercentage", 100)
    })?;
    drive(
        test,
        &apply_coupon,
        3,
        40,
        End::Ok,
        Seen::Fallback(FailureType::InjectedFault),
    )?;
    let chaos = |name: &str, value: hystrix::PropertyValue| {
        registry
            .properties()
            .set(&format!("hystrix.command.ApplyCoupon.{name}"), value)
    };
    chaos("chaos.fault.ratePercentage", 0.into())?;
    drive(test, &apply_coupon, 23, 40, End::Ok, Seen::Ran)?;
    let left_on = ChaosPlan {
        fault_rate_percentage: 10.0,
        latency_rate_percentage: 20.0,
        latency_ms: 100,
        hang_rate_percentage: 5.0,
    };
    chaos(
        "chaos.fault.ratePercentage",
        left_on.fault_rate_percentage.into(),
    )?;
    chaos(
        "chaos.latency.ratePercentage",
        left_on.latency_rate_percentage.into(),
    )?;
    chaos("chaos.latency.inMilliseconds", left_on.latency_ms.into())?;
    chaos(
        "chaos.hang.ratePercentage",
        left_on.hang_rate_percentage.into(),
    )?;
    commands.push(
        CommandPlan {
            success: 23,
            failure: 3,
            chaos_injected: 3,
            chaos: Some(left_on),
            latency: latencies(35, 40, 40, 40, 40),
            ..CommandPlan::new("ApplyCoupon", "Promotions")
        }
        .derive(),
    );

    // GetAvatar: one permit; 13 runs of 4 ms, then 6 rejected while one run holds the permit.
    let get_avatar = command(test, "GetAvatar", "Users", |b| {
        b.semaphore_max_concurrent_requests(1)
    })?;
    drive(test, &get_avatar, 13, 4, End::Ok, Seen::Ran)?;
    let avatar_metrics = || registry.command_metrics("GetAvatar");
    while_held(
        test,
        &get_avatar,
        1,
        || avatar_metrics().is_some_and(|m| m.current_concurrent_execution_count() == 1),
        6,
        Seen::Fallback(FailureType::RejectedSemaphoreExecution),
    )?;
    commands.push(
        CommandPlan {
            success: 14,
            rejected: 6,
            latency: latencies(3, 4, 4, 4, 4),
            ..CommandPlan::new("GetAvatar", "Users")
        }
        .derive(),
    );

    // CheckInventory: THREAD on InventoryPool (2 threads, hand-off queue): 2 runs hold both
    // threads while 3 are rejected, then 13 runs of 5 ms.
    let check_inventory = command(test, "CheckInventory", "Inventory", |b| {
        b.isolation(IsolationStrategy::Thread)
            .thread_pool_key("InventoryPool")
            .thread_pool_core_size(2)
    })?;
    let pool_active = || {
        registry
            .thread_pool_metrics("InventoryPool")
            .is_some_and(|m| m.current_active_count == 2)
    };
    while_held(
        test,
        &check_inventory,
        2,
        pool_active,
        3,
        Seen::Fallback(FailureType::RejectedThreadExecution),
    )?;
    drive(test, &check_inventory, 13, 5, End::Ok, Seen::Ran)?;
    commands.push(
        CommandPlan {
            isolation: "THREAD",
            success: 15,
            rejected: 3,
            latency: latencies(4, 5, 5, 5, 5),
            ..CommandPlan::new("CheckInventory", "Inventory")
        }
        .derive(),
    );
    let pool = PoolPlan {
        name: "InventoryPool",
        active: 0,
        queued: 0,
        pool_size: 2,
        max_active: 2,
        executions: 15,
        rejections: 3,
        queue_size: 5,
        rate: 15.0 / (WINDOW_MS as f64 / 1000.0),
    };

    // SendEmail: trips at 5 requests; 8 failures of 2 ms, then 5 calls are short-circuited.
    // The sleep window is an hour, so the circuit stays open.
    let send_email = command(test, "SendEmail", "Notifications", |b| {
        b.circuit_breaker_request_volume_threshold(5)
            .circuit_breaker_sleep_window(Duration::from_secs(3600))
    })?;
    trip(test, &send_email, 0, 8, 2, 5)?;
    commands.push(
        CommandPlan {
            failure: 8,
            short_circuited: 5,
            latency: latencies(2, 2, 2, 2, 2),
            circuit: "open",
            ..CommandPlan::new("SendEmail", "Notifications")
        }
        .derive(),
    );

    // GetStock: trips at 10 % errors (27 successes and 3 failures of 6 ms), then 25 calls are
    // short-circuited; the sleep window is an hour. OPEN, yet its error percentage is only 10:
    // short-circuited calls are not requests.
    let get_stock = command(test, "GetStock", "Inventory", |b| {
        b.circuit_breaker_error_threshold_percentage(10)
            .circuit_breaker_sleep_window(Duration::from_secs(3600))
    })?;
    trip(test, &get_stock, 27, 3, 6, 25)?;
    commands.push(
        CommandPlan {
            success: 27,
            failure: 3,
            short_circuited: 25,
            latency: latencies(6, 6, 6, 6, 6),
            circuit: "open",
            ..CommandPlan::new("GetStock", "Inventory")
        }
        .derive(),
    );

    // GetReviews: trips at 10 % errors (18 successes and 2 failures of 8 ms), 10 calls are
    // short-circuited, then after its 1000 ms sleep window one trial succeeds: it needs two
    // (of two let through) to close, so it stays HALF_OPEN.
    let get_reviews = command(test, "GetReviews", "Ratings", |b| {
        b.circuit_breaker_error_threshold_percentage(10)
            .circuit_breaker_sleep_window(Duration::from_millis(1000))
            .property("circuitBreaker.halfOpen.permittedRequests", 2)
            .property("circuitBreaker.halfOpen.successThreshold", 2)
    })?;
    trip(test, &get_reviews, 18, 2, 8, 10)?;
    test.clock().advance_ms(1001);
    drive(test, &get_reviews, 1, 8, End::Ok, Seen::Ran)?;
    commands.push(
        CommandPlan {
            success: 19,
            failure: 2,
            short_circuited: 10,
            latency: latencies(8, 8, 8, 8, 8),
            circuit: "half-open",
            ..CommandPlan::new("GetReviews", "Ratings")
        }
        .derive(),
    );

    // GetShipping: retries through `run_retryable`, 3 attempts, no backoff delay, a budget of
    // exactly 10 retries in the window (no share of requests, 1 per second of 10 s). Attempts
    // take 5 ms. 20 succeed at once; 4 fail twice then succeed (8 retries); 1 fails three
    // times (2 retries, the budget's last: fallback after its last attempt); 2 fail once and
    // the budget refuses their retry (RETRY_BUDGET_EXHAUSTED, fallback). Each attempt is a
    // request: 24 successes and 13 failures. Successes first, so the error percentage never
    // reaches the breaker's 50 %.
    let get_shipping = command(test, "GetShipping", "Shipping", |b| {
        b.property("retry.maxAttempts", 3)
            .property("retry.backoff.initialInMilliseconds", 0)
            .property("retry.budget.percent", 0)
            .property("retry.budget.minPerSecond", 1)
    })?;
    drive_retryable(test, &get_shipping, 20, 5, &[End::Ok], "SUCCESS")?;
    drive_retryable(
        test,
        &get_shipping,
        4,
        5,
        &[End::Fail, End::Fail, End::Ok],
        "SUCCESS, FAILUREx2, RETRYx2",
    )?;
    drive_retryable(
        test,
        &get_shipping,
        1,
        5,
        &[End::Fail, End::Fail, End::Fail],
        "FAILUREx3, FALLBACK_SUCCESS, RETRYx2",
    )?;
    drive_retryable(
        test,
        &get_shipping,
        2,
        5,
        &[End::Fail, End::Ok],
        "FAILURE, FALLBACK_SUCCESS, RETRY_BUDGET_EXHAUSTED",
    )?;
    commands.push(
        CommandPlan {
            success: 24,
            failure: 13,
            retry: 10,
            retry_budget_exhausted: 2,
            latency: latencies(5, 5, 5, 5, 5),
            ..CommandPlan::new("GetShipping", "Shipping")
        }
        .derive(),
    );

    // SearchProducts: hedged async runs through `run_async_retryable`, `hedging.maxAttempts` 2
    // (one hedge at most) after a fixed delay of 20 ms; the default retry budget, which hedges
    // spend, grants every hedge. Attempts sleep on the fixture's clock.
    // - 24 answer in 9 ms, before the delay: no hedge.
    // - 4 first attempts take 100 ms; the hedge started at 20 ms answers 15 ms later and wins,
    //   the first attempt is cancelled (SUCCESS, HEDGE, HEDGE_CANCELLED).
    // - 2 first attempts answer at 30 ms, before their hedge (started at 20 ms, 40 ms long):
    //   the hedge loses and is cancelled (SUCCESS, HEDGE, HEDGE_CANCELLED).
    // - 2 first attempts fail at 30 ms; their hedge (started at 20 ms, 20 ms long) wins and
    //   nothing is cancelled (SUCCESS, FAILURE, HEDGE).
    // In all 8 hedges (6 won, 2 lost) and 6 attempts cancelled, so the two counts differ. Each
    // attempt that ends is a request, a cancelled one is not: 32 successes, 2 failures. The
    // execution latency is the winning attempt's run: 9 ms 24 times, 15 ms 4 times, 20 ms and
    // 30 ms twice each (mean 11.75, truncated to 11).
    let search_products = command(test, "SearchProducts", "Search", |b| {
        b.property("hedging.maxAttempts", 2)
            .property("hedging.delayInMilliseconds", 20)
    })?;
    drive_hedged(test, &search_products, 24, &[(9, End::Ok)], "SUCCESS", 0)?;
    drive_hedged(
        test,
        &search_products,
        4,
        &[(100, End::Ok), (15, End::Ok)],
        "SUCCESS, HEDGE, HEDGE_CANCELLED",
        1,
    )?;
    drive_hedged(
        test,
        &search_products,
        2,
        &[(30, End::Ok), (40, End::Ok)],
        "SUCCESS, HEDGE, HEDGE_CANCELLED",
        0,
    )?;
    drive_hedged(
        test,
        &search_products,
        2,
        &[(30, End::Fail), (20, End::Ok)],
        "SUCCESS, FAILURE, HEDGE",
        1,
    )?;
    commands.push(
        CommandPlan {
            success: 32,
            failure: 2,
            hedge: 8,
            hedge_cancelled: 6,
            latency: latencies(11, 9, 20, 30, 30),
            ..CommandPlan::new("SearchProducts", "Search")
        }
        .derive(),
    );

    // ChargeCard: an adaptive concurrency limit (AIMD from 2; maxConcurrentRequests 100, far
    // above it), async runs sleeping on the fixture's clock. Two runs of 10 ms fill the limit;
    // three more are refused by it at once and answered by the fallback (LIMIT_REJECTED,
    // FALLBACK_SUCCESS: not requests, not errors); the two end, each a sample whose in-flight
    // count at its admission (itself included) is at least half the limit, 1 of 2 then 2 of 3,
    // so AIMD adds 1 twice: the limit is 4. In all 2 successes of 10 ms, LIMIT_REJECTED 3
    // (0.3/s). While the fixture serves, 4 executions
    // hold the limit and 1 waits for a place (hold_at_the_limit): limit 4, in flight 4, queued
    // 1.
    let charge_card = command(test, "ChargeCard", "Payments", |b| {
        b.semaphore_max_concurrent_requests(100)
            .property("execution.isolation.adaptive.enabled", true)
            .property("execution.isolation.adaptive.algorithm", "AIMD")
            .property("execution.isolation.adaptive.initialLimit", 2)
            // One sample per execution (the default window is 20 executions).
            .property("execution.isolation.adaptive.windowSize", 1)
    })?;
    let first = held(test, &charge_card, 10)?;
    let second = held(test, &charge_card, 10)?;
    for _ in 0..3 {
        let refused = sleeping(test, &charge_card, 10);
        ends_as(
            test,
            &charge_card,
            refused,
            "FALLBACK_SUCCESS, LIMIT_REJECTED",
        )?;
    }
    test.clock().advance_ms(10);
    for execution in [first, second] {
        ends_as(test, &charge_card, execution, "SUCCESS")?;
    }
    commands.push(
        CommandPlan {
            success: 2,
            limit_rejected: 3,
            adaptive: Some(AdaptivePlan {
                limit: 4,
                in_flight: 4,
                queued: 1,
            }),
            latency: latencies(10, 10, 10, 10, 10),
            ..CommandPlan::new("ChargeCard", "Payments")
        }
        .derive(),
    );

    // GetRating: a collapser over the batch command GetRatings; batches of 2, 3 and 5.
    let get_ratings = command(test, "GetRatings", "Ratings", |b| b)?;
    let get_rating = Collapser::builder("GetRating")
        .scope(CollapserScope::Global)
        .build(
            get_ratings,
            |ids: Vec<u32>| async move {
                Ok::<_, Boom>(
                    ids.iter()
                        .map(|&id| (id, id * 10))
                        .collect::<std::collections::HashMap<_, _>>(),
                )
            },
            |ratings: &mut std::collections::HashMap<u32, u32>, id: &u32| ratings.remove(id),
        )?;
    for batch in [2u32, 3, 5] {
        let answers: Vec<_> = (0..batch).map(|id| get_rating.queue(id)).collect();
        test.clock().advance_ms(10);
        runtime.block_on(async {
            for (id, answer) in (0..batch).zip(answers) {
                match tokio::time::timeout(Duration::from_secs(5), answer).await {
                    Ok(Ok(rating)) if *rating == id * 10 => {}
                    other => return Err(format!("GetRating({id}): {other:?}")),
                }
            }
            Ok(())
        })?;
    }
    commands.push(
        CommandPlan {
            success: 3,
            ..CommandPlan::new("GetRatings", "Ratings")
        }
        .derive(),
    );
    let collapser = CollapserPlan {
        name: "GetRating",
        batches: 3,
        requests_batched: 10,
        latency: latencies(3, 3, 5, 5, 5),
    };

    // Every bucket complete, all inside the first window.
    let now = test.clock().now_ms();
    if now >= WINDOW_MS {
        return Err(format!("the drive took {now} ms of the clock, more than one window").into());
    }
    test.clock().advance_ms(WINDOW_MS - now);

    let plan = Plan {
        commands,
        pools: vec![pool],
        collapsers: vec![collapser],
    };
    Ok((plan, charge_card))
}

/// The fleet's commands, as the first instance has them: name, group, and whether it runs
/// in a thread pool (InventoryPool, as the first instance's CheckInventory).
const FLEET: [(&str, &str, bool); 14] = [
    ("GetUser", "Users", false),
    ("SaveOrder", "Orders", false),
    ("GetPrices", "Catalog", false),
    ("GetRecommendations", "Recommendations", false),
    ("ApplyCoupon", "Promotions", false),
    ("GetAvatar", "Users", false),
    ("CheckInventory", "Inventory", true),
    ("SendEmail", "Notifications", false),
    ("GetStock", "Inventory", false),
    ("GetReviews", "Ratings", false),
    ("GetShipping", "Shipping", false),
    ("SearchProducts", "Search", false),
    ("ChargeCard", "Payments", false),
    ("GetRatings", "Ratings", false),
];

/// Instance `k` (2 or 3) of the cluster: its registry driven by real commands of the first
/// instance's names and groups to other known counts. Command `i` of [`FLEET`]: `10·k + i`
/// successes then `(i + k) mod 3` failures (answered by the fallback), each taking
/// `1 + k + (i mod 5)` ms, so its latencies are that many ms; SendEmail instead trips as on the
/// first instance (volume threshold 5, sleep window an hour): `5 + k` failures of `2 + k` ms,
/// then `k` calls short-circuited, so it is OPEN on every instance, while GetStock and
/// GetReviews (OPEN and HALF_OPEN on the first) are CLOSED here. CheckInventory runs on
/// InventoryPool (2 threads), one run at a time. Then the clock is set to the end of the
/// first window, as on the first instance.
fn drive_peer(test: &TestRegistry, k: u64) -> Result<Plan> {
    let mut commands = Vec::new();
    let mut pools = Vec::new();
    for (i, &(name, group, thread)) in (0u64..).zip(FLEET.iter()) {
        let mut plan = CommandPlan::new(name, group);
        if name == "SendEmail" {
            let cmd = command(test, name, group, |b| {
                b.circuit_breaker_request_volume_threshold(5)
                    .circuit_breaker_sleep_window(Duration::from_secs(3600))
            })?;
            let ms = 2 + k;
            trip(test, &cmd, 0, 5 + k, ms, k)?;
            plan.failure = 5 + k;
            plan.short_circuited = k;
            plan.latency = latencies(ms as i64, ms as i64, ms as i64, ms as i64, ms as i64);
            plan.circuit = "open";
            commands.push(plan.derive());
            continue;
        }
        let cmd = command(test, name, group, |b| {
            if thread {
                b.isolation(IsolationStrategy::Thread)
                    .thread_pool_key("InventoryPool")
                    .thread_pool_core_size(2)
            } else {
                b
            }
        })?;
        let ms = 1 + k + i % 5;
        let (successes, failures) = (10 * k + i, (i + k) % 3);
        drive(test, &cmd, successes, ms, End::Ok, Seen::Ran)?;
        drive(test, &cmd, failures, ms, End::Fail, FAILED)?;
        plan.success = successes;
        plan.failure = failures;
        plan.latency = latencies(ms as i64, ms as i64, ms as i64, ms as i64, ms as i64);
        if thread {
            plan.isolation = "THREAD";
            let executions = successes + failures;
            pools.push(PoolPlan {
                name: "InventoryPool",
                active: 0,
                queued: 0,
                pool_size: 2,
                max_active: 1,
                executions,
                rejections: 0,
                queue_size: 5,
                rate: executions as f64 / (WINDOW_MS as f64 / 1000.0),
            });
        }
        commands.push(plan.derive());
    }
    let now = test.clock().now_ms();
    if now >= WINDOW_MS {
        return Err(format!("instance {k}'s drive took {now} ms of the clock").into());
    }
    test.clock().advance_ms(WINDOW_MS - now);
    Ok(Plan {
        commands,
        pools,
        collapsers: Vec::new(),
    })
}

/// The registry counted what the fixture drove.
fn check_registry(test: &TestRegistry, plan: &Plan) -> Result<()> {
    let registry = test.registry();
    for want in &plan.commands {
        let name = want.name;
        let metrics = registry
            .command_metrics(name)
            .ok_or_else(|| format!("no metrics for {name}"))?;
        let count = |event| metrics.rolling_count(event);
        for (event, want) in [
            (EventType::Success, want.success),
            (EventType::ShortCircuited, want.short_circuited),
            (EventType::BadRequest, want.bad_request),
            (EventType::Timeout, want.timeout),
            (EventType::Failure, want.failure),
            (EventType::Retry, want.retry),
            (EventType::RetryBudgetExhausted, want.retry_budget_exhausted),
            (EventType::Hedge, want.hedge),
            (EventType::HedgeCancelled, want.hedge_cancelled),
            (EventType::LimitRejected, want.limit_rejected),
            (EventType::SlowCall, want.slow_call),
            (EventType::ChaosInjected, want.chaos_injected),
        ] {
            check!(format!("{name} {event:?}"), count(event), want);
        }
        check!(
            format!("{name} rejected"),
            count(EventType::ThreadPoolRejected) + count(EventType::SemaphoreRejected),
            want.rejected
        );
        let health = metrics.health_counts();
        check!(
            format!("{name} requests"),
            health.total_requests,
            want.requests
        );
        check!(format!("{name} errors"), health.error_count, want.errors);
        if let Some(slow) = want.slow_calls {
            check!(
                format!("{name} slow calls"),
                (
                    health.slow_call_count,
                    u64::from(health.slow_call_percentage)
                ),
                (want.slow_call, slow.percentage)
            );
        }
        check!(
            format!("{name} error percentage"),
            u64::from(health.error_percentage),
            want.error_percentage
        );
        let latency = metrics.execution_latency();
        check!(
            format!("{name} latency"),
            Latency {
                mean: latency.mean,
                p50: latency.p50,
                p90: latency.p90,
                p99: latency.p99,
                p995: latency.p99_5,
            },
            want.latency
        );
        let status = match registry.circuit_breaker(name).map(|b| b.status()) {
            Some(Status::Open) => "open",
            Some(Status::HalfOpen) => "half-open",
            _ => "closed",
        };
        check!(format!("{name} circuit"), status, want.circuit);
        let adaptive = metrics.adaptive_limit().map(|a| AdaptivePlan {
            limit: a.limit,
            in_flight: a.in_flight,
            queued: a.queued,
        });
        check!(format!("{name} adaptive limit"), adaptive, want.adaptive);
        let props = registry
            .properties()
            .command(&hystrix::CommandKey::new(name)?);
        let chaos = props.chaos_enabled.then_some(ChaosPlan {
            fault_rate_percentage: props.chaos_fault_rate_percentage,
            latency_rate_percentage: props.chaos_latency_rate_percentage,
            latency_ms: props.chaos_latency_in_milliseconds,
            hang_rate_percentage: props.chaos_hang_rate_percentage,
        });
        check!(format!("{name} chaos"), chaos, want.chaos);
    }
    for want in &plan.pools {
        let pool = registry
            .thread_pool_metrics(want.name)
            .ok_or_else(|| format!("no pool {}", want.name))?;
        check!("pool active", pool.current_active_count, want.active);
        check!("pool queued", pool.current_queue_size, want.queued);
        check!("pool size", pool.current_pool_size, want.pool_size);
        check!(
            "pool max active",
            pool.rolling_max_active_threads,
            want.max_active
        );
        check!(
            "pool executions",
            pool.rolling_count_threads_executed,
            want.executions
        );
        check!(
            "pool rejections",
            pool.rolling_count_command_rejections,
            want.rejections
        );
        let props = registry.properties().thread_pool(&pool.thread_pool_key);
        check!(
            "pool queue size",
            props.queue_size_rejection_threshold,
            want.queue_size
        );
    }
    for want in &plan.collapsers {
        let metrics = registry
            .collapser_metrics(want.name)
            .ok_or_else(|| format!("no collapser {}", want.name))?;
        check!(
            "batches",
            metrics.rolling_count(CollapserEvent::BatchExecuted),
            want.batches
        );
        check!(
            "requests batched",
            metrics.rolling_count(CollapserEvent::AddedToBatch),
            want.requests_batched
        );
        let size = metrics.batch_size();
        check!(
            "batch size",
            Latency {
                mean: size.mean,
                p50: size.p50,
                p90: size.p90,
                p99: size.p99,
                p995: size.p99_5,
            },
            want.latency
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let test = TestRegistry::new();
    let (plan, charge_card) = drive_all(&test, &runtime)?;
    // Held until the fixture ends.
    let _held = hold_at_the_limit(&test, &charge_card)?;
    check_registry(&test, &plan)?;

    let mut builder = Dashboard::builder(test.registry().clone());
    builder = match std::env::var("HYSTRIX_ADMIN_TOKEN") {
        Ok(token) => builder.admin_token(token)?,
        Err(_) => builder.admin(),
    };
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let url = format!("http://{}", listener.local_addr()?);

    // The cluster's two other instances, each with its own dashboard on its own port.
    let mut instances = vec![serde_json::json!({ "url": url, "plan": plan })];
    let mut peers = Vec::new();
    // Their registries, held until the fixture ends.
    let mut peer_registries = Vec::new();
    for k in [2, 3] {
        let peer = TestRegistry::new();
        let peer_plan = drive_peer(&peer, k)?;
        check_registry(&peer, &peer_plan)?;
        let peer_listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let peer_url = format!("http://{}", peer_listener.local_addr()?);
        let peer_dashboard = Dashboard::builder(peer.registry().clone()).build();
        peers.push(runtime.spawn(peer_dashboard.serve_on(peer_listener)));
        instances.push(serde_json::json!({ "url": peer_url, "plan": peer_plan }));
        peer_registries.push(peer);
    }

    // A Turbine over the three instances' streams, cluster "demo", on the first dashboard's port.
    let streams: Vec<String> = instances
        .iter()
        .map(|instance| format!("{}/hystrix.stream", instance["url"].as_str().unwrap_or("")))
        .collect();
    let turbine = Turbine::builder()
        .cluster("demo", Instances::list(streams)?)?
        .build();
    let dashboard = builder.turbine(turbine).build();
    let line = serde_json::json!({ "url": url, "plan": plan, "instances": instances });
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")?;
    stdout.flush()?;
    drop(stdout);

    // Serve until standard input closes (the harness ends, or closes it).
    let server = runtime.spawn(dashboard.serve_on(listener));
    let mut sink = Vec::new();
    let _ = std::io::stdin().lock().read_to_end(&mut sink);
    server.abort();
    for peer in peers {
        peer.abort();
    }
    drop(peer_registries);
    Ok(())
}
