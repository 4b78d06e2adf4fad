//! What an execution produced: its response and its [`ExecutionResult`].

use crate::config::IsolationStrategy;
use crate::error::HystrixError;
use crate::event::{EventCounts, EventType};

/// How one execution went: its events and times (Hystrix's `ExecutionResult` and the accessors
/// of a finished `HystrixCommand`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutionResult {
    pub(crate) events: EventCounts,
    pub(crate) start_ms: u64,
    pub(crate) execution_time_ms: Option<u64>,
    pub(crate) total_time_ms: u64,
    pub(crate) isolation: IsolationStrategy,
    pub(crate) executed_in_thread: bool,
}

impl ExecutionResult {
    /// The result of an execution refused before any step (no events, no times).
    pub(crate) fn empty() -> Self {
        ExecutionResult {
            events: EventCounts::new(),
            start_ms: 0,
            execution_time_ms: None,
            total_time_ms: 0,
            isolation: IsolationStrategy::Semaphore,
            executed_in_thread: false,
        }
    }

    /// The execution's events in [`EventType`](crate::EventType)'s order, e.g. `[FAILURE,
    /// FALLBACK_SUCCESS]`: Hystrix's types in Hystrix's order, then ours after them (`RETRY`,
    /// `HEDGE`, `LIMIT_REJECTED`, ...), so `[FALLBACK_SUCCESS, LIMIT_REJECTED]`.
    pub fn execution_events(&self) -> EventCounts {
        self.events
    }

    /// When the execution started, in ms on the registry's clock.
    pub fn start_ms(&self) -> u64 {
        self.start_ms
    }

    /// Time the run took, in ms, from its permit being acquired to its end (or the timeout);
    /// `None` when no user code ran (short-circuit, rejection). Hystrix reports -1 there.
    pub fn execution_time_ms(&self) -> Option<u64> {
        self.execution_time_ms
    }

    /// Time the caller waited, in ms, from the start to the response (fallback included).
    pub fn total_time_ms(&self) -> u64 {
        self.total_time_ms
    }

    /// The isolation the execution used.
    pub fn isolation(&self) -> IsolationStrategy {
        self.isolation
    }

    /// Whether the run executed on a pool thread (a run that timed out or was cancelled while
    /// still in its pool's queue did not).
    pub fn is_executed_in_thread(&self) -> bool {
        self.executed_in_thread
    }

    /// SUCCESS: the run returned a value.
    pub fn is_successful_execution(&self) -> bool {
        self.events.contains(EventType::Success)
    }

    /// FAILURE: the run returned an error classified as a failure, or panicked.
    pub fn is_failed_execution(&self) -> bool {
        self.events.contains(EventType::Failure)
    }

    /// FALLBACK_SUCCESS: the response came from the fallback.
    pub fn is_response_from_fallback(&self) -> bool {
        self.events.contains(EventType::FallbackSuccess)
    }

    /// TIMEOUT: the run did not finish in time.
    pub fn is_response_timed_out(&self) -> bool {
        self.events.contains(EventType::Timeout)
    }

    /// SHORT_CIRCUITED: the circuit breaker refused the execution.
    pub fn is_response_short_circuited(&self) -> bool {
        self.events.contains(EventType::ShortCircuited)
    }

    /// SEMAPHORE_REJECTED: no execution permit was free.
    pub fn is_response_semaphore_rejected(&self) -> bool {
        self.events.contains(EventType::SemaphoreRejected)
    }

    /// THREAD_POOL_REJECTED: the pool or its queue was full.
    pub fn is_response_thread_pool_rejected(&self) -> bool {
        self.events.contains(EventType::ThreadPoolRejected)
    }

    /// Either rejection (semaphore or thread pool).
    pub fn is_response_rejected(&self) -> bool {
        self.is_response_semaphore_rejected() || self.is_response_thread_pool_rejected()
    }

    /// THROTTLED: adaptive throttling (`execution.throttle.enabled`) refused an attempt
    /// locally.
    pub fn is_response_throttled(&self) -> bool {
        self.events.contains(EventType::Throttled)
    }

    /// RESPONSE_FROM_CACHE: the response came from the request cache.
    pub fn is_response_from_cache(&self) -> bool {
        self.events.contains(EventType::ResponseFromCache)
    }

    /// BAD_REQUEST: the run's error was classified as a bad request.
    pub fn is_bad_request(&self) -> bool {
        self.events.contains(EventType::BadRequest)
    }
}

/// The response of an execution together with its [`ExecutionResult`].
#[derive(Debug)]
pub struct Outcome<T, E> {
    pub(crate) response: Result<T, HystrixError<E>>,
    pub(crate) result: ExecutionResult,
}

impl<T, E> Outcome<T, E> {
    /// The value (from the run or the fallback) or the error.
    pub fn response(&self) -> &Result<T, HystrixError<E>> {
        &self.response
    }

    /// Takes the response.
    pub fn into_response(self) -> Result<T, HystrixError<E>> {
        self.response
    }

    /// The events and times of the execution.
    pub fn execution_result(&self) -> &ExecutionResult {
        &self.result
    }

    /// Splits into the response and the execution result.
    pub fn into_parts(self) -> (Result<T, HystrixError<E>>, ExecutionResult) {
        (self.response, self.result)
    }
}
