//! A pluggable shared-state store: circuit-breaker state shared by several instances.
//!
//! A [`StateStore`] is an asynchronous side channel:
//! instances [`publish`](StateStore::publish) the health counts they observed, [`fetch`]
//! a coarse [`SharedView`] of a command, [`try_trip`](StateStore::try_trip) and
//! [`close`](StateStore::close) it with a compare-and-set on its `generation`, and take the one
//! probe permit with [`try_acquire_probe`](StateStore::try_acquire_probe). The local breaker
//! always decides; the hot path never waits on a store.
//!
//! The store owns the time: an open period and a probe permit are TTLs measured on the store's
//! clock (as Redis `SET … PX`), so the clocks of different hosts are never compared.
//!
//! Per command key, the store's state machine is:
//!
//! - it starts **Closed** at generation 0;
//! - [`try_trip`](StateStore::try_trip) with the current generation, when not Open, makes it
//!   **Open** for a TTL and adds 1 to the generation;
//! - once the TTL has passed, it reads **HalfOpen** (same generation) until it is tripped again or
//!   closed;
//! - [`close`](StateStore::close) with the current generation, when not Closed, makes it
//!   **Closed**, adds 1 to the generation and drops the probe permit.
//!
//! [`InMemoryStateStore`] implements it in one process (tests, and several registries sharing
//! state in one process).
//!
//! [`fetch`]: StateStore::fetch

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::clock::Clock;
use crate::error::{BoxError, ConfigError};
use crate::key::CommandKey;

/// Counts one instance observed for one command since its previous publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthDelta {
    /// The command the counts are for.
    pub command_key: CommandKey,
    /// The reporting instance's name (unique per instance, e.g. host and process id).
    pub instance: Arc<str>,
    /// Requests counted since the previous publish (a count, not a rate).
    pub requests: u64,
    /// Of those requests, the ones that counted as errors for the breaker's health.
    pub errors: u64,
}

/// The shared state of one command, as the store sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SharedStatus {
    /// Not tripped (the state of a command the store has never seen).
    #[default]
    Closed,
    /// Tripped; the open period has `remaining_ms` milliseconds left on the store's clock at
    /// fetch time (always at least 1).
    Open {
        /// Milliseconds of the open period left when the view was taken.
        remaining_ms: u64,
    },
    /// Tripped and the open period has passed: waiting for a probe to close it, or for a trip.
    HalfOpen,
}

/// What [`StateStore::fetch`] returns: the shared state and the aggregated health of a command.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SharedView {
    /// The shared status at fetch time.
    pub status: SharedStatus,
    /// The command's transition counter: 0 at first, plus 1 at every trip and close. Pass it to
    /// [`StateStore::try_trip`] and [`StateStore::close`] as the compare-and-set value.
    pub generation: u64,
    /// Requests published by all instances within the store's rolling window.
    pub requests: u64,
    /// Errors published by all instances within the store's rolling window.
    pub errors: u64,
    /// Distinct instances that published for this command within the rolling window.
    pub reporters: u32,
}

/// Why a store call failed. A caller treats every variant alike: the store is degraded, and the
/// breaker goes on with local state only.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateStoreError {
    /// The store cannot be reached (connection refused or lost, or marked unavailable).
    #[error("state store unavailable: {0}")]
    Unavailable(String),
    /// The call did not complete within its time box, in milliseconds.
    #[error("state store call timed out after {0} ms")]
    Timeout(u64),
    /// Any other failure of the store's implementation.
    #[error("state store error: {0}")]
    Other(#[source] BoxError),
}

/// The future a store call returns: `Send`, borrowing the store and the call's arguments.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StateStoreError>> + Send + 'a>>;

/// What a store calls when it hears that the shared state changed (see
/// [`StateStore::watch`]): the registry then runs a sync round soon, on its executor, without
/// waiting for its sync interval. Cheap and non-blocking (it schedules the round and returns).
/// Returns `false` once its registry is gone: the store may then forget it.
pub type ChangeListener = Arc<dyn Fn() -> bool + Send + Sync>;

/// A shared circuit-breaker state store.
///
/// All times are milliseconds on the **store's** clock. Every call may fail with a
/// [`StateStoreError`]; a failed call changes nothing. Implementations should time-box their
/// I/O and return [`StateStoreError::Timeout`] rather than hang.
pub trait StateStore: Send + Sync + 'static {
    /// Adds these counts to the shared rolling window (into the bucket of the store's now).
    ///
    /// # Errors
    /// A [`StateStoreError`] if the store could not be updated; then no delta was added.
    fn publish<'a>(&'a self, deltas: &'a [HealthDelta]) -> StoreFuture<'a, ()>;

    /// The shared view of one command now. A command the store has never seen reads Closed, at
    /// generation 0, with no counts.
    ///
    /// # Errors
    /// A [`StateStoreError`] if the store could not be read.
    fn fetch<'a>(&'a self, command_key: &'a CommandKey) -> StoreFuture<'a, SharedView>;

    /// Opens the shared state for `open_for_ms` milliseconds if its generation is still
    /// `generation` and it is not already Open (Closed or HalfOpen); the probe permit is dropped.
    /// Returns the new generation, or `None` if the compare failed (nothing changed).
    ///
    /// # Errors
    /// A [`StateStoreError`] if the store could not be reached; then nothing changed.
    fn try_trip<'a>(
        &'a self,
        command_key: &'a CommandKey,
        generation: u64,
        open_for_ms: u64,
    ) -> StoreFuture<'a, Option<u64>>;

    /// The probe permit (one instance probes at a time, like `SET NX PX ttl`): granted to
    /// `instance` for `ttl_ms` milliseconds if the status is not Open and no other instance
    /// holds an unexpired permit; re-granting to the holder extends it to `ttl_ms` from now.
    /// Returns whether granted.
    ///
    /// # Errors
    /// A [`StateStoreError`] if the store could not be reached; then no permit was granted.
    fn try_acquire_probe<'a>(
        &'a self,
        command_key: &'a CommandKey,
        instance: &'a str,
        ttl_ms: u64,
    ) -> StoreFuture<'a, bool>;

    /// Closes the shared state if its generation is still `generation` and it is not Closed:
    /// status Closed, generation + 1, probe permit dropped, and the published counts restarted
    /// from zero (as a local close restarts the health counts, so the errors from before the
    /// trip cannot trip it again). Returns the new generation, or `None` if the compare failed
    /// (nothing changed).
    ///
    /// # Errors
    /// A [`StateStoreError`] if the store could not be reached; then nothing changed.
    fn close<'a>(
        &'a self,
        command_key: &'a CommandKey,
        generation: u64,
    ) -> StoreFuture<'a, Option<u64>>;

    /// Push notifications (optional). A registry whose sync rounds run by themselves (a
    /// [`state_store_sync_interval`](crate::RegistryBuilder::state_store_sync_interval)) calls
    /// this once, when its first shared command is defined. A store that learns of other
    /// instances' trips and closes as they happen (Redis Pub/Sub, say) calls `listener` for each,
    /// so that this instance syncs within a round trip rather than a sync interval. Pushes are
    /// hints: polling at the sync interval stays the source of truth, so a lost push only
    /// delays. Several registries may share a store: keep every listener, and drop one once it
    /// returns `false`.
    ///
    /// The default does nothing (polling only), which is right for a store that cannot push.
    fn watch(&self, listener: ChangeListener) {
        let _ = listener;
    }

    /// This instance's breaker-configuration fingerprint for `command_key` (optional): a short
    /// text naming the thresholds that decide a trip (the registry passes
    /// `requestVolumeThreshold`, `errorThresholdPercentage`, `sleepWindowInMilliseconds`, the
    /// health window and the half-open budget). A registry calls it before it first publishes
    /// the command's counts and again whenever the fingerprint changes (properties are
    /// dynamic). A store may keep it beside the published counts and flag instances whose
    /// fingerprint differs (their counts and trips follow other rules). Synchronous and cheap:
    /// no I/O here.
    ///
    /// The default ignores it.
    fn set_fingerprint(&self, command_key: &CommandKey, fingerprint: &str) {
        let _ = (command_key, fingerprint);
    }
}

// ------------------------------------------------------------------------------------------------
// In-memory store

/// The default rolling window of [`InMemoryStateStore::new`], in milliseconds.
const DEFAULT_WINDOW_MS: u64 = 10_000;
/// The default number of buckets of that window.
const DEFAULT_BUCKETS: u32 = 10;

/// A [`StateStore`] in this process's memory: for tests, and for several registries in one
/// process sharing breaker state.
///
/// Cheap to clone: clones share one state. Times are read from the clock given to
/// [`new`](InMemoryStateStore::new), which plays the part of the store server's clock. Health
/// counts are kept in a rolling window (10 000 ms in 10 buckets by default, see
/// [`with_window`](InMemoryStateStore::with_window)); buckets older than the window are pruned, so
/// memory stays bounded by the number of command keys, buckets and reporting instances.
///
/// As an `async fn` would, a call does its work when its future is first polled (and it
/// completes on that poll).
///
/// Test aids: [`set_unavailable`](InMemoryStateStore::set_unavailable) simulates an outage,
/// [`calls`](InMemoryStateStore::calls) counts calls, and
/// [`view_now`](InMemoryStateStore::view_now) peeks at a command's view synchronously.
///
/// # Example
///
/// Two instances share one store; one trips, the other sees it, and one probe closes it:
///
/// ```
/// use std::sync::Arc;
///
/// use hystrix::CommandKey;
/// use hystrix::circuit::store::{InMemoryStateStore, SharedStatus, StateStore, StateStoreError};
/// use hystrix::clock::ManualClock;
///
/// let clock = ManualClock::new();
/// let store = InMemoryStateStore::new(Arc::new(clock.clone()));
/// // Each instance (say, each registry) holds a clone.
/// let (a, b) = (store.clone(), store.clone());
/// let key = CommandKey::new("GetUser")?;
///
/// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
/// runtime.block_on(async {
///     // Instance a saw its breaker trip and trips the shared state for 5 s.
///     let seen = a.fetch(&key).await?;
///     assert_eq!(a.try_trip(&key, seen.generation, 5_000).await?, Some(1));
///
///     // Instance b sees it open; its own trip, made with the generation it had, loses.
///     let view = b.fetch(&key).await?;
///     assert_eq!(view.status, SharedStatus::Open { remaining_ms: 5_000 });
///     assert_eq!(b.try_trip(&key, seen.generation, 5_000).await?, None);
///
///     // After the open period only one instance may probe.
///     clock.advance_ms(5_000);
///     assert_eq!(b.fetch(&key).await?.status, SharedStatus::HalfOpen);
///     assert!(b.try_acquire_probe(&key, "b", 1_000).await?);
///     assert!(!a.try_acquire_probe(&key, "a", 1_000).await?);
///
///     // b's probe succeeded: it closes the shared state for everyone.
///     assert_eq!(b.close(&key, view.generation).await?, Some(2));
///     assert_eq!(a.fetch(&key).await?.status, SharedStatus::Closed);
///     Ok::<(), StateStoreError>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct InMemoryStateStore {
    inner: Arc<Inner>,
}

struct Inner {
    clock: Arc<dyn Clock>,
    /// Width of one bucket, in ms (> 0).
    bucket_ms: u64,
    /// Buckets in the rolling window (> 0).
    buckets: u32,
    unavailable: AtomicBool,
    calls: AtomicU64,
    commands: Mutex<HashMap<CommandKey, CommandState>>,
}

/// The store's state of one command.
#[derive(Default)]
struct CommandState {
    generation: u64,
    /// `Some(until)` once tripped and until closed: Open while `now < until`, HalfOpen after.
    open_until_ms: Option<u64>,
    probe: Option<Probe>,
    /// Health buckets, oldest first, at most the window's number of them.
    buckets: VecDeque<Bucket>,
}

/// The probe permit and its holder.
struct Probe {
    holder: Box<str>,
    /// The permit is held while `now < expires_at_ms`.
    expires_at_ms: u64,
}

/// The counts published during one bucket.
struct Bucket {
    /// `now / bucket_ms` for the bucket's time span.
    index: u64,
    requests: u64,
    errors: u64,
    reporters: HashSet<Arc<str>>,
}

impl CommandState {
    fn status(&self, now: u64) -> SharedStatus {
        match self.open_until_ms {
            None => SharedStatus::Closed,
            Some(until) if now < until => SharedStatus::Open {
                remaining_ms: until - now,
            },
            Some(_) => SharedStatus::HalfOpen,
        }
    }

    /// Drops the buckets no longer in the window that ends with bucket `current`.
    fn prune(&mut self, current: u64, buckets: u32) {
        while self
            .buckets
            .front()
            .is_some_and(|b| b.index.saturating_add(u64::from(buckets)) <= current)
        {
            self.buckets.pop_front();
        }
    }

    /// The bucket `current`, added if missing (the clock is monotonic: it is the newest).
    fn bucket_mut(&mut self, current: u64) -> &mut Bucket {
        if self.buckets.back().is_none_or(|b| b.index != current) {
            self.buckets.push_back(Bucket {
                index: current,
                requests: 0,
                errors: 0,
                reporters: HashSet::new(),
            });
        }
        let last = self.buckets.len() - 1;
        &mut self.buckets[last]
    }

    fn view(&self, now: u64) -> SharedView {
        let mut view = SharedView {
            status: self.status(now),
            generation: self.generation,
            ..SharedView::default()
        };
        let mut reporters: HashSet<&str> = HashSet::new();
        for bucket in &self.buckets {
            view.requests = view.requests.saturating_add(bucket.requests);
            view.errors = view.errors.saturating_add(bucket.errors);
            reporters.extend(bucket.reporters.iter().map(|r| &**r));
        }
        view.reporters = u32::try_from(reporters.len()).unwrap_or(u32::MAX);
        view
    }
}

impl InMemoryStateStore {
    /// An empty store reading time from `clock` (the store's own clock), with a rolling window of
    /// 10 000 ms in 10 buckets of 1000 ms.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self::build(
            clock,
            DEFAULT_WINDOW_MS / u64::from(DEFAULT_BUCKETS),
            DEFAULT_BUCKETS,
        )
    }

    /// This store with a rolling window of `window_ms` milliseconds in `buckets` buckets, and an
    /// empty state (clones made before keep the old store). Call it before using the store.
    ///
    /// # Errors
    /// [`ConfigError::InvalidValue`] naming the parameter if `buckets` is 0, `window_ms` is 0, or
    /// `buckets` does not divide `window_ms` evenly.
    pub fn with_window(self, window_ms: u64, buckets: u32) -> Result<Self, ConfigError> {
        let invalid = |name: &str, value: String, reason: String| ConfigError::InvalidValue {
            name: format!("InMemoryStateStore::with_window({name})"),
            value,
            reason,
        };
        if buckets == 0 {
            return Err(invalid(
                "buckets",
                buckets.to_string(),
                "must be at least 1".into(),
            ));
        }
        if window_ms == 0 {
            return Err(invalid(
                "window_ms",
                window_ms.to_string(),
                "must be at least 1 ms".into(),
            ));
        }
        if window_ms % u64::from(buckets) != 0 {
            return Err(invalid(
                "buckets",
                buckets.to_string(),
                format!("must divide window_ms ({window_ms} ms) evenly"),
            ));
        }
        Ok(Self::build(
            Arc::clone(&self.inner.clock),
            window_ms / u64::from(buckets),
            buckets,
        ))
    }

    fn build(clock: Arc<dyn Clock>, bucket_ms: u64, buckets: u32) -> Self {
        InMemoryStateStore {
            inner: Arc::new(Inner {
                clock,
                bucket_ms,
                buckets,
                unavailable: AtomicBool::new(false),
                calls: AtomicU64::new(0),
                commands: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Test aid: while `unavailable` is true, every [`StateStore`] call returns
    /// [`StateStoreError::Unavailable`] and changes nothing (a store outage).
    pub fn set_unavailable(&self, unavailable: bool) {
        self.inner.unavailable.store(unavailable, Ordering::SeqCst);
    }

    /// Test aid: the number of [`StateStore`] calls made on this store and its clones, failed
    /// ones included (a call is counted when its future is first polled).
    pub fn calls(&self) -> u64 {
        self.inner.calls.load(Ordering::SeqCst)
    }

    /// Test aid: the view [`StateStore::fetch`] would return for the command named `key` now,
    /// taken synchronously. It is not counted in [`calls`](InMemoryStateStore::calls) and works
    /// while the store is set unavailable.
    pub fn view_now(&self, key: &str) -> SharedView {
        let now = self.inner.clock.now_ms();
        let current = now / self.inner.bucket_ms;
        let mut commands = self.inner.commands.lock();
        match commands.get_mut(key) {
            Some(state) => {
                state.prune(current, self.inner.buckets);
                state.view(now)
            }
            None => SharedView::default(),
        }
    }

    /// Counts a call, and fails it if the store is set unavailable.
    fn begin_call(&self) -> Result<(), StateStoreError> {
        self.inner.calls.fetch_add(1, Ordering::SeqCst);
        if self.inner.unavailable.load(Ordering::SeqCst) {
            return Err(StateStoreError::Unavailable(
                "in-memory state store set unavailable".into(),
            ));
        }
        Ok(())
    }

    /// Runs `f` on the state of `key` (created if missing) at the store's now.
    fn with_command<T>(&self, key: &CommandKey, f: impl FnOnce(&mut CommandState, u64) -> T) -> T {
        let now = self.inner.clock.now_ms();
        let mut commands = self.inner.commands.lock();
        // Cloning a key is an `Arc` increment.
        f(commands.entry(key.clone()).or_default(), now)
    }
}

impl fmt::Debug for InMemoryStateStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryStateStore")
            .field("clock", &self.inner.clock)
            .field("bucket_ms", &self.inner.bucket_ms)
            .field("buckets", &self.inner.buckets)
            .field(
                "unavailable",
                &self.inner.unavailable.load(Ordering::SeqCst),
            )
            .field("calls", &self.calls())
            .field("commands", &self.inner.commands.lock().len())
            .finish()
    }
}

impl StateStore for InMemoryStateStore {
    fn publish<'a>(&'a self, deltas: &'a [HealthDelta]) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.begin_call()?;
            let now = self.inner.clock.now_ms();
            let current = now / self.inner.bucket_ms;
            let mut commands = self.inner.commands.lock();
            for delta in deltas {
                let state = commands.entry(delta.command_key.clone()).or_default();
                state.prune(current, self.inner.buckets);
                let bucket = state.bucket_mut(current);
                bucket.requests = bucket.requests.saturating_add(delta.requests);
                bucket.errors = bucket.errors.saturating_add(delta.errors);
                if !bucket.reporters.contains(&*delta.instance) {
                    bucket.reporters.insert(Arc::clone(&delta.instance));
                }
            }
            Ok(())
        })
    }

    fn fetch<'a>(&'a self, command_key: &'a CommandKey) -> StoreFuture<'a, SharedView> {
        Box::pin(async move {
            self.begin_call()?;
            Ok(self.view_now(command_key.as_str()))
        })
    }

    fn try_trip<'a>(
        &'a self,
        command_key: &'a CommandKey,
        generation: u64,
        open_for_ms: u64,
    ) -> StoreFuture<'a, Option<u64>> {
        Box::pin(async move {
            self.begin_call()?;
            Ok(self.with_command(command_key, |state, now| {
                if state.generation != generation
                    || matches!(state.status(now), SharedStatus::Open { .. })
                {
                    return None;
                }
                state.generation = state.generation.wrapping_add(1);
                state.open_until_ms = Some(now.saturating_add(open_for_ms));
                state.probe = None;
                Some(state.generation)
            }))
        })
    }

    fn try_acquire_probe<'a>(
        &'a self,
        command_key: &'a CommandKey,
        instance: &'a str,
        ttl_ms: u64,
    ) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            self.begin_call()?;
            Ok(self.with_command(command_key, |state, now| {
                if matches!(state.status(now), SharedStatus::Open { .. }) {
                    return false;
                }
                let held_by_other = state
                    .probe
                    .as_ref()
                    .is_some_and(|p| now < p.expires_at_ms && &*p.holder != instance);
                if held_by_other {
                    return false;
                }
                state.probe = Some(Probe {
                    holder: instance.into(),
                    expires_at_ms: now.saturating_add(ttl_ms),
                });
                true
            }))
        })
    }

    fn close<'a>(
        &'a self,
        command_key: &'a CommandKey,
        generation: u64,
    ) -> StoreFuture<'a, Option<u64>> {
        Box::pin(async move {
            self.begin_call()?;
            let now = self.inner.clock.now_ms();
            let mut commands = self.inner.commands.lock();
            // A command never seen is Closed: nothing to close, and nothing to create.
            let Some(state) = commands.get_mut(command_key.as_str()) else {
                return Ok(None);
            };
            if state.generation != generation || state.status(now) == SharedStatus::Closed {
                return Ok(None);
            }
            state.generation = state.generation.wrapping_add(1);
            state.open_until_ms = None;
            state.probe = None;
            state.buckets.clear();
            Ok(Some(state.generation))
        })
    }
}

#[cfg(all(test, not(hystrix_loom)))]
mod tests {
    use std::pin::pin;
    use std::task::{Context, Poll, Wake, Waker};
    use std::thread::{self, Thread};

    use super::*;
    use crate::clock::ManualClock;

    /// Runs a future to completion on this thread.
    fn block_on<F: Future>(fut: F) -> F::Output {
        struct Unpark(Thread);
        impl Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(Unpark(thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut fut = pin!(fut);
        loop {
            match fut.as_mut().poll(&mut cx) {
                Poll::Ready(output) => return output,
                Poll::Pending => thread::park(),
            }
        }
    }

    fn store() -> (ManualClock, InMemoryStateStore) {
        let clock = ManualClock::new();
        let store = InMemoryStateStore::new(Arc::new(clock.clone()));
        (clock, store)
    }

    fn key(name: &str) -> CommandKey {
        CommandKey::new(name).expect("a valid key")
    }

    fn delta(command: &str, instance: &str, requests: u64, errors: u64) -> HealthDelta {
        HealthDelta {
            command_key: key(command),
            instance: Arc::from(instance),
            requests,
            errors,
        }
    }

    fn fetch(store: &InMemoryStateStore, key: &CommandKey) -> SharedView {
        block_on(store.fetch(key)).expect("the store is available")
    }

    #[test]
    fn an_unknown_command_reads_closed_at_generation_zero() {
        let (_, store) = store();
        assert_eq!(fetch(&store, &key("Never")), SharedView::default());
        assert_eq!(block_on(store.close(&key("Never"), 0)).unwrap(), None);
        assert!(store.inner.commands.lock().is_empty());
    }

    #[test]
    fn trip_compares_the_generation() {
        let (_, store) = store();
        let k = key("GetUser");
        assert_eq!(block_on(store.try_trip(&k, 1, 5_000)).unwrap(), None);
        assert_eq!(fetch(&store, &k).status, SharedStatus::Closed);
        assert_eq!(block_on(store.try_trip(&k, 0, 5_000)).unwrap(), Some(1));
        // Stale generation, and already open with the current one.
        assert_eq!(block_on(store.try_trip(&k, 0, 5_000)).unwrap(), None);
        assert_eq!(block_on(store.try_trip(&k, 1, 5_000)).unwrap(), None);
        let view = fetch(&store, &k);
        assert_eq!(view.generation, 1);
        assert_eq!(
            view.status,
            SharedStatus::Open {
                remaining_ms: 5_000
            }
        );
    }

    #[test]
    fn open_counts_down_on_the_store_clock_then_reads_half_open() {
        let (clock, store) = store();
        let k = key("GetUser");
        clock.advance_ms(300);
        assert_eq!(block_on(store.try_trip(&k, 0, 5_000)).unwrap(), Some(1));
        clock.advance_ms(1_200);
        assert_eq!(
            fetch(&store, &k).status,
            SharedStatus::Open {
                remaining_ms: 3_800
            }
        );
        clock.advance_ms(3_799);
        assert_eq!(
            fetch(&store, &k).status,
            SharedStatus::Open { remaining_ms: 1 }
        );
        clock.advance_ms(1);
        let view = fetch(&store, &k);
        assert_eq!((view.status, view.generation), (SharedStatus::HalfOpen, 1));
        clock.advance_ms(60_000);
        assert_eq!(fetch(&store, &k).status, SharedStatus::HalfOpen);
        // A trip from HalfOpen with the current generation starts a new open period.
        assert_eq!(block_on(store.try_trip(&k, 1, 2_000)).unwrap(), Some(2));
        assert_eq!(
            fetch(&store, &k).status,
            SharedStatus::Open {
                remaining_ms: 2_000
            }
        );
    }

    #[test]
    fn probe_permit_is_exclusive_expires_and_is_refused_while_open() {
        let (clock, store) = store();
        let k = key("GetUser");
        assert_eq!(block_on(store.try_trip(&k, 0, 1_000)).unwrap(), Some(1));
        assert!(!block_on(store.try_acquire_probe(&k, "a", 500)).unwrap());
        clock.advance_ms(999);
        assert!(!block_on(store.try_acquire_probe(&k, "b", 500)).unwrap());
        clock.advance_ms(1); // t = 1000: HalfOpen
        assert!(block_on(store.try_acquire_probe(&k, "a", 500)).unwrap());
        assert!(!block_on(store.try_acquire_probe(&k, "b", 500)).unwrap());
        clock.advance_ms(499);
        assert!(!block_on(store.try_acquire_probe(&k, "b", 500)).unwrap());
        clock.advance_ms(1); // t = 1500: a's permit has expired
        assert!(block_on(store.try_acquire_probe(&k, "b", 500)).unwrap());
        assert!(!block_on(store.try_acquire_probe(&k, "a", 500)).unwrap());
        // The holder re-acquiring extends its permit to ttl from now.
        clock.advance_ms(300); // t = 1800
        assert!(block_on(store.try_acquire_probe(&k, "b", 500)).unwrap());
        clock.advance_ms(400); // t = 2200: past the first expiry (2000), before 2300
        assert!(!block_on(store.try_acquire_probe(&k, "a", 500)).unwrap());
        clock.advance_ms(100); // t = 2300
        assert!(block_on(store.try_acquire_probe(&k, "a", 500)).unwrap());
        // A trip drops the permit: after the next open period, b may probe at once.
        assert_eq!(block_on(store.try_trip(&k, 1, 100)).unwrap(), Some(2));
        assert!(!block_on(store.try_acquire_probe(&k, "a", 500)).unwrap());
        clock.advance_ms(100);
        assert!(block_on(store.try_acquire_probe(&k, "b", 500)).unwrap());
    }

    #[test]
    fn close_compares_the_generation_and_drops_the_permit() {
        let (clock, store) = store();
        let k = key("GetUser");
        assert_eq!(block_on(store.try_trip(&k, 0, 1_000)).unwrap(), Some(1));
        clock.advance_ms(1_000);
        assert!(block_on(store.try_acquire_probe(&k, "a", 10_000)).unwrap());
        assert_eq!(block_on(store.close(&k, 0)).unwrap(), None);
        assert_eq!(block_on(store.close(&k, 2)).unwrap(), None);
        assert_eq!(fetch(&store, &k).status, SharedStatus::HalfOpen);
        assert_eq!(block_on(store.close(&k, 1)).unwrap(), Some(2));
        let view = fetch(&store, &k);
        assert_eq!((view.status, view.generation), (SharedStatus::Closed, 2));
        // Already Closed: nothing to do.
        assert_eq!(block_on(store.close(&k, 2)).unwrap(), None);
        assert_eq!(fetch(&store, &k).generation, 2);
        // a's permit (10 s left) was dropped: b gets one at once.
        assert!(block_on(store.try_acquire_probe(&k, "b", 500)).unwrap());
        // Open (within its period) can be closed too.
        assert_eq!(block_on(store.try_trip(&k, 2, 1_000)).unwrap(), Some(3));
        assert_eq!(block_on(store.close(&k, 3)).unwrap(), Some(4));
        assert_eq!(fetch(&store, &k).status, SharedStatus::Closed);
    }

    #[test]
    fn publish_sums_instances_and_ages_buckets_out_at_the_window_boundary() {
        let (clock, store) = store();
        let (get, put) = (key("GetUser"), key("PutUser"));
        block_on(store.publish(&[
            delta("GetUser", "a", 10, 2),
            delta("GetUser", "b", 5, 5),
            delta("PutUser", "a", 7, 0),
        ]))
        .unwrap();
        let view = fetch(&store, &get);
        assert_eq!((view.requests, view.errors, view.reporters), (15, 7, 2));
        let view = fetch(&store, &put);
        assert_eq!((view.requests, view.errors, view.reporters), (7, 0, 1));

        clock.advance_ms(1_000); // bucket 1
        block_on(store.publish(&[delta("GetUser", "a", 4, 1)])).unwrap();
        let view = fetch(&store, &get);
        assert_eq!((view.requests, view.errors, view.reporters), (19, 8, 2));

        clock.advance_ms(8_999); // t = 9999: bucket 0 is still in the window
        let view = fetch(&store, &get);
        assert_eq!((view.requests, view.errors, view.reporters), (19, 8, 2));
        clock.advance_ms(1); // t = 10000: bucket 0 has left it
        let view = fetch(&store, &get);
        assert_eq!((view.requests, view.errors, view.reporters), (4, 1, 1));
        assert_eq!(fetch(&store, &put).requests, 0);
        clock.advance_ms(999);
        assert_eq!(fetch(&store, &get).requests, 4);
        clock.advance_ms(1); // t = 11000: bucket 1 has left it
        let view = fetch(&store, &get);
        assert_eq!((view.requests, view.errors, view.reporters), (0, 0, 0));
        assert_eq!(view.status, SharedStatus::Closed);
    }

    #[test]
    fn memory_stays_bounded_by_the_window() {
        let (clock, store) = store();
        for _ in 0..100 {
            block_on(store.publish(&[delta("GetUser", "a", 1, 0)])).unwrap();
            clock.advance_ms(700);
        }
        let commands = store.inner.commands.lock();
        let buckets = commands.get("GetUser").map(|s| s.buckets.len());
        assert!(buckets.is_some_and(|n| n <= 10), "{buckets:?}");
    }

    #[test]
    fn a_custom_window_is_bucketed_and_checked() {
        let (clock, store) = store();
        let store = store.with_window(1_000, 4).unwrap();
        let k = key("GetUser");
        clock.advance_ms(249);
        block_on(store.publish(&[delta("GetUser", "a", 3, 1)])).unwrap();
        clock.advance_ms(1); // t = 250: bucket 1
        block_on(store.publish(&[delta("GetUser", "b", 2, 2)])).unwrap();
        clock.advance_ms(749); // t = 999
        assert_eq!(fetch(&store, &k).requests, 5);
        clock.advance_ms(1); // t = 1000: bucket 0 out
        let view = fetch(&store, &k);
        assert_eq!((view.requests, view.errors, view.reporters), (2, 2, 1));

        let refused = |window_ms, buckets| {
            let (_, store) = self::store();
            match store.with_window(window_ms, buckets) {
                Err(ConfigError::InvalidValue { name, .. }) => name,
                other => panic!("expected InvalidValue, got {other:?}"),
            }
        };
        assert_eq!(
            refused(1_000, 0),
            "InMemoryStateStore::with_window(buckets)"
        );
        assert_eq!(refused(0, 10), "InMemoryStateStore::with_window(window_ms)");
        assert_eq!(
            refused(1_000, 3),
            "InMemoryStateStore::with_window(buckets)"
        );
    }

    #[test]
    fn an_unavailable_store_fails_every_call_and_changes_nothing() {
        let (clock, store) = store();
        let k = key("GetUser");
        block_on(store.publish(&[delta("GetUser", "a", 10, 6)])).unwrap();
        assert_eq!(block_on(store.try_trip(&k, 0, 1_000)).unwrap(), Some(1));
        clock.advance_ms(1_000);
        assert!(block_on(store.try_acquire_probe(&k, "a", 5_000)).unwrap());
        let before = store.view_now("GetUser");
        let calls = store.calls();

        store.set_unavailable(true);
        let unavailable = |result: Result<(), StateStoreError>| {
            assert!(
                matches!(result, Err(StateStoreError::Unavailable(_))),
                "{result:?}"
            );
        };
        unavailable(block_on(store.publish(&[delta("GetUser", "b", 5, 5)])));
        unavailable(block_on(store.fetch(&k)).map(drop));
        unavailable(block_on(store.try_trip(&k, 1, 1_000)).map(drop));
        unavailable(block_on(store.try_acquire_probe(&k, "b", 500)).map(drop));
        unavailable(block_on(store.close(&k, 1)).map(drop));
        assert_eq!(store.calls(), calls + 5);
        assert_eq!(store.view_now("GetUser"), before);

        store.set_unavailable(false);
        // a still holds the permit; the state was not closed or re-tripped.
        assert!(!block_on(store.try_acquire_probe(&k, "b", 500)).unwrap());
        assert_eq!(block_on(store.close(&k, 1)).unwrap(), Some(2));
    }

    #[test]
    fn calls_are_counted_across_clones() {
        let (_, store) = store();
        let other = store.clone();
        let k = key("GetUser");
        assert_eq!(store.calls(), 0);
        block_on(store.fetch(&k)).unwrap();
        block_on(other.publish(&[])).unwrap();
        block_on(store.try_trip(&k, 0, 10)).unwrap();
        block_on(other.try_acquire_probe(&k, "a", 10)).unwrap();
        block_on(store.close(&k, 1)).unwrap();
        let _ = store.view_now("GetUser");
        assert_eq!((store.calls(), other.calls()), (5, 5));
        // Like an async fn: nothing happens until the future is polled.
        drop(store.try_trip(&k, 2, 10));
        assert_eq!(store.calls(), 5);
        assert_eq!(store.view_now("GetUser").generation, 2);
    }

    #[test]
    fn works_as_a_shared_trait_object() {
        let (_, store) = store();
        let shared: Arc<dyn StateStore> = Arc::new(store.clone());
        let k = key("GetUser");
        assert_eq!(block_on(shared.try_trip(&k, 0, 1_000)).unwrap(), Some(1));
        assert_eq!(store.view_now("GetUser").generation, 1);
    }

    #[test]
    fn errors_say_what_happened() {
        assert_eq!(
            StateStoreError::Unavailable("connection refused".into()).to_string(),
            "state store unavailable: connection refused"
        );
        assert_eq!(
            StateStoreError::Timeout(50).to_string(),
            "state store call timed out after 50 ms"
        );
        let other = StateStoreError::Other("bad reply".into());
        assert_eq!(other.to_string(), "state store error: bad reply");
        assert!(std::error::Error::source(&other).is_some());
    }
}
