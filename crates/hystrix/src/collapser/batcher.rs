//! The batching window of one collapser scope (Hystrix's `RequestCollapser`): requests join the
//! current batch; a timer of `timerDelayInMilliseconds` on the registry's clock runs it; a batch
//! that reaches `maxRequestsInBatch` runs at once.
//!
//! The timer ticks at a fixed rate from the first request after an idle period: each tick runs
//! the batch if it holds a request, and the timer stops at the first tick that finds none (it
//! starts again with the next request). While requests keep coming, windows align to the
//! ticks as in Hystrix (requests at 0 and 5 ms run at 10 ms; at 13 and 19 ms, at 20 ms).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::context::{CachedOutcome, Claim, Entry, WeakContext};
use crate::key::CommandKey;

/// A place in a batch: an argument and where its requests' answers go.
pub(crate) trait BatchSlot<A>: Send + Sync + 'static {
    /// What a new slot needs besides its argument.
    type Init;
    /// A slot for `arg`, with one request waiting.
    fn create(arg: A, init: Self::Init) -> Self;
    /// Its argument.
    fn arg(&self) -> &A;
    /// One more request waits for it.
    fn join(&self);
    /// Whether any request still waits for it (a slot nobody waits for is left out).
    fn is_wanted(&self) -> bool;
}

/// How many requests wait for a slot (a slot nobody waits for is left out of its batch).
pub(crate) struct Waiting(AtomicUsize);

impl Waiting {
    /// One request waits.
    pub(crate) fn one() -> Self {
        Waiting(AtomicUsize::new(1))
    }

    pub(crate) fn join(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    /// A request left before its answer came.
    pub(crate) fn leave(&self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }

    pub(crate) fn any(&self) -> bool {
        self.0.load(Ordering::Acquire) > 0
    }
}

/// One slot of a batch: an argument and where its response goes. Duplicate arguments share a
/// slot while `requestCache.enabled`.
pub(crate) struct Slot<A, R, E> {
    pub(crate) arg: A,
    pub(crate) entry: Arc<Entry<R, E>>,
    /// The request cache's claim on `entry`, answered with the response.
    claim: Mutex<Option<Claim<R, E>>>,
    waiting: Waiting,
}

impl<A, R, E> BatchSlot<A> for Slot<A, R, E>
where
    A: Send + Sync + 'static,
    R: Send + Sync + 'static,
    E: Send + Sync + 'static,
{
    type Init = Option<Claim<R, E>>;

    fn create(arg: A, claim: Option<Claim<R, E>>) -> Self {
        let entry = claim
            .as_ref()
            .map_or_else(|| Arc::new(Entry::new()), |claim| Arc::clone(claim.entry()));
        Slot {
            arg,
            entry,
            claim: Mutex::new(claim),
            waiting: Waiting::one(),
        }
    }

    fn arg(&self) -> &A {
        &self.arg
    }

    fn join(&self) {
        self.waiting.join();
    }

    /// A slot in the request cache is wanted by whoever finds its entry there later, too.
    fn is_wanted(&self) -> bool {
        self.waiting.any() || self.claim.lock().is_some()
    }
}

impl<A, R, E> Slot<A, R, E> {
    /// Answers every request of this slot.
    pub(crate) fn deliver(&self, outcome: CachedOutcome<R, E>) {
        match self.claim.lock().take() {
            Some(claim) => claim.publish(&outcome),
            None => self.entry.publish(outcome),
        }
    }

    /// A request left before its response came.
    pub(crate) fn leave(&self) {
        self.waiting.leave();
    }
}

/// A slot whose requests can be told their batch will never answer.
pub(crate) trait Abort {
    /// Answers the slot's requests with [`FailureType::Cancelled`](crate::FailureType) naming
    /// `key`, unless they have their answer already.
    fn abort(&self, key: &CommandKey);
}

/// The slots of a shard being run: any still unanswered when it drops (its task was dropped:
/// the executor stopped) are answered with a cancellation, so no caller waits forever.
pub(crate) struct AnswerOnDrop<S: Abort> {
    pub(crate) slots: Vec<Arc<S>>,
    pub(crate) key: CommandKey,
}

impl<S: Abort> Drop for AnswerOnDrop<S> {
    fn drop(&mut self) {
        for slot in &self.slots {
            slot.abort(&self.key);
        }
    }
}

impl<A, R, E> Abort for Slot<A, R, E> {
    fn abort(&self, key: &CommandKey) {
        if self.entry.is_settled() {
            return;
        }
        let error = Arc::new(super::cancelled(key));
        self.deliver(CachedOutcome {
            response: Err(error),
            result: crate::command::ExecutionResult::empty(),
        });
    }
}

/// What a batcher needs from its collapser.
pub(crate) trait BatchRunner<S>: Send + Sync + 'static {
    /// `maxRequestsInBatch`, `timerDelayInMilliseconds` and `requestCache.enabled` now.
    fn limits(&self) -> Limits;
    /// Runs `batch` (spawned on the registry's executor, or answered at once), in `context`
    /// for a REQUEST-scoped batcher.
    fn run(self: Arc<Self>, batch: Vec<Arc<S>>, context: Option<&WeakContext>);
    /// Asks `tick` to run at `deadline_ms` on the registry's clock.
    fn schedule(&self, deadline_ms: u64, tick: Box<dyn FnOnce() + Send>);
    /// The registry clock's time in ms.
    fn now_ms(&self) -> u64;
}

/// The properties a batcher reads when a request arrives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_requests: usize,
    pub(crate) timer_delay_ms: u64,
    pub(crate) share_duplicates: bool,
}

struct Pending<A, S> {
    slots: Vec<Arc<S>>,
    /// Where each argument's slot is, while duplicates share slots.
    index: HashMap<A, usize>,
    /// The timer is ticking.
    ticking: bool,
}

/// The current batch of one collapser scope, of slots `S` for arguments `A`.
pub(crate) struct Batcher<A, S> {
    pending: Mutex<Pending<A, S>>,
    runner: Arc<dyn BatchRunner<S>>,
    /// The request context of a REQUEST-scoped batcher (weak: the context holds the batcher).
    context: Option<WeakContext>,
    me: Weak<Batcher<A, S>>,
}

impl<A, S> Batcher<A, S>
where
    A: Clone + Hash + Eq + Send + Sync + 'static,
    S: BatchSlot<A>,
{
    pub(crate) fn new(runner: Arc<dyn BatchRunner<S>>, context: Option<WeakContext>) -> Arc<Self> {
        Arc::new_cyclic(|me| Batcher {
            context,
            pending: Mutex::new(Pending {
                slots: Vec::new(),
                index: HashMap::new(),
                ticking: false,
            }),
            runner,
            me: me.clone(),
        })
    }

    /// Adds a request for `arg` to the current batch and returns its slot, made with `init`
    /// unless `share` and an equal argument's slot is in the batch (then that one).
    pub(crate) fn submit(&self, arg: A, init: S::Init, share: bool) -> Arc<S> {
        let limits = self.runner.limits();
        let mut pending = self.pending.lock();
        if share
            && limits.share_duplicates
            && let Some(&at) = pending.index.get(&arg)
        {
            let slot = Arc::clone(&pending.slots[at]);
            slot.join();
            return slot;
        }
        let slot = Arc::new(S::create(arg.clone(), init));
        if limits.share_duplicates {
            let at = pending.slots.len();
            pending.index.insert(arg, at);
        }
        pending.slots.push(Arc::clone(&slot));
        if pending.slots.len() >= limits.max_requests {
            // Full: it runs now, and the next request starts a new batch.
            let batch = take(&mut pending);
            drop(pending);
            self.run(batch);
        } else if !pending.ticking {
            pending.ticking = true;
            drop(pending);
            self.arm(self.runner.now_ms().saturating_add(limits.timer_delay_ms));
        }
        slot
    }

    /// Schedules the next tick. The timer holds the batcher until it stops, so a pending batch
    /// runs even if its request context ended meanwhile (then under no context).
    fn arm(&self, deadline_ms: u64) {
        let Some(batcher) = self.me.upgrade() else {
            return;
        };
        self.runner
            .schedule(deadline_ms, Box::new(move || batcher.tick(deadline_ms)));
    }

    /// A tick of the timer: runs the batch if it holds a request and ticks on, or stops.
    fn tick(&self, deadline_ms: u64) {
        let mut pending = self.pending.lock();
        if pending.slots.is_empty() {
            pending.ticking = false;
            return;
        }
        let batch = take(&mut pending);
        drop(pending);
        self.run(batch);
        let delay = self.runner.limits().timer_delay_ms;
        self.arm(deadline_ms.saturating_add(delay));
    }
}

impl<A, S: 'static> Batcher<A, S> {
    fn run(&self, batch: Vec<Arc<S>>) {
        Arc::clone(&self.runner).run(batch, self.context.as_ref());
    }
}

fn take<A, S>(pending: &mut Pending<A, S>) -> Vec<Arc<S>> {
    pending.index.clear();
    std::mem::take(&mut pending.slots)
}
