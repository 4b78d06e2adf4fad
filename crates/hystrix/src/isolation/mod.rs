//! Isolation (bulkheads): what bounds how many executions of a dependency run at once.
//!
//! - SEMAPHORE isolation, our own atomic permit counter per command key, read
//!   against the dynamic `execution.isolation.semaphore.maxConcurrentRequests` at every acquire.
//!   Also bounds concurrent fallbacks (`fallback.isolation.semaphore.maxConcurrentRequests`).
//! - Adaptive concurrency limits (`execution.isolation.adaptive.*`): the same semaphore, read
//!   against a limit an algorithm keeps from measured run times, with a bounded wait queue.
//! - Priorities: where a semaphore admits, a share of its bound reserved for the higher classes
//!   of executions (CRITICAL, NORMAL, SHEDDABLE), so the lower ones are refused first.
//! - THREAD isolation: our own OS-thread pool per thread-pool key, with a bounded queue or
//!   hand-off and a dynamic rejection threshold, plus its own tokio runtime for async runs.

pub(crate) mod adaptive;
pub(crate) mod priority;
pub(crate) mod semaphore;
pub(crate) mod thread_pool;
