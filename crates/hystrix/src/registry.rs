//! The registry: per-key state, properties, clock and plugins.
//!
//! Everything Hystrix keeps in static maps lives in a [`Registry`]: command
//! state (breaker, semaphores, metrics) per command key, the property layers, the clock and the
//! plugins. [`Registry::global`] is a process-wide default for convenience; tests and
//! multi-tenant services create isolated ones with [`Registry::new`] or [`Registry::builder`].

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use crate::circuit::journal::{Journal, JournalEvent};
use crate::circuit::store::StateStore;
use crate::circuit::{
    BreakerEventKind, BreakerExtras, BreakerSpec, CircuitBreaker, CircuitBreakerEvent,
    CircuitBreakerHandle, CircuitBreakerListener, KeyedBreakers, MAX_KEYED_COUNT_WINDOW,
    ProbeState, SharedLink, Site, StateStoreStatus, Status, StoreEnv, Window, WindowType,
};
use crate::clock::{Clock, SystemClock};
use crate::collapser::CollapserCounters;
use crate::command::ExecutionResult;
use crate::config::{
    CommandKind, CommandLayer, CommandProperties, IsolationStrategy, Properties, PropertyCell,
    ThreadPoolLayer,
};
use crate::error::ConfigError;
use crate::event::{EventCounts, EventNotifier, EventType, ExecutionHook};
use crate::isolation::priority::{Held, Priority};
use crate::isolation::semaphore::Semaphore;
use crate::isolation::thread_pool::{Rejection, ThreadPool, ThreadPoolMetrics};
use crate::key::{CollapserKey, CommandKey, GroupKey, ThreadPoolKey};
use crate::metrics::{CommandCounters, CommandMetrics};

/// What every command state of a registry shares: clock, properties, thread pools, plugins.
pub(crate) struct Env {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) properties: Properties,
    pools: Mutex<HashMap<ThreadPoolKey, ThreadPool>>,
    shut_down: AtomicBool,
    shutdown_timeout: Duration,
    executor: Mutex<Executor>,
    /// Eager executions (`queue`, `observe`) running on the executor, and a signal when one ends.
    eager_in_flight: Mutex<u32>,
    eager_ended: parking_lot::Condvar,
    notifier: Option<Arc<dyn EventNotifier>>,
    notifier_panicked: AtomicBool,
    hook: Option<Arc<dyn ExecutionHook>>,
    hook_panicked: AtomicBool,
    /// `notifier` or `hook` is set (one load on the hot path).
    observed: bool,
    breaker_listener: Option<Arc<dyn CircuitBreakerListener>>,
    breaker_listener_panicked: AtomicBool,
    /// The shared state store, if any, and the sync interval in ms (`None`:
    /// rounds only on demand).
    store: Option<Arc<StoreEnv>>,
    store_interval_ms: Option<u64>,
    store_rounds_started: AtomicBool,
    /// The metrics of every collapser key in use.
    collapsers: Mutex<HashMap<CollapserKey, Arc<CollapserCounters>>>,
    /// Every collapser key's parts (its batchers), shared by its definitions.
    collapser_parts: Mutex<HashMap<CollapserKey, SharedParts>>,
    /// The named retry budgets (`retry.budget.name`), made by their first user.
    retry_budgets: Mutex<HashMap<String, Arc<crate::retry::budget::RetryBudget>>>,
    /// The seed of the random draws (retry jitter); each command key derives its own.
    random_seed: u64,
}

/// Refuses a window the breaker extras cannot keep: COUNT and CONSECUTIVE with a shared state
/// store (its payload carries a time window's counts only), and a COUNT window too large for
/// keyed breakers (each keeps one, within 512 bytes when idle).
fn check_window(
    key: &CommandKey,
    props: &CommandProperties,
    spec: &BreakerSpec,
) -> Result<(), ConfigError> {
    let kind = props.circuit_breaker_window_type;
    let refuse = |name: &str, value: String, reason: String| {
        Err(ConfigError::InvalidValue {
            name: format!("hystrix.command.{key}.{name}"),
            value,
            reason,
        })
    };
    if spec.shared && kind != WindowType::Time {
        return refuse(
            "circuitBreaker.window.type",
            kind.to_string(),
            "a shared state store carries a TIME window's counts only (requests and errors per \
             round); COUNT and CONSECUTIVE windows cannot be shared across instances"
                .into(),
        );
    }
    let size = props.circuit_breaker_window_size;
    if spec.keyed.is_some() && kind == WindowType::Count && size > MAX_KEYED_COUNT_WINDOW {
        return refuse(
            "circuitBreaker.window.size",
            size.to_string(),
            format!(
                "must be at most {MAX_KEYED_COUNT_WINDOW} with keyed breakers: each keeps its \
                 own window of one byte per call, and an idle keyed breaker stays within 512 \
                 bytes"
            ),
        );
    }
    Ok(())
}

/// The seed of `key`'s random draws: the registry's seed mixed with the key's name (FNV-1a),
/// so keys draw different sequences and a fixed registry seed repeats them exactly.
fn random_seed_of(registry_seed: u64, key: &CommandKey) -> u64 {
    key.as_str()
        .bytes()
        .fold(registry_seed ^ 0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// A collapser key's parts, type-erased: its scope, a description of its types, the parts.
type SharedParts = (
    crate::collapser::CollapserScope,
    &'static str,
    Arc<dyn std::any::Any + Send + Sync>,
);

/// An eager execution in flight on the executor (see [`Env::eager_started`]).
pub(crate) struct EagerGuard(Arc<Env>);

impl Drop for EagerGuard {
    fn drop(&mut self) {
        let mut in_flight = self.0.eager_in_flight.lock();
        *in_flight -= 1;
        if *in_flight == 0 {
            self.0.eager_ended.notify_all();
        }
    }
}

/// Where eager executions (`queue`, `observe`) run after their first steps.
enum Executor {
    /// None yet: a small runtime of our own is made on first use.
    Unset,
    /// The user's runtime.
    Given(tokio::runtime::Handle),
    /// Our own runtime.
    Own(tokio::runtime::Runtime),
    /// The registry was shut down.
    ShutDown,
}

impl Env {
    /// The named retry budget `name`, made with a window of `window_ms` by its first user.
    pub(crate) fn retry_budget(
        &self,
        name: &str,
        window_ms: u64,
    ) -> Arc<crate::retry::budget::RetryBudget> {
        let mut budgets = self.retry_budgets.lock();
        Arc::clone(
            budgets
                .entry(name.to_owned())
                .or_insert_with(|| Arc::new(crate::retry::budget::RetryBudget::new(window_ms))),
        )
    }

    /// The pool of `key`, created on first use; refused once the registry is shut down.
    pub(crate) fn thread_pool(&self, key: &ThreadPoolKey) -> Result<ThreadPool, Rejection> {
        let mut pools = self.pools.lock();
        if self.shut_down.load(Ordering::Acquire) {
            return Err(Rejection::Shutdown);
        }
        if let Some(pool) = pools.get(key) {
            return Ok(pool.clone());
        }
        // The builders' values were registered (and checked) when their commands were built.
        let properties = self
            .properties
            .register_thread_pool(key, ThreadPoolLayer::default())
            .map_err(|err| {
                tracing::error!(pool = %key, error = %err, "hystrix: thread pool refused");
                Rejection::Shutdown
            })?;
        let max_queue_size = properties.load().max_queue_size;
        let pool = ThreadPool::new(
            key.clone(),
            properties,
            max_queue_size,
            Arc::clone(&self.clock),
        );
        pools.insert(key.clone(), pool.clone());
        Ok(pool)
    }

    /// Shuts every pool down (see [`Registry::shutdown`]).
    fn shutdown(&self) {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return;
        }
        let until = std::time::Instant::now() + self.shutdown_timeout;
        // Pools first: the executor's tasks wait for runs on pool threads, and get their
        // results if those finish within the bound.
        let pools: Vec<ThreadPool> = self.pools.lock().values().cloned().collect();
        for pool in pools {
            let report = pool.shutdown(self.shutdown_timeout);
            if report.detached > 0 {
                tracing::warn!(
                    pool = %pool.key(),
                    threads = report.detached,
                    "hystrix: pool threads still running a task at shutdown are left to finish"
                );
            }
        }
        // A runtime drops its tasks when shut down: let the eager executions end first (those
        // whose runs just finished on a pool thread only need a poll to answer their handles).
        let mut in_flight = self.eager_in_flight.lock();
        while *in_flight > 0 {
            if self
                .eager_ended
                .wait_until(&mut in_flight, until)
                .timed_out()
            {
                break;
            }
        }
        drop(in_flight);
        if let Executor::Own(runtime) =
            std::mem::replace(&mut *self.executor.lock(), Executor::ShutDown)
        {
            // Blocking inside an async context is not allowed; there, let it wind down alone.
            if tokio::runtime::Handle::try_current().is_ok() {
                runtime.shutdown_background();
            } else {
                runtime
                    .shutdown_timeout(until.saturating_duration_since(std::time::Instant::now()));
            }
        }
    }

    /// The counters of collapser `key`, made on its first use with `props`.
    pub(crate) fn collapser_counters(
        &self,
        key: &CollapserKey,
        props: &crate::config::CollapserProperties,
    ) -> Arc<CollapserCounters> {
        Arc::clone(
            self.collapsers
                .lock()
                .entry(key.clone())
                .or_insert_with(|| Arc::new(CollapserCounters::new(props))),
        )
    }

    /// The parts of collapser `key`: those of its first definition (as Hystrix keeps one
    /// collapser per key), made by `make` for the first.
    ///
    /// # Errors
    /// [`ConfigError::ConflictingDefinition`] if the first definition has another scope or
    /// other types (`types` describes this one's).
    pub(crate) fn collapser_parts<P: Clone + Send + Sync + 'static>(
        &self,
        key: &CollapserKey,
        scope: crate::collapser::CollapserScope,
        types: &'static str,
        make: impl FnOnce() -> P,
    ) -> Result<P, ConfigError> {
        let mut all = self.collapser_parts.lock();
        if let Some((existing_scope, existing_types, parts)) = all.get(key) {
            let conflict = |what: &str, existing: String, requested: String| {
                ConfigError::ConflictingDefinition {
                    key: key.to_string(),
                    what: what.to_owned(),
                    existing,
                    requested,
                }
            };
            if *existing_scope != scope {
                return Err(conflict(
                    "collapser scope",
                    format!("{existing_scope:?}"),
                    format!("{scope:?}"),
                ));
            }
            return Arc::clone(parts)
                .downcast::<P>()
                .map(|parts| (*parts).clone())
                .map_err(|_| {
                    conflict(
                        "collapser argument, response or error type",
                        (*existing_types).to_owned(),
                        types.to_owned(),
                    )
                });
        }
        let parts = make();
        all.insert(key.clone(), (scope, types, Arc::new(parts.clone())));
        Ok(parts)
    }

    /// Counts an eager execution running on the executor until the returned guard drops.
    pub(crate) fn eager_started(self: &Arc<Self>) -> EagerGuard {
        *self.eager_in_flight.lock() += 1;
        EagerGuard(Arc::clone(self))
    }

    /// The runtime eager executions continue on (made on first use); `None` once shut down.
    pub(crate) fn executor(&self) -> Option<tokio::runtime::Handle> {
        let mut executor = self.executor.lock();
        if matches!(*executor, Executor::Unset) {
            let built = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("hystrix-executor")
                .enable_all()
                .build();
            match built {
                Ok(runtime) => *executor = Executor::Own(runtime),
                Err(err) => {
                    tracing::error!(error = %err, "hystrix: could not start the executor");
                    return None;
                }
            }
        }
        match &*executor {
            Executor::Given(handle) => Some(handle.clone()),
            Executor::Own(runtime) => Some(runtime.handle().clone()),
            Executor::Unset | Executor::ShutDown => None,
        }
    }

    #[inline]
    pub(crate) fn has_notifier(&self) -> bool {
        self.notifier.is_some()
    }

    /// Calls the event notifier, if any, catching (and logging once) a panic inside it.
    pub(crate) fn notify(&self, call: impl FnOnce(&dyn EventNotifier)) {
        let Some(notifier) = &self.notifier else {
            return;
        };
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| call(notifier.as_ref()))) {
            let message = crate::command::panic_message(panic);
            if !self.notifier_panicked.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    "hystrix: the event notifier panicked ({message}); its panics are ignored \
                     and logged only once"
                );
            }
        }
    }

    /// Whether an execution hook is registered.
    #[inline]
    pub(crate) fn has_hook(&self) -> bool {
        self.hook.is_some()
    }

    /// Whether an event notifier or an execution hook is registered.
    #[inline]
    pub(crate) fn is_observed(&self) -> bool {
        self.observed
    }

    /// Calls the execution hook, if any; a panic in it is caught and logged once.
    pub(crate) fn hook(&self, call: impl FnOnce(&dyn ExecutionHook)) {
        let Some(hook) = &self.hook else {
            return;
        };
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| call(hook.as_ref()))) {
            let message = crate::command::panic_message(panic);
            if !self.hook_panicked.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    "hystrix: the execution hook panicked ({message}); its panics are ignored \
                     and logged only once"
                );
            }
        }
    }

    pub(crate) fn notify_event(&self, event: EventType, key: &CommandKey) {
        self.notify(|n| n.mark_event(event, key));
    }

    /// Logs a circuit-breaker change and tells the listener, if any (a panic in it is caught
    /// and logged once).
    fn breaker_event(&self, event: &CircuitBreakerEvent) {
        let command = &event.command_key;
        // Recorded only for a keyed breaker (an `Option` field with `None` records nothing).
        let breaker_key = event.breaker_key.as_deref();
        match &event.kind {
            BreakerEventKind::Opened {
                cause,
                trigger,
                open_duration_ms,
            } => tracing::warn!(
                command = %command,
                breaker_key,
                cause = %cause,
                ?trigger,
                open_duration_ms,
                "hystrix: circuit opened"
            ),
            kind if event.is_transition() => {
                tracing::info!(command = %command, breaker_key, event = ?kind, "hystrix: circuit changed")
            }
            kind => {
                tracing::debug!(command = %command, breaker_key, event = ?kind, "hystrix: journal")
            }
        }
        let Some(listener) = &self.breaker_listener else {
            return;
        };
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| listener.on_event(event))) {
            let message = crate::command::panic_message(panic);
            if !self.breaker_listener_panicked.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    "hystrix: the circuit-breaker listener panicked ({message}); its panics are \
                     ignored and logged only once"
                );
            }
        }
    }
}

/// A command key's identity, from [`Registry::command_info`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommandInfo {
    /// The command key.
    pub command_key: CommandKey,
    /// The group key its first definition gave.
    pub group: GroupKey,
    /// The thread-pool key its THREAD executions use (after `threadPoolKeyOverride`).
    pub thread_pool_key: ThreadPoolKey,
    /// Whether an execution of this key has used its thread pool (ran under THREAD isolation,
    /// or was rejected by the pool). With `execution.isolation.strategy` unset, the isolation
    /// depends on the run kind of each call; this tells which one was seen.
    pub used_thread_pool: bool,
    /// Whether it has a breaker per key
    /// ([`CommandBuilder::breaker_per_key`](crate::command::CommandBuilder::breaker_per_key)):
    /// its executions then count in their keys' health windows, not in the command's (see
    /// [`Registry::open_breaker_keys`]).
    pub keyed_breakers: bool,
}

/// The shared state of one command key: breaker, semaphores, metrics and live properties.
pub(crate) struct CommandState {
    pub(crate) key: CommandKey,
    pub(crate) group: GroupKey,
    pub(crate) thread_pool_key: ThreadPoolKey,
    /// The thread-pool key the first definition gave (before `threadPoolKeyOverride`).
    requested_thread_pool_key: Option<ThreadPoolKey>,
    pub(crate) properties: Arc<PropertyCell<CommandKind>>,
    pub(crate) execution_semaphore: Semaphore,
    /// Runs of this key on pool threads (THREAD isolation): counted apart from the SEMAPHORE
    /// permits, which they must not use up.
    pub(crate) pool_running: Semaphore,
    pub(crate) fallback_semaphore: Semaphore,
    pub(crate) breaker: CircuitBreaker,
    pub(crate) counters: CommandCounters,
    /// `metrics.healthSnapshot.intervalInMilliseconds` (fixed once the key exists).
    pub(crate) health_interval_ms: u64,
    pub(crate) env: Arc<Env>,
    pool: OnceLock<ThreadPool>,
    classifier_panicked: AtomicBool,
    /// A blocking `execute()` on a thread a tokio runtime drives was logged (once per key).
    blocking_in_runtime_warned: AtomicBool,
    /// The breaker's extras (backoff, probe, journal, shared store, keyed breakers), boxed:
    /// they are off the hot path, and inline they spread its fields (measured: +3 ns).
    pub(crate) extras: Box<BreakerExtras>,
    /// This state, for timers and tasks that must not keep it alive.
    pub(crate) me: Weak<CommandState>,
    /// Retry: the budget, the custom delay function, the jitter's random source (boxed: off
    /// the hot path).
    pub(crate) retry: Box<crate::retry::RetryState>,
    /// Hedging: the first-attempt latencies of the adaptive delay (boxed: off the hot path).
    pub(crate) hedging: Box<crate::hedging::HedgeState>,
    /// Adaptive concurrency limits: the algorithm and the waiters' queue (boxed: off the hot
    /// path).
    pub(crate) limiter: Box<crate::isolation::adaptive::Limiter>,
    /// Executions waiting for a place under the adaptive limit: every release reads it.
    pub(crate) limit_waiting: AtomicU32,
    /// Executions by priority class (boxed: off the hot path).
    pub(crate) priorities: Box<crate::isolation::priority::Priorities>,
    /// Client-side adaptive throttling: the window's counts and the draws' random source
    /// (boxed: off the hot path).
    pub(crate) throttle: Box<crate::throttle::Throttle>,
    /// Chaos injection's random source.
    pub(crate) chaos: crate::chaos::Chaos,
}

impl CommandState {
    /// The command's thread pool, if an execution created it already.
    pub(crate) fn thread_pool_if_created(&self) -> Option<ThreadPool> {
        self.pool
            .get()
            .cloned()
            .or_else(|| self.env.pools.lock().get(&self.thread_pool_key).cloned())
    }

    /// The command's thread pool, created on first use.
    pub(crate) fn thread_pool(&self) -> Result<&ThreadPool, Rejection> {
        if let Some(pool) = self.pool.get() {
            return Ok(pool);
        }
        let pool = self.env.thread_pool(&self.thread_pool_key)?;
        Ok(self.pool.get_or_init(|| pool))
    }

    pub(crate) fn metrics(&self) -> CommandMetrics {
        let hot = self.properties.hot();
        // A read brings the breaker up to date: it applies the health buckets completed since its
        // last look.
        if hot.load().circuit_breaker_enabled() {
            self.breaker
                .refresh(Site::command(self), self.env.clock.now_ms());
        }
        let open_duration_ms = (self.breaker.status() != Status::Closed)
            .then(|| self.breaker.open_duration_ms(hot.sleep_window_ms()));
        self.counters
            .snapshot(
                self.key.clone(),
                self.env.clock.now_ms(),
                self.running(),
                hot.load().percentiles_enabled(),
            )
            .with_open_duration(open_duration_ms)
            .with_adaptive_limit(hot.load().adaptive().then(|| {
                crate::metrics::AdaptiveLimitSnapshot {
                    limit: hot.load().semaphore_max,
                    in_flight: self.execution_semaphore.in_use(),
                    queued: self.limit_waiting.load(Ordering::Acquire),
                }
            }))
            // Not for a THREAD key without adaptive limits: its pool admits, reserves apply
            // nowhere.
            .with_priorities(hot.load().reserves_apply().then(|| {
                self.priorities
                    .snapshot(hot.load().semaphore_max, hot.priority_reserves())
            }))
            .with_throttle(
                hot.load()
                    .throttle()
                    .then(|| self.throttle.snapshot(hot, self.env.clock.now_ms())),
            )
    }

    /// Executions of this key whose user code runs now: SEMAPHORE permits held or runs on pool
    /// threads. The larger of the two: only one is in use, but under THREAD isolation with
    /// adaptive limits each pool run holds a permit too (taken before the pool).
    pub(crate) fn running(&self) -> u32 {
        self.execution_semaphore
            .in_use()
            .max(self.pool_running.in_use())
    }

    /// Takes an execution permit for a call of `priority` under `props.semaphore_max` (the
    /// cap, or the adaptive limit if lower), less, while priority reserves are set, the unused
    /// reserves of the classes above `priority` (the call is then counted in its class).
    /// Returns how many permits are held with this one and how it holds its permit, or `None`
    /// when refused. Give it back with [`release_permit`](Self::release_permit).
    pub(crate) fn take_permit(
        &self,
        props: &crate::config::HotSnapshot,
        priority: Priority,
    ) -> Option<(u32, Held)> {
        if !props.prioritized() {
            return self
                .execution_semaphore
                .try_take_counted(props.semaphore_max)
                .map(|in_flight| (in_flight, Held::Plain));
        }
        let admitted = self.priorities.admit(
            priority,
            props.semaphore_max,
            self.properties.hot().priority_reserves(),
            || self.execution_semaphore.in_use(),
        );
        // A refusal is counted once the execution is refused (it may wait for a place).
        let in_flight = admitted?;
        self.priorities.count(priority, true);
        // Counted in its class first: the semaphore only follows.
        self.execution_semaphore.enter_counted();
        Some((in_flight, Held::Counted(priority)))
    }

    /// Gives back an execution permit taken as `held` (by `try_take`,
    /// [`take_permit`](Self::take_permit) or a wait for a place), and wakes a waiter under the
    /// adaptive limit, if any. A class count goes first, so the total never reads low.
    #[inline(always)]
    pub(crate) fn release_permit(&self, held: Held) {
        if let Held::Counted(priority) = held {
            self.priorities.leave(priority);
        }
        self.execution_semaphore.give_back();
        self.wake_limit_waiter();
    }

    /// A permit was just given back: the longest waiter for a place under the adaptive limit,
    /// if any, tries for it (all of them while priority reserves are set: the longest may be of
    /// a class the freed place is not for).
    #[inline(always)]
    pub(crate) fn wake_limit_waiter(&self) {
        if self.limit_waiting.load(Ordering::SeqCst) != 0 {
            self.limiter
                .wake(self.properties.hot().load().prioritized());
        }
    }

    /// A circuit-breaker change of this key: logged and told to the registry's listener.
    pub(crate) fn breaker_event(&self, event: CircuitBreakerEvent) {
        self.env.breaker_event(&event);
    }

    /// The breaker closed: the journal's short-circuited requests go to the replay function,
    /// on the executor, while it stays closed.
    pub(crate) fn start_replay(&self, journal: &Arc<Journal>) {
        let Some(executor) = self.env.executor() else {
            return;
        };
        let weak = self.me.clone();
        let keep_going = Arc::new(move || {
            weak.upgrade()
                .is_some_and(|command| command.breaker.status() == Status::Closed)
        });
        let weak = self.me.clone();
        let on_event = Arc::new(move |event: JournalEvent| {
            if let (Some(command), JournalEvent::Replayed(entry)) = (weak.upgrade(), event) {
                Site::command(&command).emit(BreakerEventKind::Replayed(entry));
            }
        });
        journal.start_replay(&executor, Arc::clone(&self.env.clock), keep_going, on_event);
    }

    /// The classifier of a definition of this key panicked: logged once per key.
    pub(crate) fn classifier_panicked(&self, message: &str) {
        if !self.classifier_panicked.swap(true, Ordering::Relaxed) {
            tracing::error!(
                command = %self.key,
                "hystrix: the error classifier panicked ({message}); such errors count as \
                 failures, and later panics of it are not logged"
            );
        }
    }

    /// A blocking `execute()` of this key is about to block this thread: warns, once per key, if
    /// a tokio runtime drives it (a worker thread, or inside `block_on`).
    #[inline]
    pub(crate) fn check_blocking_in_runtime(&self) {
        if !self.blocking_in_runtime_warned.load(Ordering::Relaxed)
            && crate::command::driven_by_runtime()
        {
            self.warn_blocking_in_runtime();
        }
    }

    #[cold]
    fn warn_blocking_in_runtime(&self) {
        if !self
            .blocking_in_runtime_warned
            .swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                target: "hystrix::command",
                command = %self.key,
                "hystrix: command {} ran a blocking execute() inside async code a tokio runtime \
                 drives (a task, or a block_on future); it blocks the thread polling it for up to \
                 the command's timeout, and on a runtime worker every task queued there waits. In \
                 async code use execute_async().await or queue(), or call execute() inside \
                 tokio::task::spawn_blocking. (Logged once per command key.)",
                self.key
            );
        }
    }

    /// Counts a finished execution and tells the notifier; `health` is false for an execution
    /// admitted before the breaker's latest state change (it stays out of the health counts).
    #[inline]
    pub(crate) fn record(
        &self,
        result: &ExecutionResult,
        uncounted: &EventCounts,
        fallback_disabled: bool,
        health: bool,
    ) {
        let now_ms = result.start_ms + result.total_time_ms;
        let percentiles = self.properties.hot().load().percentiles_enabled();
        self.counters.record(
            now_ms,
            result,
            uncounted,
            fallback_disabled,
            Some(percentiles),
            health,
        );
        if result.isolation == IsolationStrategy::Thread
            && let Some(pool) = self.pool.get()
        {
            if result.executed_in_thread {
                pool.mark_executed(now_ms);
            } else if result.events.contains(EventType::ThreadPoolRejected) {
                pool.mark_rejected(now_ms);
            }
        }
        self.notify_execution(result);
    }

    /// Counts a request-cache hit at `now_ms`: only RESPONSE_FROM_CACHE (and CANCELLED for a
    /// hit whose caller left before the shared outcome came), no latency, nothing for health
    /// (the execution it shares is counted once, by itself); tells the notifier.
    pub(crate) fn record_cache_hit(&self, now_ms: u64, cancelled: bool) {
        let mut events = EventCounts::new();
        events.add(EventType::ResponseFromCache);
        if cancelled {
            events.add(EventType::Cancelled);
        }
        let hit = ExecutionResult {
            events,
            start_ms: now_ms,
            execution_time_ms: None,
            total_time_ms: 0,
            isolation: IsolationStrategy::Semaphore,
            executed_in_thread: false,
        };
        self.counters
            .record(now_ms, &hit, &events, false, None, true);
        if self.env.has_notifier() {
            for event in events.iter() {
                self.env.notify_event(event, &self.key);
            }
            self.notify_execution(&hit);
        }
    }

    #[inline]
    fn notify_execution(&self, result: &ExecutionResult) {
        if self.env.has_notifier() {
            self.env.notify(|n| {
                n.mark_command_execution(
                    &self.key,
                    result.isolation,
                    result.execution_time_ms.unwrap_or(0),
                    &result.events,
                )
            });
        }
    }
}

impl fmt::Debug for CommandState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandState")
            .field("key", &self.key)
            .field("group", &self.group)
            .field("thread_pool_key", &self.thread_pool_key)
            .finish_non_exhaustive()
    }
}

struct RegistryInner {
    env: Arc<Env>,
    commands: Mutex<HashMap<CommandKey, Arc<CommandState>>>,
}

impl Drop for Env {
    /// The last registry handle and the last command of an isolated registry are gone: its
    /// pools and executor stop.
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Holds per-key state, properties, the clock and plugins. Cheap to clone (a shared handle).
///
/// ```
/// use hystrix::{Command, Registry};
///
/// let registry = Registry::new();
/// let ping = Command::builder("Ping").group("Health").build_in(&registry)?;
/// let pong = ping.run(|| Ok::<_, std::io::Error>("pong")).execute()?;
/// assert_eq!(pong, "pong");
/// assert_eq!(registry.command_keys(), vec![ping.key().clone()]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Registry {
    inner: Arc<RegistryInner>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("clock", &self.inner.env.clock)
            .field("commands", &self.inner.commands.lock().len())
            .finish_non_exhaustive()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

static GLOBAL: OnceLock<Registry> = OnceLock::new();

impl Registry {
    /// The process-wide default registry, used by
    /// [`CommandBuilder::build`](crate::CommandBuilder::build): the one given to
    /// [`set_global`](Registry::set_global), else one on the system clock with no plugins,
    /// made at the first call.
    pub fn global() -> &'static Registry {
        GLOBAL.get_or_init(Registry::new)
    }

    /// Makes `registry` the process-wide default (with its clock and plugins: event
    /// notifier, execution hook, breaker listener, state store), as Hystrix registers its
    /// plugins process-wide. Call it at the start of `main`, before any command is built with
    /// [`CommandBuilder::build`](crate::CommandBuilder::build) and before
    /// [`global`](Registry::global) is called.
    ///
    /// ```
    /// use hystrix::Registry;
    /// # struct MyHook;
    /// # impl hystrix::ExecutionHook for MyHook {}
    ///
    /// Registry::set_global(Registry::builder().execution_hook(MyHook).build())?;
    /// // Commands built with `.build()` now run under the hook.
    /// # Ok::<(), hystrix::ConfigError>(())
    /// ```
    ///
    /// # Errors
    /// [`ConfigError::GlobalRegistryInUse`] if the global registry already exists (set, or
    /// made by a first use): commands may already hold it, so it cannot change (Hystrix's
    /// `HystrixPlugins.register*` refuses a plugin once one is in use the same way).
    pub fn set_global(registry: Registry) -> Result<(), ConfigError> {
        GLOBAL
            .set(registry)
            .map_err(|_| ConfigError::GlobalRegistryInUse)
    }

    /// An isolated registry on the [`SystemClock`], with no plugins.
    pub fn new() -> Self {
        Registry::builder().build()
    }

    /// A builder to choose the clock and plugins.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// The registry's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.env.clock
    }

    /// The registry's properties: set, unset and read them by their Hystrix names.
    pub fn properties(&self) -> &Properties {
        &self.inner.env.properties
    }

    /// Every command key with state in this registry, sorted by name.
    pub fn command_keys(&self) -> Vec<CommandKey> {
        let mut keys: Vec<_> = self.inner.commands.lock().keys().cloned().collect();
        keys.sort();
        keys
    }

    /// A snapshot of a command key's metrics; `None` if the key has no state here.
    pub fn command_metrics(&self, key: &str) -> Option<CommandMetrics> {
        let state = self.inner.commands.lock().get(key).cloned()?;
        Some(state.metrics())
    }

    /// Who a command key is: its group and thread-pool key, and whether it has run on its
    /// thread pool (for reporters such as the Hystrix stream, which show a key's group, pool and
    /// isolation); `None` if the key has no state here.
    pub fn command_info(&self, key: &str) -> Option<CommandInfo> {
        let state = self.inner.commands.lock().get(key).cloned()?;
        Some(CommandInfo {
            command_key: state.key.clone(),
            group: state.group.clone(),
            thread_pool_key: state.thread_pool_key.clone(),
            used_thread_pool: state.pool.get().is_some(),
            keyed_breakers: state.extras.keyed.is_some(),
        })
    }

    /// The keys of command `key`'s keyed breakers that are open now (OPEN or HALF_OPEN, as
    /// [`CircuitBreakerHandle::is_open`]), most recently used first, then
    /// [`OVERFLOW_BREAKER_KEY`](crate::circuit::OVERFLOW_BREAKER_KEY) if the overflow breaker
    /// is open; `None` if the command is not defined here or has no keyed breakers. Reads every
    /// keyed breaker (at most the map's capacity, and the overflow breaker), bringing each
    /// one's health check up to date.
    pub fn open_breaker_keys(&self, key: &str) -> Option<Vec<String>> {
        let state = self.inner.commands.lock().get(key).cloned()?;
        let keyed = state.extras.keyed.as_ref()?;
        let open = keyed
            .keys()
            .iter()
            .filter_map(|breaker_key| keyed.find(breaker_key))
            .chain(std::iter::once(Arc::clone(keyed.overflow())))
            .filter(|breaker| {
                CircuitBreakerHandle::keyed(Arc::clone(&state), Arc::clone(breaker)).is_open()
            })
            .map(|breaker| breaker.key.to_string())
            .collect();
        Some(open)
    }

    /// Every collapser key in use in this registry, sorted by name.
    pub fn collapser_keys(&self) -> Vec<CollapserKey> {
        let mut keys: Vec<_> = self.inner.env.collapsers.lock().keys().cloned().collect();
        keys.sort();
        keys
    }

    /// A snapshot of a collapser key's metrics; `None` if no collapser of that key was built
    /// in this registry.
    pub fn collapser_metrics(&self, key: &str) -> Option<crate::collapser::CollapserMetrics> {
        let (key, counters) = {
            let collapsers = self.inner.env.collapsers.lock();
            let (key, counters) = collapsers.get_key_value(key)?;
            (key.clone(), Arc::clone(counters))
        };
        let sizes = self
            .inner
            .env
            .properties
            .collapser(&key)
            .metrics_rolling_percentile_enabled;
        Some(counters.snapshot(&key, self.inner.env.clock.now_ms(), sizes))
    }

    /// The circuit breaker of a command key, to look at and override; `None` if the key has no
    /// state here.
    pub fn circuit_breaker(&self, key: &str) -> Option<CircuitBreakerHandle> {
        let state = self.inner.commands.lock().get(key).cloned()?;
        Some(CircuitBreakerHandle::new(state))
    }

    /// Whether a command key's circuit is open now (Hystrix's `isCircuitBreakerOpen()`); `None`
    /// if the key has no state here.
    pub fn is_circuit_breaker_open(&self, key: &str) -> Option<bool> {
        self.circuit_breaker(key).map(|breaker| breaker.is_open())
    }

    /// The keyed breaker `breaker_key` of command `key` (see
    /// [`CommandBuilder::breaker_per_key`](crate::command::CommandBuilder::breaker_per_key));
    /// `None` if the command is not defined here, has no keyed breakers, or none for this key
    /// (never used, evicted, or served by the overflow breaker). A look does not make one nor
    /// count as a use. With [`OVERFLOW_BREAKER_KEY`](crate::circuit::OVERFLOW_BREAKER_KEY),
    /// the overflow breaker.
    pub fn keyed_circuit_breaker(
        &self,
        key: &str,
        breaker_key: &str,
    ) -> Option<CircuitBreakerHandle> {
        let state = self.inner.commands.lock().get(key).cloned()?;
        let keyed = state.extras.keyed.as_ref()?.find(breaker_key)?;
        Some(CircuitBreakerHandle::keyed(state, keyed))
    }

    /// One sync round with the shared state store now (see
    /// [`RegistryBuilder::state_store`]): publish counts, trips and closes, fetch the shared
    /// views, ask for probe permits. Rounds also run every
    /// [`state_store_sync_interval`](RegistryBuilder::state_store_sync_interval) on the
    /// executor; this one is for tests and for a round at a moment of your choosing. Returns
    /// at once without a store, or while another round runs (that round then runs once more).
    pub async fn sync_state_store(&self) {
        if let Some(store) = &self.inner.env.store {
            store.round().await;
        }
    }

    /// How the shared state store is doing; `None` without one.
    pub fn state_store_status(&self) -> Option<StateStoreStatus> {
        self.inner.env.store.as_ref().map(|store| store.status())
    }

    /// A snapshot of a thread pool's gauges; `None` if no command has used the pool yet.
    pub fn thread_pool_metrics(&self, key: &str) -> Option<ThreadPoolMetrics> {
        let pools = self.inner.env.pools.lock();
        pools.get(key).map(ThreadPool::metrics)
    }

    /// Every thread-pool key with a pool in this registry, sorted by name.
    pub fn thread_pool_keys(&self) -> Vec<ThreadPoolKey> {
        let mut keys: Vec<_> = self.inner.env.pools.lock().keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Stops accepting THREAD-isolated work, lets running and queued pool tasks finish for up to
    /// the [shutdown timeout](RegistryBuilder::shutdown_timeout) (real time), joins every pool
    /// thread (a thread still in a task after that is left to finish on its own, logged), then
    /// stops the registry's own executor. Later executions under THREAD isolation are
    /// THREAD_POOL_REJECTED, and eager executions (`queue`, `observe`) that do not end on the
    /// calling thread are CANCELLED. It blocks the calling thread for up to the timeout; from
    /// async code, call it in `spawn_blocking`.
    ///
    /// An isolated registry does the same by itself once its last handle and its last command
    /// are dropped; the global registry never does.
    pub fn shutdown(&self) {
        self.inner.env.shutdown();
    }

    /// Approximate bytes a command key's state takes now: its metrics windows, the latency
    /// counters allocated so far (they grow with the spread of latencies seen, up to a bound)
    /// and the breaker's own window. `None` if the key has no state here.
    pub fn command_state_bytes(&self, key: &str) -> Option<usize> {
        let state = self.inner.commands.lock().get(key).cloned()?;
        Some(
            std::mem::size_of::<CommandState>()
                + state.counters.memory_bytes()
                + state.extras.memory_bytes(),
        )
    }

    /// Drops a command key's state (breaker, semaphores, metrics, live properties) so memory
    /// does not grow with keys no longer used. Returns whether there was state.
    ///
    /// Its thread pool goes too when no other command key here uses it: the pool stops taking
    /// work, its idle threads end at once and busy ones when their task returns (queued tasks
    /// still run). Definitions built before keep working on the old state, detached from the
    /// registry, except that THREAD executions through a removed pool are rejected
    /// (THREAD_POOL_REJECTED); a definition built afterwards starts fresh, with a new pool.
    /// Dynamic per-key property values stay.
    pub fn remove(&self, key: &str) -> bool {
        let env = &self.inner.env;
        let (state, pool) = {
            let mut commands = self.inner.commands.lock();
            let Some(state) = commands.remove(key) else {
                return false;
            };
            let pool_key = &state.thread_pool_key;
            // Under the commands lock: a key defined from now on gets a new pool.
            let pool = if commands
                .values()
                .any(|other| other.thread_pool_key == *pool_key)
            {
                None
            } else {
                let pool = env.pools.lock().remove(pool_key);
                if pool.is_some() {
                    env.properties.remove_thread_pool(pool_key);
                }
                pool
            };
            (state, pool)
        };
        env.properties.remove_command(&state.key);
        if let Some(pool) = pool {
            pool.shutdown(Duration::ZERO);
        }
        true
    }

    /// Returns the key's state, creating it on first definition. Later definitions must name the
    /// same group; a thread-pool key or property value they give must agree with the key's (the
    /// union of all definitions' values applies).
    pub(crate) fn command_state(
        &self,
        key: CommandKey,
        group: GroupKey,
        thread_pool_key: Option<ThreadPoolKey>,
        layer: CommandLayer,
        pool_layer: ThreadPoolLayer,
        spec: BreakerSpec,
    ) -> Result<Arc<CommandState>, ConfigError> {
        let mut commands = self.inner.commands.lock();
        if let Some(existing) = commands.get(&key) {
            let conflict = |what: &str, existing: &str, requested: &str| {
                Err(ConfigError::ConflictingDefinition {
                    key: key.to_string(),
                    what: what.to_owned(),
                    existing: existing.to_owned(),
                    requested: requested.to_owned(),
                })
            };
            if existing.group != group {
                return conflict("group key", existing.group.as_str(), group.as_str());
            }
            // A definition that names no pool key takes the key's; one that names another
            // conflicts (the pool is fixed once the key exists).
            let current_pool = existing
                .requested_thread_pool_key
                .as_ref()
                .map_or(existing.group.as_str(), ThreadPoolKey::as_str);
            if let Some(requested) = &thread_pool_key
                && requested.as_str() != current_pool
            {
                return conflict("thread-pool key", current_pool, requested.as_str());
            }
            // The breaker extras are fixed by the first definition: a later one may leave
            // them out (it shares them), not ask for others.
            let requested = spec.shape();
            let current = existing.extras.shape();
            if !requested.is_empty() && requested != current {
                let none = |shape: String| {
                    if shape.is_empty() {
                        "none".into()
                    } else {
                        shape
                    }
                };
                return conflict("circuit-breaker extras", &none(current), &requested);
            }
            self.inner.env.properties.register_command(&key, layer)?;
            self.inner
                .env
                .properties
                .register_thread_pool(&existing.thread_pool_key, pool_layer)?;
            return Ok(Arc::clone(existing));
        }
        let properties = self.inner.env.properties.register_command(&key, layer)?;
        let resolved_props = properties.load_full();
        let resolved_pool =
            resolve_thread_pool_key(&resolved_props, &group, thread_pool_key.clone())?;
        if let Err(err) = self
            .inner
            .env
            .properties
            .register_thread_pool(&resolved_pool, pool_layer)
        {
            self.inner.env.properties.remove_command(&key);
            return Err(err);
        }
        let extras = match self.breaker_extras(&key, &resolved_props, spec) {
            Ok(extras) => extras,
            Err(err) => {
                self.inner.env.properties.remove_command(&key);
                return Err(err);
            }
        };
        let state = Arc::new_cyclic(|me| CommandState {
            key: key.clone(),
            group,
            thread_pool_key: resolved_pool,
            requested_thread_pool_key: thread_pool_key,
            properties,
            execution_semaphore: Semaphore::default(),
            pool_running: Semaphore::default(),
            fallback_semaphore: Semaphore::default(),
            breaker: CircuitBreaker::default(),
            counters: CommandCounters::new(&resolved_props),
            health_interval_ms: resolved_props.metrics_health_snapshot_interval_in_milliseconds,
            env: Arc::clone(&self.inner.env),
            pool: OnceLock::new(),
            classifier_panicked: AtomicBool::new(false),
            blocking_in_runtime_warned: AtomicBool::new(false),
            extras: Box::new(extras),
            me: me.clone(),
            retry: Box::new(crate::retry::RetryState::new(random_seed_of(
                self.inner.env.random_seed,
                &key,
            ))),
            hedging: Box::default(),
            limiter: Box::default(),
            limit_waiting: AtomicU32::new(0),
            priorities: Box::default(),
            throttle: Box::new(crate::throttle::Throttle::new(random_seed_of(
                self.inner.env.random_seed,
                &key,
            ))),
            chaos: crate::chaos::Chaos::new(random_seed_of(self.inner.env.random_seed, &key)),
        });
        if state.extras.shared.is_some() {
            self.start_store_rounds(&state);
        }
        commands.insert(key, Arc::clone(&state));
        // Told outside the registry's lock: the notifier may look at the registry.
        drop(commands);
        self.inner.env.notify(|n| {
            n.mark_command_created(&state.key, &state.group, &state.thread_pool_key);
        });
        Ok(state)
    }

    /// The breaker extras a definition asked for, checked against this registry.
    fn breaker_extras(
        &self,
        key: &CommandKey,
        props: &CommandProperties,
        spec: BreakerSpec,
    ) -> Result<BreakerExtras, ConfigError> {
        let env = &self.inner.env;
        let shared = match (&env.store, spec.shared) {
            (_, false) => None,
            (Some(store), true) => Some(SharedLink::new(Arc::clone(store))),
            (None, true) => {
                return Err(ConfigError::InvalidValue {
                    name: format!("hystrix.command.{key}.sharedState"),
                    value: "true".into(),
                    reason: "the registry has no state store; give it one with \
                             RegistryBuilder::state_store"
                        .into(),
                });
            }
        };
        check_window(key, props, &spec)?;
        Ok(BreakerExtras {
            window: Window::new(props, false),
            in_flight: OnceLock::new(),
            backoff: spec.backoff,
            probe: spec.probe.map(ProbeState::new),
            journal: spec.journal.map(|config| Arc::new(Journal::new(config))),
            shared,
            keyed: spec.keyed.map(|(max_keys, idle_ms)| {
                KeyedBreakers::new(max_keys, idle_ms, Arc::clone(&env.clock), props)
            }),
        })
    }

    /// Registers a command with the store, and starts the periodic rounds on first use.
    fn start_store_rounds(&self, state: &Arc<CommandState>) {
        let env = &self.inner.env;
        let Some(store) = &env.store else {
            return;
        };
        store.register(Arc::downgrade(state));
        let Some(interval_ms) = env.store_interval_ms else {
            return;
        };
        if env.store_rounds_started.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(executor) = env.executor() {
            store.start_push(executor.clone());
            executor.spawn(crate::circuit::run_rounds(
                Arc::downgrade(store),
                Arc::clone(&env.clock),
                env.clock.now_ms().saturating_add(interval_ms),
                interval_ms,
            ));
        }
    }
}

/// The pool key: `threadPoolKeyOverride`, else the builder's, else the group's name (Hystrix).
fn resolve_thread_pool_key(
    props: &CommandProperties,
    group: &GroupKey,
    given: Option<ThreadPoolKey>,
) -> Result<ThreadPoolKey, ConfigError> {
    match (&props.thread_pool_key_override, given) {
        (Some(name), _) => ThreadPoolKey::new(name),
        (None, Some(key)) => Ok(key),
        (None, None) => ThreadPoolKey::new(group.as_str()),
    }
}

/// Builds a [`Registry`] with a chosen clock and plugins.
#[derive(Default)]
pub struct RegistryBuilder {
    clock: Option<Arc<dyn Clock>>,
    notifier: Option<Arc<dyn EventNotifier>>,
    hook: Option<Arc<dyn ExecutionHook>>,
    breaker_listener: Option<Arc<dyn CircuitBreakerListener>>,
    shutdown_timeout: Option<Duration>,
    executor: Option<tokio::runtime::Handle>,
    store: Option<Arc<dyn StateStore>>,
    store_interval: Option<Option<Duration>>,
    store_timeout: Option<Duration>,
    store_min_reporters: Option<NonZeroU32>,
    instance_id: Option<Arc<str>>,
    random_seed: Option<u64>,
    allow_chaos: bool,
    deny_unknown_properties: bool,
}

impl fmt::Debug for RegistryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryBuilder")
            .field("clock", &self.clock)
            .field("notifier", &self.notifier.is_some())
            .field("breaker_listener", &self.breaker_listener.is_some())
            .field("shutdown_timeout", &self.shutdown_timeout)
            .field("executor", &self.executor.is_some())
            .field("state_store", &self.store.is_some())
            .field("state_store_sync_interval", &self.store_interval)
            .field("state_store_min_reporters", &self.store_min_reporters)
            .field("instance_id", &self.instance_id)
            .field("random_seed", &self.random_seed)
            .field("allow_chaos", &self.allow_chaos)
            .field("deny_unknown_properties", &self.deny_unknown_properties)
            .finish()
    }
}

impl RegistryBuilder {
    /// The clock for time and timers (default: [`SystemClock`]). Use a
    /// [`ManualClock`](crate::clock::ManualClock) in tests.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// The event notifier plugin (Hystrix's `HystrixEventNotifier`), for this registry only.
    pub fn event_notifier(mut self, notifier: impl EventNotifier) -> Self {
        self.notifier = Some(Arc::new(notifier));
        self
    }

    /// The execution hook of this registry's commands (see [`ExecutionHook`]).
    pub fn execution_hook(mut self, hook: impl ExecutionHook) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// The listener of every circuit-breaker change of this registry.
    pub fn circuit_breaker_listener(mut self, listener: impl CircuitBreakerListener) -> Self {
        self.breaker_listener = Some(Arc::new(listener));
        self
    }

    /// The tokio runtime that eager executions (`queue`, `observe`) continue on after their
    /// first steps. Default: a runtime of the registry's own with 2 threads named
    /// `hystrix-executor`, made on first use and shut down with the registry.
    pub fn executor(mut self, handle: tokio::runtime::Handle) -> Self {
        self.executor = Some(handle);
        self
    }

    /// How long [`Registry::shutdown`] (and dropping the registry) waits for running tasks to
    /// finish (default 10 s, real time).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = Some(timeout);
        self
    }

    /// Shares breaker state with other instances (or other registries in this process)
    /// through `store`: commands that opt in with
    /// [`CommandBuilder::shared_state`](crate::command::CommandBuilder::shared_state) take part.
    /// The local breaker always decides and never waits on the store; see
    /// [`Registry::sync_state_store`] for what a sync round does. None by default.
    pub fn state_store(mut self, store: impl StateStore) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// How often sync rounds with the state store run, on the registry's clock (default
    /// 500 ms); `None`: only when [`Registry::sync_state_store`] is called.
    pub fn state_store_sync_interval(mut self, interval: Option<Duration>) -> Self {
        self.store_interval = Some(interval);
        self
    }

    /// How long one state store call may take before it counts as an error (default 50 ms, on
    /// the registry's clock).
    pub fn state_store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = Some(timeout);
        self
    }

    /// How many distinct instances must have reported a shared command's counts within the
    /// store's rolling window before this instance publishes a trip of its own breaker (default
    /// 1: every local trip is published). Below it the local breaker still opens, for this
    /// instance only (OR semantics): one instance with a local problem (its own network, a
    /// noisy neighbour) cannot open the breaker of the whole fleet.
    /// The trip stays pending while the local breaker is open and is published by the first
    /// round that sees enough reporters. A trip made by hand
    /// ([`force_open`](crate::CircuitBreakerHandle::force_open)) is always published.
    pub fn state_store_min_reporters(mut self, reporters: NonZeroU32) -> Self {
        self.store_min_reporters = Some(reporters);
        self
    }

    /// This instance's name in the state store (who reports counts and holds probe permits);
    /// default `pid-<process id>-<n>`.
    pub fn instance_id(mut self, id: impl Into<Arc<str>>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// The seed of the registry's random draws (retry jitter, adaptive throttling's draws,
    /// chaos injection's draws),
    /// for runs that must repeat exactly; each command key derives its own sequences from it
    /// and its key (so two registries whose seeds differ may still share a key's sequence:
    /// the seed is mixed with the key, not a different stream per seed). Default: a
    /// random seed per registry, so instances of a service do not draw in step.
    /// [`TestRegistry`](crate::testing::TestRegistry) uses 0.
    pub fn random_seed(mut self, seed: u64) -> Self {
        self.random_seed = Some(seed);
        self
    }

    /// Allows chaos injection in this registry (default: not allowed). Without it,
    /// `hystrix.command.<Key|default>.chaos.enabled=true` is refused wherever it is set (the
    /// builder, a file, the environment, [`Properties::set`](crate::config::Properties::set),
    /// the admin endpoint) with a [`ConfigError::InvalidValue`] naming the property, so a
    /// stray chaos property in a production configuration injects nothing. The other
    /// `chaos.*` properties are accepted either way (they do nothing while chaos is off).
    /// [`TestRegistry`](crate::testing::TestRegistry) allows chaos. See
    /// [`chaos`](crate::chaos).
    pub fn allow_chaos(mut self, allow: bool) -> Self {
        self.allow_chaos = allow;
        self
    }

    /// Refuses every load of a configuration source that names something that is not a
    /// property (default: not refused, a warning). With it, a file, the environment or a
    /// settings section whose load would warn of an unknown property (a typo), a Hystrix
    /// property that hystrix-rs does not have, or a key no command can have fails with
    /// [`LoadError::Denied`](crate::config::LoadError::Denied), which carries the warning and
    /// its did-you-mean suggestion, and changes nothing; a watched file keeps its last good
    /// values. Names outside `hystrix.*` that are close to no property (another library's keys
    /// in a shared file) are still skipped, and the other warnings (a name set twice, a fixed
    /// property kept by keys in use) stay warnings.
    pub fn deny_unknown_properties(mut self, deny: bool) -> Self {
        self.deny_unknown_properties = deny;
        self
    }

    /// Builds the registry.
    pub fn build(self) -> Registry {
        static REGISTRIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let store_interval_ms = self
            .store_interval
            .unwrap_or(Some(Duration::from_millis(500)))
            .map(|interval| crate::config::ceil_millis(interval).max(1));
        let store = self.store.map(|store| {
            let instance = self.instance_id.unwrap_or_else(|| {
                let n = REGISTRIES.fetch_add(1, Ordering::Relaxed);
                format!("pid-{}-{n}", std::process::id()).into()
            });
            StoreEnv::new(
                store,
                instance,
                self.store_timeout.unwrap_or(Duration::from_millis(50)),
                store_interval_ms,
                self.store_min_reporters.map_or(1, NonZeroU32::get),
                Arc::clone(&clock),
            )
        });
        let observed = self.notifier.is_some() || self.hook.is_some();
        Registry {
            inner: Arc::new(RegistryInner {
                env: Arc::new(Env {
                    clock,
                    properties: Properties::new(crate::config::Rules {
                        chaos_allowed: self.allow_chaos,
                        deny_unknown: self.deny_unknown_properties,
                    }),
                    pools: Mutex::new(HashMap::new()),
                    shut_down: AtomicBool::new(false),
                    shutdown_timeout: self.shutdown_timeout.unwrap_or(Duration::from_secs(10)),
                    executor: Mutex::new(self.executor.map_or(Executor::Unset, Executor::Given)),
                    eager_in_flight: Mutex::new(0),
                    eager_ended: parking_lot::Condvar::new(),
                    notifier: self.notifier,
                    notifier_panicked: AtomicBool::new(false),
                    observed,
                    hook: self.hook,
                    hook_panicked: AtomicBool::new(false),
                    breaker_listener: self.breaker_listener,
                    breaker_listener_panicked: AtomicBool::new(false),
                    store,
                    store_interval_ms,
                    store_rounds_started: AtomicBool::new(false),
                    collapsers: Mutex::new(HashMap::new()),
                    collapser_parts: Mutex::new(HashMap::new()),
                    retry_budgets: Mutex::new(HashMap::new()),
                    random_seed: self
                        .random_seed
                        .unwrap_or_else(|| fastrand::Rng::new().u64(..)),
                }),
                commands: Mutex::new(HashMap::new()),
            }),
        }
    }
}
