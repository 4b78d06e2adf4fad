//! Circuit-breaker state shared across the instances of a service, through Redis (the guide:
//! [circuit breakers](https://github.com/hystrix-rs/hystrix-rs/blob/main/docs/breakers.md)).
//!
//! [`RedisStateStore`] is a [`StateStore`](hystrix::circuit::store::StateStore) for
//! hystrix-rs. When one instance learns
//! that a dependency is down, the others open their breakers too, instead of each paying for
//! the lesson with its own failed calls.
//!
//! **Local first.** The execution hot path never touches Redis: it reads the local breaker.
//! A background sync round per registry (every
//! [`state_store_sync_interval`](hystrix::RegistryBuilder::state_store_sync_interval), and at
//! once on a local trip or close, or on a push) publishes batched counts, publishes trips and
//! closes, fetches each shared command's view and asks for the probe permit. Shared state can
//! open a breaker; it closes only breakers past their own sleep window; a local half-open
//! trial needs the store's probe permit, so one instance probes, not all of them.
//!
//! **When Redis is slow, down, paused or flushed** commands go on with local state: every
//! store call is time-boxed (connect and response timeouts of tens of ms, and the registry's
//! own `state_store_timeout`), errors are counted and the store reads degraded
//! ([`Registry::state_store_status`](hystrix::Registry::state_store_status), exported by the
//! dashboard as `hystrix_state_store_errors_total` and `hystrix_state_store_degraded`), and
//! reconnection backs off. A flushed or expired state reads Closed at generation 0; the
//! instances' generation compare-and-set re-reads and carries on.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use hystrix::{Command, Registry};
//! use hystrix_redis::RedisStateStore;
//!
//! # #[tokio::main(flavor = "multi_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // In a tokio runtime that lives as long as the store.
//! let store = RedisStateStore::builder("redis://127.0.0.1:6379/", "orders")
//!     .response_timeout(Duration::from_millis(40))
//!     .build()?;
//! let registry = Registry::builder()
//!     .state_store(store.clone())
//!     .state_store_sync_interval(Some(Duration::from_millis(500)))
//!     .build();
//! // Only commands that opt in share their breaker.
//! let get_user = Command::builder("GetUser")
//!     .group("Users")
//!     .shared_state(true)
//!     .build_in(&registry)?;
//! let user = get_user
//!     .run_async(async { Ok::<_, std::io::Error>("Ada") })
//!     .execute_async()
//!     .await?;
//! assert_eq!(user, "Ada");
//! println!("store: {:?}", registry.state_store_status());
//! # Ok(())
//! # }
//! ```
//!
//! # Keys
//!
//! With `S` the service and `C` the command (each percent-encoded where it holds `%`, `{`,
//! `}`, `:`, a space, a control or a non-ASCII character), every key carries the hash tag `{S:C}`, so
//! that one script's keys are in one Redis Cluster slot:
//!
//! | key | type | holds | TTL |
//! |---|---|---|---|
//! | `hystrix:{S:C}:state` | hash | `gen` (the generation), `tripped` (1 from a trip to a close) | [`state_ttl`](RedisStateStoreBuilder::state_ttl) (24 h), renewed by each trip (plus its open period) and close |
//! | `hystrix:{S:C}:open` | string | the trip's generation; present while OPEN | the open period |
//! | `hystrix:{S:C}:probe` | string | the instance holding the probe permit | the permit's (+ [`probe_ttl_slack`](RedisStateStoreBuilder::probe_ttl_slack)) |
//! | `hystrix:{S:C}:b:<epoch>` | hash | `r` requests, `e` errors, `i:<instance>` reporters, `f:<instance>` fingerprints | window + [`key_ttl_slack`](RedisStateStoreBuilder::key_ttl_slack), renewed by each publish |
//!
//! `<epoch>` is Redis's time in ms divided by the bucket width. The channel
//! `hystrix:{S}:transitions` carries `open <generation> <command>` and
//! `closed <generation> <command>`.
//!
//! # Scripts
//!
//! Each call is one Lua script, atomic on the server: `fetch` (status, remaining ms of the
//! open period, generation, and the window's summed requests, errors and distinct reporters),
//! `try_trip` and `close` (a compare-and-set on the generation, then the new state, the
//! permit dropped, a message on the channel; a close also drops the window's counts),
//! `try_acquire_probe` (`SET NX PX`, extended for its holder), and `publish` (`HINCRBY` into
//! the bucket of the server's now; one script per command in one pipeline). A pipeline
//! is not a transaction: if the connection drops while it is in flight, a command's counts
//! may be added and then sent again by the next round (at least once).
//!
//! # Configuration fingerprints
//!
//! The registry tells the store each command's breaker thresholds
//! ([`set_fingerprint`](hystrix::circuit::store::StateStore::set_fingerprint)); they are
//! published beside the counts, and a fetch that finds reporters with other thresholds logs a
//! warning once per command and lists them in
//! [`RedisStateStore::fingerprint_mismatches`]. An instance whose fingerprint changed is seen
//! with both until its old buckets leave the window.
//!
//! # Design choices
//!
//! - One transition channel per service (`hystrix:{S}:transitions`), not per command: one
//!   subscription per store whatever the number of commands; the message names the command.
//! - The publish pipeline is not a `MULTI` transaction (cross-slot transactions fail on a
//!   cluster); each command's script is atomic, and counts are delivered at least once.
//! - Fingerprints live in the bucket hashes beside the counts rather than with the state, so
//!   an instance that stops reporting stops being flagged when its buckets leave the window.
//! - Redis outages are simulated with real servers (killed, paused, slowed, flushed) rather
//!   than a mock; the library's own tests use a recording wrapper around the in-memory store.
//! - After a `FLUSHALL` or the state TTL, a command's generation starts again at 0, as for a
//!   command never seen (the trait's contract); an instance holding an older generation loses
//!   its compare-and-set, reads the view again and carries on.
#![deny(missing_docs)]

mod backoff;
mod builder;
mod keys;
mod pubsub;
mod scripts;
mod store;

/// The Rust snippets of README.md and of the guide (docs/*.md) set up in this crate's
/// `doctests/*.rs`, each a doc test (written by `build.rs`).
#[cfg(doctest)]
mod snippets {
    include!(concat!(env!("OUT_DIR"), "/snippet_doctests.rs"));
}

pub use builder::RedisStateStoreBuilder;
pub use store::{FingerprintMismatch, RedisStateStore};
