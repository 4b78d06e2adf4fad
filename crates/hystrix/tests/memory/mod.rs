//! Measures the heap memory a command key keeps, with a counting global allocator: used by
//! `tests/memory_per_key.rs` (which holds the guide's numbers, docs/differences.md, to it) and
//! by `examples/memory_per_key.rs` (which prints them). Its binary must run nothing else at the
//! same time: the counts are of every thread.
#![allow(dead_code, unreachable_pub, unsafe_code, clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::backtrace::Backtrace;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use hystrix::clock::Clock;
use hystrix::testing::TestRegistry;
use hystrix::{Command, EventType, IsolationStrategy};

/// Bytes asked for and not freed yet, and the number of such allocations (every thread).
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
static LIVE_ALLOCATIONS: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    /// While set, this thread's allocations are also recorded one by one, with the code that
    /// made them (the census).
    static CENSUS_ON: Cell<bool> = const { Cell::new(false) };
    /// Set while the census itself allocates, which it does not record.
    static IN_CENSUS: Cell<bool> = const { Cell::new(false) };
    static CENSUS: RefCell<Vec<(usize, usize, String)>> = const { RefCell::new(Vec::new()) };
}

struct Counting;

// SAFETY: forwards to the system allocator; only adds counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
            LIVE_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            record(|entries| entries.push((ptr as usize, layout.size(), made_by())));
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        LIVE_ALLOCATIONS.fetch_sub(1, Ordering::Relaxed);
        record(|entries| entries.retain(|entry| entry.0 != ptr as usize));
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` on the census when it is on and not already running on this thread.
fn record(f: impl FnOnce(&mut Vec<(usize, usize, String)>)) {
    if CENSUS_ON.with(Cell::get) && !IN_CENSUS.with(Cell::get) {
        IN_CENSUS.with(|busy| busy.set(true));
        CENSUS.with(|entries| f(&mut entries.borrow_mut()));
        IN_CENSUS.with(|busy| busy.set(false));
    }
}

/// The innermost two functions of hystrix that led to an allocation.
fn made_by() -> String {
    let trace = Backtrace::force_capture().to_string();
    let frames: Vec<&str> = trace
        .lines()
        .filter_map(|line| line.trim().split_once(": ").map(|(_, function)| function))
        .filter(|function| function.starts_with("hystrix::"))
        .take(2)
        .collect();
    frames.join(" <- ")
}

fn live() -> (isize, isize) {
    (
        LIVE_BYTES.load(Ordering::Relaxed),
        LIVE_ALLOCATIONS.load(Ordering::Relaxed),
    )
}

/// Heap bytes and allocations per key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerKey {
    pub bytes: f64,
    pub allocations: f64,
}

impl PerKey {
    fn since(from: (isize, isize), keys: usize) -> Self {
        let now = live();
        PerKey {
            bytes: (now.0 - from.0) as f64 / keys as f64,
            allocations: (now.1 - from.1) as f64 / keys as f64,
        }
    }
}

/// What each run does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Run {
    /// A success taking 3 ms.
    Success,
    /// A failure after 3 ms answered by a fallback taking 1 ms: execution and total latency
    /// differ (as with a fallback, or a wait in a thread pool's queue).
    Fallback,
}

/// Per key, at each step of [`measure`].
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Defined, never run (the `Command` handles kept).
    pub defined: PerKey,
    /// After the runs.
    pub ran: PerKey,
    /// After 70 s more and one read of each key's metrics.
    pub idle: PerKey,
    /// Then with the handles dropped: the registry's state alone.
    pub registry_only: PerKey,
}

fn define(test: &TestRegistry, name: &str) -> Command {
    Command::builder(name)
        .group("Memory")
        .isolation(IsolationStrategy::Semaphore)
        .build_in(test.registry())
        .unwrap()
}

fn run(test: &TestRegistry, cmd: &Command, how: Run) {
    let clock = test.clock().clone();
    let execution = cmd.run(move || {
        clock.advance(Duration::from_millis(3));
        match how {
            Run::Success => Ok(()),
            Run::Fallback => Err(std::io::Error::other("failed")),
        }
    });
    let clock = test.clock().clone();
    execution
        .fallback(move |_| {
            clock.advance(Duration::from_millis(1));
            Ok::<_, std::io::Error>(())
        })
        .execute()
        .unwrap();
}

/// Moves the clock to the start of the next 10 s latency bucket.
fn next_latency_bucket(test: &TestRegistry) {
    let now = test.clock().now_ms();
    test.clock()
        .advance(Duration::from_millis((now / 10_000 + 1) * 10_000 - now));
}

/// Defines `keys` command keys in a fresh registry on a manual clock (SEMAPHORE isolation: a
/// thread pool belongs to a pool key, not to a command key), runs each key `how` once in each
/// of `buckets` consecutive 10 s latency buckets, lets 70 s pass (every window rolls past the
/// runs), reads each key's metrics once, then drops the handles.
pub fn measure(keys: usize, buckets: u32, how: Run) -> Measured {
    let test = TestRegistry::new();
    // The registry's own first-use allocations are not a key's.
    let warm = define(&test, "Warm-up");
    run(&test, &warm, how);
    warm.metrics();
    let names: Vec<String> = (0..keys).map(|i| format!("Key-{i:06}")).collect();
    let mut handles = Vec::with_capacity(keys);
    let baseline = live();

    for name in &names {
        handles.push(define(&test, name));
    }
    let defined = PerKey::since(baseline, keys);
    for cmd in &handles {
        for _ in 0..buckets {
            next_latency_bucket(&test);
            run(&test, cmd, how);
        }
    }
    let ran = PerKey::since(baseline, keys);
    test.clock().advance(Duration::from_secs(70));
    let event = match how {
        Run::Success => EventType::Success,
        Run::Fallback => EventType::FallbackSuccess,
    };
    for cmd in &handles {
        let metrics = cmd.metrics();
        assert_eq!(metrics.cumulative_count(event), u64::from(buckets));
        assert_eq!(metrics.rolling_count(event), 0);
    }
    let idle = PerKey::since(baseline, keys);
    // Keeps the vector's buffer, allocated before the baseline.
    handles.clear();
    let registry_only = PerKey::since(baseline, keys);
    Measured {
        defined,
        ran,
        idle,
        registry_only,
    }
}

/// The allocations one key keeps once run once and idle, its handle dropped: (bytes, the
/// innermost two functions of hystrix that made it), in the order made. Needs debug symbols
/// for the names.
pub fn census() -> Vec<(usize, String)> {
    let test = TestRegistry::new();
    let warm = define(&test, "Warm-up");
    run(&test, &warm, Run::Success);
    warm.metrics();
    let name = String::from("Key-000000");
    CENSUS_ON.with(|on| on.set(true));
    let cmd = define(&test, &name);
    run(&test, &cmd, Run::Success);
    test.clock().advance(Duration::from_secs(70));
    cmd.metrics();
    drop(cmd);
    CENSUS_ON.with(|on| on.set(false));
    CENSUS.with(|entries| {
        entries
            .take()
            .into_iter()
            .map(|(_, size, made_by)| (size, made_by))
            .collect()
    })
}
