//! The soak: five dependencies behind five commands, each on its own loopback server, under a
//! steady load; mid-run one of them becomes 100 % latent. Run by `scripts/test soak` (ignored in
//! the fast tier), once under THREAD isolation with blocking runs and once under SEMAPHORE
//! isolation with async runs.
//!
//! It fails when
//! - a call is lost: every call must end in a value, a fallback value or a typed error, and
//!   each of those must be the one due (a healthy call returns its own number, an error answer
//!   gives its fallback, a latent call never succeeds);
//! - after the load stops and the latent answers drain, anything is still held: an execution
//!   permit or pool thread (`currentConcurrentExecutionCount`, the pool's active count and
//!   queue), the latent command's adaptive-limit slots, a fallback permit (each command must
//!   then admit its full 8 executions and 8 fallbacks at once), a server-side connection, or a
//!   thread beyond the pools' own;
//! - the healthy commands' p99 grows, from before the latent phase to during it, by more than
//!   [`MAX_GROWTH`] times what a control call (the same request with no command around it, to
//!   a sixth server) shows over the same two phases. The exact ratio is printed; the strict
//!   goal (≤ 1.10) is a row of BENCHMARKS.md, not a test.
//!
//! This is a real-time load test on real sockets, not a test of the breaker's timing: those
//! run on the `ManualClock` elsewhere. The latent command's breaker is off, so that its
//! bulkhead (and its adaptive limit) carry the whole latent phase; a breaker would
//! short-circuit it within a second and leave little to leak.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use hystrix::{CancellationToken, Command, HystrixError, IsolationStrategy, Outcome, Registry};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// Commands (and servers), the last of which goes latent.
const DEPENDENCIES: usize = 5;
const LATENT: usize = DEPENDENCIES - 1;
/// A healthy server's answer time.
const HEALTHY_DELAY_MS: u64 = 2;
/// The latent server's answer time, far past the latent command's timeout.
const LATENT_DELAY_MS: u64 = 1500;
/// Every `ERROR_EVERY`th request gets an error answer (a command failure, then its fallback).
const ERROR_EVERY: u64 = 50;
/// The healthy commands' timeout: generous, so a timeout there means a real stall.
const HEALTHY_TIMEOUT: Duration = Duration::from_millis(1000);
const LATENT_TIMEOUT: Duration = Duration::from_millis(100);
/// Execution permits (or pool threads) and fallback permits of every command.
const PERMITS: u32 = 8;
/// Callers of the latent command: twice its permits, so its bulkhead is full all through the
/// latent phase. The healthy commands and the control have one caller each.
const LATENT_CALLERS: usize = 16;
/// A healthy command's caller (and the control's) starts a call every `PACE`, and each latent
/// command's caller every `LATENT_PACE`, on a fixed schedule: a call that overruns its slot
/// skips the slots it missed, as requests arriving at a service would not come faster because
/// a dependency answers fast (a closed loop would turn fast rejections into a flood).
const PACE: Duration = Duration::from_millis(5);
const LATENT_PACE: Duration = Duration::from_millis(20);
const WARM_UP: Duration = Duration::from_secs(2);
const BEFORE: Duration = Duration::from_secs(8);
const DURING: Duration = Duration::from_secs(10);
/// How long calls and answers may take to drain after the load stops.
const DRAIN: Duration = Duration::from_secs(5);
/// The test's bound on the healthy commands' p99 growth relative to the control's.
const MAX_GROWTH: f64 = 2.0;

/// The fallback's value for call `n`: distinct from every answer.
fn fallback_value(n: u64) -> u64 {
    1_000_000 + n
}

// ---------------------------------------------------------------------------------------------
// The loopback servers: one request line (a number) per connection, one answer line.

struct Backend {
    addr: SocketAddr,
    delay_ms: AtomicU64,
    open: AtomicUsize,
}

/// Counts a connection as open while the server holds it.
struct Open<'a>(&'a AtomicUsize);

impl<'a> Open<'a> {
    fn new(open: &'a AtomicUsize) -> Self {
        open.fetch_add(1, Ordering::SeqCst);
        Open(open)
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn start_backend() -> Arc<Backend> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let backend = Arc::new(Backend {
        addr: listener.local_addr().expect("the listener's address"),
        delay_ms: AtomicU64::new(HEALTHY_DELAY_MS),
        open: AtomicUsize::new(0),
    });
    let served = Arc::clone(&backend);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, Arc::clone(&served)));
        }
    });
    backend
}

async fn serve(stream: tokio::net::TcpStream, backend: Arc<Backend>) {
    let _open = Open::new(&backend.open);
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    if tokio::io::BufReader::new(read)
        .read_line(&mut line)
        .await
        .is_err()
    {
        return;
    }
    let n: u64 = line.trim().parse().unwrap_or(0);
    let delay = backend.delay_ms.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(delay)).await;
    let answer = if n % ERROR_EVERY == 0 {
        "err\n".to_owned()
    } else {
        format!("ok {n}\n")
    };
    let _ = write.write_all(answer.as_bytes()).await;
}

fn parse_answer(line: &str) -> std::io::Result<u64> {
    match line.trim().strip_prefix("ok ") {
        Some(n) => n.parse().map_err(std::io::Error::other),
        None if line.trim() == "err" => Err(std::io::Error::other("the server answered err")),
        None => Err(std::io::Error::other(format!("a bad answer: {line:?}"))),
    }
}

/// One request on a fresh connection, blocking. It polls `token` every 10 ms while it waits,
/// so it gives its pool thread back soon after the command's timeout.
fn call_blocking(
    addr: SocketAddr,
    n: u64,
    token: Option<&CancellationToken>,
) -> std::io::Result<u64> {
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    writeln!(stream, "{n}")?;
    stream.set_read_timeout(Some(Duration::from_millis(10)))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let give_up = Instant::now() + DRAIN;
    loop {
        match reader.read_line(&mut line) {
            Ok(0) => return Err(std::io::Error::other("closed without an answer")),
            Ok(_) => return parse_answer(&line),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if token.is_some_and(CancellationToken::is_cancelled) {
                    return Err(std::io::Error::other("cancelled at the timeout"));
                }
                if Instant::now() > give_up {
                    return Err(std::io::Error::other("no answer"));
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// One request on a fresh connection, async; dropped (and its connection closed) at the
/// command's timeout.
async fn call_async(addr: SocketAddr, n: u64) -> std::io::Result<u64> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (read, mut write) = stream.into_split();
    write.write_all(format!("{n}\n").as_bytes()).await?;
    let mut line = String::new();
    tokio::io::BufReader::new(read).read_line(&mut line).await?;
    parse_answer(&line)
}

// ---------------------------------------------------------------------------------------------
// What each call ended in, and when it started.

const WARM: u8 = 0;
const PHASE_BEFORE: u8 = 1;
const PHASE_DURING: u8 = 2;
const STOPPED: u8 = 3;

#[derive(Default)]
struct Tally {
    submitted: u64,
    values: u64,
    fallbacks: u64,
    errors: BTreeMap<String, u64>,
    /// Calls that ended in something other than what was due.
    wrong: Vec<String>,
    /// Latencies in µs of the calls started before / during the latent phase.
    latency_us: [Vec<u64>; 2],
    /// The latent dependency's calls started in the steady phase before its latent phase that
    /// failed anyway: only those still running when it turned latent may, one per caller.
    failed_before: usize,
}

impl Tally {
    fn ended(&self) -> u64 {
        self.values + self.fallbacks + self.errors.values().sum::<u64>()
    }

    /// Whether a failure of the latent dependency's call started before its latent phase is
    /// one of those the switch may catch in flight (counted).
    fn caught_by_the_switch(&mut self) -> bool {
        self.failed_before += 1;
        self.failed_before <= LATENT_CALLERS
    }
}

/// The shared state of one run: the phase, the tallies, the stop flag.
struct Load {
    phase: AtomicU8,
    tallies: Vec<Mutex<Tally>>,
    control: Mutex<Tally>,
}

impl Load {
    fn new() -> Self {
        Load {
            phase: AtomicU8::new(WARM),
            tallies: (0..DEPENDENCIES).map(|_| Mutex::default()).collect(),
            control: Mutex::default(),
        }
    }

    fn running(&self) -> bool {
        self.phase.load(Ordering::SeqCst) != STOPPED
    }

    fn submit(&self, dependency: usize) -> u8 {
        let phase = self.phase.load(Ordering::SeqCst);
        self.tallies[dependency].lock().expect("tally").submitted += 1;
        phase
    }

    /// Records what call `n` of `dependency`, started in `phase`, ended in, and checks it is
    /// what was due.
    fn record<E: std::fmt::Display>(
        &self,
        dependency: usize,
        n: u64,
        phase: u8,
        took: Duration,
        outcome: Outcome<u64, E>,
    ) {
        let from_fallback = outcome.execution_result().is_response_from_fallback();
        let failed = outcome.execution_result().is_failed_execution();
        let mut tally = self.tallies[dependency].lock().expect("tally");
        let latent_phase = dependency == LATENT && phase == PHASE_DURING;
        // A failure of the latent dependency in the steady phase before its latent phase that
        // no error answer explains must be a call the switch caught in flight. (In the warm-up
        // its 16 callers start at once, past its limit of 8: rejections are due.)
        let latent_failure = |tally: &mut Tally| {
            dependency == LATENT
                && (phase != PHASE_BEFORE || n % ERROR_EVERY == 0 || tally.caught_by_the_switch())
        };
        let wrong = match outcome.into_response() {
            Ok(value) if from_fallback => {
                tally.fallbacks += 1;
                let due = value == fallback_value(n)
                    && ((failed && n % ERROR_EVERY == 0) || latent_failure(&mut tally));
                (!due).then(|| format!("call {n} fell back ({value}), failed {failed}"))
            }
            Ok(value) => {
                tally.values += 1;
                let due = value == n && n % ERROR_EVERY != 0 && !latent_phase;
                (!due).then(|| format!("call {n} succeeded with {value}"))
            }
            Err(err) => {
                *tally.errors.entry(error_kind(&err)).or_default() += 1;
                // Only the latent command's odd calls have no fallback; its errors are
                // timeouts and rejections (of the execution or of the fallback).
                let due = (n % 2 == 1 || err.fallback_failure().is_some())
                    && (err.is_timeout() || err.is_rejection() || n % ERROR_EVERY == 0)
                    && latent_failure(&mut tally);
                (!due).then(|| format!("call {n} ended in {err}"))
            }
        };
        if let Some(wrong) = wrong {
            tally.wrong.push(wrong);
        }
        if phase == PHASE_BEFORE || phase == PHASE_DURING {
            tally.latency_us[usize::from(phase - 1)].push(micros(took));
        }
    }
}

fn error_kind<E>(err: &HystrixError<E>) -> String {
    match err.fallback_failure() {
        Some(fallback) => format!("{:?}, fallback {fallback}", err.failure_type()),
        None => format!("{:?}", err.failure_type()),
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The 99th percentile (nearest rank) of `samples`, in µs.
fn p99(samples: &[u64]) -> u64 {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    assert!(!sorted.is_empty(), "no samples");
    let rank = (sorted.len() * 99).div_ceil(100);
    sorted[rank.saturating_sub(1)]
}

// ---------------------------------------------------------------------------------------------
// The commands.

fn build_commands(registry: &Registry, mode: &str, isolation: IsolationStrategy) -> Vec<Command> {
    (0..DEPENDENCIES)
        .map(|i| {
            let latent = i == LATENT;
            // Each dependency is its own group, so has its own thread pool (the pool key
            // defaults to the group, as in Hystrix).
            let mut builder = Command::builder(format!("Soak{mode}Dependency{i}"))
                .group(format!("Soak{mode}Service{i}"))
                .isolation(isolation)
                .thread_pool_core_size(PERMITS)
                .semaphore_max_concurrent_requests(PERMITS)
                .fallback_semaphore_max_concurrent_requests(PERMITS)
                .timeout(if latent {
                    LATENT_TIMEOUT
                } else {
                    HEALTHY_TIMEOUT
                });
            if latent {
                // An adaptive limit between PERMITS and 4 × PERMITS, capped by a semaphore of
                // 4 × PERMITS: under SEMAPHORE isolation the limit binds (LIMIT_REJECTED),
                // under THREAD the pool of PERMITS threads does.
                builder = builder
                    .circuit_breaker_enabled(false)
                    .semaphore_max_concurrent_requests(4 * PERMITS)
                    .property("execution.isolation.adaptive.enabled", true)
                    .property("execution.isolation.adaptive.minLimit", PERMITS)
                    .property("execution.isolation.adaptive.initialLimit", PERMITS)
                    .property("execution.isolation.adaptive.maxLimit", 4 * PERMITS);
            }
            builder.build_in(registry).expect("a valid soak command")
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The two runs.

/// Drives the phases: warm-up, before, the latent switch, during, stop.
fn drive_phases(load: &Load, backends: &[Arc<Backend>]) {
    std::thread::sleep(WARM_UP);
    load.phase.store(PHASE_BEFORE, Ordering::SeqCst);
    std::thread::sleep(BEFORE);
    backends[LATENT]
        .delay_ms
        .store(LATENT_DELAY_MS, Ordering::SeqCst);
    load.phase.store(PHASE_DURING, Ordering::SeqCst);
    std::thread::sleep(DURING);
    load.phase.store(STOPPED, Ordering::SeqCst);
}

fn callers_of(dependency: usize) -> usize {
    if dependency == LATENT {
        LATENT_CALLERS
    } else {
        1
    }
}

fn pace_of(dependency: usize) -> Duration {
    if dependency == LATENT {
        LATENT_PACE
    } else {
        PACE
    }
}

/// A caller's fixed schedule: the next start after `now`, skipping missed slots.
struct Schedule {
    next: Instant,
    every: Duration,
}

impl Schedule {
    /// Slots `every` apart from `offset` on: the callers of one command spread their slots
    /// over its pace, so that its load is steady, not 16 calls at once (which its limit of 8
    /// would refuse while it is healthy).
    fn new(every: Duration, offset: Duration) -> Self {
        Schedule {
            next: Instant::now() + offset,
            every,
        }
    }

    /// How long to wait for the next slot.
    fn wait(&mut self) -> Duration {
        let now = Instant::now();
        while self.next <= now {
            self.next += self.every;
        }
        self.next - now
    }
}

/// One caller of a dependency: the `c`-th of dependency `i`, with its command and backend,
/// the counter its call numbers come from, the load it reports to and where it says it ended.
struct Caller {
    i: usize,
    c: usize,
    command: Command,
    addr: SocketAddr,
    next: Arc<Vec<AtomicU64>>,
    load: Arc<Load>,
    done: mpsc::Sender<String>,
}

impl Caller {
    /// Its dependency's pace, its slot spread among the dependency's callers.
    fn schedule(&self) -> Schedule {
        let pace = pace_of(self.i);
        Schedule::new(pace, pace * self.c as u32 / callers_of(self.i) as u32)
    }

    /// The next call's number, and the phase it is submitted in.
    fn next_call(&self) -> (u64, u8) {
        let n = self.next[self.i].fetch_add(1, Ordering::SeqCst);
        (n, self.load.submit(self.i))
    }

    /// Whether call `n` goes without a fallback: every other call of the latent dependency, so
    /// its timeouts reach the caller as typed errors.
    fn without_fallback(&self, n: u64) -> bool {
        self.i == LATENT && n % 2 == 1
    }

    fn finished(self) {
        let _ = self
            .done
            .send(format!("dependency {} caller {}", self.i, self.c));
    }
}

/// Starts the callers (`callers_of(i)` of each dependency, through `start`, and the control
/// caller, through `start_control`, each on a thread or as a task), drives the phases and
/// waits for every caller to end.
fn run_load(
    commands: &[Command],
    backends: &[Arc<Backend>],
    control: &Arc<Backend>,
    load: &Arc<Load>,
    mut start: impl FnMut(Caller),
    start_control: impl FnOnce(SocketAddr, Arc<Load>, mpsc::Sender<String>),
) {
    let (done_tx, done_rx) = mpsc::channel::<String>();
    let next = Arc::new(
        (0..DEPENDENCIES)
            .map(|_| AtomicU64::new(1))
            .collect::<Vec<_>>(),
    );
    let mut callers = 0;
    for (i, command) in commands.iter().enumerate() {
        for c in 0..callers_of(i) {
            callers += 1;
            start(Caller {
                i,
                c,
                command: command.clone(),
                addr: backends[i].addr,
                next: Arc::clone(&next),
                load: Arc::clone(load),
                done: done_tx.clone(),
            });
        }
    }
    callers += 1;
    start_control(control.addr, Arc::clone(load), done_tx);
    drive_phases(load, backends);
    wait_for_callers(&done_rx, callers, load);
}

/// THREAD isolation, blocking runs called with `execute` from plain threads.
fn run_blocking(
    commands: &[Command],
    backends: &[Arc<Backend>],
    control: &Arc<Backend>,
    load: &Arc<Load>,
) {
    let caller = |caller: Caller| {
        std::thread::spawn(move || {
            let mut schedule = caller.schedule();
            while caller.load.running() {
                let (n, phase) = caller.next_call();
                let addr = caller.addr;
                let run = caller
                    .command
                    .run_cancellable(move |token| call_blocking(addr, n, Some(&token)));
                let start = Instant::now();
                let outcome = if caller.without_fallback(n) {
                    run.execute_outcome()
                } else {
                    run.fallback(move |_| Ok::<_, std::io::Error>(fallback_value(n)))
                        .execute_outcome()
                };
                caller
                    .load
                    .record(caller.i, n, phase, start.elapsed(), outcome);
                std::thread::sleep(schedule.wait());
            }
            caller.finished();
        });
    };
    let control_caller = |addr, load: Arc<Load>, done: mpsc::Sender<String>| {
        std::thread::spawn(move || {
            let mut schedule = Schedule::new(PACE, Duration::ZERO);
            let mut n = 1;
            while load.running() {
                let phase = load.phase.load(Ordering::SeqCst);
                let start = Instant::now();
                let answer = call_blocking(addr, n, None);
                record_control(&load, n, phase, start.elapsed(), answer);
                n += 1;
                std::thread::sleep(schedule.wait());
            }
            let _ = done.send("control".to_owned());
        });
    };
    run_load(commands, backends, control, load, caller, control_caller);
}

fn record_control(load: &Load, n: u64, phase: u8, took: Duration, answer: std::io::Result<u64>) {
    let mut tally = load.control.lock().expect("control tally");
    tally.submitted += 1;
    match answer {
        Ok(value) => {
            tally.values += 1;
            if value != n {
                tally
                    .wrong
                    .push(format!("control call {n} answered {value}"));
            }
        }
        Err(err) => {
            *tally.errors.entry(err.to_string()).or_default() += 1;
            if n % ERROR_EVERY != 0 {
                tally.wrong.push(format!("control call {n} failed: {err}"));
            }
        }
    }
    if phase == PHASE_BEFORE || phase == PHASE_DURING {
        tally.latency_us[usize::from(phase - 1)].push(micros(took));
    }
}

/// Every caller must finish its last call within [`DRAIN`] of the stop: one that does not is
/// a lost call.
fn wait_for_callers(done: &mpsc::Receiver<String>, callers: usize, load: &Load) {
    let deadline = Instant::now() + DRAIN;
    for finished in 0..callers {
        let left = deadline.saturating_duration_since(Instant::now());
        if done.recv_timeout(left).is_err() {
            let pending: Vec<String> = load
                .tallies
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let t = t.lock().expect("tally");
                    format!(
                        "dependency {i}: {} submitted, {} ended",
                        t.submitted,
                        t.ended()
                    )
                })
                .collect();
            panic!(
                "{} of {callers} callers still in a call {} s after the load stopped: lost calls ({})",
                callers - finished,
                DRAIN.as_secs(),
                pending.join("; ")
            );
        }
    }
}

/// SEMAPHORE isolation, async runs awaited by tasks of a multi-thread runtime.
fn run_async(
    runtime: &tokio::runtime::Runtime,
    commands: &[Command],
    backends: &[Arc<Backend>],
    control: &Arc<Backend>,
    load: &Arc<Load>,
) {
    let caller = |caller: Caller| {
        runtime.spawn(async move {
            let mut schedule = caller.schedule();
            while caller.load.running() {
                let (n, phase) = caller.next_call();
                let run = caller.command.run_async(call_async(caller.addr, n));
                let start = Instant::now();
                let outcome = if caller.without_fallback(n) {
                    run.execute_async_outcome().await
                } else {
                    run.fallback(move |_| Ok::<_, std::io::Error>(fallback_value(n)))
                        .execute_async_outcome()
                        .await
                };
                caller
                    .load
                    .record(caller.i, n, phase, start.elapsed(), outcome);
                tokio::time::sleep(schedule.wait()).await;
            }
            caller.finished();
        });
    };
    let control_caller = |addr, load: Arc<Load>, done: mpsc::Sender<String>| {
        runtime.spawn(async move {
            let mut schedule = Schedule::new(PACE, Duration::ZERO);
            let mut n = 1;
            while load.running() {
                let phase = load.phase.load(Ordering::SeqCst);
                let start = Instant::now();
                let answer = call_async(addr, n).await;
                record_control(&load, n, phase, start.elapsed(), answer);
                n += 1;
                tokio::time::sleep(schedule.wait()).await;
            }
            let _ = done.send("control".to_owned());
        });
    };
    run_load(commands, backends, control, load, caller, control_caller);
}

// ---------------------------------------------------------------------------------------------
// After the load: nothing held.

/// The names of the process's threads, from /proc/self/task.
fn process_threads() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .expect("read /proc/self/task")
        .filter_map(|task| {
            let path = task.ok()?.path().join("comm");
            Some(std::fs::read_to_string(path).ok()?.trim().to_owned())
        })
        .collect();
    names.sort();
    names
}

/// Threads the library starts once per process, on first use (its timer and the precise
/// clock's upkeep): not per call, so not a leak.
const PROCESS_THREADS: [&str; 2] = ["hystrix-timer", "quanta-upkeep"];

/// Fails unless the threads started since `before` are the pools' own (`pool_threads` of
/// them, named after their pool key, whose first 15 bytes are `pool_prefix`), the library's
/// [`PROCESS_THREADS`] (once each at most) and the test's runtimes (`soak-*`).
fn assert_no_thread_leaked(before: &[String], pool_prefix: &str, pool_threads: u32) {
    let new = new_threads(before, &process_threads());
    let pools = new.iter().filter(|n| n.starts_with(pool_prefix)).count();
    let others: Vec<&String> = new
        .iter()
        .filter(|n| !n.starts_with(pool_prefix) && !n.starts_with("soak-"))
        .collect();
    println!("new threads: {pools} of the pools (which report {pool_threads}), others {others:?}");
    assert_eq!(
        pools, pool_threads as usize,
        "the pools' threads alive differ from what their metrics report"
    );
    let mut once = PROCESS_THREADS.to_vec();
    for name in &others {
        let at = once.iter().position(|p| p == name);
        assert!(
            at.is_some(),
            "a thread leaked: {name} (new threads: {new:?})"
        );
        if let Some(at) = at {
            once.swap_remove(at);
        }
    }
}

/// The threads of `after` not in `before` (as multisets of names).
fn new_threads(before: &[String], after: &[String]) -> Vec<String> {
    let mut left = before.to_vec();
    after
        .iter()
        .filter(|name| match left.iter().position(|b| b == *name) {
            Some(at) => {
                left.swap_remove(at);
                false
            }
            None => true,
        })
        .cloned()
        .collect()
}

/// What is still held: empty when nothing is.
fn held(commands: &[Command], backends: &[Arc<Backend>], control: &Backend) -> Vec<String> {
    let mut held = Vec::new();
    for (i, command) in commands.iter().enumerate() {
        let metrics = command.metrics();
        let running = metrics.current_concurrent_execution_count();
        if running != 0 {
            held.push(format!("dependency {i}: {running} executions running"));
        }
        if let Some(limit) = metrics.adaptive_limit()
            && (limit.in_flight != 0 || limit.queued != 0)
        {
            held.push(format!(
                "dependency {i}: adaptive limit {} in flight, {} queued",
                limit.in_flight, limit.queued
            ));
        }
        if let Some(pool) = command.thread_pool_metrics()
            && (pool.current_active_count != 0 || pool.current_queue_size != 0)
        {
            held.push(format!(
                "dependency {i}: pool {} active, {} queued",
                pool.current_active_count, pool.current_queue_size
            ));
        }
        let open = backends[i].open.load(Ordering::SeqCst);
        if open != 0 {
            held.push(format!("dependency {i}: {open} connections open"));
        }
    }
    let open = control.open.load(Ordering::SeqCst);
    if open != 0 {
        held.push(format!("control: {open} connections open"));
    }
    held
}

/// Waits up to [`DRAIN`] for nothing to be held, then fails naming what still is.
fn assert_nothing_held(commands: &[Command], backends: &[Arc<Backend>], control: &Backend) {
    let deadline = Instant::now() + DRAIN;
    loop {
        let held = held(commands, backends, control);
        if held.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still held {} s after the load stopped: {}",
            DRAIN.as_secs(),
            held.join("; ")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (up to [`DRAIN`]) until `count` reaches `target`; whether it did.
fn wait_until(count: &AtomicUsize, target: usize) -> bool {
    let deadline = Instant::now() + DRAIN;
    while count.load(Ordering::SeqCst) < target {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Each command admits its full [`PERMITS`] executions at once, and their [`PERMITS`]
/// fallbacks at once: no execution permit, pool thread or fallback permit was leaked. Each
/// run waits until all are running, then fails; each fallback waits until all are falling
/// back, then answers. Blocking runs (THREAD); the async mode's permits are the same
/// semaphores, checked with async runs.
fn assert_full_capacity_blocking(commands: &[Command]) {
    for (i, command) in commands.iter().enumerate() {
        let (running, falling_back) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let calls: Vec<_> = (0..PERMITS)
            .map(|_| {
                let (command, running, falling_back) = (
                    command.clone(),
                    Arc::clone(&running),
                    Arc::clone(&falling_back),
                );
                std::thread::spawn(move || {
                    command
                        .run(move || {
                            running.fetch_add(1, Ordering::SeqCst);
                            if wait_until(&running, PERMITS as usize) {
                                Err(std::io::Error::other("all runs in"))
                            } else {
                                Ok(0)
                            }
                        })
                        .timeout(DRAIN * 2)
                        .fallback(move |_| {
                            falling_back.fetch_add(1, Ordering::SeqCst);
                            if wait_until(&falling_back, PERMITS as usize) {
                                Ok::<_, std::io::Error>(1)
                            } else {
                                Ok(2)
                            }
                        })
                        .execute()
                })
            })
            .collect();
        let answers: Vec<String> = calls
            .into_iter()
            .map(|call| match call.join().expect("a capacity call") {
                Ok(v) => v.to_string(),
                Err(err) => err.to_string(),
            })
            .collect();
        assert!(
            answers.iter().all(|a| a == "1"),
            "dependency {i} did not admit {PERMITS} executions and {PERMITS} fallbacks at once \
             (1 = both, 0 = not every run got in, 2 = not every fallback got in): {answers:?}"
        );
    }
}

fn assert_full_capacity_async(runtime: &tokio::runtime::Runtime, commands: &[Command]) {
    for (i, command) in commands.iter().enumerate() {
        let (running, falling_back) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let calls: Vec<_> = (0..PERMITS)
            .map(|_| {
                let (command, running, falling_back) = (
                    command.clone(),
                    Arc::clone(&running),
                    Arc::clone(&falling_back),
                );
                runtime.spawn(async move {
                    command
                        .run_async(async move {
                            running.fetch_add(1, Ordering::SeqCst);
                            if wait_until_async(&running, PERMITS as usize).await {
                                Err(std::io::Error::other("all runs in"))
                            } else {
                                Ok(0)
                            }
                        })
                        .timeout(DRAIN * 2)
                        .fallback_async(move |_| async move {
                            falling_back.fetch_add(1, Ordering::SeqCst);
                            if wait_until_async(&falling_back, PERMITS as usize).await {
                                Ok::<_, std::io::Error>(1)
                            } else {
                                Ok(2)
                            }
                        })
                        .execute_async()
                        .await
                })
            })
            .collect();
        let answers: Vec<String> = runtime.block_on(async {
            let mut answers = Vec::new();
            for call in calls {
                answers.push(match call.await.expect("a capacity call") {
                    Ok(v) => v.to_string(),
                    Err(err) => err.to_string(),
                });
            }
            answers
        });
        assert!(
            answers.iter().all(|a| a == "1"),
            "dependency {i} did not admit {PERMITS} executions and {PERMITS} fallbacks at once \
             (1 = both, 0 = not every run got in, 2 = not every fallback got in): {answers:?}"
        );
    }
}

async fn wait_until_async(count: &AtomicUsize, target: usize) -> bool {
    let deadline = Instant::now() + DRAIN;
    while count.load(Ordering::SeqCst) < target {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    true
}

// ---------------------------------------------------------------------------------------------
// The report and the verdict.

fn report_and_check(mode: &str, load: &Load) {
    println!("\n== soak, {mode}");
    println!(
        "{:<14} {:>9} {:>8} {:>9} {:>7} {:>12} {:>12}  errors",
        "dependency", "submitted", "values", "fallbacks", "errors", "p99 before", "p99 during"
    );
    let mut healthy = [Vec::new(), Vec::new()];
    let mut wrong = Vec::new();
    let mut lost = Vec::new();
    for (i, tally) in load.tallies.iter().enumerate() {
        let tally = tally.lock().expect("tally");
        let label = if i == LATENT {
            format!("{i} (latent)")
        } else {
            format!("{i}")
        };
        let p = |phase: usize| {
            if tally.latency_us[phase].is_empty() {
                "-".to_owned()
            } else {
                format!("{} µs", p99(&tally.latency_us[phase]))
            }
        };
        println!(
            "{label:<14} {:>9} {:>8} {:>9} {:>7} {:>12} {:>12}  {:?}",
            tally.submitted,
            tally.values,
            tally.fallbacks,
            tally.errors.values().sum::<u64>(),
            p(0),
            p(1),
            tally.errors
        );
        if tally.submitted != tally.ended() {
            lost.push(format!(
                "dependency {i}: {} submitted, {} ended",
                tally.submitted,
                tally.ended()
            ));
        }
        wrong.extend(
            tally
                .wrong
                .iter()
                .take(5)
                .map(|w| format!("dependency {i}: {w}")),
        );
        if i != LATENT {
            for (phase, samples) in healthy.iter_mut().enumerate() {
                samples.extend_from_slice(&tally.latency_us[phase]);
            }
        }
    }
    let control = load.control.lock().expect("control tally");
    let (control_before, control_during) =
        (p99(&control.latency_us[0]), p99(&control.latency_us[1]));
    let (healthy_before, healthy_during) = (p99(&healthy[0]), p99(&healthy[1]));
    println!(
        "{:<14} {:>9} {:>8} {:>9} {:>7} {:>9} µs {:>9} µs  {:?}",
        "control",
        control.submitted,
        control.values,
        0,
        control.errors.values().sum::<u64>(),
        control_before,
        control_during,
        control.errors
    );
    wrong.extend(
        control
            .wrong
            .iter()
            .take(5)
            .map(|w| format!("control: {w}")),
    );
    let growth = (healthy_during as f64 / healthy_before as f64)
        / (control_during as f64 / control_before as f64);
    println!(
        "healthy p99 {healthy_before} µs before, {healthy_during} µs during the latent phase \
         (×{:.3}); control ×{:.3}; growth relative to the control: {growth:.3} (test bound {MAX_GROWTH}, goal ≤ 1.10)",
        healthy_during as f64 / healthy_before as f64,
        control_during as f64 / control_before as f64,
    );
    assert!(lost.is_empty(), "{mode}: lost calls: {}", lost.join("; "));
    assert!(
        wrong.is_empty(),
        "{mode}: calls that ended in something not due: {}",
        wrong.join("; ")
    );
    let latent = load.tallies[LATENT].lock().expect("tally");
    assert!(
        latent.errors.values().sum::<u64>() > 0 && latent.fallbacks > 0,
        "{mode}: the latent command never timed out or fell back: the latent phase did not happen"
    );
    assert!(
        growth <= MAX_GROWTH,
        "{mode}: the healthy commands' p99 grew {growth:.3} times the control's growth (bound {MAX_GROWTH})"
    );
}

fn server_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("soak-server")
        .enable_all()
        .build()
        .expect("the servers' runtime")
}

fn start_backends(runtime: &tokio::runtime::Runtime) -> (Vec<Arc<Backend>>, Arc<Backend>) {
    runtime.block_on(async {
        let mut backends = Vec::new();
        for _ in 0..DEPENDENCIES {
            backends.push(start_backend().await);
        }
        (backends, start_backend().await)
    })
}

#[test]
#[ignore = "a 25 s soak: scripts/test soak runs it"]
fn thread_isolation_with_blocking_runs() {
    let servers = server_runtime();
    let (backends, control) = start_backends(&servers);
    let threads_before = process_threads();
    let registry = Registry::new();
    let commands = build_commands(&registry, "Thread", IsolationStrategy::Thread);
    let load = Arc::new(Load::new());
    run_blocking(&commands, &backends, &control, &load);
    assert_nothing_held(&commands, &backends, &control);
    report_and_check("THREAD isolation, blocking runs", &load);
    assert_full_capacity_blocking(&commands);
    assert_nothing_held(&commands, &backends, &control);
    let pool_threads: u32 = commands
        .iter()
        .filter_map(|c| c.thread_pool_metrics())
        .map(|p| p.current_pool_size)
        .sum();
    assert_no_thread_leaked(&threads_before, "hystrix-SoakThr", pool_threads);
    registry.shutdown();
}

#[test]
#[ignore = "a 25 s soak: scripts/test soak runs it"]
fn semaphore_isolation_with_async_runs() {
    let servers = server_runtime();
    let (backends, control) = start_backends(&servers);
    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("soak-client")
        .enable_all()
        .build()
        .expect("the callers' runtime");
    let threads_before = process_threads();
    let registry = Registry::new();
    let commands = build_commands(&registry, "Semaphore", IsolationStrategy::Semaphore);
    let load = Arc::new(Load::new());
    run_async(&clients, &commands, &backends, &control, &load);
    assert_nothing_held(&commands, &backends, &control);
    report_and_check("SEMAPHORE isolation, async runs", &load);
    assert_full_capacity_async(&clients, &commands);
    assert_nothing_held(&commands, &backends, &control);
    assert_no_thread_leaked(&threads_before, "hystrix-SoakSem", 0);
    registry.shutdown();
}
