//! The execution pipeline, in one place and in order (ARCHITECTURE §2, SPEC §3.2):
//!
//! 1. the circuit breaker allows the execution, or it is SHORT_CIRCUITED;
//! 2. an execution permit is taken (SEMAPHORE), or it is SEMAPHORE_REJECTED;
//! 3. the timeout is armed (deadline = start + timeout);
//! 4. the run executes, raced against the deadline, panics caught;
//! 5. its end is decided: SUCCESS, FAILURE, TIMEOUT, BAD_REQUEST or IGNORED (classifier);
//! 6. failures, timeouts, short-circuits and rejections go to the fallback, under its own
//!    semaphore: FALLBACK_SUCCESS, _FAILURE, _REJECTION or _MISSING;
//! 7. metrics and the event notifier see the execution exactly once.
//!
//! Blocking runs go through [`run_blocking`], top to bottom; async runs through the
//! [`ExecuteAsyncOutcome`](crate::command::ExecuteAsyncOutcome) future, which takes the same
//! steps one poll at a time. Both share every step but the race itself.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio_util::sync::CancellationToken;

use crate::circuit::Admission;
use crate::clock::{Clock, TimerId};
use crate::command::execution::{BlockingFallback, BlockingRun};
use crate::command::{Class, Classify, ExecutionResult, Outcome};
use crate::config::{HotSnapshot, IsolationStrategy};
use crate::error::{BoxError, Cause, Detail, FailureType, FallbackFailure, HystrixError};
use crate::event::{EventCounts, EventType};
use crate::isolation::semaphore::Permit;
use crate::registry::CommandState;

/// Per-call options of an [`Execution`](crate::Execution).
#[derive(Debug, Default, Clone)]
pub(crate) struct CallOptions {
    /// Overrides `execution.isolation.thread.timeoutInMilliseconds` for this call.
    pub(crate) timeout_ms: Option<u64>,
    /// Hystrix's `getCacheKey()` for this call.
    pub(crate) cache_key: Option<String>,
}

// ------------------------------------------------------------------------------------------------
// Entry points

/// Runs a blocking execution on the calling thread (SEMAPHORE isolation).
pub(crate) fn run_blocking<C, R, FB>(
    state: &CommandState,
    classifier: &C,
    run: R,
    fallback: FB,
    options: &CallOptions,
) -> Outcome<R::Output, R::Error>
where
    R: BlockingRun,
    FB: BlockingFallback<R::Output, R::Error>,
    C: Classify<R::Error>,
{
    let mut rec = Recorder::start(state, IsolationStrategy::Semaphore);
    if let Err(err) = check_options(state, options) {
        return rec.finish_now(Err(err));
    }
    let props = state.properties.hot().load();
    let permit = match try_admit(state, &props, &mut rec) {
        Ok(permit) => permit,
        Err(err) => {
            let response = fallback_blocking(state, &mut rec, err, fallback);
            return rec.finish_now(response);
        }
    };
    let timeout_ms = timeout_ms(&props, options);

    let clock = &*state.env.clock;
    let deadline = timeout_ms.map(|ms| rec.start_ms.saturating_add(ms));
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
    rec.run_started();
    let returned = catch_unwind(AssertUnwindSafe(|| run.call(token.clone())));
    let end = clock.now_ms();
    drop(timer);
    rec.run_ended(end);
    drop(permit);

    // Past the deadline the outcome is TIMEOUT whatever the run returned (SPEC Part A 12). Only
    // the deadline timer cancels the token, so a cancelled token means the deadline passed even
    // if a coarse clock does not show it yet.
    let past_deadline = deadline.is_some_and(|deadline| end >= deadline)
        || token.as_ref().is_some_and(CancellationToken::is_cancelled);
    let ended = match returned {
        _ if past_deadline => RunEnd::TimedOut,
        Ok(result) => RunEnd::Returned(result),
        Err(panic) => RunEnd::Panicked(panic_message(panic)),
    };
    match decide(state, &mut rec, classifier, ended, timeout_ms, end) {
        Decision::Value(value) => rec.finish(end, Ok(value)),
        Decision::Error(err) => rec.finish(end, Err(err)),
        Decision::Fallback(err) => {
            let response = fallback_blocking(state, &mut rec, err, fallback);
            rec.finish_now(response)
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Steps shared by every mode

pub(crate) fn check_options<E>(
    state: &CommandState,
    options: &CallOptions,
) -> Result<(), HystrixError<E>> {
    if options.timeout_ms == Some(0) {
        return Err(HystrixError::misuse(
            state.key.clone(),
            "was given a per-call timeout of 0 ms; use at least 1 ms, or turn timeouts off with \
             execution.timeout.enabled=false",
        ));
    }
    Ok(())
}

/// The timeout of this execution in ms, or `None` when `execution.timeout.enabled` is false.
#[inline]
pub(crate) fn timeout_ms(props: &HotSnapshot, options: &CallOptions) -> Option<u64> {
    props
        .timeout_enabled()
        .then(|| options.timeout_ms.unwrap_or(props.timeout_ms))
}

/// Steps 1 and 2: the breaker, then an execution permit.
#[inline]
pub(crate) fn try_admit<'s, E>(
    state: &'s CommandState,
    props: &HotSnapshot,
    rec: &mut Recorder<'_>,
) -> Result<Permit<'s>, HystrixError<E>> {
    if let Admission::Denied(cause) = state.breaker.attempt(props, rec.start_ms) {
        rec.event(EventType::ShortCircuited);
        return Err(
            HystrixError::new(FailureType::ShortCircuit, state.key.clone(), Cause::None)
                .with_detail(Detail::ShortCircuit(Some(cause))),
        );
    }
    let limit = props.semaphore_max;
    match state.execution_semaphore.try_acquire(limit) {
        Some(permit) => Ok(permit),
        None => {
            rec.event(EventType::SemaphoreRejected);
            Err(HystrixError::new(
                FailureType::RejectedSemaphoreExecution,
                state.key.clone(),
                Cause::None,
            )
            .with_detail(Detail::SemaphoreLimit(limit)))
        }
    }
}

/// How the run ended, before classification.
pub(crate) enum RunEnd<T, E> {
    Returned(Result<T, E>),
    Panicked(String),
    TimedOut,
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
pub(crate) fn decide<T, E, C: Classify<E>>(
    state: &CommandState,
    rec: &mut Recorder<'_>,
    classifier: &C,
    ended: RunEnd<T, E>,
    timeout_ms: Option<u64>,
    now_ms: u64,
) -> Decision<T, E> {
    let key = || state.key.clone();
    match ended {
        RunEnd::Returned(Ok(value)) => {
            rec.event(EventType::Success);
            state.breaker.mark_success(now_ms);
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
            match class {
                Class::Failure => {
                    rec.event(EventType::Failure);
                    state.breaker.mark_non_success(now_ms);
                    Decision::Fallback(HystrixError::new(
                        FailureType::CommandException,
                        key(),
                        Cause::Error(error),
                    ))
                }
                Class::BadRequest => {
                    rec.event(EventType::BadRequest);
                    Decision::Error(HystrixError::new(
                        FailureType::BadRequest,
                        key(),
                        Cause::Error(error),
                    ))
                }
                Class::Ignored => {
                    rec.event(EventType::Ignored);
                    state.breaker.mark_success(now_ms);
                    Decision::Error(HystrixError::new(
                        FailureType::Ignored,
                        key(),
                        Cause::Error(error),
                    ))
                }
            }
        }
        RunEnd::Panicked(message) => {
            rec.event(EventType::Failure);
            state.breaker.mark_non_success(now_ms);
            Decision::Fallback(HystrixError::new(
                FailureType::CommandException,
                key(),
                Cause::Panic(message),
            ))
        }
        RunEnd::TimedOut => {
            rec.event(EventType::Timeout);
            state.breaker.mark_non_success(now_ms);
            Decision::Fallback(
                HystrixError::new(FailureType::Timeout, key(), Cause::None)
                    .with_detail(Detail::TimeoutMs(timeout_ms.unwrap_or_default())),
            )
        }
    }
}

/// Step 6, first half: whether the fallback may run. `None` means no (the reason is recorded
/// and set on `err`); `Some` holds its permit.
pub(crate) fn fallback_permit<'s, E>(
    state: &'s CommandState,
    rec: &mut Recorder<'_>,
    err: &mut HystrixError<E>,
    present: bool,
) -> Option<Permit<'s>> {
    let props = state.properties.hot().load();
    if !props.fallback_enabled() {
        // Sent to the notifier only, never stored in the execution (as Hystrix).
        state
            .env
            .notify_event(EventType::FallbackDisabled, &state.key);
        err.set_fallback_failure(FallbackFailure::Disabled);
        rec.fallback_disabled = true;
        return None;
    }
    if !present {
        rec.event(EventType::FallbackMissing);
        err.set_fallback_failure(FallbackFailure::Missing);
        return None;
    }
    let limit = props.fallback_semaphore_max;
    let permit = state.fallback_semaphore.try_acquire(limit);
    if permit.is_none() {
        rec.event(EventType::FallbackRejection);
        err.set_fallback_failure(FallbackFailure::Rejected {
            max_concurrent: limit,
        });
    }
    permit
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
    rec: &mut Recorder<'_>,
    mut err: HystrixError<E>,
    end: FallbackEnd<T>,
) -> Result<T, HystrixError<E>> {
    let (event, failure) = match end {
        FallbackEnd::Value(value) => {
            rec.event(EventType::FallbackSuccess);
            return Ok(value);
        }
        FallbackEnd::Missing => (EventType::FallbackMissing, FallbackFailure::Missing),
        FallbackEnd::Failed(error) => (EventType::FallbackFailure, FallbackFailure::Failed(error)),
        FallbackEnd::Panicked(message) => (
            EventType::FallbackFailure,
            FallbackFailure::Panicked(message),
        ),
    };
    rec.event(event);
    err.set_fallback_failure(failure);
    Err(err)
}

fn fallback_blocking<T, E, FB: BlockingFallback<T, E>>(
    state: &CommandState,
    rec: &mut Recorder<'_>,
    mut err: HystrixError<E>,
    fallback: FB,
) -> Result<T, HystrixError<E>> {
    let Some(permit) = fallback_permit(state, rec, &mut err, fallback.is_present()) else {
        return Err(err);
    };
    let end = match catch_unwind(AssertUnwindSafe(|| fallback.call(&err))) {
        Ok(Some(Ok(value))) => FallbackEnd::Value(value),
        Ok(Some(Err(error))) => FallbackEnd::Failed(error),
        Ok(None) => FallbackEnd::Missing,
        Err(panic) => FallbackEnd::Panicked(panic_message(panic)),
    };
    drop(permit);
    fallback_done(rec, err, end)
}

/// Polls `future`, turning a panic into `Err(message)`.
pub(crate) fn poll_caught<F: Future>(
    future: Pin<&mut F>,
    cx: &mut Context<'_>,
) -> Poll<Result<F::Output, String>> {
    match catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
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
// Recording

/// Collects an execution's events and times, and reports them exactly once: when the execution
/// finishes, or, if it is dropped unfinished (a cancelled async execution), with CANCELLED.
pub(crate) struct Recorder<'s> {
    state: &'s CommandState,
    events: EventCounts,
    pub(crate) start_ms: u64,
    execution_time_ms: Option<u64>,
    isolation: IsolationStrategy,
    /// User code started (so a cancellation has an execution time).
    started_run: bool,
    /// `fallback.enabled` was false when a fallback was needed: the caller gets an error, so
    /// EXCEPTION_THROWN counts, though FALLBACK_DISABLED is not an event of the execution.
    fallback_disabled: bool,
    finished: bool,
}

impl<'s> Recorder<'s> {
    /// A recorder that has nothing to report until [`begin`](Recorder::begin).
    pub(crate) fn idle(state: &'s CommandState) -> Self {
        Recorder {
            state,
            events: EventCounts::new(),
            start_ms: 0,
            execution_time_ms: None,
            isolation: IsolationStrategy::Semaphore,
            started_run: false,
            fallback_disabled: false,
            finished: true,
        }
    }

    /// The execution starts now: from here on it is reported exactly once.
    #[inline]
    pub(crate) fn begin(&mut self, isolation: IsolationStrategy) {
        self.start_ms = self.state.env.clock.now_ms();
        self.isolation = isolation;
        self.finished = false;
    }

    #[inline]
    pub(crate) fn start(state: &'s CommandState, isolation: IsolationStrategy) -> Self {
        let mut rec = Recorder::idle(state);
        rec.begin(isolation);
        rec
    }

    #[inline]
    pub(crate) fn event(&mut self, event: EventType) {
        self.events.add(event);
        if self.state.env.has_notifier() {
            self.state.env.notify_event(event, &self.state.key);
        }
    }

    /// User code starts now.
    #[inline]
    pub(crate) fn run_started(&mut self) {
        self.started_run = true;
    }

    /// The run ended (returned, panicked or reached its deadline) at `now_ms`.
    #[inline]
    pub(crate) fn run_ended(&mut self, now_ms: u64) {
        self.execution_time_ms = Some(now_ms.saturating_sub(self.start_ms));
    }

    fn report(&mut self, now_ms: u64) -> ExecutionResult {
        self.finished = true;
        let result = ExecutionResult {
            events: self.events,
            start_ms: self.start_ms,
            execution_time_ms: self.execution_time_ms,
            total_time_ms: now_ms.saturating_sub(self.start_ms),
            isolation: self.isolation,
            executed_in_thread: false,
        };
        // A misused execution (refused before any step) has no events and is not counted.
        if !self.events.is_empty() {
            self.state.record(&result, self.fallback_disabled);
        }
        result
    }

    #[inline]
    pub(crate) fn finish<T, E>(
        &mut self,
        now_ms: u64,
        response: Result<T, HystrixError<E>>,
    ) -> Outcome<T, E> {
        let result = self.report(now_ms);
        Outcome { response, result }
    }

    pub(crate) fn finish_now<T, E>(
        &mut self,
        response: Result<T, HystrixError<E>>,
    ) -> Outcome<T, E> {
        let now_ms = self.state.env.clock.now_ms();
        self.finish(now_ms, response)
    }
}

impl Drop for Recorder<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let now_ms = self.state.env.clock.now_ms();
        if self.execution_time_ms.is_none() && self.started_run {
            self.run_ended(now_ms);
        }
        self.event(EventType::Cancelled);
        self.report(now_ms);
    }
}
