//! Time: reading it and waiting on it.
//!
//! Everything in hystrix-rs that depends on time (rolling windows, sleep windows, timeouts, timers)
//! reads it through one [`Clock`], so a [`ManualClock`] makes every time-dependent behaviour
//! deterministic in tests, including work running on our own OS threads, which tokio's paused time
//! cannot see.
//!
//! Time is a count of **milliseconds** since the clock's origin, as Hystrix measures latencies and
//! windows in whole milliseconds.
//!
//! ```
//! use hystrix::clock::{Clock, ManualClock};
//! use std::time::Duration;
//!
//! let clock = ManualClock::new();
//! assert_eq!(clock.now_ms(), 0);
//! clock.advance(Duration::from_millis(1500));
//! assert_eq!(clock.now_ms(), 1500);
//! ```
//!
//! Code of your own can wait on the same clock as the library with [`sleep`] (a future), for
//! instance a delay in a fake dependency that a test then moves past with
//! [`ManualClock::advance`].

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};

/// A task the clock runs once its deadline has passed. It must be short and must not block: it
/// runs on the clock's timer thread ([`SystemClock`]) or inside [`ManualClock::advance`].
pub type TimerTask = Box<dyn FnOnce() + Send + 'static>;

/// Identifies a scheduled timer so it can be cancelled with [`Clock::cancel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerId {
    // Field order is the ordering: timers fire by `order` (the clock's own time base), then
    // in scheduling order.
    order: u64,
    seq: u64,
    deadline_ms: u64,
}

impl TimerId {
    /// An id for a timer due at `deadline_ms`; `seq` tells apart timers with one deadline (for
    /// [`Clock`] implementations of your own).
    pub const fn new(deadline_ms: u64, seq: u64) -> Self {
        TimerId {
            order: deadline_ms,
            seq,
            deadline_ms,
        }
    }

    /// The deadline the timer was scheduled for, in ms on its clock.
    pub fn deadline_ms(&self) -> u64 {
        self.deadline_ms
    }
}

/// The source of time and timers for a [`Registry`](crate::Registry).
///
/// Implementations must be monotonic: `now_ms` never goes backwards. Timers fire in deadline
/// order, each once, when `now_ms() >= deadline_ms`.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Milliseconds elapsed since this clock's origin (monotonic).
    fn now_ms(&self) -> u64;

    /// Microseconds elapsed since this clock's origin (monotonic), read precisely: for run
    /// times of adaptive concurrency limits, where the millisecond tick reads 0 for fast
    /// dependencies. Default: `now_ms() × 1000` (a clock without finer time, as
    /// [`ManualClock`]).
    fn now_us(&self) -> u64 {
        self.now_ms().saturating_mul(1000)
    }

    /// Wall-clock time in milliseconds since the Unix epoch. Used only for reporting (the
    /// `currentTime` field of Hystrix streams), never for measuring.
    fn epoch_ms(&self) -> u64;

    /// Runs `task` once `now_ms() >= deadline_ms` (at once, on the timer, if it already is).
    fn schedule(&self, deadline_ms: u64, task: TimerTask) -> TimerId;

    /// Cancels a timer. Returns `true` if it had not fired yet (its task is dropped unrun).
    fn cancel(&self, id: TimerId) -> bool;
}

/// Pending timers ordered by deadline, shared by both clock implementations.
#[derive(Default)]
struct TimerQueue {
    inner: Mutex<QueueInner>,
}

#[derive(Default)]
struct QueueInner {
    next_seq: u64,
    entries: BTreeMap<TimerId, TimerTask>,
    /// When the timer thread will wake up next (in the queue's time base); `None` while it
    /// sleeps with no deadline. A timer due no earlier needs no wake-up call.
    wake_at: Option<u64>,
}

/// What the timer thread does next.
enum Plan {
    /// A timer is due: run it.
    Run,
    /// Sleep until then (the queue's time base), or until a timer due earlier is added.
    SleepUntil(u64),
    /// Sleep until a timer is added.
    Sleep,
}

impl TimerQueue {
    /// Inserts a timer that fires once the queue's time base reaches `order`; returns its id
    /// and, for a queue a thread serves ([`plan`](Self::plan)), whether that thread must be
    /// woken (the timer is due before it wakes up anyway).
    fn insert(&self, order: u64, deadline_ms: u64, task: TimerTask) -> (TimerId, bool) {
        let mut q = self.inner.lock();
        let id = TimerId {
            order,
            seq: q.next_seq,
            deadline_ms,
        };
        q.next_seq += 1;
        q.entries.insert(id, task);
        let wake = q.wake_at.is_none_or(|at| order < at);
        if wake {
            q.wake_at = Some(order);
        }
        (id, wake)
    }

    /// The serving thread's next step at `now`. A wake-up planned for a timer since cancelled
    /// is kept while it is ahead (the thread wakes then for nothing, once), so that timers
    /// added after it, as the next execution's deadline usually is, need no wake-up call.
    fn plan(&self, now: u64) -> Plan {
        let mut q = self.inner.lock();
        let next = q.entries.keys().next().map(|id| id.order);
        if next.is_some_and(|due| due <= now) {
            return Plan::Run;
        }
        let kept = q.wake_at.filter(|&at| at > now);
        let at = match (next, kept) {
            (Some(due), Some(at)) => due.min(at),
            (Some(due), None) => due,
            (None, Some(at)) => at,
            (None, None) => {
                q.wake_at = None;
                return Plan::Sleep;
            }
        };
        q.wake_at = Some(at);
        Plan::SleepUntil(at)
    }

    fn remove(&self, id: TimerId) -> bool {
        self.inner.lock().entries.remove(&id).is_some()
    }

    /// Removes and returns the earliest timer due at `now` (in the queue's time base).
    fn pop_due(&self, now: u64) -> Option<(TimerId, TimerTask)> {
        let mut q = self.inner.lock();
        let first = *q.entries.keys().next()?;
        if first.order > now {
            return None;
        }
        q.entries.remove(&first).map(|task| (first, task))
    }

    /// The earliest timer's `order` (its due time in the queue's time base).
    fn next_due(&self) -> Option<u64> {
        self.inner.lock().entries.keys().next().map(|id| id.order)
    }

    fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }
}

// ------------------------------------------------------------------------------------------------
// System clock

/// The real clock: a monotonic millisecond tick and one timer thread (`hystrix-timer`).
///
/// Reading time is the hot path's most frequent operation, and `Instant::now()` costs ~25 ns on a
/// virtual machine. `SystemClock` therefore reads a coarse tick kept fresh every millisecond by
/// one background thread (quanta's "upkeep" thread), which costs ~1 ns per read; latencies are
/// reported in whole milliseconds, as Hystrix does. The tick can lag real time by about a
/// millisecond (more if the machine starves the upkeep thread).
///
/// Timers are precise from the moment they are armed: [`schedule`](Clock::schedule) takes the
/// time left until the deadline as the tick reads it now, and fires once that much real time has
/// passed, measured with the precise clock. A deadline computed from the tick (an execution's
/// start plus its timeout) can still be early by the tick's lag at the start, about 1 ms at most
/// unless the upkeep thread is starved; Hystrix's own timeouts have the same millisecond
/// granularity. The timer thread sleeps until the next timer is due and runs due tasks in order.
/// Both threads start on first use and live for the rest of the process; all `SystemClock`
/// values share them.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

struct SystemInner {
    source: quanta::Clock,
    origin: quanta::Instant,
    /// `origin` as the source's raw reading, for [`Clock::now_us`].
    origin_raw: u64,
    use_recent: bool,
    epoch_origin_ms: u64,
    timers: TimerQueue,
    wakeup: Condvar,
    wakeup_lock: Mutex<()>,
    timer_thread_started: AtomicBool,
    _upkeep: Option<quanta::Handle>,
}

static SYSTEM: LazyLock<SystemInner> = LazyLock::new(|| {
    let source = quanta::Clock::new();
    // Another library may already run the upkeep thread; its tick is then ours too.
    let (upkeep, use_recent) = match quanta::Upkeep::new(Duration::from_millis(1)).start() {
        Ok(handle) => (Some(handle), true),
        Err(quanta::Error::UpkeepRunning) => (None, true),
        Err(err) => {
            tracing::warn!(error = %err, "hystrix: coarse clock unavailable, reading precise time");
            (None, false)
        }
    };
    let origin_raw = source.raw();
    let origin = source.scaled(origin_raw);
    let epoch_origin_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    SystemInner {
        source,
        origin,
        origin_raw,
        use_recent,
        epoch_origin_ms,
        timers: TimerQueue::default(),
        wakeup: Condvar::new(),
        wakeup_lock: Mutex::new(()),
        timer_thread_started: AtomicBool::new(false),
        _upkeep: upkeep,
    }
});

impl SystemInner {
    fn now_ms(&self) -> u64 {
        let now = if self.use_recent {
            self.source.recent()
        } else {
            self.source.now()
        };
        now.saturating_duration_since(self.origin).as_millis() as u64
    }

    fn precise_now_ns(&self) -> u64 {
        let nanos = self
            .source
            .now()
            .saturating_duration_since(self.origin)
            .as_nanos();
        u64::try_from(nanos).unwrap_or(u64::MAX)
    }

    fn ensure_timer_thread(&'static self) {
        if self.timer_thread_started.load(Ordering::Acquire)
            || self.timer_thread_started.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("hystrix-timer".into())
            .spawn(move || self.run_timer_thread());
        if let Err(err) = spawned {
            // Timers would never fire; that must not pass silently.
            tracing::error!(error = %err, "hystrix: could not start the timer thread");
            self.timer_thread_started.store(false, Ordering::Release);
        }
    }

    /// The timer queue is ordered by precise nanoseconds since `origin`.
    fn run_timer_thread(&self) {
        loop {
            let now = self.precise_now_ns();
            while let Some((_, task)) = self.timers.pop_due(now) {
                task();
            }
            let mut guard = self.wakeup_lock.lock();
            // Planned under the lock, so a schedule() that must wake this thread notifies it
            // after it waits, not before.
            let now = self.precise_now_ns();
            match self.timers.plan(now) {
                Plan::Run => {}
                Plan::SleepUntil(due) => {
                    // Capped so a far deadline (a huge timeout) never overflows a wait.
                    let wait = Duration::from_nanos((due - now).min(60_000_000_000));
                    self.wakeup.wait_for(&mut guard, wait);
                }
                Plan::Sleep => self.wakeup.wait(&mut guard),
            }
        }
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now_ms(&self) -> u64 {
        SYSTEM.now_ms()
    }

    /// The precise clock (the TSC where it is reliable), not the tick: its raw reading scaled
    /// to ns from the origin's, without a `Duration` in between.
    #[inline]
    fn now_us(&self) -> u64 {
        SYSTEM
            .source
            .delta_as_nanos(SYSTEM.origin_raw, SYSTEM.source.raw())
            / 1_000
    }

    fn epoch_ms(&self) -> u64 {
        SYSTEM.epoch_origin_ms + SYSTEM.precise_now_ns() / 1_000_000
    }

    fn schedule(&self, deadline_ms: u64, task: TimerTask) -> TimerId {
        let inner: &'static SystemInner = &SYSTEM;
        inner.ensure_timer_thread();
        // The time left as the tick reads it, counted in real time from now: never early.
        let left_ns = deadline_ms
            .saturating_sub(inner.now_ms())
            .saturating_mul(1_000_000);
        let due_ns = inner.precise_now_ns().saturating_add(left_ns);
        let (id, wake) = inner.timers.insert(due_ns, deadline_ms, task);
        if wake {
            let _guard = inner.wakeup_lock.lock();
            inner.wakeup.notify_one();
        }
        id
    }

    fn cancel(&self, id: TimerId) -> bool {
        SYSTEM.timers.remove(id)
    }
}

// ------------------------------------------------------------------------------------------------
// Manual clock

/// A clock that only moves when told to: the basis of deterministic tests.
///
/// Time starts at 0 ms. [`advance`](ManualClock::advance) moves it forward and runs every timer
/// that became due, in deadline order, on the calling thread; while it does, `now_ms()` reads each
/// timer's own deadline, so a task sees the time it was scheduled for. Clones share the same time.
///
/// ```
/// use hystrix::clock::{Clock, ManualClock};
/// use std::sync::{Arc, atomic::{AtomicU64, Ordering}};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let fired_at = Arc::new(AtomicU64::new(0));
/// let (c, f) = (clock.clone(), fired_at.clone());
/// clock.schedule(250, Box::new(move || f.store(c.now_ms(), Ordering::SeqCst)));
/// clock.advance(Duration::from_millis(249));
/// assert_eq!(fired_at.load(Ordering::SeqCst), 0);
/// clock.advance(Duration::from_millis(10));
/// assert_eq!(fired_at.load(Ordering::SeqCst), 250);
/// assert_eq!(clock.now_ms(), 259);
/// ```
#[derive(Clone, Default)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

#[derive(Default)]
struct ManualInner {
    now_ms: AtomicU64,
    epoch_base_ms: u64,
    timers: TimerQueue,
    advancing: Mutex<()>,
    /// Signalled after each `schedule`, with the timer queue's lock as its mutex, for
    /// [`ManualClock::wait_for_pending_timers`].
    timer_added: Condvar,
}

impl ManualClock {
    /// A clock at 0 ms whose wall clock reads 2026-01-01T00:00:00Z at that instant.
    pub fn new() -> Self {
        Self::with_epoch_ms(1_767_225_600_000)
    }

    /// A clock at 0 ms whose wall clock ([`Clock::epoch_ms`]) reads `epoch_base_ms` then.
    pub fn with_epoch_ms(epoch_base_ms: u64) -> Self {
        ManualClock {
            inner: Arc::new(ManualInner {
                epoch_base_ms,
                ..ManualInner::default()
            }),
        }
    }

    /// Moves time forward by `by` (whole milliseconds; sub-millisecond parts are dropped) and
    /// runs the timers that became due, in deadline order, on this thread.
    ///
    /// Concurrent calls are serialised. A timer task must not call `advance` itself (it would
    /// deadlock).
    pub fn advance(&self, by: Duration) {
        self.advance_ms(by.as_millis() as u64);
    }

    /// Moves time forward by `ms` milliseconds; see [`advance`](ManualClock::advance).
    pub fn advance_ms(&self, ms: u64) {
        {
            let _serial = self.inner.advancing.lock();
            let target = self.inner.now_ms.load(Ordering::SeqCst).saturating_add(ms);
            while let Some((id, task)) = self.inner.timers.pop_due(target) {
                self.inner
                    .now_ms
                    .fetch_max(id.deadline_ms, Ordering::SeqCst);
                task();
            }
            self.inner.now_ms.store(target, Ordering::SeqCst);
        }
        // A timer scheduled by another thread while we held the lock found it taken and left its
        // firing to us (see `schedule`).
        self.fire_overdue();
    }

    /// Runs the timers already due, unless another thread is advancing (it will run them).
    fn fire_overdue(&self) {
        while self
            .inner
            .timers
            .next_due()
            .is_some_and(|deadline| deadline <= self.now_ms())
        {
            let Some(_serial) = self.inner.advancing.try_lock() else {
                return;
            };
            let now = self.now_ms();
            while let Some((_, task)) = self.inner.timers.pop_due(now) {
                task();
            }
        }
    }

    /// Number of timers scheduled and not yet fired or cancelled.
    pub fn pending_timers(&self) -> usize {
        self.inner.timers.len()
    }

    /// The earliest pending timer's deadline, in ms.
    pub fn next_timer_deadline_ms(&self) -> Option<u64> {
        self.inner.timers.next_due()
    }

    /// Moves time to the earliest pending timer's deadline and runs the timers due then, on this
    /// thread (as [`advance`](ManualClock::advance)). Returns the time reached, in ms, or `None`
    /// (and leaves time alone) when no timer is pending. A timer already due fires without time
    /// moving.
    ///
    /// ```
    /// use hystrix::clock::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// assert_eq!(clock.advance_to_next_timer(), None);
    /// clock.schedule(70, Box::new(|| {}));
    /// clock.schedule(30, Box::new(|| {}));
    /// assert_eq!(clock.advance_to_next_timer(), Some(30));
    /// assert_eq!(clock.advance_to_next_timer(), Some(70));
    /// assert_eq!(clock.pending_timers(), 0);
    /// ```
    pub fn advance_to_next_timer(&self) -> Option<u64> {
        let deadline = self.next_timer_deadline_ms()?;
        self.advance_ms(deadline.saturating_sub(self.now_ms()));
        Some(self.now_ms())
    }

    /// Waits, in real time and for at most `timeout`, until at least `at_least` timers are
    /// pending ([`pending_timers`](ManualClock::pending_timers)). Returns whether they are.
    ///
    /// For a test whose other thread is about to wait on this clock (a blocking `execute()`
    /// whose run awaits a timeout or a delay): once its timer is scheduled, moving time fires it.
    /// The wait parks the thread (woken by each `schedule`), it does not spin. Every pending
    /// timer counts, whoever scheduled it.
    pub fn wait_for_pending_timers(&self, at_least: usize, timeout: Duration) -> bool {
        let give_up = std::time::Instant::now().checked_add(timeout);
        let mut queue = self.inner.timers.inner.lock();
        while queue.entries.len() < at_least {
            match give_up {
                Some(give_up) => {
                    if self
                        .inner
                        .timer_added
                        .wait_until(&mut queue, give_up)
                        .timed_out()
                    {
                        return queue.entries.len() >= at_least;
                    }
                }
                // A timeout too large for an Instant: wait without one.
                None => self.inner.timer_added.wait(&mut queue),
            }
        }
        true
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now_ms", &self.now_ms())
            .field("pending_timers", &self.pending_timers())
            .finish()
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.inner.now_ms.load(Ordering::SeqCst)
    }

    fn epoch_ms(&self) -> u64 {
        self.inner.epoch_base_ms + self.now_ms()
    }

    fn schedule(&self, deadline_ms: u64, task: TimerTask) -> TimerId {
        let (id, _) = self.inner.timers.insert(deadline_ms, deadline_ms, task);
        self.inner.timer_added.notify_all();
        // A deadline already passed fires now, as it would on the system clock's timer thread,
        // unless an advance() is running: it runs overdue timers before it returns.
        if deadline_ms <= self.now_ms() {
            self.fire_overdue();
        }
        id
    }

    fn cancel(&self, id: TimerId) -> bool {
        self.inner.timers.remove(id)
    }
}

// ------------------------------------------------------------------------------------------------
// Sleeping on a clock

/// A future that completes once `clock` has moved `duration` past its time now, in whole
/// milliseconds (a sub-millisecond part rounds up, so it never completes early). Dropping it
/// before then cancels its timer.
///
/// The deadline is fixed when `sleep` is called, as for `tokio::time::sleep`; the timer is
/// armed at the first poll that finds the deadline still ahead, so a sleep of zero completes at
/// its first poll without one. On a [`ManualClock`] it completes when a test moves time to the
/// deadline; on the [`SystemClock`] its timer thread wakes it. It needs no async runtime.
///
/// Use the clock of the registry whose commands you test, [`Registry::clock`](crate::Registry::clock),
/// so a test's [`ManualClock`] drives your waits and the library's alike.
///
/// ```
/// use hystrix::clock::{self, Clock, ManualClock};
/// use hystrix::testing::TestRegistry;
/// use std::time::Duration;
///
/// let test = TestRegistry::new();
/// test.advance(Duration::from_millis(100));
/// let mut nap = Box::pin(clock::sleep(test.registry().clock(), Duration::from_millis(250)));
/// assert_eq!(nap.deadline_ms(), 350);
///
/// let waker = futures::task::noop_waker();
/// let mut cx = std::task::Context::from_waker(&waker);
/// assert!(nap.as_mut().poll(&mut cx).is_pending());
/// test.advance(Duration::from_millis(249));
/// assert!(nap.as_mut().poll(&mut cx).is_pending());
/// test.advance(Duration::from_millis(1));
/// assert!(nap.as_mut().poll(&mut cx).is_ready());
/// assert_eq!(test.clock().now_ms(), 350);
/// # use std::future::Future;
/// ```
pub fn sleep(clock: &Arc<dyn Clock>, duration: Duration) -> Sleep {
    let ms = duration.as_millis();
    let ms = if duration.subsec_nanos() % 1_000_000 == 0 {
        ms
    } else {
        ms.saturating_add(1)
    };
    let ms = u64::try_from(ms).unwrap_or(u64::MAX);
    sleep_until(clock, clock.now_ms().saturating_add(ms))
}

/// A future that completes once `clock.now_ms() >= deadline_ms` (ms on that clock); at once if
/// it already is. Dropping it before then cancels its timer. See [`sleep`].
pub fn sleep_until(clock: &Arc<dyn Clock>, deadline_ms: u64) -> Sleep {
    Sleep::until(Arc::clone(clock), deadline_ms)
}

/// The future of [`sleep`] and [`sleep_until`]: completes once its clock reaches its deadline;
/// dropping it cancels its timer.
///
/// No timer is registered until the first poll finds the deadline still ahead.
#[must_use = "a Sleep does nothing unless polled or awaited"]
pub struct Sleep {
    clock: Arc<dyn Clock>,
    deadline_ms: u64,
    armed: Option<(TimerId, Arc<SleepShared>)>,
}

#[derive(Default)]
struct SleepShared {
    fired: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Sleep {
    pub(crate) fn until(clock: Arc<dyn Clock>, deadline_ms: u64) -> Self {
        Sleep {
            clock,
            deadline_ms,
            armed: None,
        }
    }

    /// The time this sleep completes at, in ms on its clock.
    pub fn deadline_ms(&self) -> u64 {
        self.deadline_ms
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline_ms", &self.deadline_ms)
            .field("armed", &self.armed.is_some())
            .finish()
    }
}

impl Sleep {
    /// Polls `deadline_ms` (`None`: never reached) with the sleep kept in `slot`, armed only at
    /// the first poll that needs it, so work that is ready at once never arms a timer.
    #[inline]
    pub(crate) fn poll_deadline(
        slot: &mut Option<Sleep>,
        clock: &Arc<dyn Clock>,
        deadline_ms: Option<u64>,
        cx: &mut Context<'_>,
    ) -> Poll<()> {
        let Some(deadline) = deadline_ms else {
            return Poll::Pending;
        };
        let sleep = slot.get_or_insert_with(|| Sleep::until(Arc::clone(clock), deadline));
        Pin::new(sleep).poll(cx)
    }

    /// `work`'s output, or `None` if this deadline comes first (probes and state-store calls
    /// are bounded by it).
    pub(crate) async fn race<T>(self, work: impl Future<Output = T>) -> Option<T> {
        let mut work = std::pin::pin!(work);
        let mut deadline = std::pin::pin!(self);
        std::future::poll_fn(move |cx| {
            if let Poll::Ready(value) = work.as_mut().poll(cx) {
                return Poll::Ready(Some(value));
            }
            if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            Poll::Pending
        })
        .await
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some((_, shared)) = &self.armed {
            *shared.waker.lock() = Some(cx.waker().clone());
            if shared.fired.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            return Poll::Pending;
        }
        if self.clock.now_ms() >= self.deadline_ms {
            return Poll::Ready(());
        }
        let shared = Arc::new(SleepShared {
            fired: AtomicBool::new(false),
            waker: Mutex::new(Some(cx.waker().clone())),
        });
        let for_timer = Arc::clone(&shared);
        let id = self.clock.schedule(
            self.deadline_ms,
            Box::new(move || {
                for_timer.fired.store(true, Ordering::Release);
                if let Some(waker) = for_timer.waker.lock().take() {
                    waker.wake();
                }
            }),
        );
        let fired = shared.fired.load(Ordering::Acquire);
        self.armed = Some((id, shared));
        if fired {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some((id, _)) = self.armed.take() {
            self.clock.cancel(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn the_timer_thread_is_woken_only_for_a_timer_due_before_its_planned_wake_up() {
        let queue = TimerQueue::default();
        let add = |order| queue.insert(order, 0, Box::new(|| {}));
        // Asleep with no deadline: the first timer wakes it, and it plans for that timer.
        let (first, wake) = add(1000);
        assert!(wake);
        assert!(matches!(queue.plan(0), Plan::SleepUntil(1000)));
        // Due no earlier than the planned wake-up: no call; earlier: a call.
        assert!(!add(1000).1);
        assert!(!add(1500).1);
        let (early, wake) = add(800);
        assert!(wake);
        assert!(matches!(queue.plan(100), Plan::SleepUntil(800)));
        // The timers it planned for are cancelled (the executions ended in time): the planned
        // wake-up is kept while ahead, so the next execution's deadline needs no call.
        assert!(queue.remove(early));
        assert!(queue.remove(first));
        assert!(matches!(queue.plan(200), Plan::SleepUntil(800)));
        let (next, wake) = add(1200);
        assert!(!wake);
        // Woken at 800 for nothing: it plans for the earliest timer left.
        assert!(matches!(queue.plan(800), Plan::SleepUntil(1000)));
        assert!(matches!(queue.plan(1000), Plan::Run));
        while queue.pop_due(1000).is_some() {}
        assert!(matches!(queue.plan(1000), Plan::SleepUntil(1200)));
        assert!(queue.remove(next));
        assert!(queue.pop_due(u64::MAX).is_some());
        // Nothing left, the kept wake-up passed: it sleeps until a timer comes, which wakes it.
        assert!(matches!(queue.plan(1600), Plan::Sleep));
        assert!(add(5000).1);
    }

    #[test]
    fn manual_timers_fire_in_deadline_order_at_their_deadline() {
        let clock = ManualClock::new();
        let (tx, rx) = mpsc::channel();
        for deadline in [30u64, 10, 20] {
            let (c, tx) = (clock.clone(), tx.clone());
            clock.schedule(
                deadline,
                Box::new(move || tx.send((deadline, c.now_ms())).unwrap()),
            );
        }
        clock.advance_ms(25);
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec![(10, 10), (20, 20)]);
        assert_eq!(clock.now_ms(), 25);
        clock.advance_ms(5);
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec![(30, 30)]);
        assert_eq!(clock.pending_timers(), 0);
    }

    #[test]
    fn cancelled_manual_timer_never_fires() {
        let clock = ManualClock::new();
        let fired = Arc::new(AtomicBool::new(false));
        let f = fired.clone();
        let id = clock.schedule(5, Box::new(move || f.store(true, Ordering::SeqCst)));
        assert!(clock.cancel(id));
        assert!(!clock.cancel(id));
        clock.advance_ms(10);
        assert!(!fired.load(Ordering::SeqCst));
    }

    #[test]
    fn manual_timer_already_due_fires_on_schedule() {
        let clock = ManualClock::new();
        clock.advance_ms(100);
        let fired = Arc::new(AtomicBool::new(false));
        let f = fired.clone();
        clock.schedule(50, Box::new(move || f.store(true, Ordering::SeqCst)));
        assert!(fired.load(Ordering::SeqCst));
        assert_eq!(clock.pending_timers(), 0);
    }

    #[test]
    fn manual_epoch_follows_manual_time() {
        let clock = ManualClock::with_epoch_ms(1_000);
        clock.advance_ms(234);
        assert_eq!(clock.epoch_ms(), 1_234);
    }

    #[test]
    fn sleep_completes_when_manual_time_reaches_deadline() {
        let clock = ManualClock::new();
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        let mut sleep = Box::pin(Sleep::until(shared, 40));
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        assert_eq!(clock.pending_timers(), 1);
        clock.advance_ms(39);
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        clock.advance_ms(1);
        assert!(sleep.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn dropping_sleep_cancels_its_timer() {
        let clock = ManualClock::new();
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        let mut sleep = Box::pin(Sleep::until(shared, 40));
        let waker = futures::task::noop_waker();
        assert!(
            sleep
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        drop(sleep);
        assert_eq!(clock.pending_timers(), 0);
    }

    #[test]
    fn public_sleep_rounds_up_and_completes_at_its_deadline() {
        let clock = ManualClock::new();
        clock.advance_ms(10);
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);

        let mut nap = Box::pin(sleep(&shared, Duration::from_micros(2_500)));
        assert_eq!(nap.deadline_ms(), 13);
        assert!(nap.as_mut().poll(&mut cx).is_pending());
        assert_eq!(clock.pending_timers(), 1);
        assert_eq!(clock.next_timer_deadline_ms(), Some(13));
        clock.advance_ms(2);
        assert!(nap.as_mut().poll(&mut cx).is_pending());
        clock.advance_ms(1);
        assert!(nap.as_mut().poll(&mut cx).is_ready());
        assert_eq!(clock.pending_timers(), 0);

        // Zero, and a deadline already passed: ready at the first poll, no timer.
        let mut zero = Box::pin(sleep(&shared, Duration::ZERO));
        assert_eq!(zero.deadline_ms(), 13);
        assert!(zero.as_mut().poll(&mut cx).is_ready());
        let mut past = Box::pin(sleep_until(&shared, 5));
        assert!(past.as_mut().poll(&mut cx).is_ready());
        assert_eq!(clock.pending_timers(), 0);

        // A huge duration saturates instead of overflowing.
        let far = sleep(&shared, Duration::MAX);
        assert_eq!(far.deadline_ms(), u64::MAX);
    }

    #[test]
    fn public_sleep_wakes_its_task_when_the_clock_fires() {
        let clock = ManualClock::new();
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        let driver = clock.clone();
        let sleeper = std::thread::spawn(move || {
            futures::executor::block_on(sleep(&shared, Duration::from_millis(40)));
            shared.now_ms()
        });
        assert!(driver.wait_for_pending_timers(1, Duration::from_secs(10)));
        assert_eq!(driver.next_timer_deadline_ms(), Some(40));
        driver.advance_ms(40);
        assert_eq!(sleeper.join().unwrap(), 40);
    }

    #[test]
    fn dropping_public_sleep_cancels_its_timer() {
        let clock = ManualClock::new();
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        let mut nap = Box::pin(sleep(&shared, Duration::from_millis(5)));
        let waker = futures::task::noop_waker();
        assert!(
            nap.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        assert_eq!(clock.pending_timers(), 1);
        drop(nap);
        assert_eq!(clock.pending_timers(), 0);
    }

    #[test]
    fn advance_to_next_timer_moves_to_each_deadline_in_turn() {
        let clock = ManualClock::new();
        let (tx, rx) = mpsc::channel();
        for deadline in [120u64, 45, 45, 300] {
            let (c, tx) = (clock.clone(), tx.clone());
            clock.schedule(deadline, Box::new(move || tx.send(c.now_ms()).unwrap()));
        }
        assert_eq!(clock.advance_to_next_timer(), Some(45));
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec![45, 45]);
        assert_eq!(clock.advance_to_next_timer(), Some(120));
        assert_eq!(clock.advance_to_next_timer(), Some(300));
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec![120, 300]);
        assert_eq!(clock.advance_to_next_timer(), None);
        assert_eq!(clock.now_ms(), 300);
    }

    #[test]
    fn wait_for_pending_timers_wakes_on_schedule_and_gives_up_at_its_timeout() {
        let clock = ManualClock::new();
        // Nothing schedules: gives up after the (short) timeout.
        let started = std::time::Instant::now();
        assert!(!clock.wait_for_pending_timers(1, Duration::from_millis(20)));
        assert!(started.elapsed() >= Duration::from_millis(20));
        // Already enough: returns at once.
        assert!(clock.wait_for_pending_timers(0, Duration::ZERO));

        let other = clock.clone();
        let scheduler = std::thread::spawn(move || {
            for deadline in [10, 20] {
                std::thread::sleep(Duration::from_millis(5));
                other.schedule(deadline, Box::new(|| {}));
            }
        });
        assert!(clock.wait_for_pending_timers(2, Duration::from_secs(10)));
        assert_eq!(clock.pending_timers(), 2);
        scheduler.join().unwrap();
    }

    #[test]
    fn system_clock_timer_never_fires_early() {
        let clock = SystemClock;
        for wait_ms in [1u64, 2, 5] {
            let (tx, rx) = mpsc::channel();
            let scheduled = std::time::Instant::now();
            clock.schedule(
                clock.now_ms() + wait_ms,
                Box::new(move || tx.send(std::time::Instant::now()).unwrap()),
            );
            // The timer thread must fire it; a generous bound only guards against a hang.
            let fired = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("system timer fired");
            assert!(fired - scheduled >= Duration::from_millis(wait_ms));
        }
    }
}
