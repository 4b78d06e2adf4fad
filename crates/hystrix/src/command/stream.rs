//! Stream commands (Hystrix's `HystrixObservableCommand`): a run that is a
//! `Stream<Item = Result<T, E>>`, delivering many values, with a fallback that is a stream too.
//!
//! The execution takes the pipeline's steps with the shared helpers of
//! [`pipeline`](super::pipeline); only what differs for a stream lives here:
//!
//! - each value of the run is an EMIT (counted) and is delivered at once; the run's normal end
//!   is the SUCCESS (the breaker hears of it then);
//! - values delivered before an error stay delivered; the error is classified, and a FAILURE
//!   (or a panic, TIMEOUT, short-circuit, rejection) is followed by the fallback stream's values,
//!   each a FALLBACK_EMIT, then FALLBACK_SUCCESS at its end; a failed, missing or rejected
//!   fallback ends the stream with one final `Err` item;
//! - the timeout bounds the time to the first value, as in Hystrix; an optional idle
//!   timeout bounds each gap after it;
//! - the execution permit is held until the run stream ends (or times out), the fallback permit
//!   while the fallback stream runs.
//!
//! How the run is isolated and how its timeouts are measured is told on [`StreamExecution`]
//! (its sections "Isolation" and "Timeouts").
//!
//! | mode | starts | dropping it |
//! |---|---|---|
//! | [`to_observable`](StreamExecution::to_observable) | at first poll (cold) | cancels |
//! | [`observe`](StreamExecution::observe) | now, on the registry's executor (hot) | detaches |

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_core::Stream;
use parking_lot::Mutex;
use pin_project_lite::pin_project;

use crate::chaos::{Injection, Then, Wait};
use crate::clock::{Clock, Sleep};
use crate::command::execution::NoFallback;
use crate::command::future::{StateRef, release_permits};
use crate::command::pipeline::{
    CallOptions, Decision, FallbackEnd, FallbackStart, Recorder, RunEnd, caught, check_breaker,
    check_options, check_throttle, decide, fallback_done, pool_rejected, start_fallback,
    take_permit, timeout_ms,
};
use crate::command::run::sealed::Sealed;
use crate::command::run::{AbortOnDrop, Ran, Start, spawn_on_pool};
use crate::command::{Classify, Command, ExecutionResult};
use crate::config::IsolationStrategy;
use crate::context::{Carried, RequestContext};
use crate::error::{BoxError, Cause, Detail, FailureType, HystrixError};
use crate::event::EventType;
use crate::isolation::priority::Held;
use crate::isolation::thread_pool::{Rejection, ThreadPool};
use crate::key::CommandKey;
use crate::registry::CommandState;

/// One execution of a stream command: a run stream plus per-call options, consumed by
/// [`to_observable`](StreamExecution::to_observable) or [`observe`](StreamExecution::observe)
/// (the two modes Hystrix's `HystrixObservableCommand` offers). Made by
/// [`Command::run_stream`].
///
/// # Isolation
///
/// SEMAPHORE (the default): the run stream is polled in the execution stream's own poll, so it
/// goes only as fast as its consumer reads. THREAD: the run stream is driven by a task on the
/// pool's own runtime (holding a pool slot until it stops), which hands its values on through a
/// buffer of [`STREAM_BUFFER_CAPACITY`] (16) values: once it is full the task waits for the
/// consumer to take one before it polls the run again (backpressure), so a consumer that stops
/// reading holds the run back. When the consumer drops (or `cancel()`s) the execution, the task
/// stops at its next step and its pool slot is free; it also returns to its runtime after every
/// 16 values, so even a run that is always ready cannot keep it.
///
/// # Timeouts
///
/// Both are measured on the registry's clock while the run is being waited on, never while the
/// consumer is busy elsewhere:
///
/// - the timeout (`execution.isolation.thread.timeoutInMilliseconds`, or the call's
///   [`timeout`](StreamExecution::timeout)) runs from the execution's start to the run's first
///   value (or end). A first step that comes at or after it is a TIMEOUT, as
///   seen where the run is polled: in the consumer's poll under SEMAPHORE, by the pool task
///   under THREAD (where a value that arrived in time stays in time however late it is read);
/// - the [`idle_timeout`](StreamExecution::idle_timeout) is armed (now + idle) when, after a
///   value, the run is next found pending: by the consumer's poll under SEMAPHORE, by the pool
///   task (once the buffer has room: waiting for room does not count) under THREAD. It passes
///   only while the run is pending; a step that is ready when polled is in time.
#[must_use = "a stream execution does nothing until consumed by to_observable() or observe()"]
pub struct StreamExecution<'c, C, S, FB> {
    command: &'c Command<C>,
    run: S,
    fallback: FB,
    options: CallOptions,
    idle_timeout_ms: Option<u64>,
}

impl<C, S, FB> fmt::Debug for StreamExecution<'_, C, S, FB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamExecution")
            .field("command", &self.command.key())
            .field("options", &self.options)
            .field("idle_timeout_ms", &self.idle_timeout_ms)
            .finish_non_exhaustive()
    }
}

/// A fallback usable by a stream execution: none ([`NoFallback`]), or a
/// [`FallbackStreamFn`].
pub trait StreamFallback<T, E>: Sealed {
    /// The fallback stream's error type.
    #[doc(hidden)]
    type Error: Into<BoxError>;
    /// The stream it returns.
    #[doc(hidden)]
    type Stream: Stream<Item = Result<T, Self::Error>>;
    /// Whether a fallback was given (if not: FALLBACK_MISSING without taking a permit).
    #[doc(hidden)]
    fn is_present(&self) -> bool;
    /// Starts it; `None` means "no fallback" (FALLBACK_MISSING).
    #[doc(hidden)]
    fn call(self, error: &HystrixError<E>) -> Option<Self::Stream>;
}

/// A stream fallback, `FnOnce(&HystrixError<E>) -> FS` (see
/// [`StreamExecution::fallback_stream`]).
pub struct FallbackStreamFn<F, FS> {
    f: F,
    _stream: PhantomData<fn() -> FS>,
}

/// The stream of a missing fallback: never started (FALLBACK_MISSING comes first).
#[doc(hidden)]
pub struct NoFallbackStream<T>(PhantomData<fn() -> T>);

impl<T> Stream for NoFallbackStream<T> {
    type Item = Result<T, BoxError>;

    fn poll_next(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Poll::Ready(None)
    }
}

impl<T, E> StreamFallback<T, E> for NoFallback {
    type Error = BoxError;
    type Stream = NoFallbackStream<T>;
    fn is_present(&self) -> bool {
        false
    }
    fn call(self, _error: &HystrixError<E>) -> Option<Self::Stream> {
        None
    }
}

impl<F, FS> Sealed for FallbackStreamFn<F, FS> {}
impl<F, FS, T, E, FE> StreamFallback<T, E> for FallbackStreamFn<F, FS>
where
    F: FnOnce(&HystrixError<E>) -> FS,
    FS: Stream<Item = Result<T, FE>>,
    FE: Into<BoxError>,
{
    type Error = FE;
    type Stream = FS;
    fn is_present(&self) -> bool {
        true
    }
    fn call(self, error: &HystrixError<E>) -> Option<FS> {
        Some((self.f)(error))
    }
}

impl<'c, C, S> StreamExecution<'c, C, S, NoFallback> {
    pub(crate) fn new(command: &'c Command<C>, run: S) -> Self {
        StreamExecution {
            command,
            run,
            fallback: NoFallback,
            options: CallOptions::default(),
            idle_timeout_ms: None,
        }
    }

    /// The fallback stream for this call (Hystrix's `resumeWithFallback()`): started with the
    /// error when the run fails, panics, times out, is short-circuited or rejected, after the
    /// values the run delivered. Each of its values is a FALLBACK_EMIT, its end
    /// FALLBACK_SUCCESS; its error or panic is FALLBACK_FAILURE and ends the stream with one
    /// `Err` that keeps both errors. It holds a permit of `fallback.isolation.semaphore.
    /// maxConcurrentRequests` while it runs, and is skipped when `fallback.enabled` is false.
    /// Not used for bad requests and ignored errors. The closure sees the error synchronously;
    /// the stream it returns must not borrow it.
    pub fn fallback_stream<F, FS, T, E, FE>(
        self,
        fallback: F,
    ) -> StreamExecution<'c, C, S, FallbackStreamFn<F, FS>>
    where
        S: Stream<Item = Result<T, E>>,
        F: FnOnce(&HystrixError<E>) -> FS,
        FS: Stream<Item = Result<T, FE>>,
        FE: Into<BoxError>,
    {
        StreamExecution {
            command: self.command,
            run: self.run,
            fallback: FallbackStreamFn {
                f: fallback,
                _stream: PhantomData,
            },
            options: self.options,
            idle_timeout_ms: self.idle_timeout_ms,
        }
    }
}

impl<C, S, FB> StreamExecution<'_, C, S, FB> {
    /// Marks this execution as a collapser's batch of `requests` requests
    /// (COLLAPSED × `requests`).
    pub(crate) fn collapsed(mut self, requests: u32) -> Self {
        self.options = std::mem::take(&mut self.options).with_collapsed(requests);
        self
    }

    /// Overrides, for this call only, the time the run has to deliver its FIRST value (or to
    /// end), counted from the execution's start, instead of
    /// `execution.isolation.thread.timeoutInMilliseconds`; rounded up to whole milliseconds,
    /// zero is refused when executed. As in Hystrix's observable commands, a run that delivered
    /// a value is never timed out by it (see [`idle_timeout`](StreamExecution::idle_timeout)
    /// for that). `execution.timeout.enabled = false` still turns it off. Its error reads
    /// "timed out after N ms (the timeout given to this call)". Where it is judged: see the
    /// [`StreamExecution`'s "Timeouts"](StreamExecution#timeouts).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options =
            std::mem::take(&mut self.options).with_timeout_ms(crate::config::ceil_millis(timeout));
        self
    }

    /// The longest gap allowed between two values of the run after the first one (and between
    /// the last value and the run's end), rounded up to whole milliseconds; zero is refused when
    /// executed. The gap is the run's, not the consumer's: it starts when the run is found
    /// pending after a value and passes only while the run is still pending, so a slow
    /// consumer of values that are ready is never timed out (details in the
    /// [`StreamExecution`'s "Timeouts"](StreamExecution#timeouts)). A longer gap is a TIMEOUT: the run stream is dropped, the
    /// values before stay delivered, and the fallback follows; its error reads "timed out
    /// waiting N ms for its next value (idle timeout)". Off by default (Hystrix
    /// has none). Not affected by `execution.timeout.enabled`.
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout_ms = Some(crate::config::ceil_millis(idle));
        self
    }

    /// Goes through the keyed breaker of `key` instead of the command's own; see
    /// [`Execution::breaker_key`](crate::Execution::breaker_key).
    pub fn breaker_key(mut self, key: impl Into<Arc<str>>) -> Self {
        self.options = std::mem::take(&mut self.options).with_breaker_key(Some(key.into()));
        self
    }

    /// Gives this call a class under pressure (NORMAL by default); see
    /// [`Execution::priority`](crate::Execution::priority). The class holds its place while
    /// the stream runs.
    pub fn priority(mut self, priority: crate::Priority) -> Self {
        self.options = std::mem::take(&mut self.options).with_priority(priority);
        self
    }

    /// What to journal if this call is short-circuited; see
    /// [`Execution::journal`](crate::Execution::journal).
    pub fn journal(mut self, description: impl Into<String>) -> Self {
        self.options = std::mem::take(&mut self.options).with_journal(description.into());
        self
    }
}

impl<'c, C, S, FB, T, E> StreamExecution<'c, C, S, FB>
where
    S: Stream<Item = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
    FB: StreamFallback<T, E>,
    C: Classify<E>,
{
    /// The cold stream of this execution (Hystrix's `toObservable()`): nothing happens until
    /// it is first polled. It yields the run's values, then, after a failure, the fallback's
    /// values, or one final `Err`; then it ends.
    ///
    /// SEMAPHORE isolation (the default for stream commands): the run stream is
    /// polled inside this stream. THREAD isolation: the run stream is spawned on the pool's own
    /// runtime (admitted by a pool slot, held until it stops, or THREAD_POOL_REJECTED) and its
    /// values are passed here as they come, at most [`STREAM_BUFFER_CAPACITY`] ahead of this
    /// stream's reads.
    ///
    /// # Cancel safety
    /// Dropping it before its end drops the run (or fallback) stream, releases every permit and
    /// pool slot, and, if it had been polled, records CANCELLED. A half-open trial that
    /// delivered at least one value and no error counts as a success.
    pub fn to_observable(self) -> ExecutionStream<'c, &'c C, S, FB, FB::Stream, T, E> {
        ExecutionStream::new(
            StateRef::Borrowed(self.command.state_arc()),
            self.command.classifier(),
            self.run,
            self.fallback,
            self.options,
            self.idle_timeout_ms,
        )
    }
}

impl<C, S, FB, T, E> StreamExecution<'_, C, S, FB>
where
    S: Stream<Item = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
    FB: StreamFallback<T, E> + Send + 'static,
    FB::Stream: Send + 'static,
    C: Classify<E> + Clone + Send + Sync + 'static,
{
    /// Starts the execution now and returns the stream of its items (Hystrix's `observe()`):
    /// the first steps (breaker, permit, the values ready at once, a short-circuit or rejection
    /// and its fallback) are taken on this thread; the rest is driven on the registry's
    /// executor, with the caller's request context and span. Items wait in an unbounded buffer
    /// for the one subscriber, as Hystrix's replaying `observe()` (the executor's task reads
    /// the run, or under THREAD its [bounded buffer](STREAM_BUFFER_CAPACITY), as fast as it
    /// delivers; it returns to the executor after every 16 items).
    ///
    /// Dropping the returned stream detaches it: the execution goes on and is counted, its
    /// items are discarded. Use [`cancel`](ObservedStream::cancel) to stop it.
    pub fn observe(self) -> ObservedStream<T, E> {
        let state = Arc::clone(self.command.state_arc());
        let stream = ExecutionStream::new(
            StateRef::Owned(Arc::clone(&state)),
            self.command.classifier().clone(),
            self.run,
            self.fallback,
            self.options,
            self.idle_timeout_ms,
        );
        ObservedStream::start(&state, stream)
    }
}

// ------------------------------------------------------------------------------------------------
// The run stream in progress

/// How many values of a THREAD-isolated run stream may wait for their consumer: the run's
/// task on the pool polls the run for its next value only while fewer than this many are
/// buffered, and otherwise waits for the consumer to take one (backpressure). A consumer that
/// stops reading holds the run back after at most this many values; one that drops the stream
/// stops the run at its next step.
pub const STREAM_BUFFER_CAPACITY: usize = 16;

/// A single-consumer queue of items that ends once closed: carries a pool-driven run's steps
/// to its execution (bounded: its producer waits for room), and an `observe()`d execution's
/// items to its subscriber (unbounded).
struct Feed<I> {
    state: Mutex<FeedState<I>>,
    /// [`poll_room`](Feed::poll_room) is ready while fewer items than this are buffered.
    capacity: usize,
}

struct FeedState<I> {
    items: VecDeque<I>,
    closed: bool,
    /// Items pushed from now on are dropped (the subscriber is gone).
    discard: bool,
    /// The consumer, waiting for an item.
    waker: Option<Waker>,
    /// The producer, waiting for room.
    room: Option<Waker>,
}

impl<I> Feed<I> {
    /// A feed whose producer never waits (`observe()`'s replaying buffer).
    fn new() -> Self {
        Self::bounded(usize::MAX)
    }

    /// A feed whose producer waits for room once `capacity` items are buffered.
    fn bounded(capacity: usize) -> Self {
        Feed {
            state: Mutex::new(FeedState {
                items: VecDeque::new(),
                closed: false,
                discard: false,
                waker: None,
                room: None,
            }),
            capacity,
        }
    }

    /// For the producer: ready with `true` once there is room for an item, `false` if the
    /// consumer is gone (nothing more is wanted).
    fn poll_room(&self, cx: &mut Context<'_>) -> Poll<bool> {
        let mut state = self.state.lock();
        if state.discard {
            return Poll::Ready(false);
        }
        if state.items.len() < self.capacity {
            return Poll::Ready(true);
        }
        state.room = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Adds an item (unless closed or discarding) and wakes the consumer.
    fn push(&self, item: I) {
        let mut state = self.state.lock();
        if state.closed || state.discard {
            return;
        }
        state.items.push_back(item);
        let waker = state.waker.take();
        drop(state);
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Ends the feed after `last` (if any) unless it has ended; returns whether it ended now.
    fn close(&self, last: Option<I>) -> bool {
        let mut state = self.state.lock();
        if state.closed {
            return false;
        }
        if let Some(last) = last
            && !state.discard
        {
            state.items.push_back(last);
        }
        state.closed = true;
        let waker = state.waker.take();
        drop(state);
        if let Some(waker) = waker {
            waker.wake();
        }
        true
    }

    fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// The consumer left: drops what is buffered and what comes later, and wakes a producer
    /// waiting for room (it finds the consumer gone).
    fn discard(&self) {
        let mut state = self.state.lock();
        state.discard = true;
        let items = std::mem::take(&mut state.items);
        let room = state.room.take();
        drop(state);
        drop(items);
        if let Some(room) = room {
            room.wake();
        }
    }

    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<I>> {
        let mut state = self.state.lock();
        if let Some(item) = state.items.pop_front() {
            let room = state.room.take();
            drop(state);
            if let Some(room) = room {
                room.wake();
            }
            return Poll::Ready(Some(item));
        }
        if state.closed {
            return Poll::Ready(None);
        }
        state.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// A step of the run: a value or error (`Ok`) or a panic (`Err`) it delivered, or (THREAD
/// isolation: judged by its task on the pool) the timeout or idle timeout that passed first.
enum Step<T, E> {
    Ran(Ran<T, E>),
    TimedOut,
    /// Chaos injection replaced the run with a fault, before its first value.
    Injected,
}

/// The consumer's end of a THREAD-isolated run's feed: dropping it (the execution stops)
/// tells the run's task that nobody reads any more.
struct FeedReader<I>(Arc<Feed<I>>);

impl<I> Drop for FeedReader<I> {
    fn drop(&mut self) {
        self.0.discard();
    }
}

pin_project! {
    /// A run stream in progress: polled in place, or a task on its pool's runtime.
    #[project = RunningProj]
    enum Running<S, T, E> {
        /// SEMAPHORE: polled in the execution's own poll, after the injected wait if any.
        Here { #[pin] stream: S, chaos: Option<Box<Wait>> },
        /// THREAD: a task on the pool's runtime pushes the steps here (at most
        /// [`STREAM_BUFFER_CAPACITY`] values ahead); stopped when dropped.
        OnPool { feed: FeedReader<Step<T, E>>, _task: AbortOnDrop<RunEnd<(), Infallible>> },
    }
}

impl<S, T, E> Running<S, T, E>
where
    S: Stream<Item = Result<T, E>>,
{
    /// The run's next step, or its end (`None`).
    fn poll_step(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Step<T, E>>> {
        match self.project() {
            RunningProj::Here { stream, chaos } => {
                if let Some(wait) = chaos {
                    let then = std::task::ready!(Pin::new(&mut **wait).poll(cx));
                    *chaos = None;
                    if let Some(step) = injected_step(then) {
                        return Poll::Ready(Some(step));
                    }
                }
                caught(|| stream.poll_next(cx)).map(|step| step.transpose().map(Step::Ran))
            }
            RunningProj::OnPool { feed, .. } => feed.0.poll_next(cx),
        }
    }

    /// Whether the run's task on a pool judges its timeouts (THREAD isolation).
    fn is_on_pool(&self) -> bool {
        matches!(self, Running::OnPool { .. })
    }
}

/// The time limits of a run, on the registry's clock.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// The first value's absolute deadline, in ms (none when the timeout is disabled).
    first_deadline_ms: Option<u64>,
    /// The idle timeout, in ms.
    idle_ms: Option<u64>,
}

/// THREAD isolation: spawns the run stream on `pool`'s runtime, admitted by a pool slot held
/// until it ends, or refused. The task judges the run's timeouts itself (see [`pump_on_pool`]).
fn start_on_pool<S, T, E>(
    run: S,
    state: &Arc<CommandState>,
    pool: &ThreadPool,
    limits: Limits,
    chaos: Option<Injection>,
) -> Result<Running<S, T, E>, Rejection>
where
    S: Stream<Item = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    let feed = Arc::new(Feed::bounded(STREAM_BUFFER_CAPACITY));
    let start = Start {
        state,
        deadline_ms: None,
        interrupt_on_timeout: false,
        context: RequestContext::current_if_any(),
        cancel_link: None,
    };
    let clock = Arc::clone(&state.env.clock);
    let chaos = chaos.map(|injection| (injection, Arc::clone(state)));
    let pump = pump_on_pool(run, Arc::clone(&feed), clock, limits, chaos);
    // The pump waits out an injection itself, against the first value's deadline.
    let task = spawn_on_pool(pump, &start, pool, None)?;
    Ok(Running::OnPool {
        feed: FeedReader(feed),
        _task: task,
    })
}

/// The task a THREAD-isolated run stream becomes: its steps go to `feed` until its end, error,
/// panic or timeout, or until its consumer is gone.
///
/// - Backpressure: it asks the run for its next value only while the feed has room (fewer
///   than [`STREAM_BUFFER_CAPACITY`] values buffered); it returns to the pool's runtime while
///   it waits for room, and after every [`STREAM_BUFFER_CAPACITY`] values in any case, so it
///   can always be aborted.
/// - The first value (or end) must come before `limits.first_deadline_ms`, as it arrives here:
///   a value at or past it is a timeout, one that came before is in time
///   however late its consumer reads it.
/// - The idle timeout is armed when the task finds the run pending for its next value (time
///   spent waiting for room does not count), and passes only while the run is pending.
async fn pump_on_pool<S, T, E>(
    run: S,
    feed: Arc<Feed<Step<T, E>>>,
    clock: Arc<dyn Clock>,
    limits: Limits,
    chaos: Option<(Injection, Arc<CommandState>)>,
) -> Result<(), Infallible>
where
    S: Stream<Item = Result<T, E>>,
{
    /// Ends the feed if the task stops early (aborted, or its runtime shut down).
    struct CloseOnDrop<'a, T, E>(&'a Feed<Step<T, E>>);
    impl<T, E> Drop for CloseOnDrop<'_, T, E> {
        fn drop(&mut self) {
            let error = Err("the run stream's task ended early".to_owned());
            self.0.close(Some(Step::Ran(error)));
        }
    }
    let _close = CloseOnDrop(&feed);
    if let Some((injection, command)) = chaos
        && let Some(step) = injected_step(injection.wait(&command, limits.first_deadline_ms).await)
    {
        feed.close(Some(step));
        return Ok(());
    }
    let mut run = std::pin::pin!(run);
    let mut emitted = false;
    // The deadline waited for: the first value's, then (with an idle timeout) the next one's.
    let mut deadline_ms = limits.first_deadline_ms;
    let mut sleep: Option<Sleep> = None;
    let mut since_yield = 0;
    loop {
        if !std::future::poll_fn(|cx| feed.poll_room(cx)).await {
            // The consumer is gone.
            return Ok(());
        }
        let step = std::future::poll_fn(|cx| {
            if let Poll::Ready(step) = caught(|| run.as_mut().poll_next(cx)) {
                return Poll::Ready(Some(step));
            }
            if emitted && deadline_ms.is_none() {
                deadline_ms = limits.idle_ms.map(|ms| clock.now_ms().saturating_add(ms));
            }
            Sleep::poll_deadline(&mut sleep, &clock, deadline_ms, cx).map(|()| None)
        })
        .await;
        let late = !emitted && deadline_ms.is_some_and(|deadline| clock.now_ms() >= deadline);
        match step.map(Result::transpose) {
            None => {
                feed.close(Some(Step::TimedOut));
                return Ok(());
            }
            Some(_) if late => {
                feed.close(Some(Step::TimedOut));
                return Ok(());
            }
            Some(Some(Ok(Ok(value)))) => {
                emitted = true;
                deadline_ms = None;
                sleep = None;
                feed.push(Step::Ran(Ok(Ok(value))));
            }
            Some(Some(last)) => {
                feed.close(Some(Step::Ran(last)));
                return Ok(());
            }
            Some(None) => {
                feed.close(None);
                return Ok(());
            }
        }
        since_yield += 1;
        if since_yield == STREAM_BUFFER_CAPACITY {
            since_yield = 0;
            tokio::task::yield_now().await;
        }
    }
}

/// The step that ends a run stream after its injected wait: `None` if the run follows.
fn injected_step<T, E>(then: Then) -> Option<Step<T, E>> {
    match then {
        Then::Run => None,
        Then::Fault => Some(Step::Injected),
        Then::TimedOut => Some(Step::TimedOut),
    }
}

// ------------------------------------------------------------------------------------------------
// The execution stream

pin_project! {
    /// Where a stream execution is.
    #[project = PhaseProj]
    #[project_replace = PhaseOwned]
    enum Phase<S, FB, FS, T, E> {
        /// Not polled yet: nothing has happened.
        Start { run: S, fallback: FB },
        /// The run stream is delivering, raced against its deadline (SEMAPHORE; under THREAD
        /// the run's task on the pool judges its timeouts).
        Running {
            #[pin]
            running: Running<S, T, E>,
            sleep: Option<Sleep>,
            // SEMAPHORE: the first value's deadline, then (with an idle timeout) the next
            // value's, armed at the first poll that finds the run pending after a value.
            deadline_ms: Option<u64>,
            // The first value's timeout, in ms (for the error).
            limit_ms: u64,
            fallback: FB,
        },
        /// The fallback stream is delivering.
        Fallback {
            #[pin]
            stream: FS,
            error: HystrixError<E>,
        },
        /// The execution ended (its last item was returned).
        Done,
    }
}

pin_project! {
    /// The cold stream of a stream execution: what
    /// [`StreamExecution::to_observable`] returns (Hystrix's `toObservable()` of a
    /// `HystrixObservableCommand`). Yields `Ok` values of the run, then, after a failure, the
    /// fallback's values or one final `Err`, then ends; [`execution_result`] is there from
    /// its end.
    ///
    /// # Cancel safety
    /// Dropping it before its end drops the run (or fallback) stream, releases its permits and
    /// pool slot, and, if it had been polled, records CANCELLED.
    ///
    /// [`execution_result`]: ExecutionStream::execution_result
    #[must_use = "streams do nothing unless polled"]
    pub struct ExecutionStream<'c, K, S, FB, FS, T, E> {
        #[pin]
        phase: Phase<S, FB, FS, T, E>,
        state: StateRef<'c>,
        classifier: K,
        options: CallOptions,
        idle_timeout_ms: Option<u64>,
        recorder: Recorder,
        // Permits are released by hand (the stream would otherwise borrow from itself).
        holds_permit: Option<Held>,
        holds_fallback_permit: bool,
        // The run delivered a value.
        emitted: bool,
        result: Option<ExecutionResult>,
    }

    impl<'c, K, S, FB, FS, T, E> PinnedDrop for ExecutionStream<'c, K, S, FB, FS, T, E> {
        fn drop(this: Pin<&mut Self>) {
            this.stop();
        }
    }
}

impl<K, S, FB, FS, T, E> fmt::Debug for ExecutionStream<'_, K, S, FB, FS, T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecutionStream")
            .field("command", &self.state.key)
            .field("result", &self.result)
            .finish_non_exhaustive()
    }
}

impl<'c, K, S, FB, FS, T, E> ExecutionStream<'c, K, S, FB, FS, T, E> {
    fn new(
        state: StateRef<'c>,
        classifier: K,
        run: S,
        fallback: FB,
        options: CallOptions,
        idle_timeout_ms: Option<u64>,
    ) -> Self {
        ExecutionStream {
            phase: Phase::Start { run, fallback },
            state,
            classifier,
            options,
            idle_timeout_ms,
            recorder: Recorder::idle(),
            holds_permit: None,
            holds_fallback_permit: false,
            emitted: false,
            result: None,
        }
    }

    /// The events and times of the execution (e.g. `[EMITx3, SUCCESS]`), once it has ended
    /// (the stream returned `None`, or was cancelled); `None` before.
    pub fn execution_result(&self) -> Option<ExecutionResult> {
        self.result
    }

    /// Stops an unfinished execution: drops its run or fallback stream, frees its permits and
    /// records CANCELLED; returns what was recorded (`None` if it had ended or never started).
    fn stop(self: Pin<&mut Self>) -> Option<ExecutionResult> {
        let mut this = self.project();
        if this.recorder.is_settled() && this.holds_permit.is_none() && !*this.holds_fallback_permit
        {
            return None;
        }
        let state: &CommandState = this.state;
        // A half-open trial that delivered values and no error counts as a success; any other
        // unfinished execution says nothing to the breaker.
        if *this.emitted
            && matches!(this.phase.as_mut().project(), PhaseProj::Running { .. })
            && this.recorder.trial_generation().is_some()
        {
            this.recorder
                .settle_success(state, state.env.clock.now_ms());
        }
        // The run or fallback goes first, so its permit is free before CANCELLED is seen.
        this.phase.set(Phase::Done);
        release_permits(state, this.holds_permit, this.holds_fallback_permit);
        let result = this.recorder.cancel(state);
        *this.result = result.or(*this.result);
        result
    }
}

/// Reports the execution's end (once) and turns its response into the stream's last step: an
/// `Err` item, or the end.
fn finish<T, E>(
    state: &CommandState,
    rec: &mut Recorder,
    result: &mut Option<ExecutionResult>,
    now_ms: u64,
    response: Result<(), HystrixError<E>>,
) -> Poll<Option<Result<T, HystrixError<E>>>> {
    let outcome = rec.finish(state, now_ms, response);
    *result = Some(outcome.result);
    Poll::Ready(outcome.response.err().map(Err))
}

impl<K, S, FB, FS, T, E> Stream for ExecutionStream<'_, K, S, FB, FS, T, E>
where
    S: Stream<Item = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
    FB: StreamFallback<T, E, Stream = FS>,
    FS: Stream<Item = Result<T, FB::Error>>,
    K: Classify<E>,
{
    type Item = Result<T, HystrixError<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        let state: &Arc<CommandState> = this.state;
        let rec = &mut *this.recorder;
        // A first poll opens the execution's span; every poll of the run enters it.
        let span = match this.phase.as_mut().project() {
            PhaseProj::Start { .. } => rec.open_span(state),
            PhaseProj::Done => return Poll::Ready(None),
            _ => rec.span().cloned(),
        };
        let _entered = span.as_ref().map(tracing::Span::enter);
        loop {
            // Each arm either returns, or hands a failure and the fallback to the code below.
            let (error, fallback) = match this.phase.as_mut().project() {
                PhaseProj::Start { .. } => {
                    let PhaseOwned::Start { run, fallback } =
                        this.phase.as_mut().project_replace(Phase::Done)
                    else {
                        unreachable!("matched Start above")
                    };
                    let props = state.properties.hot().load();
                    // SEMAPHORE unless THREAD is chosen explicitly.
                    let isolation = props.isolation().unwrap_or(IsolationStrategy::Semaphore);
                    rec.begin(state, isolation);
                    let checked = check_options(state, rec, this.options)
                        .and_then(|()| check_idle_timeout(state, *this.idle_timeout_ms));
                    if let Err(err) = checked {
                        let now = rec.start_ms;
                        return finish(state, rec, this.result, now, Err(err));
                    }
                    if let Err(err) = check_breaker(state, &props, rec, this.options)
                        .and_then(|()| check_throttle(state, &props, rec))
                    {
                        (err, fallback)
                    } else {
                        let timeout_ms = timeout_ms(&props, this.options);
                        let limits = Limits {
                            first_deadline_ms: timeout_ms.map(|ms| rec.start_ms.saturating_add(ms)),
                            idle_ms: *this.idle_timeout_ms,
                        };
                        let chaos = crate::chaos::draw(state, &props, limits.first_deadline_ms);
                        let started = match isolation {
                            IsolationStrategy::Semaphore => {
                                take_permit(state, &props, rec).map(|()| {
                                    *this.holds_permit = Some(rec.held);
                                    Running::Here {
                                        stream: run,
                                        chaos: chaos.map(|injection| {
                                            Box::new(
                                                injection.wait(state, limits.first_deadline_ms),
                                            )
                                        }),
                                    }
                                })
                            }
                            IsolationStrategy::Thread => state
                                .thread_pool()
                                .and_then(|pool| start_on_pool(run, state, pool, limits, chaos))
                                .map_err(|rejection| pool_rejected(state, rec, rejection)),
                        };
                        match started {
                            Err(err) => (err, fallback),
                            Ok(running) => {
                                if chaos.is_some() {
                                    rec.count_chaos_injected();
                                }
                                rec.run_started(state);
                                let here = !running.is_on_pool();
                                this.phase.set(Phase::Running {
                                    running,
                                    sleep: None,
                                    deadline_ms: limits.first_deadline_ms.filter(|_| here),
                                    limit_ms: timeout_ms.unwrap_or_default(),
                                    fallback,
                                });
                                continue;
                            }
                        }
                    }
                }
                PhaseProj::Running {
                    mut running,
                    sleep,
                    deadline_ms,
                    limit_ms,
                    ..
                } => {
                    let step = match running.as_mut().poll_step(cx) {
                        Poll::Ready(step) => step,
                        // THREAD: the run's task judges the timeouts (`pump_on_pool`).
                        Poll::Pending if running.is_on_pool() => return Poll::Pending,
                        Poll::Pending => {
                            // The idle gap is the run's: it starts when the run is found
                            // pending after a value, not when the value was delivered.
                            if *this.emitted && deadline_ms.is_none() {
                                *deadline_ms = this
                                    .idle_timeout_ms
                                    .map(|ms| state.env.clock.now_ms().saturating_add(ms));
                            }
                            if Sleep::poll_deadline(sleep, &state.env.clock, *deadline_ms, cx)
                                .is_pending()
                            {
                                return Poll::Pending;
                            }
                            Some(Step::TimedOut)
                        }
                    };
                    let now = state.env.clock.now_ms();
                    let ended = match step {
                        Some(Step::TimedOut) => RunEnd::TimedOut,
                        Some(Step::Injected) => RunEnd::Injected,
                        // A first step at or past the deadline comes too late; after a
                        // value, a step that is ready is in time.
                        Some(_)
                            if !*this.emitted
                                && deadline_ms.is_some_and(|deadline| now >= deadline) =>
                        {
                            RunEnd::TimedOut
                        }
                        Some(Step::Ran(Ok(Ok(value)))) => {
                            rec.event(state, EventType::Emit);
                            if !*this.emitted {
                                rec.first_value(state, now);
                            }
                            *this.emitted = true;
                            // The first value ends the timeout; an idle timeout is
                            // armed when the run is next found pending.
                            *deadline_ms = None;
                            *sleep = None;
                            return Poll::Ready(Some(Ok(value)));
                        }
                        None => RunEnd::Returned(Ok(())),
                        Some(Step::Ran(Ok(Err(error)))) => RunEnd::Returned(Err(error)),
                        Some(Step::Ran(Err(message))) => RunEnd::Panicked(message),
                    };
                    let timeout_detail = matches!(ended, RunEnd::TimedOut).then(|| {
                        timeout_detail(
                            *this.emitted,
                            *limit_ms,
                            this.options.timeout_ms.is_some(),
                            *this.idle_timeout_ms,
                        )
                    });
                    // Drops the run stream and its timer now, before any fallback.
                    let PhaseOwned::Running {
                        limit_ms, fallback, ..
                    } = this.phase.as_mut().project_replace(Phase::Done)
                    else {
                        unreachable!("matched Running above")
                    };
                    rec.run_ended(now);
                    release_permits(state, this.holds_permit, &mut false);
                    match decide(state, rec, &*this.classifier, ended, Some(limit_ms), now) {
                        Decision::Value(()) => {
                            return finish(state, rec, this.result, now, Ok(()));
                        }
                        Decision::Error(err) => {
                            return finish(state, rec, this.result, now, Err(err));
                        }
                        Decision::Fallback(err) => match timeout_detail {
                            Some(detail) => (err.with_detail(detail), fallback),
                            None => (err, fallback),
                        },
                    }
                }
                PhaseProj::Fallback { stream, .. } => {
                    let end = match caught(|| stream.poll_next(cx)) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(Some(Ok(value)))) => {
                            rec.event(state, EventType::FallbackEmit);
                            return Poll::Ready(Some(Ok(value)));
                        }
                        Poll::Ready(Ok(None)) => FallbackEnd::Value(()),
                        Poll::Ready(Ok(Some(Err(error)))) => FallbackEnd::Failed(error.into()),
                        Poll::Ready(Err(message)) => FallbackEnd::Panicked(message),
                    };
                    let PhaseOwned::Fallback { error, .. } =
                        this.phase.as_mut().project_replace(Phase::Done)
                    else {
                        unreachable!("matched Fallback above")
                    };
                    release_permits(state, &mut None, this.holds_fallback_permit);
                    let response = fallback_done(state, rec, error, end);
                    return finish(state, rec, this.result, state.env.clock.now_ms(), response);
                }
                PhaseProj::Done => return Poll::Ready(None),
            };

            let present = fallback.is_present();
            match start_fallback(state, rec, error, present, |error| fallback.call(error)) {
                FallbackStart::Started(stream, error) => {
                    *this.holds_fallback_permit = true;
                    this.phase.set(Phase::Fallback { stream, error });
                }
                FallbackStart::Ended(response) => {
                    let now = state.env.clock.now_ms();
                    return finish(state, rec, this.result, now, response);
                }
            }
        }
    }
}

/// Which timeout passed, for the error: the idle timeout after a value, else the first
/// value's (the call's own, or the property's).
fn timeout_detail(emitted: bool, first_ms: u64, per_call: bool, idle_ms: Option<u64>) -> Detail {
    match idle_ms {
        Some(idle_ms) if emitted => Detail::IdleTimeoutMs(idle_ms),
        _ if per_call => Detail::CallTimeoutMs(first_ms),
        _ => Detail::TimeoutMs(first_ms),
    }
}

/// An idle timeout of 0 ms could never be met: refused, as a per-call timeout of 0 ms.
fn check_idle_timeout<E>(
    state: &CommandState,
    idle_ms: Option<u64>,
) -> Result<(), HystrixError<E>> {
    if idle_ms == Some(0) {
        return Err(HystrixError::misuse(
            state.key.clone(),
            "was given an idle timeout of 0 ms; use at least 1 ms, or none",
        ));
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// observe(): the hot stream

/// What an `observe()`d execution shares with its subscriber.
struct Hot<T, E> {
    feed: Feed<Result<T, HystrixError<E>>>,
    result: Mutex<Option<ExecutionResult>>,
    /// `cancel()` was called (a cancellation is then the caller's, not the executor's).
    cancelled_by_caller: AtomicBool,
}

/// An execution stream that owns its command state, pinned on the heap (for `observe()`).
type OwnedStream<K, S, FB, FS, T, E> = Pin<Box<ExecutionStream<'static, K, S, FB, FS, T, E>>>;

/// Drives an `observe()`d execution into its [`Hot`] buffer; if dropped before the end
/// (cancelled, or dropped by an executor shutting down), stops the execution (CANCELLED) and
/// ends the buffer with a [`FailureType::Cancelled`] error: nothing started is lost.
struct HotPump<K, S, FB, FS, T, E> {
    stream: OwnedStream<K, S, FB, FS, T, E>,
    hot: Arc<Hot<T, E>>,
    key: CommandKey,
}

impl<K, S, FB, FS, T, E> HotPump<K, S, FB, FS, T, E>
where
    ExecutionStream<'static, K, S, FB, FS, T, E>: Stream<Item = Result<T, HystrixError<E>>>,
{
    /// Moves the items that are ready to the buffer; after [`STREAM_BUFFER_CAPACITY`] of them
    /// it returns to the executor (and is polled again at once), so a run that is always ready
    /// neither holds an executor thread forever nor escapes `cancel()`.
    fn poll_pump(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        for _ in 0..STREAM_BUFFER_CAPACITY {
            match self.stream.as_mut().poll_next(cx) {
                Poll::Ready(Some(item)) => self.hot.feed.push(item),
                Poll::Ready(None) => {
                    *self.hot.result.lock() = self.stream.execution_result();
                    self.hot.feed.close(None);
                    return Poll::Ready(());
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl<K, S, FB, FS, T, E> Drop for HotPump<K, S, FB, FS, T, E> {
    fn drop(&mut self) {
        if self.hot.feed.is_closed() {
            return;
        }
        let recorded = self.stream.as_mut().stop();
        let reason = if self.hot.cancelled_by_caller.load(Ordering::Acquire) {
            "was cancelled"
        } else {
            "was cancelled: the registry's executor stopped before it ended (the registry was \
             shut down, or the runtime given as its executor is gone)"
        };
        *self.hot.result.lock() = recorded;
        let error = HystrixError::new(FailureType::Cancelled, self.key.clone(), Cause::None)
            .with_detail(Detail::Message(reason.into()));
        self.hot.feed.close(Some(Err(error)));
    }
}

/// The hot stream of a stream execution: what [`StreamExecution::observe`] returns (Hystrix's
/// `observe()` of a `HystrixObservableCommand`). The execution started when it was made and
/// runs on the registry's executor; this stream yields its buffered items in order: the run's
/// values, then the fallback's values or one final `Err`, then ends.
///
/// Dropping it detaches, like a `JoinHandle`: the execution goes on and is counted, its items
/// are discarded. [`cancel`](ObservedStream::cancel) stops it.
#[must_use = "dropping the stream detaches it; the execution goes on without anyone to answer"]
pub struct ObservedStream<T, E> {
    hot: Arc<Hot<T, E>>,
    task: Option<tokio::task::AbortHandle>,
}

impl<T, E> fmt::Debug for ObservedStream<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObservedStream")
            .field("ended", &self.hot.feed.is_closed())
            .field("result", &self.execution_result())
            .finish_non_exhaustive()
    }
}

impl<T, E> ObservedStream<T, E>
where
    T: Send + 'static,
    E: Send + 'static,
{
    /// Takes the execution's first steps on this thread (inside the executor's runtime, so
    /// what the run registers belongs to the runtime that goes on driving it); what is left
    /// runs on the registry's executor.
    fn start<K, S, FB, FS>(
        state: &Arc<CommandState>,
        stream: ExecutionStream<'static, K, S, FB, FS, T, E>,
    ) -> Self
    where
        ExecutionStream<'static, K, S, FB, FS, T, E>:
            Stream<Item = Result<T, HystrixError<E>>> + Send + 'static,
    {
        let hot = Arc::new(Hot {
            feed: Feed::new(),
            result: Mutex::new(None),
            cancelled_by_caller: AtomicBool::new(false),
        });
        let mut pump = HotPump {
            stream: Box::pin(stream),
            hot: Arc::clone(&hot),
            key: state.key.clone(),
        };
        let executor = state.env.executor();
        let entered = executor.as_ref().map(tokio::runtime::Handle::enter);
        let first = pump.poll_pump(&mut Context::from_waker(Waker::noop()));
        drop(entered);
        let task = match first {
            Poll::Ready(()) => None,
            Poll::Pending => {
                let in_flight = state.env.eager_started();
                // The caller's request context and span go on with the execution.
                let carried = Carried::capture(RequestContext::current_if_any().as_ref());
                let task = carried.scope(async move {
                    std::future::poll_fn(|cx| pump.poll_pump(cx)).await;
                    drop(pump);
                    drop(in_flight);
                });
                // Without an executor the task is dropped here: the pump records CANCELLED.
                executor.map(|handle| handle.spawn(task).abort_handle())
            }
        };
        ObservedStream { hot, task }
    }
}

impl<T, E> ObservedStream<T, E> {
    /// Cancels the execution if it has not ended (an unsubscribe in Hystrix): its run or
    /// fallback stream is dropped, which records CANCELLED and frees its permits and pool
    /// slot; after the items already buffered, the stream yields one
    /// [`FailureType::Cancelled`] error and ends. Returns whether there was anything to cancel.
    pub fn cancel(&self) -> bool {
        match &self.task {
            Some(task) if !self.hot.feed.is_closed() => {
                self.hot.cancelled_by_caller.store(true, Ordering::Release);
                task.abort();
                true
            }
            _ => false,
        }
    }

    /// The events and times of the execution (e.g. `[EMITx2, FAILURE, FALLBACK_EMITx2,
    /// FALLBACK_SUCCESS]`), once it has ended (items may still be buffered); `None` before.
    pub fn execution_result(&self) -> Option<ExecutionResult> {
        *self.hot.result.lock()
    }
}

impl<T, E> Stream for ObservedStream<T, E> {
    type Item = Result<T, HystrixError<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.hot.feed.poll_next(cx)
    }
}

impl<T, E> Drop for ObservedStream<T, E> {
    fn drop(&mut self) {
        // Detached: the execution goes on, nobody reads its items.
        self.hot.feed.discard();
    }
}
