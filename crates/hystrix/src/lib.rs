//! # hystrix-rs
//!
//! Latency and fault tolerance for calls to remote dependencies, in the tradition of Netflix
//! Hystrix: every call runs as a **command** that is bounded by a **bulkhead** (semaphore),
//! cut off by a **timeout**, refused fast by a **circuit breaker** when the dependency is
//! sick, and answered by a **fallback** when it fails, while **metrics** record what happened.
//! Hystrix's property names, defaults and event semantics carry over.
//!
//! **The guide** explains each concept with examples that are compiled and run as tests:
//! [commands and execution modes][commands], [isolation: pools, semaphores, limits and
//! priorities][isolation], [circuit breakers][breakers], [retry, budgets and hedging][retry],
//! [request context, cache, log and collapser][requests], [HTTP: tower, axum, hyper,
//! reqwest][http-guide], [configuration][configuration], [observability][observability],
//! [testing your resilience][testing], [migrating from Hystrix and resilience4j][migrating],
//! and [where we deliberately differ][differences]. This reference says what each item does.
//!
//! [commands]: https://github.com/hystrix-rs/hystrix-rs/blob/main/docs/commands.md
//! [isolation]: https://github.com/hystrix-rs/hystrix-rs/blob/main/docs/isolation.md
//! [breakers]: https://github.com/hystrix-rs/hystrix-rs/blob/main/docs/breakers.md
//! [retry]: https://github.com/hystrix-rs/hystrix-rs/blob/main/docs/retry.md
//! [requests]: https://github.com/hystrix-rs/hystrix-rs/blob/main/docs/requests.md
//! [http-guide]: https://github.com/hystrix-rs/hystrix-rs/blob/main/docs/http.md
//! [configuration]: https://github.com/hystrix-rs/hystrix-rs/blob/main/docs/configuration.md
//! [observability]: https://github.com/hystrix-rs/hystrix-rs/blob/main/docs/observability.md
//! [testing]: https://github.com/hystrix-rs/hystrix-rs/blob/main/docs/testing.md
//! [migrating]: https://github.com/hystrix-rs/hystrix-rs/blob/main/docs/migrating.md
//! [differences]: https://github.com/hystrix-rs/hystrix-rs/blob/main/docs/differences.md
//!
//! ## Quick start (blocking)
//!
//! ```
//! use hystrix::{Command, IsolationStrategy, Registry};
//! use std::time::Duration;
//!
//! let registry = Registry::new();
//! let get_user = Command::builder("GetUser")
//!     .group("UserService")
//!     .isolation(IsolationStrategy::Semaphore)
//!     .timeout(Duration::from_millis(500))
//!     .build_in(&registry)?;
//!
//! let user = get_user
//!     .run(|| Err::<String, _>(std::io::Error::other("connection refused")))
//!     .fallback(|err| {
//!         assert!(err.cause().is_some());
//!         Ok::<_, std::io::Error>("anonymous".to_string())
//!     })
//!     .execute()?;
//! assert_eq!(user, "anonymous");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Quick start (async)
//!
//! ```
//! use hystrix::{Command, Registry};
//! # async fn fetch_price(id: u64) -> Result<u64, std::io::Error> { Ok(id * 100) }
//!
//! # futures::executor::block_on(async {
//! let registry = Registry::new();
//! let get_price = Command::builder("GetPrice").group("Pricing").build_in(&registry)?;
//! let price = get_price.run_async(fetch_price(7)).execute_async().await?;
//! assert_eq!(price, 700);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! ## Where things are
//!
//! - [`Command`], [`CommandBuilder`], [`Execution`]: defining and running commands;
//!   [`HystrixCommand`] for Hystrix's subclass style.
//! - [`HystrixError`], [`FailureType`]: what went wrong; [`ConfigError`] for bad definitions.
//! - [`context`]: the [`RequestContext`] of one request, its request log, and the request
//!   cache ([`Execution::cache_key`], [`CachedExecution`]).
//! - [`Registry`]: per-key state, properties ([`config`]), plugins; [`Registry::global`].
//! - [`circuit`]: the circuit breaker ([`CircuitBreakerHandle`], [`CircuitBreakerListener`])
//!   and the cloud pattern's extras: [`Class::TripNow`] with [`http::retry_after`],
//!   [`circuit::Backoff`], [`circuit::HealthProbe`], the [`circuit::store`] for state shared
//!   across instances, keyed breakers ([`CommandBuilder::breaker_per_key`]), the
//!   [`circuit::journal`] and `circuitBreaker.dryRun`;
//!   [`metrics`]: rolling counts, health counts and latency percentiles ([`CommandMetrics`]).
//! - Observability: [`EventNotifier`] and [`ExecutionHook`] (registered on the
//!   [`RegistryBuilder`]); a `tracing` span `hystrix.execution` per execution (DEBUG, target
//!   `hystrix::command`); `metrics::facade` (feature `metrics`) for the `metrics` crate; the
//!   `hystrix-dashboard` crate for the Hystrix streams, Prometheus text and the admin routes.
//! - [`limit`]: adaptive concurrency-limit algorithms ([`limit::Aimd`], [`limit::Vegas`],
//!   [`limit::Gradient2`]), pure types fed run-time samples.
//! - [`throttle`]: client-side adaptive throttling (`execution.throttle.*`, Google SRE book,
//!   "Handling Overload"): attempts refused locally while the backend rejects too many as
//!   overloaded ([`ThrottleSnapshot`]).
//! - [`clock`]: the time source; [`testing`]: a registry on a manual clock for your tests.

#![deny(missing_docs)]
// On docs.rs (`--cfg docsrs`, nightly), each item behind a cargo feature says which one.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(rust_2018_idioms)]

pub mod chaos;
pub mod circuit;
pub mod clock;
pub mod collapser;
pub mod command;
pub mod config;
pub mod context;
pub mod error;
pub mod event;
pub mod hedging;
pub mod http;
mod isolation;
pub mod key;
mod keyed;
pub mod limit;
pub mod metrics;
pub mod registry;
pub mod retry;
pub mod testing;
pub mod throttle;
#[cfg(feature = "tower")]
pub mod tower;

/// The Rust snippets of README.md and of the guide (docs/*.md) set up in this crate's
/// `doctests/*.rs`, each a doc test (written by `build.rs`).
#[cfg(doctest)]
mod snippets {
    include!(concat!(env!("OUT_DIR"), "/snippet_doctests.rs"));
}

pub use circuit::{CircuitBreakerEvent, CircuitBreakerHandle, CircuitBreakerListener, Status};
pub use command::{
    AllFailures, CachedExecution, Class, Classifier, Classify, Command, CommandBuilder, Execution,
    ExecutionResult, HystrixAsyncCommand, HystrixCommand, Outcome, StreamExecution,
};
pub use config::{
    CommandProperties, IsolationStrategy, PropertyValue, StreamProperties, ThreadPoolProperties,
};
pub use context::{CachedOutcome, RequestContext, SharedResponse};
pub use error::{BoxError, ConfigError, FailureType, FallbackFailure, HystrixError, TripCause};
pub use event::{EventCounts, EventNotifier, EventType, ExecutionHook};
pub use isolation::priority::{ClassCounts, Priority, PrioritySnapshot, UnknownPriority};
pub use isolation::thread_pool::ThreadPoolMetrics;
pub use key::{CommandKey, GroupKey, ThreadPoolKey};
pub use metrics::{
    AdaptiveLimitSnapshot, CommandMetrics, CumulativeHistogram, HealthCounts, LatencyPercentiles,
    ThrottleSnapshot,
};
pub use registry::{CommandInfo, Registry, RegistryBuilder};
/// The token a cancellable run receives (tokio-util's `CancellationToken`): cancelled at the
/// timeout when `execution.isolation.thread.interruptOnTimeout` is true.
pub use tokio_util::sync::CancellationToken;
