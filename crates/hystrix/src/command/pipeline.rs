//! The execution pipeline, in one place and in order:
//!
//! 1. the circuit breaker allows the execution, or it is SHORT_CIRCUITED;
//! 2. the deadline is fixed (start + timeout), so time waiting in a pool queue counts;
//!    with `execution.throttle.enabled`, client-side adaptive throttling may refuse it
//!    (THROTTLED), before it takes a permit or a place (see [`throttle`](crate::throttle));
//! 3. isolation admits it: an execution permit (SEMAPHORE) or a pool slot (THREAD), or it is
//!    SEMAPHORE_REJECTED / THREAD_POOL_REJECTED;
//! 4. the run executes, raced against the deadline, panics caught;
//! 5. its end is decided: SUCCESS, FAILURE, TIMEOUT, BAD_REQUEST or IGNORED (classifier);
//! 6. failures, timeouts, short-circuits and rejections go to the fallback, under its own
//!    semaphore: FALLBACK_SUCCESS, _FAILURE, _REJECTION or _MISSING;
//! 7. metrics and the event notifier see the execution exactly once.
//!
//! A blocking run under SEMAPHORE goes through [`run_blocking`], top to bottom on the caller's
//! thread. Every other execution is the [`ExecuteAsyncOutcome`](crate::command::ExecuteAsyncOutcome)
//! future, which takes the same steps one poll at a time (driven by [`block_on`] for a blocking
//! `execute()` under THREAD). Both share every step below but the race itself.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use tokio_util::sync::CancellationToken;

use crate::circuit::journal::JournalEntry;
use crate::circuit::{
    Added, Admission, BreakerEventKind, CallOutcome, FailureKind, KeyedBreaker, Mark, Site,
    SlowTrack, Status, Ticket, Tracked, Window,
};
use crate::clock::{Clock, Sleep, TimerId};
use crate::command::execution::BlockingFallback;
use crate::command::run::{BlockingFn, CancelLink, RunFn};
use crate::command::{Class, Classify, ExecutionResult, Outcome};
use crate::config::{CommandProperties, HotSnapshot, IsolationStrategy};
use crate::context::{RequestContext, RequestLogEntry};
use crate::error::{BoxError, Cause, Detail, FailureType, FallbackFailure, HystrixError};
use crate::event::{EventCounts, EventType};
use crate::isolation::adaptive::LimitStart;
use crate::isolation::priority::{Held, Priority};
use crate::isolation::thread_pool::Rejection;
use crate::registry::CommandState;
use crate::retry::{Again, RetryAnswer};

/// Per-call options of an [`Execution`](crate::Execution). The rare owned strings are boxed,
/// so a call without them moves and drops one pointer for them.
#[derive(Debug, Default, Clone)]
pub(crate) struct CallOptions {
    /// Overrides `execution.isolation.thread.timeoutInMilliseconds` for this call (set with
    /// [`with_timeout_ms`](CallOptions::with_timeout_ms)).
    pub(crate) timeout_ms: Option<u64>,
    /// Any option is set: the execution checks them (one branch when none is).
    special: bool,
    /// The call's class under pressure (NORMAL unless set).
    priority: Priority,
    /// The keyed breaker this call goes through (the command's own when `None`).
    breaker_key: Option<Arc<str>>,
    extras: Option<Box<CallExtras>>,
}

#[derive(Debug, Default, Clone)]
struct CallExtras {
    /// What to journal if this call is short-circuited.
    journal: Option<String>,
    /// The number of requests a collapser batched into this call (COLLAPSED × n).
    collapsed: u32,
    /// The handle of an eager execution, linked to its queued pool task.
    cancel_link: Option<Arc<CancelLink>>,
    /// `no_retry()`: one attempt, whatever `retry.maxAttempts` says.
    no_retry: bool,
}

impl CallOptions {
    fn extras_mut(&mut self) -> &mut CallExtras {
        self.special = true;
        self.extras.get_or_insert_with(Box::default)
    }

    /// Options with this per-call timeout.
    pub(crate) fn with_timeout_ms(mut self, ms: u64) -> Self {
        self.special = true;
        self.timeout_ms = Some(ms);
        self
    }

    /// Options of a call of this class.
    pub(crate) fn with_priority(mut self, priority: Priority) -> Self {
        self.special |= priority != Priority::Normal;
        self.priority = priority;
        self
    }

    /// Options through this keyed breaker (if any).
    pub(crate) fn with_breaker_key(mut self, key: Option<Arc<str>>) -> Self {
        self.special |= key.is_some();
        self.breaker_key = key;
        self
    }

    /// Options of a collapser's batch of `requests` requests.
    pub(crate) fn with_collapsed(mut self, requests: u32) -> Self {
        self.extras_mut().collapsed = requests;
        self
    }

    /// Options whose queued pool task `link` can withdraw (an eager execution's handle).
    pub(crate) fn with_cancel_link(mut self, link: Arc<CancelLink>) -> Self {
        self.extras_mut().cancel_link = Some(link);
        self
    }

    /// Options making one attempt only, whatever `retry.maxAttempts` says.
    pub(crate) fn with_no_retry(mut self) -> Self {
        self.extras_mut().no_retry = true;
        self
    }

    /// Whether the call asked for one attempt only.
    pub(crate) fn no_retry(&self) -> bool {
        self.extras.as_ref().is_some_and(|extras| extras.no_retry)
    }

    /// The link of an eager execution's handle to its queued pool task, if any.
    pub(crate) fn cancel_link(&self) -> Option<&Arc<CancelLink>> {
        self.extras.as_ref()?.cancel_link.as_ref()
    }

    /// Options journalling this description if short-circuited.
    pub(crate) fn with_journal(mut self, description: String) -> Self {
        self.extras_mut().journal = Some(description);
        self
    }

    #[inline]
    fn breaker_key(&self) -> Option<&Arc<str>> {
        self.breaker_key.as_ref()
    }

    fn journal(&self) -> Option<&str> {
        self.extras.as_ref()?.journal.as_deref()
    }
}

// ------------------------------------------------------------------------------------------------
// The open breaker's quick refusal

/// Whether an open breaker refuses this execution on the quick path, the cheapest there is
/// (the one a service hammers during an outage: no span, no recorder, no trip cause copied):
/// `Some` with the time and why, then answer it with [`refused`]. Taken only when it decides
/// exactly what the full path would, and nothing watches executions one by one: no per-call
/// options, not dry-run, no event notifier or execution hook, no `tracing` subscriber, no
/// request log to write. A CLOSED breaker's executions pay one load and one branch for it.
#[inline(always)]
pub(crate) fn refusal(
    state: &CommandState,
    props: &HotSnapshot,
    options: &CallOptions,
) -> Option<(u64, crate::circuit::Tripped)> {
    if state.breaker.may_refuse_now(props) {
        refusal_now(state, props, options)
    } else {
        None
    }
}

#[cold]
#[inline(never)]
fn refusal_now(
    state: &CommandState,
    props: &HotSnapshot,
    options: &CallOptions,
) -> Option<(u64, crate::circuit::Tripped)> {
    if options.special || props.dry_run() || state.env.is_observed() {
        return None;
    }
    let now_ms = state.env.clock.now_ms();
    let tripped = state
        .breaker
        .refuses_now(state.properties.hot(), props, now_ms)?;
    if tracing::dispatcher::has_been_set()
        || (RequestContext::any_alive() && props.request_log_enabled())
    {
        return None;
    }
    Some((now_ms, tripped))
}

/// Answers an execution [`refusal`] refused: SHORT_CIRCUITED and the fallback's events
/// counted, the fallback run on this thread as the blocking path does.
#[cold]
#[inline(never)]
pub(crate) fn refused<T, E, FB: BlockingFallback<T, E>>(
    state: &CommandState,
    now_ms: u64,
    isolation: IsolationStrategy,
    tripped: crate::circuit::Tripped,
    fallback: FB,
) -> Outcome<T, E> {
    let mut counts = Unwatched::default();
    counts.events.add(EventType::ShortCircuited);
    let err = HystrixError::short_circuited(state.key.clone(), tripped);
    let ran_fallback = fallback.is_present();
    let response = fallback_blocking(state, &mut counts, err, fallback);
    // A fallback takes time: the execution ends after it.
    let end_ms = if ran_fallback {
        state.env.clock.now_ms()
    } else {
        now_ms
    };
    let result = ExecutionResult {
        events: counts.events,
        start_ms: now_ms,
        execution_time_ms: None,
        total_time_ms: end_ms.saturating_sub(now_ms),
        isolation,
        executed_in_thread: false,
    };
    // No latency: a refused execution has none (see `CommandCounters::record`).
    state.counters.record(
        end_ms,
        &result,
        &result.events,
        counts.fallback_disabled,
        None,
        true,
    );
    Outcome { response, result }
}

/// What the fallback step tells the execution it belongs to: a [`Recorder`], or the quick
/// refusal's bare counts ([`Unwatched`]).
pub(crate) trait FallbackSteps {
    /// `event` happened (counted in the execution; told to whoever watches).
    fn event(&mut self, state: &CommandState, event: EventType);
    /// `fallback.enabled` was false when a fallback was needed.
    fn fallback_disabled(&mut self);
    /// The fallback starts (its permit taken).
    fn fallback_started(&self, state: &CommandState);
}

impl FallbackSteps for Recorder {
    #[inline]
    fn event(&mut self, state: &CommandState, event: EventType) {
        Recorder::event(self, state, event);
    }

    fn fallback_disabled(&mut self) {
        self.fallback_disabled = true;
    }

    #[inline]
    fn fallback_started(&self, state: &CommandState) {
        Recorder::fallback_started(self, state);
    }
}

/// The events of an execution nothing watches one by one (see [`refusal`]).
#[derive(Default)]
struct Unwatched {
    events: EventCounts,
    fallback_disabled: bool,
}

impl FallbackSteps for Unwatched {
    #[inline]
    fn event(&mut self, _state: &CommandState, event: EventType) {
        self.events.add(event);
    }

    fn fallback_disabled(&mut self) {
        self.fallback_disabled = true;
    }

    #[inline]
    fn fallback_started(&self, _state: &CommandState) {}
}

// ------------------------------------------------------------------------------------------------
// The blocking fast path

/// Runs a blocking execution under SEMAPHORE isolation on the calling thread; `props` is the
/// hot snapshot read to choose the isolation. A retryable run waits out its retry delays on
/// this thread (parked on the registry's clock).
#[inline]
pub(crate) fn run_blocking<C, R, FB>(
    state: &CommandState,
    props: HotSnapshot,
    classifier: &C,
    run: R,
    fallback: FB,
    options: &CallOptions,
) -> Outcome<<R as BlockingFn>::Output, <R as BlockingFn>::Error>
where
    R: BlockingFn + RunFn<Output = <R as BlockingFn>::Output, Error = <R as BlockingFn>::Error>,
    <R as RunFn>::Again: Again<
        Run: BlockingFn<Output = <R as BlockingFn>::Output, Error = <R as BlockingFn>::Error>,
    >,
    FB: BlockingFallback<<R as BlockingFn>::Output, <R as BlockingFn>::Error>,
    C: Classify<<R as BlockingFn>::Error>,
{
    // Without a `tracing` subscriber there is no span to hold (and none to drop).
    if tracing::dispatcher::has_been_set() {
        return run_blocking_traced(state, props, classifier, run, fallback, options);
    }
    run_blocking_in(
        Recorder::idle(),
        state,
        props,
        classifier,
        run,
        fallback,
        options,
    )
}

/// [`run_blocking`] inside the execution's span.
#[cold]
#[inline(never)]
fn run_blocking_traced<C, R, FB>(
    state: &CommandState,
    props: HotSnapshot,
    classifier: &C,
    run: R,
    fallback: FB,
    options: &CallOptions,
) -> Outcome<<R as BlockingFn>::Output, <R as BlockingFn>::Error>
where
    R: BlockingFn + RunFn<Output = <R as BlockingFn>::Output, Error = <R as BlockingFn>::Error>,
    <R as RunFn>::Again: Again<
        Run: BlockingFn<Output = <R as BlockingFn>::Output, Error = <R as BlockingFn>::Error>,
    >,
    FB: BlockingFallback<<R as BlockingFn>::Output, <R as BlockingFn>::Error>,
    C: Classify<<R as BlockingFn>::Error>,
{
    let mut rec = Recorder::idle();
    let span = rec.open_span(state);
    let _entered = span.as_ref().map(tracing::Span::enter);
    run_blocking_in(rec, state, props, classifier, run, fallback, options)
}

/// [`run_blocking`]'s steps, with the recorder (and span, if any) it began with.
#[inline(always)]
fn run_blocking_in<C, R, FB>(
    mut rec: Recorder,
    state: &CommandState,
    props: HotSnapshot,
    classifier: &C,
    mut run: R,
    fallback: FB,
    options: &CallOptions,
) -> Outcome<<R as BlockingFn>::Output, <R as BlockingFn>::Error>
where
    R: BlockingFn + RunFn<Output = <R as BlockingFn>::Output, Error = <R as BlockingFn>::Error>,
    <R as RunFn>::Again: Again<
        Run: BlockingFn<Output = <R as BlockingFn>::Output, Error = <R as BlockingFn>::Error>,
    >,
    FB: BlockingFallback<<R as BlockingFn>::Output, <R as BlockingFn>::Error>,
    C: Classify<<R as BlockingFn>::Error>,
{
    rec.begin(state, IsolationStrategy::Semaphore);
    if let Err(err) = check_options(state, &mut rec, options) {
        return rec.finish_now(state, Err(err));
    }
    let mut again = run.take_again();
    if !<R::Again as Again>::RETRIES {
        if props.hedging() {
            warn_if_hedging_ignored(state);
        }
        let err = match admit_blocking(state, &props, &mut rec, options) {
            Err(err) => err,
            Ok(permit) => {
                match blocking_attempt(state, props, &mut rec, classifier, run, options, permit) {
                    (end, Decision::Value(value)) => return rec.finish(state, end, Ok(value)),
                    (end, Decision::Error(err)) => return rec.finish(state, end, Err(err)),
                    (_, Decision::Fallback(err)) => {
                        warn_if_retry_ignored(state);
                        err
                    }
                }
            }
        };
        let response = fallback_blocking(state, &mut rec, err, fallback);
        return rec.finish_now(state, response);
    }
    // The attempt loop: each attempt in its own span (when traced), the delays waited out on
    // this thread.
    begin_attempts(state, &props, &mut rec, options, false);
    let attempt_span = rec.attempt_span();
    let entered = attempt_span.as_ref().map(tracing::Span::enter);
    let mut error = match admit_blocking(state, &props, &mut rec, options) {
        Err(err) => err,
        Ok(permit) => {
            match blocking_attempt(state, props, &mut rec, classifier, run, options, permit) {
                (end, Decision::Value(value)) => return rec.finish(state, end, Ok(value)),
                (end, Decision::Error(mut err)) => {
                    err.set_attempts(rec.attempts());
                    return rec.finish(state, end, Err(err));
                }
                (_, Decision::Fallback(err)) => err,
            }
        }
    };
    drop(entered);
    while let Some(at_ms) = plan_retry(state, &mut rec, classifier, &error) {
        block_on(Sleep::until(Arc::clone(&state.env.clock), at_ms));
        let Some(next) = again.next() else {
            rec.end_attempts();
            break;
        };
        rec.next_attempt(state.env.clock.now_ms());
        let props = state.properties.hot().load();
        let attempt_span = rec.attempt_span();
        let _entered = attempt_span.as_ref().map(tracing::Span::enter);
        error = match admit_blocking(state, &props, &mut rec, options) {
            Err(err) => err,
            Ok(permit) => {
                match blocking_attempt(state, props, &mut rec, classifier, next, options, permit) {
                    (end, Decision::Value(value)) => return rec.finish(state, end, Ok(value)),
                    (end, Decision::Error(mut err)) => {
                        err.set_attempts(rec.attempts());
                        return rec.finish(state, end, Err(err));
                    }
                    (_, Decision::Fallback(err)) => err,
                }
            }
        };
    }
    error.set_attempts(rec.attempts());
    let response = fallback_blocking(state, &mut rec, error, fallback);
    rec.finish_now(state, response)
}

/// Steps 1 and 3 of an attempt of a blocking execution on the calling thread: the breaker,
/// throttling, then an execution permit; or why it was refused.
#[inline(always)]
fn admit_blocking<'s, E>(
    state: &'s CommandState,
    props: &HotSnapshot,
    rec: &mut Recorder,
    options: &CallOptions,
) -> Result<ExecutionPermit<'s>, HystrixError<E>> {
    check_breaker(state, props, rec, options)?;
    check_throttle(state, props, rec)?;
    if !try_permit(state, props, rec) && !wait_blocking(state, props, rec, options) {
        return Err(permit_refused(state, props, rec));
    }
    state.counters.started(rec.attempt_ms, state.running());
    Ok(ExecutionPermit {
        state,
        held: rec.held,
    })
}

/// A blocking attempt's execution permit: given back (its class counted out, a waiter woken)
/// when dropped.
#[must_use = "dropping the permit gives it back at once"]
struct ExecutionPermit<'s> {
    state: &'s CommandState,
    held: Held,
}

impl Drop for ExecutionPermit<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.state.release_permit(self.held);
    }
}

/// A blocking execution's first attempt beyond the adaptive limit waits for a place on this
/// thread, if `execution.isolation.adaptive.maxWaitInMilliseconds` allows: whether it got one.
#[cold]
fn wait_blocking(
    state: &CommandState,
    props: &HotSnapshot,
    rec: &mut Recorder,
    options: &CallOptions,
) -> bool {
    let Some(until_ms) = limit_wait_until(state, props, rec, options) else {
        return false;
    };
    match block_on(state.limiter.wait_for_permit(state, rec.priority, until_ms)) {
        Some((in_flight, held)) => {
            rec.limit_start = Some(LimitStart::new(state.env.clock.now_us(), in_flight));
            rec.held = held;
            true
        }
        None => false,
    }
}

/// Until when (ms on the registry's clock) an attempt refused by the adaptive limit may wait for
/// a place: only an execution's first attempt, up to
/// `execution.isolation.adaptive.maxWaitInMilliseconds` and never past its timeout; `None`:
/// it is refused at once.
#[cold]
pub(crate) fn limit_wait_until(
    state: &CommandState,
    props: &HotSnapshot,
    rec: &Recorder,
    options: &CallOptions,
) -> Option<u64> {
    if !props.adaptive() || rec.attempts() > 1 {
        return None;
    }
    let max_wait_ms = state.properties.hot().adaptive_max_wait_ms();
    if max_wait_ms == 0 {
        return None;
    }
    let until_ms = rec.attempt_ms.saturating_add(max_wait_ms);
    Some(match attempt_deadline(props, rec, options).1 {
        Some(deadline_ms) => until_ms.min(deadline_ms),
        None => until_ms,
    })
}

/// Step 3 under a semaphore (SEMAPHORE isolation, or any with adaptive limits): takes an
/// execution permit if one is free under `props.semaphore_max` (give it back with
/// `CommandState::release_permit(rec.held)`); with adaptive limits, notes the start for the
/// attempt's sample.
#[inline(always)]
pub(crate) fn try_permit(state: &CommandState, props: &HotSnapshot, rec: &mut Recorder) -> bool {
    match try_permit_into(state, props, rec.priority, &mut rec.limit_start) {
        Some(held) => {
            rec.held = held;
            true
        }
        None => false,
    }
}

/// [`try_permit`] for an attempt whose start is kept in `limit_start` (a hedge's own): how it
/// holds its permit, or `None` when refused.
#[inline(always)]
pub(crate) fn try_permit_into(
    state: &CommandState,
    props: &HotSnapshot,
    priority: Priority,
    limit_start: &mut Option<LimitStart>,
) -> Option<Held> {
    if !props.admission_extras() {
        return state
            .execution_semaphore
            .try_take(props.semaphore_max)
            .then_some(Held::Plain);
    }
    admit_with_extras(state, props, priority, limit_start)
}

/// [`try_permit_into`] with adaptive limits or priority reserves.
#[inline(never)]
fn admit_with_extras(
    state: &CommandState,
    props: &HotSnapshot,
    priority: Priority,
    limit_start: &mut Option<LimitStart>,
) -> Option<Held> {
    let (in_flight, held) = state.take_permit(props, priority)?;
    if props.adaptive() {
        *limit_start = Some(LimitStart::new(state.env.clock.now_us(), in_flight));
    }
    Some(held)
}

/// Step 3 refused by the semaphore: SEMAPHORE_REJECTED, or LIMIT_REJECTED when the adaptive
/// limit (not `maxConcurrentRequests`) was the bound.
#[cold]
pub(crate) fn permit_refused<E>(
    state: &CommandState,
    props: &HotSnapshot,
    rec: &mut Recorder,
) -> HystrixError<E> {
    if props.prioritized() {
        return priority_refused(state, props, rec);
    }
    permit_refused_as(state, props, rec)
}

/// [`permit_refused`] while priority reserves are set: counted in the class, and told apart
/// when the bound had room but the higher classes' reserves held it.
#[cold]
#[inline(never)]
fn priority_refused<E>(
    state: &CommandState,
    props: &HotSnapshot,
    rec: &mut Recorder,
) -> HystrixError<E> {
    state.priorities.count(rec.priority, false);
    let in_flight = state.execution_semaphore.in_use();
    if rec.priority != Priority::Critical && in_flight < props.semaphore_max {
        // The bound had room, but it is reserved for the classes above: a limit's refusal
        // (LIMIT_REJECTED), not a health error, so that refusing the lower classes never
        // opens the breaker on the class the reserve is for.
        limit_rejected(state, rec, props.semaphore_max).with_detail(Detail::PriorityReserve {
            priority: rec.priority,
            bound: props.semaphore_max,
            in_flight,
        })
    } else {
        permit_refused_as(state, props, rec)
    }
}

/// SEMAPHORE_REJECTED, or LIMIT_REJECTED when the adaptive limit is below
/// `maxConcurrentRequests`.
fn permit_refused_as<E>(
    state: &CommandState,
    props: &HotSnapshot,
    rec: &mut Recorder,
) -> HystrixError<E> {
    if props.adaptive() {
        let limit = state.properties.hot().adaptive_limit();
        if limit
            < state
                .properties
                .load()
                .execution_isolation_semaphore_max_concurrent_requests
        {
            return limit_rejected(state, rec, limit);
        }
    }
    semaphore_rejected(state, rec, props.semaphore_max)
}

/// Step 3: the adaptive limit refused the execution. Not a health error (the breaker's ticket
/// is given back) and not a sample for the limit.
fn limit_rejected<E>(state: &CommandState, rec: &mut Recorder, limit: u32) -> HystrixError<E> {
    rec.event(state, EventType::LimitRejected);
    rec.settle_release(state);
    HystrixError::new(FailureType::RejectedByLimit, state.key.clone(), Cause::None)
        .with_detail(Detail::AdaptiveLimit(limit))
}

/// The rest of an admitted attempt of a blocking execution on the calling thread, holding
/// `permit`: the run raced against the attempt's deadline, its end decided: when it ended,
/// and what comes next.
#[inline(always)]
fn blocking_attempt<C, R>(
    state: &CommandState,
    props: HotSnapshot,
    rec: &mut Recorder,
    classifier: &C,
    run: R,
    options: &CallOptions,
    permit: ExecutionPermit<'_>,
) -> (u64, Decision<R::Output, R::Error>)
where
    R: BlockingFn,
    C: Classify<R::Error>,
{
    let (timeout_ms, deadline) = attempt_deadline(&props, rec, options);

    let clock = &*state.env.clock;
    let token = R::CANCELLABLE.then(CancellationToken::new);
    let timer = match (&token, deadline) {
        (Some(token), Some(deadline)) if props.interrupt_on_timeout() => {
            let token = token.clone();
            Some(TimerGuard {
                clock,
                id: clock.schedule(deadline, Box::new(move || token.cancel())),
            })
        }
        _ => None,
    };
    rec.run_started(state);
    let chaos = crate::chaos::draw(state, &props, deadline);
    let returned = match chaos {
        None => Some(catch_unwind(AssertUnwindSafe(|| run.call(token.clone())))),
        Some(injection) => chaos_blocking(state, rec, injection, deadline, || {
            catch_unwind(AssertUnwindSafe(|| run.call(token.clone())))
        }),
    };
    let end = clock.now_ms();
    drop(timer);
    rec.run_ended(end);
    drop(permit);

    // Past the deadline the outcome is TIMEOUT whatever the run returned. Only
    // the deadline timer cancels the token, so a cancelled token means the deadline passed even
    // if a coarse clock does not show it yet.
    let past_deadline = deadline.is_some_and(|deadline| end >= deadline)
        || token.as_ref().is_some_and(CancellationToken::is_cancelled);
    let ended = match returned {
        _ if past_deadline => RunEnd::TimedOut,
        None => RunEnd::Injected,
        Some(Ok(result)) => RunEnd::Returned(result),
        Some(Err(panic)) => RunEnd::Panicked(panic_message(panic)),
    };
    (end, decide(state, rec, classifier, ended, timeout_ms, end))
}

/// An attempt of a blocking execution on the calling thread with chaos `injection`
/// (CHAOS_INJECTED): the injected wait on this thread, then `run` (its result), or `None`
/// for an injected fault. A wait that reached the deadline returns `None` too: the caller
/// sees the deadline passed.
#[cold]
#[inline(never)]
fn chaos_blocking<T>(
    state: &CommandState,
    rec: &mut Recorder,
    injection: crate::chaos::Injection,
    deadline_ms: Option<u64>,
    run: impl FnOnce() -> T,
) -> Option<T> {
    rec.count_chaos_injected();
    match injection.wait_blocking(state, deadline_ms) {
        crate::chaos::Then::Run => Some(run()),
        crate::chaos::Then::Fault | crate::chaos::Then::TimedOut => None,
    }
}

// ------------------------------------------------------------------------------------------------
// The attempt loop (retry, see the `retry` module)

/// Begins the attempts of a retryable run: with `retry.maxAttempts` over 1 (and no
/// `no_retry()`), fixes the execution deadline; with `hedging.maxAttempts` over 1 and a
/// `hedgeable` run (one that can run beside another), turns hedging on; with either, counts
/// the execution in the retry budget.
#[cold]
pub(crate) fn begin_attempts(
    state: &CommandState,
    props: &HotSnapshot,
    rec: &mut Recorder,
    options: &CallOptions,
    hedgeable: bool,
) {
    let hot = state.properties.hot();
    let max_attempts = hot.retry_max_attempts();
    let mut hedge_max = hot.hedging_max_attempts();
    if hedge_max > 1 && !hedgeable {
        warn_if_hedging_ignored(state);
        hedge_max = 1;
    }
    if (max_attempts <= 1 && hedge_max <= 1) || options.no_retry() {
        return;
    }
    rec.hedge_max = u8::try_from(hedge_max).unwrap_or(u8::MAX);
    if max_attempts > 1 {
        rec.max_attempts = u8::try_from(max_attempts).unwrap_or(u8::MAX);
        let as_u32 = |ms: u64| u32::try_from(ms).unwrap_or(u32::MAX);
        rec.retry_timeouts_ms = match timeout_ms(props, options) {
            Some(timeout_ms) => (
                as_u32(timeout_ms),
                as_u32(hot.retry_attempt_timeout_ms(timeout_ms)),
            ),
            // No execution timeout: only an attempt timeout set explicitly bounds each attempt.
            None => (0, as_u32(hot.retry_attempt_timeout_set_ms())),
        };
    }
    match state.retry.budget_if_made() {
        Some(budget) => budget.deposit(rec.start_ms),
        None => retry_budget(state, &state.properties.load()).deposit(rec.start_ms),
    }
}

/// The command's retry budget: its own, or the named one of its registry it shares.
pub(crate) fn retry_budget<'s>(
    state: &'s CommandState,
    props: &CommandProperties,
) -> &'s Arc<crate::retry::budget::RetryBudget> {
    state.retry.budget(props, |name, window_ms| {
        state.env.retry_budget(name, window_ms)
    })
}

/// The timeout (ms, for a TIMEOUT's detail) and the absolute deadline of the current attempt:
/// the execution's, or with retries on, the earlier of the execution deadline and the end of
/// the attempt's own timeout.
#[inline]
pub(crate) fn attempt_deadline(
    props: &HotSnapshot,
    rec: &Recorder,
    options: &CallOptions,
) -> (Option<u64>, Option<u64>) {
    attempt_deadline_from(props, rec, options, rec.attempt_ms)
}

/// [`attempt_deadline`] of an attempt that starts at `attempt_ms` (a hedge's, beside the
/// attempt the recorder knows).
#[inline]
pub(crate) fn attempt_deadline_from(
    props: &HotSnapshot,
    rec: &Recorder,
    options: &CallOptions,
    attempt_ms: u64,
) -> (Option<u64>, Option<u64>) {
    let timeout_ms = timeout_ms(props, options);
    match rec.max_attempts {
        2.. => retrying_attempt_deadline(rec, attempt_ms),
        _ => (
            timeout_ms,
            timeout_ms.map(|ms| rec.start_ms.saturating_add(ms)),
        ),
    }
}

#[cold]
fn retrying_attempt_deadline(rec: &Recorder, start_ms: u64) -> (Option<u64>, Option<u64>) {
    let attempt_ms = u64::from(rec.retry_timeouts_ms.1);
    let attempt_deadline = (attempt_ms > 0).then(|| start_ms.saturating_add(attempt_ms));
    let deadline = match (rec.execution_deadline_ms(), attempt_deadline) {
        (Some(execution), Some(attempt)) => execution.min(attempt),
        (Some(deadline), None) | (None, Some(deadline)) => deadline,
        (None, None) => return (None, None),
    };
    (Some(deadline.saturating_sub(start_ms)), Some(deadline))
}

/// The attempt loop's decision after a failed attempt whose error is `error`: `Some(at_ms)`
/// if another attempt follows at that time on the registry's clock (RETRY recorded, the
/// failed attempt counted in the metrics now), `None` to go on to the fallback
/// (RETRY_BUDGET_EXHAUSTED recorded if only the budget refused).
#[cold]
pub(crate) fn plan_retry<C, E>(
    state: &CommandState,
    rec: &mut Recorder,
    classifier: &C,
    error: &HystrixError<E>,
) -> Option<u64>
where
    C: Classify<E> + ?Sized,
{
    let (max_attempts, deadline_ms) = (rec.max_attempts, rec.execution_deadline_ms());
    let last_delay_ms = rec.retry().last_delay_ms;
    // Rounds of the retry loop so far (hedges run beside an attempt, they are not rounds).
    let attempts = rec.attempts();
    let rounds = attempts.saturating_sub(rec.hedges);
    if rounds >= max_attempts {
        return None;
    }
    let props = state.properties.load();
    if u32::from(rounds) >= props.retry_max_attempts {
        return None;
    }
    let retryable = match error.failure_type() {
        FailureType::CommandException | FailureType::Timeout | FailureType::InjectedFault => true,
        FailureType::RejectedSemaphoreExecution
        | FailureType::RejectedThreadExecution
        | FailureType::RejectedByLimit
        | FailureType::Throttled => props.retry_on_rejection,
        _ => false,
    };
    if !retryable {
        return None;
    }
    let answer = retry_answer(state, classifier, error);
    if !answer.is_retryable() {
        return None;
    }
    let min_delay_ms = answer.min_delay().map(crate::config::ceil_millis);
    let now_ms = state.env.clock.now_ms();
    // The breaker says the fault is not transient: abandon at once; unless the error asked
    // for a delay (Retry-After) and the breaker lets a trial through within the deadline, in
    // which case the next attempt waits for both and asks the breaker again.
    let hot = state.properties.hot().load();
    let mut not_before_ms = now_ms.saturating_add(min_delay_ms.unwrap_or(0));
    let breaker = rec.site(state).breaker();
    if !hot.dry_run() && breaker.is_open(&hot) {
        if min_delay_ms.is_none() || hot.force_open() || breaker.status() != Status::Open {
            return None;
        }
        // Trials are admitted strictly after the opening ends.
        let trial_ms = breaker
            .open_until_ms(state.properties.hot().sleep_window_ms())
            .saturating_add(1);
        not_before_ms = not_before_ms.max(trial_ms);
    }
    let retry = u32::from(rounds);
    let delay_ms = crate::retry::backoff_ms(&state.retry, &props, retry, last_delay_ms)
        .max(not_before_ms.saturating_sub(now_ms));
    // No sleeping past the deadline: a delay that leaves no time for the attempt abandons.
    if deadline_ms.is_some_and(|deadline| now_ms.saturating_add(delay_ms) >= deadline) {
        return None;
    }
    let granted = retry_budget(state, &props).try_withdraw(
        now_ms,
        props.retry_budget_percent,
        props.retry_budget_min_per_second,
    );
    if !granted {
        rec.event(state, EventType::RetryBudgetExhausted);
        return None;
    }
    rec.event(state, EventType::Retry);
    rec.count_attempt(state, now_ms);
    rec.attempts = attempts.saturating_add(1);
    rec.retried_mut().last_delay_ms = delay_ms;
    Some(now_ms.saturating_add(delay_ms))
}

/// The classifier's retry answer for `error` (a panicking classifier answers never; an error
/// with no cause of the run's, such as a timeout, may be retried).
pub(crate) fn retry_answer<C, E>(
    state: &CommandState,
    classifier: &C,
    error: &HystrixError<E>,
) -> RetryAnswer
where
    C: Classify<E> + ?Sized,
{
    match error.cause() {
        Some(cause) => match catch_unwind(AssertUnwindSafe(|| classifier.retry(cause))) {
            Ok(answer) => answer,
            Err(panic) => {
                state.classifier_panicked(&panic_message(panic));
                RetryAnswer::never()
            }
        },
        None => RetryAnswer::retry(),
    }
}

/// A run that cannot be retried failed: if its key sets `retry.maxAttempts` over 1, says once
/// per key that the property is ignored.
#[cold]
pub(crate) fn warn_if_retry_ignored(state: &CommandState) {
    if state.properties.hot().retry_max_attempts() > 1
        && !state
            .retry
            .ignored_warned
            .swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tracing::warn!(
            target: "hystrix::command",
            command = %state.key,
            "{}: retry.maxAttempts is over 1 but this run cannot be retried: only runs made by a \
             factory (run_retryable, run_cancellable_retryable, run_async_retryable) are; the \
             property is ignored for it (logged once per command key)",
            state.key
        );
    }
}

/// A run that cannot be hedged (not made by a factory, or blocking under SEMAPHORE isolation)
/// executes on a key that sets `hedging.maxAttempts` over 1: says so once per key.
#[cold]
pub(crate) fn warn_if_hedging_ignored(state: &CommandState) {
    if !state
        .hedging
        .ignored_warned
        .swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tracing::warn!(
            target: "hystrix::command",
            command = %state.key,
            "{}: hedging.maxAttempts is over 1 but this run cannot be hedged: only runs made by \
             a factory (run_retryable, run_cancellable_retryable, run_async_retryable) are, and \
             blocking ones only under THREAD isolation; the property is ignored for it (logged \
             once per command key)",
            state.key
        );
    }
}

fn fallback_blocking<T, E, FB: BlockingFallback<T, E>>(
    state: &CommandState,
    rec: &mut impl FallbackSteps,
    mut err: HystrixError<E>,
    fallback: FB,
) -> Result<T, HystrixError<E>> {
    if !fallback_gate(state, rec, &mut err, fallback.is_present()) {
        return Err(err);
    }
    let end = match catch_unwind(AssertUnwindSafe(|| fallback.call(&err))) {
        Ok(Some(Ok(value))) => FallbackEnd::Value(value),
        Ok(Some(Err(error))) => FallbackEnd::Failed(error),
        Ok(None) => FallbackEnd::Missing,
        Err(panic) => FallbackEnd::Panicked(panic_message(panic)),
    };
    state.fallback_semaphore.give_back();
    fallback_done(state, rec, err, end)
}

/// Cancels a timer when dropped (the run ended before its deadline).
struct TimerGuard<'a> {
    clock: &'a dyn Clock,
    id: TimerId,
}

impl Drop for TimerGuard<'_> {
    fn drop(&mut self) {
        self.clock.cancel(self.id);
    }
}

// ------------------------------------------------------------------------------------------------
// Steps shared by every mode

#[inline(always)]
pub(crate) fn check_options<E>(
    state: &CommandState,
    rec: &mut Recorder,
    options: &CallOptions,
) -> Result<(), HystrixError<E>> {
    if options.special {
        check_special_options(state, rec, options)
    } else {
        Ok(())
    }
}

/// The per-call options of an execution that has some: misuse checks, COLLAPSED.
#[cold]
#[inline(never)]
fn check_special_options<E>(
    state: &CommandState,
    rec: &mut Recorder,
    options: &CallOptions,
) -> Result<(), HystrixError<E>> {
    if let Some(extras) = options.extras.as_deref() {
        mark_collapsed(state, rec, extras);
    }
    rec.priority = options.priority;
    if options.breaker_key().is_some() && state.extras.keyed.is_none() {
        return Err(no_keyed_breakers(state));
    }
    if options.timeout_ms == Some(0) {
        return Err(HystrixError::misuse(
            state.key.clone(),
            "was given a per-call timeout of 0 ms; use at least 1 ms, or turn timeouts off with \
             execution.timeout.enabled=false",
        ));
    }
    Ok(())
}

/// A collapser's batch carries COLLAPSED × its number of requests.
fn mark_collapsed(state: &CommandState, rec: &mut Recorder, extras: &CallExtras) {
    if extras.collapsed > 0 {
        rec.events.add_n(EventType::Collapsed, extras.collapsed);
        if state.env.has_notifier() {
            state.env.notify_event(EventType::Collapsed, &state.key);
        }
    }
}

fn no_keyed_breakers<E>(state: &CommandState) -> HystrixError<E> {
    HystrixError::misuse(
        state.key.clone(),
        "was given a breaker key, but its command has no keyed breakers: its first definition \
         in this registry must use CommandBuilder::breaker_per_key",
    )
}

/// The timeout of this execution in ms, or `None` when `execution.timeout.enabled` is false.
#[inline]
pub(crate) fn timeout_ms(props: &HotSnapshot, options: &CallOptions) -> Option<u64> {
    props
        .timeout_enabled()
        .then(|| options.timeout_ms.unwrap_or(props.timeout_ms))
}

/// Step 1: the breaker (the command's own, or the keyed breaker the call names). Denied in
/// dry-run mode (`circuitBreaker.dryRun`), the execution goes on with WOULD_SHORT_CIRCUIT and
/// tells the breaker nothing; denied otherwise, it is SHORT_CIRCUITED (and journalled, when
/// the command keeps a journal and the call gave a description).
#[inline(always)]
pub(crate) fn check_breaker<E>(
    state: &CommandState,
    props: &HotSnapshot,
    rec: &mut Recorder,
    options: &CallOptions,
) -> Result<(), HystrixError<E>> {
    let admission = match options.breaker_key() {
        None => state
            .breaker
            .attempt(Site::command(state), props, rec.attempt_ms),
        Some(key) => attempt_keyed(state, props, rec, key)?,
    };
    match admission {
        Admission::Allowed(ticket) => {
            rec.ticket = ticket;
            rec.generation = ticket.generation();
            if props.slow_in_flight() && rec.keyed().is_none() {
                track_in_flight(state, rec, ticket);
            }
            Ok(())
        }
        Admission::Denied(cause) => short_circuit(state, props, rec, options, cause),
    }
}

/// Tracks an attempt admitted by the command's own breaker while CLOSED (or while it takes no
/// part) as running, so that it counts as slow once it runs past the slow-call threshold.
#[cold]
fn track_in_flight(state: &CommandState, rec: &mut Recorder, ticket: Ticket) {
    if matches!(ticket, Ticket::Trial(_)) {
        return;
    }
    let site = Site::command(state);
    let Some(in_flight) = site.in_flight() else {
        return;
    };
    let threshold_ms = state.properties.hot().slow_call_ms();
    if let Added::Tracked(tracked, flushed) = in_flight.add(rec.attempt_ms, threshold_ms) {
        rec.slow_track = SlowTrack::Running(tracked);
        state
            .breaker
            .add_slow_in_flight(site, flushed, rec.attempt_ms);
    }
}

/// Takes a tracked attempt out of the attempts running; returns what its start interval was
/// to the window.
#[cold]
fn remove_tracked(state: &CommandState, tracked: Tracked) -> Mark {
    state
        .extras
        .in_flight
        .get()
        .map_or(Mark::Open, |in_flight| in_flight.remove(tracked))
}

/// Step 1 through the keyed breaker of `key`.
#[cold]
fn attempt_keyed<E>(
    state: &CommandState,
    props: &HotSnapshot,
    rec: &mut Recorder,
    key: &str,
) -> Result<Admission, HystrixError<E>> {
    let Some(keyed) = &state.extras.keyed else {
        return Err(no_keyed_breakers(state));
    };
    let now_ms = rec.attempt_ms;
    let keyed = rec.keyed.insert(keyed.get(state, key));
    Ok(keyed
        .breaker
        .attempt(Site::keyed(state, keyed), props, now_ms))
}

/// Step 1, refused: WOULD_SHORT_CIRCUIT in dry-run mode, else SHORT_CIRCUITED (journalled
/// when asked).
#[cold]
fn short_circuit<E>(
    state: &CommandState,
    props: &HotSnapshot,
    rec: &mut Recorder,
    options: &CallOptions,
    cause: crate::circuit::Tripped,
) -> Result<(), HystrixError<E>> {
    if props.dry_run() {
        rec.event(state, EventType::WouldShortCircuit);
        return Ok(());
    }
    rec.event(state, EventType::ShortCircuited);
    // The journal replays when the command's own breaker closes: keyed short-circuits stay out.
    if let (Some(journal), Some(description), None) =
        (&state.extras.journal, options.journal(), rec.keyed())
    {
        journal_short_circuit(state, journal, description);
    }
    Err(HystrixError::short_circuited(state.key.clone(), cause))
}

#[cold]
fn journal_short_circuit(
    state: &CommandState,
    journal: &crate::circuit::journal::Journal,
    description: &str,
) {
    let site = Site::command(state);
    let entry = JournalEntry {
        command_key: state.key.clone(),
        description: description.to_owned(),
        at_epoch_ms: state.env.clock.epoch_ms(),
    };
    if let Some(dropped) = journal.push(entry.clone()) {
        site.emit(BreakerEventKind::JournalDropped(dropped));
    }
    site.emit(BreakerEventKind::Journalled(entry));
}

/// Client-side adaptive throttling, after the breaker and before any permit or place (see
/// [`throttle`](crate::throttle)): with `execution.throttle.enabled` off, one branch on the
/// snapshot.
#[inline(always)]
pub(crate) fn check_throttle<E>(
    state: &CommandState,
    props: &HotSnapshot,
    rec: &mut Recorder,
) -> Result<(), HystrixError<E>> {
    if props.throttle() {
        throttle_attempt(state, rec)
    } else {
        Ok(())
    }
}

/// The throttling draw of an attempt: THROTTLED, not a health error (the breaker's ticket is
/// given back) and not a drop for the adaptive limit; the attempt held no permit yet.
#[inline(never)]
fn throttle_attempt<E>(state: &CommandState, rec: &mut Recorder) -> Result<(), HystrixError<E>> {
    let Err(throttled) = state.throttle.admit(state.properties.hot(), rec.attempt_ms) else {
        return Ok(());
    };
    rec.event(state, EventType::Throttled);
    rec.settle_release(state);
    Err(
        HystrixError::new(FailureType::Throttled, state.key.clone(), Cause::None)
            .with_detail(Detail::Throttled(throttled.0)),
    )
}

/// Step 3, SEMAPHORE: no permit was free.
pub(crate) fn semaphore_rejected<E>(
    state: &CommandState,
    rec: &mut Recorder,
    limit: u32,
) -> HystrixError<E> {
    rec.event(state, EventType::SemaphoreRejected);
    rec.settle_failure(state, FailureKind::SemaphoreRejected, rec.attempt_ms);
    HystrixError::new(
        FailureType::RejectedSemaphoreExecution,
        state.key.clone(),
        Cause::None,
    )
    .with_detail(Detail::SemaphoreLimit(limit))
}

/// Step 3, SEMAPHORE, for a run polled in place: takes an execution permit (give it back with
/// `CommandState::release_permit`) and counts the start for the concurrency maximum, or SEMAPHORE_REJECTED
/// (LIMIT_REJECTED by an adaptive limit).
#[inline]
pub(crate) fn take_permit<E>(
    state: &CommandState,
    props: &HotSnapshot,
    rec: &mut Recorder,
) -> Result<(), HystrixError<E>> {
    if try_permit(state, props, rec) {
        state.counters.started(rec.attempt_ms, state.running());
        Ok(())
    } else {
        Err(permit_refused(state, props, rec))
    }
}

/// Step 3, THREAD: the pool refused the run. As in Hystrix the rejection goes through the error
/// step, so the breaker hears of it.
pub(crate) fn pool_rejected<E>(
    state: &CommandState,
    rec: &mut Recorder,
    rejection: Rejection,
) -> HystrixError<E> {
    rec.event(state, EventType::ThreadPoolRejected);
    rec.settle_failure(state, FailureKind::ThreadPoolRejected, rec.attempt_ms);
    HystrixError::new(
        FailureType::RejectedThreadExecution,
        state.key.clone(),
        Cause::None,
    )
    .with_detail(Detail::PoolRejected {
        pool: state.thread_pool_key.clone(),
        rejection,
    })
}

/// How the run ended, before classification.
#[doc(hidden)]
pub enum RunEnd<T, E> {
    /// The run returned.
    Returned(Result<T, E>),
    /// The run panicked, with this message.
    Panicked(String),
    /// The deadline passed first.
    TimedOut,
    /// Chaos injection replaced the run with a fault (see [`chaos`](crate::chaos)).
    Injected,
    /// Chaos injection changed this attempt (a delay, a hang or a fault), which then ended
    /// so: CHAOS_INJECTED is recorded when its end is decided.
    Chaos(Box<RunEnd<T, E>>),
}

impl<T, E> RunEnd<T, E> {
    /// The end of an attempt that chaos `injected` (or not): marked so.
    pub(crate) fn injected_if(self, injected: bool) -> Self {
        if injected {
            RunEnd::Chaos(Box::new(self))
        } else {
            self
        }
    }

    /// This end, past the deadline: a TIMEOUT, still marked if chaos changed the attempt.
    #[cold]
    pub(crate) fn into_timeout(self) -> Self {
        RunEnd::TimedOut.injected_if(matches!(self, RunEnd::Chaos(_)))
    }
}

/// The end of an attempt chaos changed: CHAOS_INJECTED (the notifier heard of it as the
/// injection began), and how it ended.
#[cold]
#[inline(never)]
fn chaos_injected<T, E>(rec: &mut Recorder, ended: RunEnd<T, E>) -> RunEnd<T, E> {
    rec.count_chaos_injected();
    match ended {
        RunEnd::Chaos(inner) => *inner,
        ended => ended,
    }
}

impl<T, E> From<Result<Result<T, E>, String>> for RunEnd<T, E> {
    fn from(ran: Result<Result<T, E>, String>) -> Self {
        match ran {
            Ok(result) => RunEnd::Returned(result),
            Err(message) => RunEnd::Panicked(message),
        }
    }
}

/// What the pipeline does next.
pub(crate) enum Decision<T, E> {
    /// Return the run's value.
    Value(T),
    /// Return this error without a fallback (bad request, ignored).
    Error(HystrixError<E>),
    /// Try the fallback for this error.
    Fallback(HystrixError<E>),
}

/// Step 5: records the run's end and tells the breaker.
#[inline]
pub(crate) fn decide<T, E, C: Classify<E> + ?Sized>(
    state: &CommandState,
    rec: &mut Recorder,
    classifier: &C,
    ended: RunEnd<T, E>,
    timeout_ms: Option<u64>,
    now_ms: u64,
) -> Decision<T, E> {
    let key = || state.key.clone();
    let ended = match ended {
        RunEnd::Chaos(_) => chaos_injected(rec, ended),
        ended => ended,
    };
    if rec.limit_start.is_some() || state.properties.hot().throttle() {
        end_samples(state, rec, classifier, &ended, now_ms);
    }
    match ended {
        RunEnd::Returned(Ok(value)) => {
            rec.event(state, EventType::Success);
            rec.settle_success(state, now_ms);
            Decision::Value(value)
        }
        RunEnd::Returned(Err(error)) => {
            // A panicking classifier is user code failing: the error counts as a failure.
            let class = match catch_unwind(AssertUnwindSafe(|| classifier.classify(&error))) {
                Ok(class) => class,
                Err(panic) => {
                    state.classifier_panicked(&panic_message(panic));
                    Class::Failure
                }
            };
            let (event, failure_type) = match class {
                Class::Failure | Class::TripNow { .. } => {
                    (EventType::Failure, FailureType::CommandException)
                }
                Class::BadRequest => (EventType::BadRequest, FailureType::BadRequest),
                Class::Ignored => (EventType::Ignored, FailureType::Ignored),
            };
            rec.event(state, event);
            let err = HystrixError::new(failure_type, key(), Cause::Error(error));
            match class {
                Class::Failure => {
                    rec.settle_failure(state, FailureKind::Failure, now_ms);
                    Decision::Fallback(err)
                }
                Class::TripNow { min_open } => {
                    rec.settle_trip_now(state, min_open, now_ms);
                    Decision::Fallback(err)
                }
                Class::BadRequest => {
                    // Says nothing of the dependency's health: a trial gives its slot back.
                    rec.settle_release(state);
                    Decision::Error(err)
                }
                Class::Ignored => {
                    rec.settle_success(state, now_ms);
                    Decision::Error(err)
                }
            }
        }
        RunEnd::Panicked(message) => {
            rec.event(state, EventType::Failure);
            rec.settle_failure(state, FailureKind::Failure, now_ms);
            Decision::Fallback(HystrixError::new(
                FailureType::CommandException,
                key(),
                Cause::Panic(message),
            ))
        }
        // Unwrapped above (a nested mark would count twice; none is made).
        RunEnd::Chaos(inner) => decide(state, rec, classifier, *inner, timeout_ms, now_ms),
        RunEnd::Injected => {
            // As a run's error: a health error, retried, the fallback's to answer.
            rec.event(state, EventType::Failure);
            rec.settle_failure(state, FailureKind::Failure, now_ms);
            Decision::Fallback(HystrixError::new(
                FailureType::InjectedFault,
                key(),
                Cause::None,
            ))
        }
        RunEnd::TimedOut => {
            rec.event(state, EventType::Timeout);
            rec.settle_failure(state, FailureKind::Timeout, now_ms);
            Decision::Fallback(
                HystrixError::new(FailureType::Timeout, key(), Cause::None)
                    .with_detail(Detail::TimeoutMs(timeout_ms.unwrap_or_default())),
            )
        }
    }
}

/// An attempt ended at `now_ms`: if the adaptive limit admitted it, its run time and whether it
/// was a drop (it timed out, or its error says overload) go to the limit; with throttling on,
/// it counts as a request, and as an accept unless its error says overload (a timeout is not
/// a rejection by the backend).
#[inline(never)]
fn end_samples<T, E, C: Classify<E> + ?Sized>(
    state: &CommandState,
    rec: &mut Recorder,
    classifier: &C,
    ended: &RunEnd<T, E>,
    now_ms: u64,
) {
    let overloaded = match ended {
        RunEnd::Returned(Err(error)) => {
            match catch_unwind(AssertUnwindSafe(|| classifier.retry(error))) {
                Ok(answer) => answer.is_overload(),
                Err(panic) => {
                    state.classifier_panicked(&panic_message(panic));
                    false
                }
            }
        }
        RunEnd::TimedOut
        | RunEnd::Returned(Ok(_))
        | RunEnd::Panicked(_)
        | RunEnd::Injected
        | RunEnd::Chaos(_) => false,
    };
    if let Some(start) = rec.limit_start.take() {
        let dropped = overloaded || matches!(ended, RunEnd::TimedOut);
        state.limiter.on_sample(state, start, dropped);
    }
    let hot = state.properties.hot();
    if hot.throttle() {
        state.throttle.ran(hot, now_ms, overloaded);
    }
}

/// Step 6, first half: whether the fallback may run; if so its permit is taken (release it with
/// `fallback_semaphore.give_back()`), otherwise the reason is recorded and set on `err`.
pub(crate) fn fallback_gate<E>(
    state: &CommandState,
    rec: &mut impl FallbackSteps,
    err: &mut HystrixError<E>,
    present: bool,
) -> bool {
    let props = state.properties.hot().load();
    if !props.fallback_enabled() {
        // Sent to the notifier only, never stored in the execution (as Hystrix).
        state
            .env
            .notify_event(EventType::FallbackDisabled, &state.key);
        err.set_fallback_failure(FallbackFailure::Disabled);
        rec.fallback_disabled();
        return false;
    }
    if !present {
        rec.event(state, EventType::FallbackMissing);
        err.set_fallback_failure(FallbackFailure::Missing);
        return false;
    }
    let limit = props.fallback_semaphore_max;
    if state.fallback_semaphore.try_take(limit) {
        rec.fallback_started(state);
        return true;
    }
    rec.event(state, EventType::FallbackRejection);
    err.set_fallback_failure(FallbackFailure::Rejected {
        max_concurrent: limit,
    });
    false
}

/// How starting a fallback that runs on (a future, a stream) went.
pub(crate) enum FallbackStart<X, T, E> {
    /// It runs, holding a fallback permit (release it with `fallback_semaphore.give_back()`);
    /// the error goes along for its end.
    Started(X, HystrixError<E>),
    /// The execution ends with this response: fallback disabled, missing or rejected, or it
    /// panicked while starting.
    Ended(Result<T, HystrixError<E>>),
}

/// Step 6 for a fallback that runs on: [`fallback_gate`], then `call` starts it (`None` from
/// `call`: no fallback after all).
pub(crate) fn start_fallback<X, T, E>(
    state: &CommandState,
    rec: &mut Recorder,
    mut error: HystrixError<E>,
    present: bool,
    call: impl FnOnce(&HystrixError<E>) -> Option<X>,
) -> FallbackStart<X, T, E> {
    if !fallback_gate(state, rec, &mut error, present) {
        return FallbackStart::Ended(Err(error));
    }
    let end = match catch_unwind(AssertUnwindSafe(|| call(&error))) {
        Ok(Some(started)) => return FallbackStart::Started(started, error),
        Ok(None) => FallbackEnd::Missing,
        Err(panic) => FallbackEnd::Panicked(panic_message(panic)),
    };
    state.fallback_semaphore.give_back();
    FallbackStart::Ended(fallback_done(state, rec, error, end))
}

/// How a fallback ended.
pub(crate) enum FallbackEnd<T> {
    Value(T),
    Missing,
    Failed(BoxError),
    Panicked(String),
}

/// Step 6, second half: records the fallback's end.
pub(crate) fn fallback_done<T, E>(
    state: &CommandState,
    rec: &mut impl FallbackSteps,
    mut err: HystrixError<E>,
    end: FallbackEnd<T>,
) -> Result<T, HystrixError<E>> {
    let (event, failure) = match end {
        FallbackEnd::Value(value) => {
            rec.event(state, EventType::FallbackSuccess);
            return Ok(value);
        }
        FallbackEnd::Missing => (EventType::FallbackMissing, FallbackFailure::Missing),
        FallbackEnd::Failed(error) => (EventType::FallbackFailure, FallbackFailure::Failed(error)),
        FallbackEnd::Panicked(message) => (
            EventType::FallbackFailure,
            FallbackFailure::Panicked(message),
        ),
    };
    rec.event(state, event);
    err.set_fallback_failure(failure);
    Err(err)
}

/// Polls `future`, turning a panic into `Err(message)`.
#[inline]
pub(crate) fn poll_caught<F: Future>(
    future: Pin<&mut F>,
    cx: &mut Context<'_>,
) -> Poll<Result<F::Output, String>> {
    caught(|| future.poll(cx))
}

/// Takes one poll step (of a future or a stream), turning a panic into `Err(message)`.
#[inline]
pub(crate) fn caught<T>(poll: impl FnOnce() -> Poll<T>) -> Poll<Result<T, String>> {
    match catch_unwind(AssertUnwindSafe(poll)) {
        Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
        Ok(Poll::Pending) => Poll::Pending,
        Err(panic) => Poll::Ready(Err(panic_message(panic))),
    }
}

/// The text of a caught panic's payload (`&str` or `String`, as `panic!` makes them). The
/// payload is dropped here, and a payload whose own `Drop` panics is contained too.
pub(crate) fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    let message = if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "panic with a non-string payload".to_owned()
    };
    if let Err(second) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        // Dropping this one could panic again; leaking it is the only safe end.
        std::mem::forget(second);
    }
    message
}

/// Drives a future to completion on this thread, parking between polls (a blocking
/// `execute()` under THREAD isolation waits for its pool task and its timer this way).
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}

// ------------------------------------------------------------------------------------------------
// Recording

/// Collects an execution's events and times and reports them exactly once: when the execution
/// finishes, or, for a future dropped unfinished, with CANCELLED ([`Recorder::cancel`]).
#[derive(Debug)]
pub(crate) struct Recorder {
    events: EventCounts,
    pub(crate) start_ms: u64,
    execution_time_ms: Option<u64>,
    isolation: IsolationStrategy,
    /// User code started (so a cancellation has an execution time).
    started_run: bool,
    /// A THREAD run ended while its pool task was still queued: it never ran on a pool thread.
    never_ran: bool,
    /// `fallback.enabled` was false when a fallback was needed: the caller gets an error, so
    /// EXCEPTION_THROWN counts, though FALLBACK_DISABLED is not an event of the execution.
    fallback_disabled: bool,
    /// Nothing (more) to report: not begun yet, or reported.
    finished: bool,
    /// What the breaker must hear about this execution's end (told exactly once).
    ticket: Ticket,
    /// The breaker generation it was admitted in; `None` when the breaker took no part
    /// (disabled, forced closed). Outcomes of an older generation stay out of the health counts.
    generation: Option<u32>,
    /// A request context exists and `requestLog.enabled` was true at the start: the execution
    /// is logged in the context current when it ends.
    log_requested: bool,
    /// The registry has an event notifier or an execution hook: events and steps are told.
    observed: bool,
    /// The execution's `tracing` span; `None` while no subscriber exists (disabled if the
    /// subscriber does not want it).
    span: Option<tracing::Span>,
    /// When the current attempt started (the execution's start for the first).
    pub(crate) attempt_ms: u64,
    /// Attempts begun (1 for a single run).
    attempts: u8,
    /// `retry.maxAttempts` when a retry-enabled execution began (0 otherwise).
    max_attempts: u8,
    /// For a retry-enabled execution: its timeout and each attempt's, in ms (0: none).
    retry_timeouts_ms: (u32, u32),
    /// The keyed breaker the execution went through, if it named one.
    keyed: Option<Arc<KeyedBreaker>>,
    /// The attempt loop's state, once a retry-enabled execution retried (boxed: made on the
    /// first retry, one null pointer until then).
    retried: Option<Box<Attempts>>,
    /// Hedges started (attempts beside another, counted in `attempts` too).
    hedges: u8,
    /// `hedging.maxAttempts` when a hedging execution began (0 otherwise).
    pub(crate) hedge_max: u8,
    /// The current attempt was admitted by the adaptive limit: its sample is taken when its
    /// end is decided.
    pub(crate) limit_start: Option<LimitStart>,
    /// The execution's class under pressure (its permits are counted in it while reserves
    /// are set).
    pub(crate) priority: Priority,
    /// How the current attempt holds its execution permit, once it took one.
    pub(crate) held: Held,
    /// The current attempt's slow-call state: tracked as running, or judged at its first
    /// value (a stream).
    pub(crate) slow_track: SlowTrack,
}

/// Where a retry-enabled execution's attempt loop is.
#[derive(Debug, Default, Clone, Copy)]
struct Attempts {
    /// Events already counted in the metrics (those of earlier attempts, counted as they
    /// ended).
    counted: EventCounts,
    /// The delay before the latest retry, in ms.
    last_delay_ms: u64,
}

impl Recorder {
    /// A recorder that has nothing to report until [`begin`](Recorder::begin).
    pub(crate) fn idle() -> Self {
        Recorder {
            events: EventCounts::new(),
            start_ms: 0,
            execution_time_ms: None,
            isolation: IsolationStrategy::Semaphore,
            started_run: false,
            never_ran: false,
            fallback_disabled: false,
            finished: true,
            ticket: Ticket::None,
            generation: None,
            log_requested: false,
            observed: false,
            span: None,
            attempt_ms: 0,
            attempts: 0,
            max_attempts: 0,
            retry_timeouts_ms: (0, 0),
            keyed: None,
            retried: None,
            hedges: 0,
            hedge_max: 0,
            limit_start: None,
            priority: Priority::Normal,
            held: Held::Plain,
            slow_track: SlowTrack::None,
        }
    }

    /// Opens the execution's span: `hystrix.execution` at DEBUG level, target
    /// `hystrix::command`, with the command, group and thread-pool keys; `outcome` and
    /// `latency_ms` are recorded when the execution is reported. Returns a handle to enter
    /// around the execution's steps.
    ///
    /// With no `tracing` subscriber at all there is no span (`None`, one atomic load): a
    /// `Span` value, even disabled, costs ~40 instructions per execution to move and drop,
    /// and with `tracing`'s `log` feature (on in many apps, e.g. through axum's defaults) its
    /// lifecycle goes to the `log` crate, ~400 (measured).
    #[inline]
    pub(crate) fn open_span(&mut self, state: &CommandState) -> Option<tracing::Span> {
        if !tracing::dispatcher::has_been_set() {
            return None;
        }
        self.open_traced_span(state)
    }

    /// [`open_span`](Recorder::open_span) once a subscriber exists.
    #[cold]
    fn open_traced_span(&mut self, state: &CommandState) -> Option<tracing::Span> {
        self.span = Some(tracing::debug_span!(
            target: "hystrix::command",
            "hystrix.execution",
            command = %state.key,
            group = %state.group,
            thread_pool = %state.thread_pool_key,
            outcome = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
            attempt = tracing::field::Empty,
        ));
        self.span.clone()
    }

    /// The execution's span (see [`open_span`](Recorder::open_span)).
    #[inline]
    pub(crate) fn span(&self) -> Option<&tracing::Span> {
        self.span.as_ref()
    }

    /// Attempts begun so far (1 for a single run).
    pub(crate) fn attempts(&self) -> u8 {
        self.attempts
    }

    /// The execution deadline of a retry-enabled execution (its start + its timeout), if it
    /// has a timeout.
    fn execution_deadline_ms(&self) -> Option<u64> {
        let timeout_ms = u64::from(self.retry_timeouts_ms.0);
        (timeout_ms > 0).then(|| self.start_ms.saturating_add(timeout_ms))
    }

    /// Another attempt starts now.
    pub(crate) fn next_attempt(&mut self, now_ms: u64) {
        self.attempt_ms = now_ms;
    }

    /// A hedge started beside the current attempt (HEDGE recorded).
    #[cold]
    pub(crate) fn hedge_started(&mut self, state: &CommandState) {
        self.event(state, EventType::Hedge);
        self.attempts = self.attempts.saturating_add(1);
        self.hedges = self.hedges.saturating_add(1);
    }

    /// Attempt number `attempt` (1 for the first) won a hedging race: recorded on the
    /// execution's span as `attempt`.
    #[cold]
    pub(crate) fn won_by(&self, attempt: u8) {
        if let Some(span) = &self.span {
            span.record("attempt", attempt);
        }
    }

    /// Swaps the current attempt's breaker ticket and start with `other`'s: a hedge's end is
    /// decided between two swaps.
    #[cold]
    pub(crate) fn swap_attempt(&mut self, other: &mut crate::hedging::AttemptTicket) {
        std::mem::swap(&mut self.ticket, &mut other.ticket);
        std::mem::swap(&mut self.generation, &mut other.generation);
        std::mem::swap(&mut self.attempt_ms, &mut other.attempt_ms);
        std::mem::swap(&mut self.limit_start, &mut other.limit_start);
        std::mem::swap(&mut self.slow_track, &mut other.slow_track);
    }

    /// The keyed breaker the execution went through, if it named one.
    #[inline]
    fn keyed(&self) -> Option<&Arc<KeyedBreaker>> {
        self.keyed.as_ref()
    }

    /// The attempt loop's state, made at the first retry.
    #[cold]
    fn retried_mut(&mut self) -> &mut Attempts {
        self.retried.get_or_insert_with(Box::default)
    }

    /// The attempt loop's state (all zero before the first retry).
    #[inline]
    fn retry(&self) -> Attempts {
        self.retried.as_deref().copied().unwrap_or_default()
    }

    /// A span for the attempt about to start (number `self.attempts`), for a retry- or
    /// hedging-enabled execution with a subscriber: `hystrix.attempt` at DEBUG level, target
    /// `hystrix::command`, a child of the execution's span, with field `attempt`. The caller
    /// keeps it (a retryable run's [`Again`]) and enters it around the attempt's steps.
    #[cold]
    pub(crate) fn attempt_span(&self) -> Option<tracing::Span> {
        let parent = self.span.as_ref()?;
        (self.max_attempts > 1 || self.hedge_max > 1).then(|| {
            tracing::debug_span!(
                target: "hystrix::command",
                parent: parent,
                "hystrix.attempt",
                attempt = self.attempts(),
            )
        })
    }

    /// Records how the execution ended on its span.
    #[cold]
    fn record_span(span: &tracing::Span, result: &ExecutionResult) {
        // As text, which formatters quote: `outcome="FAILURE, FALLBACK_SUCCESS"`.
        span.record("outcome", result.events.to_string().as_str())
            .record("latency_ms", result.total_time_ms);
    }

    /// The breaker this execution went through.
    #[inline]
    pub(crate) fn site<'a>(&'a self, state: &'a CommandState) -> Site<'a> {
        Site::of(state, self.keyed().map(|keyed| &**keyed))
    }

    /// Whether the attempt's end has more to tell than its ticket: a keyed breaker's window,
    /// slow calls, a per-call window, or its place among the attempts running.
    #[inline]
    fn has_outcome_extras(&self, state: &CommandState) -> bool {
        // An attempt tracked while slow calls were turned off is taken out at its report.
        self.keyed.is_some() || state.properties.hot().breaker_window_extras()
    }

    /// The attempt ended at `now_ms` (`kind`: its failure's kind, `FailureKind::None` for a
    /// success): slower than `circuitBreaker.slowCall.durationThresholdInMilliseconds` it is a
    /// SLOW_CALL; the breaker's own window counts it (a keyed breaker's, a COUNT or a
    /// CONSECUTIVE window; a command's TIME window counts its events). Counted slow while
    /// running, it is no longer a slow call running in a TIME window (its events make it the
    /// request it was), and a COUNT or CONSECUTIVE window, which took it then, does not take
    /// it again.
    #[cold]
    fn count_outcome(&mut self, state: &CommandState, kind: FailureKind, now_ms: u64) {
        // A stream is judged on the time to its first value, as its timeout.
        let ran_ms = now_ms.saturating_sub(self.attempt_ms);
        let (ran_ms, mark) = match std::mem::take(&mut self.slow_track) {
            SlowTrack::FirstValue { judged_ms, mark } => (u64::from(judged_ms), mark),
            SlowTrack::Running(tracked) => (ran_ms, remove_tracked(state, tracked)),
            SlowTrack::None => (ran_ms, Mark::Open),
        };
        let slow_ms = state.properties.hot().slow_call_ms();
        let slow = slow_ms > 0 && ran_ms > slow_ms;
        if slow {
            self.event(state, EventType::SlowCall);
        }
        if mark == Mark::Sampled {
            if self.in_current_generation(state) && matches!(state.extras.window, Window::Counters)
            {
                state.counters.slow_in_flight_ended(now_ms);
            }
            return;
        }
        let outcome = CallOutcome {
            error: kind != FailureKind::None,
            slow,
        };
        let site = self.site(state);
        site.breaker()
            .on_outcome(site, self.ticket, self.generation, outcome, kind, now_ms);
    }

    /// A stream's first value came at `now_ms`: its attempt is judged slow or not on the time
    /// to it (as the stream's timeout), and is no longer a call running for slow calls counted
    /// in flight.
    #[inline]
    pub(crate) fn first_value(&mut self, state: &CommandState, now_ms: u64) {
        let mark = match self.slow_track {
            SlowTrack::FirstValue { .. } => return,
            SlowTrack::Running(tracked) => remove_tracked(state, tracked),
            SlowTrack::None if self.has_outcome_extras(state) => Mark::Open,
            SlowTrack::None => return,
        };
        let judged_ms = now_ms.saturating_sub(self.attempt_ms);
        self.slow_track = SlowTrack::FirstValue {
            judged_ms: u32::try_from(judged_ms).unwrap_or(u32::MAX),
            mark,
        };
    }

    /// Whether the health outcome of the attempt that just ended counts in the command's
    /// health window now: it went through the command's own breaker, in its current
    /// generation.
    fn counts_in_health(&self, state: &CommandState) -> bool {
        self.keyed().is_none() && self.in_current_generation(state)
    }

    /// Whether the attempt was admitted in the command's breaker's current generation (or
    /// while the breaker took no part).
    fn in_current_generation(&self, state: &CommandState) -> bool {
        self.generation
            .is_none_or(|generation| state.breaker.generation() == generation)
    }

    /// The attempt no longer runs: if it is still tracked as running (slow calls were turned
    /// off before it ended), it leaves the tracker.
    #[inline]
    fn untrack(&mut self, state: &CommandState) {
        if let SlowTrack::Running(tracked) = std::mem::take(&mut self.slow_track) {
            remove_tracked(state, tracked);
        }
    }

    /// Tells the breaker the execution succeeded (or ended in an ignored error).
    #[inline]
    pub(crate) fn settle_success(&mut self, state: &CommandState, now_ms: u64) {
        if self.has_outcome_extras(state) {
            self.count_outcome(state, FailureKind::None, now_ms);
        }
        let ticket = std::mem::take(&mut self.ticket);
        if ticket != Ticket::None {
            let site = self.site(state);
            site.breaker().on_success(site, ticket, now_ms);
        }
    }

    /// Tells the breaker the execution failed (error, panic, timeout or bulkhead rejection).
    #[inline]
    pub(crate) fn settle_failure(&mut self, state: &CommandState, kind: FailureKind, now_ms: u64) {
        if self.has_outcome_extras(state) {
            self.count_outcome(state, kind, now_ms);
        }
        let ticket = std::mem::take(&mut self.ticket);
        let site = self.site(state);
        site.breaker().on_failure(site, ticket, kind, now_ms);
    }

    /// Tells the breaker the error asked to trip now (for at least `min_open`).
    #[cold]
    pub(crate) fn settle_trip_now(
        &mut self,
        state: &CommandState,
        min_open: Option<std::time::Duration>,
        now_ms: u64,
    ) {
        self.count_outcome(state, FailureKind::TripNow, now_ms);
        let ticket = std::mem::take(&mut self.ticket);
        let site = self.site(state);
        let min_open_ms = min_open.map_or(0, crate::config::ceil_millis);
        site.breaker()
            .on_trip_now(site, ticket, min_open_ms, now_ms);
    }

    /// The generation of the half-open trial this execution is, if it is one whose outcome the
    /// breaker has not heard yet.
    /// (A keyed breaker's trial gives its slot back at once.)
    pub(crate) fn trial_generation(&self) -> Option<u32> {
        if self.keyed().is_some() {
            return None;
        }
        match self.ticket {
            Ticket::Trial(generation) => Some(generation),
            _ => None,
        }
    }

    /// The abandoned run goes on and gives its trial slot back itself when it stops.
    pub(crate) fn hand_over_trial(&mut self) {
        self.ticket = Ticket::None;
    }

    /// Tells the breaker the execution said nothing of the dependency's health.
    #[inline]
    pub(crate) fn settle_release(&mut self, state: &CommandState) {
        self.untrack(state);
        let ticket = std::mem::take(&mut self.ticket);
        if ticket != Ticket::None {
            self.site(state).breaker().release(ticket);
        }
    }

    /// The execution starts now: from here on it is reported exactly once.
    #[inline]
    pub(crate) fn begin(&mut self, state: &CommandState, isolation: IsolationStrategy) {
        self.start_ms = state.env.clock.now_ms();
        self.attempt_ms = self.start_ms;
        self.attempts = 1;
        self.isolation = isolation;
        self.finished = false;
        self.log_requested =
            RequestContext::any_alive() && state.properties.hot().load().request_log_enabled();
        self.observed = state.env.is_observed();
        if self.observed {
            state.env.hook(|hook| hook.on_start(&state.key));
        }
    }

    /// The execution starts at `now_ms`, refused by [`refusal`] (nothing watches it one by
    /// one): SHORT_CIRCUITED, and the fallback step follows.
    #[cold]
    pub(crate) fn begin_refused(
        &mut self,
        state: &CommandState,
        isolation: IsolationStrategy,
        now_ms: u64,
    ) {
        self.start_ms = now_ms;
        self.attempt_ms = now_ms;
        self.attempts = 1;
        self.isolation = isolation;
        self.finished = false;
        self.event(state, EventType::ShortCircuited);
    }

    /// CHAOS_INJECTED for an attempt chaos changed: counted in the execution only (the event
    /// notifier heard of it as the injection began, see [`chaos`](crate::chaos)).
    pub(crate) fn count_chaos_injected(&mut self) {
        self.events.add(EventType::ChaosInjected);
    }

    #[inline]
    pub(crate) fn event(&mut self, state: &CommandState, event: EventType) {
        if self.observed {
            self.observe_event(state, event);
        }
        self.events.add(event);
    }

    /// Tells the event notifier of `event`, and the execution hook what it means.
    #[cold]
    fn observe_event(&self, state: &CommandState, event: EventType) {
        state.env.notify_event(event, &state.key);
        if state.env.has_hook() {
            self.hook_event(state, event);
        }
    }

    /// Tells the execution hook what `event` means, in Hystrix's order.
    fn hook_event(&self, state: &CommandState, event: EventType) {
        let key = &state.key;
        let in_thread = self.started_run && self.isolation == IsolationStrategy::Thread;
        state.env.hook(|hook| match event {
            EventType::Emit => {
                hook.on_execution_emit(key);
                hook.on_emit(key);
            }
            EventType::Success => {
                // A stream's values were emitted one by one; a single value is emitted now.
                if !self.events.contains(EventType::Emit) {
                    hook.on_execution_emit(key);
                    hook.on_emit(key);
                }
                hook.on_execution_success(key);
                if in_thread {
                    hook.on_thread_complete(key);
                }
            }
            EventType::Failure | EventType::BadRequest | EventType::Ignored => {
                hook.on_execution_error(key, event);
                if in_thread {
                    hook.on_thread_complete(key);
                }
            }
            // A timed-out or cancelled (lost) attempt's thread is done with it.
            EventType::Timeout | EventType::HedgeCancelled if in_thread => {
                hook.on_thread_complete(key);
            }
            EventType::FallbackEmit => {
                hook.on_fallback_emit(key);
                hook.on_emit(key);
            }
            EventType::FallbackSuccess => {
                if !self.events.contains(EventType::FallbackEmit) {
                    hook.on_fallback_emit(key);
                    hook.on_emit(key);
                }
                hook.on_fallback_success(key);
            }
            EventType::FallbackFailure => hook.on_fallback_error(key),
            EventType::Cancelled => {
                hook.on_unsubscribe(key);
                if in_thread {
                    hook.on_thread_complete(key);
                }
            }
            _ => {}
        });
    }

    /// User code starts now (or, under THREAD, was handed to the pool).
    #[inline]
    pub(crate) fn run_started(&mut self, state: &CommandState) {
        self.started_run = true;
        if self.observed {
            self.hook_run_started(state);
        }
    }

    #[cold]
    fn hook_run_started(&self, state: &CommandState) {
        let thread = self.isolation == IsolationStrategy::Thread;
        state.env.hook(|hook| {
            if thread {
                hook.on_thread_start(&state.key);
            }
            hook.on_execution_start(&state.key);
        });
    }

    /// Tells the event notifier of EXCEPTION_THROWN: the caller gets an error after
    /// fallback handling (a bad request; a failed, missing or rejected fallback; fallback
    /// disabled). The metrics derive the same count when read.
    #[cold]
    fn notify_exception_thrown(&self, state: &CommandState) {
        if self.events.bits() & crate::event::THROWS_MASK != 0 || self.fallback_disabled {
            state
                .env
                .notify_event(EventType::ExceptionThrown, &state.key);
        }
    }

    /// Tells the execution hook how the execution ended for its caller.
    #[cold]
    fn hook_finish(&self, state: &CommandState, failure: Option<FailureType>) {
        state.env.hook(|hook| match failure {
            None => hook.on_success(&state.key),
            Some(failure) => hook.on_error(&state.key, failure),
        });
    }

    /// The fallback starts (its permit taken).
    #[inline]
    pub(crate) fn fallback_started(&self, state: &CommandState) {
        if self.observed {
            state.env.hook(|hook| hook.on_fallback_start(&state.key));
        }
    }

    /// The run's pool task ended while still queued (timed out or cancelled there): not
    /// executed in a thread, nor counted as executed by the pool.
    #[cold]
    pub(crate) fn run_never_ran(&mut self) {
        self.never_ran = true;
    }

    /// The run ended (returned, panicked or reached its deadline) at `now_ms`.
    #[inline]
    pub(crate) fn run_ended(&mut self, now_ms: u64) {
        self.execution_time_ms = Some(now_ms.saturating_sub(self.attempt_ms));
    }

    /// The isolation the execution began with.
    pub(crate) fn isolation(&self) -> IsolationStrategy {
        self.isolation
    }

    /// No attempt follows after all (the factory of runs panicked): the attempt loop ends.
    pub(crate) fn end_attempts(&mut self) {
        self.max_attempts = self.max_attempts.min(self.attempts);
    }

    /// Counts the events of the attempt that just failed (and its RETRY) in the metrics now:
    /// each attempt is a request for health when it happens.
    pub(crate) fn count_attempt(&mut self, state: &CommandState, now_ms: u64) {
        self.untrack(state);
        let fresh = self.events.less(&self.retry().counted);
        let current = self.counts_in_health(state);
        state.counters.record_attempt(now_ms, &fresh, current);
        let events = self.events;
        self.retried_mut().counted = events;
    }

    fn report(&mut self, state: &CommandState, now_ms: u64) -> ExecutionResult {
        self.finished = true;
        // An outcome the breaker has not heard yet (cancelled) gives a trial slot back.
        self.settle_release(state);
        let start_ms = self.start_ms;
        let result = ExecutionResult {
            events: self.events,
            start_ms,
            execution_time_ms: self.execution_time_ms,
            total_time_ms: now_ms.saturating_sub(start_ms),
            isolation: self.isolation,
            executed_in_thread: self.started_run
                && !self.never_ran
                && self.isolation == IsolationStrategy::Thread,
        };
        if let Some(span) = &self.span {
            Self::record_span(span, &result);
        }
        // A misused execution (refused before any step) has no events and is not counted.
        if !self.events.is_empty() {
            if self.observed {
                self.notify_exception_thrown(state);
            }
            // Each breaker judges the calls it admitted: an execution through a keyed breaker
            // counts in that breaker's health window, not in the command's.
            let current = self.counts_in_health(state);
            // Earlier attempts of a retried execution were counted as they ended.
            let less;
            let uncounted = match &self.retried {
                Some(retried) => {
                    less = result.events.less(&retried.counted);
                    &less
                }
                None => &result.events,
            };
            state.record(&result, uncounted, self.fallback_disabled, current);
            // The request this execution belongs to: it ends in the context it started in (on
            // the caller's thread or task, or where its context was carried).
            if self.log_requested
                && let Some(context) = RequestContext::current()
            {
                log_execution(state, &context, &result);
            }
        }
        result
    }

    #[inline]
    pub(crate) fn finish<T, E>(
        &mut self,
        state: &CommandState,
        now_ms: u64,
        response: Result<T, HystrixError<E>>,
    ) -> Outcome<T, E> {
        let result = self.report(state, now_ms);
        if self.observed {
            self.hook_finish(
                state,
                response.as_ref().err().map(HystrixError::failure_type),
            );
        }
        Outcome { response, result }
    }

    pub(crate) fn finish_now<T, E>(
        &mut self,
        state: &CommandState,
        response: Result<T, HystrixError<E>>,
    ) -> Outcome<T, E> {
        let now_ms = state.env.clock.now_ms();
        self.finish(state, now_ms, response)
    }

    /// Whether there is nothing to report: not begun, or reported.
    #[inline]
    pub(crate) fn is_settled(&self) -> bool {
        self.finished
    }

    /// The execution was dropped: if it began and has not been reported, report it with
    /// CANCELLED, and return what was reported.
    pub(crate) fn cancel(&mut self, state: &CommandState) -> Option<ExecutionResult> {
        if self.finished {
            return None;
        }
        let now_ms = state.env.clock.now_ms();
        if self.started_run && self.execution_time_ms.is_none() {
            self.run_ended(now_ms);
        }
        self.event(state, EventType::Cancelled);
        Some(self.report(state, now_ms))
    }
}

/// Adds a finished execution to its request's log.
#[cold]
fn log_execution(state: &CommandState, context: &RequestContext, result: &ExecutionResult) {
    context.log(RequestLogEntry::new(
        state.key.clone(),
        result.events,
        result.execution_time_ms.unwrap_or(0),
    ));
}
