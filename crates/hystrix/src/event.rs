//! Execution events (Hystrix's `HystrixEventType`) and the event notifier plugin.

use std::fmt;

use crate::config::IsolationStrategy;
use crate::key::{CommandKey, GroupKey, ThreadPoolKey};

/// What happened during an execution, in Hystrix's declaration order (the order in which
/// [`EventCounts::iter`] and request logs list them), followed by our extensions
/// ([`Ignored`](EventType::Ignored), [`WouldShortCircuit`](EventType::WouldShortCircuit),
/// [`Retry`](EventType::Retry), [`RetryBudgetExhausted`](EventType::RetryBudgetExhausted),
/// [`Hedge`](EventType::Hedge), [`HedgeCancelled`](EventType::HedgeCancelled),
/// [`LimitRejected`](EventType::LimitRejected), [`Throttled`](EventType::Throttled),
/// [`SlowCall`](EventType::SlowCall), [`ChaosInjected`](EventType::ChaosInjected)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum EventType {
    /// A value emitted by a stream command's run (counted per value).
    Emit,
    /// The run completed without error. Terminal.
    Success,
    /// The run failed (error or panic) and the error was classified as a failure.
    Failure,
    /// The deadline passed before the run completed.
    Timeout,
    /// The run's error was classified as a bad request: no fallback, not counted in health.
    /// Terminal.
    BadRequest,
    /// The circuit breaker refused the execution.
    ShortCircuited,
    /// The thread pool (or its queue) was full.
    ThreadPoolRejected,
    /// The execution semaphore had no free permit.
    SemaphoreRejected,
    /// A value emitted by a stream command's fallback (counted per value).
    FallbackEmit,
    /// The fallback produced a value. Terminal.
    FallbackSuccess,
    /// The fallback failed (error or panic). Terminal.
    FallbackFailure,
    /// The fallback semaphore had no free permit. Terminal.
    FallbackRejection,
    /// `fallback.enabled` was false. Sent to the event notifier only, never stored in an
    /// execution's events or counted (as Hystrix). Terminal.
    FallbackDisabled,
    /// No fallback was given. Terminal.
    FallbackMissing,
    /// Counted, never stored in an execution: its caller got an error from a bad request or from
    /// a failed, rejected, missing or disabled fallback (an ignored error does not count).
    ExceptionThrown,
    /// The response came from the request cache. Terminal.
    ResponseFromCache,
    /// The execution was cancelled (dropped) before it ended. Terminal.
    Cancelled,
    /// A request was collapsed into this batch execution (counted per request).
    Collapsed,
    /// Hystrix's legacy rolling-max marker; never produced by an execution.
    CommandMaxActive,
    /// The run's error was classified as ignored: the dependency is healthy, the error is the
    /// caller's business. Counts as a success for health, no fallback. Terminal.
    Ignored,
    /// The breaker would have short-circuited this execution but runs in dry-run mode.
    WouldShortCircuit,
    /// An attempt failed (FAILURE, TIMEOUT, or a rejection under `retry.onRejection`) and
    /// another one follows, after its delay (counted per retry). Not terminal.
    Retry,
    /// An attempt failed and could have been retried, but the retry budget refused (the
    /// execution goes to its fallback). Not terminal.
    RetryBudgetExhausted,
    /// An attempt had not ended after the hedging delay and another one started beside it
    /// (counted per hedge; see `hedging.maxAttempts`). Not terminal.
    Hedge,
    /// An attempt lost the race to another attempt's result and was cancelled (its future
    /// dropped, its token cancelled, its permit freed; counted per loser). Not terminal, not a
    /// failure, not a cancellation of the execution.
    HedgeCancelled,
    /// The command's adaptive concurrency limit refused the execution (at once, or after
    /// waiting `execution.isolation.adaptive.maxWaitInMilliseconds`), or a priority reserve
    /// did (the bound had room, kept for higher classes: see [`Priority`](crate::Priority)):
    /// the fallback runs. Not a health error and not a drop for the limit. Terminal for the
    /// attempt.
    LimitRejected,
    /// Client-side adaptive throttling (`execution.throttle.enabled`; Google SRE book,
    /// "Handling Overload") refused the attempt locally before it ran, with the probability
    /// max(0, (requests − K × accepts) / (requests + 1)) of its window: the fallback runs. Not
    /// a health error and not a drop for the adaptive limit; retried like LIMIT_REJECTED
    /// (`retry.onRejection`). Terminal for the attempt.
    Throttled,
    /// An attempt took longer than `circuitBreaker.slowCall.durationThresholdInMilliseconds`
    /// (resilience4j's slow call), whatever its outcome: from its admission by the breaker to
    /// its end, in ms (counted per attempt, beside the attempt's outcome). Health counts it as
    /// a slow call; with `circuitBreaker.slowCall.countInFlight`, an attempt still running past
    /// the threshold is a slow request for health at once, and its end does not count in health
    /// again (its events are counted when it ends, as any). Not terminal.
    SlowCall,
    /// Chaos injection (`chaos.*` properties, allowed by
    /// [`RegistryBuilder::allow_chaos`](crate::RegistryBuilder::allow_chaos)) changed this
    /// attempt: a delay before its run, a run replaced by an injected fault (then also a
    /// FAILURE, with [`FailureType::InjectedFault`](crate::FailureType::InjectedFault)), or a
    /// run that never ends (then a TIMEOUT at its deadline). Counted once per injected attempt:
    /// the event notifier hears of it as the injection begins, the execution's events and the
    /// counters when the attempt's end is decided (or it is cancelled). Not terminal.
    ChaosInjected,
}

impl EventType {
    /// Every event type, in declaration order.
    pub const ALL: [EventType; 29] = [
        EventType::Emit,
        EventType::Success,
        EventType::Failure,
        EventType::Timeout,
        EventType::BadRequest,
        EventType::ShortCircuited,
        EventType::ThreadPoolRejected,
        EventType::SemaphoreRejected,
        EventType::FallbackEmit,
        EventType::FallbackSuccess,
        EventType::FallbackFailure,
        EventType::FallbackRejection,
        EventType::FallbackDisabled,
        EventType::FallbackMissing,
        EventType::ExceptionThrown,
        EventType::ResponseFromCache,
        EventType::Cancelled,
        EventType::Collapsed,
        EventType::CommandMaxActive,
        EventType::Ignored,
        EventType::WouldShortCircuit,
        EventType::Retry,
        EventType::RetryBudgetExhausted,
        EventType::Hedge,
        EventType::HedgeCancelled,
        EventType::LimitRejected,
        EventType::Throttled,
        EventType::SlowCall,
        EventType::ChaosInjected,
    ];

    /// Number of event types.
    pub const COUNT: usize = Self::ALL.len();

    /// Position in declaration order (0-based).
    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Hystrix's name for the event, e.g. `"SHORT_CIRCUITED"`.
    pub const fn name(self) -> &'static str {
        match self {
            EventType::Emit => "EMIT",
            EventType::Success => "SUCCESS",
            EventType::Failure => "FAILURE",
            EventType::Timeout => "TIMEOUT",
            EventType::BadRequest => "BAD_REQUEST",
            EventType::ShortCircuited => "SHORT_CIRCUITED",
            EventType::ThreadPoolRejected => "THREAD_POOL_REJECTED",
            EventType::SemaphoreRejected => "SEMAPHORE_REJECTED",
            EventType::FallbackEmit => "FALLBACK_EMIT",
            EventType::FallbackSuccess => "FALLBACK_SUCCESS",
            EventType::FallbackFailure => "FALLBACK_FAILURE",
            EventType::FallbackRejection => "FALLBACK_REJECTION",
            EventType::FallbackDisabled => "FALLBACK_DISABLED",
            EventType::FallbackMissing => "FALLBACK_MISSING",
            EventType::ExceptionThrown => "EXCEPTION_THROWN",
            EventType::ResponseFromCache => "RESPONSE_FROM_CACHE",
            EventType::Cancelled => "CANCELLED",
            EventType::Collapsed => "COLLAPSED",
            EventType::CommandMaxActive => "COMMAND_MAX_ACTIVE",
            EventType::Ignored => "IGNORED",
            EventType::WouldShortCircuit => "WOULD_SHORT_CIRCUIT",
            EventType::Retry => "RETRY",
            EventType::RetryBudgetExhausted => "RETRY_BUDGET_EXHAUSTED",
            EventType::Hedge => "HEDGE",
            EventType::HedgeCancelled => "HEDGE_CANCELLED",
            EventType::LimitRejected => "LIMIT_REJECTED",
            EventType::Throttled => "THROTTLED",
            EventType::SlowCall => "SLOW_CALL",
            EventType::ChaosInjected => "CHAOS_INJECTED",
        }
    }

    /// Whether the event ends an execution (Hystrix's "terminal" events).
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            EventType::Success
                | EventType::BadRequest
                | EventType::FallbackSuccess
                | EventType::FallbackFailure
                | EventType::FallbackRejection
                | EventType::FallbackDisabled
                | EventType::FallbackMissing
                | EventType::ResponseFromCache
                | EventType::Cancelled
                | EventType::Ignored
        )
    }

    /// The bit of this event in an event mask.
    #[inline]
    pub(crate) const fn bit(self) -> u32 {
        1 << self as u32
    }

    /// Whether the event makes the caller see an error, so that `EXCEPTION_THROWN` is counted
    /// (Hystrix: bad request, fallback failure, missing, rejected or disabled).
    pub const fn throws_exception(self) -> bool {
        matches!(
            self,
            EventType::BadRequest
                | EventType::FallbackFailure
                | EventType::FallbackMissing
                | EventType::FallbackRejection
                | EventType::FallbackDisabled
        )
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The events that can happen many times in one execution: the counted ones (`EMIT`,
/// `FALLBACK_EMIT`, `COLLAPSED`) and those of attempts ([`REPEATABLE`]).
pub(crate) const MULTIPLE_MASK: u32 = EventType::Emit.bit()
    | EventType::FallbackEmit.bit()
    | EventType::Collapsed.bit()
    | REPEATABLE_MASK;

/// The events each attempt of a retried execution can add once more (see [`REPEATABLE`]).
const REPEATABLE_MASK: u32 = {
    let mut mask = 0;
    let mut i = 0;
    while i < REPEATABLE.len() {
        mask |= REPEATABLE[i].bit();
        i += 1;
    }
    mask
};

/// The events an execution of several attempts can have more than once, by slot in
/// `EventCounts::repeats`.
const REPEATABLE: [EventType; 11] = [
    EventType::Failure,
    EventType::Timeout,
    EventType::ThreadPoolRejected,
    EventType::SemaphoreRejected,
    EventType::Retry,
    EventType::Hedge,
    EventType::HedgeCancelled,
    EventType::LimitRejected,
    EventType::Throttled,
    EventType::SlowCall,
    EventType::ChaosInjected,
];

/// The slot of a repeatable event in `EventCounts::repeats`.
const fn repeat_slot(event: EventType) -> Option<usize> {
    match event {
        EventType::Failure => Some(0),
        EventType::Timeout => Some(1),
        EventType::ThreadPoolRejected => Some(2),
        EventType::SemaphoreRejected => Some(3),
        EventType::Retry => Some(4),
        EventType::Hedge => Some(5),
        EventType::HedgeCancelled => Some(6),
        EventType::LimitRejected => Some(7),
        EventType::Throttled => Some(8),
        EventType::SlowCall => Some(9),
        EventType::ChaosInjected => Some(10),
        _ => None,
    }
}

/// The events that make the caller see an error (see [`EventType::throws_exception`]).
pub(crate) const THROWS_MASK: u32 = EventType::BadRequest.bit()
    | EventType::FallbackFailure.bit()
    | EventType::FallbackMissing.bit()
    | EventType::FallbackRejection.bit()
    | EventType::FallbackDisabled.bit();

/// The events of one execution: a set in declaration order, plus counts for the events that can
/// happen many times, as Hystrix's `EventCounts`: `EMIT`, `FALLBACK_EMIT`, `COLLAPSED`, and,
/// in an execution of several attempts (retry, hedging), `FAILURE`, `TIMEOUT`,
/// `THREAD_POOL_REJECTED`, `SEMAPHORE_REJECTED`, `RETRY`, `HEDGE`, `HEDGE_CANCELLED`,
/// `LIMIT_REJECTED`, `THROTTLED`, `SLOW_CALL` and `CHAOS_INJECTED` (e.g.
/// `FAILUREx2, SUCCESS, RETRYx2`).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct EventCounts {
    bits: u32,
    emits: u32,
    fallback_emits: u32,
    collapsed: u32,
    /// Occurrences beyond the first of the [`REPEATABLE`] events, by slot (at most 255 more:
    /// `retry.maxAttempts` is at most 100).
    repeats: [u8; 11],
}

impl EventCounts {
    /// No events.
    pub const fn new() -> Self {
        EventCounts {
            bits: 0,
            emits: 0,
            fallback_emits: 0,
            collapsed: 0,
            repeats: [0; 11],
        }
    }

    /// Whether `event` happened.
    #[inline]
    pub const fn contains(&self, event: EventType) -> bool {
        self.bits & (1 << event as u32) != 0
    }

    /// How many times `event` happened: 0 or 1, except for the counted events and, in an
    /// execution of several attempts, the attempts' events.
    pub const fn count(&self, event: EventType) -> u32 {
        match event {
            EventType::Emit => self.emits,
            EventType::FallbackEmit => self.fallback_emits,
            EventType::Collapsed => self.collapsed,
            _ => match repeat_slot(event) {
                Some(slot) if self.contains(event) => 1 + self.repeats[slot] as u32,
                _ => self.contains(event) as u32,
            },
        }
    }

    /// Whether no event happened.
    pub const fn is_empty(&self) -> bool {
        self.bits == 0
    }

    /// The events in declaration order (each once).
    pub fn iter(&self) -> impl Iterator<Item = EventType> + '_ {
        let mut bits = self.bits;
        std::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let index = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            Some(EventType::ALL[index])
        })
    }

    /// Adds one occurrence of `event`.
    #[inline]
    pub(crate) fn add(&mut self, event: EventType) {
        self.add_n(event, 1);
    }

    /// Adds `n` occurrences of `event` (n > 1 only matters for the events that can repeat).
    #[inline]
    pub(crate) fn add_n(&mut self, event: EventType, n: u32) {
        let already = self.contains(event);
        self.bits |= 1 << event as u32;
        match event {
            EventType::Emit => self.emits += n,
            EventType::FallbackEmit => self.fallback_emits += n,
            EventType::Collapsed => self.collapsed += n,
            _ => {
                if let Some(slot) = repeat_slot(event) {
                    let more = n - u32::from(!already && n > 0);
                    let more = u8::try_from(more).unwrap_or(u8::MAX);
                    self.repeats[slot] = self.repeats[slot].saturating_add(more);
                }
            }
        }
    }

    /// The events of `self` that `counted` does not have (per event, the count less
    /// `counted`'s): what is left to count of an execution part of which was counted already.
    pub(crate) fn less(&self, counted: &EventCounts) -> EventCounts {
        let mut left = EventCounts::new();
        for event in self.iter() {
            let n = self.count(event).saturating_sub(counted.count(event));
            if n > 0 {
                left.add_n(event, n);
            }
        }
        left
    }

    /// The raw event bits, bit `i` for [`EventType::ALL`]`[i]`.
    pub(crate) const fn bits(&self) -> u32 {
        self.bits
    }
}

/// The events as the request log writes them: names in Hystrix's order (the event types added
/// beyond Hystrix's come after its own), separated by `, `, counted events with `xN` when more
/// than one, e.g. `FAILURE, FALLBACK_SUCCESS` or `EMITx3, SUCCESS`.
impl fmt::Display for EventCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, event) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(event.name())?;
            let times = self.count(event);
            if times > 1 {
                write!(f, "x{times}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for EventCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_list();
        for event in self.iter() {
            match self.count(event) {
                n if n > 1 => list.entry(&format_args!("{}x{n}", event.name())),
                _ => list.entry(&format_args!("{}", event.name())),
            };
        }
        list.finish()
    }
}

/// Receives every event as it happens and every finished execution, synchronously, on the thread
/// that produced it (Hystrix's `HystrixEventNotifier`, but one per registry, not per process).
///
/// Implementations must be fast and must not block: they run on the hot path. A panic inside one
/// is caught and logged once; it never changes a command's outcome.
pub trait EventNotifier: Send + Sync + 'static {
    /// Called for each event of an execution as it is recorded, and for `FALLBACK_DISABLED`,
    /// which is never stored in the execution.
    fn mark_event(&self, event: EventType, key: &CommandKey) {
        let _ = (event, key);
    }

    /// Called once when an execution ends, with its isolation, its execution time in ms (0 when
    /// no user code ran) and all its events.
    fn mark_command_execution(
        &self,
        key: &CommandKey,
        isolation: IsolationStrategy,
        execution_time_ms: u64,
        events: &EventCounts,
    ) {
        let _ = (key, isolation, execution_time_ms, events);
    }

    /// Called once per command key, when the registry creates its state (before its first
    /// execution), with its group and (resolved) thread-pool keys: what a notifier needs to
    /// label the key's metrics. Not part of Hystrix's notifier.
    fn mark_command_created(
        &self,
        key: &CommandKey,
        group: &GroupKey,
        thread_pool: &ThreadPoolKey,
    ) {
        let _ = (key, group, thread_pool);
    }
}

/// A shared notifier (keep a clone to read what it gathered).
impl<N: EventNotifier> EventNotifier for std::sync::Arc<N> {
    fn mark_event(&self, event: EventType, key: &CommandKey) {
        (**self).mark_event(event, key);
    }

    fn mark_command_execution(
        &self,
        key: &CommandKey,
        isolation: IsolationStrategy,
        execution_time_ms: u64,
        events: &EventCounts,
    ) {
        (**self).mark_command_execution(key, isolation, execution_time_ms, events);
    }

    fn mark_command_created(
        &self,
        key: &CommandKey,
        group: &GroupKey,
        thread_pool: &ThreadPoolKey,
    ) {
        (**self).mark_command_created(key, group, thread_pool);
    }
}

/// Hears each execution's steps, synchronously, in Hystrix's order (Hystrix's
/// `HystrixCommandExecutionHook`, but one per registry, not per process). An observer: it sees the
/// command key (and the failure type), not the values, and cannot change anything. A panic inside
/// one is caught and logged once; it never changes a command's outcome. Every method defaults to
/// doing nothing.
///
/// The orders, e.g. a THREAD success: `on_start`, `on_thread_start`,
/// `on_execution_start`, `on_execution_emit`, `on_emit`, `on_execution_success`,
/// `on_thread_complete`, `on_success`; a failure with a fallback: `on_start`,
/// `on_execution_start`, `on_execution_error`, `on_fallback_start`, `on_fallback_emit`,
/// `on_emit`, `on_fallback_success`, `on_success`; a short-circuit without fallback:
/// `on_start`, `on_error`; a request-cache hit: `on_cache_hit` only; a cancelled execution:
/// `on_unsubscribe` (then `on_thread_complete` if its run had gone to a pool).
pub trait ExecutionHook: Send + Sync + 'static {
    /// An execution starts (before the breaker check).
    fn on_start(&self, key: &CommandKey) {
        let _ = key;
    }
    /// Its run was handed to its pool (THREAD isolation).
    fn on_thread_start(&self, key: &CommandKey) {
        let _ = key;
    }
    /// Its run starts (admitted by the breaker and the bulkhead).
    fn on_execution_start(&self, key: &CommandKey) {
        let _ = key;
    }
    /// The run produced a value (each value, for a stream command).
    fn on_execution_emit(&self, key: &CommandKey) {
        let _ = key;
    }
    /// The run succeeded.
    fn on_execution_success(&self, key: &CommandKey) {
        let _ = key;
    }
    /// The run ended in an error (`event`: FAILURE, BAD_REQUEST or IGNORED); not called for a
    /// timeout.
    fn on_execution_error(&self, key: &CommandKey, event: EventType) {
        let _ = (key, event);
    }
    /// The execution let go of its pool work (THREAD isolation): the run ended, or, at a
    /// timeout or a cancellation, the execution stopped waiting for it (as Hystrix, whose
    /// unsubscribe ends the thread's part; an uninterruptible run may still be busy).
    fn on_thread_complete(&self, key: &CommandKey) {
        let _ = key;
    }
    /// The fallback starts.
    fn on_fallback_start(&self, key: &CommandKey) {
        let _ = key;
    }
    /// The fallback produced a value (each value, for a stream fallback).
    fn on_fallback_emit(&self, key: &CommandKey) {
        let _ = key;
    }
    /// The fallback succeeded.
    fn on_fallback_success(&self, key: &CommandKey) {
        let _ = key;
    }
    /// The fallback failed.
    fn on_fallback_error(&self, key: &CommandKey) {
        let _ = key;
    }
    /// A value goes to the caller (from the run or the fallback).
    fn on_emit(&self, key: &CommandKey) {
        let _ = key;
    }
    /// The execution ended with a value for the caller.
    fn on_success(&self, key: &CommandKey) {
        let _ = key;
    }
    /// The execution ended with an error for the caller.
    fn on_error(&self, key: &CommandKey, failure: crate::FailureType) {
        let _ = (key, failure);
    }
    /// The response came from the request cache.
    fn on_cache_hit(&self, key: &CommandKey) {
        let _ = key;
    }
    /// The caller dropped (or cancelled) the execution before it ended.
    fn on_unsubscribe(&self, key: &CommandKey) {
        let _ = key;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_iterate_in_declaration_order_with_counts() {
        let mut events = EventCounts::new();
        events.add(EventType::FallbackSuccess);
        events.add_n(EventType::Emit, 3);
        events.add(EventType::Failure);
        assert_eq!(
            events.iter().collect::<Vec<_>>(),
            vec![
                EventType::Emit,
                EventType::Failure,
                EventType::FallbackSuccess
            ]
        );
        assert_eq!(events.count(EventType::Emit), 3);
        assert_eq!(events.count(EventType::Failure), 1);
        assert_eq!(events.count(EventType::Success), 0);
        assert_eq!(format!("{events:?}"), "[EMITx3, FAILURE, FALLBACK_SUCCESS]");
    }

    #[test]
    fn all_lists_each_variant_at_its_index() {
        for (i, event) in EventType::ALL.iter().enumerate() {
            assert_eq!(event.index(), i);
        }
        assert_eq!(EventType::COUNT, 29);
    }

    #[test]
    fn attempts_repeat_their_events_and_what_was_counted_is_left_out() {
        let mut events = EventCounts::new();
        for event in [
            EventType::Failure,
            EventType::Retry,
            EventType::Timeout,
            EventType::Retry,
        ] {
            events.add(event);
        }
        let counted = events;
        events.add(EventType::Failure);
        events.add(EventType::FallbackSuccess);
        assert_eq!(
            events.to_string(),
            "FAILUREx2, TIMEOUT, FALLBACK_SUCCESS, RETRYx2"
        );
        assert_eq!(events.count(EventType::Failure), 2);
        assert_eq!(events.count(EventType::Retry), 2);
        let left = events.less(&counted);
        assert_eq!(left.to_string(), "FAILURE, FALLBACK_SUCCESS");
        assert_eq!(events.less(&EventCounts::new()), events);
    }

    #[test]
    fn hedges_and_cancelled_hedges_repeat_with_their_counts() {
        // Added one at a time, as an execution's attempts add them.
        let mut events = EventCounts::new();
        events.add(EventType::Hedge);
        events.add(EventType::HedgeCancelled);
        events.add(EventType::Success);
        events.add(EventType::Hedge);
        assert_eq!(events.count(EventType::Hedge), 2);
        assert_eq!(events.count(EventType::HedgeCancelled), 1);
        assert_eq!(events.to_string(), "SUCCESS, HEDGEx2, HEDGE_CANCELLED");
        assert_eq!(format!("{events:?}"), "[SUCCESS, HEDGEx2, HEDGE_CANCELLED]");
        events.add(EventType::HedgeCancelled);
        assert_eq!(events.to_string(), "SUCCESS, HEDGEx2, HEDGE_CANCELLEDx2");
    }
}
