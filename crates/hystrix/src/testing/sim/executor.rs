//! The virtual-time executor: many tasks on one thread, time moved from timer to timer.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use parking_lot::Mutex;

use super::load::Load;
use super::report::Report;
use super::{SimError, SimOutcome};
use crate::clock::{Clock, ManualClock};
use crate::registry::Registry;
use crate::testing::TestRegistry;

/// How long, in virtual time, a run waits for its tasks after the last arrival before it gives
/// up with [`SimError::NotDrained`]: 10 minutes, far beyond any timeout a scenario sets.
pub const DEFAULT_DRAIN_LIMIT: Duration = Duration::from_secs(600);

/// A spawned future and its waker (one per task, made at spawn).
struct Task {
    future: Pin<Box<dyn Future<Output = ()>>>,
    flag: Arc<TaskWaker>,
    waker: Waker,
}

/// A deterministic single-threaded executor in virtual time: it owns a [`TestRegistry`] (a
/// registry on a [`ManualClock`] starting at 0 ms), polls every task that was woken until none
/// is, then moves the clock to the earliest pending timer (or the next arrival of a
/// [`Load`]), whose firing wakes the tasks waiting on it, and so on until every task is done.
///
/// Nothing depends on real time or on another thread, so one program gives one result, and ten
/// virtual seconds take as long as the work in them, not ten seconds. Build the commands under
/// test in [`registry`](Sim::registry), run them async
/// (`cmd.run_async(..).execute_async().await`) with SEMAPHORE isolation, the default for async
/// runs, and wait only on the clock ([`clock::sleep`](crate::clock::sleep), a
/// [`Backend`](super::Backend)). THREAD isolation, tokio timers or I/O would complete on other
/// threads in real time: the simulation would stop with [`SimError::Stalled`] or race.
///
/// ```
/// use hystrix::clock::{self, Clock};
/// use hystrix::testing::sim::Sim;
/// use std::time::Duration;
///
/// let mut sim = Sim::new();
/// for ms in [300, 100, 200] {
///     let clock = sim.clock().clone();
///     sim.spawn(async move {
///         clock::sleep(&clock, Duration::from_millis(ms)).await;
///         assert_eq!(clock.now_ms(), ms);
///     });
/// }
/// sim.run()?;
/// assert_eq!(sim.now_ms(), 300);
/// # Ok::<(), hystrix::testing::sim::SimError>(())
/// ```
pub struct Sim {
    test: TestRegistry,
    clock: Arc<dyn Clock>,
    tasks: HashMap<u64, Task>,
    next_id: u64,
    ready: Arc<ReadyQueue>,
    drain_limit_ms: u64,
}

/// Ids of woken tasks, in the order they were woken.
#[derive(Default)]
struct ReadyQueue {
    ids: Mutex<VecDeque<u64>>,
}

struct TaskWaker {
    id: u64,
    /// In the ready queue already (a second wake adds nothing).
    queued: AtomicBool,
    ready: Arc<ReadyQueue>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.ready.ids.lock().push_back(self.id);
        }
    }
}

impl Default for Sim {
    fn default() -> Self {
        Sim::new()
    }
}

impl Sim {
    /// A simulation on a new [`TestRegistry`] (its clock at 0 ms).
    pub fn new() -> Self {
        Sim::with_registry(TestRegistry::new())
    }

    /// A simulation on `test`'s registry and clock (e.g. one whose properties a test set
    /// first).
    pub fn with_registry(test: TestRegistry) -> Self {
        let clock = Arc::clone(test.registry().clock());
        Sim {
            test,
            clock,
            tasks: HashMap::new(),
            next_id: 0,
            ready: Arc::default(),
            drain_limit_ms: millis(DEFAULT_DRAIN_LIMIT),
        }
    }

    /// This simulation with another bound on how long, in virtual time, a run waits for its
    /// tasks after the load's last arrival (default [`DEFAULT_DRAIN_LIMIT`], 10 minutes).
    #[must_use]
    pub fn with_drain_limit(mut self, limit: Duration) -> Self {
        self.drain_limit_ms = millis(limit);
        self
    }

    /// The registry to build the commands under test in.
    pub fn registry(&self) -> &Registry {
        self.test.registry()
    }

    /// The test registry (its force-open helpers and its [`ManualClock`]).
    pub fn test_registry(&self) -> &TestRegistry {
        &self.test
    }

    /// The registry's clock, for [`clock::sleep`](crate::clock::sleep) and
    /// [`BackendBuilder::build`](super::BackendBuilder::build).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Virtual time now, in ms since the clock's origin.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Tasks spawned and not finished.
    pub fn pending_tasks(&self) -> usize {
        self.tasks.len()
    }

    /// Adds a task; it is first polled by the next run ([`run`](Sim::run),
    /// [`run_until`](Sim::run_until), [`run_load`](Sim::run_load)). It need not be `Send`.
    pub fn spawn(&mut self, task: impl Future<Output = ()> + 'static) {
        let id = self.next_id;
        self.next_id += 1;
        let flag = Arc::new(TaskWaker {
            id,
            queued: AtomicBool::new(false),
            ready: Arc::clone(&self.ready),
        });
        let waker = Waker::from(Arc::clone(&flag));
        self.tasks.insert(
            id,
            Task {
                future: Box::pin(task),
                flag,
                waker,
            },
        );
        self.tasks[&id].flag.wake_by_ref();
    }

    /// Runs until every task has finished, moving time from timer to timer; time stays at the
    /// last one that was needed.
    ///
    /// # Errors
    /// [`SimError::Stalled`] when tasks are left that no timer will wake;
    /// [`SimError::NotDrained`] when they are not done within the drain limit from now.
    pub fn run(&mut self) -> Result<(), SimError> {
        let limit = self.now_ms().saturating_add(self.drain_limit_ms);
        loop {
            self.poll_ready();
            if self.tasks.is_empty() {
                return Ok(());
            }
            let next = self.next_timer().ok_or_else(|| self.stalled())?;
            if next > limit {
                return Err(self.not_drained());
            }
            self.advance_to(next);
        }
    }

    /// Runs until virtual time reaches `time_ms` (ms since the clock's origin), firing the
    /// timers due on the way and polling what they wake; tasks may be left pending. Time ends
    /// at `time_ms` (or stays where it is if it is past it already).
    pub fn run_until(&mut self, time_ms: u64) {
        loop {
            self.poll_ready();
            match self.next_timer() {
                Some(next) if next <= time_ms => self.advance_to(next),
                _ => break,
            }
        }
        self.advance_to(time_ms);
        self.poll_ready();
    }

    /// Runs `load`: at each arrival, calls `request` with the request's index (0, 1, …) and runs
    /// the future it returns as a task; the future's [`SimOutcome`] and its latency (virtual
    /// time from the arrival to the outcome) are recorded. Returns once the last request has
    /// finished, with their [`Report`] (add the backend's stats with
    /// [`Report::with_backend`]).
    ///
    /// Other tasks spawned before run alongside; the run does not wait for them.
    ///
    /// ```
    /// use hystrix::testing::sim::{Backend, Load, ServiceTime, Sim, SimOutcome};
    /// use hystrix::{Command, IsolationStrategy};
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    ///
    /// let mut sim = Sim::new();
    /// let backend = Backend::builder()
    ///     .service_time(ServiceTime::constant(Duration::from_millis(20)))
    ///     .failure_rate(0.25)
    ///     .seed(7)
    ///     .build(sim.clock())?;
    /// let cmd = Command::builder("Backend")
    ///     .group("Sim")
    ///     .isolation(IsolationStrategy::Semaphore)
    ///     .semaphore_max_concurrent_requests(100)
    ///     .build_in(sim.registry())?;
    ///
    /// let load = Load::constant(100.0, Duration::from_secs(1));
    /// let report = sim.run_load(&load, |_| {
    ///     let (cmd, call) = (cmd.clone(), backend.call());
    ///     async move {
    ///         let response = cmd
    ///             .run_async(call)
    ///             .fallback(|_| Ok::<_, Infallible>(SimOutcome::Fallback))
    ///             .execute_async()
    ///             .await;
    ///         SimOutcome::from_response(response)
    ///     }
    /// })?;
    /// let report = report.with_backend(backend.stats());
    /// assert_eq!(report.offered(), 100);
    /// assert_eq!(report.answered() + report.fallback(), 100);
    /// assert_eq!(report.latency().max_ms, 20);
    /// assert_eq!(report.backend_calls_per_request(), Some(1.0));
    /// println!("{report}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`SimError::Invalid`] for a load whose rate is not a positive number;
    /// [`SimError::Stalled`] when requests are left that no timer will wake;
    /// [`SimError::NotDrained`] when they are not done within the drain limit after the last
    /// arrival.
    pub fn run_load<F, Fut>(&mut self, load: &Load, mut request: F) -> Result<Report, SimError>
    where
        F: FnMut(u64) -> Fut,
        Fut: Future<Output = SimOutcome> + 'static,
    {
        let mut arrivals = load.arrival_times_ms()?.peekable();
        let start = self.now_ms();
        let report = Rc::new(RefCell::new(Report::new(start)));
        // Requests of this load not finished yet.
        let open = Rc::new(RefCell::new(0u64));
        let mut index = 0u64;
        let mut last_arrival = start;
        loop {
            let now = self.now_ms();
            while let Some(at) = arrivals.next_if(|offset| start.saturating_add(*offset) <= now) {
                last_arrival = start.saturating_add(at);
                let future = request(index);
                index += 1;
                report.borrow_mut().offer();
                *open.borrow_mut() += 1;
                let (report, open, clock) =
                    (Rc::clone(&report), Rc::clone(&open), self.clock.clone());
                self.spawn(async move {
                    let outcome = future.await;
                    let end = clock.now_ms();
                    report
                        .borrow_mut()
                        .record(outcome, end.saturating_sub(now), end);
                    *open.borrow_mut() -= 1;
                });
            }
            self.poll_ready();
            let next_arrival = arrivals.peek().map(|at| start.saturating_add(*at));
            if next_arrival.is_none() && *open.borrow() == 0 {
                break;
            }
            let next = match (self.next_timer(), next_arrival) {
                (Some(timer), Some(arrival)) => timer.min(arrival),
                (timer, arrival) => timer.or(arrival).ok_or_else(|| self.stalled())?,
            };
            if next_arrival.is_none() && next > last_arrival.saturating_add(self.drain_limit_ms) {
                return Err(self.not_drained());
            }
            self.advance_to(next);
        }
        let report = report.borrow().clone();
        Ok(report)
    }

    /// Polls every woken task, and those they wake, until none is woken.
    fn poll_ready(&mut self) {
        loop {
            // The lock is released before polling: a task's wake pushes onto the queue.
            let Some(id) = self.ready.ids.lock().pop_front() else {
                return;
            };
            let Some(task) = self.tasks.get_mut(&id) else {
                // Woken after it finished.
                continue;
            };
            // Cleared before the poll: a wake during it polls the task again.
            task.flag.queued.store(false, Ordering::Release);
            let mut cx = Context::from_waker(&task.waker);
            if task.future.as_mut().poll(&mut cx).is_ready() {
                self.tasks.remove(&id);
            }
        }
    }

    fn next_timer(&self) -> Option<u64> {
        self.manual().next_timer_deadline_ms()
    }

    /// Moves time to `time_ms` (no earlier than now), firing due timers on this thread.
    fn advance_to(&self, time_ms: u64) {
        let clock = self.manual();
        clock.advance_ms(time_ms.saturating_sub(clock.now_ms()));
    }

    fn manual(&self) -> &ManualClock {
        self.test.clock()
    }

    fn stalled(&self) -> SimError {
        SimError::Stalled {
            now_ms: self.now_ms(),
            pending_tasks: self.tasks.len(),
        }
    }

    fn not_drained(&self) -> SimError {
        SimError::NotDrained {
            now_ms: self.now_ms(),
            pending_tasks: self.tasks.len(),
        }
    }
}

impl fmt::Debug for Sim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sim")
            .field("now_ms", &self.now_ms())
            .field("pending_tasks", &self.tasks.len())
            .field("pending_timers", &self.manual().pending_timers())
            .finish_non_exhaustive()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
