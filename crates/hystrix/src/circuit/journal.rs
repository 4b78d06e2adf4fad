//! The replay journal: requests short-circuited while a breaker is open, kept for the
//! application to replay after it closes (the cloud circuit-breaker pattern's "replay").
//!
//! A command with a [`JournalConfig`] journals every request its open breaker refuses, as a
//! [`JournalEntry`]. The journal is bounded: when it is full, the oldest entry is dropped to make
//! room. Once the breaker closes, the entries are handed to the configured replay function,
//! oldest first, at most [`replay_per_second`](JournalConfig::replay_per_second) of them per
//! second, so a dependency that has just recovered is not flooded. If the breaker opens again
//! during a replay, the replay stops and the rest waits for the next close.
//!
//! What happens to entries is reported as [`JournalEvent`]s (journalled, replayed, dropped).

use std::collections::VecDeque;
use std::fmt;
use std::num::{NonZeroU32, NonZeroUsize};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::clock::{Clock, Sleep};
use crate::key::CommandKey;

/// Entries a journal keeps by default before it drops the oldest.
const DEFAULT_CAPACITY: NonZeroUsize = match NonZeroUsize::new(1000) {
    Some(n) => n,
    None => unreachable!(),
};
/// Entries replayed per second by default.
const DEFAULT_REPLAY_PER_SECOND: NonZeroU32 = match NonZeroU32::new(10) {
    Some(n) => n,
    None => unreachable!(),
};

/// One short-circuited request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    /// The command whose breaker refused the request.
    pub command_key: CommandKey,
    /// What the application needs to replay the request (set by the command's definition).
    pub description: String,
    /// When the request was refused: wall-clock ms since the Unix epoch
    /// ([`Clock::epoch_ms`]).
    pub at_epoch_ms: u64,
}

/// How a command journals and replays (set on the command builder; cheap to clone).
///
/// Defaults: a capacity of 1000 entries and 10 entries replayed per second.
///
/// ```
/// use hystrix::circuit::journal::JournalConfig;
/// use std::num::{NonZeroU32, NonZeroUsize};
///
/// let config = JournalConfig::new(|entry| println!("replay {}", entry.description))
///     .capacity(NonZeroUsize::new(500).expect("not zero"))
///     .replay_per_second(NonZeroU32::new(20).expect("not zero"));
/// # let _ = config;
/// ```
#[derive(Clone)]
pub struct JournalConfig {
    replay: Arc<dyn Fn(JournalEntry) + Send + Sync>,
    capacity: NonZeroUsize,
    replay_per_second: NonZeroU32,
}

impl JournalConfig {
    /// A journal whose entries are handed to `replay`, each once, oldest first, after the
    /// breaker closes. Capacity 1000 entries, 10 replayed per second.
    ///
    /// `replay` runs on a worker thread of the registry's tokio executor: it should not block
    /// (hand long work to a task or a queue of your own). A panic in it is caught and logged
    /// once; the entry then counts as replayed.
    pub fn new(replay: impl Fn(JournalEntry) + Send + Sync + 'static) -> Self {
        JournalConfig {
            replay: Arc::new(replay),
            capacity: DEFAULT_CAPACITY,
            replay_per_second: DEFAULT_REPLAY_PER_SECOND,
        }
    }

    /// At most `entries` are kept (default 1000); journalling into a full journal drops the
    /// oldest entry.
    pub fn capacity(mut self, entries: NonZeroUsize) -> Self {
        self.capacity = entries;
        self
    }

    /// At most `rate` entries are replayed per second (default 10): one every `1000 / rate` ms
    /// on the registry's clock, the first at once. Above 1000 per second, up to
    /// `rate / 1000` (rounded up) entries go together each millisecond.
    pub fn replay_per_second(mut self, rate: NonZeroU32) -> Self {
        self.replay_per_second = rate;
        self
    }
}

impl fmt::Debug for JournalConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JournalConfig")
            .field("capacity", &self.capacity)
            .field("replay_per_second", &self.replay_per_second)
            .finish_non_exhaustive()
    }
}

/// What happened to an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalEvent {
    /// The entry was kept for replay.
    Journalled(JournalEntry),
    /// The entry was handed to the replay function (which returned or panicked).
    Replayed(JournalEntry),
    /// The journal was full: the entry, its oldest, was dropped unreplayed.
    Dropped(JournalEntry),
}

/// A journal's counts since it was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JournalCounts {
    /// Entries journalled (including those dropped since).
    pub journalled: u64,
    /// Entries handed to the replay function.
    pub replayed: u64,
    /// Entries dropped unreplayed because the journal was full.
    pub dropped: u64,
    /// Entries waiting for replay now.
    pub pending: usize,
}

/// The journal of one command key: bounded, replayed by at most one task at a time.
pub(crate) struct Journal {
    config: JournalConfig,
    inner: Mutex<Inner>,
    /// A replay task is running (it owns the flag; see `ReplayFlag`).
    replaying: AtomicBool,
    /// The replay function panicked once already (later panics are not logged).
    replay_panicked: AtomicBool,
}

#[derive(Default)]
struct Inner {
    entries: VecDeque<JournalEntry>,
    journalled: u64,
    replayed: u64,
    dropped: u64,
}

impl Journal {
    /// An empty journal.
    pub(crate) fn new(config: JournalConfig) -> Self {
        Journal {
            config,
            inner: Mutex::new(Inner::default()),
            replaying: AtomicBool::new(false),
            replay_panicked: AtomicBool::new(false),
        }
    }

    /// Keeps `entry`; a full journal drops (and returns) the oldest, counted.
    pub(crate) fn push(&self, entry: JournalEntry) -> Option<JournalEntry> {
        let mut inner = self.inner.lock();
        inner.journalled += 1;
        let dropped = if inner.entries.len() >= self.config.capacity.get() {
            inner.dropped += 1;
            inner.entries.pop_front()
        } else {
            None
        };
        inner.entries.push_back(entry);
        dropped
    }

    /// Entries waiting for replay.
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    /// The counts since creation, and the entries pending now.
    pub(crate) fn counts(&self) -> JournalCounts {
        let inner = self.inner.lock();
        JournalCounts {
            journalled: inner.journalled,
            replayed: inner.replayed,
            dropped: inner.dropped,
            pending: inner.entries.len(),
        }
    }

    /// Whether a replay task is running.
    #[cfg(test)]
    pub(crate) fn is_replaying(&self) -> bool {
        self.replaying.load(Ordering::SeqCst)
    }

    /// Starts replaying: a task spawned on `executor` hands the entries to the replay function,
    /// oldest first, one every `1000 / rate` ms measured on `clock` (the first at once), until
    /// the journal is empty or `keep_going()` returns false (the breaker opened again: it stops
    /// and keeps the rest for the next close). Entries journalled meanwhile are replayed in the
    /// same run, after the older ones. `on_event` hears each [`JournalEvent::Replayed`].
    ///
    /// Does nothing if a replay task is running already: that one goes on, with its own
    /// arguments. A task that is just stopping calls its `keep_going` once more after it lets
    /// go of the journal, so `keep_going` must see a close made before this call (then the
    /// entries never wait for one more close).
    ///
    /// The replay function is never called with the journal's lock held. A panic in it is
    /// caught and logged once (per journal), and the entry counts as replayed. If the task is
    /// dropped (the executor shuts down), the rest stays journalled and a later call starts a
    /// new task.
    pub(crate) fn start_replay(
        self: &Arc<Self>,
        executor: &tokio::runtime::Handle,
        clock: Arc<dyn Clock>,
        keep_going: Arc<dyn Fn() -> bool + Send + Sync>,
        on_event: Arc<dyn Fn(JournalEvent) + Send + Sync>,
    ) {
        if self
            .replaying
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return;
        }
        // Created before the spawn, so dropping the task unpolled releases the flag too.
        let flag = ReplayFlag {
            journal: Arc::clone(self),
            held: true,
        };
        // The task's handle is not kept: it ends by itself, and a dropped handle detaches it.
        drop(executor.spawn(replay(flag, clock, keep_going, on_event)));
    }

    /// Removes the oldest entry.
    fn pop(&self) -> Option<JournalEntry> {
        self.inner.lock().entries.pop_front()
    }

    /// Hands `entry` to the replay function (no lock held), catching a panic, and counts it.
    fn replay_one(&self, entry: JournalEntry) {
        let command_key = entry.command_key.clone();
        let replay = &self.config.replay;
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| replay(entry))) {
            let message = crate::command::panic_message(panic);
            if !self.replay_panicked.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    command = %command_key,
                    "hystrix: the journal's replay function panicked ({message}); the entry \
                     counts as replayed, and later panics of it are not logged"
                );
            }
        }
        self.inner.lock().replayed += 1;
    }
}

/// Ownership of a journal's `replaying` flag by its replay task; released when dropped.
struct ReplayFlag {
    journal: Arc<Journal>,
    held: bool,
}

impl ReplayFlag {
    fn release(&mut self) {
        if self.held {
            self.held = false;
            self.journal.replaying.store(false, Ordering::SeqCst);
        }
    }

    /// Takes the flag again, unless another task has taken it meanwhile.
    fn reacquire(&mut self) -> bool {
        self.held = self
            .journal
            .replaying
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        self.held
    }
}

impl Drop for ReplayFlag {
    fn drop(&mut self) {
        self.release();
    }
}

/// The replay task (see [`Journal::start_replay`]).
///
/// Pacing is a virtual schedule in units of 1/rate ms, so that `rate` entries take exactly
/// 1000 ms of clock time whatever the rate: entry n+1 is due 1000 units after entry n. The
/// schedule never lags the clock by a millisecond or more, so a late wake-up (a slow replay
/// function, a clock advanced by a lot) does not release a burst of overdue entries.
async fn replay(
    mut flag: ReplayFlag,
    clock: Arc<dyn Clock>,
    keep_going: Arc<dyn Fn() -> bool + Send + Sync>,
    on_event: Arc<dyn Fn(JournalEvent) + Send + Sync>,
) {
    let journal = Arc::clone(&flag.journal);
    let rate = u128::from(journal.config.replay_per_second.get());
    let mut due: u128 = 0;
    loop {
        if keep_going() {
            let now = u128::from(clock.now_ms()) * rate;
            due = due.max(now.saturating_sub(rate - 1));
            if due > now {
                let deadline_ms = u64::try_from(due.div_ceil(rate)).unwrap_or(u64::MAX);
                Sleep::until(Arc::clone(&clock), deadline_ms).await;
                continue;
            }
            if let Some(entry) = journal.pop() {
                journal.replay_one(entry.clone());
                on_event(JournalEvent::Replayed(entry));
                due += 1000;
                continue;
            }
        }
        // Told to stop (the breaker opened again; the rest waits for the next close), or the
        // journal is empty. Let go of the flag, then look again: an entry journalled, or a
        // `start_replay` refused because this task still held the flag (the breaker closed
        // again), just before would otherwise wait for the next close.
        flag.release();
        if journal.len() > 0 && keep_going() && flag.reacquire() {
            continue;
        }
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::sync::atomic::AtomicU64;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A safety bound for waits on channels: never reached when the test passes.
    const BOUND: Duration = Duration::from_secs(10);

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    fn entry(description: &str, at_epoch_ms: u64) -> JournalEntry {
        JournalEntry {
            command_key: CommandKey::new("GetUser").unwrap(),
            description: description.to_owned(),
            at_epoch_ms,
        }
    }

    fn descriptions(entries: &[JournalEntry]) -> Vec<&str> {
        entries.iter().map(|e| e.description.as_str()).collect()
    }

    /// A journal whose replay function sends each entry's description to the returned channel.
    fn recording_journal(
        build: impl FnOnce(JournalConfig) -> JournalConfig,
    ) -> (Arc<Journal>, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel();
        let config = build(JournalConfig::new(move |entry| {
            tx.send(entry.description).unwrap();
        }));
        (Arc::new(Journal::new(config)), rx)
    }

    /// Hooks for `start_replay`: keep going while `go` is set; Replayed events go to the channel.
    #[allow(clippy::type_complexity)]
    fn hooks(
        go: &Arc<AtomicBool>,
    ) -> (
        Arc<dyn Fn() -> bool + Send + Sync>,
        Arc<dyn Fn(JournalEvent) + Send + Sync>,
        mpsc::Receiver<JournalEvent>,
    ) {
        let go = Arc::clone(go);
        let (tx, rx) = mpsc::channel();
        (
            Arc::new(move || go.load(Ordering::SeqCst)),
            Arc::new(move |event| tx.send(event).unwrap()),
            rx,
        )
    }

    fn replayed(events: &mpsc::Receiver<JournalEvent>) -> String {
        match events.recv_timeout(BOUND).unwrap() {
            JournalEvent::Replayed(entry) => entry.description,
            other => panic!("expected Replayed, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_1000_entries_and_10_per_second() {
        let config = JournalConfig::new(|_| {});
        assert_eq!(config.capacity.get(), 1000);
        assert_eq!(config.replay_per_second.get(), 10);
        assert_eq!(
            format!("{config:?}"),
            "JournalConfig { capacity: 1000, replay_per_second: 10, .. }"
        );
    }

    #[test]
    fn full_journal_drops_the_oldest_and_counts_it() {
        let journal =
            Journal::new(JournalConfig::new(|_| {}).capacity(NonZeroUsize::new(3).unwrap()));
        let mut dropped = Vec::new();
        for n in 1..=5u64 {
            if let Some(old) = journal.push(entry(&n.to_string(), 1000 + n)) {
                dropped.push(old);
            }
        }
        assert_eq!(dropped, vec![entry("1", 1001), entry("2", 1002)]);
        assert_eq!(journal.len(), 3);
        let kept: Vec<_> = std::iter::from_fn(|| journal.pop()).collect();
        assert_eq!(descriptions(&kept), vec!["3", "4", "5"]);
        assert_eq!(
            journal.counts(),
            JournalCounts {
                journalled: 5,
                replayed: 0,
                dropped: 2,
                pending: 0,
            }
        );
    }

    #[test]
    fn replays_oldest_first_including_entries_journalled_during_the_run() {
        let rt = runtime();
        let clock = ManualClock::new();
        let (journal, rx) = recording_journal(|c| c);
        for d in ["a", "b", "c"] {
            journal.push(entry(d, 0));
        }
        let go = Arc::new(AtomicBool::new(true));
        let (keep_going, on_event, events) = hooks(&go);
        journal.start_replay(rt.handle(), Arc::new(clock.clone()), keep_going, on_event);
        assert_eq!(rx.recv_timeout(BOUND).unwrap(), "a");
        assert_eq!(replayed(&events), "a");
        journal.push(entry("d", 0));
        for expected in ["b", "c", "d"] {
            // 10 per second by default: one every 100 ms.
            clock.advance_ms(100);
            assert_eq!(rx.recv_timeout(BOUND).unwrap(), expected);
            assert_eq!(replayed(&events), expected);
        }
        assert_eq!(
            journal.counts(),
            JournalCounts {
                journalled: 4,
                replayed: 4,
                dropped: 0,
                pending: 0,
            }
        );
    }

    #[test]
    fn replay_is_paced_on_the_clock_without_bursts() {
        let rt = runtime();
        let clock = ManualClock::new();
        clock.advance_ms(12_345);
        let (journal, rx) = recording_journal(|c| c.replay_per_second(NonZeroU32::new(2).unwrap()));
        for d in ["a", "b", "c", "d"] {
            journal.push(entry(d, 0));
        }
        let go = Arc::new(AtomicBool::new(true));
        let (keep_going, on_event, events) = hooks(&go);
        journal.start_replay(
            rt.handle(),
            Arc::new(clock.clone()),
            Arc::clone(&keep_going),
            Arc::clone(&on_event),
        );
        // A second start while replaying starts no second task (it would replay "b" at once).
        journal.start_replay(rt.handle(), Arc::new(clock.clone()), keep_going, on_event);

        // The first at once (at 12 345 ms).
        assert_eq!(rx.recv_timeout(BOUND).unwrap(), "a");
        assert_eq!(replayed(&events), "a");
        assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Empty));
        // 2 per second: the second is due 500 ms after the first, not before.
        clock.advance_ms(499);
        assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Empty));
        clock.advance_ms(1);
        assert_eq!(rx.recv_timeout(BOUND).unwrap(), "b");
        assert_eq!(replayed(&events), "b");
        assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Empty));

        // A late wake-up (at 14 845 ms, "c" was due at 13 345) releases one entry, not the
        // overdue ones in a burst: the next is due 500 ms after it.
        clock.advance_ms(2_000);
        assert_eq!(rx.recv_timeout(BOUND).unwrap(), "c");
        assert_eq!(replayed(&events), "c");
        assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Empty));
        clock.advance_ms(499);
        assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Empty));
        clock.advance_ms(1);
        assert_eq!(rx.recv_timeout(BOUND).unwrap(), "d");
        assert_eq!(replayed(&events), "d");
        assert_eq!(
            journal.counts(),
            JournalCounts {
                journalled: 4,
                replayed: 4,
                dropped: 0,
                pending: 0,
            }
        );
    }

    #[test]
    fn stops_when_the_breaker_opens_again_and_keeps_the_rest_for_the_next_close() {
        let rt = runtime();
        let clock = ManualClock::new();
        let (journal, rx) = recording_journal(|c| c.replay_per_second(NonZeroU32::new(2).unwrap()));
        for d in ["a", "b", "c"] {
            journal.push(entry(d, 0));
        }
        // The breaker "opens again" at 500 ms, when "b" is due; each "no" is reported.
        let open_at_ms = Arc::new(AtomicU64::new(500));
        let (said_no_tx, said_no) = mpsc::channel();
        let keep_going: Arc<dyn Fn() -> bool + Send + Sync> = {
            let (clock, open_at_ms) = (clock.clone(), Arc::clone(&open_at_ms));
            Arc::new(move || {
                let go = clock.now_ms() < open_at_ms.load(Ordering::SeqCst);
                if !go {
                    said_no_tx.send(()).unwrap();
                }
                go
            })
        };
        let (_, on_event, events) = hooks(&Arc::new(AtomicBool::new(true)));
        journal.start_replay(
            rt.handle(),
            Arc::new(clock.clone()),
            Arc::clone(&keep_going),
            Arc::clone(&on_event),
        );
        assert_eq!(rx.recv_timeout(BOUND).unwrap(), "a");
        assert_eq!(replayed(&events), "a");
        clock.advance_ms(500);
        said_no.recv_timeout(BOUND).unwrap();
        // Told to stop, the task hands out nothing more; the journal keeps the rest.
        assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Empty));
        assert_eq!(
            journal.counts(),
            JournalCounts {
                journalled: 3,
                replayed: 1,
                dropped: 0,
                pending: 2,
            }
        );

        // The next close replays the rest, the first at once.
        open_at_ms.store(u64::MAX, Ordering::SeqCst);
        journal.start_replay(rt.handle(), Arc::new(clock.clone()), keep_going, on_event);
        assert_eq!(rx.recv_timeout(BOUND).unwrap(), "b");
        assert_eq!(replayed(&events), "b");
        clock.advance_ms(500);
        assert_eq!(rx.recv_timeout(BOUND).unwrap(), "c");
        assert_eq!(replayed(&events), "c");
        assert_eq!(journal.counts().replayed, 3);
        assert_eq!(journal.len(), 0);
    }

    #[test]
    fn a_panicking_replay_function_is_caught_and_the_entry_counts_as_replayed() {
        let rt = runtime();
        let clock = ManualClock::new();
        let (tx, rx) = mpsc::channel();
        let journal = Arc::new(Journal::new(
            JournalConfig::new(move |entry| {
                assert_ne!(entry.description, "b", "replay refused");
                tx.send(entry.description).unwrap();
            })
            .replay_per_second(NonZeroU32::new(1000).unwrap()),
        ));
        for d in ["a", "b", "c"] {
            journal.push(entry(d, 0));
        }
        let go = Arc::new(AtomicBool::new(true));
        let (keep_going, on_event, events) = hooks(&go);
        journal.start_replay(rt.handle(), Arc::new(clock.clone()), keep_going, on_event);
        assert_eq!(replayed(&events), "a");
        clock.advance_ms(1);
        assert_eq!(replayed(&events), "b");
        clock.advance_ms(1);
        assert_eq!(replayed(&events), "c");
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec!["a", "c"]);
        assert!(journal.replay_panicked.load(Ordering::SeqCst));
        assert_eq!(
            journal.counts(),
            JournalCounts {
                journalled: 3,
                replayed: 3,
                dropped: 0,
                pending: 0,
            }
        );
    }

    #[test]
    fn above_1000_per_second_several_go_each_millisecond() {
        let rt = runtime();
        let clock = ManualClock::new();
        let (journal, rx) =
            recording_journal(|c| c.replay_per_second(NonZeroU32::new(2000).unwrap()));
        for d in ["a", "b", "c", "d", "e"] {
            journal.push(entry(d, 0));
        }
        let go = Arc::new(AtomicBool::new(true));
        let (keep_going, on_event, events) = hooks(&go);
        journal.start_replay(rt.handle(), Arc::new(clock.clone()), keep_going, on_event);
        // Due at 0, 0.5, 1.0, 1.5, 2.0 ms: "a" at 0, "b" and "c" at 1 ms, "d" and "e" at 2 ms.
        assert_eq!(replayed(&events), "a");
        clock.advance_ms(1);
        assert_eq!(replayed(&events), "b");
        assert_eq!(replayed(&events), "c");
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec!["a", "b", "c"]);
        clock.advance_ms(1);
        assert_eq!(replayed(&events), "d");
        assert_eq!(replayed(&events), "e");
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec!["d", "e"]);
    }

    #[test]
    fn a_replay_dropped_with_its_executor_can_start_again() {
        let clock = ManualClock::new();
        let (journal, rx) = recording_journal(|c| c);
        for d in ["a", "b"] {
            journal.push(entry(d, 0));
        }
        let go = Arc::new(AtomicBool::new(true));
        let (keep_going, on_event, events) = hooks(&go);
        let rt = runtime();
        journal.start_replay(
            rt.handle(),
            Arc::new(clock.clone()),
            Arc::clone(&keep_going),
            Arc::clone(&on_event),
        );
        assert_eq!(replayed(&events), "a");
        assert!(journal.is_replaying());
        // Dropping the runtime drops the task waiting for "b"'s turn.
        drop(rt);
        assert!(!journal.is_replaying());
        assert_eq!(journal.len(), 1);

        let rt = runtime();
        journal.start_replay(rt.handle(), Arc::new(clock.clone()), keep_going, on_event);
        assert_eq!(replayed(&events), "b");
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec!["a", "b"]);
    }
}
