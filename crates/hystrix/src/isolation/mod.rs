//! Isolation (bulkheads): what bounds how many executions of a dependency run at once.
//!
//! - SEMAPHORE isolation, our own atomic permit counter per command key, read
//!   against the dynamic `execution.isolation.semaphore.maxConcurrentRequests` at every acquire.
//!   Also bounds concurrent fallbacks (`fallback.isolation.semaphore.maxConcurrentRequests`).

pub(crate) mod semaphore;
