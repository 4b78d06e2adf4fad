//! The circuit breaker: whether an execution may run at all.
//!
//! The pipeline asks the breaker before anything else and tells it how each admitted execution
//! ended. The force flags and `circuitBreaker.enabled` are honoured here, read from the live
//! properties at every attempt (SPEC §4, Part A 21).

use crate::config::HotSnapshot;
use crate::error::TripCause;

/// A command key's circuit breaker.
#[derive(Debug, Default)]
pub(crate) struct CircuitBreaker {}

/// The breaker's answer to an attempt.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Run the execution.
    Allowed,
    /// Short-circuit it; holds why the circuit is open.
    Denied(TripCause),
}

impl CircuitBreaker {
    /// Hystrix's `attemptExecution()`: forceOpen refuses, forceClosed allows, a disabled breaker
    /// allows, otherwise the breaker's state decides.
    #[inline]
    pub(crate) fn attempt(&self, props: &HotSnapshot, _now_ms: u64) -> Admission {
        if !props.circuit_breaker_enabled() {
            return Admission::Allowed;
        }
        if props.force_open() {
            return Admission::Denied(TripCause::ForcedOpen);
        }
        if props.force_closed() {
            return Admission::Allowed;
        }
        // The health-driven states (OPEN, HALF_OPEN) decide here once the breaker has them.
        Admission::Allowed
    }

    /// Hystrix's command-level `isCircuitBreakerOpen()`: forceOpen, or (unless forceClosed) the
    /// breaker's own state. A disabled breaker is never open.
    pub(crate) fn is_open(&self, props: &HotSnapshot) -> bool {
        let tripped = false; // no health-driven state yet
        props.circuit_breaker_enabled()
            && (props.force_open() || (!props.force_closed() && tripped))
    }

    /// An admitted execution succeeded (or ended in an ignored error).
    #[inline]
    pub(crate) fn mark_success(&self, _now_ms: u64) {}

    /// An admitted execution failed, timed out or was rejected by the pool.
    #[inline]
    pub(crate) fn mark_non_success(&self, _now_ms: u64) {}
}
