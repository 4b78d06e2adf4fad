//! The request cache (Hystrix's `HystrixRequestCache`): per request context, one shared
//! outcome per (command key, cache key).
//!
//! An entry is inserted before its execution runs, so identical executions that arrive while it
//! runs wait for it and share its outcome instead of running again. Every outcome is kept for the
//! rest of the request — values, fallback values, failures, timeouts, rejections — as Hystrix
//! does. Values and errors are shared behind `Arc`, so neither needs `Clone`.
//!
//! An entry whose execution is dropped before it ends, while nobody waits for it, is
//! abandoned: it leaves the map, and a later execution runs anew. While executions wait for it,
//! the execution goes on without its caller (see `CachedFuture`); if it cannot
//! (the registry's executor is gone), it is abandoned and the waiters look again (the first runs
//! its own run function and becomes the new entry's owner), so no caller waits forever.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

use crate::command::ExecutionResult;
use crate::context::RequestContext;
use crate::error::HystrixError;
use crate::key::CommandKey;

/// A response shared by every execution of one cache key in one request: the value or the
/// error behind `Arc`, so neither `T` nor `E` needs `Clone`.
pub type SharedResponse<T, E> = Result<Arc<T>, Arc<HystrixError<E>>>;

/// The shared response of a cached execution together with its
/// [`ExecutionResult`]: the execution's own events for the one that ran, or (for a hit) the
/// events of the execution it shares plus RESPONSE_FROM_CACHE, no execution time, not executed
/// in a thread (as Hystrix's cache hits report).
#[derive(Debug)]
pub struct CachedOutcome<T, E> {
    pub(crate) response: SharedResponse<T, E>,
    pub(crate) result: ExecutionResult,
}

impl<T, E> Clone for CachedOutcome<T, E> {
    fn clone(&self) -> Self {
        CachedOutcome {
            response: match &self.response {
                Ok(value) => Ok(Arc::clone(value)),
                Err(error) => Err(Arc::clone(error)),
            },
            result: self.result,
        }
    }
}

impl<T, E> CachedOutcome<T, E> {
    /// The shared value (from the run or the fallback) or the shared error.
    pub fn response(&self) -> &SharedResponse<T, E> {
        &self.response
    }

    /// Takes the response.
    pub fn into_response(self) -> SharedResponse<T, E> {
        self.response
    }

    /// The events and times of this execution (see the type's docs for a hit).
    pub fn execution_result(&self) -> &ExecutionResult {
        &self.result
    }

    /// Whether the response came from the request cache (another execution's outcome).
    pub fn is_response_from_cache(&self) -> bool {
        self.result.is_response_from_cache()
    }

    /// Splits into the response and the execution result.
    pub fn into_parts(self) -> (SharedResponse<T, E>, ExecutionResult) {
        (self.response, self.result)
    }
}

/// Whose cache key an entry is: a command's or a collapser's (the same cache-key
/// string under another command or collapser key is another entry).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum CacheOwner {
    /// A command key.
    Command(CommandKey),
    /// A collapser key.
    Collapser(crate::key::CollapserKey),
}

type EntryKey = (CacheOwner, String);

/// The entries of one request context, type-erased (each holds an `Arc<Entry<T, E>>`).
#[derive(Default)]
pub(crate) struct RequestCache {
    entries: Mutex<HashMap<EntryKey, Arc<dyn Any + Send + Sync>>>,
}

impl RequestCache {
    /// Finds the entry of (`key`, `cache_key`), or inserts a new one that the caller must run
    /// and publish. `None` if the entry holds another response type (two definitions of one
    /// command key with different types).
    pub(crate) fn lookup<T, E>(
        &self,
        context: &RequestContext,
        owner: CacheOwner,
        cache_key: &str,
    ) -> Option<Lookup<T, E>>
    where
        T: Send + Sync + 'static,
        E: Send + Sync + 'static,
    {
        let mut entries = self.entries.lock();
        let map_key = (owner, cache_key.to_owned());
        if let Some(found) = entries.get(&map_key) {
            return Arc::clone(found)
                .downcast::<Entry<T, E>>()
                .ok()
                .map(Lookup::Hit);
        }
        let entry = Arc::new(Entry::new());
        entries.insert(
            map_key.clone(),
            Arc::clone(&entry) as Arc<dyn Any + Send + Sync>,
        );
        Some(Lookup::Miss(Claim {
            context: context.clone(),
            map_key,
            entry,
            published: false,
        }))
    }

    /// Removes the entry of (`key`, `cache_key`); whether there was one. An execution still
    /// running for it goes on and answers those already waiting; the next lookup runs anew.
    pub(crate) fn clear(&self, owner: CacheOwner, cache_key: &str) -> bool {
        self.entries
            .lock()
            .remove(&(owner, cache_key.to_owned()))
            .is_some()
    }

    /// Removes the entry of `map_key` if it is still the one at `entry`.
    fn remove_if_same(&self, map_key: &EntryKey, entry: *const ()) {
        let mut entries = self.entries.lock();
        if entries
            .get(map_key)
            .is_some_and(|current| std::ptr::eq(Arc::as_ptr(current).cast::<()>(), entry))
        {
            entries.remove(map_key);
        }
    }
}

/// What a lookup found.
pub(crate) enum Lookup<T, E> {
    /// Another execution's entry: wait for its outcome.
    Hit(Arc<Entry<T, E>>),
    /// A new entry: run the execution and publish its outcome.
    Miss(Claim<T, E>),
}

/// One shared outcome, awaited by any number of executions: a cache key's, or a collapsed
/// request's.
pub(crate) struct Entry<T, E> {
    state: Mutex<EntryState<T, E>>,
    /// Executions waiting for the outcome now ([`Wait`]s alive).
    waiters: AtomicUsize,
    /// The task its execution went on in after its caller left: aborted when the last waiter
    /// leaves too.
    detached: Mutex<Option<tokio::task::AbortHandle>>,
}

enum EntryState<T, E> {
    /// Its execution runs; these tasks wait.
    Running(Vec<Waker>),
    /// Its execution ended with this outcome.
    Done(CachedOutcome<T, E>),
    /// Its execution was dropped before it ended.
    Abandoned,
}

impl<T, E> Entry<T, E> {
    /// Whether its outcome is there (or it was abandoned).
    pub(crate) fn is_settled(&self) -> bool {
        !matches!(*self.state.lock(), EntryState::Running(_))
    }

    /// An entry whose outcome is still to come.
    pub(crate) fn new() -> Self {
        Entry {
            state: Mutex::new(EntryState::Running(Vec::new())),
            waiters: AtomicUsize::new(0),
            detached: Mutex::new(None),
        }
    }

    /// Its execution goes on in `task` for the waiters: `task` is aborted once none is left
    /// (at once if none is left now), as Hystrix's cached observable unsubscribes from the
    /// command when its last subscriber leaves.
    pub(crate) fn went_on_in(&self, task: tokio::task::AbortHandle) {
        *self.detached.lock() = Some(task);
        if !self.has_waiters() {
            self.abort_detached();
        }
    }

    fn abort_detached(&self) {
        if let Some(task) = self.detached.lock().take() {
            task.abort();
        }
    }

    /// Whether an execution waits for the outcome now.
    pub(crate) fn has_waiters(&self) -> bool {
        self.waiters.load(Ordering::Acquire) > 0
    }

    /// Gives the outcome to every waiter (the first outcome wins).
    pub(crate) fn publish(&self, outcome: CachedOutcome<T, E>) {
        let mut state = self.state.lock();
        if matches!(*state, EntryState::Running(_)) {
            let previous = std::mem::replace(&mut *state, EntryState::Done(outcome));
            drop(state);
            if let EntryState::Running(wakers) = previous {
                wakers.into_iter().for_each(Waker::wake);
            }
        }
    }

    /// Waits for the outcome; `None` if the execution was abandoned.
    pub(crate) fn wait(self: Arc<Self>) -> Wait<T, E> {
        self.waiters.fetch_add(1, Ordering::AcqRel);
        Wait { entry: self }
    }

    fn settle(&self, settled: EntryState<T, E>) {
        let previous = std::mem::replace(&mut *self.state.lock(), settled);
        if let EntryState::Running(wakers) = previous {
            wakers.into_iter().for_each(Waker::wake);
        }
    }
}

/// The future of [`Entry::wait`].
pub(crate) struct Wait<T, E> {
    entry: Arc<Entry<T, E>>,
}

impl<T, E> Wait<T, E> {
    /// Whether the outcome is there (or the entry was abandoned).
    pub(crate) fn is_settled(&self) -> bool {
        self.entry.is_settled()
    }
}

impl<T, E> Drop for Wait<T, E> {
    fn drop(&mut self) {
        if self.entry.waiters.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last waiter left: a run that went on only for the waiters stops (a finished
            // one is not affected).
            self.entry.abort_detached();
        }
    }
}

impl<T, E> Future for Wait<T, E> {
    type Output = Option<CachedOutcome<T, E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.entry.state.lock();
        match &mut *state {
            EntryState::Done(outcome) => Poll::Ready(Some(outcome.clone())),
            EntryState::Abandoned => Poll::Ready(None),
            EntryState::Running(wakers) => {
                if !wakers.iter().any(|waker| waker.will_wake(cx.waker())) {
                    wakers.push(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

/// The right and duty to run an entry's execution: [`publish`](Claim::publish) its outcome, or,
/// if dropped first, the entry is abandoned (and leaves the cache).
pub(crate) struct Claim<T, E> {
    context: RequestContext,
    map_key: EntryKey,
    entry: Arc<Entry<T, E>>,
    published: bool,
}

impl<T, E> Claim<T, E> {
    /// Shares `outcome` with every execution waiting for it and every later one.
    pub(crate) fn publish(mut self, outcome: &CachedOutcome<T, E>) {
        self.published = true;
        self.entry.settle(EntryState::Done(outcome.clone()));
    }

    /// The entry this claim answers.
    pub(crate) fn entry(&self) -> &Arc<Entry<T, E>> {
        &self.entry
    }

    /// The request context the entry belongs to.
    pub(crate) fn context(&self) -> &RequestContext {
        &self.context
    }
}

impl<T, E> Drop for Claim<T, E> {
    fn drop(&mut self) {
        if self.published {
            return;
        }
        let entry = Arc::as_ptr(&self.entry).cast::<()>();
        self.context.cache().remove_if_same(&self.map_key, entry);
        self.entry.settle(EntryState::Abandoned);
    }
}
