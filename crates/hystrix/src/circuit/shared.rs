//! The link between a command's breaker and the registry's shared state store.
//!
//! The local breaker always decides, and the hot path never waits on the store: a sync round
//! (every `state_store_sync_interval` on the registry's executor, or on demand with
//! [`Registry::sync_state_store`](crate::Registry::sync_state_store)) does all the I/O, one
//! command after the other:
//!
//! 1. tells the store each command's breaker-configuration fingerprint when it changed
//!    ([`StateStore::set_fingerprint`]), then publishes the health counts (requests, errors)
//!    each command gathered since the last round;
//! 2. publishes the local trips (with the generation last seen, so a race is lost, not
//!    doubled) and the local closes since the last round. With
//!    [`state_store_min_reporters`](crate::RegistryBuilder::state_store_min_reporters) N > 1, a
//!    trip of the breaker's own health is published only once the shared view counts at least
//!    N distinct reporting instances (it stays pending until then, while the local breaker is
//!    open); the local breaker opens anyway (OR semantics);
//! 3. fetches the shared view: shared OPEN opens a CLOSED local breaker for what is left of
//!    the shared open period; a close published by another instance closes a local breaker
//!    only once it is past its own open duration; shared state never closes a breaker within
//!    it;
//! 4. asks for the probe permit for a breaker that is past its open duration: a local
//!    half-open trial needs it, so that one instance probes, not all of them.
//!
//! Every store call is time-boxed (`state_store_timeout`, 50 ms by default, on the registry's
//! clock). A failed or late call is counted in [`StateStoreStatus::errors_total`] and sets
//! `degraded` until a round succeeds; while degraded, breakers work on local state alone (no
//! permit needed).
//!
//! Once periodic rounds run, a round is also scheduled on the executor at once when a local
//! breaker of a shared command opens or closes (so the transition is published within a round
//! trip, not a sync interval), and whenever the store pushes a change
//! ([`StateStore::watch`]). A round asked for while one runs makes that one run again.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use super::store::{HealthDelta, SharedStatus, SharedView, StateStore, StateStoreError};
use super::{OpenTrigger, Site, Status};
use crate::clock::{Clock, Sleep};
use crate::config::CommandProperties;
use crate::key::CommandKey;
use crate::registry::CommandState;

/// How a registry's shared state store is doing (see
/// [`Registry::state_store_status`](crate::Registry::state_store_status)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StateStoreStatus {
    /// Store calls that failed or took longer than the store timeout, since the registry was
    /// built (`hystrix_state_store_errors_total`).
    pub errors_total: u64,
    /// Whether the latest round had an error: breakers then decide on local state alone.
    pub degraded: bool,
    /// Sync rounds run.
    pub rounds: u64,
}

/// A registry's store, and what its rounds need.
pub(crate) struct StoreEnv {
    store: Arc<dyn StateStore>,
    instance: Arc<str>,
    timeout_ms: u64,
    clock: Arc<dyn Clock>,
    errors: AtomicU64,
    degraded: AtomicBool,
    rounds: AtomicU64,
    /// The sync interval in ms, when rounds run by themselves.
    interval_ms: Option<u64>,
    /// When the latest round ended (or the store was set up), in ms on the clock.
    last_round_ms: AtomicU64,
    round_running: AtomicBool,
    /// A round was asked for: the running one (or the next) runs it.
    round_again: AtomicBool,
    /// Distinct reporters the shared view must show before a local trip is published.
    min_reporters: u32,
    /// The executor that pushed and transition-triggered rounds run on; set when the periodic
    /// rounds start (never with rounds on demand only, which stay deterministic).
    push_executor: OnceLock<tokio::runtime::Handle>,
    me: Weak<StoreEnv>,
    commands: Mutex<Vec<Weak<CommandState>>>,
}

impl StoreEnv {
    pub(crate) fn new(
        store: Arc<dyn StateStore>,
        instance: Arc<str>,
        timeout: Duration,
        interval_ms: Option<u64>,
        min_reporters: u32,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| StoreEnv {
            interval_ms,
            min_reporters: min_reporters.max(1),
            round_again: AtomicBool::new(false),
            push_executor: OnceLock::new(),
            me: me.clone(),
            last_round_ms: AtomicU64::new(clock.now_ms()),
            store,
            instance,
            timeout_ms: crate::config::ceil_millis(timeout).max(1),
            clock,
            errors: AtomicU64::new(0),
            degraded: AtomicBool::new(false),
            rounds: AtomicU64::new(0),
            round_running: AtomicBool::new(false),
            commands: Mutex::new(Vec::new()),
        })
    }

    /// Whether breakers must decide alone: the latest round failed, or rounds that should run
    /// by themselves stopped (none for three intervals and a timeout: the executor is gone),
    /// so that no breaker waits forever for a permit.
    fn local_only(&self) -> bool {
        if self.degraded.load(Ordering::Relaxed) {
            return true;
        }
        self.interval_ms.is_some_and(|interval_ms| {
            let silent_for = self
                .clock
                .now_ms()
                .saturating_sub(self.last_round_ms.load(Ordering::Acquire));
            silent_for
                > interval_ms
                    .saturating_mul(3)
                    .saturating_add(self.timeout_ms)
        })
    }

    pub(crate) fn status(&self) -> StateStoreStatus {
        StateStoreStatus {
            errors_total: self.errors.load(Ordering::Relaxed),
            degraded: self.degraded.load(Ordering::Relaxed),
            rounds: self.rounds.load(Ordering::Relaxed),
        }
    }

    /// A command opted in: its state takes part in the rounds from now on.
    pub(crate) fn register(&self, command: Weak<CommandState>) {
        let mut commands = self.commands.lock();
        commands.retain(|command| command.strong_count() > 0);
        commands.push(command);
    }

    /// One store call, time-boxed; a failure is counted.
    async fn call<T>(
        &self,
        call: impl Future<Output = Result<T, StateStoreError>>,
        failed: &mut bool,
    ) -> Option<T> {
        let deadline = Sleep::until(
            Arc::clone(&self.clock),
            self.clock.now_ms().saturating_add(self.timeout_ms),
        );
        let result = match deadline.race(call).await {
            Some(result) => result,
            None => Err(StateStoreError::Timeout(self.timeout_ms)),
        };
        match result {
            Ok(value) => Some(value),
            Err(err) => {
                if !*failed {
                    tracing::warn!(error = %err, "hystrix: state store call failed; local state only until a round succeeds");
                }
                self.errors.fetch_add(1, Ordering::Relaxed);
                *failed = true;
                None
            }
        }
    }

    /// Periodic rounds started on `executor`: from now on local transitions and the store's
    /// pushes schedule a round there at once (see [`StateStore::watch`]).
    pub(crate) fn start_push(&self, executor: tokio::runtime::Handle) {
        if self.push_executor.set(executor).is_err() {
            return;
        }
        let me = self.me.clone();
        self.store.watch(Arc::new(move || match me.upgrade() {
            Some(env) => {
                env.round_soon();
                true
            }
            None => false,
        }));
    }

    /// Schedules a round on the executor now, once periodic rounds run; otherwise nothing.
    pub(crate) fn round_soon(&self) {
        let (Some(executor), Some(me)) = (self.push_executor.get(), self.me.upgrade()) else {
            return;
        };
        // On a runtime that was shut down the task is dropped unrun.
        drop(executor.spawn(async move { me.round().await }));
    }

    /// One sync round (see the module docs). While another round runs, this asks it to run
    /// once more and returns at once.
    pub(crate) async fn round(&self) {
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        self.round_again.store(true, Ordering::Release);
        loop {
            if self.round_running.swap(true, Ordering::AcqRel) {
                // The running round sees the request, before or after it stops running.
                return;
            }
            let done = Done(&self.round_running);
            while self.round_again.swap(false, Ordering::AcqRel) {
                self.round_once().await;
            }
            drop(done);
            if !self.round_again.load(Ordering::Acquire) {
                return;
            }
        }
    }

    async fn round_once(&self) {
        let commands: Vec<Arc<CommandState>> = self
            .commands
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for command in &commands {
            if let Some(link) = &command.extras.shared {
                self.announce_fingerprint(command, link);
            }
        }
        let mut failed = false;
        self.publish_counts(&commands, &mut failed).await;
        for command in &commands {
            if let Some(link) = &command.extras.shared {
                self.sync_command(command, link, &mut failed).await;
            }
        }
        self.degraded.store(failed, Ordering::Relaxed);
        self.rounds.fetch_add(1, Ordering::Relaxed);
        self.last_round_ms
            .store(self.clock.now_ms(), Ordering::Release);
    }

    /// Tells the store the command's fingerprint if it changed since last told.
    fn announce_fingerprint(&self, command: &CommandState, link: &SharedLink) {
        let fingerprint = breaker_fingerprint(&command.properties.load());
        let mut announced = link.fingerprint.lock();
        if announced.as_deref() != Some(fingerprint.as_str()) {
            self.store.set_fingerprint(&command.key, &fingerprint);
            *announced = Some(fingerprint);
        }
    }

    async fn publish_counts(&self, commands: &[Arc<CommandState>], failed: &mut bool) {
        let mut deltas = Vec::new();
        let mut totals = Vec::new();
        for command in commands {
            let Some(link) = &command.extras.shared else {
                continue;
            };
            let (requests, errors) = command.counters.cumulative_health();
            let published = *link.published.lock();
            if requests > published.0 {
                deltas.push(HealthDelta {
                    command_key: command.key.clone(),
                    instance: Arc::clone(&self.instance),
                    requests: requests - published.0,
                    errors: errors.saturating_sub(published.1),
                });
            }
            totals.push((link, (requests, errors)));
        }
        if deltas.is_empty() {
            return;
        }
        if self
            .call(self.store.publish(&deltas), failed)
            .await
            .is_some()
        {
            for (link, total) in totals {
                *link.published.lock() = total;
            }
        }
    }

    async fn sync_command(
        &self,
        command: &Arc<CommandState>,
        link: &SharedLink,
        failed: &mut bool,
    ) {
        let key = &command.key;
        let trip_ms = link.pending_trip_ms.load(Ordering::Acquire);
        // A view fetched to count reporters, when the trip then waits: no need to fetch twice.
        let mut fetched = None;
        if trip_ms > 0 {
            let mut publish = true;
            if self.min_reporters > 1 && !link.pending_trip_forced.load(Ordering::Acquire) {
                let Some(view) = self.call(self.store.fetch(key), failed).await else {
                    return;
                };
                publish = view.reporters >= self.min_reporters;
                fetched = Some(view);
            }
            if publish && self.publish_trip(key, link, trip_ms, failed).await {
                let _ = link.pending_trip_ms.compare_exchange(
                    trip_ms,
                    0,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                fetched = None;
            }
        }
        let close = link.pending_close.load(Ordering::Acquire);
        if close != NO_CLOSE && self.publish_close(key, link, close, failed).await {
            let _ = link.pending_close.compare_exchange(
                close,
                NO_CLOSE,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        let view = match fetched {
            Some(view) => view,
            None => match self.call(self.store.fetch(key), failed).await {
                Some(view) => view,
                None => return,
            },
        };
        self.apply(command, link, &view);
        self.ask_permit(command, link, failed).await;
    }

    /// Publishes a local trip; `false` if the store could not be reached (try again next
    /// round). A generation that moved on is read again: unless the shared state is OPEN
    /// already (someone else's trip stands), the trip is made on the current generation.
    async fn publish_trip(
        &self,
        key: &CommandKey,
        link: &SharedLink,
        open_for_ms: u64,
        failed: &mut bool,
    ) -> bool {
        let mut generation = link.seen_generation.load(Ordering::Acquire);
        for _ in 0..2 {
            let Some(tripped) = self
                .call(self.store.try_trip(key, generation, open_for_ms), failed)
                .await
            else {
                return false;
            };
            if let Some(generation) = tripped {
                link.saw(
                    generation,
                    SharedStatus::Open {
                        remaining_ms: open_for_ms,
                    },
                );
                return true;
            }
            let Some(view) = self.call(self.store.fetch(key), failed).await else {
                return false;
            };
            if matches!(view.status, SharedStatus::Open { .. }) {
                return true;
            }
            generation = view.generation;
        }
        true
    }

    /// Publishes a local close; `false` if the store could not be reached. A trial's close
    /// whose generation moved on closes only a shared HALF_OPEN (an open period that ended
    /// with nobody's close), never a newer trip; a manual close closes whatever is there.
    async fn publish_close(
        &self,
        key: &CommandKey,
        link: &SharedLink,
        close: u8,
        failed: &mut bool,
    ) -> bool {
        let mut generation = link.seen_generation.load(Ordering::Acquire);
        for _ in 0..2 {
            let Some(closed) = self.call(self.store.close(key, generation), failed).await else {
                return false;
            };
            if let Some(generation) = closed {
                link.saw(generation, SharedStatus::Closed);
                return true;
            }
            let Some(view) = self.call(self.store.fetch(key), failed).await else {
                return false;
            };
            let retry = match view.status {
                SharedStatus::Closed => false,
                SharedStatus::HalfOpen => true,
                SharedStatus::Open { .. } => close == FORCED_CLOSE,
            };
            if !retry {
                return true;
            }
            generation = view.generation;
        }
        true
    }

    /// Applies a fetched view to the local breaker.
    fn apply(&self, command: &CommandState, link: &SharedLink, view: &SharedView) {
        let site = Site::command(command);
        let now_ms = self.clock.now_ms();
        let seen_before = link.seen_status.load(Ordering::Acquire);
        let generation_before = link.seen_generation.load(Ordering::Acquire);
        match view.status {
            SharedStatus::Open { remaining_ms } => {
                command.breaker.open_from_store(site, remaining_ms, now_ms);
            }
            SharedStatus::Closed
                if seen_before != CLOSED && view.generation != generation_before =>
            {
                // Another instance's trial closed it.
                command.breaker.close_from_store(site, now_ms);
            }
            SharedStatus::Closed | SharedStatus::HalfOpen => {}
        }
        link.saw(view.generation, view.status);
    }

    /// A local breaker past its open duration asks for the permit to send trials.
    async fn ask_permit(&self, command: &CommandState, link: &SharedLink, failed: &mut bool) {
        if link.probe_permit.load(Ordering::Acquire) {
            return;
        }
        let hot = command.properties.hot();
        let now_ms = self.clock.now_ms();
        let due = match command.breaker.status() {
            Status::Closed => false,
            Status::Open => {
                now_ms > command.breaker.open_until_ms(hot.sleep_window_ms())
                    || link.probe_healthy.load(Ordering::Acquire)
            }
            Status::HalfOpen => true,
        };
        if !due {
            return;
        }
        let ttl_ms = hot
            .sleep_window_ms()
            .max(hot.timeout_ms_if_enabled())
            .max(1);
        if let Some(true) = self
            .call(
                self.store
                    .try_acquire_probe(&command.key, &self.instance, ttl_ms),
                failed,
            )
            .await
        {
            link.probe_permit.store(true, Ordering::Release);
        }
    }
}

/// Runs a round at `first_ms`, then every `interval_ms` after the end of the previous one, on
/// the registry's clock, while the registry lives.
pub(crate) async fn run_rounds(
    store: Weak<StoreEnv>,
    clock: Arc<dyn Clock>,
    first_ms: u64,
    interval_ms: u64,
) {
    let mut due_ms = first_ms;
    loop {
        Sleep::until(Arc::clone(&clock), due_ms).await;
        let Some(store) = store.upgrade() else {
            return;
        };
        store.round().await;
        due_ms = clock.now_ms().saturating_add(interval_ms);
    }
}

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const HALF_OPEN: u8 = 2;

/// What close is waiting to be published.
const NO_CLOSE: u8 = 0;
const TRIAL_CLOSE: u8 = 1;
const FORCED_CLOSE: u8 = 2;

/// A command's link to the store.
pub(crate) struct SharedLink {
    store: Arc<StoreEnv>,
    /// The store generation last seen.
    seen_generation: AtomicU64,
    /// The store status last seen (CLOSED, OPEN, HALF_OPEN).
    seen_status: AtomicU8,
    /// This instance holds the store's probe permit for the current opening.
    probe_permit: AtomicBool,
    /// A local trip to publish: its open duration in ms (0: none).
    pending_trip_ms: AtomicU64,
    /// That trip was made by hand (`force_open`): published whatever the reporter count.
    pending_trip_forced: AtomicBool,
    /// The breaker-configuration fingerprint last told to the store.
    fingerprint: Mutex<Option<String>>,
    /// A local close to publish: NO_CLOSE, TRIAL_CLOSE or FORCED_CLOSE.
    pending_close: AtomicU8,
    /// A health probe found the dependency healthy but the permit was missing: ask for it.
    probe_healthy: AtomicBool,
    /// The cumulative (requests, errors) published so far.
    published: Mutex<(u64, u64)>,
}

impl SharedLink {
    pub(crate) fn new(store: Arc<StoreEnv>) -> Self {
        SharedLink {
            store,
            seen_generation: AtomicU64::new(0),
            seen_status: AtomicU8::new(CLOSED),
            probe_permit: AtomicBool::new(false),
            pending_trip_ms: AtomicU64::new(0),
            pending_trip_forced: AtomicBool::new(false),
            fingerprint: Mutex::new(None),
            pending_close: AtomicU8::new(NO_CLOSE),
            probe_healthy: AtomicBool::new(false),
            published: Mutex::new((0, 0)),
        }
    }

    fn saw(&self, generation: u64, status: SharedStatus) {
        self.seen_generation.store(generation, Ordering::Release);
        let status = match status {
            SharedStatus::Closed => CLOSED,
            SharedStatus::Open { .. } => OPEN,
            SharedStatus::HalfOpen => HALF_OPEN,
        };
        self.seen_status.store(status, Ordering::Release);
    }

    /// Whether a breaker past its open duration may send trials: with the store's permit, or
    /// when the store is degraded or its rounds stopped (local state only).
    pub(crate) fn may_probe(&self) -> bool {
        self.probe_permit.load(Ordering::Acquire) || self.store.local_only()
    }

    /// The local breaker opened: a new opening needs a new permit; a local trip is published.
    pub(crate) fn opened(&self, trigger: OpenTrigger, open_duration_ms: u64) {
        self.open(trigger, open_duration_ms, false);
    }

    fn open(&self, trigger: OpenTrigger, open_duration_ms: u64, forced: bool) {
        self.probe_permit.store(false, Ordering::Release);
        self.probe_healthy.store(false, Ordering::Release);
        if trigger != OpenTrigger::StateStore {
            self.pending_close.store(NO_CLOSE, Ordering::Release);
            self.pending_trip_forced.store(forced, Ordering::Release);
            self.pending_trip_ms
                .store(open_duration_ms.max(1), Ordering::Release);
            self.store.round_soon();
        }
    }

    /// Opened by hand: published as a trip, whatever the number of reporters.
    pub(crate) fn forced_open(&self, open_duration_ms: u64) {
        self.open(OpenTrigger::Health, open_duration_ms, true);
    }

    /// The local breaker closed: after its own trials the close is published; closed by the
    /// store, there is nothing to tell.
    pub(crate) fn closed(&self, by_store: bool) {
        self.close(if by_store { NO_CLOSE } else { TRIAL_CLOSE });
    }

    fn close(&self, publish: u8) {
        self.probe_permit.store(false, Ordering::Release);
        self.probe_healthy.store(false, Ordering::Release);
        self.pending_trip_ms.store(0, Ordering::Release);
        if publish != NO_CLOSE {
            self.pending_close.store(publish, Ordering::Release);
            self.store.round_soon();
        }
    }

    /// Closed (or reset) by hand: published as a close that overrides a shared OPEN.
    pub(crate) fn forced_close(&self) {
        self.close(FORCED_CLOSE);
    }

    /// A health probe answered healthy: it may move the breaker only with the store's permit
    /// (or while the store is out of reach); without it, the next round asks for one.
    pub(crate) fn probe_may_half_open(&self) -> bool {
        if self.may_probe() {
            return true;
        }
        self.probe_healthy.store(true, Ordering::Release);
        false
    }
}

/// The thresholds that decide a command's trips, as [`StateStore::set_fingerprint`] receives
/// them, e.g. `volume=20;error%=50;sleep=5000ms;window=10000ms;health=500ms;trials=1/1`.
fn breaker_fingerprint(props: &CommandProperties) -> String {
    format!(
        "volume={};error%={};sleep={}ms;window={}ms;health={}ms;trials={}/{}",
        props.circuit_breaker_request_volume_threshold,
        props.circuit_breaker_error_threshold_percentage,
        props.circuit_breaker_sleep_window_in_milliseconds,
        props.metrics_rolling_stats_time_in_milliseconds,
        props.metrics_health_snapshot_interval_in_milliseconds,
        props.circuit_breaker_half_open_success_threshold,
        props.circuit_breaker_half_open_permitted_requests,
    )
}
