//! A kit for testing your own commands deterministically.
//!
//! [`TestRegistry`] is an isolated [`Registry`] on a [`ManualClock`]: time moves only when the
//! test says so, and timers (timeouts, sleep windows) fire exactly then. Its helpers force a
//! command's circuit open or closed through the real properties.
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
            registry: Registry::builder().clock(clock.clone()).build(),
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

    /// Removes both force flags set for `command_key`.
    ///
    /// # Errors
    /// As [`force_open`](TestRegistry::force_open).
    pub fn clear_forced(&self, command_key: &str) -> Result<(), ConfigError> {
        let properties = self.registry.properties();
        properties.unset(&format!(
            "hystrix.command.{command_key}.circuitBreaker.forceOpen"
        ))?;
        properties.unset(&format!(
            "hystrix.command.{command_key}.circuitBreaker.forceClosed"
        ))?;
        Ok(())
    }

    fn set_flag(&self, command_key: &str, name: &str, value: bool) -> Result<(), ConfigError> {
        crate::key::CommandKey::new(command_key)?;
        self.registry
            .properties()
            .set(&format!("hystrix.command.{command_key}.{name}"), value)
    }
}
