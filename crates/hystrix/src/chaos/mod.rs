//! Chaos injection by configuration (as Polly's Simmy and Envoy's fault filter): faults,
//! delays and hangs injected into a command's attempts while its dependency is healthy, so
//! that a team can watch its bulkheads, timeouts, breakers, retries and fallbacks react
//! before a real outage does it for them.
//!
//! # Turning it on
//!
//! Chaos must be allowed by the registry
//! ([`RegistryBuilder::allow_chaos`](crate::RegistryBuilder::allow_chaos), off by default;
//! [`TestRegistry`](crate::testing::TestRegistry) allows it): elsewhere
//! `chaos.enabled=true` is refused with a [`ConfigError`](crate::ConfigError) naming the
//! property, so a stray chaos property in a production file injects nothing. Then, per command
//! key (or for `default`), all dynamic:
//!
//! | property | default | what |
//! |---|---|---|
//! | `chaos.enabled` | false | inject at all |
//! | `chaos.fault.ratePercentage` | 0 | percent (0-100) of attempts whose run is replaced by a fault |
//! | `chaos.hang.ratePercentage` | 0 | percent of attempts whose run never ends (needs `execution.timeout.enabled`) |
//! | `chaos.latency.ratePercentage` | 0 | percent of attempts delayed before their run |
//! | `chaos.latency.inMilliseconds` | 0 | the delay, in ms |
//!
//! Fault and hang come from one draw (together at most 100 %); the delay from a draw of its
//! own, so an attempt may be delayed and then fail. Rates may have fractions (`0.5`).
//!
//! # What an injection does
//!
//! Chaos stands where a slow or failing dependency would: after the breaker, the timeout's
//! start and isolation (a permit, a pool thread) admitted the attempt, right before its run.
//!
//! - **Fault**: the run is not called; the attempt is a FAILURE whose error has
//!   [`FailureType::InjectedFault`](crate::FailureType::InjectedFault) (see
//!   [`HystrixError::is_injected_fault`](crate::HystrixError::is_injected_fault)): it counts
//!   in health and trips the breaker as any failure, the fallback runs, and retry retries it
//!   as a FAILURE.
//! - **Latency**: the attempt waits `chaos.latency.inMilliseconds` on the registry's clock
//!   holding its permit or pool thread, then runs. A delay that reaches the attempt's deadline
//!   ends there: the attempt is a TIMEOUT and its run is not called.
//! - **Hang**: the run is replaced by one that never ends: the attempt holds its permit or
//!   pool thread until its deadline (a TIMEOUT). An async run or a stream also ends when its
//!   execution is dropped; a blocking run's thread (the caller's, or a pool thread) waits for
//!   the deadline, as it would for a real hung call (and at most that long).
//!
//! Its latency is what the attempt took, the injected wait included: an injected fault is
//! recorded as a run that failed at once.
//!
//! Every injected attempt records CHAOS_INJECTED (once, whatever it was injected with) in the
//! counters, the request log, the event notifier, the dashboard streams and `/metrics`: the
//! notifier hears of it as the injection begins, the execution and its counters when the
//! attempt's end is decided. It works for every kind of run (blocking, cancellable, async,
//! streams: a stream's fault ends it before its first value, its delay and hang come before
//! it), under THREAD and SEMAPHORE isolation, through the tower layer, and for every attempt
//! of retry and hedging.
//!
//! Waiting happens where a slow run would wait: a blocking run's thread sleeps (the caller's
//! under SEMAPHORE, the pool's under THREAD); an async run's future is pending on a timer of
//! the registry's clock.
//!
//! # Repeatable draws
//!
//! The draws come from a seeded source per command key, started from
//! [`RegistryBuilder::random_seed`](crate::RegistryBuilder::random_seed) mixed with the key's
//! name: a fixed seed injects into the same attempts every run.
//!
//! # In tests
//!
//! ```
//! use hystrix::{Command, FailureType, IsolationStrategy, testing::TestRegistry};
//!
//! let test = TestRegistry::new(); // allows chaos; seed 0; a manual clock
//! let props = test.registry().properties();
//! props.set("hystrix.command.GetUser.chaos.enabled", true)?;
//! props.set("hystrix.command.GetUser.chaos.fault.ratePercentage", 100)?;
//!
//! let cmd = Command::builder("GetUser")
//!     .group("Users")
//!     .isolation(IsolationStrategy::Semaphore)
//!     .build_in(test.registry())?;
//! let answer = cmd
//!     .run(|| Ok::<_, std::io::Error>("from the backend"))
//!     .fallback(|err| {
//!         assert_eq!(err.failure_type(), FailureType::InjectedFault);
//!         Ok::<_, std::io::Error>("from the fallback")
//!     })
//!     .execute()?;
//! assert_eq!(answer, "from the fallback");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A delay or a hang waits on the registry's clock, so a test moves the
//! [`ManualClock`](crate::clock::ManualClock) once the attempt waits. While it waits, these
//! timers are pending: 1 for a blocking run under SEMAPHORE (the injected wait; its timeout is
//! judged when the wait ends); 2 for an async run polled in place or any run under THREAD (the
//! injected wait and the execution's timeout). A blocking execution parks its thread, so it
//! runs on another one while the test advances the clock
//! ([`TestRegistry::advance_when_pending`](crate::testing::TestRegistry::advance_when_pending)):
//!
//! ```
//! use std::time::Duration;
//! use hystrix::{Command, FailureType, IsolationStrategy, testing::TestRegistry};
//!
//! let test = TestRegistry::new();
//! let props = test.registry().properties();
//! props.set("hystrix.command.Slow.chaos.enabled", true)?;
//! props.set("hystrix.command.Slow.chaos.latency.ratePercentage", 100)?;
//! props.set("hystrix.command.Slow.chaos.latency.inMilliseconds", 300)?;
//! let cmd = Command::builder("Slow")
//!     .group("Tests")
//!     .isolation(IsolationStrategy::Semaphore)
//!     .timeout(Duration::from_millis(1_000))
//!     .build_in(test.registry())?;
//!
//! let caller = {
//!     let cmd = cmd.clone();
//!     std::thread::spawn(move || cmd.run(|| Ok::<_, std::io::Error>(7)).execute_outcome())
//! };
//! test.advance_when_pending(1, Duration::from_millis(300))?; // the injected wait's timer
//! let outcome = caller.join().expect("caller");
//! assert_eq!(*outcome.response().as_ref().expect("a value"), 7);
//! assert_eq!(outcome.execution_result().execution_time_ms(), Some(300));
//!
//! // A hang ends at the timeout, exactly.
//! props.set("hystrix.command.Slow.chaos.latency.ratePercentage", 0)?;
//! props.set("hystrix.command.Slow.chaos.hang.ratePercentage", 100)?;
//! let caller = {
//!     let cmd = cmd.clone();
//!     std::thread::spawn(move || cmd.run(|| Ok::<_, std::io::Error>(7)).execute_outcome())
//! };
//! test.advance_when_pending(1, Duration::from_millis(1_000))?;
//! let outcome = caller.join().expect("caller");
//! let err = outcome.response().as_ref().expect_err("a timeout");
//! assert_eq!(err.failure_type(), FailureType::Timeout);
//! assert_eq!(outcome.execution_result().total_time_ms(), 1_000);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use crate::clock::Sleep;
use crate::config::HotSnapshot;
use crate::registry::CommandState;

/// One command key's chaos state: the random source of its draws.
#[derive(Debug)]
pub(crate) struct Chaos {
    /// Each draw seeds a generator from this counter's next value.
    random: AtomicU64,
}

impl Chaos {
    /// Chaos whose draws start from `seed` (the key's seed).
    pub(crate) fn new(seed: u64) -> Self {
        Chaos {
            // Apart from the retry jitter's and the throttle's sequences, which start from
            // the same key seed.
            random: AtomicU64::new(seed ^ 0x5851_f42d_4c95_7f2d),
        }
    }

    /// Two independent uniform draws in `[0, 100)`, for one attempt: the halves of the first
    /// number of a generator seeded from the counter's next value (a generator's later numbers
    /// are not as independent across consecutive seeds as its first).
    fn percents(&self) -> (f64, f64) {
        let seed = self.random.fetch_add(1, Ordering::Relaxed);
        let bits = fastrand::Rng::with_seed(seed).u64(..);
        let percent = |half: u64| half as f64 * (100.0 / 4_294_967_296.0);
        (percent(bits >> 32), percent(bits & 0xffff_ffff))
    }
}

/// What chaos does to one attempt: a wait before its run, then what replaces the run, if
/// anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)]
pub struct Injection {
    /// How long to wait before the run, in ms (`u64::MAX`: a hang, until the deadline).
    delay_ms: u64,
    /// The run is replaced by an injected fault (after the wait).
    fault: bool,
}

/// What an attempt does once its injected wait is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)]
pub enum Then {
    /// Its run.
    Run,
    /// Nothing: it ends with an injected fault.
    Fault,
    /// Nothing: the wait reached its deadline, it is a TIMEOUT.
    TimedOut,
}

/// Draws what chaos does to an attempt of `state`'s command whose deadline is `deadline_ms`
/// (`None`: no timeout): `None` for nothing, always while the command's chaos is off.
#[inline(always)]
pub(crate) fn draw_now(state: &CommandState, deadline_ms: Option<u64>) -> Option<Injection> {
    if !state.properties.hot().chaos() {
        return None;
    }
    draw_for(state, deadline_ms)
}

/// [`draw_now`] with the command's hot properties already read (`props`).
#[inline(always)]
pub(crate) fn draw(
    state: &CommandState,
    props: &HotSnapshot,
    deadline_ms: Option<u64>,
) -> Option<Injection> {
    if !props.chaos() {
        return None;
    }
    draw_for(state, deadline_ms)
}

/// [`draw`] while chaos is on.
#[cold]
#[inline(never)]
fn draw_for(state: &CommandState, deadline_ms: Option<u64>) -> Option<Injection> {
    let props = state.properties.load();
    if !props.chaos_enabled {
        return None; // turned off since the snapshot was read
    }
    let (latency_draw, pick) = state.chaos.percents();
    let latency_ms = props.chaos_latency_in_milliseconds;
    let delayed = latency_draw < props.chaos_latency_rate_percentage && latency_ms > 0;
    let hang = props.chaos_hang_rate_percentage;
    // A hang needs a deadline to end at (refused by validation without a timeout; a reload
    // may still race this attempt's snapshot).
    if pick < hang && deadline_ms.is_some() {
        return Some(Injection {
            delay_ms: u64::MAX,
            fault: false,
        });
    }
    let fault = (hang..hang + props.chaos_fault_rate_percentage).contains(&pick);
    (delayed || fault).then_some(Injection {
        delay_ms: if delayed { latency_ms } else { 0 },
        fault,
    })
}

impl Injection {
    /// Until when to wait, starting at `now_ms`, and what follows: the deadline, if the wait
    /// reaches it (a TIMEOUT).
    fn plan(self, now_ms: u64, deadline_ms: Option<u64>) -> (u64, Then) {
        let end_ms = now_ms.saturating_add(self.delay_ms);
        match deadline_ms {
            Some(deadline_ms) if end_ms >= deadline_ms => (deadline_ms, Then::TimedOut),
            _ if self.fault => (end_ms, Then::Fault),
            _ => (end_ms, Then::Run),
        }
    }

    /// Applies the injection to an attempt of `command`'s blocking run, on this thread: tells
    /// the event notifier (CHAOS_INJECTED, as it happens), waits for the injected delay from
    /// now until at most `deadline_ms`, and returns what follows.
    pub(crate) fn wait_blocking(self, command: &CommandState, deadline_ms: Option<u64>) -> Then {
        injected(command);
        let clock = &command.env.clock;
        let now_ms = clock.now_ms();
        let (until_ms, then) = self.plan(now_ms, deadline_ms);
        if until_ms > now_ms {
            crate::command::block_on(Sleep::until(Arc::clone(clock), until_ms));
        }
        then
    }

    /// Applies the injection to an attempt of `command`'s async run, starting now: tells the
    /// event notifier, and returns a future that waits until at most `deadline_ms` and tells
    /// what follows.
    pub(crate) fn wait(self, command: &CommandState, deadline_ms: Option<u64>) -> Wait {
        injected(command);
        let clock = &command.env.clock;
        let (until_ms, then) = self.plan(clock.now_ms(), deadline_ms);
        Wait {
            sleep: Sleep::until(Arc::clone(clock), until_ms),
            then,
        }
    }
}

/// An injection for an attempt of a command, with the attempt's deadline, to apply when its
/// run would start (a blocking run called in a future's poll).
#[doc(hidden)]
pub struct Planned {
    injection: Injection,
    deadline_ms: Option<u64>,
    command: Arc<CommandState>,
}

impl Planned {
    /// `injection` for an attempt of `command` whose deadline is `deadline_ms`.
    pub(crate) fn new(
        injection: Injection,
        deadline_ms: Option<u64>,
        command: &Arc<CommandState>,
    ) -> Self {
        Planned {
            injection,
            deadline_ms,
            command: Arc::clone(command),
        }
    }

    /// [`Injection::wait_blocking`] now.
    pub(crate) fn wait_blocking(self) -> Then {
        self.injection
            .wait_blocking(&self.command, self.deadline_ms)
    }
}

/// An injection begins: the event notifier hears of it now (the execution counts it when the
/// attempt's end is decided, without telling the notifier again).
fn injected(command: &CommandState) {
    command
        .env
        .notify_event(crate::event::EventType::ChaosInjected, &command.key);
}

/// The injected wait of an async run (see [`Injection::wait`]).
#[derive(Debug)]
#[doc(hidden)]
pub struct Wait {
    sleep: Sleep,
    then: Then,
}

impl Future for Wait {
    type Output = Then;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Then> {
        let then = self.then;
        Pin::new(&mut self.sleep).poll(cx).map(|()| then)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delay_that_reaches_the_deadline_ends_there_as_a_timeout() {
        let delay = Injection {
            delay_ms: 300,
            fault: true,
        };
        assert_eq!(delay.plan(1_000, Some(2_000)), (1_300, Then::Fault));
        assert_eq!(delay.plan(1_000, Some(1_300)), (1_300, Then::TimedOut));
        assert_eq!(delay.plan(1_000, None), (1_300, Then::Fault));
        let hang = Injection {
            delay_ms: u64::MAX,
            fault: false,
        };
        assert_eq!(hang.plan(1_000, Some(2_000)), (2_000, Then::TimedOut));
        let fault = Injection {
            delay_ms: 0,
            fault: true,
        };
        assert_eq!(fault.plan(1_000, Some(1_001)), (1_000, Then::Fault));
        // At the deadline already (a pool task taken late): a timeout.
        assert_eq!(fault.plan(1_000, Some(1_000)), (1_000, Then::TimedOut));
    }
}
