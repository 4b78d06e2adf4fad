//! What the three bench binaries share: the scenarios (one per peer and scenario of
//! BENCH_PLAN §8) and the small harness pieces they are built from.
//!
//! A scenario is built lazily (its objects, held permits and pre-recorded windows exist only
//! while it is measured) and then run as `run(iters) -> time of iters calls`, so the same code
//! gives criterion's ns per call (`peers`), allocations per call (`allocations`) and
//! instructions per call under callgrind (`instructions`).

pub mod scenarios;

use std::future::Future;
use std::hint::black_box;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Runs `iters` calls of one scenario and returns how long they took (only the calls: objects
/// are built before, and async scenarios time inside `block_on`).
pub type Runner = Box<dyn FnMut(u64) -> Duration>;

/// One measured case: a scenario group (A, B, ...), an implementation, and how to build it.
pub struct Scenario {
    /// The BENCH_PLAN §8 scenario, used as the criterion group name.
    pub group: &'static str,
    /// The implementation and its configuration, used as the criterion function name.
    pub name: String,
    /// A criterion parameter (threads for F, calls in the window for H).
    pub param: Option<String>,
    /// Calls made by one criterion iteration (the thread count in F); criterion reports
    /// elements per second for these.
    pub elements: Option<u64>,
    /// Single-threaded and steady: also measured for allocations and instructions.
    pub per_call: bool,
    /// Ours on a path whose target is zero allocations per call.
    pub zero_alloc_target: bool,
    /// At most this many calls per run outside criterion (allocation and instruction counts):
    /// for rows whose calls wait for a timer.
    pub max_calls: Option<u64>,
    /// Builds the objects (outside any timed region) and returns the runner.
    pub build: Box<dyn FnOnce() -> Runner>,
}

impl Scenario {
    pub fn new(
        group: &'static str,
        name: impl Into<String>,
        build: impl FnOnce() -> Runner + 'static,
    ) -> Self {
        Scenario {
            group,
            name: name.into(),
            param: None,
            elements: None,
            per_call: true,
            zero_alloc_target: false,
            max_calls: None,
            build: Box::new(build),
        }
    }

    /// The full id, as criterion prints it: `group/name[/param]`.
    pub fn id(&self) -> String {
        match &self.param {
            Some(param) => format!("{}/{}/{}", self.group, self.name, param),
            None => format!("{}/{}", self.group, self.name),
        }
    }

    fn zero_alloc(mut self) -> Self {
        self.zero_alloc_target = true;
        self
    }

    fn max_calls(mut self, calls: u64) -> Self {
        self.max_calls = Some(calls);
        self
    }

    /// `calls`, capped by [`Scenario::max_calls`].
    pub fn calls(&self, calls: u64) -> u64 {
        self.max_calls.map_or(calls, |max| calls.min(max))
    }

    fn multi(mut self, param: String, elements: Option<u64>) -> Self {
        self.param = Some(param);
        self.elements = elements;
        self.per_call = false;
        self
    }
}

/// The value every inner operation returns.
pub const VALUE: u64 = 7;

/// The inner operations' error type: they never fail.
pub type Never = std::convert::Infallible;

/// A current-thread tokio runtime with the time driver (tower-resilience's bulkhead and time
/// limiter, nasa hystrix's timeout and tower's `timeout` need it).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime")
}

/// `iters` calls of a synchronous operation.
pub fn sync_runner<T>(mut op: impl FnMut() -> T + 'static) -> Runner {
    Box::new(move |iters| {
        let start = Instant::now();
        for _ in 0..iters {
            black_box(op());
        }
        start.elapsed()
    })
}

/// `iters` awaits of futures made by `make`, in one `block_on` of a current-thread runtime
/// (what criterion's `to_async(..).iter(..)` does, timed inside the runtime).
pub fn async_runner<Fut: Future>(
    rt: tokio::runtime::Runtime,
    mut make: impl FnMut() -> Fut + 'static,
) -> Runner {
    Box::new(move |iters| {
        rt.block_on(async {
            let start = Instant::now();
            for _ in 0..iters {
                black_box(make().await);
            }
            start.elapsed()
        })
    })
}

/// `iters` calls of a tower service: `ready().await` then `call(request).await`, on a
/// current-thread runtime.
pub fn tower_runner<S>(rt: tokio::runtime::Runtime, mut svc: S, request: u64) -> Runner
where
    S: tower::Service<u64> + 'static,
{
    Box::new(move |iters| {
        rt.block_on(async {
            let start = Instant::now();
            for _ in 0..iters {
                let _ = black_box(tower_call(&mut svc, black_box(request)).await);
            }
            start.elapsed()
        })
    })
}

/// One tower call: readiness, then the call.
pub async fn tower_call<S: tower::Service<u64>>(
    svc: &mut S,
    request: u64,
) -> Result<S::Response, S::Error> {
    use tower::ServiceExt;
    svc.ready().await?.call(request).await
}

/// The inner tower service everywhere: answers the request with a ready future.
pub fn echo(request: u64) -> std::future::Ready<Result<u64, Never>> {
    std::future::ready(Ok(request))
}

/// A request that [`echo_or_hang`] never answers: used to hold bulkhead permits.
pub const HANG: u64 = u64::MAX;

/// [`echo_or_hang`]'s future: ready, or pending forever.
pub type EchoOrHang = futures::future::Either<
    std::future::Ready<Result<u64, Never>>,
    std::future::Pending<Result<u64, Never>>,
>;

/// As [`echo`], except that [`HANG`] gets a future that never completes.
pub fn echo_or_hang(request: u64) -> EchoOrHang {
    if request == HANG {
        futures::future::Either::Right(std::future::pending())
    } else {
        futures::future::Either::Left(std::future::ready(Ok(request)))
    }
}

/// Polls a future once with a no-op waker and returns it if it is still pending (it then holds
/// whatever it acquired, e.g. a bulkhead permit). Panics if it completed.
pub fn park<F: Future + Unpin>(mut future: F, what: &str) -> F {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match std::pin::Pin::new(&mut future).poll(&mut cx) {
        std::task::Poll::Pending => future,
        std::task::Poll::Ready(_) => {
            panic!("{what}: the holder completed instead of holding its permit")
        }
    }
}

/// Leaks a value: bench objects that futures borrow for the rest of the process.
pub fn leak<T>(value: T) -> &'static T {
    Box::leak(Box::new(value))
}

/// Pre-spawned worker threads for the scaling scenario (F). `run(iters)` releases every worker
/// through a barrier, each makes `iters` calls, and the time until the last one finishes is
/// returned. No thread is spawned inside the timed region.
pub struct Workers {
    senders: Vec<mpsc::Sender<u64>>,
    handles: Vec<JoinHandle<()>>,
    start: Arc<Barrier>,
    done: Arc<Barrier>,
}

impl Workers {
    /// `threads` workers; `make(i)` builds worker `i`'s batch function (`iters` calls) on the
    /// calling thread, so every object is ready before the first measurement.
    pub fn spawn<B>(threads: usize, mut make: impl FnMut(usize) -> B) -> Self
    where
        B: FnMut(u64) + Send + 'static,
    {
        let start = Arc::new(Barrier::new(threads + 1));
        let done = Arc::new(Barrier::new(threads + 1));
        let mut senders = Vec::with_capacity(threads);
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let mut batch = make(i);
            let (tx, rx) = mpsc::channel::<u64>();
            let (start, done) = (Arc::clone(&start), Arc::clone(&done));
            let handle = std::thread::Builder::new()
                .name(format!("bench-worker-{i}"))
                .spawn(move || {
                    while let Ok(iters) = rx.recv() {
                        start.wait();
                        batch(iters);
                        done.wait();
                    }
                })
                .expect("spawn a bench worker");
            senders.push(tx);
            handles.push(handle);
        }
        Workers {
            senders,
            handles,
            start,
            done,
        }
    }

    /// Every worker makes `iters` calls; returns the wall time from the common start to the
    /// last worker's end.
    pub fn run(&self, iters: u64) -> Duration {
        for tx in &self.senders {
            tx.send(iters).expect("a bench worker is alive");
        }
        self.start.wait();
        let start = Instant::now();
        self.done.wait();
        start.elapsed()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.senders.clear();
        for handle in self.handles.drain(..) {
            let _ = handle.join();
        }
    }
}

/// `calls(state, k)` of [`WindowFill`]: makes `k` calls, returns their time.
pub type WindowCalls<S> = Box<dyn FnMut(&mut S, u64) -> Duration>;

/// The H scenario's runner: keeps between `n` and `2n` calls recorded inside a window of
/// `window` while measuring. A fresh state is made and pre-filled with `n` untimed calls
/// whenever the measured calls would push it past `2n` or its oldest calls come near the end of
/// the window.
pub struct WindowFill<S> {
    n: u64,
    max_age: Duration,
    fresh: Box<dyn FnMut() -> S>,
    calls: WindowCalls<S>,
    state: Option<(S, Instant, u64)>,
}

impl<S: 'static> WindowFill<S> {
    /// `fresh()` builds a new, empty state; `calls(state, k)` makes `k` calls and returns their
    /// time (used untimed for the pre-fill too).
    pub fn new(
        n: u64,
        window: Duration,
        fresh: impl FnMut() -> S + 'static,
        calls: impl FnMut(&mut S, u64) -> Duration + 'static,
    ) -> Self {
        WindowFill {
            n,
            // Leave a margin before the first pre-filled call leaves the window.
            max_age: window.mul_f64(0.8),
            fresh: Box::new(fresh),
            calls: Box::new(calls),
            state: None,
        }
    }

    fn refill(&mut self) {
        self.state = None;
        let mut state = (self.fresh)();
        let filled_from = Instant::now();
        let took = (self.calls)(&mut state, self.n);
        if took > self.max_age / 2 {
            eprintln!(
                "note: pre-filling {} calls took {took:.1?}; the window holds them for only {:.1?} more",
                self.n,
                self.max_age.saturating_sub(took)
            );
        }
        self.state = Some((state, filled_from, 0));
    }

    /// Fills the first state now (criterion times the wall clock of its warm-up calls, so a
    /// fill inside the first one would make it plan far too few iterations).
    pub fn into_runner(mut self) -> Runner {
        self.refill();
        Box::new(move |iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let stale = match &self.state {
                    None => true,
                    Some((_, filled_from, extra)) => {
                        *extra >= self.n || filled_from.elapsed() > self.max_age
                    }
                };
                if stale {
                    self.refill();
                }
                let (state, _, extra) = self.state.as_mut().expect("filled above");
                let chunk = left.min(self.n - *extra);
                total += (self.calls)(state, chunk);
                *extra += chunk;
                left -= chunk;
            }
            total
        })
    }
}

/// Builds every scenario, in report order.
pub fn all() -> Vec<Scenario> {
    scenarios::all()
}
