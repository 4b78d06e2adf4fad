//! Hedging: racing another attempt against a slow one ("The Tail at Scale", Dean and Barroso;
//! Polly v8's hedging strategy, Envoy's hedged requests).
//!
//! A hedgeable execution is built from a **factory** of runs, as a retryable one
//! ([`Command::run_retryable`](crate::Command::run_retryable),
//! [`run_cancellable_retryable`](crate::Command::run_cancellable_retryable),
//! [`run_async_retryable`](crate::Command::run_async_retryable)). With `hedging.maxAttempts`
//! over 1, an attempt that has not ended after the hedging delay gets another one started
//! beside it, up to `hedging.maxAttempts` attempts in flight together (the first included).
//! The first **acceptable** result wins: a value, or an error that goes to no fallback (a bad
//! request, an ignored error). The other attempts are then cancelled: their futures dropped,
//! their tokens cancelled, their permits freed, each recorded as `HEDGE_CANCELLED` (not
//! terminal, not a failure, not a cancellation of the execution: no hook unsubscribe). An
//! attempt that fails (FAILURE, TIMEOUT) while others are still in flight is recorded and
//! counted for health at once, and the others go on; when every attempt has failed, the
//! execution goes on as one failed attempt: to the retry loop if `retry.*` allows another
//! round (each round is hedged again), else to its fallback.
//!
//! **When a hedge starts**: only while the breaker is CLOSED, an execution permit (SEMAPHORE)
//! or an idle pool thread (THREAD: a hedge never waits in the queue behind the attempt it
//! races) is free, and the retry budget grants it (hedges spend the same budget as retries).
//! Otherwise that hedge is skipped silently: no SHORT_CIRCUITED or rejection is recorded on an
//! execution that may still succeed. A failed attempt whose [`RetryAnswer`] says never or
//! overload ends the round's hedging, and the round keeps the failure that says most about
//! retrying (never, else the longest minimum delay), whichever attempt ended last; a factory
//! that panics ends it too. Each hedge is `HEDGE` on the execution and has its own breaker
//! ticket: each attempt that ends is one request for health. A hedge holds a permit or a pool
//! thread as any attempt: size the bulkhead for the hedges in flight.
//!
//! **Times**: the request log's time, the execution time and latency are the winning
//! attempt's run; the total time (and latency) is what the caller waited.
//!
//! [`RetryAnswer`]: crate::retry::RetryAnswer
//!
//! **Delay**: `hedging.delayInMilliseconds` (default 100 ms), or, with `hedging.delayPercentile`
//! above 0, that percentile of the key's **first-attempt** latency over the last
//! `metrics.rollingStats.timeInMilliseconds`, recomputed once per
//! `metrics.healthSnapshot.intervalInMilliseconds` from the intervals completed so far (the
//! fixed delay until there are enough first attempts that the percentile is not the slowest
//! one: 100 ÷ (100 − percentile), e.g. 20 for p95, 100 for p99). A first attempt that loses the race is recorded at the
//! time it was cancelled, a lower bound of its latency: the percentiles up to the one the delay
//! uses stay exact, since it was cancelled after the delay.
//!
//! **Runs that can run side by side**: async runs, and blocking or cancellable runs under THREAD
//! isolation. A blocking run under SEMAPHORE isolation executes on the caller's thread (or, in
//! an async execution, blocks the task polling it) and cannot be hedged: its `hedging.*`
//! properties are ignored, with a warning logged once per key; so are they for runs not made by
//! a factory, and for calls made with [`Execution::no_retry`](crate::Execution::no_retry) (a
//! call that must not be repeated must not be hedged either).
//!
//! **Time**: every attempt is bounded by the execution deadline (fixed when the execution
//! starts), and by its own `retry.attemptTimeoutInMilliseconds` when retries are on. A blocking
//! hedge that loses keeps its pool thread until it returns (its token is cancelled): size the
//! pool for `hedging.maxAttempts` attempts per execution.
//!
//! **Dropping** the execution cancels every attempt in flight: the execution is CANCELLED, as
//! any dropped execution; its attempts are not recorded as HEDGE_CANCELLED.
//!
//! ```
//! use hystrix::testing::TestRegistry;
//! use hystrix::Command;
//!
//! let test = TestRegistry::new();
//! let search = Command::builder("Search")
//!     .group("Search")
//!     .property("hedging.maxAttempts", 2)
//!     // 0 ms: the hedge starts at once, beside the first attempt (Polly's parallel mode).
//!     .property("hedging.delayInMilliseconds", 0)
//!     .build_in(test.registry())?;
//! let mut replica = 0;
//! let outcome = futures::executor::block_on(
//!     search
//!         .run_async_retryable(move || {
//!             replica += 1;
//!             let this = replica;
//!             async move {
//!                 if this == 1 {
//!                     std::future::pending::<()>().await; // replica 1 never answers
//!                 }
//!                 Ok::<_, std::io::Error>(format!("replica {this}"))
//!             }
//!         })
//!         .execute_async_outcome(),
//! );
//! assert_eq!(outcome.response().as_ref().unwrap(), "replica 2");
//! assert_eq!(
//!     outcome.execution_result().execution_events().to_string(),
//!     "SUCCESS, HEDGE, HEDGE_CANCELLED"
//! );
//! # Ok::<(), hystrix::ConfigError>(())
//! ```

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::circuit::Ticket;
use crate::clock::Sleep;
use crate::command::run::Interrupt;
use crate::config::CommandProperties;
use crate::error::HystrixError;
use crate::metrics::latency::{RollingLatency, value_at_percentile};
use crate::registry::CommandState;

/// What a command key keeps for hedging: the first-attempt latencies the adaptive delay reads,
/// and the delay computed last.
#[derive(Debug)]
pub(crate) struct HedgeState {
    /// First-attempt latencies, in buckets of the health interval (made at the first
    /// execution with an adaptive delay).
    latency: OnceLock<RollingLatency>,
    /// The health interval (number since the epoch) the adaptive delay was computed in;
    /// `u64::MAX` before the first.
    computed_interval: AtomicU64,
    /// The adaptive delay in ms; `u64::MAX` while there is no data.
    adaptive_ms: AtomicU64,
    /// A hedging property set on a key whose runs cannot be hedged was logged.
    pub(crate) ignored_warned: AtomicBool,
}

impl Default for HedgeState {
    fn default() -> Self {
        HedgeState {
            latency: OnceLock::new(),
            computed_interval: AtomicU64::new(u64::MAX),
            adaptive_ms: AtomicU64::new(u64::MAX),
            ignored_warned: AtomicBool::new(false),
        }
    }
}

impl HedgeState {
    /// The hedging delay at `now_ms`, in ms: `hedging.delayInMilliseconds`, or the adaptive
    /// delay once `hedging.delayPercentile` has data (recomputed at most once per health
    /// interval).
    pub(crate) fn delay_ms(&self, props: &CommandProperties, now_ms: u64) -> u64 {
        let fixed = props.hedging_delay_in_milliseconds;
        let percentile = props.hedging_delay_percentile;
        if percentile <= 0.0 {
            return fixed;
        }
        let interval_ms = props
            .metrics_health_snapshot_interval_in_milliseconds
            .max(1);
        let window = self.latency.get_or_init(|| {
            let buckets = (props.metrics_rolling_stats_time_in_milliseconds / interval_ms)
                .clamp(1, u64::from(crate::config::MAX_BUCKETS));
            RollingLatency::new(interval_ms, u32::try_from(buckets).unwrap_or(1))
        });
        let interval = now_ms / interval_ms;
        if self.computed_interval.load(Ordering::Acquire) != interval
            && self.computed_interval.swap(interval, Ordering::AcqRel) != interval
        {
            let value = value_at_percentile(window, now_ms, percentile).unwrap_or(u64::MAX);
            self.adaptive_ms.store(value, Ordering::Release);
        }
        match self.adaptive_ms.load(Ordering::Acquire) {
            u64::MAX => fixed,
            adaptive => adaptive,
        }
    }

    /// Records the latency of an execution's first attempt (`latency_ms`, ended at `now_ms`),
    /// if the key uses an adaptive delay.
    pub(crate) fn record_first(&self, now_ms: u64, latency_ms: u64) {
        if let Some(window) = self.latency.get() {
            window.record(now_ms, latency_ms);
        }
    }
}

/// What the breaker must hear about one attempt, and when it started: the attempt in the
/// [`Recorder`](crate::command::pipeline::Recorder) is swapped with a racer's while the
/// racer's end is decided.
#[derive(Debug, Default)]
pub(crate) struct AttemptTicket {
    pub(crate) ticket: Ticket,
    pub(crate) generation: Option<u32>,
    pub(crate) attempt_ms: u64,
    /// Its admission by the adaptive limit, for its sample.
    pub(crate) limit_start: Option<crate::isolation::adaptive::LimitStart>,
    /// Its slow-call state (hedges are not tracked as running: none at first).
    pub(crate) slow_track: crate::circuit::SlowTrack,
}

/// Where a hedgeable execution keeps the race of its current round (empty until the round's
/// first attempt starts with hedging on). A single run keeps `()` instead: nothing.
#[doc(hidden)]
pub struct RaceSlot<Running: Interrupt, E>(pub(crate) Option<Box<Race<Running, E>>>);

impl<Running: Interrupt, E> Default for RaceSlot<Running, E> {
    fn default() -> Self {
        RaceSlot(None)
    }
}

/// The place of an execution's race: [`RaceSlot`] for runs made by a factory, `()` (no place,
/// no cost) for single runs.
#[doc(hidden)]
pub trait Racing<Running: Interrupt, E>: Default {
    /// The slot, if the run can race.
    fn slot(&mut self) -> Option<&mut RaceSlot<Running, E>>;
    /// Whether a race is under way.
    fn is_racing(&self) -> bool;
}

impl<Running: Interrupt, E> Racing<Running, E> for () {
    #[inline(always)]
    fn slot(&mut self) -> Option<&mut RaceSlot<Running, E>> {
        None
    }

    #[inline(always)]
    fn is_racing(&self) -> bool {
        false
    }
}

impl<Running: Interrupt, E> Racing<Running, E> for RaceSlot<Running, E> {
    fn slot(&mut self) -> Option<&mut RaceSlot<Running, E>> {
        Some(self)
    }

    fn is_racing(&self) -> bool {
        self.0.is_some()
    }
}

/// The attempts of one round racing each other: the round's first attempt (the execution
/// future's run) and the hedges started beside it.
pub(crate) struct Race<Running: Interrupt, E> {
    /// The round's first attempt has ended (it failed; the hedges go on).
    pub(crate) primary_done: bool,
    /// Whether the round's first attempt is the execution's first (its latency feeds the
    /// adaptive delay).
    pub(crate) first: bool,
    /// The round's first attempt's number (1 for the execution's first attempt).
    pub(crate) number: u8,
    /// The hedges in flight.
    pub(crate) racers: Vec<Racer<Running>>,
    /// When the next hedge starts; `None` once no more may start.
    pub(crate) next_hedge: Option<Sleep>,
    /// Hedges that may still start in this round.
    pub(crate) hedges_left: u8,
    /// The delay between hedges, in ms.
    pub(crate) delay_ms: u64,
    /// The latest failed attempt's error (for the retry loop or the fallback).
    pub(crate) error: Option<HystrixError<E>>,
}

/// A hedge in flight. Dropped, it stops: its run is dropped (its token cancelled first when
/// `execution.isolation.thread.interruptOnFutureCancel` is set), then its permit given back.
pub(crate) struct Racer<Running: Interrupt> {
    /// Its attempt number (the execution's first attempt is 1).
    pub(crate) number: u8,
    /// Its run (taken out when it is dropped, before its permit is given back).
    pub(crate) running: Option<Pin<Box<Running>>>,
    /// Its breaker ticket and start.
    pub(crate) attempt: AttemptTicket,
    /// Its deadline, and its timeout for a TIMEOUT's detail, in ms.
    pub(crate) deadline_ms: Option<u64>,
    pub(crate) timeout_ms: Option<u64>,
    /// The timer of its deadline, made when first needed.
    pub(crate) sleep: Option<Sleep>,
    /// Its `tracing` span, when traced.
    pub(crate) span: Option<tracing::Span>,
    /// Its command.
    pub(crate) state: Arc<CommandState>,
    /// It holds an execution permit (SEMAPHORE isolation, or any with adaptive limits), given
    /// back when it is dropped.
    pub(crate) holds_permit: Option<crate::isolation::priority::Held>,
}

impl<Running: Interrupt> Racer<Running> {
    /// Whether chaos injection changed its attempt (still running).
    pub(crate) fn injected(&self) -> bool {
        self.running
            .as_ref()
            .is_some_and(|running| running.injected())
    }
}

impl<Running: Interrupt> Drop for Racer<Running> {
    fn drop(&mut self) {
        // The run stops (or its pool task is withdrawn) before its permit is free.
        if let Some(mut running) = self.running.take() {
            if self
                .state
                .properties
                .hot()
                .load()
                .interrupt_on_future_cancel()
            {
                running.as_mut().interrupt();
            }
            drop(running);
        }
        if let Some(held) = self.holds_permit.take() {
            self.state.release_permit(held);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// hedging.delayPercentile 50 over first attempts in buckets of the health interval
    /// (500 ms), kept for metrics.rollingStats.timeInMilliseconds (10 000 ms: 20 buckets).
    fn adaptive() -> CommandProperties {
        CommandProperties {
            hedging_delay_in_milliseconds: 100,
            hedging_delay_percentile: 50.0,
            ..CommandProperties::default()
        }
    }

    #[test]
    fn the_adaptive_delay_follows_the_completed_buckets_of_its_window() {
        let (state, props) = (HedgeState::default(), adaptive());
        // No data yet: the fixed delay.
        assert_eq!(state.delay_ms(&props, 0), 100);
        state.record_first(100, 40);
        state.record_first(200, 40);
        // Bucket 0 is still filling at 400 ms; complete at 500 ms.
        assert_eq!(state.delay_ms(&props, 400), 100);
        assert_eq!(state.delay_ms(&props, 500), 40);
        for at in [600, 700, 800, 900] {
            state.record_first(at, 400);
        }
        // The next interval reads bucket 1 too: the median is now 400 ms (401 as the latency
        // histogram reads it back: the top of its bucket).
        assert_eq!(state.delay_ms(&props, 1000), 401);
        // Both buckets stay in the window for 10 s ...
        assert_eq!(state.delay_ms(&props, 3000), 401);
        assert_eq!(state.delay_ms(&props, 10_999), 401);
        // ... then bucket 1 leaves it: no data, the fixed delay again.
        assert_eq!(state.delay_ms(&props, 11_000), 100);
    }

    #[test]
    fn a_fixed_delay_keeps_no_latencies() {
        let state = HedgeState::default();
        let props = CommandProperties {
            hedging_delay_in_milliseconds: 70,
            ..CommandProperties::default()
        };
        assert_eq!(state.delay_ms(&props, 0), 70);
        state.record_first(100, 5);
        assert!(state.latency.get().is_none());
        assert_eq!(state.delay_ms(&props, 5000), 70);
    }
}
