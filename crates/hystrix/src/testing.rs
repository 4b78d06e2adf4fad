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

use std::time::Duration;

use crate::clock::ManualClock;
use crate::error::ConfigError;
use crate::registry::Registry;

/// An isolated registry on a manual clock, with helpers for tests.
#[derive(Debug, Clone)]
pub struct TestRegistry {
    registry: Registry,
    clock: ManualClock,
}

impl Default for TestRegistry {
    fn default() -> Self {
        TestRegistry::new()
    }
}

impl TestRegistry {
    /// A new registry whose clock starts at 0 ms.
    pub fn new() -> Self {
        let clock = ManualClock::new();
        TestRegistry {
            registry: Registry::builder()
                .clock(clock.clone())
                .random_seed(0)
                .build(),
            clock,
        }
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
