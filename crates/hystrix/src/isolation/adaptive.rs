//! A command key's adaptive concurrency limit (`execution.isolation.adaptive.*`): the
//! algorithm fed with samples of the executions it admitted, and the executions waiting for a
//! place.
//!
//! Admission itself is the key's execution semaphore, read against the lower of
//! `maxConcurrentRequests` and the limit kept here (published in the key's hot properties), so
//! an admitted execution is counted, and released on every path, exactly as under a fixed
//! semaphore. This module adds what only adaptive limits need:
//!
//! - [`Limiter::on_sample`]: an admitted execution ended with a run time and maybe a drop; the
//!   algorithm (under a lock taken once per sample, never at admission) moves the limit;
//! - [`Limiter::wait_for_permit`]: an execution beyond the limit waits, up to
//!   `maxWaitInMilliseconds` on the registry's clock, in a queue of at most `maxQueueSize`;
//!   each release (and each rise of the limit) wakes the longest waiter, which then tries to
//!   take a permit; a property change that raises the bound wakes them all; a dropped waiter
//!   leaves the queue at once.

use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;

use crate::clock::Sleep;
use crate::command::run::Interrupt;
use crate::isolation::priority::{Held, Priority};
use crate::limit::{AdaptiveAlgorithm, Algorithm, LimitAlgorithm, Sample, Windowed};
use crate::registry::CommandState;

/// The adaptive limit's moving parts of one command key.
#[derive(Debug, Default)]
pub(crate) struct Limiter {
    algorithm: Mutex<Option<Current>>,
    /// Woken by releases and rises of the limit (FIFO, one waiter per notification).
    released: tokio::sync::Notify,
}

/// The algorithm in use, and the properties' generation it was built from.
#[derive(Debug)]
struct Current {
    algorithm: Windowed<Algorithm>,
    kind: AdaptiveAlgorithm,
    generation: u32,
    /// The limit last reported to `tracing` (a move of at least a tenth is reported).
    reported: u32,
}

/// When an admitted execution started and how many were in flight then, itself included: what
/// its sample needs besides its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LimitStart {
    /// The precise clock at admission, in µs ([`Clock::now_us`](crate::clock::Clock::now_us)).
    pub(crate) at_us: u64,
    /// At least 1 (itself), so an `Option<LimitStart>` takes no more room than one.
    pub(crate) in_flight: std::num::NonZeroU32,
}

impl LimitStart {
    /// An admission now (`at_us`) with `in_flight` in flight, itself included.
    pub(crate) fn new(at_us: u64, in_flight: u32) -> Self {
        LimitStart {
            at_us,
            in_flight: std::num::NonZeroU32::new(in_flight).unwrap_or(std::num::NonZeroU32::MIN),
        }
    }

    /// The run of an attempt admitted at `start` ended: if it began later than its admission
    /// (a pool task that waited in the pool's queue, behind other keys' tasks), its sample
    /// counts from when it began.
    pub(crate) fn ran_from<R: Interrupt + ?Sized>(start: &mut Option<LimitStart>, run: &R) {
        if let Some(start) = start.as_mut()
            && let Some(began_us) = run.started_us()
        {
            start.at_us = start.at_us.max(began_us);
        }
    }
}

impl Limiter {
    /// An admitted execution of `state` ended: `start` is when it was admitted, `dropped` says
    /// whether it timed out or its error said overload. Moves the limit and wakes a waiter if
    /// it rose.
    pub(crate) fn on_sample(&self, state: &CommandState, start: LimitStart, dropped: bool) {
        let now_us = state.env.clock.now_us();
        let sample = Sample::new(
            std::time::Duration::from_micros(now_us.saturating_sub(start.at_us)),
            start.in_flight.get(),
            dropped,
        );
        let hot = state.properties.hot();
        let (before, after) = {
            let mut current = self.algorithm.lock();
            let generation = hot.generation();
            if current.as_ref().is_none_or(|c| c.generation != generation) {
                let props = state.properties.load();
                let kind = props.execution_isolation_adaptive_algorithm;
                // Validated when set; a build that fails anyway keeps the algorithm in use.
                match Algorithm::windowed_from_properties(&props, kind, Some(hot.adaptive_limit()))
                {
                    Ok(algorithm) => {
                        let reported = algorithm.limit();
                        *current = Some(Current {
                            algorithm,
                            kind,
                            generation,
                            reported,
                        });
                    }
                    Err(err) => {
                        tracing::error!(command = %state.key, error = %err, "hystrix: adaptive limit not rebuilt");
                    }
                }
            }
            let Some(current) = current.as_mut() else {
                return;
            };
            let before = hot.adaptive_limit();
            let after = current.algorithm.on_sample(sample);
            if after != before {
                hot.set_adaptive_limit(after);
            }
            if after.abs_diff(current.reported) >= (current.reported / 10).max(1) {
                tracing::info!(
                    target: "hystrix::limit",
                    command = %state.key,
                    algorithm = current.kind.name(),
                    from = current.reported,
                    to = after,
                    "adaptive concurrency limit moved"
                );
                current.reported = after;
            }
            (before, after)
        };
        if after > before {
            for _ in 0..(after - before).min(state.limit_waiting.load(Ordering::SeqCst)) {
                self.released.notify_one();
            }
        }
    }

    /// A permit was given back while executions wait: the longest waiter tries for it, or
    /// every waiter (`all`: under priority reserves the longest may be of a class the place
    /// is not for).
    #[cold]
    pub(crate) fn wake(&self, all: bool) {
        if all {
            self.released.notify_waiters();
        } else {
            self.released.notify_one();
        }
    }

    /// Waits for an execution permit of `state` for a call of `priority` until `until_ms` on
    /// its clock, in the queue of waiters if it has room. Returns the number in flight with
    /// this one (its permit taken: give it back as any), or `None` when the queue was full or
    /// the time passed.
    pub(crate) async fn wait_for_permit(
        &self,
        state: &CommandState,
        priority: Priority,
        until_ms: u64,
    ) -> Option<(u32, Held)> {
        let hot = state.properties.hot();
        let waiting = &state.limit_waiting;
        // Joins only while there is room: the count never reads above maxQueueSize, not even
        // for an instant (it is a gauge).
        let max_queue = hot.adaptive_max_queue();
        if waiting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max_queue).then_some(n + 1)
            })
            .is_err()
        {
            return None;
        }
        // Leaves the queue on every exit: a permit, the time passing, or the future dropped.
        struct Leave<'a>(&'a AtomicU32);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _leave = Leave(waiting);
        let mut sleep = std::pin::pin!(Sleep::until(
            std::sync::Arc::clone(&state.env.clock),
            until_ms
        ));
        loop {
            let mut released = std::pin::pin!(self.released.notified());
            let mut raised = std::pin::pin!(hot.bound_raised().notified());
            // In the queues before looking, so a release or a raised bound (a property change)
            // after the look wakes this waiter.
            released.as_mut().enable();
            raised.as_mut().enable();
            if let Some(taken) = state.take_permit(&hot.load(), priority) {
                return Some(taken);
            }
            let woken = std::future::poll_fn(|cx| {
                if released.as_mut().poll(cx).is_ready() || raised.as_mut().poll(cx).is_ready() {
                    return std::task::Poll::Ready(true);
                }
                sleep.as_mut().poll(cx).map(|()| false)
            })
            .await;
            if !woken {
                // The time passed: a last look (a release at the same instant counts).
                return state.take_permit(&hot.load(), priority);
            }
        }
    }
}
