//! THREAD isolation: one pool of our own OS threads per thread-pool key (Hystrix's
//! `HystrixThreadPool` over a `ThreadPoolExecutor`), plus, on first use, a tokio runtime of its
//! own for async runs, both under one admission budget.
//!
//! Scheduling follows `ThreadPoolExecutor` as Hystrix configures it: below `coreSize`
//! threads a new thread takes the task; otherwise the task is queued (a bounded FIFO when
//! `maxQueueSize > 0`; with hand-off, only if an idle thread waits for it); otherwise a thread is
//! added up to `actualMaximumSize`; otherwise the task is rejected. With a queue, a task is also
//! rejected once `queueSizeRejectionThreshold` tasks wait. Threads above `coreSize` end after
//! `keepAliveTimeMinutes` idle, timed on the registry's [`Clock`]. Sizes and the threshold are
//! read at every schedule; the queue's capacity is fixed when the pool is created.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::clock::{Clock, TimerId};
use crate::config::{PropertyCell, ThreadPoolKind};
use crate::key::ThreadPoolKey;
use crate::metrics::rolling::{RollingCounts, View};

/// The pool's rolling counters.
const EXECUTED: usize = 0;
const REJECTED: usize = 1;

/// Work run by a pool thread. Neither method may panic (the pipeline catches user panics).
#[doc(hidden)]
pub trait Job: Send + Sync + 'static {
    /// Runs the work on the calling pool thread.
    fn run(&self);
    /// Hands the result over to whoever waits for it; called after the pool has counted the
    /// task as finished, so its gauges are settled when the waiter wakes.
    fn complete(&self) {}
    /// Gives up the task if it has not started: returns true if it now never runs (see
    /// [`ThreadPool::withdraw`]). A task that cannot be given up returns false.
    fn withdraw(&self) -> bool {
        false
    }
}

/// Where [`ThreadPool::submit`] put a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placed {
    /// A thread runs it now.
    Thread,
    /// It waits in the queue (or is handed off to an idle thread that has yet to take it).
    Queue,
}

/// Why a pool refused work (THREAD_POOL_REJECTED).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)]
pub enum Rejection {
    /// `queueSizeRejectionThreshold` tasks are already queued.
    QueueThreshold { threshold: u32 },
    /// Every thread is busy and the queue (if any) is full.
    Full { maximum_size: u32, queue_size: u32 },
    /// The registry is shutting down.
    Shutdown,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::QueueThreshold { threshold } => write!(
                f,
                "thread-pool queue is at its rejection threshold ({threshold} tasks)"
            ),
            Rejection::Full {
                maximum_size,
                queue_size,
            } => {
                let threads = if *maximum_size == 1 {
                    "thread"
                } else {
                    "threads"
                };
                let tasks = if *queue_size == 1 { "task" } else { "tasks" };
                write!(
                    f,
                    "all {maximum_size} {threads} busy and {queue_size} {tasks} queued"
                )
            }
            Rejection::Shutdown => f.write_str("the registry is shutting down"),
        }
    }
}

struct State {
    queue: VecDeque<Arc<dyn Job>>,
    /// Threads alive.
    threads: u32,
    /// Threads running a task.
    busy: u32,
    /// Async runs admitted and not yet finished.
    async_in_flight: u32,
    shutdown: bool,
}

struct Shared {
    key: ThreadPoolKey,
    properties: Arc<PropertyCell<ThreadPoolKind>>,
    /// `maxQueueSize` when positive; 0 means hand-off. Fixed at creation.
    queue_capacity: u32,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    work_ready: Condvar,
    thread_left: Condvar,
    // Gauges, written under the state lock and readable without it.
    active: AtomicU32,
    queue_size: AtomicU32,
    pool_size: AtomicU32,
    largest: AtomicU32,
    /// Worker threads of the pool's runtime for async runs (0 until it is created).
    runtime_workers: AtomicU32,
    completed: AtomicU64,
    /// Rolling EXECUTED / REJECTED counts and the rolling max of active tasks, over the pool's
    /// `metrics.rollingStats.*` window (fixed at creation).
    counts: RollingCounts<2>,
    /// The window `counts` is read through.
    window: View,
    next_thread: AtomicU32,
    handles: Mutex<Vec<JoinHandle<()>>>,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
}

thread_local! {
    /// The pool this thread belongs to (its `Shared`'s address), 0 for other threads.
    static CURRENT_POOL: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A thread pool (bulkhead) for one thread-pool key. Cheap to clone.
#[derive(Clone)]
#[doc(hidden)]
pub struct ThreadPool {
    shared: Arc<Shared>,
}

impl fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadPool")
            .field("key", &self.shared.key)
            .field("metrics", &self.metrics())
            .finish()
    }
}

/// What [`ThreadPool::shutdown`] could do within its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShutdownReport {
    /// Threads joined.
    pub(crate) joined: usize,
    /// Threads still running a task when the bound passed; left to finish on their own.
    pub(crate) detached: usize,
}

impl ThreadPool {
    /// A pool with no threads yet; `max_queue_size` is the (fixed) `maxQueueSize`.
    pub(crate) fn new(
        key: ThreadPoolKey,
        properties: Arc<PropertyCell<ThreadPoolKind>>,
        max_queue_size: i32,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let (window_ms, buckets) = {
            let props = properties.load();
            (
                props.metrics_rolling_stats_time_in_milliseconds,
                props.metrics_rolling_stats_num_buckets,
            )
        };
        let bucket_ms = window_ms / u64::from(buckets.max(1));
        let window = View::new(bucket_ms, bucket_ms, buckets);
        ThreadPool {
            shared: Arc::new(Shared {
                key,
                properties,
                queue_capacity: u32::try_from(max_queue_size).unwrap_or(0),
                clock,
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    threads: 0,
                    busy: 0,
                    async_in_flight: 0,
                    shutdown: false,
                }),
                work_ready: Condvar::new(),
                thread_left: Condvar::new(),
                active: AtomicU32::new(0),
                queue_size: AtomicU32::new(0),
                pool_size: AtomicU32::new(0),
                largest: AtomicU32::new(0),
                runtime_workers: AtomicU32::new(0),
                completed: AtomicU64::new(0),
                counts: RollingCounts::new(bucket_ms, window.fine_buckets_kept()),
                window,
                next_thread: AtomicU32::new(0),
                handles: Mutex::new(Vec::new()),
                runtime: Mutex::new(None),
            }),
        }
    }

    /// The pool's key.
    pub(crate) fn key(&self) -> &ThreadPoolKey {
        &self.shared.key
    }

    /// Schedules `job` on a pool thread, or refuses it (never blocks on the pool).
    pub(crate) fn submit(&self, job: Arc<dyn Job>) -> Result<Placed, Rejection> {
        let shared = &self.shared;
        let props = shared.properties.hot().load();
        let mut st = shared.state.lock();
        if st.threads > props.core_size + st.busy {
            // coreSize was lowered: idle threads above it start their keep-alive.
            shared.work_ready.notify_all();
        }
        match shared.placement(&st, &props)? {
            Placed::Thread => shared.spawn(&mut st, job).map(|()| Placed::Thread),
            Placed::Queue => {
                st.queue.push_back(job);
                shared.publish_gauges(&st);
                shared.work_ready.notify_one();
                Ok(Placed::Queue)
            }
        }
    }

    /// Whether the pool would run a run at once: a blocking one (`blocking`: a new thread, or
    /// an idle one to take it from the queue; not a place in the queue) or an async one (as
    /// [`admit_async`](ThreadPool::admit_async)). Reserves nothing: the answer may change
    /// before the run is submitted. A hedge asks before it spends budget or makes its run, and
    /// must not wait in the queue behind the attempt it races.
    pub(crate) fn has_room(&self, blocking: bool) -> bool {
        let shared = &self.shared;
        let props = shared.properties.hot().load();
        let st = shared.state.lock();
        if blocking {
            match shared.placement(&st, &props) {
                Ok(Placed::Thread) => true,
                Ok(Placed::Queue) => (st.threads - st.busy) as usize > st.queue.len(),
                Err(_) => false,
            }
        } else {
            shared
                .check_budget(
                    &st,
                    props.actual_maximum_size,
                    props.queue_size_rejection_threshold,
                )
                .is_ok()
        }
    }

    /// Gives up `job` if it has not started (a cancelled or timed-out execution): it will never
    /// run, and it leaves the queue now, so its place is free at once (as Hystrix removes a
    /// timed-out task on its timer thread). Returns whether it was given up; a task that
    /// started is left alone.
    pub(crate) fn withdraw(&self, job: &Arc<dyn Job>) -> bool {
        let withdrawn = job.withdraw();
        if withdrawn {
            self.remove_queued(job);
        }
        withdrawn
    }

    /// Removes `job` if it is still queued; returns whether it was.
    fn remove_queued(&self, job: &Arc<dyn Job>) -> bool {
        let mut st = self.shared.state.lock();
        let position = st
            .queue
            .iter()
            .position(|queued| std::ptr::addr_eq(Arc::as_ptr(queued), Arc::as_ptr(job)));
        if let Some(position) = position {
            st.queue.remove(position);
            self.shared.publish_gauges(&st);
        }
        position.is_some()
    }

    /// Admits one async run to this pool's budget; the slot is freed when dropped.
    pub(crate) fn admit_async(&self) -> Result<AsyncSlot, Rejection> {
        let shared = &self.shared;
        let props = shared.properties.hot().load();
        let mut st = shared.state.lock();
        shared.check_budget(
            &st,
            props.actual_maximum_size,
            props.queue_size_rejection_threshold,
        )?;
        st.async_in_flight += 1;
        shared.publish_gauges(&st);
        shared.task_started(&st);
        Ok(AsyncSlot {
            shared: Arc::clone(shared),
        })
    }

    /// The pool's own tokio runtime for async runs, created on first use with `coreSize` worker
    /// threads named `hystrix-<PoolKey>-async-<n>`. Its threads live until shutdown.
    pub(crate) fn runtime(&self) -> std::io::Result<tokio::runtime::Handle> {
        let mut runtime = self.shared.runtime.lock();
        if let Some(runtime) = runtime.as_ref() {
            return Ok(runtime.handle().clone());
        }
        let workers = self.shared.properties.hot().load().core_size.max(1) as usize;
        let key = self.shared.key.clone();
        let seq = AtomicU32::new(0);
        let created = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name_fn(move || {
                format!(
                    "hystrix-{key}-async-{}",
                    seq.fetch_add(1, Ordering::Relaxed)
                )
            })
            .enable_all()
            .build()?;
        let handle = created.handle().clone();
        *runtime = Some(created);
        self.shared.runtime_workers.store(
            u32::try_from(workers).unwrap_or(u32::MAX),
            Ordering::Release,
        );
        Ok(handle)
    }

    /// The pool's gauges now.
    /// Counts a command that ran on this pool (any end: success, failure, timeout, bad request,
    /// cancellation after it started), at `now_ms`, as Hystrix's EXECUTED.
    pub(crate) fn mark_executed(&self, now_ms: u64) {
        self.shared.counts.add(now_ms, EXECUTED, 1);
    }

    /// Counts a command this pool refused, at `now_ms`, as Hystrix's REJECTED.
    pub(crate) fn mark_rejected(&self, now_ms: u64) {
        self.shared.counts.add(now_ms, REJECTED, 1);
    }

    pub(crate) fn metrics(&self) -> ThreadPoolMetrics {
        let shared = &self.shared;
        let props = shared.properties.hot().load();
        let now_ms = shared.clock.now_ms();
        let active = shared.active.load(Ordering::Acquire);
        let queue_size = shared.queue_size.load(Ordering::Acquire);
        let completed = shared.completed.load(Ordering::Acquire);
        let runtime_workers = shared.runtime_workers.load(Ordering::Acquire);
        ThreadPoolMetrics {
            thread_pool_key: shared.key.clone(),
            current_active_count: active,
            current_queue_size: queue_size,
            current_pool_size: shared.pool_size.load(Ordering::Acquire) + runtime_workers,
            current_largest_pool_size: shared.largest.load(Ordering::Acquire) + runtime_workers,
            current_completed_task_count: completed,
            current_task_count: completed + u64::from(active) + u64::from(queue_size),
            current_core_pool_size: props.core_size,
            current_maximum_pool_size: props.actual_maximum_size,
            rolling_count_threads_executed: shared.counts.rolling_sum(
                &shared.window,
                now_ms,
                EXECUTED,
            ),
            rolling_count_command_rejections: shared.counts.rolling_sum(
                &shared.window,
                now_ms,
                REJECTED,
            ),
            cumulative_count_threads_executed: shared.counts.cumulative(EXECUTED),
            cumulative_count_command_rejections: shared.counts.cumulative(REJECTED),
            rolling_max_active_threads: shared.counts.rolling_max(&shared.window, now_ms),
        }
    }

    /// Stops accepting work, lets running tasks finish for up to `bound`, and joins every thread
    /// that ended; threads still in a task after `bound` are left to finish on their own.
    pub(crate) fn shutdown(&self, bound: Duration) -> ShutdownReport {
        let shared = &self.shared;
        let until = Instant::now() + bound;
        // Shut down from one of its own threads (its last user dropped there): never wait for,
        // or join, that thread.
        let own = CURRENT_POOL.with(|pool| pool.get()) == Arc::as_ptr(shared) as usize;
        let mut st = shared.state.lock();
        st.shutdown = true;
        shared.work_ready.notify_all();
        while st.threads > u32::from(own) {
            if shared.thread_left.wait_until(&mut st, until).timed_out() {
                break;
            }
        }
        let detached = st.threads as usize - usize::from(own);
        drop(st);
        let mut joined = 0;
        let me = std::thread::current().id();
        for handle in std::mem::take(&mut *shared.handles.lock()) {
            if handle.thread().id() == me {
                continue;
            }
            if detached == 0 || handle.is_finished() {
                // A thread that left the loop only has its return left to do.
                let _ = handle.join();
                joined += 1;
            }
        }
        if let Some(runtime) = shared.runtime.lock().take() {
            // Blocking inside an async context is not allowed; there, let it wind down alone.
            if tokio::runtime::Handle::try_current().is_ok() {
                runtime.shutdown_background();
            } else {
                runtime.shutdown_timeout(until.saturating_duration_since(Instant::now()));
            }
        }
        ShutdownReport { joined, detached }
    }
}

impl Shared {
    /// One budget for blocking and async runs: `actualMaximumSize` running plus what the queue
    /// may hold.
    /// Where a blocking job submitted now would go (a new thread, or the queue), or why the
    /// pool refuses it.
    fn placement(
        &self,
        st: &State,
        props: &crate::config::HotPoolSnapshot,
    ) -> Result<Placed, Rejection> {
        self.check_budget(
            st,
            props.actual_maximum_size,
            props.queue_size_rejection_threshold,
        )?;
        if st.threads < props.core_size {
            return Ok(Placed::Thread);
        }
        let queued = match self.queue_capacity {
            // Hand-off: only to a thread that is not busy. A thread that just finished counts
            // although it has not reached its wait yet: it looks at the queue first.
            0 => (st.threads - st.busy) as usize > st.queue.len(),
            capacity => st.queue.len() < capacity as usize,
        };
        if queued {
            return Ok(Placed::Queue);
        }
        if st.threads < props.actual_maximum_size {
            return Ok(Placed::Thread);
        }
        Err(Rejection::Full {
            maximum_size: props.actual_maximum_size,
            queue_size: st.queue.len() as u32,
        })
    }

    fn check_budget(&self, st: &State, maximum_size: u32, threshold: u32) -> Result<(), Rejection> {
        if st.shutdown {
            return Err(Rejection::Shutdown);
        }
        let queued = st.queue.len() as u32;
        let queue_limit = match self.queue_capacity {
            0 => 0,
            capacity => {
                if queued >= threshold {
                    return Err(Rejection::QueueThreshold { threshold });
                }
                capacity.min(threshold)
            }
        };
        if st.busy + queued + st.async_in_flight >= maximum_size + queue_limit {
            return Err(Rejection::Full {
                maximum_size,
                queue_size: queued,
            });
        }
        Ok(())
    }

    fn publish_gauges(&self, st: &State) {
        self.active
            .store(st.busy + st.async_in_flight, Ordering::Release);
        self.queue_size
            .store(st.queue.len() as u32, Ordering::Release);
        self.pool_size.store(st.threads, Ordering::Release);
        self.largest.fetch_max(st.threads, Ordering::AcqRel);
    }

    /// A task starts running: feeds the rolling max of active tasks (Hystrix samples it at the
    /// start of each command run on the pool).
    fn task_started(&self, st: &State) {
        self.counts
            .raise_max(self.clock.now_ms(), st.busy + st.async_in_flight);
    }

    /// Starts a thread whose first task is `job`.
    fn spawn(self: &Arc<Self>, st: &mut State, job: Arc<dyn Job>) -> Result<(), Rejection> {
        let n = self.next_thread.fetch_add(1, Ordering::Relaxed) + 1;
        let shared = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(format!("hystrix-{}-{n}", self.key))
            .spawn(move || shared.work(job));
        match spawned {
            Ok(handle) => {
                st.threads += 1;
                st.busy += 1;
                self.publish_gauges(st);
                self.task_started(st);
                let mut handles = self.handles.lock();
                handles.retain(|h| !h.is_finished());
                handles.push(handle);
                Ok(())
            }
            Err(err) => {
                tracing::error!(pool = %self.key, error = %err, "hystrix: could not start a pool thread");
                Err(Rejection::Full {
                    maximum_size: st.threads,
                    queue_size: st.queue.len() as u32,
                })
            }
        }
    }

    /// A pool thread: runs its first task, then queued ones, until shutdown or, above
    /// `coreSize`, until it has been idle for `keepAliveTimeMinutes`.
    fn work(self: Arc<Self>, first: Arc<dyn Job>) {
        CURRENT_POOL.with(|pool| pool.set(Arc::as_ptr(&self) as usize));
        let mut next = Some(first);
        while let Some(job) = next.take() {
            job.run();
            self.completed.fetch_add(1, Ordering::AcqRel);
            let mut st = self.state.lock();
            st.busy -= 1;
            self.publish_gauges(&st);
            drop(st);
            job.complete();
            // Not kept while idle: a finished task may hold the last reference to its command.
            drop(job);
            let mut st = self.state.lock();
            next = self.next_job(&mut st);
            if next.is_some() {
                st.busy += 1;
                self.task_started(&st);
            } else {
                st.threads -= 1;
                self.thread_left.notify_all();
            }
            self.publish_gauges(&st);
        }
    }

    /// Waits for a queued task; `None` means this thread should end.
    fn next_job(
        self: &Arc<Self>,
        st: &mut parking_lot::MutexGuard<'_, State>,
    ) -> Option<Arc<dyn Job>> {
        let mut keep_alive: Option<(TimerId, Arc<AtomicBool>)> = None;
        let job = loop {
            if let Some(job) = st.queue.pop_front() {
                break Some(job);
            }
            if st.shutdown {
                break None;
            }
            let props = self.properties.hot().load();
            if st.threads > props.core_size {
                match &keep_alive {
                    Some((_, expired)) if expired.load(Ordering::Acquire) => break None,
                    Some(_) => {}
                    None => {
                        let expired = Arc::new(AtomicBool::new(false));
                        let (flag, shared) = (Arc::clone(&expired), Arc::downgrade(self));
                        let deadline = self.clock.now_ms().saturating_add(props.keep_alive_ms);
                        let task: crate::clock::TimerTask = Box::new(move || {
                            flag.store(true, Ordering::Release);
                            if let Some(shared) = shared.upgrade() {
                                let _st = shared.state.lock();
                                shared.work_ready.notify_all();
                            }
                        });
                        // The lock is released while scheduling: a clock may run a timer that
                        // is already due (keepAliveTimeMinutes 0) right there, and the timer
                        // takes this lock.
                        let id = parking_lot::MutexGuard::unlocked(st, || {
                            self.clock.schedule(deadline, task)
                        });
                        keep_alive = Some((id, expired));
                        continue;
                    }
                }
            }
            self.work_ready.wait(st);
        };
        if let Some((id, _)) = keep_alive {
            self.clock.cancel(id);
        }
        job
    }
}

/// An async run's place in a pool's budget; freed on drop.
#[doc(hidden)]
pub struct AsyncSlot {
    shared: Arc<Shared>,
}

impl Drop for AsyncSlot {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        st.async_in_flight -= 1;
        self.shared.completed.fetch_add(1, Ordering::AcqRel);
        self.shared.publish_gauges(&st);
    }
}

/// A snapshot of a thread pool's gauges and rolling counts (Hystrix's
/// `HystrixThreadPoolMetrics`). Rolling values cover the completed buckets of the pool's
/// `metrics.rollingStats.timeInMilliseconds` / `numBuckets` window (10 000 ms / 10 by default);
/// cumulative ones everything since the pool was created.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThreadPoolMetrics {
    /// The pool's key.
    pub thread_pool_key: crate::ThreadPoolKey,
    /// Tasks running now: blocking runs on pool threads plus async runs on the pool's runtime.
    pub current_active_count: u32,
    /// Tasks waiting in the queue.
    pub current_queue_size: u32,
    /// Pool threads alive: the threads that run blocking runs, plus, once an async run (e.g.
    /// a call through the tower layer under THREAD isolation) has used the pool, the worker
    /// threads of its runtime for async runs (`coreSize` when it was created; they live until
    /// shutdown).
    pub current_pool_size: u32,
    /// The most threads for blocking runs alive at once, plus the runtime's workers as above.
    pub current_largest_pool_size: u32,
    /// Tasks finished since the pool was created.
    pub current_completed_task_count: u64,
    /// Tasks ever accepted: finished, running and queued.
    pub current_task_count: u64,
    /// `coreSize` now.
    pub current_core_pool_size: u32,
    /// `actualMaximumSize` now.
    pub current_maximum_pool_size: u32,
    /// Commands that started on the pool and whose execution ended in the rolling window
    /// (`rollingCountThreadsExecuted`): success, failure, timeout, bad request or cancellation.
    /// As in Hystrix it counts when the caller is answered, so a timed-out or abandoned run may
    /// still hold its thread (see `current_active_count`).
    pub rolling_count_threads_executed: u64,
    /// Commands the pool refused in the rolling window (`rollingCountCommandRejections`).
    pub rolling_count_command_rejections: u64,
    /// As `rolling_count_threads_executed`, since the pool was created.
    pub cumulative_count_threads_executed: u64,
    /// Commands the pool refused, since it was created.
    pub cumulative_count_command_rejections: u64,
    /// The most tasks active at the start of a task, over the rolling window
    /// (`rollingMaxActiveThreads`).
    pub rolling_max_active_threads: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::config::{Properties, ThreadPoolLayer};
    use std::sync::mpsc;

    /// A job that reports its start and waits for a release.
    struct Gate {
        started: Mutex<Option<mpsc::Sender<String>>>,
        release: Mutex<mpsc::Receiver<()>>,
    }

    impl Job for Gate {
        fn run(&self) {
            let name = std::thread::current().name().unwrap_or("").to_owned();
            if let Some(tx) = self.started.lock().take() {
                let _ = tx.send(name);
            }
            let _ = self.release.lock().recv();
        }
    }

    fn gate(started: &mpsc::Sender<String>) -> (Arc<dyn Job>, mpsc::Sender<()>) {
        let (release_tx, release_rx) = mpsc::channel();
        let job = Arc::new(Gate {
            started: Mutex::new(Some(started.clone())),
            release: Mutex::new(release_rx),
        });
        (job, release_tx)
    }

    fn pool(clock: &ManualClock, set: &[(&str, &str)]) -> ThreadPool {
        let properties = Properties::new(crate::config::Rules::default());
        for (name, value) in set {
            properties
                .set(&format!("hystrix.threadpool.P.{name}"), *value)
                .unwrap();
        }
        let key = ThreadPoolKey::new("P").unwrap();
        let max_queue = properties.thread_pool(&key).max_queue_size;
        let cell = properties
            .register_thread_pool(&key, ThreadPoolLayer::default())
            .unwrap();
        ThreadPool::new(key, cell, max_queue, Arc::new(clock.clone()))
    }

    #[test]
    fn the_runtime_for_async_runs_counts_in_the_pool_size() {
        let clock = ManualClock::new();
        let pool = pool(&clock, &[("coreSize", "3")]);
        assert_eq!(pool.metrics().current_pool_size, 0);
        pool.runtime().unwrap();
        pool.runtime().unwrap();
        assert_eq!(pool.metrics().current_pool_size, 3);
        assert_eq!(pool.metrics().current_largest_pool_size, 3);
        pool.shutdown(std::time::Duration::from_secs(5));
    }

    #[test]
    fn hand_off_pool_runs_core_size_tasks_and_rejects_the_next() {
        let clock = ManualClock::new();
        let pool = pool(&clock, &[("coreSize", "2")]);
        let (started, names) = mpsc::channel();
        let (a, release_a) = gate(&started);
        let (b, release_b) = gate(&started);
        pool.submit(a).unwrap();
        pool.submit(b).unwrap();
        let mut seen = vec![names.recv().unwrap(), names.recv().unwrap()];
        seen.sort();
        assert_eq!(seen, ["hystrix-P-1", "hystrix-P-2"]);
        let (c, _) = gate(&started);
        assert_eq!(
            pool.submit(c),
            Err(Rejection::Full {
                maximum_size: 2,
                queue_size: 0
            })
        );
        let metrics = pool.metrics();
        assert_eq!(
            (
                metrics.current_active_count,
                metrics.current_pool_size,
                metrics.current_queue_size
            ),
            (2, 2, 0)
        );
        release_a.send(()).unwrap();
        release_b.send(()).unwrap();
        let report = pool.shutdown(Duration::from_secs(10));
        assert_eq!(
            report,
            ShutdownReport {
                joined: 2,
                detached: 0
            }
        );
        let metrics = pool.metrics();
        assert_eq!(metrics.current_completed_task_count, 2);
        assert_eq!(metrics.current_largest_pool_size, 2);
        assert_eq!(metrics.current_pool_size, 0);
    }

    #[test]
    fn bounded_queue_holds_up_to_the_rejection_threshold() {
        let clock = ManualClock::new();
        let pool = pool(
            &clock,
            &[
                ("coreSize", "1"),
                ("maxQueueSize", "10"),
                ("queueSizeRejectionThreshold", "2"),
            ],
        );
        let (started, names) = mpsc::channel();
        let (running, release_running) = gate(&started);
        pool.submit(running).unwrap();
        names.recv().unwrap();
        let (q1, release_q1) = gate(&started);
        let (q2, release_q2) = gate(&started);
        pool.submit(q1).unwrap();
        pool.submit(Arc::clone(&q2)).unwrap();
        assert_eq!(pool.metrics().current_queue_size, 2);
        let (q3, _) = gate(&started);
        assert_eq!(
            pool.submit(Arc::clone(&q3)),
            Err(Rejection::QueueThreshold { threshold: 2 })
        );
        // The threshold is dynamic.
        pool.shared
            .properties
            .hot()
            .publish(&crate::ThreadPoolProperties {
                core_size: 1,
                queue_size_rejection_threshold: 3,
                ..crate::ThreadPoolProperties::default()
            });
        pool.submit(Arc::clone(&q3)).unwrap();
        assert_eq!(pool.metrics().current_queue_size, 3);
        // A job that cannot be given up (the trait's default) stays queued.
        assert!(!pool.withdraw(&q3));
        assert_eq!(pool.metrics().current_queue_size, 3);
        // A queued task can be taken back out.
        assert!(pool.remove_queued(&q2));
        assert!(!pool.remove_queued(&q2));
        assert!(pool.remove_queued(&q3));
        assert_eq!(pool.metrics().current_queue_size, 1);
        release_running.send(()).unwrap();
        assert_eq!(names.recv().unwrap(), "hystrix-P-1");
        release_q1.send(()).unwrap();
        drop(release_q2);
        assert_eq!(pool.shutdown(Duration::from_secs(10)).detached, 0);
        assert_eq!(pool.metrics().current_completed_task_count, 2);
    }

    /// A pool of coreSize 1 growing to 2 (keep-alive 1 minute), both threads in a gated task:
    /// the pool and the tasks' releases.
    fn two_running_above_core_size(clock: &ManualClock) -> (ThreadPool, [mpsc::Sender<()>; 2]) {
        let pool = pool(
            clock,
            &[
                ("coreSize", "1"),
                ("maximumSize", "2"),
                ("allowMaximumSizeToDivergeFromCoreSize", "true"),
                ("keepAliveTimeMinutes", "1"),
            ],
        );
        let (started, names) = mpsc::channel();
        let (a, release_a) = gate(&started);
        let (b, release_b) = gate(&started);
        pool.submit(a).unwrap();
        pool.submit(b).unwrap();
        names.recv().unwrap();
        names.recv().unwrap();
        (pool, [release_a, release_b])
    }

    #[test]
    fn threads_above_core_size_end_after_keep_alive_on_the_clock() {
        let clock = ManualClock::new();
        let (pool, [release_a, release_b]) = two_running_above_core_size(&clock);
        assert_eq!(pool.metrics().current_pool_size, 2);
        release_a.send(()).unwrap();
        release_b.send(()).unwrap();
        // Both now idle; the one above coreSize arms a keep-alive timer.
        while clock.pending_timers() == 0 {
            std::thread::yield_now();
        }
        clock.advance(Duration::from_millis(59_999));
        assert_eq!(pool.metrics().current_pool_size, 2);
        clock.advance(Duration::from_millis(1));
        let pool_size = || pool.metrics().current_pool_size;
        while pool_size() != 1 {
            std::thread::yield_now();
        }
        assert_eq!(pool.metrics().current_largest_pool_size, 2);
        assert_eq!(pool.shutdown(Duration::from_secs(10)).detached, 0);
    }

    #[test]
    fn shutdown_refuses_work_and_detaches_a_thread_stuck_past_the_bound() {
        let clock = ManualClock::new();
        let pool = pool(&clock, &[("coreSize", "1")]);
        let (started, names) = mpsc::channel();
        let (stuck, release) = gate(&started);
        pool.submit(stuck).unwrap();
        names.recv().unwrap();
        let report = pool.shutdown(Duration::from_millis(20));
        assert_eq!(
            report,
            ShutdownReport {
                joined: 0,
                detached: 1
            }
        );
        let (late, _) = gate(&started);
        assert_eq!(pool.submit(late), Err(Rejection::Shutdown));
        assert!(matches!(pool.admit_async(), Err(Rejection::Shutdown)));
        release.send(()).unwrap();
        // The stuck thread leaves once its task returns.
        while pool.metrics().current_pool_size != 0 {
            std::thread::yield_now();
        }
    }

    #[test]
    fn async_runs_share_the_budget_of_blocking_runs() {
        let clock = ManualClock::new();
        let pool = pool(&clock, &[("coreSize", "2")]);
        let slot = pool.admit_async().unwrap();
        let (started, names) = mpsc::channel();
        let (a, release_a) = gate(&started);
        pool.submit(a).unwrap();
        names.recv().unwrap();
        assert_eq!(pool.metrics().current_active_count, 2);
        let (b, _) = gate(&started);
        assert!(pool.submit(b).is_err());
        assert!(pool.admit_async().is_err());
        drop(slot);
        assert!(pool.admit_async().is_ok());
        release_a.send(()).unwrap();
        assert_eq!(pool.shutdown(Duration::from_secs(10)).detached, 0);
    }

    /// Waits until `condition` holds; fails after 10 s of real time (a thread that never
    /// gets there) rather than hanging.
    fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        while !condition() {
            assert!(std::time::Instant::now() < give_up, "never: {what}");
            std::thread::yield_now();
        }
    }

    /// A bounded queue fills before the pool grows past coreSize, and the pool grows to
    /// actualMaximumSize before it refuses (as Java's ThreadPoolExecutor under Hystrix); an
    /// async run holds a place of the same budget. `has_room` answers for a hedge at each step,
    /// and the gauges add up.
    #[test]
    fn a_full_queue_grows_the_pool_to_its_maximum_then_refuses() {
        let clock = ManualClock::new();
        let pool = pool(
            &clock,
            &[
                ("coreSize", "1"),
                ("maximumSize", "3"),
                ("allowMaximumSizeToDivergeFromCoreSize", "true"),
                ("maxQueueSize", "1"),
            ],
        );
        // Budget: 3 running + 1 queued, the async slot among them.
        assert!(pool.has_room(true));
        let slot = pool.admit_async().unwrap();
        let (started, names) = mpsc::channel();
        let (a, release_a) = gate(&started);
        assert_eq!(pool.submit(a), Ok(Placed::Thread));
        names.recv().unwrap();
        // No idle thread to take a blocking hedge at once (it would wait in the queue); an
        // async one fits the budget.
        assert!(!pool.has_room(true));
        assert!(pool.has_room(false));
        let (b, release_b) = gate(&started);
        assert_eq!(pool.submit(b), Ok(Placed::Queue));
        let (c, release_c) = gate(&started);
        assert_eq!(pool.submit(c), Ok(Placed::Thread));
        names.recv().unwrap();
        let (d, _) = gate(&started);
        assert_eq!(
            pool.submit(d),
            Err(Rejection::Full {
                maximum_size: 3,
                queue_size: 1
            })
        );
        pool.mark_rejected(clock.now_ms());
        assert!(!pool.has_room(true));
        assert!(!pool.has_room(false));
        let metrics = pool.metrics();
        assert_eq!(
            (
                metrics.current_active_count,
                metrics.current_queue_size,
                metrics.current_pool_size,
                metrics.current_task_count,
                metrics.cumulative_count_command_rejections
            ),
            (3, 1, 2, 4, 1)
        );

        release_a.send(()).unwrap();
        assert_eq!(names.recv().unwrap(), "hystrix-P-1");
        release_b.send(()).unwrap();
        release_c.send(()).unwrap();
        drop(slot);
        // The async run counts as a completed task too.
        eventually("four tasks done", || {
            let metrics = pool.metrics();
            (
                metrics.current_completed_task_count,
                metrics.current_active_count,
            ) == (4, 0)
        });
        // Two idle threads: a blocking hedge runs at once.
        assert!(pool.has_room(true));
        assert_eq!(pool.metrics().current_task_count, 4);
        // Active at the start of each task: 1 (the async run), 2 (a), 3 (c), 3 (b, as a ends).
        clock.advance(Duration::from_millis(1000));
        let metrics = pool.metrics();
        assert_eq!(
            (
                metrics.rolling_max_active_threads,
                metrics.rolling_count_command_rejections
            ),
            (3, 1)
        );
        assert_eq!(pool.shutdown(Duration::from_secs(10)).detached, 0);
    }

    /// coreSize lowered at run time: the next submit wakes every idle thread, so each one
    /// above the new coreSize arms its keep-alive at once and all of them end together; the
    /// busy ones stay (7 threads, 3 of them busy, coreSize 7 -> 3: 4 end).
    #[test]
    fn lowering_core_size_arms_keep_alive_on_every_idle_thread() {
        let clock = ManualClock::new();
        let pool = pool(&clock, &[("coreSize", "7")]);
        let (started, names) = mpsc::channel();
        let mut releases: Vec<_> = (0..7)
            .map(|_| {
                let (job, release) = gate(&started);
                assert_eq!(pool.submit(job), Ok(Placed::Thread));
                names.recv().unwrap();
                release
            })
            .collect();
        let busy = releases.split_off(4);
        for release in releases {
            release.send(()).unwrap();
        }
        eventually("four idle threads", || {
            let metrics = pool.metrics();
            (
                metrics.current_completed_task_count,
                metrics.current_active_count,
            ) == (4, 3)
        });
        assert_eq!(clock.pending_timers(), 0);
        pool.shared
            .properties
            .hot()
            .publish(&crate::ThreadPoolProperties {
                core_size: 3,
                maximum_size: 7,
                allow_maximum_size_to_diverge_from_core_size: true,
                ..crate::ThreadPoolProperties::default()
            });
        let (quick, release_quick) = gate(&started);
        release_quick.send(()).unwrap();
        assert_eq!(pool.submit(quick), Ok(Placed::Queue));
        eventually("four keep-alive timers", || clock.pending_timers() == 4);
        clock.advance(Duration::from_secs(60));
        eventually("only the three busy threads left", || {
            pool.metrics().current_pool_size == 3
        });
        assert_eq!(clock.pending_timers(), 0);
        for release in busy {
            release.send(()).unwrap();
        }
        assert_eq!(pool.shutdown(Duration::from_secs(10)).detached, 0);
    }

    /// A job that shuts its own pool down from the pool's thread and reports what it did.
    struct ShutsDown {
        pool: Mutex<Option<ThreadPool>>,
        report: Mutex<Option<mpsc::Sender<ShutdownReport>>>,
    }

    impl Job for ShutsDown {
        fn run(&self) {
            if let (Some(pool), Some(report)) = (self.pool.lock().take(), self.report.lock().take())
            {
                let _ = report.send(pool.shutdown(Duration::from_secs(10)));
            }
        }
    }

    /// Shut down from one of its own threads (its last user dropped there), a pool joins its
    /// other threads and neither waits for nor counts the calling one.
    #[test]
    fn a_shutdown_on_a_pool_thread_joins_the_others_and_leaves_itself_out() {
        let clock = ManualClock::new();
        let pool = pool(&clock, &[("coreSize", "2")]);
        let (started, names) = mpsc::channel();
        let (idle, release) = gate(&started);
        pool.submit(idle).unwrap();
        names.recv().unwrap();
        release.send(()).unwrap();
        eventually("one idle thread", || {
            pool.metrics().current_active_count == 0
        });
        let (report_tx, report) = mpsc::channel();
        let job = Arc::new(ShutsDown {
            pool: Mutex::new(Some(pool.clone())),
            report: Mutex::new(Some(report_tx)),
        });
        assert_eq!(pool.submit(job), Ok(Placed::Thread));
        assert_eq!(
            report.recv_timeout(Duration::from_secs(10)).unwrap(),
            ShutdownReport {
                joined: 1,
                detached: 0
            }
        );
        eventually("no thread left", || pool.metrics().current_pool_size == 0);
    }

    /// A shutdown whose bound passes with a thread still in its task joins the threads that
    /// ended (one above coreSize that ended after its keep-alive) and leaves the stuck one.
    #[test]
    fn a_shutdown_past_its_bound_still_joins_the_threads_that_ended() {
        let clock = ManualClock::new();
        let (pool, [release_stuck, release_brief]) = two_running_above_core_size(&clock);
        release_brief.send(()).unwrap();
        eventually("a keep-alive timer", || clock.pending_timers() == 1);
        clock.advance(Duration::from_secs(60));
        eventually("the thread above coreSize ended", || {
            let handles = pool.shared.handles.lock();
            handles.iter().filter(|handle| handle.is_finished()).count() == 1
        });
        assert_eq!(
            pool.shutdown(Duration::from_millis(20)),
            ShutdownReport {
                joined: 1,
                detached: 1
            }
        );
        release_stuck.send(()).unwrap();
        eventually("no thread left", || pool.metrics().current_pool_size == 0);
    }
}
