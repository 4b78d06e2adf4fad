//! A kit for testing your own commands deterministically.
//!
//! [`TestRegistry`] is an isolated [`Registry`] on a [`ManualClock`]: time moves only when the
//! test says so, and timers (timeouts, sleep windows) fire exactly then. Its helpers force a
//! command's circuit open or closed through the real properties.
//!
//! The breaker has no timer of its own: it looks at its health counts when an execution or a
//! read (`status()`, `is_open()`) comes, at most once per health interval (500 ms). After the
//! failures that should trip it, move the clock past the end of their health bucket and look
//! (or execute) before moving on: a sleep window starts when the trip is seen, so jumping
//! 5501 ms at once trips it at 5501 ms, not at 500 ms.
//!
//! ```
//! use hystrix::testing::TestRegistry;
//! use hystrix::{Command, FailureType, IsolationStrategy};
//!
//! let test = TestRegistry::new();
//! let cmd = Command::builder("GetUser")
//!     .group("Users")
//!     .isolation(IsolationStrategy::Semaphore)
//!     .build_in(test.registry())?;
//!
//! test.force_open("GetUser")?;
//! let err = cmd.run(|| Ok::<_, std::io::Error>("ada")).execute().unwrap_err();
//! assert_eq!(err.failure_type(), FailureType::ShortCircuit);
//!
//! test.clear_forced("GetUser")?;
//! assert_eq!(cmd.run(|| Ok::<_, std::io::Error>("ada")).execute()?, "ada");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## A blocked thread and the clock
//!
//! A blocking [`execute()`](crate::Execution::execute) whose run awaits the clock (its timeout, a
//! delay) parks its thread until the clock moves, so another thread must move it, and only
//! after the timer exists: [`TestRegistry::advance_when_pending`] waits (in real time, bounded)
//! until that many timers are pending, then advances.
//!
//! ```
//! use hystrix::testing::TestRegistry;
//! use hystrix::{Command, FailureType, IsolationStrategy};
//! use std::time::Duration;
//!
//! let test = TestRegistry::new();
//! let cmd = Command::builder("Slow")
//!     .group("Tests")
//!     .isolation(IsolationStrategy::Semaphore)
//!     .timeout(Duration::from_millis(500))
//!     .build_in(test.registry())?;
//!
//! let caller = std::thread::spawn(move || {
//!     cmd.run_async(std::future::pending::<Result<u32, std::io::Error>>()).execute()
//! });
//! // The execution's timeout timer is pending once the caller waits on it.
//! test.advance_when_pending(1, Duration::from_millis(500))?;
//! let err = caller.join().expect("caller").unwrap_err();
//! assert_eq!(err.failure_type(), FailureType::Timeout);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! With the `sim` feature, `hystrix::testing::sim` runs whole load scenarios in virtual time:
//! a fake backend, an open-loop load, many executions on one thread.

use std::time::Duration;

use crate::clock::{Clock, ManualClock};
use crate::error::ConfigError;
use crate::registry::Registry;

#[cfg(feature = "sim")]
pub mod sim;

/// The real time [`TestRegistry::advance_when_pending`] waits at most for its timers, unless
/// [`with_pending_wait`](TestRegistry::with_pending_wait) sets another: 10 s, long enough for a
/// loaded CI machine, short enough that a test whose timer never comes fails instead of hanging.
pub const DEFAULT_PENDING_WAIT: Duration = Duration::from_secs(10);

/// The timers a test waited for were not all pending within the wait (real time).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "waited {waited:?} (real time) for {wanted} pending timers on the manual clock, found \
     {pending}; time was not moved"
)]
#[non_exhaustive]
pub struct PendingTimersTimeout {
    /// The number of pending timers waited for.
    pub wanted: usize,
    /// The number pending when the wait gave up.
    pub pending: usize,
    /// How long it waited, in real time.
    pub waited: Duration,
}

/// An isolated registry on a manual clock, with helpers for tests.
#[derive(Debug, Clone)]
pub struct TestRegistry {
    registry: Registry,
    clock: ManualClock,
    pending_wait: Duration,
}

impl Default for TestRegistry {
    fn default() -> Self {
        TestRegistry::new()
    }
}

impl TestRegistry {
    /// A new registry whose clock starts at 0 ms, with random seed 0, that allows chaos
    /// injection ([`chaos`](crate::chaos): set `chaos.*` properties to inject faults).
    pub fn new() -> Self {
        TestRegistry::with_builder(|builder, _| builder)
    }

    /// As [`new`](TestRegistry::new), the registry built by `configure` from a builder with the
    /// manual clock (also given), random seed 0 and chaos allowed, e.g. to add a breaker listener that
    /// reads the clock.
    pub(crate) fn with_builder(
        configure: impl FnOnce(crate::RegistryBuilder, &ManualClock) -> crate::RegistryBuilder,
    ) -> Self {
        let clock = ManualClock::new();
        let builder = Registry::builder()
            .clock(clock.clone())
            .random_seed(0)
            .allow_chaos(true);
        TestRegistry {
            registry: configure(builder, &clock).build(),
            clock,
            pending_wait: DEFAULT_PENDING_WAIT,
        }
    }

    /// This registry with another bound on the real time
    /// [`advance_when_pending`](TestRegistry::advance_when_pending) waits (default
    /// [`DEFAULT_PENDING_WAIT`], 10 s).
    #[must_use]
    pub fn with_pending_wait(mut self, wait: Duration) -> Self {
        self.pending_wait = wait;
        self
    }

    /// The registry, to build commands in with
    /// [`build_in`](crate::CommandBuilder::build_in).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The manual clock driving the registry.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// Moves time forward, firing due timers on this thread; see [`ManualClock::advance`].
    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// Waits until at least `timers` timers are pending on the clock, then moves time forward
    /// by `by` (whole ms), firing due timers on this thread.
    ///
    /// For a test whose other thread is blocked in an execution waiting on the clock (a timeout,
    /// a delay): advancing before its timer exists would move time under it unseen. The wait is
    /// in real time: the thread parks until a timer is scheduled (no spinning), and gives up
    /// after [`with_pending_wait`](TestRegistry::with_pending_wait)'s bound (10 s by default).
    /// Every pending timer counts, whoever scheduled it.
    ///
    /// # Errors
    /// [`PendingTimersTimeout`] when fewer than `timers` were pending at the end of the wait;
    /// time has not moved then.
    pub fn advance_when_pending(
        &self,
        timers: usize,
        by: Duration,
    ) -> Result<(), PendingTimersTimeout> {
        self.wait_pending(timers)?;
        self.clock.advance(by);
        Ok(())
    }

    /// Waits as [`advance_when_pending`](TestRegistry::advance_when_pending), then moves time to
    /// the earliest pending timer's deadline and fires the timers due then
    /// ([`ManualClock::advance_to_next_timer`]). Returns the time reached, in ms.
    ///
    /// # Errors
    /// [`PendingTimersTimeout`] when fewer than `timers` (at least one) were pending at the end
    /// of the wait; time has not moved then.
    pub fn advance_to_next_timer_when_pending(
        &self,
        timers: usize,
    ) -> Result<u64, PendingTimersTimeout> {
        self.wait_pending(timers.max(1))?;
        Ok(self
            .clock
            .advance_to_next_timer()
            .unwrap_or_else(|| self.clock.now_ms()))
    }

    fn wait_pending(&self, timers: usize) -> Result<(), PendingTimersTimeout> {
        if self
            .clock
            .wait_for_pending_timers(timers, self.pending_wait)
        {
            Ok(())
        } else {
            Err(PendingTimersTimeout {
                wanted: timers,
                pending: self.clock.pending_timers(),
                waited: self.pending_wait,
            })
        }
    }

    /// Forces `command_key`'s circuit open (`circuitBreaker.forceOpen = true`): every execution
    /// is short-circuited until [`clear_forced`](TestRegistry::clear_forced). The key need not
    /// be defined yet; the flag applies once it is.
    ///
    /// # Errors
    /// [`ConfigError::InvalidKey`] for a name no command can have.
    pub fn force_open(&self, command_key: &str) -> Result<(), ConfigError> {
        self.set_flag(command_key, "circuitBreaker.forceOpen", true)
    }

    /// Forces `command_key`'s circuit closed (`circuitBreaker.forceClosed = true`): every
    /// execution is allowed whatever the health. `forceOpen` still wins.
    ///
    /// # Errors
    /// As [`force_open`](TestRegistry::force_open).
    pub fn force_closed(&self, command_key: &str) -> Result<(), ConfigError> {
        self.set_flag(command_key, "circuitBreaker.forceClosed", true)
    }

    /// Turns both force flags off for `command_key`: sets `circuitBreaker.forceOpen` and
    /// `circuitBreaker.forceClosed` to false at run time, which also overrides flags given in
    /// the command's definition or under `hystrix.command.default`.
    ///
    /// # Errors
    /// As [`force_open`](TestRegistry::force_open).
    pub fn clear_forced(&self, command_key: &str) -> Result<(), ConfigError> {
        crate::key::CommandKey::new(command_key)?;
        let open = format!("hystrix.command.{command_key}.circuitBreaker.forceOpen");
        let closed = format!("hystrix.command.{command_key}.circuitBreaker.forceClosed");
        self.registry
            .properties()
            .set_all([(open.as_str(), false), (closed.as_str(), false)])
    }

    fn set_flag(&self, command_key: &str, name: &str, value: bool) -> Result<(), ConfigError> {
        crate::key::CommandKey::new(command_key)?;
        self.registry
            .properties()
            .set(&format!("hystrix.command.{command_key}.{name}"), value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock;
    use crate::{Command, FailureType, IsolationStrategy};

    #[test]
    fn advance_when_pending_releases_a_thread_blocked_on_a_clock_sleep() {
        let test = TestRegistry::new();
        test.advance(Duration::from_millis(100));
        let clock = std::sync::Arc::clone(test.registry().clock());
        let sleeper = std::thread::spawn(move || {
            futures::executor::block_on(clock::sleep(&clock, Duration::from_millis(250)));
            clock.now_ms()
        });
        test.advance_when_pending(1, Duration::from_millis(250))
            .unwrap();
        assert_eq!(sleeper.join().unwrap(), 350);
        assert_eq!(test.clock().now_ms(), 350);
        assert_eq!(test.clock().pending_timers(), 0);
    }

    #[test]
    fn advance_when_pending_times_out_a_blocking_execute_at_its_deadline() {
        let test = TestRegistry::new();
        let cmd = Command::builder("Slow")
            .group("Tests")
            .isolation(IsolationStrategy::Semaphore)
            .timeout(Duration::from_millis(500))
            .build_in(test.registry())
            .unwrap();
        let metrics_cmd = cmd.clone();
        let caller = std::thread::spawn(move || {
            cmd.run_async(std::future::pending::<Result<u32, std::io::Error>>())
                .execute_outcome()
        });
        test.advance_when_pending(1, Duration::from_millis(499))
            .unwrap();
        // One ms short of the deadline: still waiting on its timer.
        assert_eq!(test.clock().pending_timers(), 1);
        test.advance(Duration::from_millis(1));
        let (response, result) = caller.join().unwrap().into_parts();
        assert_eq!(response.unwrap_err().failure_type(), FailureType::Timeout);
        assert_eq!(result.execution_time_ms(), Some(500));
        assert_eq!(test.clock().pending_timers(), 0);
        assert_eq!(
            metrics_cmd
                .metrics()
                .cumulative_count(crate::EventType::Timeout),
            1
        );
    }

    #[test]
    fn advance_to_next_timer_when_pending_moves_to_the_blocked_threads_deadline() {
        let test = TestRegistry::new();
        let clock = std::sync::Arc::clone(test.registry().clock());
        let sleeper = std::thread::spawn(move || {
            futures::executor::block_on(clock::sleep(&clock, Duration::from_millis(70)));
            futures::executor::block_on(clock::sleep(&clock, Duration::from_millis(30)));
            clock.now_ms()
        });
        assert_eq!(test.advance_to_next_timer_when_pending(1).unwrap(), 70);
        assert_eq!(test.advance_to_next_timer_when_pending(1).unwrap(), 100);
        assert_eq!(sleeper.join().unwrap(), 100);
    }

    #[test]
    fn advance_when_pending_gives_up_after_its_wait_without_moving_time() {
        let test = TestRegistry::new().with_pending_wait(Duration::from_millis(30));
        let started = std::time::Instant::now();
        let err = test
            .advance_when_pending(1, Duration::from_millis(10))
            .unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert_eq!(
            err,
            PendingTimersTimeout {
                wanted: 1,
                pending: 0,
                waited: Duration::from_millis(30),
            }
        );
        assert_eq!(test.clock().now_ms(), 0);
        assert_eq!(
            test.advance_to_next_timer_when_pending(0)
                .unwrap_err()
                .wanted,
            1
        );
    }
}
