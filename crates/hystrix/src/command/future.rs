//! The futures of async executions: the pipeline's steps taken one poll at a time.
//!
//! A hand-written state machine rather than an `async fn`: it stays small (the run, its timer,
//! the permit and, later, the fallback share one slot), it has a name a `tower::Service` can
//! return, and its drop behaviour is spelled out in one place.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::clock::Sleep;
use crate::command::execution::AsyncFallback;
use crate::command::pipeline::{
    CallOptions, Decision, FallbackEnd, Recorder, RunEnd, check_options, decide, fallback_done,
    fallback_permit, panic_message, poll_caught, timeout_ms, try_admit,
};
use crate::command::{Classify, Outcome};
use crate::config::IsolationStrategy;
use crate::error::{FailureType, HystrixError};
use crate::isolation::semaphore::Permit;
use crate::registry::CommandState;

/// A future returning `Result<Self::Ok, Self::Error>`: what an async run is.
pub trait RunFuture: Future<Output = Result<Self::Ok, Self::Error>> {
    /// The value of a successful run.
    type Ok;
    /// The run's error.
    type Error;
}

impl<F, T, E> RunFuture for F
where
    F: Future<Output = Result<T, E>>,
{
    type Ok = T;
    type Error = E;
}

pin_project! {
    /// Where an async execution is.
    #[project = PhaseProj]
    #[project_replace = PhaseOwned]
    enum Phase<'c, Fut, FB>
    where
        Fut: RunFuture,
        FB: AsyncFallback<Fut::Ok, Fut::Error>,
    {
        /// Not polled yet: nothing has happened.
        Start { run: Fut, fallback: FB },
        /// The run is executing under its permit, raced against its deadline.
        Running {
            #[pin]
            run: Fut,
            sleep: Option<Sleep>,
            deadline_ms: Option<u64>,
            timeout_ms: Option<u64>,
            permit: Permit<'c>,
            fallback: FB,
        },
        /// The fallback is executing under its permit.
        Fallback {
            #[pin]
            future: FB::Future,
            error: HystrixError<Fut::Error>,
            permit: Permit<'c>,
        },
        /// The outcome was returned.
        Done,
    }
}

pin_project! {
    /// The future of [`Execution::execute_async_outcome`](crate::Execution::execute_async_outcome):
    /// resolves to the [`Outcome`] (response and execution result).
    ///
    /// Cold: nothing happens until it is first polled. The run is polled inside this future; at
    /// the deadline it is dropped and the fallback, if any, is polled instead.
    ///
    /// # Cancel safety
    /// Dropping it before it completes drops the run (or fallback) future, releases the permits
    /// it holds, and, if it had been polled, records CANCELLED.
    #[must_use = "futures do nothing unless polled"]
    pub struct ExecuteAsyncOutcome<'c, C, Fut, FB>
    where
        Fut: RunFuture,
        FB: AsyncFallback<Fut::Ok, Fut::Error>,
    {
        // Declared first so it drops first: permits are free before CANCELLED is reported.
        #[pin]
        phase: Phase<'c, Fut, FB>,
        recorder: Recorder<'c>,
        state: &'c CommandState,
        classifier: &'c C,
        options: CallOptions,
    }
}

impl<'c, C, Fut, FB> ExecuteAsyncOutcome<'c, C, Fut, FB>
where
    Fut: RunFuture,
    FB: AsyncFallback<Fut::Ok, Fut::Error>,
{
    pub(crate) fn new(
        state: &'c CommandState,
        classifier: &'c C,
        run: Fut,
        fallback: FB,
        options: CallOptions,
    ) -> Self {
        ExecuteAsyncOutcome {
            phase: Phase::Start { run, fallback },
            recorder: Recorder::idle(state),
            state,
            classifier,
            options,
        }
    }
}

impl<'c, C, Fut, FB> Future for ExecuteAsyncOutcome<'c, C, Fut, FB>
where
    Fut: RunFuture,
    FB: AsyncFallback<Fut::Ok, Fut::Error>,
    C: Classify<Fut::Error>,
{
    type Output = Outcome<Fut::Ok, Fut::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let state: &'c CommandState = this.state;
        loop {
            // Each arm either returns, or hands a failure and the fallback to the code below.
            let (mut error, fallback) = match this.phase.as_mut().project() {
                PhaseProj::Start { .. } => {
                    let PhaseOwned::Start { run, fallback } =
                        this.phase.as_mut().project_replace(Phase::Done)
                    else {
                        unreachable!("matched Start above")
                    };
                    let rec = &mut *this.recorder;
                    rec.begin(IsolationStrategy::Semaphore);
                    let props = state.properties.hot().load();
                    let admitted = check_options(state, this.options)
                        .and_then(|()| try_admit(state, &props, rec));
                    match admitted {
                        Err(err) if err.failure_type() == FailureType::Misuse => {
                            return Poll::Ready(rec.finish_now(Err(err)));
                        }
                        Err(err) => (err, fallback),
                        Ok(permit) => {
                            let timeout_ms = timeout_ms(&props, this.options);
                            rec.run_started();
                            this.phase.set(Phase::Running {
                                run,
                                sleep: None,
                                deadline_ms: timeout_ms.map(|ms| rec.start_ms.saturating_add(ms)),
                                timeout_ms,
                                permit,
                                fallback,
                            });
                            continue;
                        }
                    }
                }
                PhaseProj::Running {
                    run,
                    sleep,
                    deadline_ms,
                    ..
                } => {
                    let ended = match poll_caught(run, cx) {
                        Poll::Ready(Ok(result)) => RunEnd::Returned(result),
                        Poll::Ready(Err(message)) => RunEnd::Panicked(message),
                        Poll::Pending => {
                            let Some(deadline) = *deadline_ms else {
                                return Poll::Pending;
                            };
                            // Armed only once the run turned out not to be ready at once.
                            let sleep = sleep.get_or_insert_with(|| {
                                Sleep::until(Arc::clone(&state.env.clock), deadline)
                            });
                            if Pin::new(sleep).poll(cx).is_pending() {
                                return Poll::Pending;
                            }
                            RunEnd::TimedOut
                        }
                    };
                    // Drops the run and its timer now: at the deadline, before any fallback.
                    let PhaseOwned::Running {
                        timeout_ms,
                        permit,
                        fallback,
                        ..
                    } = this.phase.as_mut().project_replace(Phase::Done)
                    else {
                        unreachable!("matched Running above")
                    };
                    let rec = &mut *this.recorder;
                    let end = state.env.clock.now_ms();
                    rec.run_ended(end);
                    drop(permit);
                    match decide(state, rec, *this.classifier, ended, timeout_ms, end) {
                        Decision::Value(value) => return Poll::Ready(rec.finish(end, Ok(value))),
                        Decision::Error(err) => return Poll::Ready(rec.finish(end, Err(err))),
                        Decision::Fallback(err) => (err, fallback),
                    }
                }
                PhaseProj::Fallback { future, .. } => {
                    let end = match poll_caught(future, cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(Ok(value))) => FallbackEnd::Value(value),
                        Poll::Ready(Ok(Err(error))) => FallbackEnd::Failed(error.into()),
                        Poll::Ready(Err(message)) => FallbackEnd::Panicked(message),
                    };
                    let PhaseOwned::Fallback { error, permit, .. } =
                        this.phase.as_mut().project_replace(Phase::Done)
                    else {
                        unreachable!("matched Fallback above")
                    };
                    drop(permit);
                    let rec = &mut *this.recorder;
                    let response = fallback_done(rec, error, end);
                    return Poll::Ready(rec.finish_now(response));
                }
                PhaseProj::Done => panic!("an execution future was polled after it completed"),
            };

            let rec = &mut *this.recorder;
            let Some(permit) = fallback_permit(state, rec, &mut error, fallback.is_present())
            else {
                return Poll::Ready(rec.finish_now(Err(error)));
            };
            let end = match catch_unwind(AssertUnwindSafe(|| fallback.call(&error))) {
                Ok(Some(future)) => {
                    this.phase.set(Phase::Fallback {
                        future,
                        error,
                        permit,
                    });
                    continue;
                }
                Ok(None) => FallbackEnd::Missing,
                Err(panic) => FallbackEnd::Panicked(panic_message(panic)),
            };
            drop(permit);
            let response = fallback_done(rec, error, end);
            return Poll::Ready(rec.finish_now(response));
        }
    }
}

pin_project! {
    /// The future of [`Execution::execute_async`](crate::Execution::execute_async): resolves to
    /// the value or the error. Cold; dropping it cancels, as [`ExecuteAsyncOutcome`].
    #[must_use = "futures do nothing unless polled"]
    pub struct ExecuteAsync<'c, C, Fut, FB>
    where
        Fut: RunFuture,
        FB: AsyncFallback<Fut::Ok, Fut::Error>,
    {
        #[pin]
        inner: ExecuteAsyncOutcome<'c, C, Fut, FB>,
    }
}

impl<'c, C, Fut, FB> ExecuteAsync<'c, C, Fut, FB>
where
    Fut: RunFuture,
    FB: AsyncFallback<Fut::Ok, Fut::Error>,
{
    pub(crate) fn new(inner: ExecuteAsyncOutcome<'c, C, Fut, FB>) -> Self {
        ExecuteAsync { inner }
    }
}

impl<C, Fut, FB> Future for ExecuteAsync<'_, C, Fut, FB>
where
    Fut: RunFuture,
    FB: AsyncFallback<Fut::Ok, Fut::Error>,
    C: Classify<Fut::Error>,
{
    type Output = Result<Fut::Ok, HystrixError<Fut::Error>>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx).map(Outcome::into_response)
    }
}
