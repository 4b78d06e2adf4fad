//! The circuit breaker: whether an execution may run at all.
//!
//! Hystrix's breaker (SPEC §4) with our fixes to its stuck states (Part A 1-3, 14-15, 21-22, 31):
//!
//! - **CLOSED**: executions run. Health is checked once per health bucket (500 ms by default):
//!   with at least `circuitBreaker.requestVolumeThreshold` (20) requests and an error percentage
//!   at or over `circuitBreaker.errorThresholdPercentage` (50) in the completed health buckets of
//!   the window, it trips to OPEN.
//! - **OPEN**: executions are short-circuited; strictly after `sleepWindowInMilliseconds` (5000)
//!   the next attempt moves it to HALF_OPEN.
//! - **HALF_OPEN**: up to `circuitBreaker.halfOpen.permittedRequests` (1) trial executions are
//!   admitted; `successThreshold` (1) successes close it and restart the health window from zero;
//!   any trial failure re-opens it for a new sleep window. A trial that is cancelled, dropped or
//!   ends in a bad request gives its slot back; one unfinished after max(sleep window, timeout)
//!   has it taken back.
//!
//! Only trials move a HALF_OPEN breaker, and only outcomes of the current generation move it at
//! all: an execution admitted before the latest transition never does (its events still count in
//! the rolling metrics). The force flags and `circuitBreaker.enabled` are read at every attempt.

mod event;
mod state;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use arc_swap::ArcSwapOption;

pub use event::{CircuitBreakerEvent, CircuitBreakerListener};
pub use state::Status;
use state::{State, TrialSuccess};

use crate::config::HotSnapshot;
use crate::error::TripCause;
use crate::metrics::HealthCounts;
use crate::registry::CommandState;

/// What an admitted execution must tell the breaker about its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Ticket {
    /// Nothing: the breaker was disabled or forced closed, or the outcome was already told.
    #[default]
    None,
    /// Admitted while CLOSED in this generation.
    Closed(u32),
    /// A HALF_OPEN trial of this generation.
    Trial(u32),
}

impl Ticket {
    /// The breaker generation the execution was admitted in, if the breaker took part.
    #[inline]
    pub(crate) fn generation(self) -> Option<u32> {
        match self {
            Ticket::None => None,
            Ticket::Closed(generation) | Ticket::Trial(generation) => Some(generation),
        }
    }
}

/// The breaker's answer to an attempt.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Run the execution, and tell the breaker how it ended.
    Allowed(Ticket),
    /// Short-circuit it; holds why the circuit is open.
    Denied(TripCause),
}

/// The kind of the latest failure, for the trip cause's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum FailureKind {
    None = 0,
    Failure,
    Timeout,
    SemaphoreRejected,
    ThreadPoolRejected,
}

impl FailureKind {
    fn name(self) -> Option<&'static str> {
        match self {
            FailureKind::None => None,
            FailureKind::Failure => Some("FAILURE"),
            FailureKind::Timeout => Some("TIMEOUT"),
            FailureKind::SemaphoreRejected => Some("SEMAPHORE_REJECTED"),
            FailureKind::ThreadPoolRejected => Some("THREAD_POOL_REJECTED"),
        }
    }

    fn from_u8(value: u8) -> Self {
        match value {
            1 => FailureKind::Failure,
            2 => FailureKind::Timeout,
            3 => FailureKind::SemaphoreRejected,
            4 => FailureKind::ThreadPoolRejected,
            _ => FailureKind::None,
        }
    }
}

/// A command key's circuit breaker.
#[derive(Default)]
pub(crate) struct CircuitBreaker {
    state: State,
    /// When it last opened, in ms on the registry's clock (meaningful while OPEN).
    opened_at_ms: AtomicU64,
    /// The start of the next health bucket: health is checked at most once per bucket.
    next_check_ms: AtomicU64,
    /// When the latest trial was admitted (for hung trials).
    trial_admitted_ms: AtomicU64,
    trip_cause: ArcSwapOption<TripCause>,
    last_failure: AtomicU8,
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("state", &self.state.load())
            .finish_non_exhaustive()
    }
}

impl CircuitBreaker {
    /// Hystrix's `attemptExecution()`: a disabled breaker allows, forceOpen refuses, forceClosed
    /// allows, otherwise the state decides (moving OPEN → HALF_OPEN past the sleep window and
    /// taking a trial slot).
    #[inline]
    pub(crate) fn attempt(
        &self,
        command: &CommandState,
        flags: &HotSnapshot,
        now_ms: u64,
    ) -> Admission {
        if !flags.circuit_breaker_enabled() {
            return Admission::Allowed(Ticket::None);
        }
        self.refresh(command, now_ms);
        if flags.force_open() {
            return Admission::Denied(TripCause::ForcedOpen);
        }
        if flags.force_closed() {
            return Admission::Allowed(Ticket::None);
        }
        let word = self.state.load();
        match word.status {
            Status::Closed => Admission::Allowed(Ticket::Closed(word.generation)),
            _ => self.attempt_open(command, now_ms),
        }
    }

    /// Checks the health counts if a health bucket completed since the last check (any read of
    /// the state brings it up to date, SPEC Part A 29).
    #[inline]
    fn refresh(&self, command: &CommandState, now_ms: u64) {
        if now_ms >= self.next_check_ms.load(Ordering::Relaxed) {
            self.check_health(command, now_ms);
        }
    }

    /// OPEN or HALF_OPEN: wait out the sleep window, then admit trials up to the budget.
    #[cold]
    fn attempt_open(&self, command: &CommandState, now_ms: u64) -> Admission {
        let hot = command.properties.hot();
        loop {
            let word = self.state.load();
            match word.status {
                Status::Closed => return Admission::Allowed(Ticket::Closed(word.generation)),
                Status::Open => {
                    let opened = self.opened_at_ms.load(Ordering::Acquire);
                    if now_ms <= opened.saturating_add(hot.sleep_window_ms()) {
                        return Admission::Denied(self.cause());
                    }
                    if self.state.transition(word, Status::HalfOpen).is_some() {
                        self.trial_admitted_ms.store(now_ms, Ordering::Release);
                        command.breaker_event(CircuitBreakerEvent::HalfOpened {
                            command_key: command.key.clone(),
                        });
                    }
                }
                Status::HalfOpen => {
                    let permitted = hot.half_open_permitted_requests();
                    if let Some(generation) = self.state.take_trial(permitted) {
                        self.trial_admitted_ms.store(now_ms, Ordering::Release);
                        return Admission::Allowed(Ticket::Trial(generation));
                    }
                    // Trials still out after max(sleep window, timeout) are taken back: a fresh
                    // half-open period, whose generation makes their late outcomes stale.
                    let hung_after = hot.sleep_window_ms().max(hot.timeout_ms_if_enabled());
                    let admitted = self.trial_admitted_ms.load(Ordering::Acquire);
                    if now_ms <= admitted.saturating_add(hung_after) {
                        return Admission::Denied(self.cause());
                    }
                    if self.state.transition(word, Status::HalfOpen).is_some() {
                        self.trial_admitted_ms.store(now_ms, Ordering::Release);
                    }
                }
            }
        }
    }

    /// Trips CLOSED → OPEN if the health counts say so; called at most once per health bucket.
    #[cold]
    fn check_health(&self, command: &CommandState, now_ms: u64) {
        let due = self.next_check_ms.load(Ordering::Relaxed);
        let interval = command.health_interval_ms;
        let next = (now_ms / interval + 1) * interval;
        if now_ms < due
            || self
                .next_check_ms
                .compare_exchange(due, next, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return; // another thread checks this bucket
        }
        let word = self.state.load();
        if word.status != Status::Closed {
            return;
        }
        let health = command.counters.health(now_ms);
        let props = command.properties.load();
        if health.total_requests < u64::from(props.circuit_breaker_request_volume_threshold)
            || health.error_percentage < props.circuit_breaker_error_threshold_percentage
        {
            return;
        }
        self.opened_at_ms.store(now_ms, Ordering::Release);
        if self.state.trip(word.generation).is_some() {
            let last = FailureKind::from_u8(self.last_failure.load(Ordering::Relaxed));
            let cause = TripCause::Message(trip_message(&health, &props, last).into());
            self.trip_cause.store(Some(Arc::new(cause.clone())));
            command.breaker_event(CircuitBreakerEvent::Opened {
                command_key: command.key.clone(),
                cause,
                sleep_window_ms: props.circuit_breaker_sleep_window_in_milliseconds,
            });
        }
    }

    fn cause(&self) -> TripCause {
        self.trip_cause
            .load()
            .as_deref()
            .cloned()
            .unwrap_or_else(|| TripCause::Message("circuit open".into()))
    }

    /// An admitted execution succeeded (or ended in an ignored error).
    #[inline]
    pub(crate) fn on_success(&self, command: &CommandState, ticket: Ticket, now_ms: u64) {
        if let Ticket::Trial(generation) = ticket {
            let threshold = command.properties.hot().half_open_success_threshold();
            if let TrialSuccess::Closed(_) = self.state.trial_succeeded(generation, threshold) {
                command.counters.restart_health(now_ms);
                command.breaker_event(CircuitBreakerEvent::Closed {
                    command_key: command.key.clone(),
                });
            }
        }
    }

    /// An admitted execution failed, timed out or was rejected by its bulkhead.
    #[inline]
    pub(crate) fn on_failure(
        &self,
        command: &CommandState,
        ticket: Ticket,
        kind: FailureKind,
        now_ms: u64,
    ) {
        self.last_failure.store(kind as u8, Ordering::Relaxed);
        if let Ticket::Trial(generation) = ticket {
            // A stale trial must not touch the sleep window of a later opening. The time is
            // stored before the state moves, so no attempt sees the new OPEN with an old time.
            let word = self.state.load();
            if word.status != Status::HalfOpen || word.generation != generation {
                return;
            }
            self.opened_at_ms.store(now_ms, Ordering::Release);
            if self.state.trial_failed(generation).is_some() {
                let cause = TripCause::Message(
                    format!(
                        "the half-open trial ended in {}",
                        kind.name().unwrap_or("FAILURE")
                    )
                    .into(),
                );
                self.trip_cause.store(Some(Arc::new(cause.clone())));
                command.breaker_event(CircuitBreakerEvent::Opened {
                    command_key: command.key.clone(),
                    cause,
                    sleep_window_ms: command.properties.hot().sleep_window_ms(),
                });
            }
        }
    }

    /// An admitted execution ended without saying anything of the dependency's health
    /// (cancelled, dropped, bad request): a trial gives its slot back.
    #[inline]
    pub(crate) fn release(&self, ticket: Ticket) {
        if let Ticket::Trial(generation) = ticket {
            self.state.give_back(generation);
        }
    }

    /// The generation now: it changes at every transition.
    #[inline]
    pub(crate) fn generation(&self) -> u32 {
        self.state.load().generation
    }

    /// The state now (ignoring the force flags).
    pub(crate) fn status(&self) -> Status {
        self.state.load().status
    }

    /// Hystrix's command-level `isCircuitBreakerOpen()`: forceOpen, or (unless forceClosed) OPEN
    /// or HALF_OPEN. A disabled breaker is never open.
    pub(crate) fn is_open(&self, flags: &HotSnapshot) -> bool {
        flags.circuit_breaker_enabled()
            && (flags.force_open() || (!flags.force_closed() && self.status() != Status::Closed))
    }

    /// `force_open()`: OPEN now, for a new sleep window (SPEC Part A 22).
    pub(crate) fn force_open(&self, command: &CommandState, now_ms: u64) {
        self.opened_at_ms.store(now_ms, Ordering::Release);
        self.state.force(Status::Open);
        self.trip_cause.store(Some(Arc::new(TripCause::ForcedOpen)));
        command.breaker_event(CircuitBreakerEvent::ForcedOpen {
            command_key: command.key.clone(),
        });
    }

    /// `force_close()`: CLOSED now, with the health counts restarted from zero.
    pub(crate) fn force_close(&self, command: &CommandState, now_ms: u64) {
        self.state.force(Status::Closed);
        command.counters.restart_health(now_ms);
        command.breaker_event(CircuitBreakerEvent::ForcedClosed {
            command_key: command.key.clone(),
        });
    }

    /// `reset()`: CLOSED, health restarted, trip cause and last failure forgotten.
    pub(crate) fn reset(&self, command: &CommandState, now_ms: u64) {
        self.state.force(Status::Closed);
        command.counters.restart_health(now_ms);
        self.trip_cause.store(None);
        self.last_failure
            .store(FailureKind::None as u8, Ordering::Relaxed);
        command.breaker_event(CircuitBreakerEvent::Reset {
            command_key: command.key.clone(),
        });
    }

    /// Why it opened last, if it is or was open.
    pub(crate) fn trip_cause(&self) -> Option<TripCause> {
        self.trip_cause.load().as_deref().cloned()
    }
}

fn trip_message(
    health: &HealthCounts,
    props: &crate::config::CommandProperties,
    last: FailureKind,
) -> String {
    let mut message = format!(
        "{}% of {} requests failed in the last {} ms (circuitBreaker.errorThresholdPercentage \
         {}%)",
        health.error_percentage,
        health.total_requests,
        props.metrics_rolling_stats_time_in_milliseconds,
        props.circuit_breaker_error_threshold_percentage
    );
    if let Some(last) = last.name() {
        message.push_str("; last failure: ");
        message.push_str(last);
    }
    message
}

/// A command key's circuit breaker, to look at and to override by hand (SPEC Part A 22). Obtain
/// it with [`Command::circuit_breaker`](crate::Command::circuit_breaker) or
/// [`Registry::circuit_breaker`](crate::Registry::circuit_breaker). Cheap to clone.
///
/// ```
/// use hystrix::testing::TestRegistry;
/// use hystrix::{Command, FailureType, IsolationStrategy, Status};
/// use std::time::Duration;
///
/// let test = TestRegistry::new(); // a registry on a manual clock
/// let cmd = Command::builder("GetUser")
///     .group("Users")
///     .isolation(IsolationStrategy::Semaphore)
///     .build_in(test.registry())?;
/// let down = || Err::<u32, _>(std::io::Error::other("connection refused"));
///
/// // 20 requests (circuitBreaker.requestVolumeThreshold), all failed: at the end of their
/// // 500 ms health bucket the breaker trips.
/// for _ in 0..20 {
///     assert!(cmd.run(down).execute().is_err());
/// }
/// test.advance(Duration::from_millis(500));
/// let breaker = cmd.circuit_breaker();
/// assert_eq!(breaker.status(), Status::Open);
/// assert_eq!(breaker.health_counts().error_percentage, 100);
/// let err = cmd.run(|| Ok::<_, std::io::Error>(1)).execute().unwrap_err();
/// assert_eq!(err.failure_type(), FailureType::ShortCircuit);
///
/// // Strictly after the 5000 ms sleep window, one trial; its success closes the breaker.
/// test.advance(Duration::from_millis(5001));
/// assert_eq!(cmd.run(|| Ok::<_, std::io::Error>(1)).execute()?, 1);
/// assert_eq!(breaker.status(), Status::Closed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct CircuitBreakerHandle {
    command: Arc<CommandState>,
}

impl fmt::Debug for CircuitBreakerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerHandle")
            .field("command_key", &self.command.key)
            .field("status", &self.command.breaker.status())
            .finish()
    }
}

impl CircuitBreakerHandle {
    pub(crate) fn new(command: Arc<CommandState>) -> Self {
        CircuitBreakerHandle { command }
    }

    fn now(&self) -> u64 {
        self.command.env.clock.now_ms()
    }

    /// CLOSED, OPEN or HALF_OPEN now (the force flags aside; see
    /// [`is_open`](Self::is_open)). Like an execution, the read first applies the health
    /// counts of any health bucket completed since the last look, so it can trip the breaker;
    /// the sleep window, though, is left to the next execution (OPEN stays OPEN until a trial
    /// is attempted).
    pub fn status(&self) -> Status {
        let breaker = &self.command.breaker;
        if self
            .command
            .properties
            .hot()
            .load()
            .circuit_breaker_enabled()
        {
            breaker.refresh(&self.command, self.now());
        }
        breaker.status()
    }

    /// Whether the circuit is open now, as Hystrix's `isCircuitBreakerOpen()`: forceOpen, or
    /// (unless forceClosed) OPEN or HALF_OPEN; never when `circuitBreaker.enabled` is false.
    /// Brings the health check up to date first, as [`status`](Self::status).
    pub fn is_open(&self) -> bool {
        let flags = self.command.properties.hot().load();
        if flags.circuit_breaker_enabled() {
            self.command.breaker.refresh(&self.command, self.now());
        }
        self.command.breaker.is_open(&flags)
    }

    /// Opens it now for a new sleep window; it goes on as usual after that (HALF_OPEN past the
    /// window). Unlike the sticky `circuitBreaker.forceOpen` property, this is a one-time trip.
    pub fn force_open(&self) {
        self.command.breaker.force_open(&self.command, self.now());
    }

    /// Closes it now, with the health counts restarted from zero.
    pub fn force_close(&self) {
        self.command.breaker.force_close(&self.command, self.now());
    }

    /// Closes it, restarts the health counts and forgets why it last opened.
    pub fn reset(&self) {
        self.command.breaker.reset(&self.command, self.now());
    }

    /// Why it opened last: the error percentage and the last failure's kind, a failed trial, or
    /// a forced open.
    pub fn trip_cause(&self) -> Option<TripCause> {
        self.command.breaker.trip_cause()
    }

    /// The health counts it decides on now.
    pub fn health_counts(&self) -> HealthCounts {
        self.command.counters.health(self.now())
    }
}
