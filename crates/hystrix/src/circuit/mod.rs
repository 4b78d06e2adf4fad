//! The circuit breaker: whether an execution may run at all.
//!
//! Hystrix's breaker with our fixes to its stuck states:
//!
//! - **CLOSED**: executions run. Health is checked once per health bucket (500 ms by default):
//!   with at least `circuitBreaker.requestVolumeThreshold` (20) requests and an error percentage
//!   at or over `circuitBreaker.errorThresholdPercentage` (50) in the completed health buckets of
//!   the window, it trips to OPEN. With slow calls on
//!   (`circuitBreaker.slowCall.durationThresholdInMilliseconds`), a slow-call percentage at or
//!   over `circuitBreaker.slowCall.rateThresholdPercentage` trips it too; attempts still
//!   running past the threshold count as slow at the check (`circuitBreaker.slowCall.
//!   countInFlight`). Other windows ([`WindowType`]): the last N calls (`COUNT`) or failures in
//!   a row (`CONSECUTIVE`), checked at each failed or slow call's end, tripping at once.
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

mod backoff;
mod event;
mod in_flight;
pub mod journal;
mod keyed;
mod probe;
mod shared;
mod state;
pub mod store;
mod trips;
mod window;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;

pub use backoff::{Backoff, OpenContext, OpenTrigger};
pub use event::{BreakerEventKind, CircuitBreakerEvent, CircuitBreakerListener};
pub use probe::HealthProbe;
pub use shared::StateStoreStatus;
pub use state::Status;
pub use window::WindowType;
pub(crate) use window::{CallOutcome, MAX_COUNT_WINDOW, MAX_KEYED_COUNT_WINDOW, Window};

pub(crate) use in_flight::{Added, Mark, SlowTrack, Tracked};
pub use keyed::OVERFLOW_BREAKER_KEY;
pub(crate) use keyed::{KeyedBreaker, KeyedBreakers};
pub(crate) use probe::ProbeState;
pub(crate) use shared::{SharedLink, StoreEnv, run_rounds};
use state::{State, TrialSuccess, Word};
pub(crate) use trips::{TripLog, Tripped};

use crate::config::{HotCommandProperties, HotSnapshot};
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
    Denied(Tripped),
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
    TripNow,
}

impl FailureKind {
    fn name(self) -> Option<&'static str> {
        match self {
            FailureKind::None => None,
            FailureKind::Failure => Some("FAILURE"),
            FailureKind::Timeout => Some("TIMEOUT"),
            FailureKind::SemaphoreRejected => Some("SEMAPHORE_REJECTED"),
            FailureKind::ThreadPoolRejected => Some("THREAD_POOL_REJECTED"),
            FailureKind::TripNow => Some("FAILURE (trip now)"),
        }
    }

    fn from_u8(value: u8) -> Self {
        match value {
            1 => FailureKind::Failure,
            2 => FailureKind::Timeout,
            3 => FailureKind::SemaphoreRejected,
            4 => FailureKind::ThreadPoolRejected,
            5 => FailureKind::TripNow,
            _ => FailureKind::None,
        }
    }
}

/// The breaker extras a command definition asks for (from its builder).
#[derive(Clone, Default)]
pub(crate) struct BreakerSpec {
    pub(crate) backoff: Backoff,
    pub(crate) probe: Option<HealthProbe>,
    pub(crate) journal: Option<journal::JournalConfig>,
    pub(crate) shared: bool,
    /// Keyed breakers: at most this many keys, evicted after this many idle ms.
    pub(crate) keyed: Option<(std::num::NonZeroUsize, Option<u64>)>,
}

/// The extras a definition has, in words (empty for none), to tell definitions apart.
fn shape(
    backoff: &Backoff,
    probe: bool,
    journal: bool,
    shared: bool,
    keyed: Option<(std::num::NonZeroUsize, Option<u64>)>,
) -> String {
    let mut parts: Vec<String> = Vec::new();
    parts.extend(backoff.kind().map(str::to_owned));
    if probe {
        parts.push("health probe".into());
    }
    if journal {
        parts.push("journal".into());
    }
    if shared {
        parts.push("shared state".into());
    }
    if let Some((max_keys, idle_ms)) = keyed {
        parts.push(match idle_ms {
            Some(idle_ms) => format!("keyed breakers (at most {max_keys}, idle {idle_ms} ms)"),
            None => format!("keyed breakers (at most {max_keys})"),
        });
    }
    parts.join(", ")
}

impl BreakerSpec {
    /// What this definition asks for, in words (empty: none).
    pub(crate) fn shape(&self) -> String {
        shape(
            &self.backoff,
            self.probe.is_some(),
            self.journal.is_some(),
            self.shared,
            self.keyed,
        )
    }
}

impl BreakerExtras {
    /// Bytes the extras take (the window and the attempts tracked in flight; the probe,
    /// journal and keyed breakers aside).
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.window.heap_bytes()
            + self.in_flight.get().map_or(0, |in_flight| {
                std::mem::size_of::<in_flight::InFlight>() + in_flight.heap_bytes()
            })
    }

    /// What the key's first definition asked for, in words (empty: none).
    pub(crate) fn shape(&self) -> String {
        shape(
            &self.backoff,
            self.probe.is_some(),
            self.journal.is_some(),
            self.shared.is_some(),
            self.keyed.as_ref().map(|keyed| keyed.limits),
        )
    }
}

impl fmt::Debug for BreakerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerSpec")
            .field("backoff", &self.backoff)
            .field("probe", &self.probe)
            .field("journal", &self.journal)
            .field("shared", &self.shared)
            .field("keyed", &self.keyed)
            .finish()
    }
}

/// What a command's breaker has beyond Hystrix's, fixed at the key's first
/// definition: the open-duration backoff, a health probe, the journal, the shared state store
/// link and the keyed breakers.
#[derive(Default)]
pub(crate) struct BreakerExtras {
    pub(crate) backoff: Backoff,
    pub(crate) probe: Option<ProbeState>,
    pub(crate) journal: Option<Arc<journal::Journal>>,
    pub(crate) shared: Option<SharedLink>,
    pub(crate) keyed: Option<KeyedBreakers>,
    /// The command's own breaker's window (`circuitBreaker.window.type`).
    pub(crate) window: Window,
    /// Its attempts running, by start interval (made when slow calls are first counted in
    /// flight).
    pub(crate) in_flight: std::sync::OnceLock<Box<in_flight::InFlight>>,
}

impl fmt::Debug for BreakerExtras {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerExtras")
            .field("backoff", &self.backoff)
            .field("probe", &self.probe.is_some())
            .field("journal", &self.journal.is_some())
            .field("shared", &self.shared.is_some())
            .field("keyed", &self.keyed.is_some())
            .field("window", &self.window)
            .finish()
    }
}

/// Where a breaker lives: its command, and the health window it decides on. A command's own
/// breaker reads the command's counters; a keyed breaker its own compact window.
#[derive(Clone, Copy)]
pub(crate) struct Site<'a> {
    pub(crate) command: &'a CommandState,
    keyed: Option<&'a KeyedBreaker>,
}

impl<'a> Site<'a> {
    /// The command's own breaker.
    #[inline]
    pub(crate) fn command(command: &'a CommandState) -> Self {
        Site {
            command,
            keyed: None,
        }
    }

    /// A keyed breaker of the command.
    #[inline]
    pub(crate) fn keyed(command: &'a CommandState, keyed: &'a KeyedBreaker) -> Self {
        Site::of(command, Some(keyed))
    }

    /// The keyed breaker `keyed` of the command, or its own breaker.
    #[inline]
    pub(crate) fn of(command: &'a CommandState, keyed: Option<&'a KeyedBreaker>) -> Self {
        Site { command, keyed }
    }

    #[inline]
    pub(crate) fn breaker(&self) -> &'a CircuitBreaker {
        match self.keyed {
            Some(keyed) => &keyed.breaker,
            None => &self.command.breaker,
        }
    }

    /// The breaker's window.
    #[inline]
    pub(crate) fn window(&self) -> &'a Window {
        match self.keyed {
            Some(keyed) => &keyed.window,
            None => &self.command.extras.window,
        }
    }

    /// The counts the breaker decides on now.
    pub(crate) fn health(&self, now_ms: u64) -> HealthCounts {
        match self.window() {
            Window::Counters => self.command.counters.health(now_ms),
            Window::Ring(ring) => ring.health(now_ms),
            Window::Count(count) => count.health(),
            Window::Consecutive(run) => {
                let run = u64::from(run.get());
                HealthCounts::new(run, run)
            }
        }
    }

    fn restart_health(&self, now_ms: u64) {
        if self.keyed.is_none() {
            // The command's counters: its health counts (the metrics' view) restart too.
            self.command.counters.restart_health(now_ms);
            // Attempts of older generations still running stay out of the new window.
            if let Some(in_flight) = self.in_flight() {
                in_flight.forget_started_by(now_ms);
            }
        }
        match self.window() {
            Window::Counters => {}
            Window::Ring(ring) => ring.restart(now_ms),
            Window::Count(count) => count.restart(),
            Window::Consecutive(run) => run.restart(),
        }
    }

    /// The attempts of the command's own breaker running now, by start interval, while slow
    /// calls are counted in flight (made at the first use).
    #[inline]
    pub(crate) fn in_flight(&self) -> Option<&'a in_flight::InFlight> {
        if self.keyed.is_some() || !self.command.properties.hot().slow_in_flight() {
            return None;
        }
        let interval_ms = self.command.health_interval_ms;
        Some(
            self.command
                .extras
                .in_flight
                .get_or_init(|| Box::new(in_flight::InFlight::new(interval_ms))),
        )
    }

    /// The extras that apply: the command's own breaker has them all; a keyed breaker only the
    /// backoff.
    fn extras(&self) -> Option<&'a BreakerExtras> {
        self.keyed.is_none().then_some(&self.command.extras)
    }

    /// The breaker closed: a keyed one may now be evicted before its open period's end.
    fn note_closed(&self) {
        if let (Some(_), Some(keyed)) = (self.keyed, &self.command.extras.keyed) {
            keyed.note_closed();
        }
    }

    pub(crate) fn emit(&self, kind: BreakerEventKind) {
        self.command.breaker_event(CircuitBreakerEvent {
            command_key: self.command.key.clone(),
            group_key: self.command.group.clone(),
            breaker_key: self.keyed.map(|keyed| Arc::clone(&keyed.key)),
            kind,
        });
    }

    /// Whether an OPEN breaker past its open duration may go HALF_OPEN by itself: not when only
    /// a probe may move it, nor, with a shared state store, without the store's probe permit.
    fn may_half_open(&self) -> bool {
        let Some(extras) = self.extras() else {
            return true;
        };
        if extras.probe.as_ref().is_some_and(ProbeState::only_probe) {
            return false;
        }
        extras.shared.as_ref().is_none_or(SharedLink::may_probe)
    }
}

/// A circuit breaker's state: the command's own, or one keyed breaker's.
#[derive(Default)]
pub(crate) struct CircuitBreaker {
    state: State,
    /// The start of the next health bucket: health is checked at most once per bucket.
    next_check_ms: AtomicU64,
    /// When it last opened, in ms on the registry's clock (meaningful while OPEN).
    opened_at_ms: AtomicU64,
    /// The open duration the backoff decided at the latest opening, in ms; 0: the sleep window
    /// as it is now (constant backoff).
    open_for_ms: AtomicU64,
    /// The minimum open time a trip-now asked for at the latest opening, in ms (0: none).
    min_open_ms: AtomicU64,
    /// Re-opens since it last closed.
    reopens: AtomicU32,
    /// When the latest trial was admitted (for hung trials).
    trial_admitted_ms: AtomicU64,
    /// The causes of its latest openings (made at the first).
    trips: std::sync::OnceLock<Arc<TripLog>>,
    last_failure: AtomicU8,
    /// Openings one at a time (rare; attempts never take it).
    opening: Mutex<()>,
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("state", &self.state.load())
            .finish_non_exhaustive()
    }
}

/// Where an opening comes from.
#[derive(Debug, Clone, Copy)]
enum OpenFrom {
    /// CLOSED in this generation.
    Closed(u32),
    /// A HALF_OPEN trial of this generation failed (a re-open).
    Trial(u32),
}

impl CircuitBreaker {
    /// Hystrix's `attemptExecution()`: a disabled breaker allows, forceOpen refuses, forceClosed
    /// allows, otherwise the state decides (moving OPEN → HALF_OPEN past the open duration and
    /// taking a trial slot).
    #[inline]
    pub(crate) fn attempt(&self, site: Site<'_>, flags: &HotSnapshot, now_ms: u64) -> Admission {
        if !flags.circuit_breaker_enabled() {
            return Admission::Allowed(Ticket::None);
        }
        self.refresh(site, now_ms);
        if flags.force_open() {
            return Admission::Denied(Tripped::ForcedOpen);
        }
        if flags.force_closed() {
            return Admission::Allowed(Ticket::None);
        }
        let word = self.state.load();
        match word.status {
            Status::Closed => Admission::Allowed(Ticket::Closed(word.generation)),
            _ => self.attempt_open(site, now_ms),
        }
    }

    /// Whether [`refuses_now`](Self::refuses_now) may refuse: one load of the state, so
    /// that a CLOSED breaker's executions pay nothing more for the quick refusal.
    #[inline]
    pub(crate) fn may_refuse_now(&self, flags: &HotSnapshot) -> bool {
        flags.circuit_breaker_enabled() && (self.state.is_open() || flags.force_open())
    }

    /// The quick refusal, for the path a service hammers during an outage: what
    /// [`attempt`](Self::attempt) would refuse without moving anything (forced open, or OPEN
    /// with its open duration not over), when no health check is due. `None`: take the full
    /// path, which decides. Ask [`may_refuse_now`](Self::may_refuse_now) first.
    #[inline]
    pub(crate) fn refuses_now(
        &self,
        hot: &HotCommandProperties,
        flags: &HotSnapshot,
        now_ms: u64,
    ) -> Option<Tripped> {
        if now_ms >= self.next_check_ms.load(Ordering::Relaxed) {
            return None;
        }
        if flags.force_open() {
            return Some(Tripped::ForcedOpen);
        }
        let word = self.state.load();
        if flags.force_closed()
            || word.status != Status::Open
            || now_ms > self.open_until_ms(hot.sleep_window_ms())
        {
            return None;
        }
        Some(Tripped::Opened {
            log: Arc::clone(self.trips.get()?),
            generation: word.generation,
        })
    }

    /// Checks the health counts if a health bucket completed since the last check (any read of
    /// the state brings it up to date).
    #[inline]
    pub(crate) fn refresh(&self, site: Site<'_>, now_ms: u64) {
        if now_ms >= self.next_check_ms.load(Ordering::Relaxed) {
            self.check_health(site, now_ms);
        }
    }

    /// How long the current (or latest) opening lasts, in ms: the backoff's duration (the
    /// sleep window now, for a constant backoff), or a trip-now minimum if longer.
    pub(crate) fn open_duration_ms(&self, sleep_window_ms: u64) -> u64 {
        let decided = match self.open_for_ms.load(Ordering::Acquire) {
            0 => sleep_window_ms,
            ms => ms,
        };
        decided.max(self.min_open_ms.load(Ordering::Acquire))
    }

    /// When the current opening ends, in ms on the registry's clock.
    pub(crate) fn open_until_ms(&self, sleep_window_ms: u64) -> u64 {
        self.opened_at_ms
            .load(Ordering::Acquire)
            .saturating_add(self.open_duration_ms(sleep_window_ms))
    }

    /// OPEN or HALF_OPEN: wait out the open duration, then admit trials up to the budget.
    #[cold]
    fn attempt_open(&self, site: Site<'_>, now_ms: u64) -> Admission {
        let hot = site.command.properties.hot();
        loop {
            let word = self.state.load();
            match word.status {
                Status::Closed => return Admission::Allowed(Ticket::Closed(word.generation)),
                Status::Open => {
                    if now_ms <= self.open_until_ms(hot.sleep_window_ms()) || !site.may_half_open()
                    {
                        return Admission::Denied(self.tripped(word.generation));
                    }
                    self.half_open(site, word, now_ms, false);
                }
                Status::HalfOpen => {
                    let permitted = hot.half_open_permitted_requests();
                    if let Some(generation) = self.state.take_trial(permitted) {
                        self.trial_admitted_ms.store(now_ms, Ordering::Release);
                        return Admission::Allowed(Ticket::Trial(generation));
                    }
                    // Trials still out after max(sleep window, timeout) are taken back: a fresh
                    // half-open period, whose generation makes their late outcomes stale.
                    if now_ms <= self.trials_hung_at_ms(hot) {
                        return Admission::Denied(self.tripped(word.generation));
                    }
                    if self.state.transition(word, Status::HalfOpen).is_some() {
                        self.trial_admitted_ms.store(now_ms, Ordering::Release);
                    }
                }
            }
        }
    }

    /// When the trials of the current half-open period count as hung: max(sleep
    /// window, timeout) after the latest was admitted.
    fn trials_hung_at_ms(&self, hot: &HotCommandProperties) -> u64 {
        let hung_after = hot.sleep_window_ms().max(hot.timeout_ms_if_enabled());
        self.trial_admitted_ms
            .load(Ordering::Acquire)
            .saturating_add(hung_after)
    }

    /// Through which time (ms) a keyed breaker must be kept: while OPEN, the end of its open
    /// period (backoff and trip-now minimum included); while HALF_OPEN, the time its trial
    /// counts as hung. `None` while CLOSED.
    pub(crate) fn held_until_ms(&self, hot: &HotCommandProperties) -> Option<u64> {
        match self.state.load().status {
            Status::Closed => None,
            Status::Open => Some(self.open_until_ms(hot.sleep_window_ms())),
            Status::HalfOpen => Some(self.trials_hung_at_ms(hot)),
        }
    }

    /// OPEN (exactly `word`) → HALF_OPEN; whether this call moved it.
    pub(crate) fn half_open(
        &self,
        site: Site<'_>,
        word: Word,
        now_ms: u64,
        by_probe: bool,
    ) -> bool {
        if self.state.transition(word, Status::HalfOpen).is_none() {
            return false;
        }
        self.trial_admitted_ms.store(now_ms, Ordering::Release);
        site.emit(BreakerEventKind::HalfOpened { by_probe });
        true
    }

    /// Trips CLOSED → OPEN if the health counts say so; called at most once per health bucket.
    #[cold]
    fn check_health(&self, site: Site<'_>, now_ms: u64) {
        let due = self.next_check_ms.load(Ordering::Relaxed);
        let interval = site.command.health_interval_ms;
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
        // Attempts running past the slow-call threshold are slow requests from now on.
        let sampled = self.count_slow_in_flight(site, now_ms);
        let mut health = site.health(now_ms);
        if sampled > 0 && matches!(site.window(), Window::Counters) {
            // Counted in the health bucket filling, which this check does not read.
            health = health.with_slow_in_flight(sampled);
        }
        self.trip_if(site, word.generation, &health, true, now_ms);
    }

    /// Trips CLOSED (in `generation`) → OPEN if `health` says so.
    /// With `name_failure`, a trip on failures names the latest failure's kind.
    fn trip_if(
        &self,
        site: Site<'_>,
        generation: u32,
        health: &HealthCounts,
        name_failure: bool,
        now_ms: u64,
    ) {
        let props = site.command.properties.load();
        let kind = props.circuit_breaker_window_type;
        let Some(reason) = window::trip_reason(kind, health, &props) else {
            return;
        };
        let mut message = reason.message;
        let last = FailureKind::from_u8(self.last_failure.load(Ordering::Relaxed));
        if let (true, Some(last)) = (reason.on_errors && name_failure, last.name()) {
            message.push_str("; last failure: ");
            message.push_str(last);
        }
        self.open(
            site,
            OpenFrom::Closed(generation),
            OpenTrigger::Health,
            TripCause::Message(message.into()),
            0,
            now_ms,
        );
    }

    /// Counts the command's attempts running past the slow-call threshold as slow (when slow
    /// calls are counted in flight); returns how many.
    fn count_slow_in_flight(&self, site: Site<'_>, now_ms: u64) -> u64 {
        let Some(in_flight) = site.in_flight() else {
            return 0;
        };
        let threshold_ms = site.command.properties.hot().slow_call_ms();
        let slow = in_flight.count_slow(now_ms, threshold_ms);
        self.add_slow_in_flight(site, slow, now_ms);
        slow
    }

    /// `count` attempts still running were counted slow: the window holds them as slow
    /// requests (their ends will not count in it again).
    #[cold]
    pub(crate) fn add_slow_in_flight(&self, site: Site<'_>, count: u64, now_ms: u64) {
        if count == 0 {
            return;
        }
        let count32 = u32::try_from(count).unwrap_or(u32::MAX);
        match site.window() {
            Window::Counters => site.command.counters.count_slow_in_flight(now_ms, count32),
            // Keyed breakers do not count in flight.
            Window::Ring(_) => {}
            Window::Count(window) => {
                let slow = CallOutcome {
                    error: false,
                    slow: true,
                };
                for _ in 0..count.min(u64::from(MAX_COUNT_WINDOW)) {
                    window.record(slow);
                }
            }
            Window::Consecutive(run) => {
                run.add(count32);
            }
        }
    }

    /// An attempt admitted with `ticket` in `generation` (`None`: the breaker took no part)
    /// ended with `outcome` (`kind`: its failure's kind, if it failed). The breaker's own window
    /// counts it unless the command's counters do (a command's TIME window) or it is of an
    /// older generation; a per-call window (COUNT, CONSECUTIVE) then trips at once if it says
    /// so and the attempt was admitted while CLOSED.
    #[cold]
    pub(crate) fn on_outcome(
        &self,
        site: Site<'_>,
        ticket: Ticket,
        generation: Option<u32>,
        outcome: CallOutcome,
        kind: FailureKind,
        now_ms: u64,
    ) {
        if generation.is_some_and(|generation| generation != self.generation()) {
            return;
        }
        let health = match site.window() {
            Window::Counters => return,
            Window::Ring(ring) => {
                ring.record(now_ms, outcome.error, outcome.slow);
                return;
            }
            Window::Count(window) => window.record(outcome),
            Window::Consecutive(run) => {
                let run = u64::from(run.record(outcome));
                HealthCounts::new(run, run)
            }
        };
        let Ticket::Closed(generation) = ticket else {
            return;
        };
        // A COUNT window can tip on a success too (the one that completes the volume), if it
        // holds failures or slow calls; a CONSECUTIVE run only on a failure or slow call.
        if !(outcome.error || outcome.slow)
            && (matches!(site.window(), Window::Consecutive(_))
                || health.error_count + health.slow_call_count == 0)
        {
            return;
        }
        if kind != FailureKind::None {
            self.last_failure.store(kind as u8, Ordering::Relaxed);
        }
        // A CONSECUTIVE run tipped by a slow success: no failure to name.
        let name_failure = outcome.error || !matches!(site.window(), Window::Consecutive(_));
        self.trip_if(site, generation, &health, name_failure, now_ms);
    }

    /// Opens the breaker from `from` (if it is still there), for the backoff's duration or
    /// `min_open_ms` if longer (for the [`OpenTrigger::StateStore`] trigger: for exactly
    /// `min_open_ms`, what the store's open period has left); returns whether this call opened
    /// it.
    fn open(
        &self,
        site: Site<'_>,
        from: OpenFrom,
        trigger: OpenTrigger,
        cause: TripCause,
        min_open_ms: u64,
        now_ms: u64,
    ) -> bool {
        let one_at_a_time = self.opening.lock();
        let word = self.state.load();
        let (status, generation, reopens) = match from {
            OpenFrom::Closed(generation) => (Status::Closed, generation, 0),
            OpenFrom::Trial(generation) => (
                Status::HalfOpen,
                generation,
                self.reopens.load(Ordering::Relaxed).saturating_add(1),
            ),
        };
        if word.status != status || word.generation != generation {
            return false; // stale: it moved on
        }
        let hot = site.command.properties.hot();
        let backoff = &site.command.extras.backoff;
        let (open_for_ms, min_open_ms) = if trigger == OpenTrigger::StateStore {
            // Opened because the store says OPEN: exactly what is left of the shared open
            // period, never a fresh sleep window nor the backoff's duration.
            (min_open_ms.max(1), 0)
        } else if backoff.is_constant() {
            (0, min_open_ms)
        } else {
            let decided = backoff.open_duration_ms(hot.sleep_window_ms(), reopens, trigger);
            (decided, min_open_ms)
        };
        // Stored before the state moves, so no attempt sees the new OPEN with old values (no
        // other opening runs meanwhile; a failed move leaves a state that does not read them).
        self.opened_at_ms.store(now_ms, Ordering::Release);
        self.open_for_ms.store(open_for_ms, Ordering::Release);
        self.min_open_ms.store(min_open_ms, Ordering::Release);
        let moved = match from {
            OpenFrom::Closed(generation) => self.state.trip(generation),
            OpenFrom::Trial(generation) => self.state.trial_failed(generation),
        };
        let Some(opened) = moved else {
            return false;
        };
        self.reopens.store(reopens, Ordering::Relaxed);
        self.trips().record(opened.generation, cause.clone());
        let open_duration_ms = self.open_duration_ms(hot.sleep_window_ms());
        // Listeners may call back into the breaker (e.g. force_open): not under the lock.
        drop(one_at_a_time);
        site.emit(BreakerEventKind::Opened {
            cause,
            trigger,
            open_duration_ms,
        });
        if let Some(extras) = site.extras() {
            if let Some(probe) = &extras.probe {
                probe.schedule(site.command, opened.generation, now_ms);
            }
            if let Some(shared) = &extras.shared {
                shared.opened(trigger, open_duration_ms);
            }
        }
        true
    }

    /// Its log of openings, made at the first.
    fn trips(&self) -> &Arc<TripLog> {
        self.trips.get_or_init(Arc::default)
    }

    /// Why an execution refused in `generation` was refused.
    #[inline]
    fn tripped(&self, generation: u32) -> Tripped {
        Tripped::Opened {
            log: Arc::clone(self.trips()),
            generation,
        }
    }

    /// An admitted execution succeeded (or ended in an ignored error).
    #[inline]
    pub(crate) fn on_success(&self, site: Site<'_>, ticket: Ticket, now_ms: u64) {
        if let Ticket::Trial(generation) = ticket {
            let threshold = site.command.properties.hot().half_open_success_threshold();
            if let TrialSuccess::Closed(_) = self.state.trial_succeeded(generation, threshold) {
                self.closed(site, now_ms, false);
            }
        }
    }

    /// It closed (a trial's success, or a close published through the shared store).
    fn closed(&self, site: Site<'_>, now_ms: u64, by_store: bool) {
        site.note_closed();
        site.restart_health(now_ms);
        self.reopens.store(0, Ordering::Relaxed);
        site.emit(BreakerEventKind::Closed { by_store });
        let Some(extras) = site.extras() else {
            return;
        };
        if let Some(shared) = &extras.shared {
            shared.closed(by_store);
        }
        if let Some(journal) = &extras.journal {
            site.command.start_replay(journal);
        }
    }

    /// An admitted execution failed, timed out or was rejected by its bulkhead.
    #[inline]
    pub(crate) fn on_failure(
        &self,
        site: Site<'_>,
        ticket: Ticket,
        kind: FailureKind,
        now_ms: u64,
    ) {
        self.last_failure.store(kind as u8, Ordering::Relaxed);
        if let Ticket::Trial(generation) = ticket {
            let cause = TripCause::Message(
                format!(
                    "the half-open trial ended in {}",
                    kind.name().unwrap_or("FAILURE")
                )
                .into(),
            );
            self.open(
                site,
                OpenFrom::Trial(generation),
                OpenTrigger::TrialFailed,
                cause,
                0,
                now_ms,
            );
        }
    }

    /// An admitted execution's error was classified TRIP_NOW: a failure, and the breaker opens
    /// now (from CLOSED or from its trial) for at least `min_open_ms`. An execution admitted
    /// before the latest transition, or while the breaker took no part, moves nothing.
    #[cold]
    pub(crate) fn on_trip_now(
        &self,
        site: Site<'_>,
        ticket: Ticket,
        min_open_ms: u64,
        now_ms: u64,
    ) {
        self.last_failure
            .store(FailureKind::TripNow as u8, Ordering::Relaxed);
        let from = match ticket {
            Ticket::None => return,
            Ticket::Closed(generation) => OpenFrom::Closed(generation),
            Ticket::Trial(generation) => OpenFrom::Trial(generation),
        };
        let cause = TripCause::Message(if min_open_ms > 0 {
            format!("the error asked to trip now and stay open at least {min_open_ms} ms").into()
        } else {
            "the error asked to trip now".into()
        });
        if !self.open(site, from, OpenTrigger::TripNow, cause, min_open_ms, now_ms) {
            self.stay_open_until(now_ms.saturating_add(min_open_ms));
        }
    }

    /// A trip-now minimum that arrives while OPEN (concurrent 503s with Retry-After) makes the
    /// opening last at least until `until_ms`: the longest wait asked for wins. Kept as a
    /// minimum even when the opening ends then anyway, so a sleep window shortened later does
    /// not cut it. Not a transition: no event.
    fn stay_open_until(&self, until_ms: u64) {
        let _one_at_a_time = self.opening.lock();
        if self.state.load().status != Status::Open {
            return;
        }
        let opened = self.opened_at_ms.load(Ordering::Acquire);
        self.min_open_ms
            .fetch_max(until_ms.saturating_sub(opened), Ordering::AcqRel);
    }

    /// Opens a CLOSED breaker because the shared state store reports the dependency open, for
    /// `remaining_ms`: what the store's open period has left, and no longer,
    /// so that it follows a close published once the shared period is over.
    pub(crate) fn open_from_store(&self, site: Site<'_>, remaining_ms: u64, now_ms: u64) -> bool {
        let word = self.state.load();
        if word.status != Status::Closed {
            return false;
        }
        let cause = TripCause::Message(
            "the shared state store reports the circuit open (another instance tripped it)".into(),
        );
        self.open(
            site,
            OpenFrom::Closed(word.generation),
            OpenTrigger::StateStore,
            cause,
            remaining_ms,
            now_ms,
        )
    }

    /// Another instance's trial closed the shared state: closes this breaker if it is OPEN
    /// past its own open duration or HALF_OPEN (never within its own open duration); returns
    /// whether it closed.
    pub(crate) fn close_from_store(&self, site: Site<'_>, now_ms: u64) -> bool {
        let word = self.state.load();
        let sleep_window_ms = site.command.properties.hot().sleep_window_ms();
        let may_close = match word.status {
            Status::Closed => false,
            Status::Open => now_ms > self.open_until_ms(sleep_window_ms),
            Status::HalfOpen => true,
        };
        if !may_close || self.state.transition(word, Status::Closed).is_none() {
            return false;
        }
        self.closed(site, now_ms, true);
        true
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

    /// The state word now.
    pub(crate) fn word(&self) -> Word {
        self.state.load()
    }

    /// The state now (ignoring the force flags).
    pub(crate) fn status(&self) -> Status {
        self.state.load().status
    }

    /// Re-opens since it last closed.
    pub(crate) fn reopens(&self) -> u32 {
        self.reopens.load(Ordering::Relaxed)
    }

    /// Hystrix's command-level `isCircuitBreakerOpen()`: forceOpen, or (unless forceClosed) OPEN
    /// or HALF_OPEN. A disabled breaker is never open.
    pub(crate) fn is_open(&self, flags: &HotSnapshot) -> bool {
        flags.circuit_breaker_enabled()
            && (flags.force_open() || (!flags.force_closed() && self.status() != Status::Closed))
    }

    /// `force_open()`: OPEN now, for a new sleep window.
    pub(crate) fn force_open(&self, site: Site<'_>, now_ms: u64) {
        let opened = {
            let _one_at_a_time = self.opening.lock();
            self.opened_at_ms.store(now_ms, Ordering::Release);
            self.open_for_ms.store(0, Ordering::Release);
            self.min_open_ms.store(0, Ordering::Release);
            self.state.force(Status::Open)
        };
        // Not `TripCause::ForcedOpen`: that names the sticky property, this is one opening.
        self.trips()
            .record(opened.generation, TripCause::ManuallyOpened);
        site.emit(BreakerEventKind::ForcedOpen);
        if let Some(extras) = site.extras() {
            if let Some(probe) = &extras.probe {
                probe.schedule(site.command, opened.generation, now_ms);
            }
            if let Some(shared) = &extras.shared {
                let sleep_window_ms = site.command.properties.hot().sleep_window_ms();
                shared.forced_open(sleep_window_ms);
            }
        }
    }

    /// After a manual close: the store hears it (overriding a shared OPEN), and the journal
    /// replays.
    fn after_manual_close(&self, site: Site<'_>) {
        let Some(extras) = site.extras() else {
            return;
        };
        if let Some(shared) = &extras.shared {
            shared.forced_close();
        }
        if let Some(journal) = &extras.journal {
            site.command.start_replay(journal);
        }
    }

    /// `force_close()`: CLOSED now, with the health counts restarted from zero.
    pub(crate) fn force_close(&self, site: Site<'_>, now_ms: u64) {
        self.state.force(Status::Closed);
        site.note_closed();
        site.restart_health(now_ms);
        self.reopens.store(0, Ordering::Relaxed);
        site.emit(BreakerEventKind::ForcedClosed);
        self.after_manual_close(site);
    }

    /// `reset()`: CLOSED, health restarted, trip cause and last failure forgotten.
    pub(crate) fn reset(&self, site: Site<'_>, now_ms: u64) {
        self.state.force(Status::Closed);
        site.note_closed();
        site.restart_health(now_ms);
        self.reopens.store(0, Ordering::Relaxed);
        if let Some(trips) = self.trips.get() {
            trips.clear();
        }
        self.last_failure
            .store(FailureKind::None as u8, Ordering::Relaxed);
        site.emit(BreakerEventKind::Reset);
        self.after_manual_close(site);
    }

    /// Why it opened last, if it is or was open.
    pub(crate) fn trip_cause(&self) -> Option<TripCause> {
        self.trips.get()?.latest()
    }
}

/// A command key's circuit breaker, or one of its keyed breakers, to look at and to override by
/// hand. Obtain it with
/// [`Command::circuit_breaker`](crate::Command::circuit_breaker) or
/// [`Registry::circuit_breaker`](crate::Registry::circuit_breaker), and a keyed one with
/// [`Command::keyed_circuit_breaker`](crate::Command::keyed_circuit_breaker) or
/// [`Registry::keyed_circuit_breaker`](crate::Registry::keyed_circuit_breaker). Cheap to clone.
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
    keyed: Option<Arc<KeyedBreaker>>,
}

impl fmt::Debug for CircuitBreakerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerHandle")
            .field("command_key", &self.command.key)
            .field("breaker_key", &self.breaker_key())
            .field("status", &self.site().breaker().status())
            .finish()
    }
}

impl CircuitBreakerHandle {
    pub(crate) fn new(command: Arc<CommandState>) -> Self {
        CircuitBreakerHandle {
            command,
            keyed: None,
        }
    }

    pub(crate) fn keyed(command: Arc<CommandState>, keyed: Arc<KeyedBreaker>) -> Self {
        CircuitBreakerHandle {
            command,
            keyed: Some(keyed),
        }
    }

    fn site(&self) -> Site<'_> {
        Site::of(&self.command, self.keyed.as_deref())
    }

    fn now(&self) -> u64 {
        self.command.env.clock.now_ms()
    }

    /// Applies the health counts of any health bucket completed since the last look.
    fn refresh(&self) -> HotSnapshot {
        let flags = self.command.properties.hot().load();
        if flags.circuit_breaker_enabled() {
            self.site().breaker().refresh(self.site(), self.now());
        }
        flags
    }

    /// The key of this keyed breaker (see
    /// [`CommandBuilder::breaker_per_key`](crate::command::CommandBuilder::breaker_per_key);
    /// [`OVERFLOW_BREAKER_KEY`] for the overflow breaker); `None` for a command's own breaker.
    pub fn breaker_key(&self) -> Option<&str> {
        self.keyed.as_deref().map(|keyed| &*keyed.key)
    }

    /// CLOSED, OPEN or HALF_OPEN now (the force flags aside; see
    /// [`is_open`](Self::is_open)). Like an execution, the read first applies the health
    /// counts of any health bucket completed since the last look, so it can trip the breaker;
    /// the open duration, though, is left to the next execution (OPEN stays OPEN until a trial
    /// is attempted).
    pub fn status(&self) -> Status {
        self.refresh();
        self.site().breaker().status()
    }

    /// Whether the circuit is open now, as Hystrix's `isCircuitBreakerOpen()`: forceOpen, or
    /// (unless forceClosed) OPEN or HALF_OPEN; never when `circuitBreaker.enabled` is false.
    /// Brings the health check up to date first, as [`status`](Self::status).
    pub fn is_open(&self) -> bool {
        let flags = self.refresh();
        self.site().breaker().is_open(&flags)
    }

    /// How long the current opening lasts, in ms, while OPEN or HALF_OPEN (`None` when
    /// CLOSED): the sleep window (`circuitBreaker.sleepWindowInMilliseconds`, 5000 by default)
    /// grown by the [`Backoff`] policy, or the minimum a
    /// [`TripNow`](crate::command::Class::TripNow) error asked for if longer. Opened because
    /// the shared state store said OPEN, it is what was left of the shared open period then.
    pub fn open_duration_ms(&self) -> Option<u64> {
        let sleep_window_ms = self.command.properties.hot().sleep_window_ms();
        (self.status() != Status::Closed)
            .then(|| self.site().breaker().open_duration_ms(sleep_window_ms))
    }

    /// Re-opens (failed trials) since it last closed; 0 while CLOSED and for a first opening.
    pub fn reopens(&self) -> u32 {
        self.site().breaker().reopens()
    }

    /// Opens it now for a new sleep window; it goes on as usual after that (HALF_OPEN past the
    /// window). Unlike the sticky `circuitBreaker.forceOpen` property, this is a one-time trip.
    pub fn force_open(&self) {
        self.site().breaker().force_open(self.site(), self.now());
    }

    /// Closes it now, with the health counts restarted from zero.
    pub fn force_close(&self) {
        self.site().breaker().force_close(self.site(), self.now());
    }

    /// Closes it, restarts the health counts and forgets why it last opened.
    pub fn reset(&self) {
        self.site().breaker().reset(self.site(), self.now());
    }

    /// Why it opened last: the error or slow-call percentage (with the last failure's kind),
    /// failures in a row, a failed trial, a trip-now error, the shared state store, or a forced
    /// open.
    pub fn trip_cause(&self) -> Option<TripCause> {
        self.site().breaker().trip_cause()
    }

    /// The counts it decides on now: over a TIME window the completed health buckets (the
    /// attempts a health check counted slow while running are in the bucket filling then, so
    /// they show here once it completed; the check itself counted them at once), over a COUNT
    /// window its last calls, over a CONSECUTIVE window the failures in a row (as both
    /// requests and errors).
    pub fn health_counts(&self) -> HealthCounts {
        self.site().health(self.now())
    }
}

#[cfg(test)]
mod tests {
    use super::FailureKind;

    /// The last failure's kind lives in an atomic byte: every kind reads back as itself.
    #[test]
    fn every_failure_kind_reads_back_from_its_byte() {
        for kind in [
            FailureKind::None,
            FailureKind::Failure,
            FailureKind::Timeout,
            FailureKind::SemaphoreRejected,
            FailureKind::ThreadPoolRejected,
            FailureKind::TripNow,
        ] {
            assert_eq!(FailureKind::from_u8(kind as u8), kind);
        }
        assert_eq!(FailureKind::from_u8(6), FailureKind::None);
        assert_eq!(FailureKind::from_u8(u8::MAX), FailureKind::None);
    }
}
