//! The futures of executions: the pipeline's steps taken one poll at a time.
//!
//! A hand-written state machine rather than an `async fn`: it stays small (the run, its timer
//! and, later, the fallback share one slot), it has a name a `tower::Service` can return, and
//! its drop behaviour is spelled out in one place ([`PinnedDrop`] below).
//!
//! The types carry their parts as plain parameters (the run in progress, the fallback's
//! future, the error) instead of trait projections with `where` clauses: the compiler proves
//! `Send` of a future that awaits them from their fields alone, which a `where R: RunFn` would
//! turn into a proof of `'static` bounds it cannot make inside an `async` block (for errors
//! such as tower's `BoxError`). The `ExecuteAsync*` names are aliases that fill them in.

use std::future::Future;
use std::ops::Deref;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::circuit::{Admission, Ticket};
use crate::clock::Sleep;
use crate::command::execution::AsyncFallback;
use crate::command::pipeline::{
    CallOptions, Decision, FallbackEnd, Recorder, RunEnd, attempt_deadline, attempt_deadline_from,
    begin_attempts, check_breaker, check_options, check_throttle, decide, fallback_done,
    fallback_gate, limit_wait_until, panic_message, permit_refused, plan_retry, poll_caught,
    pool_rejected, refusal, retry_answer, retry_budget, try_permit, try_permit_into,
    warn_if_hedging_ignored, warn_if_retry_ignored,
};
use crate::command::run::{Interrupt, RunFn, Start};
use crate::command::{Classify, Outcome};
use crate::config::{HotSnapshot, IsolationStrategy};
use crate::error::HystrixError;
use crate::event::EventType;
use crate::hedging::{AttemptTicket, Race, RaceSlot, Racer, Racing};
use crate::isolation::adaptive::LimitStart;
use crate::isolation::priority::{Held, Priority};
use crate::registry::CommandState;
use crate::retry::{Again, RetryAnswer};

/// The command state an execution future works on: borrowed from its [`Command`](crate::Command)
/// (`execute_async`, `to_observable`), or owned when it must outlive the caller (`queue`,
/// `observe`).
pub(crate) enum StateRef<'c> {
    /// Borrowed for the life of the future.
    Borrowed(&'c Arc<CommandState>),
    /// Shared ownership, for a future spawned on an executor.
    Owned(Arc<CommandState>),
}

impl Deref for StateRef<'_> {
    type Target = Arc<CommandState>;

    #[inline]
    fn deref(&self) -> &Arc<CommandState> {
        match self {
            StateRef::Borrowed(state) => state,
            StateRef::Owned(state) => state,
        }
    }
}

pin_project! {
    /// Where an execution is.
    #[project = PhaseProj]
    #[project_replace = PhaseOwned]
    enum Phase<R, FB, Running, FFut, E, S> {
        /// Not polled yet: nothing has happened.
        Start { run: R, fallback: FB },
        /// The run is executing, raced against its deadline.
        Running {
            #[pin]
            running: Running,
            sleep: Option<Sleep>,
            deadline_ms: Option<u64>,
            timeout_ms: Option<u64>,
            fallback: FB,
            // The hedges racing this attempt (nothing for a single run).
            race: S,
        },
        /// Waiting out the delay before the next attempt, or, for the first attempt, for a
        /// place under the adaptive limit (boxed, and one variant for both: only retries and a
        /// full limit with a max wait need it, and a variant more would bloat every phase
        /// change).
        Paused {
            paused: Box<Paused<R, FB, E>>,
        },
        /// The fallback is executing.
        Fallback {
            #[pin]
            future: FFut,
            error: HystrixError<E>,
        },
        /// The outcome was returned.
        Done,
    }
}

/// What a Paused execution waits for.
enum Paused<R, FB, E> {
    /// The delay before a retry.
    Retry(Delay<FB, E>),
    /// A place under the adaptive limit, for the first attempt.
    Queued(Waiting<R, FB>),
}

/// A place found by a wait: the number in flight with it, and how its permit is held.
type Admitted = (u32, Held);

/// A first attempt waiting for a place under the adaptive limit: its run and fallback, and the
/// wait, which ends with the number in flight once it has a permit, or `None`.
struct Waiting<R, FB> {
    run: R,
    fallback: FB,
    wait: Pin<Box<dyn Future<Output = Option<Admitted>> + Send>>,
}

/// The delay before another attempt, with what the execution goes on with: the fallback, and
/// the last attempt's error (for the fallback if no attempt follows after all).
struct Delay<FB, E> {
    sleep: Sleep,
    fallback: FB,
    error: HystrixError<E>,
}

pin_project! {
    /// The future of an execution that resolves to its [`Outcome`] (response and execution
    /// result): what [`Execution::execute_async_outcome`](crate::Execution::execute_async_outcome)
    /// returns.
    ///
    /// Cold: nothing happens until it is first polled. Under SEMAPHORE isolation the run is
    /// polled (or, if blocking, called) inside this future; under THREAD it runs on the pool and
    /// this future waits for it. At the deadline the run is abandoned and the fallback, if any,
    /// is polled instead.
    ///
    /// # Cancel safety
    /// Dropping it before it completes drops the run (or fallback) future, releases the permits
    /// it holds, removes a still-queued pool task (a running one keeps its thread until it
    /// returns; its token is cancelled if `execution.isolation.thread.interruptOnFutureCancel`),
    /// and, if it had been polled, records CANCELLED.
    ///
    /// Usually named [`ExecuteAsyncOutcome`], which fills in `Running`, `FFut` and `E` from the
    /// run `R` and the fallback `FB`.
    #[must_use = "futures do nothing unless polled"]
    pub struct ExecutionFuture<'c, K, R, FB, Running, FFut, E, A, S>
    where
        Running: Interrupt,
    {
        #[pin]
        phase: Phase<R, FB, Running, FFut, E, S>,
        // The runs of later attempts (nothing for a single run).
        again: A,
        state: StateRef<'c>,
        classifier: K,
        options: CallOptions,
        recorder: Recorder,
        // Permits are released by hand (the future would otherwise borrow from itself).
        holds_permit: Option<Held>,
        holds_fallback_permit: bool,
    }

    impl<'c, K, R, FB, Running, FFut, E, A, S> PinnedDrop for ExecutionFuture<'c, K, R, FB, Running, FFut, E, A, S>
    where
        Running: Interrupt,
    {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            // Completed (or never polled): the phase is Done and nothing is held.
            if this.recorder.is_settled() && this.holds_permit.is_none() && !*this.holds_fallback_permit {
                return;
            }
            let state: &CommandState = this.state;
            if let PhaseProj::Running { mut running, .. } = this.phase.as_mut().project() {
                if !running.as_ref().get_ref().started() {
                    this.recorder.run_never_ran();
                }
                // Its end will not be decided: what chaos did to it is told now (a hedge in
                // flight beside it is not looked at).
                if running.injected() {
                    this.recorder.count_chaos_injected();
                }
                if state.properties.hot().load().interrupt_on_future_cancel() {
                    running.as_mut().interrupt();
                }
                // A trial whose blocking run goes on keeps its slot until the run stops.
                if let Some(generation) = this.recorder.trial_generation()
                    && running.hold_trial(generation)
                {
                    this.recorder.hand_over_trial();
                }
            }
            // The run or fallback goes first (and the hedges in flight: dropped, they stop), so
            // its permit is free before CANCELLED is seen.
            this.phase.set(Phase::Done);
            release_permits(state, this.holds_permit, this.holds_fallback_permit);
            this.recorder.cancel(state);
        }
    }
}

/// The future of an execution that resolves to its [`Outcome`]: what
/// [`Execution::execute_async_outcome`](crate::Execution::execute_async_outcome) returns (see
/// [`ExecutionFuture`]).
pub type ExecuteAsyncOutcome<'c, K, R, FB> = ExecutionFuture<
    'c,
    K,
    R,
    FB,
    <R as RunFn>::Running,
    <FB as AsyncFallback<<R as RunFn>::Output, <R as RunFn>::Error>>::Future,
    <R as RunFn>::Error,
    <R as RunFn>::Again,
    <<R as RunFn>::Again as Again>::Racing,
>;

#[inline(always)]
pub(crate) fn release_permits(
    state: &CommandState,
    permit: &mut Option<Held>,
    fallback_permit: &mut bool,
) {
    if let Some(held) = permit.take() {
        state.release_permit(held);
    }
    if std::mem::take(fallback_permit) {
        state.fallback_semaphore.give_back();
    }
}

impl<'c, K, R, FB, Running, FFut, E, A, S> ExecutionFuture<'c, K, R, FB, Running, FFut, E, A, S>
where
    R: RunFn<Running = Running, Error = E, Again = A>,
    FB: AsyncFallback<R::Output, E, Future = FFut>,
    Running: Interrupt,
{
    pub(crate) fn new(
        state: StateRef<'c>,
        classifier: K,
        mut run: R,
        fallback: FB,
        options: CallOptions,
    ) -> Self {
        let again = run.take_again();
        ExecutionFuture {
            phase: Phase::Start { run, fallback },
            again,
            state,
            classifier,
            options,
            recorder: Recorder::idle(),
            holds_permit: None,
            holds_fallback_permit: false,
        }
    }
}

impl<K, R, FB, Running, FFut, E, A, S> ExecutionFuture<'_, K, R, FB, Running, FFut, E, A, S>
where
    Running: Interrupt,
{
    /// The state of the execution's command.
    #[cfg(feature = "tower")]
    pub(crate) fn command_state(&self) -> &Arc<CommandState> {
        &self.state
    }
}

impl<K, R, FB, Running, FFut, E, A, S> Future
    for ExecutionFuture<'_, K, R, FB, Running, FFut, E, A, S>
where
    R: RunFn<Running = Running, Error = E, Again = A>,
    A: Again<Run: RunFn<Output = R::Output, Error = E, Running = Running>, Racing = S>,
    S: Racing<Running, E>,
    FB: AsyncFallback<R::Output, E, Future = FFut>,
    K: Classify<E>,
    Running: Interrupt + Future<Output = RunEnd<R::Output, E>>,
    FFut: Future<Output = Result<R::Output, FB::Error>>,
{
    type Output = Outcome<R::Output, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let state: &Arc<CommandState> = this.state;
        let rec = &mut *this.recorder;
        // Not begun yet (a first poll): the execution's span opens now; every poll enters it.
        let span = if rec.is_settled() {
            rec.open_span(state)
        } else {
            rec.span().cloned()
        };
        let _entered = span.as_ref().map(tracing::Span::enter);
        'poll: loop {
            // Each arm either returns, goes on with an attempt it started, or hands the failure
            // that ended one and the fallback to the code below.
            let (mut error, fallback) = match this.phase.as_mut().project() {
                PhaseProj::Start { .. } => 'start: {
                    let PhaseOwned::Start { run, fallback } =
                        this.phase.as_mut().project_replace(Phase::Done)
                    else {
                        unreachable!("matched Start above")
                    };
                    let props = state.properties.hot().load();
                    let isolation = props.isolation().unwrap_or(if R::BLOCKING {
                        IsolationStrategy::Thread
                    } else {
                        IsolationStrategy::Semaphore
                    });
                    // An open breaker's quick refusal (a retry-enabled run deposits in its
                    // budget even when refused: the full path).
                    if !A::RETRIES
                        && let Some((now_ms, tripped)) = refusal(state, &props, this.options)
                    {
                        rec.begin_refused(state, isolation, now_ms);
                        let error = HystrixError::short_circuited(state.key.clone(), tripped);
                        break 'start (error, fallback);
                    }
                    rec.begin(state, isolation);
                    if let Err(err) = check_options(state, rec, this.options) {
                        return Poll::Ready(rec.finish_now(state, Err(err)));
                    }
                    if A::RETRIES {
                        let hedgeable = !R::BLOCKING || isolation == IsolationStrategy::Thread;
                        begin_attempts(state, &props, rec, this.options, hedgeable);
                        if let Some(slot) = this.again.span() {
                            *slot = rec.attempt_span();
                        }
                    } else if props.hedging() {
                        warn_if_hedging_ignored(state);
                    }
                    match start_attempt(
                        state,
                        &props,
                        rec,
                        this.options,
                        isolation,
                        this.holds_permit,
                        run,
                        this.phase.as_mut(),
                        fallback,
                        true,
                    ) {
                        Ok(()) => {
                            if A::RETRIES && rec.hedge_max > 1 {
                                arm_race(state, rec, this.phase.as_mut(), true);
                            }
                            continue 'poll;
                        }
                        Err(Refused::Error(err, fallback)) => (err, fallback),
                        Err(Refused::Wait {
                            run,
                            fallback,
                            until_ms,
                        }) => {
                            queue_for_a_place(
                                state,
                                this.phase.as_mut(),
                                rec.priority,
                                run,
                                fallback,
                                until_ms,
                            );
                            continue 'poll;
                        }
                    }
                }
                PhaseProj::Paused { paused } if matches!(**paused, Paused::Queued(_)) => {
                    match poll_queued(
                        state,
                        rec,
                        this.options,
                        this.holds_permit,
                        this.phase.as_mut(),
                        cx,
                    ) {
                        Queued::Waiting => return Poll::Pending,
                        Queued::Started => {
                            if A::RETRIES && rec.hedge_max > 1 {
                                arm_race(state, rec, this.phase.as_mut(), true);
                            }
                            continue;
                        }
                        Queued::Refused(err, fallback) => (err, fallback),
                    }
                }
                PhaseProj::Paused { paused } => {
                    if let Paused::Retry(delay) = &mut **paused
                        && Pin::new(&mut delay.sleep).poll(cx).is_pending()
                    {
                        return Poll::Pending;
                    }
                    let PhaseOwned::Paused { paused } =
                        this.phase.as_mut().project_replace(Phase::Done)
                    else {
                        unreachable!("matched Paused above")
                    };
                    let Paused::Retry(Delay {
                        fallback, error, ..
                    }) = *paused
                    else {
                        unreachable!("a queued first attempt is polled above")
                    };
                    match this.again.next() {
                        // The factory panicked: the last attempt's error goes to the fallback.
                        None => {
                            rec.end_attempts();
                            (error, fallback)
                        }
                        Some(run) => {
                            drop(error);
                            rec.next_attempt(state.env.clock.now_ms());
                            let props = state.properties.hot().load();
                            let isolation = rec.isolation();
                            match start_attempt(
                                state,
                                &props,
                                rec,
                                this.options,
                                isolation,
                                this.holds_permit,
                                run,
                                this.phase.as_mut(),
                                fallback,
                                false,
                            ) {
                                Ok(()) => {
                                    if rec.hedge_max > 1 {
                                        arm_race(state, rec, this.phase.as_mut(), false);
                                    }
                                    continue;
                                }
                                Err(Refused::Error(err, fallback)) => (err, fallback),
                                Err(Refused::Wait { .. }) => {
                                    unreachable!("only an execution's first attempt waits")
                                }
                            }
                        }
                    }
                }
                // A hedging execution's attempts race each other (see the `hedging` module).
                PhaseProj::Running { race, .. } if A::RETRIES && race.is_racing() => {
                    match poll_race(
                        state,
                        rec,
                        &*this.classifier,
                        this.options,
                        this.again,
                        this.phase.as_mut(),
                        this.holds_permit,
                        cx,
                    ) {
                        RaceStep::Pending => return Poll::Pending,
                        RaceStep::Ended(outcome) => return Poll::Ready(outcome),
                        RaceStep::Failed(error) => {
                            let PhaseOwned::Running { fallback, .. } =
                                this.phase.as_mut().project_replace(Phase::Done)
                            else {
                                unreachable!("poll_race leaves Running when attempts failed")
                            };
                            (error, fallback)
                        }
                    }
                }
                PhaseProj::Running {
                    mut running,
                    sleep,
                    deadline_ms,
                    ..
                } => {
                    // A retry-enabled execution's attempt has a span of its own, when traced.
                    let attempt_span = if A::RETRIES {
                        this.again.span().and_then(|slot| slot.clone())
                    } else {
                        None
                    };
                    let entered = attempt_span.as_ref().map(tracing::Span::enter);
                    let polled = running.as_mut().poll(cx);
                    drop(entered);
                    let ended = match polled {
                        Poll::Ready(ended) => ended,
                        Poll::Pending => {
                            if Sleep::poll_deadline(sleep, &state.env.clock, *deadline_ms, cx)
                                .is_pending()
                            {
                                return Poll::Pending;
                            }
                            if state.properties.hot().load().interrupt_on_timeout() {
                                running.as_mut().interrupt();
                            }
                            RunEnd::TimedOut.injected_if(running.injected())
                        }
                    };
                    let deadline_ms = *deadline_ms;
                    if !running.as_ref().get_ref().started() {
                        rec.run_never_ran();
                    }
                    LimitStart::ran_from(&mut rec.limit_start, running.as_ref().get_ref());
                    // Drops the run and its timer now: at the deadline, before any fallback.
                    let PhaseOwned::Running {
                        timeout_ms,
                        fallback,
                        ..
                    } = this.phase.as_mut().project_replace(Phase::Done)
                    else {
                        unreachable!("matched Running above")
                    };
                    let end = state.env.clock.now_ms();
                    rec.run_ended(end);
                    release_permits(state, this.holds_permit, &mut false);
                    let ended = at_deadline(ended, deadline_ms, end);
                    match decide(state, rec, &*this.classifier, ended, timeout_ms, end) {
                        Decision::Value(value) => {
                            return Poll::Ready(rec.finish(state, end, Ok(value)));
                        }
                        Decision::Error(mut err) => {
                            if A::RETRIES {
                                err.set_attempts(rec.attempts());
                            }
                            return Poll::Ready(rec.finish(state, end, Err(err)));
                        }
                        Decision::Fallback(err) => {
                            if !A::RETRIES {
                                warn_if_retry_ignored(state);
                            }
                            (err, fallback)
                        }
                    }
                }
                PhaseProj::Fallback { future, .. } => {
                    let end = match poll_caught(future, cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(Ok(value))) => FallbackEnd::Value(value),
                        Poll::Ready(Ok(Err(error))) => FallbackEnd::Failed(error.into()),
                        Poll::Ready(Err(message)) => FallbackEnd::Panicked(message),
                    };
                    let PhaseOwned::Fallback { error, .. } =
                        this.phase.as_mut().project_replace(Phase::Done)
                    else {
                        unreachable!("matched Fallback above")
                    };
                    release_permits(state, &mut None, this.holds_fallback_permit);
                    let response = fallback_done(state, rec, error, end);
                    return Poll::Ready(rec.finish_now(state, response));
                }
                PhaseProj::Done => panic!("an execution future was polled after it completed"),
            };

            // The attempt loop: another attempt after a delay, or on to the fallback.
            if A::RETRIES
                && let Some(at_ms) = plan_retry(state, rec, &*this.classifier, &error)
            {
                if let Some(slot) = this.again.span() {
                    *slot = rec.attempt_span();
                }
                this.phase.set(Phase::Paused {
                    paused: Box::new(Paused::Retry(Delay {
                        sleep: Sleep::until(Arc::clone(&state.env.clock), at_ms),
                        fallback,
                        error,
                    })),
                });
                continue;
            }
            if A::RETRIES {
                error.set_attempts(rec.attempts());
            }

            // Step 6 (as `start_fallback`, written out: this is the async hot path).
            if !fallback_gate(state, rec, &mut error, fallback.is_present()) {
                return Poll::Ready(rec.finish_now(state, Err(error)));
            }
            *this.holds_fallback_permit = true;
            let end = match catch_unwind(AssertUnwindSafe(|| fallback.call(&error))) {
                Ok(Some(future)) => {
                    this.phase.set(Phase::Fallback { future, error });
                    continue;
                }
                Ok(None) => FallbackEnd::Missing,
                Err(panic) => FallbackEnd::Panicked(panic_message(panic)),
            };
            release_permits(state, &mut None, this.holds_fallback_permit);
            let response = fallback_done(state, rec, error, end);
            return Poll::Ready(rec.finish_now(state, response));
        }
    }
}

/// Why [`start_attempt`] did not start the run.
enum Refused<X, FB, E> {
    /// Refused: the error, with the fallback.
    Error(HystrixError<E>, FB),
    /// Beyond the adaptive limit, and it may wait for a place until `until_ms`.
    Wait { run: X, fallback: FB, until_ms: u64 },
}

/// Steps 1 to 3 of one attempt (breaker, deadline, isolation), and its run started: `phase`
/// is then Running; or why it was refused, with the fallback. Only with `may_wait` may an
/// attempt beyond the adaptive limit come back to wait for a place.
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn start_attempt<X: RunFn, R, FB, FFut, S: Default>(
    state: &Arc<CommandState>,
    props: &HotSnapshot,
    rec: &mut Recorder,
    options: &CallOptions,
    isolation: IsolationStrategy,
    holds_permit: &mut Option<Held>,
    run: X,
    phase: Pin<&mut Phase<R, FB, X::Running, FFut, X::Error, S>>,
    fallback: FB,
    may_wait: bool,
) -> Result<(), Refused<X, FB, X::Error>> {
    if let Err(err) =
        check_breaker(state, props, rec, options).and_then(|()| check_throttle(state, props, rec))
    {
        return Err(Refused::Error(err, fallback));
    }
    // Under THREAD with adaptive limits, the key's limit applies before the pool.
    if isolation == IsolationStrategy::Semaphore || props.adaptive() {
        if !try_permit(state, props, rec) {
            if may_wait && let Some(until_ms) = limit_wait_until(state, props, rec, options) {
                return Err(Refused::Wait {
                    run,
                    fallback,
                    until_ms,
                });
            }
            return Err(Refused::Error(permit_refused(state, props, rec), fallback));
        }
        *holds_permit = Some(rec.held);
    }
    launch_attempt(
        state,
        props,
        rec,
        options,
        isolation,
        holds_permit,
        run,
        phase,
        fallback,
    )
    .map_err(|(err, fallback)| Refused::Error(err, fallback))
}

/// The first attempt waits for a place under the adaptive limit until `until_ms`: `phase`
/// becomes Queued (out of line: only a full limit with a max wait comes here).
#[cold]
#[inline(never)]
fn queue_for_a_place<R, FB, Running, FFut, E, S>(
    state: &Arc<CommandState>,
    mut phase: Pin<&mut Phase<R, FB, Running, FFut, E, S>>,
    priority: Priority,
    run: R,
    fallback: FB,
    until_ms: u64,
) {
    let owned = Arc::clone(state);
    let wait = Box::pin(async move {
        owned
            .limiter
            .wait_for_permit(&owned, priority, until_ms)
            .await
    });
    phase.set(Phase::Paused {
        paused: Box::new(Paused::Queued(Waiting {
            run,
            fallback,
            wait,
        })),
    });
}

/// Where a first attempt waiting for a place is after a poll.
enum Queued<E, FB> {
    /// Still waiting.
    Waiting,
    /// It got a place and its run started: the phase is Running.
    Started,
    /// No place in time (or the pool refused it after all): the error, with the fallback.
    Refused(HystrixError<E>, FB),
}

/// Polls the wait of a Queued first attempt; once it has a place, starts its run.
#[cold]
#[allow(clippy::type_complexity)]
#[inline(never)]
fn poll_queued<R: RunFn, FB, FFut, S: Default>(
    state: &Arc<CommandState>,
    rec: &mut Recorder,
    options: &CallOptions,
    holds_permit: &mut Option<Held>,
    mut phase: Pin<&mut Phase<R, FB, R::Running, FFut, R::Error, S>>,
    cx: &mut Context<'_>,
) -> Queued<R::Error, FB> {
    let PhaseProj::Paused { paused } = phase.as_mut().project() else {
        unreachable!("poll_queued is called on a Paused phase")
    };
    let Paused::Queued(queued) = &mut **paused else {
        unreachable!("poll_queued is called on a queued first attempt")
    };
    let Poll::Ready(got) = queued.wait.as_mut().poll(cx) else {
        return Queued::Waiting;
    };
    let PhaseOwned::Paused { paused } = phase.as_mut().project_replace(Phase::Done) else {
        unreachable!("matched Paused above")
    };
    let Paused::Queued(Waiting { run, fallback, .. }) = *paused else {
        unreachable!("matched Queued above")
    };
    let props = state.properties.hot().load();
    let Some((in_flight, held)) = got else {
        return Queued::Refused(permit_refused(state, &props, rec), fallback);
    };
    rec.held = held;
    *holds_permit = Some(held);
    rec.limit_start = Some(LimitStart::new(state.env.clock.now_us(), in_flight));
    let isolation = rec.isolation();
    match launch_attempt(
        state,
        &props,
        rec,
        options,
        isolation,
        holds_permit,
        run,
        phase,
        fallback,
    ) {
        Ok(()) => Queued::Started,
        Err((err, fallback)) => Queued::Refused(err, fallback),
    }
}

/// The rest of [`start_attempt`] once the breaker and the key's limit admitted the attempt
/// (`holds_permit` set if a permit was needed): the run starts, `phase` is then Running; or
/// the pool refused it.
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn launch_attempt<X: RunFn, R, FB, FFut, S: Default>(
    state: &Arc<CommandState>,
    props: &HotSnapshot,
    rec: &mut Recorder,
    options: &CallOptions,
    isolation: IsolationStrategy,
    holds_permit: &mut Option<Held>,
    run: X,
    mut phase: Pin<&mut Phase<R, FB, X::Running, FFut, X::Error, S>>,
    fallback: FB,
) -> Result<(), (HystrixError<X::Error>, FB)> {
    let (timeout_ms, deadline_ms) = attempt_deadline(props, rec, options);
    let start = Start::attempt(state, props, isolation, deadline_ms, options.cancel_link());
    let running = match isolation {
        IsolationStrategy::Semaphore => {
            state.counters.started(rec.attempt_ms, state.running());
            run.start_here(start)
        }
        IsolationStrategy::Thread => match state
            .thread_pool()
            .and_then(|pool| run.start_on_pool(start, pool))
        {
            Ok(running) => running,
            Err(rejection) => {
                // The key's limit admitted it: that place is free again, and no sample.
                release_permits(state, holds_permit, &mut false);
                rec.limit_start = None;
                return Err((pool_rejected(state, rec, rejection), fallback));
            }
        },
    };
    rec.run_started(state);
    phase.set(Phase::Running {
        running,
        sleep: None,
        deadline_ms,
        timeout_ms,
        fallback,
        race: S::default(),
    });
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// Hedging (see the `hedging` module)

/// Where a hedging execution's race is after a poll.
enum RaceStep<T, E> {
    /// Attempts are in flight.
    Pending,
    /// An attempt's result won: the execution ended with this outcome.
    Ended(Outcome<T, E>),
    /// Every attempt of the round failed; this is the last one's error.
    Failed(HystrixError<E>),
}

/// The attempt that just started (the phase is Running) gets its race: hedges may start after
/// the hedging delay. `first`: it is the execution's first attempt.
#[cold]
fn arm_race<R, FB, Running: Interrupt, FFut, E, S: Racing<Running, E>>(
    state: &Arc<CommandState>,
    rec: &Recorder,
    phase: Pin<&mut Phase<R, FB, Running, FFut, E, S>>,
    first: bool,
) {
    if let PhaseProj::Running { race, .. } = phase.project()
        && let Some(RaceSlot(race)) = race.slot()
    {
        let now_ms = rec.attempt_ms;
        let delay_ms = state.hedging.delay_ms(&state.properties.load(), now_ms);
        *race = Some(Box::new(Race {
            primary_done: false,
            first,
            number: rec.attempts(),
            racers: Vec::new(),
            next_hedge: Some(Sleep::until(
                Arc::clone(&state.env.clock),
                now_ms.saturating_add(delay_ms),
            )),
            hedges_left: rec.hedge_max.saturating_sub(1),
            delay_ms,
            error: None,
        }));
    }
}

/// Polls a hedging execution's attempts: the round's first attempt (the phase's run) and its
/// hedges; starts a hedge when the delay passes. The first acceptable result ends the
/// execution and cancels the other attempts.
#[cold]
#[allow(clippy::too_many_arguments)]
fn poll_race<K, A, R, FB, Running, FFut, T, E, S>(
    state: &Arc<CommandState>,
    rec: &mut Recorder,
    classifier: &K,
    options: &CallOptions,
    again: &mut A,
    mut phase: Pin<&mut Phase<R, FB, Running, FFut, E, S>>,
    holds_permit: &mut Option<Held>,
    cx: &mut Context<'_>,
) -> RaceStep<T, E>
where
    K: Classify<E>,
    A: Again<Run: RunFn<Output = T, Error = E, Running = Running>>,
    Running: Interrupt + Future<Output = RunEnd<T, E>>,
    S: Racing<Running, E>,
{
    let clock = &state.env.clock;
    loop {
        let PhaseProj::Running {
            mut running,
            sleep,
            deadline_ms,
            timeout_ms,
            race,
            ..
        } = phase.as_mut().project()
        else {
            unreachable!("poll_race is called on a racing attempt")
        };
        let Some(RaceSlot(Some(race))) = race.slot() else {
            unreachable!("poll_race is called on a racing attempt")
        };
        let interrupt_on_timeout = || state.properties.hot().load().interrupt_on_timeout();

        // The round's first attempt.
        if !race.primary_done {
            let span = again.span().and_then(|slot| slot.clone());
            let entered = span.as_ref().map(tracing::Span::enter);
            let polled = running.as_mut().poll(cx);
            drop(entered);
            let ended = match polled {
                Poll::Ready(ended) => Some(ended),
                Poll::Pending => match Sleep::poll_deadline(sleep, clock, *deadline_ms, cx) {
                    Poll::Pending => None,
                    Poll::Ready(()) => {
                        if interrupt_on_timeout() {
                            running.as_mut().interrupt();
                        }
                        Some(RunEnd::TimedOut.injected_if(running.injected()))
                    }
                },
            };
            if let Some(ended) = ended {
                race.primary_done = true;
                if !running.as_ref().get_ref().started() {
                    rec.run_never_ran();
                }
                LimitStart::ran_from(&mut rec.limit_start, running.as_ref().get_ref());
                let end = clock.now_ms();
                rec.run_ended(end);
                release_permits(state, holds_permit, &mut false);
                if race.first {
                    state
                        .hedging
                        .record_first(end, end.saturating_sub(rec.attempt_ms));
                }
                let ended = at_deadline(ended, *deadline_ms, end);
                match decide(state, rec, classifier, ended, *timeout_ms, end) {
                    Decision::Fallback(err) => {
                        attempt_failed(state, classifier, race, err);
                        if !race.racers.is_empty() {
                            rec.count_attempt(state, end);
                        }
                    }
                    won => {
                        cancel_racers(state, rec, race);
                        rec.won_by(race.number);
                        phase.set(Phase::Done);
                        return RaceStep::Ended(won_outcome(state, rec, won, end));
                    }
                }
            }
        }

        // The hedges.
        let mut index = 0;
        while index < race.racers.len() {
            let racer = &mut race.racers[index];
            let Some(run) = racer.running.as_mut() else {
                index += 1;
                continue;
            };
            let entered = racer.span.as_ref().map(tracing::Span::enter);
            let polled = run.as_mut().poll(cx);
            drop(entered);
            let ended = match polled {
                Poll::Ready(ended) => ended,
                Poll::Pending => {
                    match Sleep::poll_deadline(&mut racer.sleep, clock, racer.deadline_ms, cx) {
                        Poll::Pending => {
                            index += 1;
                            continue;
                        }
                        Poll::Ready(()) => {
                            if interrupt_on_timeout() {
                                run.as_mut().interrupt();
                            }
                            RunEnd::TimedOut.injected_if(run.injected())
                        }
                    }
                }
            };
            let mut racer = race.racers.remove(index);
            // It ended: dropped without being interrupted.
            if let Some(run) = racer.running.take() {
                LimitStart::ran_from(&mut racer.attempt.limit_start, run.as_ref().get_ref());
            }
            let number = racer.number;
            let end = clock.now_ms();
            rec.swap_attempt(&mut racer.attempt);
            rec.run_ended(end);
            let ended = at_deadline(ended, racer.deadline_ms, end);
            let decision = decide(state, rec, classifier, ended, racer.timeout_ms, end);
            rec.swap_attempt(&mut racer.attempt);
            drop(racer);
            match decision {
                Decision::Fallback(err) => {
                    attempt_failed(state, classifier, race, err);
                    if !race.primary_done || !race.racers.is_empty() {
                        rec.count_attempt(state, end);
                    }
                }
                won => {
                    if !race.primary_done {
                        // The round's first attempt lost: cancelled, its permit freed.
                        running.as_mut().interrupt();
                        if !running.as_ref().get_ref().started() {
                            rec.run_never_ran();
                        }
                        if let Some(generation) = rec.trial_generation()
                            && running.as_mut().hold_trial(generation)
                        {
                            rec.hand_over_trial();
                        }
                        if race.first {
                            state
                                .hedging
                                .record_first(end, end.saturating_sub(rec.attempt_ms));
                        }
                        release_permits(state, holds_permit, &mut false);
                        rec.settle_release(state);
                        hedge_cancelled(state, rec, running.injected());
                    }
                    cancel_racers(state, rec, race);
                    rec.won_by(number);
                    phase.set(Phase::Done);
                    return RaceStep::Ended(won_outcome(state, rec, won, end));
                }
            }
        }

        // Every attempt of the round failed.
        if race.primary_done && race.racers.is_empty() {
            return match race.error.take() {
                Some(error) => RaceStep::Failed(error),
                None => unreachable!("a failed attempt left its error"),
            };
        }

        // The next hedge, when its delay has passed.
        let Some(timer) = race.next_hedge.as_mut() else {
            return RaceStep::Pending;
        };
        if Pin::new(timer).poll(cx).is_pending() {
            return RaceStep::Pending;
        }
        race.hedges_left = race.hedges_left.saturating_sub(1);
        let now_ms = clock.now_ms();
        race.next_hedge = (race.hedges_left > 0)
            .then(|| Sleep::until(Arc::clone(clock), now_ms.saturating_add(race.delay_ms)));
        match start_hedge(state, rec, options, again, now_ms) {
            Ok(racer) => race.racers.push(racer),
            Err(HedgeSkip::Now) => {}
            // The factory has no more runs (it panicked): no more hedges in this round.
            Err(HedgeSkip::NoMoreRuns) => {
                race.hedges_left = 0;
                race.next_hedge = None;
            }
        }
    }
}

/// An attempt of the round failed with `err`. The round keeps the failure that says most about
/// retrying (one whose answer is never, else the longest minimum delay, else the latest), so a
/// `Retry-After` or a "never" is not lost to a later plain failure; an answer of never or of
/// overload also ends the round's hedging.
fn attempt_failed<K, Running: Interrupt, E>(
    state: &CommandState,
    classifier: &K,
    race: &mut Race<Running, E>,
    err: HystrixError<E>,
) where
    K: Classify<E>,
{
    let answer = retry_answer(state, classifier, &err);
    if !answer.is_retryable() || answer.is_overload() {
        race.hedges_left = 0;
        race.next_hedge = None;
    }
    let rank = |answer: &RetryAnswer| (!answer.is_retryable(), answer.min_delay());
    race.error = Some(match race.error.take() {
        Some(kept) if rank(&retry_answer(state, classifier, &kept)) > rank(&answer) => kept,
        _ => err,
    });
}

/// Why no hedge started when its delay passed.
enum HedgeSkip {
    /// The breaker, the bulkhead or the budget refused this one.
    Now,
    /// The factory made no run (it panicked).
    NoMoreRuns,
}

/// How a run that ended at `end` counts: one that ends at or past its deadline is a TIMEOUT,
/// whatever it returned (or however it panicked).
#[inline(always)]
fn at_deadline<T, E>(ended: RunEnd<T, E>, deadline_ms: Option<u64>, end: u64) -> RunEnd<T, E> {
    match ended {
        _ if deadline_ms.is_some_and(|deadline| end >= deadline) => ended.into_timeout(),
        ended => ended,
    }
}

/// The outcome of a winning attempt's decision (a value, or an error that skips the fallback).
fn won_outcome<T, E>(
    state: &CommandState,
    rec: &mut Recorder,
    won: Decision<T, E>,
    end: u64,
) -> Outcome<T, E> {
    let response = match won {
        Decision::Value(value) => Ok(value),
        Decision::Error(mut err) | Decision::Fallback(mut err) => {
            err.set_attempts(rec.attempts());
            Err(err)
        }
    };
    rec.finish(state, end, response)
}

/// The hedges in flight lost: each cancelled (token cancelled, run dropped, permit freed) and
/// recorded as HEDGE_CANCELLED.
fn cancel_racers<Running: Interrupt, E>(
    state: &CommandState,
    rec: &mut Recorder,
    race: &mut Race<Running, E>,
) {
    for mut racer in race.racers.drain(..) {
        let injected = racer.injected();
        if let Some(running) = racer.running.as_mut() {
            running.as_mut().interrupt();
        }
        drop(racer);
        hedge_cancelled(state, rec, injected);
    }
}

/// An attempt lost the race: HEDGE_CANCELLED, and CHAOS_INJECTED if chaos changed it (its
/// end is never decided).
fn hedge_cancelled(state: &CommandState, rec: &mut Recorder, injected: bool) {
    rec.event(state, EventType::HedgeCancelled);
    if injected {
        rec.count_chaos_injected();
    }
}

/// Starts a hedge at `now_ms`, if the breaker is CLOSED, an execution permit (SEMAPHORE) or a
/// pool thread (THREAD) is free, and the retry budget grants it; otherwise skips it silently,
/// without spending budget or making a run.
fn start_hedge<A, Running: Interrupt>(
    state: &Arc<CommandState>,
    rec: &mut Recorder,
    options: &CallOptions,
    again: &mut A,
    now_ms: u64,
) -> Result<Racer<Running>, HedgeSkip>
where
    A: Again<Run: RunFn<Running = Running>>,
{
    let props = state.properties.hot().load();
    let site = rec.site(state);
    let breaker = site.breaker();
    if breaker.is_open(&props) {
        return Err(HedgeSkip::Now);
    }
    // Throttling draws for a hedge too (before the breaker, so no ticket to give back): a
    // throttled hedge is skipped, counted as a request.
    if props.throttle()
        && state
            .throttle
            .admit(state.properties.hot(), now_ms)
            .is_err()
    {
        return Err(HedgeSkip::Now);
    }
    let ticket = match breaker.attempt(site, &props, now_ms) {
        Admission::Allowed(Ticket::Trial(generation)) => {
            // The breaker is testing the dependency: no hedge beside its trials.
            breaker.release(Ticket::Trial(generation));
            return Err(HedgeSkip::Now);
        }
        Admission::Allowed(ticket) => ticket,
        Admission::Denied(_) => return Err(HedgeSkip::Now),
    };
    let (timeout_ms, deadline_ms) = attempt_deadline_from(&props, rec, options, now_ms);
    let isolation = rec.isolation();
    let mut racer = Racer {
        number: rec.attempts().saturating_add(1),
        running: None,
        attempt: AttemptTicket {
            ticket,
            generation: ticket.generation(),
            attempt_ms: now_ms,
            limit_start: None,
            slow_track: Default::default(),
        },
        deadline_ms,
        timeout_ms,
        sleep: None,
        span: None,
        state: Arc::clone(state),
        holds_permit: None,
    };
    // Under THREAD with adaptive limits, the key's limit applies before the pool.
    if isolation == IsolationStrategy::Semaphore || props.adaptive() {
        let Some(held) =
            try_permit_into(state, &props, rec.priority, &mut racer.attempt.limit_start)
        else {
            return Err(HedgeSkip::Now);
        };
        racer.holds_permit = Some(held);
    }
    match isolation {
        IsolationStrategy::Semaphore => {}
        // The pool is asked for room now, before the budget and the factory are: it may
        // still refuse when the run is submitted (another caller took the slot meanwhile).
        IsolationStrategy::Thread => {
            if !state
                .thread_pool()
                .is_ok_and(|pool| pool.has_room(<A::Run as RunFn>::BLOCKING))
            {
                return Err(HedgeSkip::Now);
            }
        }
    }
    // Asked last, so that a hedge refused a permit spends none of it (dropping the racer gives
    // the permit back).
    let full = state.properties.load();
    if !retry_budget(state, &full).try_withdraw(
        now_ms,
        full.retry_budget_percent,
        full.retry_budget_min_per_second,
    ) {
        return Err(HedgeSkip::Now);
    }
    let Some(run) = again.next() else {
        return Err(HedgeSkip::NoMoreRuns);
    };
    let start = Start::attempt(state, &props, isolation, deadline_ms, None);
    let running = match isolation {
        IsolationStrategy::Semaphore => {
            state.counters.started(now_ms, state.running());
            run.start_here(start)
        }
        IsolationStrategy::Thread => state
            .thread_pool()
            .and_then(|pool| run.start_on_pool(start, pool))
            .map_err(|_| HedgeSkip::Now)?,
    };
    racer.running = Some(Box::pin(running));
    rec.hedge_started(state);
    rec.run_started(state);
    racer.span = rec.attempt_span();
    Ok(racer)
}

pin_project! {
    /// A future that resolves to the response (value or error) of an outcome future: what
    /// [`Execution::execute_async`](crate::Execution::execute_async) returns, as
    /// [`ExecuteAsync`]. Cold; dropping it cancels, as [`ExecutionFuture`].
    #[must_use = "futures do nothing unless polled"]
    pub struct OutcomeResponse<F> {
        #[pin]
        inner: F,
    }
}

/// The future of an execution that resolves to its value or error: what
/// [`Execution::execute_async`](crate::Execution::execute_async) returns.
pub type ExecuteAsync<'c, K, R, FB> = OutcomeResponse<ExecuteAsyncOutcome<'c, K, R, FB>>;

impl<F> OutcomeResponse<F> {
    pub(crate) fn new(inner: F) -> Self {
        OutcomeResponse { inner }
    }
}

impl<F, T, E> Future for OutcomeResponse<F>
where
    F: Future<Output = Outcome<T, E>>,
{
    type Output = Result<T, HystrixError<E>>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx).map(Outcome::into_response)
    }
}
