//! Deterministic simulations in virtual time (feature `sim`): what-if runs of commands against
//! a fake backend under load, in milliseconds of the [`ManualClock`](crate::clock::ManualClock)
//! rather than of this machine.
//!
//! The parts:
//!
//! - [`Sim`]: a single-threaded executor that runs request futures and moves the clock from
//!   timer to timer (an execution's timeout, a backend's service end, a
//!   [`clock::sleep`](crate::clock::sleep)), so ten seconds of traffic take as long as the work
//!   in them;
//! - [`Backend`]: a fake dependency with `workers`, a bounded `queue`, a [`ServiceTime`]
//!   distribution (constant, exponential, log-normal), an independent failure rate and scripted
//!   [`Phase`]s (an outage from 10 s to 20 s, 200 ms more latency, fewer workers, every call
//!   twice as long), every draw from one seeded generator; it counts what it saw
//!   ([`BackendStats`]);
//! - [`Load`]: an open-loop source of N requests per second for a duration, evenly spaced or
//!   Poisson;
//! - [`Report`] and [`table`]: per request answered by the backend, by a fallback, or failed;
//!   backend calls per offered request; latency p50 / p99 / p99.9 (virtual ms); and the
//!   [`measures`] a run adds beyond those columns (a delay, a count over a period);
//! - [`scenarios`]: the named scenarios of our benchmarks, runnable with
//!   `cargo run -p hystrix-rs --release --features sim --example sim -- <scenario>`.
//!
//! One program with one seed gives one result, to the millisecond, on any machine.
//!
//! ## A what-if run of your own
//!
//! Build your command in the simulation's registry with the properties you want to try, a
//! backend that behaves as yours might, and run a load whose requests execute the command with
//! the backend's [`call`](Backend::call) as the run. Each request returns its [`SimOutcome`].
//!
//! ```
//! use hystrix::testing::sim::{self, Backend, Load, Phase, ServiceTime, Sim, SimOutcome};
//! use hystrix::{Command, IsolationStrategy};
//! use std::time::Duration;
//!
//! // What does a 1 s timeout do when the backend slows down by 900 ms for 2 s?
//! let mut sim = Sim::new();
//! let backend = Backend::builder()
//!     .workers(50)
//!     .service_time(ServiceTime::lognormal(Duration::from_millis(20), Duration::from_millis(120)))
//!     .phase(Phase::between(Duration::from_secs(1), Duration::from_secs(3))
//!         .extra_latency(Duration::from_millis(900)))
//!     .seed(42)
//!     .build(sim.clock())?;
//! let cmd = Command::builder("GetUser")
//!     .group("Users")
//!     .isolation(IsolationStrategy::Semaphore)
//!     .semaphore_max_concurrent_requests(500)
//!     .timeout(Duration::from_secs(1))
//!     .build_in(sim.registry())?;
//!
//! let load = Load::poisson(200.0, Duration::from_secs(5), 42);
//! let report = sim
//!     .run_load(&load, |_request| {
//!         let (cmd, call) = (cmd.clone(), backend.call());
//!         async move {
//!             let response = cmd.run_async(call).fallback(sim::fallback).execute_async().await;
//!             SimOutcome::from_response(response)
//!         }
//!     })?
//!     .with_name("slow-phase")
//!     .with_backend(backend.stats());
//! println!("{}", sim::table(&[report.clone()]));
//! assert!(report.fallback() > 0);
//! assert_eq!(report.answered() + report.fallback(), report.offered());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Everything the requests wait on must be on the clock: async runs under SEMAPHORE isolation
//! (the default for async runs), [`clock::sleep`](crate::clock::sleep), [`Backend`]. A THREAD
//! pool, tokio's timers or real I/O complete in real time on other threads; the simulation
//! cannot wait for them (see [`Sim`]).

mod backend;
mod executor;
mod load;
mod report;
pub mod scenarios;

use std::convert::Infallible;

pub use backend::{
    Backend, BackendBuilder, BackendCall, BackendError, BackendStats, Phase, ServiceTime,
};
pub use executor::{DEFAULT_DRAIN_LIMIT, Sim};
pub use load::{Arrivals, Load};
pub use report::{LatencySummary, Report, measures, table};

use crate::error::{ConfigError, HystrixError};

/// How a simulated request ended, as its future returns it to [`Sim::run_load`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SimOutcome {
    /// Answered by the backend (the run's own value).
    Answered,
    /// Answered by a fallback.
    Fallback,
    /// No answer: the error reached the user.
    Failed,
}

impl SimOutcome {
    /// The outcome of an execution whose value is itself an outcome (the backend's
    /// [`Answered`](SimOutcome::Answered) or a fallback's [`Fallback`](SimOutcome::Fallback)):
    /// that value, or [`Failed`](SimOutcome::Failed) for an error.
    pub fn from_response<E>(response: Result<SimOutcome, E>) -> SimOutcome {
        response.unwrap_or(SimOutcome::Failed)
    }
}

/// A fallback that answers [`SimOutcome::Fallback`], whatever the error:
/// `cmd.run_async(backend.call()).fallback(sim::fallback)`.
pub fn fallback<E>(_error: &HystrixError<E>) -> Result<SimOutcome, Infallible> {
    Ok(SimOutcome::Fallback)
}

/// What can stop a simulation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A setting that cannot be simulated (the message says which).
    #[error("invalid simulation setting: {0}")]
    Invalid(String),
    /// Tasks are left that nothing on the clock will wake: they wait on another thread, tokio's
    /// timers or real I/O (see [`Sim`]), or on each other.
    #[error(
        "the simulation stalled at {now_ms} ms: {pending_tasks} tasks wait and no timer is \
         pending (do they wait on something off the clock: a THREAD pool, tokio, real I/O?)"
    )]
    Stalled {
        /// Virtual time then, in ms.
        now_ms: u64,
        /// Tasks not finished.
        pending_tasks: usize,
    },
    /// Tasks were still running at the drain limit ([`Sim::with_drain_limit`]).
    #[error(
        "the simulation gave up at {now_ms} ms: {pending_tasks} tasks still running at the \
         drain limit"
    )]
    NotDrained {
        /// Virtual time then, in ms.
        now_ms: u64,
        /// Tasks not finished.
        pending_tasks: usize,
    },
    /// A command of the scenario could not be built.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl SimError {
    fn invalid(message: impl Into<String>) -> Self {
        SimError::Invalid(message.into())
    }
}
