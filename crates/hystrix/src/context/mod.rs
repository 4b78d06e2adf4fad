//! The request context (Hystrix's `HystrixRequestContext`): a scope for one request
//! that request-scoped features attach to — the request log, the request cache
//! ([`Execution::cache_key`](crate::Execution::cache_key)) and the request collapser's REQUEST
//! scope.
//!
//! Async code opens it around a future with [`RequestContext::scope`] (a task-local value);
//! sync code on a thread with [`RequestContext::enter`] (a `!Send` guard). An execution
//! carries the context current at its start, together with the current `tracing` span,
//! wherever its run goes (a pool thread, the pool's runtime, the executor of `queue()` and
//! `observe()`), and is logged in it when it ends (on the caller's thread or task, or where the
//! context was carried). A future polled outside any scope (e.g. moved to another task) is
//! logged in the context current where it ends, if any.
//!
//! A context ends when its last handle is dropped (every clone, including those an execution
//! carried to a pool thread, a timer or an executor task). Its request log is then complete,
//! and is handed to the listeners of [`subscribe_request_logs`] (what Hystrix's request log
//! publishes to its "requests" stream on `HystrixRequestContext.shutdown()`).

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::event::EventCounts;
use crate::key::{CollapserKey, CommandKey};

mod cache;

pub(crate) use cache::{CacheOwner, Claim, Entry, Lookup, RequestCache, Wait};
pub use cache::{CachedOutcome, SharedResponse};

/// The most entries a request log keeps (as Hystrix: later executions are not logged, with one
/// warning).
pub const REQUEST_LOG_CAPACITY: usize = 1000;

/// Contexts alive in the process: while there are none, an execution skips looking for one
/// (two thread-local reads).
static LIVE: AtomicUsize = AtomicUsize::new(0);

tokio::task_local! {
    static TASK_CONTEXT: RequestContext;
    /// The collapser whose batch command runs in this task (set by the collapsers around a
    /// batch; read only when a COLLAPSED execution is logged).
    static COLLAPSING: CollapserKey;
}

/// A context entered on a thread: the guard's id, the context, and the task scope it was
/// entered in (if any), which tells which of the two is the inner one.
struct Entered {
    id: u64,
    context: RequestContext,
    within_scope: Option<RequestContext>,
}

thread_local! {
    static THREAD_CONTEXTS: RefCell<Vec<Entered>> = const { RefCell::new(Vec::new()) };
    static NEXT_GUARD: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// One request's scope. Cheap to clone (clones are the same context).
///
/// ```
/// use hystrix::context::RequestContext;
/// use hystrix::testing::TestRegistry;
/// use hystrix::{Command, IsolationStrategy};
///
/// let test = TestRegistry::new(); // a manual clock: the times logged are exact
/// let get_user = Command::builder("GetUser")
///     .group("Users")
///     .isolation(IsolationStrategy::Semaphore)
///     .build_in(test.registry())?;
///
/// let ctx = RequestContext::new();
/// {
///     let _entered = ctx.enter(); // this thread is in the request until the guard drops
///     get_user.run(|| Ok::<_, std::io::Error>(1)).execute()?;
///     get_user.run(|| Ok::<_, std::io::Error>(2)).execute()?;
/// }
/// // Identical entries are folded: the times summed, the count after `x`.
/// assert_eq!(ctx.request_log().to_string(), "GetUser[SUCCESS][0ms]x2");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct RequestContext {
    inner: Arc<Inner>,
}

struct Inner {
    log: Mutex<Vec<RequestLogEntry>>,
    log_full_warned: AtomicBool,
    cache: RequestCache,
    /// Request variables by id (the REQUEST-scoped collapsers' batchers).
    variables: Mutex<std::collections::HashMap<u64, Arc<dyn std::any::Any + Send + Sync>>>,
}

/// A [`RequestContext`] that does not keep it alive (held by what the context itself holds).
#[derive(Clone)]
pub(crate) struct WeakContext(std::sync::Weak<Inner>);

impl WeakContext {
    /// The context, if it is still alive.
    pub(crate) fn upgrade(&self) -> Option<RequestContext> {
        self.0.upgrade().map(|inner| RequestContext { inner })
    }
}

impl Drop for Inner {
    /// The context ends: its log goes to the listeners, if any (one relaxed load otherwise).
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
        if LISTENING.load(Ordering::Relaxed) > 0 {
            publish(std::mem::take(self.log.get_mut()));
        }
    }
}

impl fmt::Debug for RequestContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestContext")
            .field("logged", &self.inner.log.lock().len())
            .finish_non_exhaustive()
    }
}

impl Default for RequestContext {
    fn default() -> Self {
        RequestContext::new()
    }
}

impl PartialEq for RequestContext {
    /// Whether both are the same context.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for RequestContext {}

impl RequestContext {
    /// A new, empty context (Hystrix's `initializeContext()`, without binding it).
    pub fn new() -> Self {
        LIVE.fetch_add(1, Ordering::Relaxed);
        RequestContext {
            inner: Arc::new(Inner {
                log: Mutex::new(Vec::new()),
                log_full_warned: AtomicBool::new(false),
                cache: RequestCache::default(),
                variables: Mutex::new(std::collections::HashMap::new()),
            }),
        }
    }

    /// Runs `future` inside this context: code it runs (and executions it starts) see it as
    /// [`current`](Self::current), on whatever thread the task is polled.
    pub async fn scope<F: Future>(&self, future: F) -> F::Output {
        TASK_CONTEXT.scope(self.clone(), future).await
    }

    /// Enters this context on this thread until the guard drops (for sync code; Hystrix's
    /// `setContextOnCurrentThread`). Guards nest, the innermost wins, and a guard dropped out
    /// of order leaves only its own entry. Between a task's [`scope`](Self::scope) and a guard,
    /// the inner one wins: a guard entered inside a scope, or a scope opened under a guard.
    ///
    /// Do not hold the guard across an `.await`: other tasks polled on this thread meanwhile
    /// would see the context (as with `tracing`'s `Span::enter`); use [`scope`](Self::scope)
    /// in async code. Tasks spawned from a scope do not inherit it: wrap them in `scope` too.
    pub fn enter(&self) -> ContextGuard {
        let id = NEXT_GUARD.with(|next| {
            let id = next.get();
            next.set(id + 1);
            id
        });
        let within_scope = TASK_CONTEXT.try_with(RequestContext::clone).ok();
        THREAD_CONTEXTS.with(|stack| {
            stack.borrow_mut().push(Entered {
                id,
                context: self.clone(),
                within_scope,
            });
        });
        ContextGuard {
            id,
            _not_send: PhantomData,
        }
    }

    /// The context current here: the innermost of the running task's enclosing
    /// [`scope`](Self::scope) and this thread's [`enter`](Self::enter) guards; `None` outside
    /// both.
    pub fn current() -> Option<RequestContext> {
        let scoped = TASK_CONTEXT.try_with(RequestContext::clone).ok();
        THREAD_CONTEXTS.with(|stack| {
            let stack = stack.borrow();
            match (scoped, stack.last()) {
                (None, entered) => entered.map(|entered| entered.context.clone()),
                (Some(scoped), Some(entered)) if entered.within_scope.as_ref() == Some(&scoped) => {
                    Some(entered.context.clone())
                }
                (Some(scoped), _) => Some(scoped),
            }
        })
    }

    /// Whether any context exists in the process (one relaxed load).
    #[inline]
    pub(crate) fn any_alive() -> bool {
        LIVE.load(Ordering::Relaxed) > 0
    }

    /// [`current`](Self::current), skipped while no context exists at all (the hot path).
    #[inline]
    pub(crate) fn current_if_any() -> Option<RequestContext> {
        if LIVE.load(Ordering::Relaxed) == 0 {
            return None;
        }
        Self::current_slow()
    }

    #[cold]
    #[inline(never)]
    fn current_slow() -> Option<RequestContext> {
        Self::current()
    }

    /// The executions of this request so far, in the order they finished.
    pub fn request_log(&self) -> RequestLog {
        RequestLog {
            entries: self.inner.log.lock().clone(),
        }
    }

    /// Removes the request cache's entry of `cache_key` for `command_key` in this context
    /// (Hystrix's `HystrixRequestCache.clear`); returns whether there was one. An execution
    /// still running for it goes on and answers those already waiting for it; the next
    /// execution with this cache key runs anew. See also
    /// [`Command::clear_cache`](crate::Command::clear_cache), which uses the current context.
    pub fn clear_cache(&self, command_key: &CommandKey, cache_key: &str) -> bool {
        self.inner
            .cache
            .clear(CacheOwner::Command(command_key.clone()), cache_key)
    }

    /// The request variable `id` of this context (Hystrix's `HystrixRequestVariable`), made by
    /// `init` on first use. `None` if the variable `id` holds another type.
    pub(crate) fn variable<T: Send + Sync + 'static>(
        &self,
        id: u64,
        init: impl FnOnce() -> T,
    ) -> Option<Arc<T>> {
        let mut variables = self.inner.variables.lock();
        let value = variables
            .entry(id)
            .or_insert_with(|| Arc::new(init()) as Arc<dyn std::any::Any + Send + Sync>);
        Arc::clone(value).downcast::<T>().ok()
    }

    /// A handle that does not keep this context alive.
    pub(crate) fn downgrade(&self) -> WeakContext {
        WeakContext(Arc::downgrade(&self.inner))
    }

    /// This context's request cache.
    pub(crate) fn cache(&self) -> &RequestCache {
        &self.inner.cache
    }

    /// Logs a finished execution (at most [`REQUEST_LOG_CAPACITY`]).
    pub(crate) fn log(&self, entry: RequestLogEntry) {
        let mut log = self.inner.log.lock();
        if log.len() < REQUEST_LOG_CAPACITY {
            log.push(entry);
            return;
        }
        drop(log);
        if !self.inner.log_full_warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                command = %entry.command_key,
                "hystrix: the request log is full ({REQUEST_LOG_CAPACITY} executions); later \
                 executions of this request are not logged"
            );
        }
    }
}

/// This thread's place in a [`RequestContext`], from [`RequestContext::enter`] until dropped.
/// Not `Send`: it belongs to the thread that entered.
#[must_use = "the context is left when the guard drops"]
pub struct ContextGuard {
    id: u64,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for ContextGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ContextGuard")
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        THREAD_CONTEXTS.with(|stack| {
            let mut stack = stack.borrow_mut();
            if let Some(at) = stack.iter().rposition(|entered| entered.id == self.id) {
                stack.remove(at);
            }
        });
    }
}

/// What an execution carries to where its run goes: its request context and `tracing` span.
#[derive(Clone, Default)]
pub(crate) struct Carried {
    context: Option<RequestContext>,
    span: Option<tracing::Span>,
}

impl Carried {
    /// The context and span current on this thread (or task) now.
    pub(crate) fn capture(context: Option<&RequestContext>) -> Self {
        let span = tracing::Span::current();
        Carried {
            context: context.cloned(),
            span: (!span.is_none()).then_some(span),
        }
    }

    /// Runs `f` with both re-entered on this thread.
    pub(crate) fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        let _context = self.context.as_ref().map(RequestContext::enter);
        let _span = self.span.as_ref().map(tracing::Span::enter);
        f()
    }

    /// `future` with both re-entered at each of its polls.
    pub(crate) async fn scope<F: Future>(self, future: F) -> F::Output {
        use tracing::Instrument;
        let future = future.instrument(self.span.unwrap_or_else(tracing::Span::none));
        match self.context {
            Some(context) => context.scope(future).await,
            None => future.await,
        }
    }
}

/// Runs `future` (a collapser's batch execution) with `key` as the collapser its COLLAPSED
/// executions are logged with.
pub(crate) async fn collapsing<F: Future>(key: CollapserKey, future: F) -> F::Output {
    COLLAPSING.scope(key, future).await
}

/// The collapser whose batch runs in this task, if any.
fn collapsing_key() -> Option<CollapserKey> {
    COLLAPSING.try_with(CollapserKey::clone).ok()
}

/// One execution in a [`RequestLog`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestLogEntry {
    /// The command key.
    pub command_key: CommandKey,
    /// The execution's events (Hystrix's `getExecutionEvents()`). A cache hit has the events
    /// of the execution it shares plus RESPONSE_FROM_CACHE; a collapser's batch has COLLAPSED
    /// counted once per request it batched (the batch size).
    pub events: EventCounts,
    /// Its execution time in ms (from its start to the run's end; 0 when the run never
    /// started, and for a cache hit), as Hystrix's `getExecutionTimeInMilliseconds()`.
    pub execution_time_ms: u64,
    /// The collapser whose batch this execution ran (Hystrix's
    /// `getOriginatingCollapserKey()`); `Some` exactly when `events` has COLLAPSED.
    pub collapser_key: Option<CollapserKey>,
}

impl RequestLogEntry {
    /// An entry for a finished execution; the collapser is the one whose batch runs in this
    /// task when `events` has COLLAPSED.
    pub(crate) fn new(
        command_key: CommandKey,
        events: EventCounts,
        execution_time_ms: u64,
    ) -> Self {
        let collapser_key = if events.contains(crate::event::EventType::Collapsed) {
            collapsing_key()
        } else {
            None
        };
        RequestLogEntry {
            command_key,
            events,
            execution_time_ms,
            collapser_key,
        }
    }

    /// Whether this entry is a cache hit (its events have RESPONSE_FROM_CACHE): it shared the
    /// outcome of another execution of the same command and cache key in this request (one
    /// that ran earlier, or was still running).
    pub fn is_cache_hit(&self) -> bool {
        self.events
            .contains(crate::event::EventType::ResponseFromCache)
    }
}

/// The executions of one request ([`RequestContext::request_log`]), in the order they
/// finished (an execution still running is not listed yet; Hystrix lists executions as they
/// start, `[Executed]` until done). Its `Display` is Hystrix's `getExecutedCommandsAsString()`:
/// identical entries (same command, same events) folded into one with their execution times
/// summed and the count after `x`, in the order each first appeared; events in Hystrix's
/// order, `EMITxK` (and `FALLBACK_EMITxK`, `COLLAPSEDxK`) for counted events; e.g.
/// `GetUser[SUCCESS][12ms], GetRatings[TIMEOUT, FALLBACK_SUCCESS][2002ms]x2`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestLog {
    entries: Vec<RequestLogEntry>,
}

impl RequestLog {
    /// The entries, in the order the executions finished.
    pub fn entries(&self) -> &[RequestLogEntry] {
        &self.entries
    }
}

impl fmt::Display for RequestLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // (command, events) -> (summed ms, count), in first-seen order.
        let mut folded: Vec<(&RequestLogEntry, u64, usize)> = Vec::new();
        for entry in &self.entries {
            match folded.iter_mut().find(|(first, _, _)| {
                first.command_key == entry.command_key && first.events == entry.events
            }) {
                Some((_, ms, count)) => {
                    *ms += entry.execution_time_ms;
                    *count += 1;
                }
                None => folded.push((entry, entry.execution_time_ms, 1)),
            }
        }
        for (i, (entry, ms, count)) in folded.into_iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            // EMIT, FALLBACK_EMIT and COLLAPSED are counted (`EMITx3`).
            write!(f, "{}[{}][{ms}ms]", entry.command_key, entry.events)?;
            if count > 1 {
                write!(f, "x{count}")?;
            }
        }
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------------
// Listeners of finished request logs

/// A listener of finished request logs.
type Listener = Arc<dyn Fn(Arc<RequestLog>) + Send + Sync>;

/// Listeners subscribed now: while there are none, a context's end costs one relaxed load.
static LISTENING: AtomicUsize = AtomicUsize::new(0);
static LISTENERS: std::sync::Mutex<Vec<(u64, Listener)>> = std::sync::Mutex::new(Vec::new());
static NEXT_LISTENER: AtomicU64 = AtomicU64::new(0);
static LISTENER_PANICKED: AtomicBool = AtomicBool::new(false);

/// Calls `listener` with the request log of every [`RequestContext`] that ends from now on,
/// until the returned subscription is dropped. Process-wide, as request contexts are not tied
/// to a registry: every context of the process is heard, whichever registries its commands
/// belong to.
///
/// A context ends when its last handle is dropped (every clone of it, including those carried
/// to pool threads, timers and executor tasks by executions still running — e.g. a blocking
/// run that outlived its timeout keeps its request open until it returns). Its log is then
/// complete; Hystrix publishes it at the same point, `HystrixRequestContext.shutdown()`, to its
/// "requests" stream. A context that logged no execution is not published (as
/// Hystrix, whose request log exists only once a command used it).
///
/// `listener` runs synchronously on the thread that dropped the last handle, once per context
/// and listener; keep it short and non-blocking (e.g. hand the log to a channel). A panic in it
/// is caught and logged once; it never reaches the code that dropped the context. With no
/// listener subscribed, a context's end costs one relaxed atomic load; executions never pay
/// anything for listeners.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use hystrix::context::{RequestContext, subscribe_request_logs};
/// use hystrix::testing::TestRegistry;
/// use hystrix::{Command, IsolationStrategy};
///
/// let test = TestRegistry::new(); // a manual clock: the times logged are exact
/// let get_user = Command::builder("GetUser")
///     .group("Users")
///     .isolation(IsolationStrategy::Semaphore)
///     .build_in(test.registry())?;
/// let heard = Arc::new(Mutex::new(Vec::new()));
/// let sink = Arc::clone(&heard);
/// let subscription = subscribe_request_logs(move |log| {
///     sink.lock().unwrap().push(log.to_string());
/// });
///
/// let ctx = RequestContext::new();
/// {
///     let _entered = ctx.enter();
///     get_user.run(|| Ok::<_, std::io::Error>(1)).execute()?;
/// }
/// drop(ctx); // the last handle: the request is over
/// drop(subscription);
/// let heard = heard.lock().unwrap();
/// assert!(heard.contains(&"GetUser[SUCCESS][0ms]".to_string()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn subscribe_request_logs<F>(listener: F) -> RequestLogSubscription
where
    F: Fn(Arc<RequestLog>) + Send + Sync + 'static,
{
    let id = NEXT_LISTENER.fetch_add(1, Ordering::Relaxed);
    let mut listeners = LISTENERS.lock().unwrap_or_else(|p| p.into_inner());
    listeners.push((id, Arc::new(listener)));
    LISTENING.store(listeners.len(), Ordering::Relaxed);
    RequestLogSubscription { id }
}

/// A listener's subscription to finished request logs, from [`subscribe_request_logs`]; the
/// listener is removed when this is dropped (it may still be running on another thread for a
/// context that ended just before).
#[must_use = "the listener is removed when the subscription is dropped"]
pub struct RequestLogSubscription {
    id: u64,
}

impl fmt::Debug for RequestLogSubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestLogSubscription")
            .field("id", &self.id)
            .finish()
    }
}

impl Drop for RequestLogSubscription {
    fn drop(&mut self) {
        let mut listeners = LISTENERS.lock().unwrap_or_else(|p| p.into_inner());
        listeners.retain(|(id, _)| *id != self.id);
        LISTENING.store(listeners.len(), Ordering::Relaxed);
    }
}

/// Hands a finished context's log to every listener (outside the lock, so a listener may end
/// a context or subscribe itself).
#[cold]
#[inline(never)]
fn publish(entries: Vec<RequestLogEntry>) {
    if entries.is_empty() {
        return;
    }
    let listeners: Vec<Listener> = LISTENERS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(_, listener)| Arc::clone(listener))
        .collect();
    let log = Arc::new(RequestLog { entries });
    for listener in listeners {
        let log = Arc::clone(&log);
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| listener(log)))
            && !LISTENER_PANICKED.swap(true, Ordering::Relaxed)
        {
            tracing::error!(
                "hystrix: a request log listener panicked ({}); its panics are ignored and \
                 logged only once",
                crate::command::panic_message(panic)
            );
        }
    }
}

#[cfg(all(test, not(hystrix_loom)))]
mod tests {
    use super::*;
    use crate::event::EventType;

    fn entry(key: &str, events: &[(EventType, u32)], ms: u64) -> RequestLogEntry {
        let mut counts = EventCounts::new();
        for &(event, n) in events {
            counts.add_n(event, n);
        }
        RequestLogEntry {
            command_key: CommandKey::new(key).expect("a valid key"),
            events: counts,
            execution_time_ms: ms,
            collapser_key: None,
        }
    }

    #[test]
    fn the_string_folds_in_first_seen_order_with_counts_of_counted_events() {
        let log = RequestLog {
            entries: vec![
                entry(
                    "Stream",
                    &[(EventType::Emit, 3), (EventType::Success, 1)],
                    5,
                ),
                entry("Get", &[(EventType::Success, 1)], 12),
                entry(
                    "Stream",
                    &[(EventType::Emit, 3), (EventType::Success, 1)],
                    7,
                ),
                entry(
                    "Get",
                    &[(EventType::Success, 1), (EventType::ResponseFromCache, 1)],
                    0,
                ),
                entry("Get", &[(EventType::Emit, 1), (EventType::Success, 1)], 1),
                entry(
                    "Fb",
                    &[(EventType::Failure, 1), (EventType::FallbackEmit, 2)],
                    3,
                ),
            ],
        };
        assert_eq!(
            log.to_string(),
            "Stream[EMITx3, SUCCESS][12ms]x2, Get[SUCCESS][12ms], \
             Get[SUCCESS, RESPONSE_FROM_CACHE][0ms], Get[EMIT, SUCCESS][1ms], \
             Fb[FAILURE, FALLBACK_EMITx2][3ms]"
        );
    }

    #[test]
    fn hedged_executions_show_their_hedges_with_counts_and_fold_only_with_equal_counts() {
        let twice = [
            (EventType::Success, 1),
            (EventType::Hedge, 2),
            (EventType::HedgeCancelled, 2),
        ];
        let once = [
            (EventType::Success, 1),
            (EventType::Hedge, 1),
            (EventType::HedgeCancelled, 1),
        ];
        let log = RequestLog {
            entries: vec![
                entry("Hedged", &twice, 40),
                entry("Hedged", &once, 30),
                entry("Hedged", &twice, 42),
            ],
        };
        assert_eq!(
            log.to_string(),
            "Hedged[SUCCESS, HEDGEx2, HEDGE_CANCELLEDx2][82ms]x2, \
             Hedged[SUCCESS, HEDGE, HEDGE_CANCELLED][30ms]"
        );
    }
}
