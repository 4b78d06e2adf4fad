//! Run functions, and how each kind starts under SEMAPHORE or THREAD isolation.
//!
//! | run kind | SEMAPHORE | THREAD |
//! |---|---|---|
//! | blocking (`run`, `run_cancellable`) | called in the polling thread | a task on the pool's threads |
//! | async (`run_async`) | polled in place | spawned on the pool's own runtime |

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use pin_project_lite::pin_project;
use tokio_util::sync::CancellationToken;

use crate::chaos::{Injection, Planned, Then, Wait};
use crate::circuit::Ticket;
use crate::clock::TimerId;
use crate::command::pipeline::{RunEnd, panic_message, poll_caught};
use crate::context::{Carried, RequestContext};
use crate::isolation::thread_pool::{AsyncSlot, Job, Placed, Rejection, ThreadPool};
use crate::registry::CommandState;

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// How a run ended by itself: its result, or the message of its panic.
pub(crate) type Ran<T, E> = Result<Result<T, E>, String>;

/// A blocking run function, `FnOnce() -> Result<T, E>` (see [`Command::run`](crate::Command::run)).
#[derive(Debug)]
pub struct Blocking<F>(pub(crate) F);

/// A blocking run function that receives a cancellation token (see
/// [`Command::run_cancellable`](crate::Command::run_cancellable)).
#[derive(Debug)]
pub struct Cancellable<F>(pub(crate) F);

/// An async run, a `Future<Output = Result<T, E>>` (see
/// [`Command::run_async`](crate::Command::run_async)).
#[derive(Debug)]
pub struct Async<Fut>(pub(crate) Fut);

/// What a run needs to start.
#[doc(hidden)]
pub struct Start<'a> {
    pub(crate) state: &'a Arc<CommandState>,
    /// The execution's absolute deadline on the registry's clock, if a timeout is armed.
    pub(crate) deadline_ms: Option<u64>,
    /// `execution.isolation.thread.interruptOnTimeout` now.
    pub(crate) interrupt_on_timeout: bool,
    /// The request context of the execution (for a run that moves to a pool).
    pub(crate) context: Option<RequestContext>,
    /// How the handle of an eager execution reaches its queued pool task (`queue()`,
    /// `observe()`).
    pub(crate) cancel_link: Option<&'a Arc<CancelLink>>,
}

impl<'a> Start<'a> {
    /// How an attempt of a command starts under `isolation` with these properties: a run that
    /// moves to a pool carries the request context.
    #[inline(always)]
    pub(crate) fn attempt(
        state: &'a Arc<CommandState>,
        props: &crate::config::HotSnapshot,
        isolation: crate::config::IsolationStrategy,
        deadline_ms: Option<u64>,
        cancel_link: Option<&'a Arc<CancelLink>>,
    ) -> Self {
        Start {
            state,
            deadline_ms,
            interrupt_on_timeout: props.interrupt_on_timeout(),
            context: match isolation {
                crate::config::IsolationStrategy::Thread => RequestContext::current_if_any(),
                crate::config::IsolationStrategy::Semaphore => None,
            },
            cancel_link,
        }
    }

    /// What chaos injection does to this attempt, drawn now (`None` while the command's chaos
    /// is off): read where the run starts, so an attempt without chaos carries nothing more.
    #[inline(always)]
    pub(crate) fn chaos(&self) -> Option<Injection> {
        crate::chaos::draw_now(self.state, self.deadline_ms)
    }
}

/// The link from the handle of an eager execution (`queue()`, `observe()`) to its blocking
/// run's pool task: `cancel()` takes a task that is still queued out of the queue before it
/// returns, so a run answered CANCELLED never starts. The execution itself
/// ends later, on the registry's executor.
#[derive(Default)]
pub(crate) struct CancelLink {
    state: Mutex<LinkState>,
    /// While this says so, `cancel()` leaves the task alone: others wait for its outcome (a
    /// request-cache run with waiters goes on without its caller).
    keep: OnceLock<Box<dyn Fn() -> bool + Send + Sync>>,
    /// `cancel()` withdrew the task: it never runs.
    withdrawn: AtomicBool,
}

#[derive(Default)]
enum LinkState {
    /// No pool task yet (or none at all: a run that is not a queued pool task).
    #[default]
    Open,
    /// The pool task, until it starts or ends.
    Queued {
        job: Weak<dyn Job>,
        pool: ThreadPool,
    },
    /// `cancel()` was called while others wanted the run: it goes on.
    Kept,
    /// `cancel()` was called: a task still queued is withdrawn.
    Cancelled,
}

impl CancelLink {
    /// Cancels: a pool task still queued is withdrawn now, and one submitted later is
    /// withdrawn as it is submitted; unless [`keep_while`](CancelLink::keep_while) says
    /// others want the run.
    pub(crate) fn cancel(&self) {
        let mut state = self.state.lock();
        if self.keep.get().is_some_and(|wanted| wanted()) {
            *state = LinkState::Kept;
            return;
        }
        let previous = std::mem::replace(&mut *state, LinkState::Cancelled);
        drop(state);
        if let LinkState::Queued { job, pool } = previous
            && let Some(job) = job.upgrade()
            && pool.withdraw(&job)
        {
            self.withdrawn.store(true, Ordering::Release);
        }
    }

    /// From now on, `cancel()` withdraws nothing while `wanted()` holds.
    pub(crate) fn keep_while(&self, wanted: impl Fn() -> bool + Send + Sync + 'static) {
        let _ = self.keep.set(Box::new(wanted));
    }

    /// Whether `cancel()` withdrew the run's pool task (it never runs).
    pub(crate) fn withdrew(&self) -> bool {
        self.withdrawn.load(Ordering::Acquire)
    }

    /// `job`, on `pool`, is the execution's pool task.
    fn attach(&self, job: &Arc<dyn Job>, pool: &ThreadPool) {
        let mut state = self.state.lock();
        match *state {
            LinkState::Cancelled => {
                drop(state);
                if pool.withdraw(job) {
                    self.withdrawn.store(true, Ordering::Release);
                }
            }
            LinkState::Kept => {}
            LinkState::Open | LinkState::Queued { .. } => {
                *state = LinkState::Queued {
                    job: Arc::downgrade(job),
                    pool: pool.clone(),
                };
            }
        }
    }
}

impl std::fmt::Debug for CancelLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match *self.state.lock() {
            LinkState::Open => "open",
            LinkState::Queued { .. } => "queued",
            LinkState::Kept => "kept",
            LinkState::Cancelled => "cancelled",
        };
        f.debug_tuple("CancelLink").field(&state).finish()
    }
}

/// A run function of any kind. Runs may move to a pool thread (THREAD isolation), so they and
/// their results are `Send + 'static`, like a thread's or a task's.
pub trait RunFn: sealed::Sealed + Send + 'static {
    /// The value of a successful run.
    type Output: Send + 'static;
    /// The run's error type.
    type Error: Send + 'static;
    /// The run in progress.
    #[doc(hidden)]
    type Running: Future<Output = RunEnd<Self::Output, Self::Error>> + Send + Interrupt;
    /// What makes the runs of later attempts: nothing for a single run, the factory of a
    /// retryable one.
    #[doc(hidden)]
    type Again: crate::retry::Again<
            Run: RunFn<Output = Self::Output, Error = Self::Error, Running = Self::Running>,
        >;
    /// Whether the run blocks its thread (its default isolation is then THREAD, SEMAPHORE
    /// otherwise).
    #[doc(hidden)]
    const BLOCKING: bool;
    /// Takes out what makes the later attempts' runs (called once, when the execution starts).
    #[doc(hidden)]
    fn take_again(&mut self) -> Self::Again;
    /// Starts the run in the polling thread (SEMAPHORE isolation).
    #[doc(hidden)]
    fn start_here(self, start: Start<'_>) -> Self::Running;
    /// Starts the run on `pool` (THREAD isolation), or is refused.
    #[doc(hidden)]
    fn start_on_pool(self, start: Start<'_>, pool: &ThreadPool)
    -> Result<Self::Running, Rejection>;
}

/// A run in progress that can be asked to stop.
pub trait Interrupt {
    /// Cancels the run's token, if it has one and is running on a pool thread; nothing else
    /// (a run polled in place is stopped by being dropped).
    #[doc(hidden)]
    fn interrupt(self: Pin<&mut Self>);

    /// Whether the run's user code started: false for a blocking run whose pool task never
    /// left the queue (withdrawn at its deadline or by a cancellation). A run polled in place,
    /// or spawned on a pool's runtime, counts as started.
    #[doc(hidden)]
    fn started(&self) -> bool {
        true
    }

    /// When the run's user code began on a pool thread, in µs of the precise clock, if it was
    /// recorded (only with adaptive limits on, for the limit's sample; `None` for a run that
    /// begins when the execution polls it).
    #[doc(hidden)]
    fn started_us(&self) -> Option<u64> {
        None
    }

    /// The caller abandons this run, a half-open trial of breaker generation `generation`.
    /// Returns true if the run goes on working (a blocking run on a pool thread) and will give
    /// the trial slot back itself when it stops, so no other trial starts while it still calls
    /// the dependency. A run that stops when dropped returns false.
    #[doc(hidden)]
    fn hold_trial(self: Pin<&mut Self>, generation: u32) -> bool {
        let _ = generation;
        false
    }

    /// Whether chaos injection changed this attempt (its end is marked so, but an attempt
    /// that times out before it ends is not).
    #[doc(hidden)]
    fn injected(&self) -> bool {
        false
    }
}

// ------------------------------------------------------------------------------------------------
// Blocking runs

/// A blocking function, with or without a cancellation token.
#[doc(hidden)]
pub trait BlockingFn: Send + 'static {
    type Output: Send + 'static;
    type Error: Send + 'static;
    const CANCELLABLE: bool;
    /// Calls it; `token` is `Some` for a cancellable run (made only for those: it allocates).
    fn call(self, token: Option<CancellationToken>) -> Result<Self::Output, Self::Error>;
}

impl<F, T, E> BlockingFn for Blocking<F>
where
    F: FnOnce() -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    type Output = T;
    type Error = E;
    const CANCELLABLE: bool = false;
    #[inline]
    fn call(self, _token: Option<CancellationToken>) -> Result<T, E> {
        (self.0)()
    }
}

impl<F, T, E> BlockingFn for Cancellable<F>
where
    F: FnOnce(CancellationToken) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    type Output = T;
    type Error = E;
    const CANCELLABLE: bool = true;
    fn call(self, token: Option<CancellationToken>) -> Result<T, E> {
        (self.0)(token.unwrap_or_default())
    }
}

macro_rules! blocking_run_fn {
    ($kind:ident) => {
        impl<F> sealed::Sealed for $kind<F> {}

        impl<F> RunFn for $kind<F>
        where
            $kind<F>: BlockingFn,
        {
            type Output = <Self as BlockingFn>::Output;
            type Error = <Self as BlockingFn>::Error;
            type Running = BlockingRunning<Self, Self::Output, Self::Error>;
            type Again = crate::retry::Once<Self>;
            const BLOCKING: bool = true;

            #[inline(always)]
            fn take_again(&mut self) -> Self::Again {
                crate::retry::Once::default()
            }

            fn start_here(self, start: Start<'_>) -> Self::Running {
                BlockingRunning::Here {
                    run: Some(self),
                    deadline_ms: start.deadline_ms.filter(|_| start.interrupt_on_timeout),
                    clock: Arc::clone(&start.state.env.clock),
                    chaos: start.chaos().map(|injection| {
                        Box::new(Planned::new(injection, start.deadline_ms, start.state))
                    }),
                }
            }

            fn start_on_pool(
                self,
                start: Start<'_>,
                pool: &ThreadPool,
            ) -> Result<Self::Running, Rejection> {
                let carried = Carried::capture(start.context.as_ref());
                PoolTask::submit(self, &start, pool, carried).map(|(task, job)| {
                    BlockingRunning::OnPool {
                        task,
                        job,
                        pool: pool.clone(),
                    }
                })
            }
        }
    };
}
blocking_run_fn!(Blocking);
blocking_run_fn!(Cancellable);

/// A blocking run in progress: called in place on its first poll, or a task on a pool. Its
/// parameters are plain (`T`, `E` are the run's output and error), so its auto traits need no
/// bound (see the `future` module).
#[doc(hidden)]
pub enum BlockingRunning<R, T, E> {
    /// SEMAPHORE: the run has not been called yet; it is called on the next poll.
    Here {
        run: Option<R>,
        /// When the token is to be cancelled, if the run takes one.
        deadline_ms: Option<u64>,
        clock: Arc<dyn crate::clock::Clock>,
        /// Chaos injection, with the attempt's deadline and its command (boxed: rare, and kept
        /// out of the size of every run).
        chaos: Option<Box<Planned>>,
    },
    /// THREAD: a task on a pool thread (or in its queue).
    OnPool {
        task: Arc<PoolTask<R, T, E>>,
        /// The same task, as the pool holds it.
        job: Arc<dyn Job>,
        pool: ThreadPool,
    },
}

impl<R, T, E> Unpin for BlockingRunning<R, T, E> {}

impl<R, T, E> Future for BlockingRunning<R, T, E>
where
    R: BlockingFn<Output = T, Error = E>,
{
    type Output = RunEnd<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            BlockingRunning::Here {
                run,
                deadline_ms,
                clock,
                chaos,
            } => {
                let Some(run) = run.take() else {
                    return Poll::Ready(RunEnd::Panicked("run polled after it ended".into()));
                };
                let injected = chaos.take().map(|planned| planned.wait_blocking());
                if let Some(ended) = injected.and_then(injected_end) {
                    return Poll::Ready(ended);
                }
                let token = R::CANCELLABLE.then(CancellationToken::new);
                // A cancellable run sees its token cancelled at the deadline.
                let timer: Option<TimerId> = match (&token, deadline_ms) {
                    (Some(token), Some(deadline)) => {
                        let token = token.clone();
                        Some(clock.schedule(*deadline, Box::new(move || token.cancel())))
                    }
                    _ => None,
                };
                let ran = catch_unwind(AssertUnwindSafe(|| run.call(token))).map_err(panic_message);
                // A timer that can no longer be cancelled has fired: the deadline passed, even
                // if a coarse clock does not show it yet.
                let fired = timer.is_some_and(|id| !clock.cancel(id));
                let ended = if fired { RunEnd::TimedOut } else { ran.into() };
                Poll::Ready(ended.injected_if(injected.is_some()))
            }
            BlockingRunning::OnPool { task, .. } => task.poll_result(cx),
        }
    }
}

impl<R, T, E> Interrupt for BlockingRunning<R, T, E> {
    fn injected(&self) -> bool {
        match self {
            BlockingRunning::Here { .. } => false, // it ends in its first poll
            // A task withdrawn from the queue never met its injection.
            BlockingRunning::OnPool { task, .. } => task.chaos.is_some() && self.started(),
        }
    }

    fn started(&self) -> bool {
        match self {
            BlockingRunning::Here { .. } => true,
            BlockingRunning::OnPool { task, .. } => {
                matches!(task.status.load(Ordering::Acquire), RUNNING | DONE)
            }
        }
    }

    fn started_us(&self) -> Option<u64> {
        match self {
            BlockingRunning::Here { .. } => None,
            BlockingRunning::OnPool { task, .. } => match task.started_us.load(Ordering::Acquire) {
                0 => None,
                at_us => Some(at_us),
            },
        }
    }

    fn interrupt(self: Pin<&mut Self>) {
        if let BlockingRunning::OnPool { task, .. } = self.get_mut()
            && let Some(token) = &task.token
        {
            token.cancel();
        }
    }

    fn hold_trial(self: Pin<&mut Self>, generation: u32) -> bool {
        let BlockingRunning::OnPool { task, job, pool } = self.get_mut() else {
            return false; // a run called in place has ended by the time it can be dropped
        };
        if pool.withdraw(job) {
            return false; // it never runs
        }
        // Under the lock `complete` takes it from: either the task sees the held trial when it
        // completes, or it completed already and the caller gives the slot back.
        let mut held = task.held_trial.lock();
        if task.status.load(Ordering::Acquire) == RUNNING {
            *held = Some(generation);
            true
        } else {
            false
        }
    }
}

impl<R, T, E> Drop for BlockingRunning<R, T, E> {
    fn drop(&mut self) {
        if let BlockingRunning::OnPool { task, job, pool } = self {
            // Abandoned while still queued: it is taken off the pool's queue and never runs.
            pool.withdraw(job);
            task.disarm();
        }
    }
}

const QUEUED: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;
const CANCELLED: u8 = 3;

/// A blocking run as a task on a pool: its function until it runs, then its result.
#[doc(hidden)]
pub struct PoolTask<R, T, E> {
    status: AtomicU8,
    run: Mutex<Option<R>>,
    /// Only cancellable runs have one.
    token: Option<CancellationToken>,
    result: Mutex<Option<RunEnd<T, E>>>,
    waker: Mutex<Option<Waker>>,
    /// The generation of a half-open trial its caller abandoned while it ran: its slot is given
    /// back when the run stops.
    held_trial: Mutex<Option<u32>>,
    command: Arc<CommandState>,
    /// The caller's request context and span, re-entered around the run.
    carried: Carried,
    /// The execution's deadline, if a timeout is armed: a task still queued then never runs.
    deadline_ms: Option<u64>,
    /// The timer that withdraws the task at its deadline while it is queued.
    expiry: Mutex<Option<TimerId>>,
    /// When the run began on a pool thread (precise clock, µs; 0 if not recorded): only with
    /// adaptive limits on, whose samples leave the pool's queue out.
    started_us: AtomicU64,
    /// What chaos injection does before the run, if anything.
    chaos: Option<Injection>,
}

impl<R, T, E> PoolTask<R, T, E>
where
    R: BlockingFn<Output = T, Error = E>,
    T: Send + 'static,
    E: Send + 'static,
{
    /// Queues `run` on `pool`; returns the task, and the same task as the pool holds it. A
    /// task that waits in the queue is withdrawn at its deadline by a timer on the registry's
    /// clock, and at once by the handle's `cancel()` (through `start.cancel_link`).
    #[allow(clippy::type_complexity)]
    fn submit(
        run: R,
        start: &Start<'_>,
        pool: &ThreadPool,
        carried: Carried,
    ) -> Result<(Arc<Self>, Arc<dyn Job>), Rejection> {
        let command = start.state;
        let task = Arc::new(PoolTask {
            status: AtomicU8::new(QUEUED),
            run: Mutex::new(Some(run)),
            token: R::CANCELLABLE.then(CancellationToken::new),
            result: Mutex::new(None),
            waker: Mutex::new(None),
            held_trial: Mutex::new(None),
            command: Arc::clone(command),
            carried,
            deadline_ms: start.deadline_ms,
            expiry: Mutex::new(None),
            started_us: AtomicU64::new(0),
            chaos: start.chaos(),
        });
        let job: Arc<dyn Job> = Arc::clone(&task) as Arc<dyn Job>;
        if pool.submit(Arc::clone(&job))? == Placed::Queue {
            if let Some(deadline_ms) = task.deadline_ms {
                let (queued, pool) = (Arc::downgrade(&job), pool.clone());
                let id = command.env.clock.schedule(
                    deadline_ms,
                    Box::new(move || {
                        if let Some(job) = queued.upgrade() {
                            pool.withdraw(&job);
                        }
                    }),
                );
                *task.expiry.lock() = Some(id);
            }
            if let Some(link) = start.cancel_link {
                link.attach(&job, pool);
            }
        }
        Ok((task, job))
    }
}

impl<R, T, E> PoolTask<R, T, E> {
    /// Cancels the deadline's timer, if it is armed (the task started or was withdrawn).
    fn disarm(&self) {
        if let Some(id) = self.expiry.lock().take() {
            self.command.env.clock.cancel(id);
        }
    }

    fn poll_result(&self, cx: &mut Context<'_>) -> Poll<RunEnd<T, E>> {
        let take = || match self.status.load(Ordering::Acquire) {
            DONE => self.result.lock().take(),
            _ => None,
        };
        if let Some(ended) = take() {
            return Poll::Ready(ended);
        }
        *self.waker.lock() = Some(cx.waker().clone());
        // The task may have completed between the check and the waker's registration.
        match take() {
            Some(ended) => Poll::Ready(ended),
            None => Poll::Pending,
        }
    }
}

impl<R, T, E> Job for PoolTask<R, T, E>
where
    R: BlockingFn<Output = T, Error = E>,
    T: Send + 'static,
    E: Send + 'static,
{
    fn run(&self) {
        // Taken from the queue at or past its deadline (its timer may not have fired yet, or
        // may be firing now): it is a TIMEOUT and never runs.
        let clock = &self.command.env.clock;
        if self
            .deadline_ms
            .is_some_and(|deadline| clock.now_ms() >= deadline)
        {
            self.withdraw();
        }
        if self
            .status
            .compare_exchange(QUEUED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return; // withdrawn after a timeout or cancellation
        }
        self.disarm();
        let Some(run) = self.run.lock().take() else {
            return;
        };
        if self.command.properties.hot().load().adaptive() {
            // At least 1: 0 means not recorded.
            self.started_us
                .store(clock.now_us().max(1), Ordering::Release);
        }
        // The command's running-executions gauge counts user code on pool threads too.
        let running = self.command.pool_running.enter();
        self.command
            .counters
            .started(self.command.env.clock.now_ms(), self.command.running());
        let then = self
            .chaos
            .map(|injection| injection.wait_blocking(&self.command, self.deadline_ms));
        let ended =
            then.and_then(injected_end).unwrap_or_else(|| {
                let token = self.token.clone();
                RunEnd::from(self.carried.run(|| {
                    catch_unwind(AssertUnwindSafe(|| run.call(token))).map_err(panic_message)
                }))
                .injected_if(then.is_some())
            });
        drop(running);
        *self.result.lock() = Some(ended);
    }

    fn withdraw(&self) -> bool {
        self.status
            .compare_exchange(QUEUED, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn complete(&self) {
        // A task withdrawn as it was taken from the queue stays CANCELLED (it never ran).
        if self
            .status
            .compare_exchange(RUNNING, DONE, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        if let Some(generation) = self.held_trial.lock().take() {
            self.command.breaker.release(Ticket::Trial(generation));
        }
        if let Some(waker) = self.waker.lock().take() {
            waker.wake();
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Async runs

impl<Fut> sealed::Sealed for Async<Fut> {}

impl<Fut, T, E> RunFn for Async<Fut>
where
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    type Output = T;
    type Error = E;
    type Running = AsyncRunning<Fut, T, E>;
    type Again = crate::retry::Once<Self>;
    const BLOCKING: bool = false;

    #[inline(always)]
    fn take_again(&mut self) -> Self::Again {
        crate::retry::Once::default()
    }

    #[inline(always)]
    fn start_here(self, start: Start<'_>) -> Self::Running {
        match start.chaos() {
            None => AsyncRunning::Here { run: self.0 },
            Some(injection) => injected_here(self.0, injection, &start),
        }
    }

    fn start_on_pool(
        self,
        start: Start<'_>,
        pool: &ThreadPool,
    ) -> Result<Self::Running, Rejection> {
        let chaos = start.chaos();
        let handle = spawn_on_pool(self.0, &start, pool, chaos)?;
        Ok(AsyncRunning::Apart {
            apart: Apart::OnPool(handle, chaos.is_some()),
        })
    }
}

/// Spawns an async run on `pool`'s own runtime, with the caller's request context and span:
/// admitted by a pool slot it holds until the task ends, or refused. The task is aborted when
/// the returned handle drops.
pub(crate) fn spawn_on_pool<Fut, T, E>(
    run: Fut,
    start: &Start<'_>,
    pool: &ThreadPool,
    chaos: Option<Injection>,
) -> Result<AbortOnDrop<RunEnd<T, E>>, Rejection>
where
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    let slot = pool.admit_async()?;
    let runtime = pool.runtime().map_err(|err| {
        tracing::error!(pool = %pool.key(), error = %err, "hystrix: pool runtime did not start");
        Rejection::Shutdown
    })?;
    let command = Arc::clone(start.state);
    let carried = Carried::capture(start.context.as_ref());
    let chaos = chaos.map(|injection| (injection, start.deadline_ms));
    let handle = runtime.spawn(carried.scope(run_spawned(run, command, slot, chaos)));
    Ok(AbortOnDrop(handle))
}

/// The task an async run becomes on its pool's runtime; with chaos injection, its injected
/// wait comes first (holding the pool slot).
async fn run_spawned<Fut, T, E>(
    run: Fut,
    command: Arc<CommandState>,
    slot: AsyncSlot,
    chaos: Option<(Injection, Option<u64>)>,
) -> RunEnd<T, E>
where
    Fut: Future<Output = Result<T, E>>,
{
    let _slot = slot;
    let _running = command.pool_running.enter();
    command
        .counters
        .started(command.env.clock.now_ms(), command.running());
    if let Some((injection, deadline_ms)) = chaos
        && let Some(ended) = injected_end(injection.wait(&command, deadline_ms).await)
    {
        return ended;
    }
    let mut run = std::pin::pin!(run);
    RunEnd::from(std::future::poll_fn(|cx| poll_caught(run.as_mut(), cx)).await)
        .injected_if(chaos.is_some())
}

/// An async run polled in place (SEMAPHORE) after chaos `injection`'s wait.
#[cold]
#[inline(never)]
fn injected_here<Fut, T, E>(
    run: Fut,
    injection: Injection,
    start: &Start<'_>,
) -> AsyncRunning<Fut, T, E> {
    AsyncRunning::Apart {
        apart: Apart::Injected(Box::pin(InjectedRun {
            wait: Some(injection.wait(start.state, start.deadline_ms)),
            run,
        })),
    }
}

pin_project! {
    /// An async run after its injected wait (see [`chaos`](crate::chaos)).
    #[doc(hidden)]
    pub struct InjectedRun<Fut> {
        // `None` once over.
        wait: Option<Wait>,
        #[pin]
        run: Fut,
    }
}

impl<Fut, T, E> Future for InjectedRun<Fut>
where
    Fut: Future<Output = Result<T, E>>,
{
    type Output = RunEnd<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RunEnd<T, E>> {
        let this = self.project();
        if let Some(wait) = this.wait {
            let then = std::task::ready!(Pin::new(wait).poll(cx));
            *this.wait = None;
            if let Some(ended) = injected_end(then) {
                return Poll::Ready(ended);
            }
        }
        poll_caught(this.run, cx).map(|ran| RunEnd::from(ran).injected_if(true))
    }
}

/// How an attempt ends after its injected wait (marked as changed by chaos): `None` if its
/// run follows.
pub(crate) fn injected_end<T, E>(then: Then) -> Option<RunEnd<T, E>> {
    match then {
        Then::Run => None,
        Then::Fault => Some(RunEnd::Injected.injected_if(true)),
        Then::TimedOut => Some(RunEnd::TimedOut.injected_if(true)),
    }
}

/// A task handle that aborts its task when dropped.
#[doc(hidden)]
pub struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pin_project! {
    /// An async run in progress: polled in place, or not (a task on its pool's runtime, or a
    /// run behind chaos injection's wait).
    #[project = AsyncRunningProj]
    #[doc(hidden)]
    pub enum AsyncRunning<Fut, T, E> {
        /// SEMAPHORE: polled in the execution's own poll.
        Here { #[pin] run: Fut },
        /// Everything else (a pool's task, or a run behind chaos injection's wait), in an enum
        /// of its own, so that the run polled in place is matched and moved as before.
        Apart { apart: Apart<Fut, T, E> },
    }
}

/// An async run that is not simply polled in place.
#[doc(hidden)]
pub enum Apart<Fut, T, E> {
    /// THREAD: a task on the pool's runtime (aborted when dropped), and whether chaos
    /// injection changed it.
    OnPool(AbortOnDrop<RunEnd<T, E>>, bool),
    /// SEMAPHORE with chaos injection: the injected wait, then the run polled in place.
    Injected(Pin<Box<InjectedRun<Fut>>>),
}

impl<Fut, T, E> Future for AsyncRunning<Fut, T, E>
where
    Fut: Future<Output = Result<T, E>>,
{
    type Output = RunEnd<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            AsyncRunningProj::Here { run } => poll_caught(run, cx).map(RunEnd::from),
            AsyncRunningProj::Apart { apart } => apart.poll(cx),
        }
    }
}

impl<Fut, T, E> Apart<Fut, T, E>
where
    Fut: Future<Output = Result<T, E>>,
{
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<RunEnd<T, E>> {
        match self {
            Apart::OnPool(handle, _) => Pin::new(&mut handle.0).poll(cx).map(|joined| {
                joined.unwrap_or_else(|err| {
                    RunEnd::Panicked(format!("the run's task ended early: {err}"))
                })
            }),
            Apart::Injected(injected) => injected.as_mut().poll(cx),
        }
    }
}

impl<Fut, T, E> Interrupt for AsyncRunning<Fut, T, E> {
    fn interrupt(self: Pin<&mut Self>) {}

    fn injected(&self) -> bool {
        matches!(
            self,
            AsyncRunning::Apart {
                apart: Apart::Injected(_) | Apart::OnPool(_, true)
            }
        )
    }
}
