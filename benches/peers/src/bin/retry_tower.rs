//! tower's `Retry` with its `TpsBudget` in the retry scenarios of our simulation harness
//! (`hystrix::testing::sim`, BENCHMARKS.md), in tokio's paused time: tower's retry and budget
//! read tokio's clock, not our `Clock`, so they cannot run inside our `Sim`. This program
//! rebuilds the same set-up on tokio and prints the same columns as our `sim` table.
//!
//! ```text
//! cargo run -p hystrix-peers-bench --release --features sim --bin retry_tower -- \
//!     [storm|transient|transient-40|all] [--seed N] [--deposit-per-success]
//! ```
//!
//! `all` (the default) prints the three rows; the seed defaults to 1, as our `sim` example's.
//! A current-thread runtime with `start_paused(true)` jumps from timer to timer, so 10 s of
//! traffic take a fraction of a second and one seed gives one table, on any machine.
//!
//! # The set-up (the same numbers as our scenarios)
//!
//! - **Backend**: 200 workers (a tokio `Semaphore`) and a FIFO queue of 200 (the semaphore's
//!   waiters, counted); a call beyond both fails at once with `Overloaded`. A served call fails
//!   with the scenario's probability, and keeps its worker for a log-normal service time with
//!   a median of 20 ms and a p99 of 100 ms (`ln T ~ Normal(ln 20, ln(100/20) / 2.3263)`),
//!   rounded to whole ms. Both draws, failure then time, come from one `StdRng` seeded with the
//!   seed when the call starts service, as in our backend. A caller that goes away leaves its
//!   call in the queue no longer (withdrawn) or in service to the end (the worker stays busy).
//! - **Load**: open loop, one request every 1 ms for 10 s (10 000), whatever happened to the
//!   earlier ones; a request's latency runs from its arrival to its outcome.
//! - **Scenarios**: `storm`: the backend fails 100 % of calls, 20 % budget (our
//!   `retry-storm`); `transient`: 30 % independent failures, 20 % budget (our
//!   `retry-transient-default-budget`); `transient-40`: 30 % failures, 40 % budget (our
//!   `retry-transient`).
//!
//! # tower, as configured here
//!
//! ```text
//! ServiceBuilder::new()
//!     .timeout(1 s)                           // tower::timeout::Timeout: the whole request
//!     .retry(BudgetedRetry { .. })            // tower::retry::Retry with the policy below
//!     .service(service_fn(|()| backend.call()))
//! ```
//!
//! - `Policy::retry`: at most 3 attempts in total; every backend error (`Failed`,
//!   `Overloaded`) is retried if the budget allows; a success ends the request.
//! - Budget: one `Arc<TpsBudget>` shared by all requests, `TpsBudget::new(10 s, 10, 0.2)` (or
//!   `0.4`): deposits make retries a share of the requests of the last 10 s, plus a reserve of
//!   10 retries per second of the window. Each request deposits **once**, at its first
//!   attempt's outcome (`retry` is the policy's only hook that sees every request); each retry
//!   withdraws. `--deposit-per-success` deposits at each success instead, as the example in
//!   tower's `budget` module docs does (then a failing backend earns no retries beyond the
//!   reserve).
//! - Backoff: tower's `ExponentialBackoffMaker` (min 100 ms, max 2 s, jitter 0.0), a fresh
//!   `ExponentialBackoff` per request (the policy is cloned per request): 100 ms before the
//!   second attempt, 200 ms before the third.
//! - Timeout: tower's `Timeout` of 1 s outside the retry bounds attempts and delays together;
//!   when it fires, the attempt or delay in progress is dropped.
//!
//! # What differs from our side, and why it cannot be helped
//!
//! - **Budget arithmetic**: `TpsBudget` counts tokens, 1 per deposit and `(1 / retry_percent)`
//!   truncated to an integer per withdrawal: 5 for 0.2 (20 %) but 2 for 0.4, so the 40 %
//!   variant grants 50 % of the deposits; the program measures and prints the share it got.
//!   Its reserve is `min_per_sec · ttl` withdrawals, as ours allows `minPerSecond · window`.
//! - **Budget window**: `TpsBudget` keeps ten slots of `ttl / 10` (1 s), rotated when it is
//!   used, plus the slot being filled (up to 11 s); ours has ten buckets of 1 s on the clock.
//!   A rotation later than exactly one slot after the previous one also clears the next slot
//!   (its `while diff > window` loop), so the ring wraps early: used every 1 001 ms, a deposit
//!   is gone after 6 s instead of 11. On tokio's whole-ms ticks, at about a thousand uses per
//!   second, most rotations land on the exact ms and few slots are lost (seed 1's storm row
//!   loses one: its negative balance of the first second is forgotten at about 9 s, which
//!   grants about 100 retries more than 20 % plus the reserve); on a real, nanosecond clock
//!   every rotation is late and the window is about half the ttl.
//! - **Deposit time**: ours deposits when an execution starts; here at the first attempt's
//!   outcome (a first attempt cut off by the timeout deposits nothing).
//! - **No attempt timeout**: ours gives each attempt `retry.attemptTimeoutInMilliseconds`
//!   (default: 1 000 ms ÷ 3 attempts) and retries a timed-out attempt; here only the whole
//!   request times out. In these scenarios the backend never queues long, so attempts end well
//!   within 333 ms either way.
//! - **No fallback, no breaker**: tower has neither, so a request that is not answered is an
//!   error (the `failed` column; `fallback` is `-`) where ours answers it with its fallback.
//!   Our matching rows keep their breaker closed: `retry-storm` disables it, and 30 %
//!   failures stay below the default 50 % threshold.
//! - **Time**: tokio's timers fire on whole ms ticks, as our manual clock does, and the draws
//!   follow the same sequence per call served, so the two stacks call the backend at the same
//!   moments with the same outcomes as long as their budgets decide alike: `transient-40`,
//!   where neither refuses a retry, equals our `retry-transient` row for seed 1 (the same
//!   backend calls, answers and latency percentiles). Where the budgets differ, rows compare
//!   as distributions.

use std::fmt::{self, Write as _};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::time::{Instant, Sleep};
use tower::retry::Policy;
use tower::retry::backoff::{Backoff, ExponentialBackoff, ExponentialBackoffMaker, MakeBackoff};
use tower::retry::budget::{Budget, TpsBudget};
use tower::timeout::error::Elapsed;
use tower::util::rng::HasherRng;
use tower::{ServiceBuilder, ServiceExt, service_fn};

/// The seed unless given `--seed` (our `sim` example's default).
const DEFAULT_SEED: u64 = 1;

const WORKERS: usize = 200;
const QUEUE: usize = 200;
const SERVICE_MEDIAN_MS: f64 = 20.0;
const SERVICE_P99_MS: f64 = 100.0;
/// The standard normal quantile of 0.99: a log-normal's p99 is `median · e^(σ · Z99)`.
const Z99: f64 = 2.326_347_874_040_841;

/// One request per ms for 10 s: 1 000 requests per second.
const REQUESTS: u64 = 10_000;
const ARRIVAL_GAP_MS: u64 = 1;

const TIMEOUT: Duration = Duration::from_secs(1);
const MAX_ATTEMPTS: u32 = 3;
const BUDGET_TTL: Duration = Duration::from_secs(10);
const BUDGET_MIN_PER_SEC: u32 = 10;
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// A named scenario: the backend's failure probability and the budget's retry share.
#[derive(Debug, Clone, Copy)]
struct Scenario {
    name: &'static str,
    failure_rate: f64,
    retry_percent: f32,
}

const SCENARIOS: [Scenario; 3] = [
    Scenario {
        name: "storm",
        failure_rate: 1.0,
        retry_percent: 0.2,
    },
    Scenario {
        name: "transient",
        failure_rate: 0.3,
        retry_percent: 0.2,
    },
    Scenario {
        name: "transient-40",
        failure_rate: 0.3,
        retry_percent: 0.4,
    },
];

// ===== the backend =====

/// What a backend call returns when it does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BackendError {
    /// Served, and failed (after its service time).
    Failed,
    /// Refused at once: every worker busy and the queue full.
    Overloaded,
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendError::Failed => "the backend failed the call",
            BackendError::Overloaded => "the backend is overloaded",
        })
    }
}

impl std::error::Error for BackendError {}

/// What the backend saw.
#[derive(Debug, Clone, Copy, Default)]
struct BackendStats {
    /// Calls that reached it (served, queued or refused).
    calls: u64,
    overloaded: u64,
    /// Calls whose caller went away while they waited in the queue.
    abandoned_queued: u64,
    /// Calls whose caller went away while a worker served them (served to the end anyway).
    abandoned_in_service: u64,
}

/// The fake dependency on tokio's clock; clones share it.
#[derive(Clone)]
struct Backend(Arc<BackendInner>);

struct BackendInner {
    workers: Arc<Semaphore>,
    failure_rate: f64,
    service_time: LogNormal<f64>,
    state: Mutex<BackendState>,
}

struct BackendState {
    rng: StdRng,
    queued: usize,
    stats: BackendStats,
}

impl Backend {
    fn new(failure_rate: f64, seed: u64) -> Self {
        let sigma = (SERVICE_P99_MS / SERVICE_MEDIAN_MS).ln() / Z99;
        let service_time = LogNormal::new(SERVICE_MEDIAN_MS.ln(), sigma)
            .unwrap_or_else(|_| unreachable!("a positive sigma"));
        Backend(Arc::new(BackendInner {
            workers: Arc::new(Semaphore::new(WORKERS)),
            failure_rate,
            service_time,
            state: Mutex::new(BackendState {
                rng: StdRng::seed_from_u64(seed),
                queued: 0,
                stats: BackendStats::default(),
            }),
        }))
    }

    fn stats(&self) -> BackendStats {
        self.0.state().stats
    }

    /// One call: takes a worker, or waits for one in the queue, or is refused. Dropping the
    /// future while queued withdraws the call; once in service the worker stays busy to the
    /// end of the service time, caller or not.
    async fn call(self) -> Result<(), BackendError> {
        let inner = &*self.0;
        inner.state().stats.calls += 1;
        let permit = match Arc::clone(&inner.workers).try_acquire_owned() {
            Ok(permit) => permit,
            // Every worker is busy (or promised to an earlier waiter: tokio's semaphore is
            // fair, so a free permit is never taken past the queue).
            Err(_) => {
                let mut slot = QueueSlot::take(inner)?;
                let permit = Arc::clone(&inner.workers)
                    .acquire_owned()
                    .await
                    .unwrap_or_else(|_| unreachable!("the semaphore is never closed"));
                slot.served = true;
                permit
            }
        };
        let (result, service_time) = inner.draw();
        let (tx, rx) = oneshot::channel();
        tokio::spawn(serve(self.clone(), permit, service_time, result, tx));
        // The sender goes only with the runtime.
        rx.await.unwrap_or(Err(BackendError::Failed))
    }
}

impl BackendInner {
    fn state(&self) -> MutexGuard<'_, BackendState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The outcome and service time of a call starting service now: both draws always, in
    /// this order, as our backend makes them.
    fn draw(&self) -> (Result<(), BackendError>, Duration) {
        let mut state = self.state();
        let fails = state.rng.random::<f64>() < self.failure_rate;
        let ms = self.service_time.sample(&mut state.rng).round().max(0.0);
        // `as` saturates; the draws are finite and non-negative.
        let service_time = Duration::from_millis(ms as u64);
        let result = if fails {
            Err(BackendError::Failed)
        } else {
            Ok(())
        };
        (result, service_time)
    }
}

/// A worker serving one call: busy for `service_time`, then hands `result` to the caller if
/// it is still there.
async fn serve(
    backend: Backend,
    permit: OwnedSemaphorePermit,
    service_time: Duration,
    result: Result<(), BackendError>,
    tx: oneshot::Sender<Result<(), BackendError>>,
) {
    tokio::time::sleep(service_time).await;
    drop(permit);
    if tx.send(result).is_err() {
        backend.0.state().stats.abandoned_in_service += 1;
    }
}

/// A place in the backend's queue, held while the call waits for a worker.
struct QueueSlot<'a> {
    backend: &'a BackendInner,
    served: bool,
}

impl<'a> QueueSlot<'a> {
    fn take(backend: &'a BackendInner) -> Result<Self, BackendError> {
        let mut state = backend.state();
        if state.queued >= QUEUE {
            state.stats.overloaded += 1;
            return Err(BackendError::Overloaded);
        }
        state.queued += 1;
        Ok(QueueSlot {
            backend,
            served: false,
        })
    }
}

impl Drop for QueueSlot<'_> {
    fn drop(&mut self) {
        let mut state = self.backend.state();
        state.queued -= 1;
        if !self.served {
            state.stats.abandoned_queued += 1;
        }
    }
}

// ===== tower's retry policy =====

/// When a request pays into the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deposit {
    /// Once per request, at its first attempt's outcome (Finagle's and our semantics).
    PerRequest,
    /// At each success (the example of tower's `retry::budget` docs).
    PerSuccess,
}

/// What the policies decided, over all requests.
#[derive(Debug, Default)]
struct RetryCounts {
    granted: AtomicU64,
    refused_by_budget: AtomicU64,
}

/// Up to [`MAX_ATTEMPTS`] attempts, each retry withdrawn from a shared [`TpsBudget`], after an
/// exponential backoff. `Retry` clones the policy for each request, so `attempts` and
/// `backoff` are per request.
#[derive(Clone)]
struct BudgetedRetry {
    budget: Arc<TpsBudget>,
    deposit: Deposit,
    backoff: ExponentialBackoff<HasherRng>,
    attempts: u32,
    counts: Arc<RetryCounts>,
}

impl Policy<(), (), BackendError> for BudgetedRetry {
    type Future = Sleep;

    fn retry(&mut self, _req: &mut (), result: &mut Result<(), BackendError>) -> Option<Sleep> {
        self.attempts += 1;
        if self.attempts == 1 && self.deposit == Deposit::PerRequest {
            self.budget.deposit();
        }
        match result {
            Ok(()) => {
                if self.deposit == Deposit::PerSuccess {
                    self.budget.deposit();
                }
                None
            }
            Err(_) if self.attempts >= MAX_ATTEMPTS => None,
            Err(_) if self.budget.withdraw() => {
                self.counts.granted.fetch_add(1, Ordering::Relaxed);
                Some(self.backoff.next_backoff())
            }
            Err(_) => {
                self.counts
                    .refused_by_budget
                    .fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    fn clone_request(&mut self, _req: &()) -> Option<()> {
        Some(())
    }
}

// ===== one run =====

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Answered,
    /// The last attempt's backend error reached the caller.
    BackendError,
    /// tower's `Timeout` fired.
    TimedOut,
}

/// What one scenario's run produced.
struct Report {
    name: String,
    offered: u64,
    answered: u64,
    backend_errors: u64,
    timed_out: u64,
    latency_ms: Histogram<u64>,
    backend: BackendStats,
    retries_granted: u64,
    retries_refused: u64,
    /// Retries the budget grants per deposit, measured on a budget of its settings.
    budget_share: f64,
}

impl Report {
    fn failed(&self) -> u64 {
        self.backend_errors + self.timed_out
    }
}

/// Runs `scenario` with `seed` on a fresh current-thread runtime in paused time.
fn run(scenario: Scenario, seed: u64, deposit: Deposit) -> std::io::Result<Report> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    Ok(runtime.block_on(offer(scenario, seed, deposit)))
}

async fn offer(scenario: Scenario, seed: u64, deposit: Deposit) -> Report {
    let backend = Backend::new(scenario.failure_rate, seed);
    let counts = Arc::new(RetryCounts::default());
    let mut backoff = ExponentialBackoffMaker::new(BACKOFF_MIN, BACKOFF_MAX, 0.0, HasherRng::new())
        .unwrap_or_else(|err| unreachable!("valid backoff settings: {err}"));
    let policy = BudgetedRetry {
        budget: Arc::new(TpsBudget::new(
            BUDGET_TTL,
            BUDGET_MIN_PER_SEC,
            scenario.retry_percent,
        )),
        deposit,
        backoff: backoff.make_backoff(),
        attempts: 0,
        counts: Arc::clone(&counts),
    };
    let service = {
        let backend = backend.clone();
        ServiceBuilder::new()
            .timeout(TIMEOUT)
            .retry(policy)
            .service(service_fn(move |()| backend.clone().call()))
    };

    let start = Instant::now();
    let mut requests = Vec::with_capacity(REQUESTS as usize);
    for i in 0..REQUESTS {
        let arrival = start + Duration::from_millis(i * ARRIVAL_GAP_MS);
        tokio::time::sleep_until(arrival).await;
        let service = service.clone();
        requests.push(tokio::spawn(async move {
            let outcome = match service.oneshot(()).await {
                Ok(()) => Outcome::Answered,
                Err(err) if err.is::<Elapsed>() => Outcome::TimedOut,
                Err(_) => Outcome::BackendError,
            };
            (outcome, arrival.elapsed())
        }));
    }

    let mut report = Report {
        name: format!("tower-retry-{}", scenario.name),
        offered: REQUESTS,
        answered: 0,
        backend_errors: 0,
        timed_out: 0,
        // Auto-resizing, 3 significant figures, as our report's.
        latency_ms: Histogram::new(3).unwrap_or_else(|_| unreachable!("3 figures is valid")),
        backend: BackendStats::default(),
        retries_granted: 0,
        retries_refused: 0,
        budget_share: budget_share(scenario.retry_percent),
    };
    for request in requests {
        let (outcome, latency) = match request.await {
            Ok(done) => done,
            Err(err) => std::panic::resume_unwind(err.into_panic()),
        };
        match outcome {
            Outcome::Answered => report.answered += 1,
            Outcome::BackendError => report.backend_errors += 1,
            Outcome::TimedOut => report.timed_out += 1,
        }
        let ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
        report.latency_ms.saturating_record(ms);
    }
    report.backend = backend.stats();
    report.retries_granted = counts.granted.load(Ordering::Relaxed);
    report.retries_refused = counts.refused_by_budget.load(Ordering::Relaxed);
    report
}

/// Withdrawals a `TpsBudget` with this `retry_percent` (and no reserve) grants per deposit:
/// tower truncates `1 / retry_percent` to whole tokens.
fn budget_share(retry_percent: f32) -> f64 {
    const DEPOSITS: u32 = 1_000;
    let budget = TpsBudget::new(BUDGET_TTL, 0, retry_percent);
    for _ in 0..DEPOSITS {
        budget.deposit();
    }
    let granted = (0..DEPOSITS).take_while(|_| budget.withdraw()).count();
    granted as f64 / f64::from(DEPOSITS)
}

// ===== the table =====

/// Our `sim` table's columns.
const HEADERS: [&str; 11] = [
    "scenario",
    "offered",
    "answered",
    "fallback",
    "failed",
    "backend calls",
    "calls/request",
    "p50 ms",
    "p99 ms",
    "p99.9 ms",
    "max ms",
];

/// The rows as our `hystrix::testing::sim::table` prints them (names left, numbers right).
fn table(reports: &[Report]) -> String {
    let rows: Vec<[String; 11]> = reports.iter().map(row).collect();
    let mut widths = HEADERS.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[String; 11]| {
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            let _ = if i == 0 {
                write!(out, "{cell:<width$}")
            } else {
                write!(out, "  {cell:>width$}")
            };
        }
        let trimmed = out.trim_end().len();
        out.truncate(trimmed);
        out.push('\n');
    };
    line(&HEADERS.map(String::from));
    for row in &rows {
        line(row);
    }
    out
}

fn row(report: &Report) -> [String; 11] {
    let percent = |part: u64| format!("{:.2} %", part as f64 * 100.0 / report.offered as f64);
    let latency = &report.latency_ms;
    [
        report.name.clone(),
        report.offered.to_string(),
        percent(report.answered),
        // tower has no fallback: what is not answered fails.
        "-".to_string(),
        percent(report.failed()),
        report.backend.calls.to_string(),
        format!("{:.2}", report.backend.calls as f64 / report.offered as f64),
        latency.value_at_quantile(0.5).to_string(),
        latency.value_at_quantile(0.99).to_string(),
        latency.value_at_quantile(0.999).to_string(),
        latency.max().to_string(),
    ]
}

/// What the table does not show: how the failures and retries came about.
fn details(report: &Report) -> String {
    let b = &report.backend;
    format!(
        "{}: retries granted {}, refused by the budget {}; failed: {} backend errors after the \
         last attempt, {} timeouts; backend overloaded {}, abandoned {} queued / {} in service; \
         budget grants {:.0} % of deposits",
        report.name,
        report.retries_granted,
        report.retries_refused,
        report.backend_errors,
        report.timed_out,
        b.overloaded,
        b.abandoned_queued,
        b.abandoned_in_service,
        report.budget_share * 100.0,
    )
}

// ===== the command line =====

struct Args {
    scenarios: Vec<Scenario>,
    seed: u64,
    deposit: Deposit,
}

const USAGE: &str = "usage: retry_tower [storm|transient|transient-40|all] [--seed N] \
                     [--deposit-per-success]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        scenarios: SCENARIOS.to_vec(),
        seed: DEFAULT_SEED,
        deposit: Deposit::PerRequest,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(arg) = argv.next() {
        match arg.as_str() {
            "--seed" => {
                let value = argv.next().ok_or("--seed needs a number")?;
                args.seed = value
                    .parse()
                    .map_err(|err| format!("--seed {value}: {err}"))?;
            }
            "--deposit-per-success" => args.deposit = Deposit::PerSuccess,
            "-h" | "--help" => return Err(String::new()),
            "all" => args.scenarios = SCENARIOS.to_vec(),
            name => {
                let scenario = SCENARIOS
                    .iter()
                    .find(|s| s.name == name)
                    .ok_or_else(|| format!("unknown scenario or option {name:?}"))?;
                args.scenarios = vec![*scenario];
            }
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("{message}");
            }
            eprintln!("{USAGE}");
            return if message.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
    };
    let mut reports = Vec::new();
    for scenario in &args.scenarios {
        match run(*scenario, args.seed, args.deposit) {
            Ok(report) => reports.push(report),
            Err(err) => {
                eprintln!("cannot build a tokio runtime: {err}");
                return ExitCode::FAILURE;
            }
        }
    }
    let deposit = match args.deposit {
        Deposit::PerRequest => "once per request",
        Deposit::PerSuccess => "per success",
    };
    println!(
        "tower Retry + TpsBudget (ttl 10 s, 10/s; deposit {deposit}), 3 attempts, backoff \
         100 ms x2, Timeout 1 s; seed {}",
        args.seed
    );
    print!("{}", table(&reports));
    for report in &reports {
        println!("{}", details(report));
    }
    ExitCode::SUCCESS
}
